//! The selections of a subscription's records and the writes made on them: a replay's and
//! a recovery's window, a cancel's waiting records, a release's held ones, the health's
//! counts of what the status index holds, and the restart, cancel and end that follow.

use std::time::Duration;

use aws_sdk_dynamodb::types::Select;
use futures_util::StreamExt;

use super::super::conditional::applied;
use super::super::expression::{Condition, Expression, KeyQuery, Updates};
use super::super::{n, s, time, StoreError};
use super::attributes::{
    BY_STATUS, DELIVERY_ID, DUE_SHARD, EXPIRES_AT, GENERATION, LAST_ERROR, LOG_PARTITION, NEXT_ATTEMPT_AT,
    ROUND_ATTEMPTS, STATUS, STATUS_KEY, SUCCEEDED_AT,
};
use super::record::{stored_of, StoredDelivery};
use super::sweep::due_shard;
use super::{
    expires_at, has_status, log_partition, status_key, with_status_key, DeliveryTable, RecordKey, FILTERED_CHUNK,
    LOG_SHARDS, PUTS_AT_ONCE,
};
use crate::clock::Timestamp;
use crate::delivery::log::DeliveryStatus;
use crate::delivery::plan;
use crate::events::EventKind;
use crate::ids::{self, SubscriptionId};

/// Where [`DeliveryTable::matching`] reads a window of records of one status.
#[derive(Clone, Copy)]
enum InWindow<'a> {
    /// The status index's partition (`whk_…#<status>`): keys, then their records.
    Indexed(&'a str),
    /// A shard of the subscription's log, filtered to the status: whole records.
    Logged(&'a str, DeliveryStatus),
}

impl DeliveryTable {
    /// The subscription's `held` records, oldest first, at most `limit` + 1 (the extra one says
    /// more follow), through the status index: what it reads is what is held.
    pub async fn held(&self, subscription_id: &SubscriptionId, limit: u32) -> Result<Vec<StoredDelivery>, StoreError> {
        // Every one: none was created after now (a minute's margin for the clocks).
        let every = (Timestamp::from_unix_millis(0), Timestamp::now() + Duration::from_secs(60));
        self.matching(subscription_id, &[DeliveryStatus::Held], None, every, limit).await
    }

    /// Ends a held record of a deleted subscription as [`plan::HELD_DELETED`] says (contract
    /// section 20), in one write that holds only while it is still `held`. Whether it did.
    pub async fn end_held(&self, stored: &StoredDelivery, at: Timestamp) -> Result<bool, StoreError> {
        let ended = plan::HELD_DELETED;
        let status = ended.status();
        let expression = with_status_key(Expression::new(), &stored.record.subscription_id, status);
        let expression = expression
            .set(STATUS, s(status.as_str()))
            .set(LAST_ERROR, s(ended.to_string()))
            .set(EXPIRES_AT, n(expires_at(at).unix_seconds()))
            .when(has_status(DeliveryStatus::Held));
        applied(self.record_update(&RecordKey::of_record(&stored.record)).expression(expression).send().await)
    }

    /// Starts the delivery's schedule again (a manual retry or a recovery): `pending`, due
    /// now, a new round, the next generation (added in the write, so concurrent restarts all
    /// apply and the last one's message is the one that sends). Only while the record exists
    /// and, when `if_status` is given, still has that status; else `None`. The record as it
    /// now is, with its new generation. A claim in progress is left to its holder, so no two
    /// sends of one delivery overlap: a turn in flight records its attempt under it, and it
    /// or a queued copy holding it unused gives it to the new round at once ([`Self::hand_on`]).
    pub async fn restart(
        &self,
        seen: &StoredDelivery,
        if_status: Option<DeliveryStatus>,
        at: Timestamp,
    ) -> Result<Option<StoredDelivery>, StoreError> {
        let record = &seen.record;
        let pending = DeliveryStatus::Pending;
        let mut condition = Condition::exists(DELIVERY_ID);
        if let Some(status) = if_status {
            condition = condition.and(has_status(status));
        }
        let expression = with_status_key(Expression::new(), &record.subscription_id, pending)
            .set(STATUS, s(pending.as_str()))
            .set(NEXT_ATTEMPT_AT, time(at))
            .set(EXPIRES_AT, n(expires_at(at).unix_seconds()))
            .add(GENERATION, 1)
            .set(ROUND_ATTEMPTS, n(0))
            .set(DUE_SHARD, s(due_shard(&record.id)))
            .remove(SUCCEEDED_AT)
            .when(condition);
        self.update_returning(&RecordKey::of_record(record), expression).await?.map(stored_of).transpose()
    }

    /// The subscription's records of `statuses` (and of `kinds`, when given) created in
    /// `[since, until)`, oldest first, at most `limit` + 1 (the extra one says more follow), as
    /// a recovery and a replay send them again. A record's `createdAt` is the time inside its
    /// id, so the window is a range of keys. Those of a status the status index holds are read
    /// through it, so they cost what they match; `succeeded` ones, which no index holds, are
    /// read from the subscription's log over the window, filtered, so they cost the window's
    /// records of the log. Never a Scan.
    pub async fn matching(
        &self,
        subscription_id: &SubscriptionId,
        statuses: &[DeliveryStatus],
        kinds: Option<&[EventKind]>,
        (since, until): (Timestamp, Timestamp),
        limit: u32,
    ) -> Result<Vec<StoredDelivery>, StoreError> {
        let range = (ids::first_id_at(ids::DELIVERY, since), ids::first_id_at(ids::DELIVERY, until));
        // The index is read eventually consistently, the log's filter sees the record as it
        // was: the record says what it is now.
        let matches = |status: DeliveryStatus| {
            move |d: &StoredDelivery| {
                d.record.status == status
                    && (since..until).contains(&d.record.created_at)
                    && kinds.is_none_or(|kinds| kinds.contains(&d.record.event_type))
            }
        };
        let mut found = Vec::new();
        for &status in statuses {
            match status_key(subscription_id, status) {
                Some(key) => {
                    found.extend(self.in_window(InWindow::Indexed(&key), &range, limit, matches(status)).await?)
                }
                None => {
                    let partitions: Vec<String> =
                        (0..LOG_SHARDS).map(|shard| log_partition(subscription_id, shard)).collect();
                    let shards = partitions.iter().map(|partition| {
                        self.in_window(InWindow::Logged(partition, status), &range, limit, matches(status))
                    });
                    for of_shard in futures_util::future::try_join_all(shards).await? {
                        found.extend(of_shard);
                    }
                }
            }
        }
        found.sort_by(|a, b| a.record.id.cmp(&b.record.id));
        found.truncate(limit as usize + 1);
        Ok(found)
    }

    /// How many of the subscription's records the status index holds as `status` (contract
    /// section 20: `held`, and the `pending` ones that wait in the due index), counted by the
    /// index itself (`Select: COUNT`, eventually consistent), page after page: it reads only
    /// those entries, about 100 bytes each, so half a read unit per 40 or so, never the log.
    pub async fn count_indexed(
        &self,
        subscription_id: &SubscriptionId,
        status: DeliveryStatus,
    ) -> Result<u64, StoreError> {
        let Some(key) = status_key(subscription_id, status) else { return Ok(0) };
        let (mut count, mut start) = (0, None);
        loop {
            let output = self
                .query(Some(BY_STATUS), KeyQuery::partition(STATUS_KEY, s(&key)))
                .select(Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await?;
            count += u64::try_from(output.count).unwrap_or_default();
            start = output.last_evaluated_key.filter(|key| !key.is_empty());
            if start.is_none() {
                return Ok(count);
            }
        }
    }

    /// The records of `source` with ids in `[first, end]` that `keep` keeps, oldest first,
    /// until more than `limit` are kept.
    async fn in_window(
        &self,
        source: InWindow<'_>,
        (first, end): &(String, String),
        limit: u32,
        keep: impl Fn(&StoredDelivery) -> bool,
    ) -> Result<Vec<StoredDelivery>, StoreError> {
        let (mut start, mut found) = (None, Vec::new());
        loop {
            // Ids below `end`: every id made before `until` sorts under `end`'s text.
            let ids = |key: KeyQuery| key.sort_between(DELIVERY_ID, s(first), s(end));
            let query = match source {
                InWindow::Indexed(key) => self
                    .query(Some(BY_STATUS), ids(KeyQuery::partition(STATUS_KEY, s(key))))
                    .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX)),
                InWindow::Logged(partition, status) => self
                    .query(None, ids(KeyQuery::partition(LOG_PARTITION, s(partition))).filter(has_status(status)))
                    .consistent_read(true)
                    .limit(i32::try_from(FILTERED_CHUNK.max(limit + 1)).unwrap_or(i32::MAX)),
            };
            let output = query.set_exclusive_start_key(start).send().await?;
            let items = output.items.unwrap_or_default();
            let read = match source {
                InWindow::Indexed(_) => {
                    let keys: Result<Vec<RecordKey>, _> = items.iter().map(RecordKey::from_item).collect();
                    self.records(&keys?).await?
                }
                InWindow::Logged(..) => items.into_iter().map(stored_of).collect::<Result<_, _>>()?,
            };
            found.extend(read.into_iter().filter(&keep));
            start = output.last_evaluated_key;
            if start.is_none() || found.len() > limit as usize {
                return Ok(found);
            }
        }
    }

    /// The keys of the subscription's `pending` and `held` records created before `before`,
    /// newest first, at most `limit` + 1 (the extra one says more follow), as a cancel ends
    /// them (contract section 20). The held ones come from the status index, so they cost what
    /// they are. No index holds one subscription's pending records (the due index is the
    /// deployment's, by due time, and a first try is in none): they come from the
    /// subscription's log below `before`, its shards read together, newest first, keys only,
    /// filtered, so they cost every record of the log created before then (30 days at most)
    /// down to the oldest pending one found, as a `pending` list does. Never a Scan. Read
    /// eventually consistently: the cancel's write holds only while the record still waits.
    pub async fn waiting(
        &self,
        subscription_id: &SubscriptionId,
        before: Timestamp,
        limit: u32,
    ) -> Result<Vec<RecordKey>, StoreError> {
        let below = |key: KeyQuery| {
            key.sort_below(DELIVERY_ID, s(ids::first_id_at(ids::DELIVERY, before)))
                .project(&[LOG_PARTITION, DELIVERY_ID])
        };
        let held = status_key(subscription_id, DeliveryStatus::Held)
            .map(|key| (Some(BY_STATUS), below(KeyQuery::partition(STATUS_KEY, s(key)))));
        // Only the log's reads need the filter: the index's partition is all held.
        let logs = (0..LOG_SHARDS).map(|shard| {
            let log = KeyQuery::partition(LOG_PARTITION, s(log_partition(subscription_id, shard)));
            (None, below(log).filter(has_status(DeliveryStatus::Pending)))
        });
        let reads = held.into_iter().chain(logs).map(|(index, key)| self.keys_of(index, key, limit));
        let mut found: Vec<RecordKey> =
            futures_util::future::try_join_all(reads).await?.into_iter().flatten().collect();
        found.sort_by(|a, b| b.delivery_id.cmp(&a.delivery_id));
        found.truncate(limit as usize + 1);
        Ok(found)
    }

    /// The keys of the items (of the table, or of `index`) that `key` keeps, newest first,
    /// until more than `limit` are found.
    async fn keys_of(&self, index: Option<&str>, key: KeyQuery, limit: u32) -> Result<Vec<RecordKey>, StoreError> {
        let (mut start, mut found) = (None, Vec::new());
        loop {
            let output = self
                .query(index, key.clone())
                .scan_index_forward(false)
                .limit(i32::try_from(FILTERED_CHUNK.max(limit + 1)).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await?;
            for item in output.items.unwrap_or_default() {
                found.push(RecordKey::from_item(&item)?);
            }
            start = output.last_evaluated_key;
            if start.is_none() || found.len() > limit as usize {
                return Ok(found);
            }
        }
    }

    /// Cancels the records of `keys` that still wait (contract section 20), each in one
    /// conditional write that holds only while it is `pending` or `held`: `cancelled`, out of
    /// the due index, in its next generation (so a copy of its message still queued finds it
    /// settled and is dropped unsent), its `lastError` saying so and its last answer kept, a
    /// few at a time. A claim in progress is left to its holder, as a manual retry leaves it:
    /// the attempt in flight records its outcome under it (`hand_on`: it counts and its answer
    /// shows), and the record stays `cancelled`. How many it cancelled.
    pub async fn cancel(&self, keys: &[RecordKey], at: Timestamp) -> Result<usize, StoreError> {
        let cancelled = DeliveryStatus::Cancelled;
        let waits = has_status(DeliveryStatus::Pending).or(has_status(DeliveryStatus::Held));
        // The futures are made first: a stream that maps with a closure over `self` is not
        // provably `Send`.
        let writes: Vec<_> = keys
            .iter()
            .map(|key| {
                let expression = Expression::new()
                    .set(STATUS, s(cancelled.as_str()))
                    .set(LAST_ERROR, s(plan::CANCELLED_ERROR))
                    .set(EXPIRES_AT, n(expires_at(at).unix_seconds()))
                    .add(GENERATION, 1)
                    .remove(NEXT_ATTEMPT_AT)
                    .remove(DUE_SHARD);
                let expression = with_status_key(expression, &key.subscription_id, cancelled);
                self.record_update(key).expression(expression.when(waits.clone())).send()
            })
            .collect();
        let written: Vec<_> = futures_util::stream::iter(writes).buffer_unordered(PUTS_AT_ONCE).collect().await;
        let mut count = 0;
        for result in written {
            count += usize::from(applied(result)?);
        }
        Ok(count)
    }
}
