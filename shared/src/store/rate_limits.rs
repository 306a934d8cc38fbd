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
        let count = output
            .attributes
            .as_ref()
            .and_then(|item| item.get("requests"))
            .and_then(|value| value.as_n().ok())
            .and_then(|text| text.parse().ok())
            .unwrap_or(u64::MAX);
        Ok(count)
    }
}
