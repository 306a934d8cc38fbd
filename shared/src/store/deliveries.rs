//! The deliveries table (contract sections 9 and 12): partition `userId`, sort `deliveryId`,
//! one record per delivery, removed by TTL 30 days after its last change. The record is the
//! source of truth; the queues only carry work. Two local secondary indexes serve the lists,
//! newest first and strongly consistent: `bySubscription` (sort key `whk_…#dlv_…`) and
//! `byStatus` (sort key `whk_…#status#dlv_…`), so a subscription's list, its list of one
//! status and a recovery's window cost what they return however long its history. A sparse,
//! keys-only global index `byDue` (partition `dueShard`, one of [`DUE_SHARDS`], sort
//! `nextAttemptAt`) holds only the `pending` records, so the sweep reads what is overdue and
//! nothing else, and its writes spread over the shards at any event rate.
//!
//! A turn of the delivery function claims its record before it sends (`leaseUntil`, see
//! `delivery::plan::Lease`): a plain attribute, in no index key, so a claim changes no key.

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use super::conditional::{applied, held};
use super::expression::{Condition, Conditional, Expression, Updates};
use super::{n, s, time, Item, StoreError};
use crate::clock::{self, Timestamp};
use crate::delivery::log::{AttemptRecord, DeliveryRecord, DeliveryStatus, RETENTION};
use crate::delivery::plan::{self, Claim, Lease, RecordState, SkipReason};
use crate::delivery::DeliveryMessage;
use crate::events::EventKind;
use crate::ids::{self, DeliveryId, EventId, SubscriptionId, UserId};

const BY_SUBSCRIPTION: &str = "bySubscription";
const BY_STATUS: &str = "byStatus";
/// The sweep's index: only `pending` records carry its partition key, `dueShard`.
pub const BY_DUE: &str = "byDue";
/// How many partitions the due index spreads its writes over.
pub const DUE_SHARDS: u8 = 16;
/// The attributes that writes name, beside the keys.
const STATUS: &str = "status";
const STATUS_KEY: &str = "statusKey";
const GENERATION: &str = "generation";
const NEXT_ATTEMPT_AT: &str = "nextAttemptAt";
const DUE_SHARD: &str = "dueShard";
const SUCCEEDED_AT: &str = "succeededAt";
const LEASE_UNTIL: &str = "leaseUntil";
const LAST_ERROR: &str = "lastError";
const EXPIRES_AT: &str = "expiresAt";

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeliveryItem {
    user_id: UserId,
    delivery_id: DeliveryId,
    subscription_id: SubscriptionId,
    event_id: EventId,
    event_type: EventKind,
    created_at: Timestamp,
    status: DeliveryStatus,
    attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_attempt_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_response_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_response_body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    succeeded_at: Option<Timestamp>,
    /// The exact body that was signed and sent (a JSON text), for manual retries.
    body: String,
    /// DynamoDB's TTL removes the record after it; stored as Unix seconds, as TTL wants.
    #[serde(with = "clock::unix_seconds")]
    expires_at: Timestamp,
    subscription_key: String,
    status_key: String,
    /// Which message may send (contract section 12); moved on by a success, a manual retry,
    /// a recovery or a sweep.
    #[serde(default)]
    generation: u32,
    /// Attempts since the schedule last started (fan-out, manual retry or recovery).
    #[serde(default)]
    round_attempts: u32,
    /// The due index's partition; present only while `pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    due_shard: Option<String>,
}

impl DeliveryItem {
    /// A record no attempt has touched: `pending` (due now) or `skipped` (its subscription
    /// is disabled). Its `createdAt` is its event's, the time inside its id, so a time window
    /// is a range of ids.
    fn new(message: &DeliveryMessage, body: &[u8], status: DeliveryStatus, at: Timestamp) -> Self {
        let pending = status == DeliveryStatus::Pending;
        let skipped = status == DeliveryStatus::Skipped;
        DeliveryItem {
            user_id: message.user_id.clone(),
            delivery_id: message.delivery_id.clone(),
            subscription_id: message.subscription_id.clone(),
            event_id: message.event.id.clone(),
            event_type: message.event.kind(),
            created_at: message.event.created_at,
            status,
            attempts: 0,
            last_attempt_at: None,
            last_response_status: None,
            last_response_body: None,
            last_error: skipped.then(|| SkipReason::Disabled.to_string()),
            next_attempt_at: pending.then_some(at),
            succeeded_at: None,
            body: String::from_utf8_lossy(body).into_owned(),
            expires_at: expires_at(at),
            subscription_key: subscription_key(&message.subscription_id, &message.delivery_id),
            status_key: status_key(&message.subscription_id, status, &message.delivery_id),
            generation: message.generation,
            round_attempts: 0,
            due_shard: pending.then(|| due_shard(&message.delivery_id)),
        }
    }
}

impl DeliveryItem {
    fn into_stored(self) -> StoredDelivery {
        let (user_id, generation) = (self.user_id.clone(), self.generation);
        let record = DeliveryRecord {
            id: self.delivery_id,
            subscription_id: self.subscription_id,
            event_id: self.event_id,
            event_type: self.event_type,
            created_at: self.created_at,
            status: self.status,
            attempts: self.attempts,
            last_attempt_at: self.last_attempt_at,
            last_response_status: self.last_response_status,
            last_response_body: self.last_response_body,
            last_error: self.last_error,
            next_attempt_at: self.next_attempt_at,
            succeeded_at: self.succeeded_at,
            body: self.body,
        };
        StoredDelivery { record, user_id, generation }
    }
}

/// A record (with the body it keeps), its owner and its generation.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredDelivery {
    pub record: DeliveryRecord,
    pub user_id: UserId,
    pub generation: u32,
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
        })
    }
}

/// A pending record the sweep found overdue: its key and when it was due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overdue {
    pub user_id: UserId,
    pub delivery_id: DeliveryId,
    pub next_attempt_at: Timestamp,
}

/// One page of a list and the id of its last record when more follow.
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryRecord>,
    pub last_id_if_more: Option<DeliveryId>,
}

fn subscription_key(subscription_id: &SubscriptionId, delivery_id: &DeliveryId) -> String {
    format!("{subscription_id}#{delivery_id}")
}

fn status_key(subscription_id: &SubscriptionId, status: DeliveryStatus, delivery_id: &DeliveryId) -> String {
    format!("{subscription_id}#{}#{delivery_id}", status.as_str())
}

/// The due index partition of a delivery: from its id's random part, so spread evenly.
fn due_shard(delivery_id: &DeliveryId) -> String {
    let last = delivery_id.as_str().bytes().last().unwrap_or_default();
    (last % DUE_SHARDS).to_string()
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
    /// all at once: a fan-out has at most 25 (one per subscription of a user).
    pub async fn insert_new(
        &self,
        messages: &[(&DeliveryMessage, DeliveryStatus)],
        at: Timestamp,
    ) -> Result<Vec<bool>, StoreError> {
        let items: Vec<DeliveryItem> =
            messages.iter().map(|(message, status)| DeliveryItem::new(message, &message.body(), *status, at)).collect();
        futures_util::future::try_join_all(items.iter().map(|item| self.put_new(item))).await
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
            return Ok(item.into_stored().record);
        }
        let existing = self.get(&message.user_id, &message.delivery_id).await?;
        existing.map(|stored| stored.record).ok_or(StoreError::Contention)
    }

    /// Writes `item` unless its delivery has a record already; whether it did.
    async fn put_new(&self, item: &DeliveryItem) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(item)?))
            .condition(Condition::absent("deliveryId"))
            .send()
            .await;
        applied(result)
    }

    /// Claims the record for a turn of `message` at `now` under `lease`, in one conditional
    /// write that holds only while the record is `pending`, of the message's generation, due
    /// (see [`plan::due_by`]) and under no other turn's claim; the record as the write left
    /// it. A refused claim reads the record, so the plan can tell why.
    pub async fn claim(&self, message: &DeliveryMessage, lease: Lease, now: Timestamp) -> Result<Claim, StoreError> {
        let claimable = Condition::exists("deliveryId")
            .and(same_generation(message.generation))
            .and(Condition::equals(STATUS, s(DeliveryStatus::Pending.as_str())))
            .and(lease_free(now))
            .and(Condition::absent(NEXT_ATTEMPT_AT).or(Condition::below(NEXT_ATTEMPT_AT, time(plan::due_by(now)))));
        let expression = Expression::new().set(LEASE_UNTIL, time(lease.until)).when(claimable);
        if let Some(item) = self.update_returning(&message.user_id, &message.delivery_id, expression).await? {
            return Ok(Claim::Held { record: state_of(item)?, lease });
        }
        Ok(match self.state(&message.user_id, &message.delivery_id).await? {
            Some(record) => Claim::Refused(record),
            None => Claim::Unwritten,
        })
    }

    /// Gives up a turn's claim (its message goes on elsewhere), unless another holds it by now.
    pub async fn release(&self, message: &DeliveryMessage, lease: Lease) -> Result<(), StoreError> {
        let expression = Expression::new().remove(LEASE_UNTIL).when(Condition::equals(LEASE_UNTIL, time(lease.until)));
        applied(self.record_update(&message.user_id, &message.delivery_id).expression(expression).send().await)?;
        Ok(())
    }

    /// What the delivery plan needs of a record: its generation, status, round, due time and
    /// claim.
    async fn state(&self, user_id: &UserId, delivery_id: &DeliveryId) -> Result<Option<RecordState>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("deliveryId", s(delivery_id))
            .projection_expression("generation, #status, roundAttempts, nextAttemptAt, leaseUntil")
            .expression_attribute_names("#status", "status")
            .consistent_read(true)
            .send()
            .await?;
        output.item.map(state_of).transpose()
    }

    /// Records one attempt with one write, while the record is still of the message's
    /// generation and under the turn's claim (creating it if a message queued before records
    /// came first finds none, which has no claim): its outcome, the attempt counts, and
    /// (first time only) the event and the body sent; the claim ends with it. `false` when
    /// another generation owns the record: the attempt is not recorded.
    pub async fn record_attempt(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        attempt: &AttemptRecord,
        lease: Option<Lease>,
    ) -> Result<bool, StoreError> {
        let mut expression = upsert(message, body, attempt.status, attempt.at)
            .add("attempts", 1)
            .add("roundAttempts", 1)
            .set("lastAttemptAt", time(attempt.at))
            .remove(LEASE_UNTIL);
        if attempt.advance_generation {
            expression = expression.set(GENERATION, n(message.generation + 1));
        }
        expression = match &attempt.response {
            Some((status, answer)) => {
                expression.set("lastResponseStatus", n(status)).set("lastResponseBody", s(answer))
            }
            None => expression.remove("lastResponseStatus").remove("lastResponseBody"),
        };
        expression = match &attempt.error {
            Some(error) => expression.set(LAST_ERROR, s(error)),
            None => expression.remove(LAST_ERROR),
        };
        // Only pending records, which have a next attempt, are in the due index.
        expression = match attempt.next_attempt_at {
            Some(next) => {
                expression.set(NEXT_ATTEMPT_AT, time(next)).set(DUE_SHARD, s(due_shard(&message.delivery_id)))
            }
            None => expression.remove(NEXT_ATTEMPT_AT).remove(DUE_SHARD),
        };
        expression = match attempt.status {
            DeliveryStatus::Succeeded => expression.set(SUCCEEDED_AT, time(attempt.at)),
            _ => expression.remove(SUCCEEDED_AT),
        };
        let held = match lease {
            Some(lease) => same_generation(message.generation).and(Condition::equals(LEASE_UNTIL, time(lease.until))),
            None => same_generation(message.generation),
        };
        applied(
            self.record_update(&message.user_id, &message.delivery_id).expression(expression.when(held)).send().await,
        )
    }

    /// Records that the delivery's turn came while its subscription could not take it (one
    /// write, while the record is of the message's generation), `reason` its `lastError`;
    /// any claim ends with it. `false` when another generation owns it.
    pub async fn record_skipped(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        at: Timestamp,
        reason: SkipReason,
    ) -> Result<bool, StoreError> {
        let expression = upsert(message, body, DeliveryStatus::Skipped, at)
            .set_if_absent("attempts", n(0))
            .set(LAST_ERROR, s(reason.to_string()))
            .remove(NEXT_ATTEMPT_AT)
            .remove(SUCCEEDED_AT)
            .remove(DUE_SHARD)
            .remove(LEASE_UNTIL)
            .when(same_generation(message.generation));
        applied(self.record_update(&message.user_id, &message.delivery_id).expression(expression).send().await)
    }

    /// Starts the delivery's schedule again (a manual retry or a recovery): `pending`, due
    /// now, a new round, the next generation (added in the write, so concurrent restarts all
    /// apply and the last one's message is the one that sends). Only while the record exists
    /// and, when `if_status` is given, still has that status; else `None`. The record as it
    /// now is, with its new generation. A claim in progress is left to end: the new round's
    /// first attempt waits for it, so no two sends of one delivery overlap.
    pub async fn restart(
        &self,
        seen: &StoredDelivery,
        if_status: Option<DeliveryStatus>,
        at: Timestamp,
    ) -> Result<Option<StoredDelivery>, StoreError> {
        let record = &seen.record;
        let pending = DeliveryStatus::Pending;
        let mut condition = Condition::exists("deliveryId");
        if let Some(status) = if_status {
            condition = condition.and(Condition::equals(STATUS, s(status.as_str())));
        }
        let expression = Expression::new()
            .set(STATUS, s(pending.as_str()))
            .set(STATUS_KEY, s(status_key(&record.subscription_id, pending, &record.id)))
            .set(NEXT_ATTEMPT_AT, time(at))
            .set(EXPIRES_AT, n(expires_at(at).unix_seconds()))
            .add(GENERATION, 1)
            .set("roundAttempts", n(0))
            .set(DUE_SHARD, s(due_shard(&record.id)))
            .remove(SUCCEEDED_AT)
            .when(condition);
        self.update_returning(&seen.user_id, &record.id, expression).await?.map(stored_of).transpose()
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
        let still_overdue = Condition::equals(STATUS, s(DeliveryStatus::Pending.as_str()))
            .and(Condition::below(NEXT_ATTEMPT_AT, time(cutoff)))
            .and(lease_free(now));
        let expression = Expression::new()
            .set(NEXT_ATTEMPT_AT, time(now))
            .add(GENERATION, 1)
            .remove(LEASE_UNTIL)
            .when(still_overdue);
        self.update_returning(&overdue.user_id, &overdue.delivery_id, expression).await?.map(stored_of).transpose()
    }

    /// An update of one record; callers add the expression and its condition.
    fn record_update(&self, user_id: &UserId, delivery_id: &DeliveryId) -> UpdateItemFluentBuilder {
        self.client.update_item().table_name(&self.table).key("userId", s(user_id)).key("deliveryId", s(delivery_id))
    }

    /// Applies `expression` to one record: the item it leaves, or `None` when its condition
    /// did not hold.
    async fn update_returning(
        &self,
        user_id: &UserId,
        delivery_id: &DeliveryId,
        expression: Expression,
    ) -> Result<Option<Item>, StoreError> {
        let result = self
            .record_update(user_id, delivery_id)
            .expression(expression)
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        Ok(held(result)?.map(|output| output.attributes.unwrap_or_default()))
    }

    /// The `pending` records due before `cutoff`, at most `limit` of each due shard, through
    /// the sparse due index: what it reads is what is overdue, however large the log.
    pub async fn overdue(&self, cutoff: Timestamp, limit: u32) -> Result<Vec<Overdue>, StoreError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Key {
            user_id: UserId,
            delivery_id: DeliveryId,
            next_attempt_at: Timestamp,
        }
        let mut found = Vec::new();
        for shard in 0..DUE_SHARDS {
            let output = self
                .client
                .query()
                .table_name(&self.table)
                .index_name(BY_DUE)
                .key_condition_expression("dueShard = :shard AND nextAttemptAt < :cutoff")
                .expression_attribute_values(":shard", s(shard.to_string()))
                .expression_attribute_values(":cutoff", time(cutoff))
                .limit(i32::try_from(limit).unwrap_or(i32::MAX))
                .send()
                .await?;
            let keys: Vec<Key> = serde_dynamo::from_items(output.items.unwrap_or_default())?;
            found.extend(keys.into_iter().map(|key| Overdue {
                user_id: key.user_id,
                delivery_id: key.delivery_id,
                next_attempt_at: key.next_attempt_at,
            }));
        }
        Ok(found)
    }

    /// The subscription's `failed` and `skipped` records created in `[since, until)`, oldest
    /// first, at most `limit` + 1 (the extra one says more follow), through the status index:
    /// a record's `createdAt` is the time inside its id, so the window is a range of keys.
    pub async fn recoverable(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        since: Timestamp,
        until: Timestamp,
        limit: u32,
    ) -> Result<Vec<StoredDelivery>, StoreError> {
        let (first, end) = (ids::first_id_at(ids::DELIVERY, since), ids::first_id_at(ids::DELIVERY, until));
        let mut found = Vec::new();
        for status in [DeliveryStatus::Failed, DeliveryStatus::Skipped] {
            let prefix = format!("{subscription_id}#{}#", status.as_str());
            let (mut start, mut of_status) = (None, 0);
            loop {
                let output = self
                    .client
                    .query()
                    .table_name(&self.table)
                    .index_name(BY_STATUS)
                    .key_condition_expression("userId = :u AND statusKey BETWEEN :first AND :last")
                    .expression_attribute_values(":u", s(user_id))
                    .expression_attribute_values(":first", s(format!("{prefix}{first}")))
                    // Ids below `end`: every id made before `until` sorts under `end`'s text.
                    .expression_attribute_values(":last", s(format!("{prefix}{end}")))
                    .consistent_read(true)
                    .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX))
                    .set_exclusive_start_key(start)
                    .send()
                    .await?;
                let items: Vec<DeliveryItem> = serde_dynamo::from_items(output.items.unwrap_or_default())?;
                let in_window: Vec<StoredDelivery> = items
                    .into_iter()
                    .map(DeliveryItem::into_stored)
                    .filter(|d| (since..until).contains(&d.record.created_at))
                    .collect();
                of_status += in_window.len();
                found.extend(in_window);
                start = output.last_evaluated_key;
                if start.is_none() || of_status > limit as usize {
                    break;
                }
            }
        }
        found.sort_by(|a, b| a.record.id.cmp(&b.record.id));
        found.truncate(limit as usize + 1);
        Ok(found)
    }

    pub async fn get(&self, user_id: &UserId, delivery_id: &DeliveryId) -> Result<Option<StoredDelivery>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("deliveryId", s(delivery_id))
            .consistent_read(true)
            .send()
            .await?;
        output.item.map(stored_of).transpose()
    }

    /// Newest first, `limit` records of the subscription (of one `status`, if given) after
    /// `after` (a delivery id from the previous page).
    pub async fn list(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        status: Option<DeliveryStatus>,
        limit: u32,
        after: Option<&DeliveryId>,
    ) -> Result<DeliveryPage, StoreError> {
        let (index, sort_key, prefix) = match status {
            Some(status) => (BY_STATUS, "statusKey", format!("{subscription_id}#{}#", status.as_str())),
            None => (BY_SUBSCRIPTION, "subscriptionKey", format!("{subscription_id}#")),
        };
        let start_key = after.map(|id| {
            Item::from([
                ("userId".into(), s(user_id)),
                ("deliveryId".into(), s(id)),
                (sort_key.into(), s(format!("{prefix}{id}"))),
            ])
        });
        // One extra record tells whether another page follows, so the last page says so.
        let output = self
            .client
            .query()
            .table_name(&self.table)
            .index_name(index)
            .key_condition_expression("userId = :u AND begins_with(#sortKey, :prefix)")
            .expression_attribute_names("#sortKey", sort_key)
            .expression_attribute_values(":u", s(user_id))
            .expression_attribute_values(":prefix", s(prefix))
            .scan_index_forward(false)
            .consistent_read(true)
            .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start_key)
            .send()
            .await?;
        let items: Vec<DeliveryItem> = serde_dynamo::from_items(output.items.unwrap_or_default())?;
        let records = items.into_iter().map(|item| item.into_stored().record).collect();
        let (deliveries, last_id_if_more) = super::one_page(records, limit, |d: &DeliveryRecord| &d.id);
        Ok(DeliveryPage { deliveries, last_id_if_more })
    }
}

/// The start of every attempt's update, which creates the record if needed: `SET` the
/// status, its index key, the expiry and (if the record is new) its identity and body.
fn upsert(message: &DeliveryMessage, body: &[u8], status: DeliveryStatus, at: Timestamp) -> Expression {
    Expression::new()
        .set(STATUS, s(status.as_str()))
        .set(STATUS_KEY, s(status_key(&message.subscription_id, status, &message.delivery_id)))
        .set(EXPIRES_AT, n(expires_at(at).unix_seconds()))
        .set_if_absent("subscriptionId", s(&message.subscription_id))
        .set_if_absent("eventId", s(&message.event.id))
        .set_if_absent("eventType", s(message.event.kind().as_str()))
        .set_if_absent("createdAt", time(at))
        .set_if_absent("body", s(String::from_utf8_lossy(body)))
        .set_if_absent("subscriptionKey", s(subscription_key(&message.subscription_id, &message.delivery_id)))
}

/// The record is still the one of the message's generation (a record written before
/// generations has none, which is generation zero).
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
        round_attempts: u32,
        next_attempt_at: Option<Timestamp>,
        lease_until: Option<Timestamp>,
    }
    let item: StateItem = serde_dynamo::from_item(item)?;
    Ok(RecordState {
        generation: item.generation,
        status: item.status,
        round_attempts: item.round_attempts,
        next_attempt_at: item.next_attempt_at,
        lease_until: item.lease_until,
    })
}

fn stored_of(item: Item) -> Result<StoredDelivery, StoreError> {
    let item: DeliveryItem = serde_dynamo::from_item(item)?;
    Ok(item.into_stored())
}
