//! The preferences table: one item per user, one attribute per flag.

use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use aws_sdk_dynamodb::Client;

use super::expression::{Expression, Updates};
use super::{s, time, Item, StoreError};
use crate::clock::Timestamp;
use crate::ids::UserId;
use crate::preferences::{PreferenceUpdate, Preferences, PREFERENCE_FLAGS};

/// The preferences of the user's item (`None`: no item yet): one Boolean attribute per flag
/// that was ever set, and `updatedAt`.
fn preferences_of(item: Option<&Item>) -> Preferences {
    let flag = |name: &str| matches!(item.and_then(|i| i.get(name)), Some(AttributeValue::Bool(true)));
    Preferences {
        flags: PREFERENCE_FLAGS.iter().map(|name| (*name, flag(name))).collect(),
        updated_at: item.and_then(|i| i.get("updatedAt")).and_then(|v| v.as_s().ok()).and_then(|t| Timestamp::parse(t)),
    }
}

#[derive(Clone)]
pub struct PreferenceTable {
    client: Client,
    table: String,
}

impl PreferenceTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    pub async fn get(&self, user_id: &UserId) -> Result<Preferences, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .consistent_read(true)
            .send()
            .await?;
        Ok(preferences_of(output.item.as_ref()))
    }

    /// Sets the given flags in one atomic update; the others keep their values.
    pub async fn update(
        &self,
        user_id: &UserId,
        update: &PreferenceUpdate,
        at: Timestamp,
    ) -> Result<Preferences, StoreError> {
        let expression =
            update.flags().iter().fold(Expression::new().set("updatedAt", time(at)), |expression, (flag, on)| {
                expression.set(*flag, AttributeValue::Bool(*on))
            });
        let output = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .expression(expression)
            .return_values(ReturnValue::AllNew)
            .send()
            .await?;
        Ok(preferences_of(output.attributes.as_ref()))
    }
}
