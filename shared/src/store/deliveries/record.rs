//! A delivery's record: its item, its creation (one at a time, or a fan-out's batch with
//! its markers), its import from the old layout, and its reads by key.

use aws_sdk_dynamodb::types::KeysAndAttributes;
use futures_util::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use super::super::body::KeptBody;
use super::super::conditional::applied;
use super::super::expression::{Condition, Conditional, Projection, Projects};
use super::super::{Backoff, Item, StoreError};
use super::attributes::{DELIVERY_ID, DUE_SHARD, NEXT_ATTEMPT_AT, STATUS};
use super::sweep::{due_shard, MARKER_RECORDS};
use super::{expires_at, status_key, DeliveryTable, RecordKey, PUTS_AT_ONCE};
use crate::clock::{self, Timestamp};
use crate::delivery::log::{DeliveryRecord, DeliveryStatus};
use crate::delivery::plan::NotSent;
use crate::delivery::DeliveryMessage;
use crate::events::EventKind;
use crate::ids::{DeliveryId, EventId, SubscriptionId, UserId};
use crate::operational::DeliveryState;
use crate::trace::{TraceContext, TraceParent, TraceState};

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

/// How [`DeliveryTable::batch_items`] reads.
#[derive(Clone, Copy)]
pub(super) enum BatchRead {
    /// Whole records, strongly consistent.
    Whole,
    /// Only what the sweep needs (status, due time, due index key), eventually consistent
    /// (half the read units).
    Due,
}

pub(super) fn stored_of(item: Item) -> Result<StoredDelivery, StoreError> {
    let item: DeliveryItem = serde_dynamo::from_item(item)?;
    item.into_stored()
}

impl DeliveryTable {
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

    /// The records of `keys` that exist, in the order of `keys`, read strongly consistently.
    pub(super) async fn records(&self, keys: &[RecordKey]) -> Result<Vec<StoredDelivery>, StoreError> {
        let mut by_id = std::collections::HashMap::new();
        for item in self.batch_items(keys, BatchRead::Whole).await? {
            let stored = stored_of(item)?;
            by_id.insert(stored.record.id.clone(), stored);
        }
        Ok(keys.iter().filter_map(|key| by_id.remove(&key.delivery_id)).collect())
    }

    /// The items of `keys` that exist, read as `read` says, at most [`BATCH_GET_MAX`] a call
    /// (keys DynamoDB leaves unprocessed are asked again).
    pub(super) async fn batch_items(&self, keys: &[RecordKey], read: BatchRead) -> Result<Vec<Item>, StoreError> {
        let mut found = Vec::new();
        for chunk in keys.chunks(BATCH_GET_MAX) {
            let items: Vec<Item> = chunk.iter().map(RecordKey::item).collect();
            let items = KeysAndAttributes::builder().set_keys(Some(items));
            let items = match read {
                BatchRead::Whole => items.consistent_read(true),
                BatchRead::Due => items.projection(Projection::of(&[DELIVERY_ID, STATUS, NEXT_ATTEMPT_AT, DUE_SHARD])),
            };
            let mut request = Some(items.build().expect("keys are set"));
            let mut backoff = Backoff::new(UNPROCESSED_RETRIES);
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

#[cfg(test)]
mod tests {
    use super::super::attributes::tests::unnamed;
    use super::super::tests::size;
    use super::*;
    use crate::trace::TraceContext;
    use aws_sdk_dynamodb::types::AttributeValue;

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

    #[test]
    fn every_attribute_of_a_record_is_named_in_attributes() {
        let at = Timestamp::from_unix_seconds(1_795_766_400);
        let mut message = DeliveryMessage::new(
            &crate::events::Event::ping(&SubscriptionId::generate()),
            &"u1".parse().unwrap(),
            &SubscriptionId::generate(),
        );
        message.claimed_until = Some(at);
        message.trace = TraceContext::of(Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), Some("k=v"));
        let item = DeliveryItem::new(&message, &message.body(), DeliveryStatus::Pending, at);
        let summary = RecordSummary { last_attempt_at: Some(at), last_error: Some("503".into()), ..item.summary };
        let record = DeliveryItem {
            summary,
            last_response_status: Some(503),
            last_response_body: Some("busy".into()),
            succeeded_at: Some(at),
            ..item
        };
        let record: Item = serde_dynamo::to_item(&record).unwrap();
        assert!(record.len() >= 24, "every optional attribute written: {:?}", record.keys());
        let deflated = DeliveryItem::new(&message, &message.body(), DeliveryStatus::Held, at)
            .keeping(KeptBody::Deflated(b"x".to_vec()));
        assert_eq!(unnamed(&record), Vec::<&str>::new());
        assert_eq!(unnamed(&serde_dynamo::to_item(&deflated).unwrap()), Vec::<&str>::new());
    }
}
