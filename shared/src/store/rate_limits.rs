//! The rate-limit table: one counter item per key and minute, expired by TTL.

use aws_sdk_dynamodb::types::ReturnValue;
use aws_sdk_dynamodb::Client;

use super::{n, s, StoreError};

#[derive(Clone)]
pub struct RateLimitTable {
    client: Client,
    table: String,
}

impl RateLimitTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// The count in `bucket` so far, without counting.
    pub async fn current(&self, bucket: &str) -> Result<u64, StoreError> {
        let output = self.client.get_item().table_name(&self.table).key("bucket", s(bucket)).send().await?;
        Ok(requests(output.item.as_ref()).unwrap_or(0))
    }

    /// Atomically counts one request in `bucket` and returns the new count.
    pub async fn count(&self, bucket: &str, expires_at: u64) -> Result<u64, StoreError> {
        let output = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("bucket", s(bucket))
            .update_expression("ADD requests :one SET expiresAt = if_not_exists(expiresAt, :exp)")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":exp", n(expires_at))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await?;
        Ok(requests(output.attributes.as_ref()).unwrap_or(u64::MAX))
    }
}

fn requests(item: Option<&super::Item>) -> Option<u64> {
    item?.get("requests")?.as_n().ok()?.parse().ok()
}
