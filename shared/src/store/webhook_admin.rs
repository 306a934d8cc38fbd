//! Operators' reads of the webhooks table, which no request and no delivery makes: the owner
//! of a subscription id, through the keys-only global index `bySubscription` (an operator
//! knows a subscription id and not its owner), and the one Scan of the store, for the
//! subscriptions whose secret is still stored in plain text (`careerctl webhooks
//! seal-secrets`, run once after the upgrade that sealed secrets) or that were disabled for
//! failing before subscriptions were probed (`careerctl webhooks arm-probes`, once after the
//! upgrade that probes them). Neither runs on a schedule.

use super::webhooks::{subscriptions_of, WebhookTable, DISABLED_REASON, NEXT_PROBE_AT, PROBES};
use super::{s, StoreError};
use crate::ids::{SubscriptionId, UserId};
use crate::webhooks::DisabledReason;
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
        self.scan_for(|scan| scan.filter_expression("attribute_exists(secret)")).await
    }

    /// Every subscription disabled for failing with no probe set and none made: disabled by a
    /// version from before probes (contract section 20), or one whose schedule had no probe.
    pub async fn unprobed_failing(&self) -> Result<Vec<Subscription>, StoreError> {
        let failing: aws_sdk_dynamodb::types::AttributeValue =
            serde_dynamo::to_attribute_value(DisabledReason::Failing)?;
        self.scan_for(|scan| {
            scan.filter_expression(
                "#reason = :failing AND attribute_not_exists(#next) AND attribute_not_exists(#probes)",
            )
            .expression_attribute_names("#reason", DISABLED_REASON)
            .expression_attribute_names("#next", NEXT_PROBE_AT)
            .expression_attribute_names("#probes", PROBES)
            .expression_attribute_values(":failing", failing.clone())
        })
        .await
    }

    /// Every subscription a Scan filtered by `filter` keeps, page after page.
    async fn scan_for(
        &self,
        filter: impl Fn(
            aws_sdk_dynamodb::operation::scan::builders::ScanFluentBuilder,
        ) -> aws_sdk_dynamodb::operation::scan::builders::ScanFluentBuilder,
    ) -> Result<Vec<Subscription>, StoreError> {
        let mut found = Vec::new();
        let mut start = None;
        loop {
            let scan = self.client.scan().table_name(&self.table).set_exclusive_start_key(start).consistent_read(true);
            let output = filter(scan).send().await?;
            found.extend(subscriptions_of(output.items)?);
            start = output.last_evaluated_key;
            if start.is_none() {
                return Ok(found);
            }
        }
    }
}
