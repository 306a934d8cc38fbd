//! The API keys table: one item per key, keyed by the key's SHA-256.

use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use super::conditional::applied;
use super::expression::{Condition, Conditional, Expression, Updates};
use super::{s, time, StoreError};
use crate::clock::Timestamp;
use crate::credentials::{KeyHash, KeyRecord, Scope};
use crate::ids::UserId;

/// A key as the table holds it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyItem {
    key_hash: String,
    user_id: UserId,
    /// Scope names. One that this version does not know (a later version's) grants nothing.
    scopes: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    created_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    revoked_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<Timestamp>,
}

impl KeyItem {
    /// The record of the item that was read under `hash`.
    fn into_record(self, hash: KeyHash) -> KeyRecord {
        KeyRecord {
            hash,
            user_id: self.user_id,
            scopes: self.scopes.iter().filter_map(|name| Scope::parse(name)).collect(),
            label: self.label,
            created_at: self.created_at,
            revoked_at: self.revoked_at,
            expires_at: self.expires_at,
        }
    }
}

impl From<&KeyRecord> for KeyItem {
    fn from(record: &KeyRecord) -> Self {
        KeyItem {
            key_hash: record.hash.as_str().to_owned(),
            user_id: record.user_id.clone(),
            scopes: record.scopes.names().into_iter().map(String::from).collect(),
            label: record.label.clone(),
            created_at: record.created_at,
            revoked_at: record.revoked_at,
            expires_at: record.expires_at,
        }
    }
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

    pub async fn get(&self, hash: &KeyHash) -> Result<Option<KeyRecord>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("keyHash", s(hash.as_str()))
            .consistent_read(true)
            .send()
            .await?;
        let item: Option<KeyItem> = output.item.map(serde_dynamo::from_item).transpose()?;
        Ok(item.map(|item| item.into_record(hash.clone())))
    }

    pub async fn insert(&self, key: &KeyRecord) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(KeyItem::from(key))?))
            .condition(Condition::absent("keyHash"))
            .send()
            .await?;
        Ok(())
    }

    /// Marks a key revoked; `false` when there is no such key.
    pub async fn revoke(&self, hash: &KeyHash, at: Timestamp) -> Result<bool, StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("keyHash", s(hash.as_str()))
            .expression(Expression::new().set_if_absent("revokedAt", time(at)).when(Condition::exists("keyHash")))
            .send()
            .await;
        applied(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::{ApiKey, Scopes};

    #[test]
    fn items_keep_their_attributes_and_a_later_versions_scope_grants_nothing() {
        let record = KeyRecord {
            hash: ApiKey::generate().hash(),
            user_id: "u1".parse().unwrap(),
            scopes: [Scope::ReadAlerts, Scope::WriteWebhooks].into_iter().collect(),
            label: Some("portal link".into()),
            created_at: "2026-01-01T00:00:00.000Z".parse().unwrap(),
            revoked_at: None,
            expires_at: Some("2026-01-02T00:00:00.000Z".parse().unwrap()),
        };
        let mut item: super::super::Item = serde_dynamo::to_item(KeyItem::from(&record)).unwrap();
        assert_eq!(item.get("keyHash"), Some(&s(record.hash.as_str())));
        assert_eq!(item.get("expiresAt"), Some(&s("2026-01-02T00:00:00.000Z")));
        assert!(!item.contains_key("revokedAt"));
        let read = |item: &super::super::Item| {
            serde_dynamo::from_item::<_, KeyItem>(item.clone()).unwrap().into_record(record.hash.clone())
        };
        assert_eq!(read(&item), record);

        let names =
            ["read:alerts", "admin:everything"].map(|name| aws_sdk_dynamodb::types::AttributeValue::S(name.into()));
        item.insert("scopes".into(), aws_sdk_dynamodb::types::AttributeValue::L(names.to_vec()));
        assert_eq!(read(&item).scopes, Scopes::from_iter([Scope::ReadAlerts]));
    }
}
