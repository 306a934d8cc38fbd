//! What the sweep reads and writes: the due index (overdue and parked records), the
//! fan-out's markers of first tries, the task markers of subscriptions whose held records
//! it settles, and its conditional writes that hand a record on.

use serde::{Deserialize, Serialize};

use super::super::conditional::applied;
use super::super::expression::{Condition, Expression, KeyQuery, Updates};
use super::super::{s, time, Item, StoreError};
use super::attributes::{BY_DUE, DELIVERY_ID, DUE_SHARD, GENERATION, LEASE_UNTIL, LOG_PARTITION, NEXT_ATTEMPT_AT};
use super::claim::lease_free;
use super::record::{stored_of, BatchRead, StoredDelivery};
use super::{expires_at, has_status, with_status_key, DeliveryTable, RecordKey, DUE_SHARDS};
use crate::clock::{self, Timestamp};
use crate::delivery::log::DeliveryStatus;
use crate::delivery::plan::SubscriptionTask;
use crate::ids::{DeliveryId, SubscriptionId, UserId};

/// The due index's partitions of parked records, `parked#<shard>`, one of [`DUE_SHARDS`]: a
/// record whose next attempt waits longer than a message's delay waits there, its message
/// deleted, until the sweep queues it ahead of its time (contract section 22).
const PARKED_PARTITION: &str = "parked";

/// The partitions of the fan-out's markers, `fanout#<shard>`, one of [`DUE_SHARDS`]: apart
/// from every subscription's log (`whk_…#k`), so no list reads them.
const MARKER_PARTITION: &str = "fanout";

/// The partitions of the held deliveries' markers, `held#<shard>`, one of [`DUE_SHARDS`] (from
/// the subscription's id), apart from every log: each names a subscription whose `held`
/// records the sweep settles from the marker's time on (contract section 20), those an enable
/// or a delete left past its share, or held by a turn that read the subscription just before.
const TASK_PARTITION: &str = "task";

/// How many records one marker lists at most: a send batch, and a marker under 1 KB (one
/// write unit).
pub const MARKER_RECORDS: usize = 10;

/// Where the sweep finds the records a fan-out created `pending` (contract section 12): one
/// item listing them, written before them, in a partition of its own sorted by when they
/// were created, instead of one due index entry per record. What the sweep reads and writes
/// for it follows the markers, not the log's size.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MarkerItem {
    log_partition: String,
    /// `<created at>#<its first delivery id>`: a shard's markers made before a time are a
    /// range of keys.
    delivery_id: String,
    /// `whk_…/dlv_…`, each record's key.
    records: Vec<String>,
    /// A marker the sweep never read (none runs) goes with its records.
    #[serde(with = "clock::unix_seconds")]
    expires_at: Timestamp,
}

fn marker_partition(shard: DueShard) -> String {
    format!("{MARKER_PARTITION}#{shard}")
}

/// A subscription whose held records the sweep settles, as the table holds it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskMarkerItem {
    log_partition: String,
    /// `<due>#<subscription id>`: a shard's markers due before a time are a range of keys.
    delivery_id: String,
    user_id: UserId,
    subscription_id: SubscriptionId,
    fate: SubscriptionTask,
    /// A marker the sweep never read (none runs) goes with the records it names.
    #[serde(with = "clock::unix_seconds")]
    expires_at: Timestamp,
}

fn task_partition(shard: DueShard) -> String {
    format!("{TASK_PARTITION}#{shard}")
}

/// A held marker the sweep found due: its key, the subscription it names and what becomes of
/// that subscription's held records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskMarker {
    partition: String,
    sort: String,
    pub user_id: UserId,
    pub subscription_id: SubscriptionId,
    pub fate: SubscriptionTask,
}

/// A fan-out's marker the sweep found due: its key, when it was made and the records it lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marker {
    partition: String,
    sort: String,
    pub made_at: Timestamp,
    pub records: Vec<RecordKey>,
}

/// One page of a due shard as the sweep reads it: its items, oldest first, and where the
/// next page starts when more may follow.
pub struct ShardPage<T> {
    pub items: Vec<T>,
    pub next: Option<PageStart>,
}

/// Where a shard's next page starts: the last key a page read (DynamoDB's `LastEvaluatedKey`).
#[derive(Clone, Debug)]
pub struct PageStart(Item);

/// A pending record the sweep found overdue: its key and when it was due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overdue {
    pub key: RecordKey,
    pub next_attempt_at: Timestamp,
}

impl Overdue {
    /// A due index entry: a record's keys and its due time.
    fn of_item(item: &Item) -> Result<Self, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Due {
            next_attempt_at: Timestamp,
        }
        let due: Due = serde_dynamo::from_item(item.clone())?;
        Ok(Overdue { key: RecordKey::from_item(item)?, next_attempt_at: due.next_attempt_at })
    }
}

/// One of the [`DUE_SHARDS`] partitions of the due index and of the fan-out's markers: a
/// record's and a marker's (its first record's) come from the delivery id's random part, so
/// every shard takes an even share of the writes and of the sweep's reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(try_from = "u8")]
pub struct DueShard(u8);

impl DueShard {
    /// Every shard, in order.
    pub fn all() -> impl Iterator<Item = DueShard> {
        (0..DUE_SHARDS).map(DueShard)
    }

    /// The shard of a delivery.
    pub fn of(delivery_id: &DeliveryId) -> Self {
        DueShard(delivery_id.low_random_bits() % DUE_SHARDS)
    }

    /// The shard of a subscription's held marker.
    fn of_subscription(subscription_id: &SubscriptionId) -> Self {
        DueShard(subscription_id.low_random_bits() % DUE_SHARDS)
    }
}

impl TryFrom<u8> for DueShard {
    type Error = String;

    fn try_from(number: u8) -> Result<Self, String> {
        if number < DUE_SHARDS {
            Ok(DueShard(number))
        } else {
            Err(format!("{number} is no due shard: there are {DUE_SHARDS}, from 0"))
        }
    }
}

impl std::fmt::Display for DueShard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The due index partition of a delivery, as the record keeps it.
pub(super) fn due_shard(delivery_id: &DeliveryId) -> String {
    DueShard::of(delivery_id).to_string()
}

/// The due index partition of a parked record ([`PARKED_PARTITION`]).
pub(super) fn parked_shard(delivery_id: &DeliveryId) -> String {
    format!("{PARKED_PARTITION}#{}", due_shard(delivery_id))
}

impl DeliveryTable {
    /// Writes the marker of `keys`, records about to be created `pending` at `at`.
    pub(super) async fn put_marker(&self, keys: &[RecordKey], at: Timestamp) -> Result<(), StoreError> {
        let Some(first) = keys.first() else { return Ok(()) };
        let marker = MarkerItem {
            log_partition: marker_partition(DueShard::of(&first.delivery_id)),
            delivery_id: format!("{at}#{}", first.delivery_id),
            records: keys.iter().map(|key| format!("{}/{}", key.subscription_id, key.delivery_id)).collect(),
            expires_at: expires_at(at),
        };
        self.client.put_item().table_name(&self.table).set_item(Some(serde_dynamo::to_item(marker)?)).send().await?;
        Ok(())
    }

    /// One page of the fan-out's markers of `shard` made before `cutoff`, at most `limit`,
    /// oldest first, from `start` (the first page without).
    pub async fn markers_due(
        &self,
        shard: DueShard,
        cutoff: Timestamp,
        limit: u32,
        start: Option<PageStart>,
    ) -> Result<ShardPage<Marker>, StoreError> {
        let (items, next) = self.markers_before(marker_partition(shard), cutoff, limit, start).await?;
        let mut markers = Vec::new();
        for item in items {
            let marker: MarkerItem = serde_dynamo::from_item(item)?;
            let made_at = marker.delivery_id.split_once('#').and_then(|(at, _)| Timestamp::parse(at));
            let made_at = made_at.ok_or_else(|| {
                StoreError::Mapping(serde::de::Error::custom(format!("not a marker's key: {}", marker.delivery_id)))
            })?;
            let records = marker.records.iter().filter_map(|key| RecordKey::parse(key)).collect();
            markers.push(Marker { partition: marker.log_partition, sort: marker.delivery_id, made_at, records });
        }
        Ok(ShardPage { items: markers, next })
    }

    /// One page of the markers of `partition` (a fan-out's or a task's) keyed before `cutoff`.
    async fn markers_before(
        &self,
        partition: String,
        cutoff: Timestamp,
        limit: u32,
        start: Option<PageStart>,
    ) -> Result<(Vec<Item>, Option<PageStart>), StoreError> {
        let key = KeyQuery::partition(LOG_PARTITION, s(partition)).sort_below(DELIVERY_ID, time(cutoff));
        self.page(None, key, limit, start).await
    }

    /// One page of the items (of the table, or of `index`) that `key` keeps, at most `limit`,
    /// from `start`; and where the next page starts, when more may follow.
    async fn page(
        &self,
        index: Option<&str>,
        key: KeyQuery,
        limit: u32,
        start: Option<PageStart>,
    ) -> Result<(Vec<Item>, Option<PageStart>), StoreError> {
        let output = self
            .query(index, key)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start.map(|start| start.0))
            .send()
            .await?;
        let next = output.last_evaluated_key.filter(|key| !key.is_empty()).map(PageStart);
        Ok((output.items.unwrap_or_default(), next))
    }

    /// Puts in the due index each record of `marker` that is still `pending` and in none
    /// (its first try has not settled: its message is lost, waits in a backlog, or is being
    /// attempted), so that the sweep finds it as it finds any overdue record, in this run
    /// and the next; then removes the marker. The records it indexed. The records are read
    /// eventually consistently: the write holds only while the record is still so.
    pub async fn index_marked(&self, marker: &Marker) -> Result<Vec<Overdue>, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Found {
            delivery_id: DeliveryId,
            status: DeliveryStatus,
            next_attempt_at: Option<Timestamp>,
            due_shard: Option<String>,
        }
        let mut indexed = Vec::new();
        for item in self.batch_items(&marker.records, BatchRead::Due).await? {
            let found: Found = serde_dynamo::from_item(item)?;
            let (DeliveryStatus::Pending, Some(next_attempt_at), None) =
                (found.status, found.next_attempt_at, &found.due_shard)
            else {
                continue;
            };
            let Some(key) = marker.records.iter().find(|key| key.delivery_id == found.delivery_id) else { continue };
            let unindexed = has_status(DeliveryStatus::Pending).and(Condition::absent(DUE_SHARD));
            let in_due_index = Expression::new().set(DUE_SHARD, s(due_shard(&key.delivery_id)));
            let expression =
                with_status_key(in_due_index, &key.subscription_id, DeliveryStatus::Pending).when(unindexed);
            if applied(self.record_update(key).expression(expression).send().await)? {
                indexed.push(Overdue { key: key.clone(), next_attempt_at });
            }
        }
        self.remove_marker(&marker.partition, &marker.sort).await?;
        Ok(indexed)
    }

    /// Removes the marker of that key (a fan-out's, or a held one).
    async fn remove_marker(&self, partition: &str, sort: &str) -> Result<(), StoreError> {
        let key = Item::from([(LOG_PARTITION.to_owned(), s(partition)), (DELIVERY_ID.to_owned(), s(sort))]);
        self.client.delete_item().table_name(&self.table).set_key(Some(key)).send().await?;
        Ok(())
    }

    /// Marks the subscription for the sweep to do `fate` from `due` on (contract section 20):
    /// release or end what it held, or probe it.
    pub async fn mark_task(
        &self,
        (user_id, subscription_id): (&UserId, &SubscriptionId),
        fate: SubscriptionTask,
        due: Timestamp,
    ) -> Result<(), StoreError> {
        let marker = TaskMarkerItem {
            log_partition: task_partition(DueShard::of_subscription(subscription_id)),
            delivery_id: format!("{due}#{subscription_id}"),
            user_id: user_id.clone(),
            subscription_id: subscription_id.clone(),
            fate,
            expires_at: expires_at(due),
        };
        self.client.put_item().table_name(&self.table).set_item(Some(serde_dynamo::to_item(marker)?)).send().await?;
        Ok(())
    }

    /// One page of the task markers of `shard` due before `cutoff`, at most `limit`, oldest
    /// first, from `start` (the first page without).
    pub async fn task_markers_due(
        &self,
        shard: DueShard,
        cutoff: Timestamp,
        limit: u32,
        start: Option<PageStart>,
    ) -> Result<ShardPage<TaskMarker>, StoreError> {
        let (items, next) = self.markers_before(task_partition(shard), cutoff, limit, start).await?;
        let markers: Vec<TaskMarkerItem> = serde_dynamo::from_items(items)?;
        let items = markers
            .into_iter()
            .map(|marker| TaskMarker {
                partition: marker.log_partition,
                sort: marker.delivery_id,
                user_id: marker.user_id,
                subscription_id: marker.subscription_id,
                fate: marker.fate,
            })
            .collect();
        Ok(ShardPage { items, next })
    }

    /// Removes a held marker whose subscription has no held record left to settle.
    pub async fn remove_task_marker(&self, marker: &TaskMarker) -> Result<(), StoreError> {
        self.remove_marker(&marker.partition, &marker.sort).await
    }

    /// One page of the `pending` records of `shard` due before `cutoff`, at most `limit`,
    /// longest due first, from `start` (the first page without), through the sparse due
    /// index: what it reads is what is overdue, however large the log.
    pub async fn overdue(
        &self,
        shard: DueShard,
        cutoff: Timestamp,
        limit: u32,
        start: Option<PageStart>,
    ) -> Result<ShardPage<Overdue>, StoreError> {
        self.due_page(shard.to_string(), cutoff, limit, start).await
    }

    /// One page of the parked records of `shard` due before `before` (those whose next attempt
    /// waits in the table, for the sweep to queue ahead of their time), as [`Self::overdue`].
    pub async fn parked(
        &self,
        shard: DueShard,
        before: Timestamp,
        limit: u32,
        start: Option<PageStart>,
    ) -> Result<ShardPage<Overdue>, StoreError> {
        self.due_page(format!("{PARKED_PARTITION}#{shard}"), before, limit, start).await
    }

    /// One page of the due index's `partition` below `before`.
    async fn due_page(
        &self,
        partition: String,
        before: Timestamp,
        limit: u32,
        start: Option<PageStart>,
    ) -> Result<ShardPage<Overdue>, StoreError> {
        let key = KeyQuery::partition(DUE_SHARD, s(partition)).sort_below(NEXT_ATTEMPT_AT, time(before));
        let (items, next) = self.page(Some(BY_DUE), key, limit, start).await?;
        Ok(ShardPage { items: items.iter().map(Overdue::of_item).collect::<Result<_, _>>()?, next })
    }

    /// Hands an overdue record to the sweep, in one conditional write that holds only while
    /// it is still `pending`, due before `cutoff` and under no turn's claim at `now` (the
    /// index is read eventually consistently, and an attempt or a retry may have moved the
    /// record since; an attempt in progress holds its claim): the next generation, due `now`,
    /// its round kept. `None` when it was not overdue any more.
    pub async fn claim_overdue(
        &self,
        overdue: &Overdue,
        cutoff: Timestamp,
        now: Timestamp,
    ) -> Result<Option<StoredDelivery>, StoreError> {
        let still_overdue = has_status(DeliveryStatus::Pending)
            .and(Condition::below(NEXT_ATTEMPT_AT, time(cutoff)))
            .and(lease_free(now));
        let expression = Expression::new()
            .set(NEXT_ATTEMPT_AT, time(now))
            .add(GENERATION, 1)
            .remove(LEASE_UNTIL)
            .when(still_overdue);
        self.update_returning(&overdue.key, expression).await?.map(stored_of).transpose()
    }

    /// Takes a parked record out of the table's wait, in one conditional write that holds
    /// only while it is still parked and `pending`: the next generation (so a copy of the
    /// message that turned up after all is stale), back in the due index's overdue partitions
    /// (should its new message be lost, the sweep finds it as any overdue record). The record
    /// as it now is; `None` when it was not parked any more.
    pub async fn unpark(&self, parked: &Overdue) -> Result<Option<StoredDelivery>, StoreError> {
        let id = &parked.key.delivery_id;
        let still_parked = Condition::equals(DUE_SHARD, s(parked_shard(id))).and(has_status(DeliveryStatus::Pending));
        let expression = Expression::new().set(DUE_SHARD, s(due_shard(id))).add(GENERATION, 1).when(still_parked);
        self.update_returning(&parked.key, expression).await?.map(stored_of).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::super::attributes::tests::unnamed;
    use super::super::tests::size;
    use super::*;

    #[test]
    fn a_full_marker_is_one_write_unit_and_lists_keys_that_read_back() {
        let keys: Vec<RecordKey> = (0..MARKER_RECORDS)
            .map(|_| RecordKey { subscription_id: SubscriptionId::generate(), delivery_id: DeliveryId::generate() })
            .collect();
        let at = Timestamp::from_unix_seconds(1_795_766_400);
        let marker = MarkerItem {
            log_partition: marker_partition(DueShard::of(&keys[0].delivery_id)),
            delivery_id: format!("{at}#{}", keys[0].delivery_id),
            records: keys.iter().map(|key| format!("{}/{}", key.subscription_id, key.delivery_id)).collect(),
            expires_at: expires_at(at),
        };
        let item: Item = serde_dynamo::to_item(&marker).unwrap();
        assert!(size(&item) <= 1024, "{} bytes", size(&item));
        let read: Vec<RecordKey> = marker.records.iter().filter_map(|key| RecordKey::parse(key)).collect();
        assert_eq!(read, keys);
        assert!(marker.log_partition.starts_with("fanout#"), "apart from every log partition");
        assert!(RecordKey::from_item(&item).is_err(), "no marker reads as a record's key");
    }

    #[test]
    fn delivery_ids_spread_evenly_over_every_due_shard() {
        const IDS: usize = 16_000;
        let even = IDS / usize::from(DUE_SHARDS);
        let at = Timestamp::from_unix_seconds(1_795_766_400);
        // Fresh ids (many counted up within one millisecond) and derived ones (hashed).
        let fresh = (0..IDS).map(|_| DeliveryId::generate());
        let derived = (0..IDS).map(|i| DeliveryId::derived(at, &["evt_x", &i.to_string()]));
        for (kind, ids) in [("fresh", fresh.collect::<Vec<_>>()), ("derived", derived.collect())] {
            let mut counts = [0usize; DUE_SHARDS as usize];
            for id in &ids {
                counts[usize::from(DueShard::of(id).0)] += 1;
            }
            // Six standard deviations of a binomial count around the even share.
            assert!(counts.iter().all(|&count| count.abs_diff(even) < even / 5), "{kind}: {counts:?}");
        }
    }

    #[test]
    fn a_due_shard_is_one_of_the_shards_the_sweep_reads() {
        assert_eq!(DueShard::all().count(), usize::from(DUE_SHARDS));
        assert_eq!(DueShard::try_from(DUE_SHARDS - 1).map(|shard| shard.to_string()), Ok((DUE_SHARDS - 1).to_string()));
        assert!(DueShard::try_from(DUE_SHARDS).is_err());
        assert!(serde_json::from_str::<DueShard>("16").is_err());
    }

    #[test]
    fn every_attribute_of_a_marker_is_named_in_attributes() {
        let at = Timestamp::from_unix_seconds(1_795_766_400);
        let subscription_id = SubscriptionId::generate();
        let marker = MarkerItem {
            log_partition: marker_partition(DueShard::of_subscription(&subscription_id)),
            delivery_id: format!("{at}#dlv_1"),
            records: vec![format!("{subscription_id}/dlv_1")],
            expires_at: at,
        };
        let task = TaskMarkerItem {
            log_partition: task_partition(DueShard::of_subscription(&subscription_id)),
            delivery_id: format!("{at}#{subscription_id}"),
            user_id: "u1".parse().unwrap(),
            subscription_id,
            fate: SubscriptionTask::Release,
            expires_at: at,
        };
        assert_eq!(unnamed(&serde_dynamo::to_item(&marker).unwrap()), Vec::<&str>::new());
        assert_eq!(unnamed(&serde_dynamo::to_item(&task).unwrap()), Vec::<&str>::new());
    }
}
