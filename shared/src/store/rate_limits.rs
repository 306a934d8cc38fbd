//! The rate-limit table: one item per bucket (an API key, under the key's hash; a
//! subscription's deliveries, under `deliveries#whk_…`), holding one counter per time slot of
//! the sliding window (attribute `s<slot index>`), removed by TTL once the bucket is idle.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use aws_sdk_dynamodb::config::interceptors::InterceptorContext;
use aws_sdk_dynamodb::config::retry::{ClassifyRetry, RetryAction};
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::Client;

use super::conditional::applied;
use super::expression::{Condition, Expression, Updates};
use super::{n, s, time, Item, StoreError};
use crate::clock::Timestamp;

/// Until when a subscription's one open send may last.
const OPEN_UNTIL: &str = "openUntil";

/// Requests counted per slot index.
pub type SlotCounts = BTreeMap<u64, u64>;

#[derive(Clone)]
pub struct RateLimitTable {
    client: Client,
    table: String,
}

impl RateLimitTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// Every slot's count for `bucket`, without counting.
    pub async fn current(&self, bucket: &str) -> Result<SlotCounts, StoreError> {
        let output = self.client.get_item().table_name(&self.table).key("bucket", s(bucket)).send().await?;
        Ok(slot_counts(output.item.as_ref()))
    }

    /// In one atomic write: counts one request in `slot`, drops the counters of the `expired`
    /// slots, and keeps the item until `expires_at` (unix seconds). Returns every slot's count.
    ///
    /// The write is an `ADD`, so an attempt that DynamoDB applies but answers too late must
    /// not be sent again (the request would count twice): the count has one attempt of the
    /// whole call's time limit and is retried only after an answer ([`AnsweredOnly`]).
    pub async fn count(
        &self,
        bucket: &str,
        slot: u64,
        expired: RangeInclusive<u64>,
        expires_at: u64,
    ) -> Result<SlotCounts, StoreError> {
        let expression = expired
            .fold(Expression::new().add(slot_attribute(slot), 1).set("expiresAt", n(expires_at)), |expression, old| {
                expression.remove(slot_attribute(old))
            });
        let output = self
            .of_bucket(bucket)
            .expression(expression)
            .return_values(ReturnValue::AllNew)
            .customize()
            .config_override(self.one_attempt_per_answer())
            .send()
            .await?;
        Ok(slot_counts(output.attributes.as_ref()))
    }

    /// The client's time limits with one attempt as long as the whole call, and
    /// [`AnsweredOnly`] retries.
    fn one_attempt_per_answer(&self) -> aws_sdk_dynamodb::config::Builder {
        let limits = self.client.config().timeout_config().cloned().unwrap_or_else(TimeoutConfig::disabled);
        let mut one_attempt = limits.to_builder();
        one_attempt.set_operation_attempt_timeout(limits.operation_timeout());
        aws_sdk_dynamodb::config::Builder::default().timeout_config(one_attempt.build()).retry_classifier(AnsweredOnly)
    }

    /// Takes back one request counted in `slot` (a refused request is not counted): an `ADD`
    /// too, sent as [`RateLimitTable::count`] is.
    pub async fn uncount(&self, bucket: &str, slot: u64) -> Result<(), StoreError> {
        self.of_bucket(bucket)
            .expression(Expression::new().add(slot_attribute(slot), -1).when(Condition::exists(slot_attribute(slot))))
            .customize()
            .config_override(self.one_attempt_per_answer())
            .send()
            .await?;
        Ok(())
    }

    /// Opens `bucket`'s one send until `until` (a failing subscription's, contract section 22),
    /// unless another is open and has not lapsed at `now`: whether it opened. The item goes
    /// by TTL once the send could not last any longer.
    pub async fn open_send(&self, bucket: &str, until: Timestamp, now: Timestamp) -> Result<bool, StoreError> {
        let expression = Expression::new()
            .set(OPEN_UNTIL, time(until))
            .set("expiresAt", n(until.unix_seconds() + 1))
            .when(Condition::absent(OPEN_UNTIL).or(Condition::below(OPEN_UNTIL, time(now))));
        applied(self.of_bucket(bucket).expression(expression).send().await)
    }

    /// Closes the send [`RateLimitTable::open_send`] opened until `until`, so the next may
    /// start at once; one opened since (this one lapsed) stays open.
    pub async fn close_send(&self, bucket: &str, until: Timestamp) -> Result<(), StoreError> {
        let expression = Expression::new().remove(OPEN_UNTIL).when(Condition::equals(OPEN_UNTIL, time(until)));
        applied(self.of_bucket(bucket).expression(expression).send().await)?;
        Ok(())
    }

    /// An update of `bucket`'s item.
    fn of_bucket(&self, bucket: &str) -> UpdateItemFluentBuilder {
        self.client.update_item().table_name(&self.table).key("bucket", s(bucket))
    }

    /// Removes the counters of `slots`.
    pub async fn drop_slots(&self, bucket: &str, slots: &[u64]) -> Result<(), StoreError> {
        let expression =
            slots.iter().fold(Expression::new(), |expression, slot| expression.remove(slot_attribute(*slot)));
        self.of_bucket(bucket).expression(expression).send().await?;
        Ok(())
    }
}

/// Retries only attempts that DynamoDB answered (throttled, say), never one that timed out
/// (it may have been applied all the same).
#[derive(Debug)]
struct AnsweredOnly;

impl ClassifyRetry for AnsweredOnly {
    fn classify_retry(&self, ctx: &InterceptorContext) -> RetryAction {
        match ctx.output_or_error() {
            Some(Err(error)) if error.is_timeout_error() => RetryAction::RetryForbidden,
            _ => RetryAction::NoActionIndicated,
        }
    }

    fn name(&self) -> &'static str {
        "no retry of a timed-out count"
    }
}

fn slot_attribute(slot: u64) -> String {
    format!("s{slot}")
}

fn slot_counts(item: Option<&Item>) -> SlotCounts {
    let Some(item) = item else { return SlotCounts::new() };
    item.iter()
        .filter_map(|(name, value)| {
            let slot = name.strip_prefix('s')?.parse().ok()?;
            let count: i64 = value.as_n().ok()?.parse().ok()?;
            Some((slot, count.max(0) as u64))
        })
        .collect()
}
