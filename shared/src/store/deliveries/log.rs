//! A subscription's log as its lists read it, newest first: through the status index for a
//! status it holds whole, else from the log's shards, merged.

use super::super::expression::KeyQuery;
use super::super::{one_page, s, Item, StoreError};
use super::attributes::{BY_STATUS, DELIVERY_ID, LOG_PARTITION, STATUS_KEY};
use super::record::stored_of;
use super::{has_status, log_partition, status_key, DeliveryTable, RecordKey, FILTERED_CHUNK, LOG_SHARDS};
use crate::delivery::log::{DeliveryRecord, DeliveryStatus};
use crate::ids::{DeliveryId, SubscriptionId};

/// How many keys one list call reads at most while it looks for records of a status the
/// status index does not hold whole (`pending`, `succeeded`): a page may then come back short,
/// with a cursor to go on from.
const LIST_SCAN_BUDGET: usize = 500;

/// One page of a list and the id of its last record when more follow.
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryRecord>,
    pub last_id_if_more: Option<DeliveryId>,
}

/// Whether the status index holds every record of `status`: all but `pending`'s.
fn indexes_every(status: DeliveryStatus) -> bool {
    status != DeliveryStatus::Pending
}

/// One shard of a subscription's log as a list reads it, newest first, chunk after chunk.
struct ShardReader {
    partition: String,
    /// Where the next chunk starts; none before the first.
    start: Option<Item>,
    read_down_to: ReadDownTo,
    done: bool,
}

impl ShardReader {
    fn new(partition: String) -> Self {
        ShardReader { partition, start: None, read_down_to: ReadDownTo::Unread, done: false }
    }
}

/// How far down a shard has been read: every record of it at or above the id is known.
#[derive(Clone, PartialEq, Eq)]
enum ReadDownTo {
    Unread,
    Id(DeliveryId),
}

impl ReadDownTo {
    /// The order in which shards bound what is known: an unread shard first, then the one
    /// read least far down (the highest id).
    fn cmp_unread_first(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (ReadDownTo::Unread, ReadDownTo::Unread) => std::cmp::Ordering::Equal,
            (ReadDownTo::Unread, _) => std::cmp::Ordering::Greater,
            (_, ReadDownTo::Unread) => std::cmp::Ordering::Less,
            (ReadDownTo::Id(a), ReadDownTo::Id(b)) => a.cmp(b),
        }
    }
}

/// `key` below the delivery id `after`, when given (the page after it, newest first).
fn below_if(key: KeyQuery, after: Option<&DeliveryId>) -> KeyQuery {
    match after {
        Some(after) => key.sort_below(DELIVERY_ID, s(after)),
        None => key,
    }
}

impl DeliveryTable {
    /// Newest first, `limit` records of the subscription (of one `status`, if given) after
    /// `after` (a delivery id from the previous page), strongly consistent. The lists of a
    /// status the status index holds whole read it, so they cost what they return; the others
    /// read the subscription's log shards together, at most [`LIST_SCAN_BUDGET`] records a
    /// call when filtered.
    pub async fn list(
        &self,
        subscription_id: &SubscriptionId,
        status: Option<DeliveryStatus>,
        limit: u32,
        after: Option<&DeliveryId>,
    ) -> Result<DeliveryPage, StoreError> {
        match status.filter(|status| indexes_every(*status)).and_then(|status| status_key(subscription_id, status)) {
            Some(key) => self.list_of_status(&key, status, limit, after).await,
            None => self.list_of_log(subscription_id, status, limit, after).await,
        }
    }

    /// A page of the status index's partition `key`, then its records.
    async fn list_of_status(
        &self,
        key: &str,
        status: Option<DeliveryStatus>,
        limit: u32,
        after: Option<&DeliveryId>,
    ) -> Result<DeliveryPage, StoreError> {
        let output = self
            .query(Some(BY_STATUS), below_if(KeyQuery::partition(STATUS_KEY, s(key)), after))
            .scan_index_forward(false)
            // One extra record tells whether another page follows, so the last page says so.
            .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX))
            .send()
            .await?;
        let keys: Result<Vec<RecordKey>, _> =
            output.items.unwrap_or_default().iter().map(RecordKey::from_item).collect();
        // The index follows the table within a moment: the record says what it is now.
        let records = self.records(&keys?).await?.into_iter().map(|d| d.record);
        let records: Vec<DeliveryRecord> = records.filter(|d| Some(d.status) == status).collect();
        let (deliveries, last_id_if_more) = one_page(records, limit, |d: &DeliveryRecord| &d.id);
        Ok(DeliveryPage { deliveries, last_id_if_more })
    }

    /// A page of the subscription's log, its shards read newest first and merged: a record
    /// is on the page only once every shard has been read down to it.
    async fn list_of_log(
        &self,
        subscription_id: &SubscriptionId,
        status: Option<DeliveryStatus>,
        limit: u32,
        after: Option<&DeliveryId>,
    ) -> Result<DeliveryPage, StoreError> {
        // Unfiltered, a page takes about a share of each shard: a little more than that share
        // a read, so most pages take one read of each.
        let share = (limit + 1).div_ceil(u32::from(LOG_SHARDS)) + 2;
        let chunk = if status.is_some() { FILTERED_CHUNK.max(limit + 1) } else { share.min(limit + 1) };
        let mut shards: Vec<ShardReader> =
            (0..LOG_SHARDS).map(|shard| ShardReader::new(log_partition(subscription_id, shard))).collect();
        let (mut found, mut scanned) = (Vec::new(), 0);
        loop {
            // The shard that bounds what is known of every shard: one not read yet, or the one
            // read least far down.
            let next = shards
                .iter_mut()
                .filter(|shard| !shard.done)
                .max_by(|a, b| a.read_down_to.cmp_unread_first(&b.read_down_to));
            let Some(next) = next else {
                found.sort_by(|a: &DeliveryRecord, b| b.id.cmp(&a.id));
                let (deliveries, last_id_if_more) = one_page(found, limit, |d: &DeliveryRecord| &d.id);
                return Ok(DeliveryPage { deliveries, last_id_if_more });
            };
            scanned += self.read_shard(next, status, after, chunk, &mut found).await?;
            let boundary = shards
                .iter()
                .filter(|shard| !shard.done)
                .map(|shard| shard.read_down_to.clone())
                .max_by(|a, b| a.cmp_unread_first(b));
            // Every shard read to its end (the next round ends the list), or one not read yet.
            let Some(ReadDownTo::Id(boundary)) = boundary else { continue };
            let mut known: Vec<DeliveryRecord> = found.iter().filter(|d| d.id >= boundary).cloned().collect();
            known.sort_by(|a, b| b.id.cmp(&a.id));
            if known.len() > limit as usize {
                let (deliveries, last_id_if_more) = one_page(known, limit, |d: &DeliveryRecord| &d.id);
                return Ok(DeliveryPage { deliveries, last_id_if_more });
            }
            if scanned >= LIST_SCAN_BUDGET {
                // A short page: the next one goes on below the boundary.
                return Ok(DeliveryPage { deliveries: known, last_id_if_more: Some(boundary) });
            }
        }
    }

    /// Reads the next chunk of one shard of a log (of `status`, if given, below `after`)
    /// into `found`; how many records it read.
    async fn read_shard(
        &self,
        shard: &mut ShardReader,
        status: Option<DeliveryStatus>,
        after: Option<&DeliveryId>,
        chunk: u32,
        found: &mut Vec<DeliveryRecord>,
    ) -> Result<usize, StoreError> {
        let mut key = below_if(KeyQuery::partition(LOG_PARTITION, s(&shard.partition)), after);
        if let Some(status) = status {
            key = key.filter(has_status(status));
        }
        let output = self
            .query(None, key)
            .scan_index_forward(false)
            .consistent_read(true)
            .limit(i32::try_from(chunk).unwrap_or(i32::MAX))
            .set_exclusive_start_key(shard.start.take())
            .send()
            .await?;
        for item in output.items.unwrap_or_default() {
            found.push(stored_of(item)?.record);
        }
        match output.last_evaluated_key {
            Some(last) => {
                shard.read_down_to = ReadDownTo::Id(RecordKey::from_item(&last)?.delivery_id);
                shard.start = Some(last);
            }
            None => shard.done = true,
        }
        Ok(usize::try_from(output.scanned_count).unwrap_or_default())
    }
}
