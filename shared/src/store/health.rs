//! A subscription's health figures (contract section 20), in the deliveries table beside its
//! log: one item per subscription and UTC hour in the partition `whk_…#health` (apart from
//! the log's `whk_…#k` shards, so no list reads it), sort key the hour (`2026-12-07T20`).
//! The deliver function adds each batch's tally with one `UpdateItem` of `ADD`s (no read);
//! the API reads the newest hours with one `Query`. An item stays under 1 KB (one write unit:
//! three counters, the non-empty buckets of the histogram, three times), and expires with the
//! log's retention after its hour, so a subscription's figures reach as far back as its log:
//! the state `new` means nothing attempted in that time, and a longer chart needs nothing new.

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use super::deliveries::attributes::{DELIVERY_ID, EXPIRES_AT, LOG_PARTITION};
use super::expression::{Expression, Updates};
use super::{n, s, time, Item, StoreError};
use crate::clock::Timestamp;
use crate::delivery::log::RETENTION;
use crate::ids::SubscriptionId;
use crate::webhooks::health::{Hour, HourFigures, Tally, BUCKETS};

/// The partition's suffix after the subscription's id.
const PARTITION: &str = "health";
const ATTEMPTS: &str = "attempts";
const SUCCEEDED: &str = "succeeded";
const FAILED: &str = "failed";
/// The histogram's buckets are `ms0`, `ms1`, … (`webhooks::health::LATENCY_BOUNDS_MS`).
const BUCKET_PREFIX: &str = "ms";
const LAST_SUCCESS_AT: &str = "lastSuccessAt";
const LAST_FAILURE_AT: &str = "lastFailureAt";
/// The last time the subscription's rate limit refused an attempt (section 18).
const RATE_LIMITED_AT: &str = "rateLimitedAt";
/// How many hours a read takes: the 24 of the window and the one it starts in. Hours with
/// nothing have no item, so they reach further back for a quiet subscription.
const HOURS_READ: i32 = 25;

fn partition(subscription_id: &SubscriptionId) -> String {
    format!("{subscription_id}#{PARTITION}")
}

fn bucket(index: usize) -> String {
    format!("{BUCKET_PREFIX}{index}")
}

#[derive(Clone)]
pub struct HealthTable {
    client: Client,
    /// The same client, without retries, for the writes.
    once: Client,
    table: String,
}

impl HealthTable {
    /// The figures kept in the deliveries table `table`. Its writes are made once, never
    /// retried: one throttled on its item (a subscription past a partition's 1,000 writes a
    /// second, or the scale model's share of them) loses that batch's figures rather than hold
    /// the batch's deliveries back while the SDK backs off.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        let once = Client::from_conf(client.config().to_builder().retry_config(RetryConfig::disabled()).build());
        Self { client, once, table: table.into() }
    }

    /// Adds a batch's `tally` to the subscription's `hour`: one write, creating the item if
    /// the hour has none. The last times are set, not compared: two batches that end within
    /// a moment of each other may leave the earlier one's, which the figures can bear.
    pub async fn add(&self, subscription_id: &SubscriptionId, hour: Hour, tally: &Tally) -> Result<(), StoreError> {
        let mut expression = Expression::new().set(EXPIRES_AT, n((hour.start() + RETENTION).unix_seconds()));
        for (name, count) in [(ATTEMPTS, tally.attempts), (SUCCEEDED, tally.succeeded), (FAILED, tally.failed)] {
            if count > 0 {
                expression = expression.add(name, i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
        for (index, count) in tally.latency.iter().enumerate().filter(|(_, count)| **count > 0) {
            expression = expression.add(bucket(index), i64::try_from(*count).unwrap_or(i64::MAX));
        }
        let times = [
            (LAST_SUCCESS_AT, tally.last_success_at),
            (LAST_FAILURE_AT, tally.last_failure_at),
            (RATE_LIMITED_AT, tally.rate_limited_at),
        ];
        for (name, at) in times {
            if let Some(at) = at {
                expression = expression.set(name, time(at));
            }
        }
        self.once
            .update_item()
            .table_name(&self.table)
            .key(LOG_PARTITION, s(partition(subscription_id)))
            .key(DELIVERY_ID, s(hour.key()))
            .expression(expression)
            .send()
            .await?;
        Ok(())
    }

    /// The subscription's newest hours of figures, newest first: one `Query` of at most
    /// [`HOURS_READ`] items, eventually consistent (about 2 read units).
    pub async fn recent(&self, subscription_id: &SubscriptionId) -> Result<Vec<HourFigures>, StoreError> {
        let output = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("#partition = :p")
            .expression_attribute_names("#partition", LOG_PARTITION)
            .expression_attribute_values(":p", s(partition(subscription_id)))
            .scan_index_forward(false)
            .limit(HOURS_READ)
            .send()
            .await?;
        output.items.unwrap_or_default().iter().map(figures_of).collect()
    }
}

/// An item's figures.
fn figures_of(item: &Item) -> Result<HourFigures, StoreError> {
    let mapping = |what: String| StoreError::Mapping(serde::de::Error::custom(what));
    let hour = match item.get(DELIVERY_ID) {
        Some(AttributeValue::S(key)) => Hour::parse(key),
        _ => None,
    };
    let hour = hour.ok_or_else(|| mapping(format!("not an hour of health figures: {:?}", item.get(DELIVERY_ID))))?;
    let count = |name: &str| match item.get(name) {
        Some(AttributeValue::N(number)) => number.parse::<u64>().map_err(|_| mapping(format!("{name}: {number}"))),
        _ => Ok(0),
    };
    let at = |name: &str| match item.get(name) {
        Some(AttributeValue::S(text)) => {
            Timestamp::parse(text).map(Some).ok_or_else(|| mapping(format!("{name}: {text}")))
        }
        _ => Ok(None),
    };
    let mut latency = [0; BUCKETS];
    for (index, slot) in latency.iter_mut().enumerate() {
        *slot = count(&bucket(index))?;
    }
    let tally = Tally {
        attempts: count(ATTEMPTS)?,
        succeeded: count(SUCCEEDED)?,
        failed: count(FAILED)?,
        latency,
        last_success_at: at(LAST_SUCCESS_AT)?,
        last_failure_at: at(LAST_FAILURE_AT)?,
        rate_limited_at: at(RATE_LIMITED_AT)?,
    };
    Ok(HourFigures { hour, tally })
}
