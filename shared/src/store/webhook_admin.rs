//! Operators' reads of the webhooks table, which no request and no delivery makes: the owner
//! of a subscription id, through the keys-only global index `bySubscription` (an operator
//! knows a subscription id and not its owner), and the one Scan of the store, for the
//! subscriptions whose secret is still stored in plain text (`careerctl webhooks
//! seal-secrets`, run once after the upgrade that sealed secrets).

use super::webhooks::{subscriptions_of, WebhookTable};
use super::{s, StoreError};
use crate::ids::{SubscriptionId, UserId};
use crate::webhooks::Subscription;

impl WebhookTable {
    /// The user a subscription belongs to.
    pub async fn owner_of(&self, subscription_id: &SubscriptionId) -> Result<Option<UserId>, StoreError> {
        let output = self
            .client
            .query()
            .table_name(&self.table)
            .index_name("bySubscription")
            .key_condition_expression("subscriptionId = :id")
            .expression_attribute_values(":id", s(subscription_id))
            .send()
            .await?;
        let owner = output.items.unwrap_or_default().into_iter().next().and_then(|mut item| item.remove("userId"));
        Ok(owner.and_then(|value| value.as_s().ok().and_then(|text| UserId::parse(text))))
    }

    /// Every subscription whose secret is still stored in plain text.
    pub async fn plain_secrets(&self) -> Result<Vec<Subscription>, StoreError> {
        let mut found = Vec::new();
        let mut start = None;
        loop {
            let output = self
                .client
                .scan()
                .table_name(&self.table)
                .filter_expression("attribute_exists(secret)")
                .set_exclusive_start_key(start)
                .consistent_read(true)
                .send()
                .await?;
            found.extend(subscriptions_of(output.items)?);
            start = output.last_evaluated_key;
            if start.is_none() {
                return Ok(found);
            }
        }
    }
}
