//! The API keys table: one item per key, keyed by the key's SHA-256.

use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use super::conditional::applied;
use super::expression::{Condition, Conditional, Expression, Updates};
use super::{s, StoreError};
use crate::clock::Timestamp;
use crate::credentials::KeyHash;
use crate::ids::UserId;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredKey {
    pub key_hash: String,
    pub user_id: UserId,
    pub scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Timestamp>,
    /// From this time on the key is refused (contract section 2); `None`: it never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

#[derive(Clone)]
pub struct KeyTable {
    client: Client,
    table: String,
}

impl KeyTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    pub async fn get(&self, hash: &KeyHash) -> Result<Option<StoredKey>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("keyHash", s(hash.as_str()))
            .consistent_read(true)
            .send()
            .await?;
        Ok(output.item.map(serde_dynamo::from_item).transpose()?)
    }

    pub async fn insert(&self, key: &StoredKey) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(key)?))
            .condition(Condition::absent("keyHash"))
            .send()
            .await?;
        Ok(())
    }

    /// Marks a key revoked; `false` when there is no such key.
    pub async fn revoke(&self, hash: &KeyHash, at: &Timestamp) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("keyHash", s(hash.as_str()))
            .expression(Expression::new().set_if_absent("revokedAt", s(at)).when(Condition::exists("keyHash")))
            .send()
            .await;
        applied(result)
    }
}
