//! The rate-limit table: one item per bucket (an API key, under the key's hash; a
//! subscription's deliveries, under `deliveries#whk_…`), holding one counter per time slot of
//! the sliding window (attribute `s<slot index>`), removed by TTL once the bucket is idle.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::Client;

use super::expression::{Condition, Expression, Updates};
use super::{n, s, Item, StoreError};

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
            .client
            .update_item()
            .table_name(&self.table)
            .key("bucket", s(bucket))
            .expression(expression)
            .return_values(ReturnValue::AllNew)
            .send()
            .await?;
        Ok(slot_counts(output.attributes.as_ref()))
    }

    /// Takes back one request counted in `slot` (a refused request is not counted).
    pub async fn uncount(&self, bucket: &str, slot: u64) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("bucket", s(bucket))
            .expression(Expression::new().add(slot_attribute(slot), -1).when(Condition::exists(slot_attribute(slot))))
            .send()
            .await?;
        Ok(())
    }

    /// Removes the counters of `slots`.
    pub async fn drop_slots(&self, bucket: &str, slots: &[u64]) -> Result<(), StoreError> {
        let expression =
            slots.iter().fold(Expression::new(), |expression, slot| expression.remove(slot_attribute(*slot)));
        self.client
            .update_item()
            .table_name(&self.table)
            .key("bucket", s(bucket))
            .expression(expression)
            .send()
            .await?;
        Ok(())
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
