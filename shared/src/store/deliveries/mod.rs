//! The deliveries table (contract sections 9 and 12): one item per delivery, removed by TTL
//! 30 days after its last change. The record is the source of truth; the queues only carry
//! work.
//!
//! The key is the subscription's log: partition `logPartition` (`whk_…#k`, one of
//! [`LOG_SHARDS`] shards of the subscription, from the delivery id), sort `deliveryId`. So a
//! subscription's log is read newest first from the table itself, strongly consistent and
//! with no index to write, and no user or subscription has a partition, an item collection
//! (no local index, so no 10 GB ceiling) or a hot key of its own: a busy subscription's
//! writes spread over its shards. Two sparse global indexes serve the rest, each projecting
//! only keys, so a record's body and its receiver's answer are never copied and what a
//! write costs in them does not grow with them:
//! - `byStatus` (partition `statusKey` = `whk_…#<status>`, sort `deliveryId`): the records
//!   that ended without success, the held and cancelled ones, and the pending ones that wait in the due
//!   index (a retry, a restart, a ping, a first try the sweep found waiting), so the common
//!   path (a fan-out's first try, `pending` to `succeeded`) never writes it, while the list of
//!   failed deliveries, a recovery and the health's counts of held and pending (contract
//!   section 20) cost what they return.
//! - `byDue` (partition `dueShard`, one of [`DUE_SHARDS`], sort `nextAttemptAt`): only
//!   `pending` records, so the sweep reads what is overdue and nothing else, and its writes
//!   spread over the shards at any event rate. A first try the fan-out records is not in it:
//!   one [`Marker`] per batch of records lets the sweep find those still pending when it is
//!   overdue, so a first try that succeeds writes no index at all.
//!
//! A turn of the delivery function claims its record before it sends (`leaseUntil`, see
//! `delivery::plan::Lease`): a plain attribute, in no index, so a claim writes no index.
//!
//! The code follows the access patterns: a record's creation and reads (`record`), a turn's
//! claim and the attempt it records (`claim`), a subscription's log as its lists read it
//! (`log`), the sweep's due index and markers (`sweep`), and the selections that a replay, a
//! cancel, a release and the health's counts read and write (`selection`). Every attribute
//! and index is named once, in `attributes`.

pub(super) mod attributes;
mod claim;
mod log;
mod record;
mod selection;
mod sweep;

use aws_sdk_dynamodb::operation::get_item::builders::GetItemFluentBuilder;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::Client;
use serde::Deserialize;

use super::conditional::held;
use super::expression::{Condition, Expression, KeyQuery, Queries, Updates};
use super::{s, Item, StoreError};
use crate::clock::Timestamp;
use crate::delivery::log::{DeliveryRecord, DeliveryStatus, RETENTION};
use crate::delivery::DeliveryMessage;
use crate::ids::{DeliveryId, SubscriptionId};
use attributes::{DELIVERY_ID, LOG_PARTITION, STATUS, STATUS_KEY};

pub use attributes::BY_DUE;
pub use log::DeliveryPage;
pub(crate) use record::RecordSummary;
pub use record::StoredDelivery;
pub use sweep::{DueShard, Marker, Overdue, PageStart, ShardPage, TaskMarker, MARKER_RECORDS};

/// How many partitions a subscription's log spreads its writes over.
pub const LOG_SHARDS: u8 = 4;

/// How many partitions the due index and the fan-out's markers spread their writes over
/// ([`DueShard`]).
pub const DUE_SHARDS: u8 = 16;

// A shard is a delivery id's last five random bits modulo DUE_SHARDS: even only for a divisor of 32.
const _: () = assert!(32 % DUE_SHARDS == 0);

/// How many records a fan-out writes at once.
const PUTS_AT_ONCE: usize = 25;

/// How many records a filtered list reads from one shard at a time.
const FILTERED_CHUNK: u32 = 100;

/// A record's key: its subscription's log shard and its delivery id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordKey {
    pub subscription_id: SubscriptionId,
    pub delivery_id: DeliveryId,
}

impl RecordKey {
    pub fn of(message: &DeliveryMessage) -> Self {
        RecordKey { subscription_id: message.subscription_id.clone(), delivery_id: message.delivery_id.clone() }
    }

    fn of_record(record: &DeliveryRecord) -> Self {
        RecordKey { subscription_id: record.subscription_id.clone(), delivery_id: record.id.clone() }
    }

    /// The log shard: from a character of the id's random part other than the due shard's.
    fn partition(&self) -> String {
        let bytes = self.delivery_id.as_str().as_bytes();
        let second_last = bytes.len().checked_sub(2).map_or(0, |i| bytes[i]);
        log_partition(&self.subscription_id, second_last % LOG_SHARDS)
    }

    /// A key as a marker lists it, `whk_…/dlv_…`.
    fn parse(text: &str) -> Option<Self> {
        let (subscription, delivery) = text.split_once('/')?;
        Some(RecordKey {
            subscription_id: SubscriptionId::parse(subscription)?,
            delivery_id: DeliveryId::parse(delivery)?,
        })
    }

    /// The key as DynamoDB takes it.
    pub fn item(&self) -> Item {
        Item::from([(LOG_PARTITION.to_owned(), s(self.partition())), (DELIVERY_ID.to_owned(), s(&self.delivery_id))])
    }

    /// The key of an item of the table or of an index (which carries the table's key).
    fn from_item(item: &Item) -> Result<Self, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Key {
            log_partition: String,
            delivery_id: DeliveryId,
        }
        let key: Key = serde_dynamo::from_item(item.clone())?;
        let subscription = key.log_partition.split_once('#').and_then(|(id, _)| SubscriptionId::parse(id));
        let subscription_id = subscription.ok_or_else(|| {
            StoreError::Mapping(serde::de::Error::custom(format!("not a log partition: {}", key.log_partition)))
        })?;
        Ok(RecordKey { subscription_id, delivery_id: key.delivery_id })
    }
}

fn log_partition(subscription_id: &SubscriptionId, shard: u8) -> String {
    format!("{subscription_id}#{shard}")
}

/// When a record changed at `at` expires.
fn expires_at(at: Timestamp) -> Timestamp {
    at + RETENTION
}

/// The status index's partition of a record of `status`: every status but `succeeded` (so a
/// release reads only what it holds, and the health counts what waits, contract section 20).
/// A `pending` record is in it only while it is in the due index too: a fan-out's first try
/// is in neither ([`DeliveryTable::insert_new`]), so the index holds some of the `pending`
/// records, not all ([`indexes_every`]).
fn status_key(subscription_id: &SubscriptionId, status: DeliveryStatus) -> Option<String> {
    (status != DeliveryStatus::Succeeded).then(|| format!("{subscription_id}#{}", status.as_str()))
}

/// Sets `expression`'s status index key to that of a record of `status` (or removes it).
fn with_status_key(expression: Expression, subscription_id: &SubscriptionId, status: DeliveryStatus) -> Expression {
    match status_key(subscription_id, status) {
        Some(key) => expression.set(STATUS_KEY, s(key)),
        None => expression.remove(STATUS_KEY),
    }
}

/// The record's status is `status`.
fn has_status(status: DeliveryStatus) -> Condition {
    Condition::equals(STATUS, s(status.as_str()))
}

#[derive(Clone)]
pub struct DeliveryTable {
    client: Client,
    table: String,
}

impl DeliveryTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// A strongly consistent read of one record.
    fn read(&self, key: &RecordKey) -> GetItemFluentBuilder {
        self.client.get_item().table_name(&self.table).set_key(Some(key.item())).consistent_read(true)
    }

    /// A query of the table, or of `index`, by `key`.
    fn query(&self, index: Option<&str>, key: KeyQuery) -> QueryFluentBuilder {
        self.client.query().table_name(&self.table).set_index_name(index.map(str::to_owned)).key_query(key)
    }

    /// An update of one record; callers add the expression and its condition.
    fn record_update(&self, key: &RecordKey) -> UpdateItemFluentBuilder {
        self.client.update_item().table_name(&self.table).set_key(Some(key.item()))
    }

    /// Applies `expression` to one record: the item it leaves, or `None` when its condition
    /// did not hold.
    async fn update_returning(&self, key: &RecordKey, expression: Expression) -> Result<Option<Item>, StoreError> {
        let result = self.record_update(key).expression(expression).return_values(ReturnValue::AllNew).send().await;
        Ok(held(result)?.map(|output| output.attributes.unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::Item;

    /// An item's size as DynamoDB counts it for the attribute kinds these items use.
    pub(super) fn size(item: &Item) -> usize {
        fn value(v: &AttributeValue) -> usize {
            match v {
                AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
                AttributeValue::B(b) => b.as_ref().len(),
                AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value(v)).sum::<usize>(),
                _ => 1,
            }
        }
        item.iter().map(|(name, v)| name.len() + value(v)).sum()
    }
}
