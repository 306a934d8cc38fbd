//! The deliveries table (contract section 9): partition `userId`, sort `deliveryId`, one
//! record per delivery, removed by TTL 30 days after its last change. Two local secondary
//! indexes serve the lists, newest first and strongly consistent: `bySubscription` (sort
//! key `whk_…#dlv_…`) and `byStatus` (sort key `whk_…#status#dlv_…`), so a subscription's
//! list, and its list of one status, cost what they return however long its history.

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::Client;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{is_condition_failure, n, s, Item, StoreError};
use crate::clock::{self, Timestamp};
use crate::delivery::log::{AttemptRecord, DeliveryRecord, DeliveryStatus, RETENTION};
use crate::delivery::DeliveryMessage;
use crate::events::EventKind;
use crate::ids::{DeliveryId, EventId, SubscriptionId, UserId};

const BY_SUBSCRIPTION: &str = "bySubscription";
const BY_STATUS: &str = "byStatus";

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
    /// Unix seconds; DynamoDB's TTL removes the record after it.
    expires_at: u64,
    subscription_key: String,
    status_key: String,
}

impl DeliveryItem {
    fn into_stored(self) -> StoredDelivery {
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
        };
        StoredDelivery { record, body: self.body }
    }
}

/// A record and the body it keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredDelivery {
    pub record: DeliveryRecord,
    pub body: String,
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

/// Unix seconds when a record changed at `at` expires.
fn expires_at(at: DateTime<Utc>) -> u64 {
    u64::try_from(at.timestamp()).unwrap_or_default() + RETENTION.as_secs()
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

    /// Records a delivery that no attempt has touched yet (a ping), with `status` `pending`
    /// or `skipped`. If an attempt got there first, the record as that attempt left it.
    pub async fn create(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        status: DeliveryStatus,
        at: DateTime<Utc>,
    ) -> Result<DeliveryRecord, StoreError> {
        let now = Timestamp::from_datetime(at);
        let item = DeliveryItem {
            user_id: message.user_id.clone(),
            delivery_id: message.delivery_id.clone(),
            subscription_id: message.subscription_id.clone(),
            event_id: message.event.id.clone(),
            event_type: message.event.kind(),
            created_at: now.clone(),
            status,
            attempts: 0,
            last_attempt_at: None,
            last_response_status: None,
            last_response_body: None,
            last_error: None,
            next_attempt_at: (status == DeliveryStatus::Pending).then(|| now.clone()),
            succeeded_at: None,
            body: String::from_utf8_lossy(body).into_owned(),
            expires_at: expires_at(at),
            subscription_key: subscription_key(&message.subscription_id, &message.delivery_id),
            status_key: status_key(&message.subscription_id, status, &message.delivery_id),
        };
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(&item)?))
            .condition_expression("attribute_not_exists(deliveryId)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(item.into_stored().record),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_conditional_check_failed_exception()) => {
                let existing = self.get(&message.user_id, &message.delivery_id).await?;
                existing.map(|stored| stored.record).ok_or(StoreError::Contention)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Records one attempt with one write, creating the record on the first: its outcome,
    /// the attempt count, and (first time only) the event and the exact body sent.
    pub async fn record_attempt(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        attempt: &AttemptRecord,
    ) -> Result<(), StoreError> {
        let mut set = vec!["attempts = if_not_exists(attempts, :zero) + :one", "lastAttemptAt = :at"];
        let mut remove = Vec::new();
        let mut update = self.upsert(message, body, attempt.status, attempt.at);
        match &attempt.response {
            Some((status, answer)) => {
                set.extend(["lastResponseStatus = :responseStatus", "lastResponseBody = :responseBody"]);
                update = update
                    .expression_attribute_values(":responseStatus", n(status))
                    .expression_attribute_values(":responseBody", s(answer));
            }
            None => remove.extend(["lastResponseStatus", "lastResponseBody"]),
        }
        match &attempt.error {
            Some(error) => {
                set.push("lastError = :error");
                update = update.expression_attribute_values(":error", s(error));
            }
            None => remove.push("lastError"),
        }
        match &attempt.next_attempt_at {
            Some(next) => {
                set.push("nextAttemptAt = :next");
                update = update.expression_attribute_values(":next", s(next));
            }
            None => remove.push("nextAttemptAt"),
        }
        if attempt.status == DeliveryStatus::Succeeded {
            set.push("succeededAt = :at");
        } else {
            remove.push("succeededAt");
        }
        update.update_expression(expression(&set, &remove)).expression_attribute_values(":one", n(1)).send().await?;
        Ok(())
    }

    /// Records that the delivery's turn came while its subscription was disabled (one
    /// write); the record as it now is.
    pub async fn record_skipped(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        at: DateTime<Utc>,
    ) -> Result<DeliveryRecord, StoreError> {
        let output = self
            .upsert(message, body, DeliveryStatus::Skipped, at)
            .update_expression(expression(
                &["attempts = if_not_exists(attempts, :zero)"],
                &["nextAttemptAt", "succeededAt"],
            ))
            .return_values(ReturnValue::AllNew)
            .send()
            .await?;
        Ok(stored_of(output.attributes)?.record)
    }

    /// An update that creates the record if needed and sets its status; callers add the rest.
    fn upsert(
        &self,
        message: &DeliveryMessage,
        body: &[u8],
        status: DeliveryStatus,
        at: DateTime<Utc>,
    ) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(&message.user_id))
            .key("deliveryId", s(&message.delivery_id))
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#body", "body")
            .expression_attribute_values(":status", s(status.as_str()))
            .expression_attribute_values(
                ":statusKey",
                s(status_key(&message.subscription_id, status, &message.delivery_id)),
            )
            .expression_attribute_values(":expires", n(expires_at(at)))
            .expression_attribute_values(":subscription", s(&message.subscription_id))
            .expression_attribute_values(":event", s(&message.event.id))
            .expression_attribute_values(":type", s(message.event.kind().as_str()))
            .expression_attribute_values(":at", s(clock::rfc3339(at)))
            .expression_attribute_values(":body", s(String::from_utf8_lossy(body)))
            .expression_attribute_values(
                ":subscriptionKey",
                s(subscription_key(&message.subscription_id, &message.delivery_id)),
            )
            .expression_attribute_values(":zero", n(0))
    }

    /// Marks the record `pending` for a manual retry, unless an attempt was recorded since it
    /// was read with `seen_attempts` (then `None`: the record has moved on by itself).
    pub async fn requeue(
        &self,
        user_id: &UserId,
        record: &DeliveryRecord,
        seen_attempts: u32,
        at: DateTime<Utc>,
    ) -> Result<Option<DeliveryRecord>, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("deliveryId", s(&record.id))
            .update_expression("SET #status = :pending, statusKey = :statusKey, nextAttemptAt = :now, expiresAt = :expires REMOVE succeededAt")
            .condition_expression("attempts = :seen")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":pending", s(DeliveryStatus::Pending.as_str()))
            .expression_attribute_values(":statusKey", s(status_key(&record.subscription_id, DeliveryStatus::Pending, &record.id)))
            .expression_attribute_values(":now", s(clock::rfc3339(at)))
            .expression_attribute_values(":expires", n(expires_at(at)))
            .expression_attribute_values(":seen", n(seen_attempts))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(output) => Ok(Some(stored_of(output.attributes)?.record)),
            Err(err) if is_condition_failure(&err) => Ok(None),
            Err(err) => Err(err.into()),
        }
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
        output.item.map(|item| stored_of(Some(item))).transpose()
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

/// `SET` the status, the index key, the expiry and (if the record is new) its identity and
/// body, plus `set`; `REMOVE` the attributes in `remove`.
fn expression(set: &[&str], remove: &[&str]) -> String {
    let mut expression = String::from(
        "SET #status = :status, statusKey = :statusKey, expiresAt = :expires, \
         subscriptionId = if_not_exists(subscriptionId, :subscription), \
         eventId = if_not_exists(eventId, :event), eventType = if_not_exists(eventType, :type), \
         createdAt = if_not_exists(createdAt, :at), #body = if_not_exists(#body, :body), \
         subscriptionKey = if_not_exists(subscriptionKey, :subscriptionKey)",
    );
    for clause in set {
        expression.push_str(", ");
        expression.push_str(clause);
    }
    if !remove.is_empty() {
        expression.push_str(" REMOVE ");
        expression.push_str(&remove.join(", "));
    }
    expression
}

fn stored_of(attributes: Option<Item>) -> Result<StoredDelivery, StoreError> {
    let item: DeliveryItem = serde_dynamo::from_item(attributes.unwrap_or_default())?;
    Ok(item.into_stored())
}
