//! The data key of the sealed webhook secrets (see `sealing`), stored only as KMS encrypted
//! it: one item of the webhooks table, in a partition of its own (no user's subscription
//! sorts as `#…`), written once and never changed.

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use super::conditional::applied;
use super::expression::{Condition, Conditional};
use super::{s, time, StoreError};
use crate::clock::Timestamp;

/// The item's key: its partition and sort key values.
const DATA_KEY_ITEM: (&str, &str) = ("#service", "#secrets-data-key");

#[derive(Clone)]
pub struct DataKeyStore {
    client: Client,
    table: String,
}

impl DataKeyStore {
    /// The data key's item in the webhooks table `table`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// The data key as KMS encrypted it, if it was created.
    pub async fn get(&self) -> Result<Option<Vec<u8>>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("userId", s(DATA_KEY_ITEM.0))
            .key("subscriptionId", s(DATA_KEY_ITEM.1))
            .consistent_read(true)
            .send()
            .await?;
        match output.item.as_ref().and_then(|item| item.get("encryptedKey")) {
            Some(AttributeValue::B(blob)) => Ok(Some(blob.clone().into_inner())),
            _ => Ok(None),
        }
    }

    /// Stores the encrypted data key unless one exists; `false` when one did.
    pub async fn insert(&self, encrypted: &[u8], created_at: Timestamp) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("userId", s(DATA_KEY_ITEM.0))
            .item("subscriptionId", s(DATA_KEY_ITEM.1))
            .item("encryptedKey", AttributeValue::B(Blob::new(encrypted)))
            .item("createdAt", time(created_at))
            .condition(Condition::absent("subscriptionId"))
            .send()
            .await;
        applied(result)
    }
}
