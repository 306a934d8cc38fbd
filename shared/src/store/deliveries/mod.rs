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

pub(super) mod attributes;

use std::time::Duration;

use aws_sdk_dynamodb::operation::get_item::builders::GetItemFluentBuilder;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, ReturnValue, Select};
use aws_sdk_dynamodb::Client;
use futures_util::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use super::body::KeptBody;
use super::conditional::{applied, held};
use super::expression::{Condition, Conditional, Expression, KeyQuery, Projection, Projects, Queries, Updates};
use super::{n, s, time, Item, StoreError};
use crate::clock::{self, Timestamp};
use crate::delivery::log::{AttemptRecord, DeliveryRecord, DeliveryStatus, RETENTION};
use crate::delivery::plan::{self, Claim, Lease, NotSent, RecordState, SubscriptionTask};
use crate::delivery::DeliveryMessage;
use crate::events::EventKind;
use crate::ids::{self, DeliveryId, EventId, SubscriptionId, UserId};
use crate::operational::DeliveryState;
use crate::trace::{TraceContext, TraceParent, TraceState};
use attributes::{
    ATTEMPTS, BODY, BODY_DEFLATED, BY_STATUS, CREATED_AT, DELIVERY_ID, DUE_SHARD, EVENT_ID, EVENT_TYPE, EXPIRES_AT,
    GENERATION, LAST_ATTEMPT_AT, LAST_ERROR, LAST_RESPONSE_BODY, LAST_RESPONSE_STATUS, LEASE_UNTIL, LOG_PARTITION,
    NEXT_ATTEMPT_AT, ROUND_ATTEMPTS, STATUS, STATUS_KEY, SUBSCRIPTION_ID, SUCCEEDED_AT, USER_ID,
};

pub use attributes::BY_DUE;

/// How many partitions a subscription's log spreads its writes over.
pub const LOG_SHARDS: u8 = 4;
/// How many partitions the due index and the fan-out's markers spread their writes over
/// ([`DueShard`]).
pub const DUE_SHARDS: u8 = 16;
// A shard is a delivery id's last five random bits modulo DUE_SHARDS: even only for a divisor of 32.
const _: () = assert!(32 % DUE_SHARDS == 0);
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
/// How many records a fan-out writes at once.
const PUTS_AT_ONCE: usize = 25;
/// How many keys one list call reads at most while it looks for records of a status the
/// status index does not hold whole (`pending`, `succeeded`): a page may then come back short,
/// with a cursor to go on from.
const LIST_SCAN_BUDGET: usize = 500;
/// How many records a filtered list reads from one shard at a time.
const FILTERED_CHUNK: u32 = 100;
/// The most keys one `BatchGetItem` takes.
const BATCH_GET_MAX: usize = 100;
/// How many times keys a `BatchGetItem` left unprocessed (throttled) are asked again.
const UNPROCESSED_RETRIES: u32 = 5;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeliveryItem {
    /// The table's partition key: the subscription's log shard of this delivery (made anew
    /// for a record of the old layout, which has none). Compatibility: the `default` goes
    /// with [`DeliveryTable::import`].
    #[serde(default)]
    log_partition: String,
    #[serde(flatten)]
    summary: RecordSummary,
    created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_response_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_response_body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<Timestamp>,
    /// Written by no attempt since 2026-11-27 (a success's time is its `lastAttemptAt`); kept
    /// on the records settled before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    succeeded_at: Option<Timestamp>,
    /// The exact body that was signed and sent (a JSON text), for manual retries: as text
    /// here, or deflated in `bodyDeflated` when that is smaller (see [`KeptBody`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_deflated: Option<serde_bytes::ByteBuf>,
    /// DynamoDB's TTL removes the record after it; stored as Unix seconds, as TTL wants.
    #[serde(with = "clock::unix_seconds")]
    expires_at: Timestamp,
    /// The status index's partition; present only while `failed` or `skipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_key: Option<String>,
    /// Which message may send (contract section 12); moved on by a success, a manual retry,
    /// a recovery or a sweep. Compatibility: the `default` (records from before 2026-11-23)
    /// goes with [`same_generation`]'s `absent` case, after 2026-12-31.
    #[serde(default)]
    generation: u32,
    /// Attempts since the schedule last started (fan-out, manual retry or recovery).
    /// Compatibility: the `default` (records from before 2026-11-23) goes after 2026-12-31,
    /// as `generation`'s.
    #[serde(default)]
    round_attempts: u32,
    /// The end of the claim the record was created with, if its message carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease_until: Option<Timestamp>,
    /// The due index's partition; present only while `pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due_shard: Option<String>,
    /// The trace the delivery belongs to (contract section 19), so that a manual retry, a
    /// recovery and the sweep send it in the same trace; none on a record of before (2026-11-27;
    /// compatibility: such records' TTL, 30 days after their last change, ends them by
    /// 2026-12-27).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    traceparent: Option<TraceParent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<TraceState>,
}

/// What a record says of its delivery: whose it is, of which event to which subscription,
/// its status and its last attempt's time and error. An exhausted delivery's operational
/// event carries it, read from the stream's images (as a `DeliveryState`), which need no
/// other attribute.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecordSummary {
    user_id: UserId,
    delivery_id: DeliveryId,
    subscription_id: SubscriptionId,
    event_id: EventId,
    event_type: EventKind,
    status: DeliveryStatus,
    attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_attempt_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    /// Present, and true, on a probe's record (contract section 20).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    probe: bool,
}

impl From<RecordSummary> for DeliveryState {
    fn from(summary: RecordSummary) -> Self {
        DeliveryState {
            user_id: summary.user_id,
            delivery_id: summary.delivery_id,
            subscription_id: summary.subscription_id,
            event_id: summary.event_id,
            event_type: summary.event_type,
            status: summary.status,
            attempts: summary.attempts,
            last_attempt_at: summary.last_attempt_at,
            last_error: summary.last_error,
            probe: summary.probe,
        }
    }
}

impl DeliveryItem {
    /// A record no attempt has touched: `pending` (due now), or `held` or `skipped` (its
    /// subscription is disabled). Its `createdAt` is its event's, the time inside its id, so a
    /// time window is a range of ids.
    fn new(message: &DeliveryMessage, body: &[u8], status: DeliveryStatus, at: Timestamp) -> Self {
        let pending = status == DeliveryStatus::Pending;
        let item = DeliveryItem {
            log_partition: RecordKey::of(message).partition(),
            summary: RecordSummary {
                user_id: message.user_id.clone(),
                delivery_id: message.delivery_id.clone(),
                subscription_id: message.subscription_id.clone(),
                event_id: message.event.id.clone(),
                event_type: message.event.kind(),
                status,
                attempts: 0,
                last_attempt_at: None,
                last_error: NotSent::at_creation(status).map(|not_sent| not_sent.to_string()),
                probe: message.event.is_probe(),
            },
            created_at: message.event.created_at,
            last_response_status: None,
            last_response_body: None,
            next_attempt_at: pending.then_some(at),
            succeeded_at: None,
            body: None,
            body_deflated: None,
            expires_at: expires_at(at),
            status_key: status_key(&message.subscription_id, status),
            generation: message.generation,
            round_attempts: 0,
            lease_until: message.claimed_until.filter(|_| pending),
            due_shard: pending.then(|| due_shard(&message.delivery_id)),
            traceparent: message.trace.as_ref().map(|trace| trace.parent),
            tracestate: message.trace.as_ref().and_then(|trace| trace.state.clone()),
        };
        item.keeping(KeptBody::of(body))
    }

    /// The item with `body` as the body it keeps.
    fn keeping(self, body: KeptBody) -> Self {
        match body {
            KeptBody::Text(text) => DeliveryItem { body: Some(text), body_deflated: None, ..self },
            KeptBody::Deflated(bytes) => {
                DeliveryItem { body: None, body_deflated: Some(serde_bytes::ByteBuf::from(bytes)), ..self }
            }
        }
    }

    /// The body it keeps, as the text that was sent.
    fn body_text(&self) -> Result<String, StoreError> {
        let kept = match (&self.body, &self.body_deflated) {
            (_, Some(deflated)) => KeptBody::Deflated(deflated.to_vec()),
            (Some(text), None) => KeptBody::Text(text.clone()),
            (None, None) => return Err(StoreError::Mapping(serde::de::Error::missing_field("body"))),
        };
        let bytes = kept.bytes().map_err(|err| StoreError::Mapping(serde::de::Error::custom(err)))?;
        String::from_utf8(bytes).map_err(|err| StoreError::Mapping(serde::de::Error::custom(err)))
    }
}

impl DeliveryItem {
    fn into_stored(self) -> Result<StoredDelivery, StoreError> {
        let body = self.body_text()?;
        let (generation, lease_until) = (self.generation, self.lease_until);
        let trace = self.traceparent.map(|parent| TraceContext { parent, state: self.tracestate });
        let summary = self.summary;
        let record = DeliveryRecord {
            id: summary.delivery_id,
            subscription_id: summary.subscription_id,
            event_id: summary.event_id,
            event_type: summary.event_type,
            created_at: self.created_at,
            status: summary.status,
            attempts: summary.attempts,
            last_attempt_at: summary.last_attempt_at,
            last_response_status: self.last_response_status,
            last_response_body: self.last_response_body,
            last_error: summary.last_error,
            next_attempt_at: self.next_attempt_at,
            // Compatibility: records settled before 2026-11-27 keep `succeededAt` until their
            // TTL (30 days) ends them; since, a success's time is its last attempt's.
            succeeded_at: self
                .succeeded_at
                .or(summary.last_attempt_at.filter(|_| summary.status == DeliveryStatus::Succeeded)),
            body,
        };
        Ok(StoredDelivery { record, user_id: summary.user_id, generation, lease_until, trace })
    }
}

/// A record (with the body it keeps), its owner, its generation, its claim and its trace.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredDelivery {
    pub record: DeliveryRecord,
    pub user_id: UserId,
    pub generation: u32,
    /// The end of the last claim on the record (`plan::Lease`).
    pub lease_until: Option<Timestamp>,
    pub trace: Option<TraceContext>,
}

impl StoredDelivery {
    /// The message that sends this record's delivery again, in its current generation.
    pub fn message(&self) -> Result<DeliveryMessage, serde_json::Error> {
        Ok(DeliveryMessage {
            delivery_id: self.record.id.clone(),
            user_id: self.user_id.clone(),
            subscription_id: self.record.subscription_id.clone(),
            event: serde_json::from_str(&self.record.body)?,
            generation: self.generation,
            claimed_until: None,
            trace: self.trace.clone(),
        })
    }
}

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

/// One page of a list and the id of its last record when more follow.
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryRecord>,
    pub last_id_if_more: Option<DeliveryId>,
}

/// The status index's partition of a record of `status`: every status but `succeeded` (so a
/// release reads only what it holds, and the health counts what waits, contract section 20).
/// A `pending` record is in it only while it is in the due index too: a fan-out's first try
/// is in neither ([`DeliveryTable::insert_new`]), so the index holds some of the `pending`
/// records, not all ([`indexes_every`]).
fn status_key(subscription_id: &SubscriptionId, status: DeliveryStatus) -> Option<String> {
    (status != DeliveryStatus::Succeeded).then(|| format!("{subscription_id}#{}", status.as_str()))
}

/// Whether the status index holds every record of `status`: all but `pending`'s.
fn indexes_every(status: DeliveryStatus) -> bool {
    status != DeliveryStatus::Pending
}

/// Sets `expression`'s status index key to that of a record of `status` (or removes it).
fn with_status_key(expression: Expression, subscription_id: &SubscriptionId, status: DeliveryStatus) -> Expression {
    match status_key(subscription_id, status) {
        Some(key) => expression.set(STATUS_KEY, s(key)),
        None => expression.remove(STATUS_KEY),
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
fn due_shard(delivery_id: &DeliveryId) -> String {
    DueShard::of(delivery_id).to_string()
}

/// The due index partition of a parked record ([`PARKED_PARTITION`]).
fn parked_shard(delivery_id: &DeliveryId) -> String {
    format!("{PARKED_PARTITION}#{}", due_shard(delivery_id))
}

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

#[derive(Clone)]
pub struct DeliveryTable {
    client: Client,
    table: String,
}

impl DeliveryTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// Records deliveries that no attempt has touched yet, before their messages are queued
    /// (contract section 12): `pending` ones due now, or `skipped` ones. Each is written only
    /// where it has no record yet, so a stream record processed again (a retried batch)
    /// changes nothing its first processing recorded, attempts and successes included. The
    /// answer says, for each, whether this call recorded it. At most one write per delivery,
    /// [`PUTS_AT_ONCE`] at a time.
    ///
    /// The `pending` ones are not put in the due index: markers listing them, [`MARKER_RECORDS`]
    /// to a marker, are written first, and the sweep reads a marker once it is overdue
    /// ([`Self::index_marked`]). So a first try that succeeds writes no index entry, and a
    /// batch of ten pays two writes (the marker's and its removal) instead of twenty.
    pub async fn insert_new(
        &self,
        messages: &[(&DeliveryMessage, DeliveryStatus)],
        at: Timestamp,
    ) -> Result<Vec<bool>, StoreError> {
        let pending: Vec<RecordKey> = messages
            .iter()
            .filter(|(_, status)| *status == DeliveryStatus::Pending)
            .map(|(message, _)| RecordKey::of(message))
            .collect();
        // First: a record the sweep could not find would be lost for good should its message be.
        futures_util::future::try_join_all(pending.chunks(MARKER_RECORDS).map(|keys| self.put_marker(keys, at)))
            .await?;
        let items: Vec<DeliveryItem> = messages
            .iter()
            .map(|(message, status)| {
                let item = DeliveryItem::new(message, &message.body(), *status, at);
                // A pending first try is in neither index: its marker stands in for both.
                let status_key = item.status_key.clone().filter(|_| *status != DeliveryStatus::Pending);
                DeliveryItem { due_shard: None, status_key, ..item }
            })
            .collect();
        // The futures are made first: a stream that maps with a closure over `self` is not
        // provably `Send`.
        let puts: Vec<_> = items.iter().map(|item| self.put_new(item)).collect();
        futures_util::stream::iter(puts).buffered(PUTS_AT_ONCE).try_collect().await
    }

    /// Writes the marker of `keys`, records about to be created `pending` at `at`.
    async fn put_marker(&self, keys: &[RecordKey], at: Timestamp) -> Result<(), StoreError> {
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

    /// Records one delivery that no attempt has touched yet (a ping), `pending` or `skipped`.
    /// If an attempt got there first, the record as that attempt left it.
    pub async fn create(
        &self,
        message: &DeliveryMessage,
        status: DeliveryStatus,
        at: Timestamp,
    ) -> Result<DeliveryRecord, StoreError> {
        let item = DeliveryItem::new(message, &message.body(), status, at);
        if self.put_new(&item).await? {
            return Ok(item.into_stored()?.record);
        }
        let existing = self.get(&message.subscription_id, &message.delivery_id).await?;
        existing.map(|stored| stored.record).ok_or(StoreError::Contention)
    }

    /// Writes `item` unless its delivery has a record already; whether it did.
    async fn put_new(&self, item: &DeliveryItem) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(item)?))
            .condition(Condition::absent(DELIVERY_ID))
            .send()
            .await;
        applied(result)
    }

    /// Writes a record read from a deliveries table of an older layout (keyed by `userId` and
    /// `deliveryId`, with local indexes) in this one, unless its delivery has a record here
    /// already; whether it did. The index keys are made anew: `statusKey` for a failed or
    /// skipped record, and `dueShard` for a pending one, which records from before the due
    /// index lack (without it the sweep would never find them). Compatibility: goes after
    /// 2026-12-31, when DynamoDB drops the system backup of the table replaced on 2026-11-26
    /// (kept 35 days); its records' TTL (30 days) has ended them by then anyway.
    pub async fn import(&self, item: Item) -> Result<bool, StoreError> {
        let mut item: DeliveryItem = serde_dynamo::from_item(item)?;
        let summary = &item.summary;
        let key =
            RecordKey { subscription_id: summary.subscription_id.clone(), delivery_id: summary.delivery_id.clone() };
        let pending = summary.status == DeliveryStatus::Pending;
        item.status_key = status_key(&summary.subscription_id, summary.status);
        item.due_shard = pending.then(|| due_shard(&summary.delivery_id));
        item.log_partition = key.partition();
        if pending && item.next_attempt_at.is_none() {
            item.next_attempt_at = Some(item.created_at);
        }
        self.put_new(&item).await
    }

    /// Claims the record for a turn of `message` at `now` under `lease`, in one conditional
    /// write that holds only while the record is `pending`, of the message's generation, due
    /// (see [`plan::due_by`]) and under no other turn's claim (the claim the record was
    /// created with is the message's own); the record as the write left it. A refused claim
    /// reads the record, so the plan can tell why.
    pub async fn claim(&self, message: &DeliveryMessage, lease: Lease, now: Timestamp) -> Result<Claim, StoreError> {
        let unclaimed = match message.claimed_until {
            Some(until) => lease_free(now).or(Condition::equals(LEASE_UNTIL, time(until))),
            None => lease_free(now),
        };
        let claimable = Condition::exists(DELIVERY_ID)
            .and(same_generation(message.generation))
            .and(has_status(DeliveryStatus::Pending))
            .and(unclaimed)
            .and(Condition::absent(NEXT_ATTEMPT_AT).or(Condition::below(NEXT_ATTEMPT_AT, time(plan::due_by(now)))));
        let expression = Expression::new().set(LEASE_UNTIL, time(lease.until)).when(claimable);
        let key = RecordKey::of(message);
        if let Some(item) = self.update_returning(&key, expression).await? {
            return Ok(Claim::Held { record: state_of(item)?, lease });
        }
        Ok(match self.state(&key).await? {
            Some(record) => Claim::Refused(record),
            None => Claim::Unwritten,
        })
    }

    /// Gives up a turn's claim (its message goes on elsewhere), unless another holds it by now.
    pub async fn release(&self, message: &DeliveryMessage, lease: Lease) -> Result<(), StoreError> {
        let expression = Expression::new().remove(LEASE_UNTIL).when(Condition::equals(LEASE_UNTIL, time(lease.until)));
        applied(self.record_update(&RecordKey::of(message)).expression(expression).send().await)?;
        Ok(())
    }

    /// What the delivery plan needs of a record: its generation, status, attempts, round, due time and
    /// claim, read strongly consistently (a first attempt reads it to hold the claim its
    /// record was created with, `plan::created_claim`).
    pub async fn state(&self, key: &RecordKey) -> Result<Option<RecordState>, StoreError> {
        let projection = Projection::of(&[GENERATION, STATUS, ATTEMPTS, ROUND_ATTEMPTS, NEXT_ATTEMPT_AT, LEASE_UNTIL]);
        let output = self.read(key).projection(projection).send().await?;
        output.item.map(state_of).transpose()
    }

    /// Records one attempt with one write, while the record is still of the message's
    /// generation and under the turn's claim (creating it if a message queued before records
    /// came first finds none, which has no claim): its outcome, the attempt counts, and
    /// (first time only) the event and the body sent; the claim ends with it. `false` when
    /// another generation owns the record or the claim is gone: nothing is written (a turn
    /// still under its claim then records with [`Self::hand_on`]).
    pub async fn record_attempt(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        attempt: &AttemptRecord,
        lease: Option<Lease>,
    ) -> Result<bool, StoreError> {
        let mut expression = counted(upsert(message, body, attempt.status, attempt.at), attempt)
            .add(ROUND_ATTEMPTS, 1)
            .remove(LEASE_UNTIL);
        if attempt.advance_generation {
            expression = expression.set(GENERATION, n(message.generation + 1));
        }
        // Only pending records, which have a next attempt, are in the due index.
        let id = &message.delivery_id;
        expression = match attempt.next_attempt_at {
            Some(next) if attempt.parked => {
                expression.set(NEXT_ATTEMPT_AT, time(next)).set(DUE_SHARD, s(parked_shard(id)))
            }
            Some(next) => expression.set(NEXT_ATTEMPT_AT, time(next)).set(DUE_SHARD, s(due_shard(id))),
            None => expression.remove(NEXT_ATTEMPT_AT).remove(DUE_SHARD),
        };
        // A success's time is its `lastAttemptAt`: not written twice, so a record with a 1 KB
        // body stays under 1 KB as settled (see `into_stored`). A record of before (2026-11-27)
        // loses the attribute it has.
        expression = expression.remove(SUCCEEDED_AT);
        let held = match lease {
            Some(lease) => same_generation(message.generation).and(Condition::equals(LEASE_UNTIL, time(lease.until))),
            None => same_generation(message.generation),
        };
        applied(self.record_update(&RecordKey::of(message)).expression(expression.when(held)).send().await)
    }

    /// Gives a turn's claim to the round a manual retry, a recovery or a replay started while
    /// the turn held it (contract section 12), or to a record cancelled meanwhile (section 20),
    /// in one conditional write that holds only while the record is still under `lease` and of
    /// a newer generation than the message's: the claim ends and the generation moves on once
    /// more, so that the record as it now is, returned, makes the one message of the new round
    /// (the copy the retry queued, which would wait for the claim to end, is stale). With
    /// `attempt` (the send the turn made under the claim, of the old round), the attempt counts
    /// and its answer shows, while the status, the due time and the round stay the new
    /// round's (a cancelled record stays `cancelled`). `None` when the turn no longer holds
    /// the claim.
    pub async fn hand_on(
        &self,
        message: &DeliveryMessage,
        lease: Lease,
        attempt: Option<&AttemptRecord>,
    ) -> Result<Option<StoredDelivery>, StoreError> {
        let mut expression = Expression::new().remove(LEASE_UNTIL).add(GENERATION, 1);
        if let Some(attempt) = attempt {
            let expiry = n(expires_at(attempt.at).unix_seconds());
            expression = counted(expression.set(EXPIRES_AT, expiry), attempt);
        }
        let superseded =
            Condition::equals(LEASE_UNTIL, time(lease.until)).and(Condition::above(GENERATION, n(message.generation)));
        self.update_returning(&RecordKey::of(message), expression.when(superseded)).await?.map(stored_of).transpose()
    }

    /// Records that the delivery's turn came while its subscription could not take it, as
    /// `not_sent` says (`skipped` if never sent, else `failed`; its text the `lastError`, the
    /// last attempt's answer kept): one write, while the record is of the message's generation
    /// and holds the attempts `not_sent` counted. Any claim ends with it. `false` when another
    /// generation owns the record or an attempt was recorded since it was read.
    pub async fn record_not_sent(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        at: Timestamp,
        not_sent: NotSent,
    ) -> Result<bool, StoreError> {
        let as_counted = match not_sent.attempts {
            0 => Condition::absent(ATTEMPTS).or(Condition::equals(ATTEMPTS, n(0))),
            attempts => Condition::equals(ATTEMPTS, n(attempts)),
        };
        let expression = upsert(message, body, not_sent.status(), at)
            .set_if_absent(ATTEMPTS, n(0))
            .set(LAST_ERROR, s(not_sent.to_string()))
            .remove(NEXT_ATTEMPT_AT)
            .remove(SUCCEEDED_AT)
            .remove(DUE_SHARD)
            .remove(LEASE_UNTIL)
            .when(same_generation(message.generation).and(as_counted));
        applied(self.record_update(&RecordKey::of(message)).expression(expression).send().await)
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

    /// The record of a delivery of the subscription.
    pub async fn get(
        &self,
        subscription_id: &SubscriptionId,
        delivery_id: &DeliveryId,
    ) -> Result<Option<StoredDelivery>, StoreError> {
        let key = RecordKey { subscription_id: subscription_id.clone(), delivery_id: delivery_id.clone() };
        let output = self.read(&key).send().await?;
        output.item.map(stored_of).transpose()
    }

    /// The record of `user_id`'s delivery, looked for in the logs of the user's
    /// `subscriptions` (an id alone does not say which log holds it): one read.
    pub async fn find(
        &self,
        user_id: &UserId,
        subscriptions: &[SubscriptionId],
        delivery_id: &DeliveryId,
    ) -> Result<Option<StoredDelivery>, StoreError> {
        let keys: Vec<RecordKey> = subscriptions
            .iter()
            .map(|subscription_id| RecordKey {
                subscription_id: subscription_id.clone(),
                delivery_id: delivery_id.clone(),
            })
            .collect();
        Ok(self.records(&keys).await?.into_iter().find(|stored| stored.user_id == *user_id))
    }

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
        let (deliveries, last_id_if_more) = super::one_page(records, limit, |d: &DeliveryRecord| &d.id);
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
                let (deliveries, last_id_if_more) = super::one_page(found, limit, |d: &DeliveryRecord| &d.id);
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
                let (deliveries, last_id_if_more) = super::one_page(known, limit, |d: &DeliveryRecord| &d.id);
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
        let items: Vec<DeliveryItem> = serde_dynamo::from_items(output.items.unwrap_or_default())?;
        for item in items {
            found.push(item.into_stored()?.record);
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

    /// The records of `keys` that exist, in the order of `keys`, read strongly consistently.
    async fn records(&self, keys: &[RecordKey]) -> Result<Vec<StoredDelivery>, StoreError> {
        let mut by_id = std::collections::HashMap::new();
        for item in self.batch_items(keys, BatchRead::Whole).await? {
            let stored = stored_of(item)?;
            by_id.insert(stored.record.id.clone(), stored);
        }
        Ok(keys.iter().filter_map(|key| by_id.remove(&key.delivery_id)).collect())
    }

    /// The items of `keys` that exist, read as `read` says, at most [`BATCH_GET_MAX`] a call
    /// (keys DynamoDB leaves unprocessed are asked again).
    async fn batch_items(&self, keys: &[RecordKey], read: BatchRead) -> Result<Vec<Item>, StoreError> {
        let mut found = Vec::new();
        for chunk in keys.chunks(BATCH_GET_MAX) {
            let items: Vec<Item> = chunk.iter().map(RecordKey::item).collect();
            let items = KeysAndAttributes::builder().set_keys(Some(items));
            let items = match read {
                BatchRead::Whole => items.consistent_read(true),
                BatchRead::Due => items.projection(Projection::of(&[DELIVERY_ID, STATUS, NEXT_ATTEMPT_AT, DUE_SHARD])),
            };
            let mut request = Some(items.build().expect("keys are set"));
            let mut backoff = super::Backoff::new(UNPROCESSED_RETRIES);
            while let Some(keys) = request.take() {
                let output = self.client.batch_get_item().request_items(&self.table, keys).send().await?;
                found.extend(output.responses.and_then(|mut tables| tables.remove(&self.table)).unwrap_or_default());
                request = output.unprocessed_keys.and_then(|mut tables| tables.remove(&self.table));
                if request.is_some() && !backoff.pause().await {
                    return Err(StoreError::Contention);
                }
            }
        }
        Ok(found)
    }
}

/// Where [`DeliveryTable::matching`] reads a window of records of one status.
#[derive(Clone, Copy)]
enum InWindow<'a> {
    /// The status index's partition (`whk_…#<status>`): keys, then their records.
    Indexed(&'a str),
    /// A shard of the subscription's log, filtered to the status: whole records.
    Logged(&'a str, DeliveryStatus),
}

/// How [`DeliveryTable::batch_items`] reads.
#[derive(Clone, Copy)]
enum BatchRead {
    /// Whole records, strongly consistent.
    Whole,
    /// Only what the sweep needs (status, due time, due index key), eventually consistent
    /// (half the read units).
    Due,
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

/// The record's status is `status`.
fn has_status(status: DeliveryStatus) -> Condition {
    Condition::equals(STATUS, s(status.as_str()))
}

/// `key` below the delivery id `after`, when given (the page after it, newest first).
fn below_if(key: KeyQuery, after: Option<&DeliveryId>) -> KeyQuery {
    match after {
        Some(after) => key.sort_below(DELIVERY_ID, s(after)),
        None => key,
    }
}

/// The start of every attempt's update, which creates the record if needed: `SET` the
/// status, its index key, the expiry and (if the record is new) its identity and body.
fn upsert(message: &DeliveryMessage, body: &[u8], status: DeliveryStatus, at: Timestamp) -> Expression {
    // The same bytes make the same form, so a record keeps one body attribute.
    let (body_name, body_value) = match KeptBody::of(body) {
        KeptBody::Text(text) => (BODY, s(text)),
        KeptBody::Deflated(bytes) => (BODY_DEFLATED, AttributeValue::B(Blob::new(bytes))),
    };
    with_status_key(Expression::new(), &message.subscription_id, status)
        .set(STATUS, s(status.as_str()))
        .set(EXPIRES_AT, n(expires_at(at).unix_seconds()))
        .set_if_absent(USER_ID, s(&message.user_id))
        .set_if_absent(SUBSCRIPTION_ID, s(&message.subscription_id))
        .set_if_absent(EVENT_ID, s(&message.event.id))
        .set_if_absent(EVENT_TYPE, s(message.event.kind().as_str()))
        .set_if_absent(CREATED_AT, time(at))
        .set_if_absent(body_name, body_value)
}

/// Counts `attempt` in an attempt's update: one more attempt, when, and what it got (the
/// receiver's status and answer, if it answered, and its error).
fn counted(expression: Expression, attempt: &AttemptRecord) -> Expression {
    let expression = expression.add(ATTEMPTS, 1).set(LAST_ATTEMPT_AT, time(attempt.at));
    let expression = match &attempt.response {
        Some((status, answer)) => expression.set(LAST_RESPONSE_STATUS, n(status)).set(LAST_RESPONSE_BODY, s(answer)),
        None => expression.remove(LAST_RESPONSE_STATUS).remove(LAST_RESPONSE_BODY),
    };
    match &attempt.error {
        Some(error) => expression.set(LAST_ERROR, s(error)),
        None => expression.remove(LAST_ERROR),
    }
}

/// The record is still the one of the message's generation (a record written before
/// generations, 2026-11-23, has none, which is generation zero). Compatibility: the `absent`
/// case goes after 2026-12-31: such records' TTL (30 days after their last change) has
/// ended them, imported ones included (see [`DeliveryTable::import`]).
fn same_generation(generation: u32) -> Condition {
    Condition::absent(GENERATION).or(Condition::equals(GENERATION, n(generation)))
}

/// No turn's claim on the record lasts beyond `now`.
fn lease_free(now: Timestamp) -> Condition {
    Condition::absent(LEASE_UNTIL).or(Condition::below(LEASE_UNTIL, time(now)))
}

/// The plan's view of a record's attributes.
fn state_of(item: Item) -> Result<RecordState, StoreError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct StateItem {
        #[serde(default)]
        generation: u32,
        status: DeliveryStatus,
        #[serde(default)]
        attempts: u32,
        #[serde(default)]
        round_attempts: u32,
        next_attempt_at: Option<Timestamp>,
        lease_until: Option<Timestamp>,
    }
    let item: StateItem = serde_dynamo::from_item(item)?;
    Ok(RecordState {
        generation: item.generation,
        status: item.status,
        attempts: item.attempts,
        round_attempts: item.round_attempts,
        next_attempt_at: item.next_attempt_at,
        lease_until: item.lease_until,
    })
}

fn stored_of(item: Item) -> Result<StoredDelivery, StoreError> {
    let item: DeliveryItem = serde_dynamo::from_item(item)?;
    item.into_stored()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue;

    /// An item's size as DynamoDB counts it for the attribute kinds these items use.
    fn size(item: &Item) -> usize {
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
    fn a_record_keeps_a_long_body_deflated_and_reads_it_back_as_sent() {
        let event = crate::events::Event::ping(&SubscriptionId::generate());
        let mut message = DeliveryMessage::new(&event, &"u1".parse().unwrap(), &SubscriptionId::generate());
        message.event.data = crate::events::EventData::EndpointFailing {
            user_id: "u1".parse().unwrap(),
            subscription_id: SubscriptionId::generate(),
            url: "https://hooks.example.com/career/events".into(),
            failing_since: Timestamp::from_unix_seconds(1_795_766_400),
            last_error: "answered 503: the gateway returned an invalid response from the pool; ".repeat(12),
            last_response_status: Some(503),
        };
        let body = message.body();
        let item = DeliveryItem::new(&message, &body, DeliveryStatus::Pending, Timestamp::now());
        let stored: Item = serde_dynamo::to_item(&item).unwrap();
        assert!(!stored.contains_key("body"));
        assert!(matches!(stored.get("bodyDeflated"), Some(AttributeValue::B(_))), "kept as binary: {stored:?}");
        assert!(size(&stored) < 1024, "{} bytes for a {}-byte body", size(&stored), body.len());
        assert_eq!(stored_of(stored).unwrap().record.body.as_bytes(), body.as_slice());
    }

    #[test]
    fn a_success_shows_its_last_attempt_as_when_it_succeeded() {
        let message = DeliveryMessage::new(
            &crate::events::Event::ping(&SubscriptionId::generate()),
            &"u1".parse().unwrap(),
            &SubscriptionId::generate(),
        );
        let at = Timestamp::from_unix_seconds(1_795_766_400);
        let item = DeliveryItem::new(&message, &message.body(), DeliveryStatus::Pending, at);
        let summary = RecordSummary { status: DeliveryStatus::Succeeded, last_attempt_at: Some(at), ..item.summary };
        let settled = DeliveryItem { summary, ..item };
        assert_eq!(settled.into_stored().unwrap().record.succeeded_at, Some(at));
        let item = DeliveryItem::new(&message, &message.body(), DeliveryStatus::Pending, at);
        let summary = RecordSummary { status: DeliveryStatus::Failed, last_attempt_at: Some(at), ..item.summary };
        let failed = DeliveryItem { summary, ..item };
        assert_eq!(failed.into_stored().unwrap().record.succeeded_at, None);
    }
}
