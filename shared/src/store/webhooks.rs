//! The subscriptions in the webhooks table: partition `userId`, sort `subscriptionId`.
//! Beside them, each user's partition holds one counter item, kept in the same transaction
//! as every create and delete, that enforces the per-user limit without reading first. The
//! table's other items and reads have files of their own: the data key of the sealed
//! secrets (`data_key`) and the operators' reads (`webhook_admin`).

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{Delete, Put, ReturnValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use super::conditional::{applied, held, send_update, transact, Transacted};
use super::expression::{Condition, Conditional, Expression, Updates};
use super::{n, s, StoreError};
use crate::clock::Timestamp;
use crate::events::EventKind;
use crate::ids::{SubscriptionId, UserId};
use crate::webhooks::{DisabledReason, Subscription, WebhookSecret, WebhookUrl};

const COUNTER_ID: &str = "#count";
/// The counter item's attribute: how many subscriptions its user has.
const COUNT: &str = "subscriptionCount";
/// A subscription's attributes that writes name: its secrets (sealed, or the plain text of
/// before), its state (contract sections 9 and 12) and its key.
const SEALED: &str = "sealedSecrets";
const PLAIN: &str = "secret";
const FAILING_SINCE: &str = "failingSince";
const DISABLED_AT: &str = "disabledAt";
const DISABLED_REASON: &str = "disabledReason";
const ID: &str = "subscriptionId";

/// A subscription as stored, with its secrets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredSubscription {
    pub user_id: UserId,
    pub subscription_id: SubscriptionId,
    pub url: String,
    pub events: Vec<EventKind>,
    #[serde(flatten)]
    pub secrets: StoredSecrets,
    pub created_at: Timestamp,
    /// The failure clock: the first failure since the last success (contract section 9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<DisabledReason>,
}

/// A subscription's signing secrets as the table holds them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StoredSecrets {
    Sealed {
        #[serde(rename = "sealedSecrets")]
        sealed_secrets: SealedSecrets,
    },
    /// A plain-text secret stored before secrets were sealed, until
    /// `careerctl webhooks seal-secrets` (or a rotation) seals it.
    Plain { secret: WebhookSecret },
}

/// `rotation::SigningSecrets` as `sealing::Sealer` sealed them: the standard base64 of a
/// nonce and the AES-256-GCM ciphertext.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SealedSecrets(pub String);

/// How a conditional replacement of a subscription's secrets ended.
#[derive(Debug, PartialEq)]
pub enum Replaced {
    /// The new secrets are stored; the subscription as it now is.
    Yes(Box<StoredSubscription>),
    /// The stored secrets were not the expected ones any more (or the subscription is gone).
    Changed,
}

/// What [`WebhookTable::update`] changes (at least one field); `None` leaves a field as it is.
#[derive(Clone, Copy, Debug)]
pub struct Changes<'a> {
    pub url: Option<&'a str>,
    pub events: Option<&'a [EventKind]>,
    pub enabled: Option<bool>,
}

impl StoredSubscription {
    /// A new subscription, enabled and not failing, created now.
    pub fn new(
        user_id: UserId,
        subscription_id: SubscriptionId,
        url: &WebhookUrl,
        events: Vec<EventKind>,
        sealed: SealedSecrets,
    ) -> Self {
        StoredSubscription {
            user_id,
            subscription_id,
            url: url.as_str().to_owned(),
            events,
            secrets: StoredSecrets::Sealed { sealed_secrets: sealed },
            created_at: Timestamp::now(),
            failing_since: None,
            disabled_at: None,
            disabled_reason: None,
        }
    }

    pub fn public(&self) -> Subscription {
        Subscription {
            id: self.subscription_id.clone(),
            url: self.url.clone(),
            events: self.events.clone(),
            created_at: self.created_at.clone(),
            enabled: self.is_enabled(),
            disabled_at: self.disabled_at.clone(),
            disabled_reason: self.disabled_reason,
        }
    }

    pub fn is_enabled(&self) -> bool {
        self.disabled_at.is_none()
    }

    pub fn failing_since(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.failing_since.as_ref().map(Timestamp::datetime)
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Created {
    Yes,
    LimitReached,
}

#[derive(Clone)]
pub struct WebhookTable {
    pub(super) client: Client,
    pub(super) table: String,
}

impl WebhookTable {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self { client, table: table.into() }
    }

    /// Stores `subscription` unless its owner already has `max` of them.
    pub async fn insert(&self, subscription: &StoredSubscription, max: u32) -> Result<Created, StoreError> {
        let below_max = Condition::absent(COUNT).or(Condition::below(COUNT, n(max)));
        let count = Update::builder()
            .table_name(&self.table)
            .key("userId", s(&subscription.user_id))
            .key("subscriptionId", s(COUNTER_ID))
            .expression(Expression::new().add(COUNT, 1).when(below_max))
            .build()
            .expect("update has table, key and expression");
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(serde_dynamo::to_item(subscription)?))
            .condition(Condition::absent("subscriptionId"))
            .build()
            .expect("put has table and item");
        let items =
            vec![TransactWriteItem::builder().update(count).build(), TransactWriteItem::builder().put(put).build()];
        match transact(&self.client, items).await? {
            Transacted::Done => Ok(Created::Yes),
            Transacted::FirstConditionFailed => Ok(Created::LimitReached),
        }
    }

    /// The user's subscriptions, oldest first.
    pub async fn list(&self, user_id: &UserId) -> Result<Vec<StoredSubscription>, StoreError> {
        self.query(user_id, None).await
    }

    /// The user's subscriptions that list `kind`.
    pub async fn subscribed_to(
        &self,
        user_id: &UserId,
        kind: EventKind,
    ) -> Result<Vec<StoredSubscription>, StoreError> {
        self.query(user_id, Some(kind)).await
    }

    async fn query(&self, user_id: &UserId, kind: Option<EventKind>) -> Result<Vec<StoredSubscription>, StoreError> {
        let mut request = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("userId = :u AND begins_with(subscriptionId, :prefix)")
            .expression_attribute_values(":u", s(user_id))
            .expression_attribute_values(":prefix", s(SubscriptionId::PREFIX))
            .consistent_read(true);
        if let Some(kind) = kind {
            request = request
                .filter_expression("contains(events, :kind)")
                .expression_attribute_values(":kind", s(kind.as_str()));
        }
        // At most 25 small items per user: one page always holds them all.
        subscriptions_of(request.send().await?.items)
    }

    pub async fn get(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
    ) -> Result<Option<StoredSubscription>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("subscriptionId", s(subscription_id))
            .consistent_read(true)
            .send()
            .await?;
        Ok(output.item.map(serde_dynamo::from_item).transpose()?)
    }

    /// Replaces the subscription's secrets with `new`, in one conditional write that holds
    /// only while the stored secrets are still `expected` (a plain-text secret is removed).
    pub async fn replace_secrets(
        &self,
        expected: &StoredSubscription,
        new: &SealedSecrets,
    ) -> Result<Replaced, StoreError> {
        let unchanged = match &expected.secrets {
            StoredSecrets::Sealed { sealed_secrets } => Condition::equals(SEALED, s(&sealed_secrets.0)),
            StoredSecrets::Plain { secret } => {
                Condition::equals(PLAIN, s(secret.expose())).and(Condition::absent(SEALED))
            }
        };
        let update = self
            .subscription_update(&expected.user_id, &expected.subscription_id)
            .expression(Expression::new().set(SEALED, s(&new.0)).remove(PLAIN).when(unchanged))
            .return_values(ReturnValue::AllNew);
        match held(send_update(update).await)? {
            Some(output) => {
                Ok(Replaced::Yes(Box::new(serde_dynamo::from_item(output.attributes.unwrap_or_default())?)))
            }
            None => Ok(Replaced::Changed),
        }
    }

    /// Disables the subscription for `reason`, unless it is disabled already or gone. With
    /// `failing_since`, only if its failure clock still shows that time (a success in the
    /// meantime stopped it). `true` when this call disabled it.
    pub async fn disable(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        reason: DisabledReason,
        failing_since: Option<&Timestamp>,
        at: &Timestamp,
    ) -> Result<bool, StoreError> {
        let still = match failing_since {
            Some(since) => Condition::equals(FAILING_SINCE, s(since)),
            None => Condition::exists(ID),
        };
        let expression = Expression::new()
            .set(DISABLED_AT, s(at))
            .set(DISABLED_REASON, serde_dynamo::to_attribute_value(reason)?)
            .when(still.and(Condition::absent(DISABLED_AT)));
        applied(self.subscription_update(user_id, subscription_id).expression(expression).send().await)
    }

    /// Starts the failure clock at `at` (RFC 3339), unless it already runs. Called only on a
    /// failure of a subscription that was not failing, so the common path writes nothing.
    pub async fn start_failure_clock(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        at: &Timestamp,
    ) -> Result<(), StoreError> {
        // Neither is an earlier start moved nor a deleted subscription brought back.
        let expression = Expression::new()
            .set(FAILING_SINCE, s(at))
            .when(Condition::exists(ID).and(Condition::absent(FAILING_SINCE)));
        // A refused condition means the clock already runs, or the subscription is gone.
        applied(self.subscription_update(user_id, subscription_id).expression(expression).send().await).map(drop)
    }

    /// Stops the failure clock: called only on a success of a subscription that was failing.
    pub async fn reset_failure_clock(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
    ) -> Result<(), StoreError> {
        let expression = Expression::new().remove(FAILING_SINCE).when(Condition::exists(ID));
        applied(self.subscription_update(user_id, subscription_id).expression(expression).send().await).map(drop)
    }

    /// Turns the subscription back on and resets its failure clock; `None` when the user has
    /// no such subscription.
    pub async fn enable(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
    ) -> Result<Option<StoredSubscription>, StoreError> {
        let changes = Changes { url: None, events: None, enabled: Some(true) };
        self.update(user_id, subscription_id, &changes, &Timestamp::now()).await
    }

    /// Applies `changes` in one conditional write, at `at`: a new URL or kinds replace the
    /// old ones; disabling pauses it as `manual` (a subscription disabled already keeps
    /// when that was); enabling is [`WebhookTable::enable`]. Id, secrets and `createdAt`
    /// stay. `None` when the user has no such subscription.
    pub async fn update(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        changes: &Changes<'_>,
        at: &Timestamp,
    ) -> Result<Option<StoredSubscription>, StoreError> {
        let mut expression = Expression::new();
        if let Some(url) = changes.url {
            expression = expression.set("url", s(url));
        }
        if let Some(events) = changes.events {
            expression = expression.set("events", serde_dynamo::to_attribute_value(events)?);
        }
        expression = match changes.enabled {
            Some(false) => expression
                .set_if_absent(DISABLED_AT, s(at))
                .set(DISABLED_REASON, serde_dynamo::to_attribute_value(DisabledReason::Manual)?),
            Some(true) => expression.remove(DISABLED_AT).remove(DISABLED_REASON).remove(FAILING_SINCE),
            None => expression,
        };
        let update = self
            .subscription_update(user_id, subscription_id)
            .expression(expression.when(Condition::exists(ID)))
            .return_values(ReturnValue::AllNew);
        let updated = held(send_update(update).await)?;
        Ok(updated.map(|output| serde_dynamo::from_item(output.attributes.unwrap_or_default())).transpose()?)
    }

    fn subscription_update(&self, user_id: &UserId, subscription_id: &SubscriptionId) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("subscriptionId", s(subscription_id))
    }

    /// Deletes the subscription; `false` when the user has no such subscription.
    pub async fn delete(&self, user_id: &UserId, subscription_id: &SubscriptionId) -> Result<bool, StoreError> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("subscriptionId", s(subscription_id))
            .condition(Condition::exists(ID))
            .build()
            .expect("delete has table and key");
        let count = Update::builder()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("subscriptionId", s(COUNTER_ID))
            .expression(Expression::new().add(COUNT, -1))
            .build()
            .expect("update has table, key and expression");
        let items = vec![
            TransactWriteItem::builder().delete(delete).build(),
            TransactWriteItem::builder().update(count).build(),
        ];
        match transact(&self.client, items).await? {
            Transacted::Done => Ok(true),
            Transacted::FirstConditionFailed => Ok(false),
        }
    }
}

/// The subscriptions among the items a query or scan returned.
pub(super) fn subscriptions_of(items: Option<Vec<super::Item>>) -> Result<Vec<StoredSubscription>, StoreError> {
    Ok(serde_dynamo::from_items(items.unwrap_or_default())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_hold_sealed_secrets_or_a_plain_secret_of_before() {
        let sealed = StoredSubscription {
            user_id: "u1".parse().unwrap(),
            subscription_id: "whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap(),
            url: "https://hooks.example.com/".into(),
            events: vec![EventKind::ProfileUpdated],
            secrets: StoredSecrets::Sealed { sealed_secrets: SealedSecrets("c2VhbGVk".into()) },
            created_at: "2026-11-27T08:00:00.000Z".parse().unwrap(),
            failing_since: None,
            disabled_at: None,
            disabled_reason: None,
        };
        let item: super::super::Item = serde_dynamo::to_item(&sealed).unwrap();
        assert_eq!(item.get("sealedSecrets"), Some(&s("c2VhbGVk")));
        assert!(!item.contains_key("secret"));
        assert_eq!(serde_dynamo::from_item::<_, StoredSubscription>(item).unwrap(), sealed);

        let legacy = "whsec_Ab-_0123456789abcdefghijklmnopqrstuvwxyzABE";
        let mut item: super::super::Item = serde_dynamo::to_item(&sealed).unwrap();
        item.remove("sealedSecrets");
        item.insert("secret".into(), s(legacy));
        let plain: StoredSubscription = serde_dynamo::from_item(item).unwrap();
        assert_eq!(plain.secrets, StoredSecrets::Plain { secret: WebhookSecret::parse(legacy).unwrap() });
    }
}
