//! A turn of the delivery function and its record: the claim (lease) it holds while it
//! sends, the plan's view of the record, and the one write that records each attempt (or
//! why none was made), or hands the claim on to a newer round.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Deserialize;

use super::super::body::KeptBody;
use super::super::conditional::applied;
use super::super::expression::{Condition, Expression, Projection, Projects, Updates};
use super::super::{n, s, time, Item, StoreError};
use super::attributes::{
    ATTEMPTS, BODY, BODY_DEFLATED, CREATED_AT, DELIVERY_ID, DUE_SHARD, EVENT_ID, EVENT_TYPE, EXPIRES_AT, GENERATION,
    LAST_ATTEMPT_AT, LAST_ERROR, LAST_RESPONSE_BODY, LAST_RESPONSE_STATUS, LEASE_UNTIL, NEXT_ATTEMPT_AT,
    ROUND_ATTEMPTS, STATUS, SUBSCRIPTION_ID, SUCCEEDED_AT, USER_ID,
};
use super::record::{stored_of, StoredDelivery};
use super::sweep::{due_shard, parked_shard};
use super::{expires_at, has_status, with_status_key, DeliveryTable, RecordKey};
use crate::clock::Timestamp;
use crate::delivery::log::{AttemptRecord, DeliveryStatus};
use crate::delivery::plan::{self, Claim, Lease, NotSent, RecordState};
use crate::delivery::DeliveryMessage;

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
pub(super) fn lease_free(now: Timestamp) -> Condition {
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

impl DeliveryTable {
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
}
