//! The subscriptions in the webhooks table: partition `userId`, sort `subscriptionId`.
//! Beside them, each user's partition holds one counter item, kept in the same transaction
//! as every create and delete, that enforces the per-user limit without reading first. The
//! table's other items and reads have files of their own: the data key of the sealed
//! secrets (`data_key`) and the operators' reads (`webhook_admin`).

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, ReturnValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use serde::{Deserialize, Serialize};

use super::conditional::{applied, held, send_update, transact, Transacted};
use super::expression::{Condition, Conditional, Expression, Updates};
use super::{n, s, time, Item, StoreError};
use crate::clock::Timestamp;
use crate::delivery::groups::Pace;
use crate::delivery::log::AttemptRecord;
use crate::events::EventKind;
use crate::ids::{SubscriptionId, UserId};
use crate::operational::SubscriptionState;
use crate::webhooks::destination::AwsDestination;
use crate::webhooks::identity_token::IdentityToken;
use crate::webhooks::rotation::PublicKeys;
use crate::webhooks::{
    DeliveryRate, DisabledReason, Health, SealedSecrets, SecretsAtRest, Subscription, SubscriptionChanges, Target,
    WebhookSecret, WhileDisabled,
};

const COUNTER_ID: &str = "#count";
/// The counter item's attribute: how many subscriptions its user has.
const COUNT: &str = "subscriptionCount";
/// A subscription's attributes that writes name: its secrets (sealed, or the plain text of
/// before) and the public keys that go with them, its state (contract sections 9 and 12) and
/// its key.
const SEALED: &str = "sealedSecrets";
const PLAIN: &str = "secret";
const PUBLIC_KEYS: &str = "publicKeys";
/// Present, and true, only while deliveries carry trace context (contract section 19).
const TRACE_CONTEXT: &str = "traceContext";
const FAILING_SINCE: &str = "failingSince";
/// The error and status of the failure that started the clock, and when a success last
/// stopped it: read only by the operational events (`operational`), from the stream.
const FAILING_ERROR: &str = "failingError";
const FAILING_STATUS: &str = "failingStatus";
const RECOVERED_AT: &str = "recoveredAt";
const DISABLED_AT: &str = "disabledAt";
pub(super) const DISABLED_REASON: &str = "disabledReason";
/// While disabled for failing (contract section 20): when the next probe goes (absent once
/// probing has ended), and how many went.
pub(super) const NEXT_PROBE_AT: &str = "nextProbeAt";
pub(super) const PROBES: &str = "probes";
/// Since when its receiver answers fast, while it does (`delivery::groups`).
const FAST_SINCE: &str = "fastSince";
const SLOW_AT: &str = "slowAt";
const MAX_DELIVERIES_PER_SECOND: &str = "maxDeliveriesPerSecond";
/// `hold` or `skip` (contract section 20); absent on items of before, which hold.
const WHILE_DISABLED: &str = "whileDisabled";
/// A map, `{"audience": …}`, present only while each attempt carries an identity token
/// (contract section 21).
const IDENTITY_TOKEN: &str = "identityToken";
const ID: &str = "subscriptionId";
/// Where it delivers ([`Target`]): `url`, or `destination` (a map: `type`, `queueUrl` or
/// `eventBusArn`, `roleArn`, `externalId`; contract section 17).
const URL: &str = "url";
const DESTINATION: &str = "destination";

/// A subscription as the table holds it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionItem {
    #[serde(flatten)]
    name: SubscriptionName,
    events: Vec<EventKind>,
    #[serde(flatten)]
    secrets: SecretsItem,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    public_keys: Option<PublicKeys>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    trace_context: bool,
    created_at: Timestamp,
    #[serde(flatten)]
    health: HealthAttributes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_deliveries_per_second: Option<DeliveryRate>,
    #[serde(default)]
    while_disabled: WhileDisabled,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity_token: Option<IdentityToken>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fast_since: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slow_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    next_probe_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "is_zero")]
    probes: u32,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

/// What names a subscription in its item: its key, and where it delivers.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscriptionName {
    user_id: UserId,
    subscription_id: SubscriptionId,
    #[serde(flatten)]
    target: Target,
}

/// A subscription's health attributes: `failingSince` while the failure clock runs,
/// `disabledAt` and `disabledReason` while it is disabled, all a subscription reads of them.
/// The deliver function also writes, on each transition,
/// the failure's error and status and the time of the success that stopped the clock, which
/// only the operational events read (from the stream's images, [`HealthImage`]).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthAttributes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failing_since: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failing_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failing_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    recovered_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disabled_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    disabled_reason: Option<DisabledReason>,
}

/// A subscription's stream image as far as its health goes: the attributes of the item that
/// name it and its health, only those, so an image is read whatever else its item holds.
#[derive(Debug, Deserialize)]
pub(crate) struct HealthImage {
    #[serde(flatten)]
    name: SubscriptionName,
    #[serde(flatten)]
    health: HealthAttributes,
}

impl From<HealthImage> for SubscriptionState {
    fn from(image: HealthImage) -> Self {
        let (name, health) = (image.name, image.health);
        SubscriptionState {
            user_id: name.user_id,
            subscription_id: name.subscription_id,
            target: name.target,
            failing_since: health.failing_since,
            failing_error: health.failing_error,
            failing_status: health.failing_status,
            recovered_at: health.recovered_at,
            disabled_at: health.disabled_at,
            disabled_reason: health.disabled_reason,
        }
    }
}

/// The secrets' attribute: `sealedSecrets`, or `secret` in plain text from before sealing.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum SecretsItem {
    Sealed {
        #[serde(rename = "sealedSecrets")]
        sealed_secrets: String,
    },
    Plain {
        secret: WebhookSecret,
    },
}

impl From<SubscriptionItem> for Subscription {
    fn from(item: SubscriptionItem) -> Self {
        // A disabled item keeps the `failingSince` it had; enabling removes both. Every
        // disable writes `disabledAt` and `disabledReason` together (the reason defaults only
        // for safety).
        let health = match (item.health.disabled_at, item.health.failing_since) {
            (Some(at), _) => {
                Health::Disabled { at, reason: item.health.disabled_reason.unwrap_or(DisabledReason::Failing) }
            }
            (None, Some(since)) => Health::Failing { since },
            (None, None) => Health::Active,
        };
        Subscription {
            user_id: item.name.user_id,
            id: item.name.subscription_id,
            target: item.name.target,
            events: item.events,
            secrets: match item.secrets {
                SecretsItem::Sealed { sealed_secrets } => SecretsAtRest::Sealed(SealedSecrets(sealed_secrets)),
                SecretsItem::Plain { secret } => SecretsAtRest::Plain(secret),
            },
            public_keys: item.public_keys,
            trace_context: item.trace_context,
            created_at: item.created_at,
            health,
            max_deliveries_per_second: item.max_deliveries_per_second,
            while_disabled: item.while_disabled,
            identity_token: item.identity_token,
            fast_since: item.fast_since,
            slow_at: item.slow_at,
            recovered_at: item.health.recovered_at,
            next_probe_at: item.next_probe_at,
            probes: item.probes,
        }
    }
}

impl From<&Subscription> for SubscriptionItem {
    fn from(subscription: &Subscription) -> Self {
        let (failing_since, disabled_at, disabled_reason) = match &subscription.health {
            Health::Active => (None, None, None),
            Health::Failing { since } => (Some(*since), None, None),
            Health::Disabled { at, reason } => (None, Some(*at), Some(*reason)),
        };
        SubscriptionItem {
            name: SubscriptionName {
                user_id: subscription.user_id.clone(),
                subscription_id: subscription.id.clone(),
                target: subscription.target.clone(),
            },
            events: subscription.events.clone(),
            secrets: match &subscription.secrets {
                SecretsAtRest::Sealed(sealed) => SecretsItem::Sealed { sealed_secrets: sealed.0.clone() },
                SecretsAtRest::Plain(secret) => SecretsItem::Plain { secret: secret.clone() },
            },
            public_keys: subscription.public_keys.clone(),
            trace_context: subscription.trace_context,
            created_at: subscription.created_at,
            // A subscription holds no failure's error: its transitions write it.
            health: HealthAttributes {
                failing_since,
                disabled_at,
                disabled_reason,
                recovered_at: subscription.recovered_at,
                ..HealthAttributes::default()
            },
            max_deliveries_per_second: subscription.max_deliveries_per_second,
            while_disabled: subscription.while_disabled,
            identity_token: subscription.identity_token.clone(),
            fast_since: subscription.fast_since,
            slow_at: subscription.slow_at,
            next_probe_at: subscription.next_probe_at,
            probes: subscription.probes,
        }
    }
}

/// What an update replaces besides its plain changes, each only while it is as expected.
#[derive(Default, Clone, Copy)]
pub struct Replacing<'a> {
    pub secrets: Option<&'a NewSecrets<'a>>,
    pub destination: Option<&'a NewDestination<'a>>,
}

/// How a conditional replacement of a subscription's secrets ended.
#[derive(Debug, PartialEq)]
pub enum Replaced {
    /// The new secrets are stored; the subscription as it now is.
    Yes(Box<Subscription>),
    /// The stored secrets were not the expected ones any more (or the subscription is gone).
    Changed,
}

/// New sealed secrets and the public keys that go with them, to replace `expected`: a write
/// that carries them holds only while the stored secrets are still `expected`.
pub struct NewSecrets<'a> {
    pub expected: &'a SecretsAtRest,
    pub sealed: &'a SealedSecrets,
    pub public_keys: Option<&'a PublicKeys>,
}

impl NewSecrets<'_> {
    /// Adds the replacement to `expression` (a plain-text secret is removed); the condition
    /// it needs.
    fn apply(&self, expression: Expression) -> Result<(Expression, Condition), StoreError> {
        let unchanged = match self.expected {
            SecretsAtRest::Sealed(sealed) => Condition::equals(SEALED, s(&sealed.0)),
            SecretsAtRest::Plain(secret) => Condition::equals(PLAIN, s(secret.expose())).and(Condition::absent(SEALED)),
        };
        let expression = expression.set(SEALED, s(&self.sealed.0)).remove(PLAIN);
        let expression = match self.public_keys {
            Some(keys) => expression.set(PUBLIC_KEYS, serde_dynamo::to_attribute_value(keys)?),
            None => expression.remove(PUBLIC_KEYS),
        };
        Ok((expression, unchanged))
    }
}

/// A new destination (its queue or bus, or its role) to replace `expected`: the write holds
/// only while the stored destination is still `expected`, as its check was made against it.
pub struct NewDestination<'a> {
    pub expected: &'a AwsDestination,
    pub new: &'a AwsDestination,
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
    pub async fn insert(&self, subscription: &Subscription, max: u32) -> Result<Created, StoreError> {
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
            .set_item(Some(serde_dynamo::to_item(SubscriptionItem::from(subscription))?))
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
    pub async fn list(&self, user_id: &UserId) -> Result<Vec<Subscription>, StoreError> {
        self.query(user_id, None).await
    }

    /// The user's subscriptions that list `kind`.
    pub async fn subscribed_to(&self, user_id: &UserId, kind: EventKind) -> Result<Vec<Subscription>, StoreError> {
        self.query(user_id, Some(kind)).await
    }

    async fn query(&self, user_id: &UserId, kind: Option<EventKind>) -> Result<Vec<Subscription>, StoreError> {
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
    ) -> Result<Option<Subscription>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("userId", s(user_id))
            .key("subscriptionId", s(subscription_id))
            .consistent_read(true)
            .send()
            .await?;
        output.item.map(subscription_of).transpose()
    }

    /// Replaces the subscription's secrets and public keys with `new`, in one conditional
    /// write that holds only while the stored secrets are still `new.expected`.
    pub async fn replace_secrets(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        new: &NewSecrets<'_>,
    ) -> Result<Replaced, StoreError> {
        let (expression, unchanged) = new.apply(Expression::new())?;
        let update = self
            .subscription_update(user_id, subscription_id)
            .expression(expression.when(unchanged))
            .return_values(ReturnValue::AllNew);
        match held(send_update(update).await)? {
            Some(output) => Ok(Replaced::Yes(Box::new(subscription_of(output.attributes.unwrap_or_default())?))),
            None => Ok(Replaced::Changed),
        }
    }

    /// Disables the subscription for `reason`, unless it is disabled already or gone. With
    /// `failing_since`, only if its failure clock still shows that time (a success in the
    /// meantime stopped it). With `next_probe`, it is probed from then (contract section 20).
    /// `true` when this call disabled it.
    pub async fn disable(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        (reason, failing_since): (DisabledReason, Option<Timestamp>),
        next_probe: Option<Timestamp>,
        at: Timestamp,
    ) -> Result<bool, StoreError> {
        let still = match failing_since {
            Some(since) => Condition::equals(FAILING_SINCE, time(since)),
            None => Condition::exists(ID),
        };
        let expression = Expression::new()
            .set(DISABLED_AT, time(at))
            .set(DISABLED_REASON, serde_dynamo::to_attribute_value(reason)?)
            .remove(PROBES);
        let expression = match next_probe {
            Some(next) => expression.set(NEXT_PROBE_AT, time(next)),
            None => expression.remove(NEXT_PROBE_AT),
        };
        let expression = expression.when(still.and(Condition::absent(DISABLED_AT)));
        applied(self.subscription_update(user_id, subscription_id).expression(expression).send().await)
    }

    /// Starts the failure clock at the time of the failed `attempt`, unless it already runs,
    /// and keeps the attempt's error and status beside it for the `failing` event (contract
    /// section 15). Called only on a failure of a subscription that was not failing, so the
    /// common path writes nothing.
    pub async fn start_failure_clock(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        attempt: &AttemptRecord,
    ) -> Result<(), StoreError> {
        let mut expression = Expression::new()
            .set(FAILING_SINCE, time(attempt.at))
            .set(FAILING_ERROR, s(attempt.error.as_deref().unwrap_or_default()));
        expression = match &attempt.response {
            Some((status, _)) => expression.set(FAILING_STATUS, n(*status)),
            None => expression.remove(FAILING_STATUS),
        };
        // Neither is an earlier start moved nor a deleted subscription brought back.
        let expression = expression.when(Condition::exists(ID).and(Condition::absent(FAILING_SINCE)));
        // A refused condition means the clock already runs, or the subscription is gone.
        applied(self.subscription_update(user_id, subscription_id).expression(expression).send().await).map(drop)
    }

    /// Stops the failure clock: called only on a success of a subscription that was failing,
    /// at `at`, which the `recovered` event reports (contract section 15).
    pub async fn reset_failure_clock(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let expression = Expression::new()
            .remove(FAILING_SINCE)
            .set(RECOVERED_AT, time(at))
            .when(Condition::exists(ID).and(Condition::exists(FAILING_SINCE)));
        applied(self.subscription_update(user_id, subscription_id).expression(expression).send().await).map(drop)
    }

    /// Records what its receiver's last telling answer showed of its pace, at `at`: called
    /// only when it changes what the subscription is known for (`delivery::groups::Pace`),
    /// so the common path writes nothing. A deleted subscription is not brought back.
    pub async fn set_pace(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        pace: Pace,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let expression = match pace {
            Pace::Unchanged => return Ok(()),
            Pace::Fast => Expression::new()
                .set(FAST_SINCE, time(at))
                .when(Condition::exists(ID).and(Condition::absent(FAST_SINCE))),
            Pace::Slow => {
                Expression::new().remove(FAST_SINCE).set(SLOW_AT, time(at)).when(Condition::exists(FAST_SINCE))
            }
        };
        // A refused condition means another instance recorded it first, or the subscription is gone.
        applied(self.subscription_update(user_id, subscription_id).expression(expression).send().await).map(drop)
    }

    /// Enables the subscription again after a probe's success at `at` (contract section 20), as
    /// [`WebhookTable::enable`] does, and records `at` as its recovery (the `recovered` event
    /// with `reenabled`); only while it is still disabled for failing since `disabled_at`. The
    /// subscription as it now is; `None` when it was not so any more.
    pub async fn reenable(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        disabled_at: Timestamp,
        at: Timestamp,
    ) -> Result<Option<Subscription>, StoreError> {
        let expression = enabling(Expression::new()).set(RECOVERED_AT, time(at));
        let still = Condition::equals(DISABLED_AT, time(disabled_at))
            .and(Condition::equals(DISABLED_REASON, serde_dynamo::to_attribute_value(DisabledReason::Failing)?));
        let update = self
            .subscription_update(user_id, subscription_id)
            .expression(expression.when(still))
            .return_values(ReturnValue::AllNew);
        let updated = held(send_update(update).await)?;
        updated.map(|output| subscription_of(output.attributes.unwrap_or_default())).transpose()
    }

    /// Records a failed probe of the subscription, the `made`-th since it was disabled at
    /// `disabled_at`, and when the next goes (`None`: probing has ended); only while it is still
    /// so. `true` when this call recorded it.
    pub async fn probe_failed(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        (disabled_at, made): (Timestamp, u32),
        next: Option<Timestamp>,
    ) -> Result<bool, StoreError> {
        let expression = Expression::new().set(PROBES, n(made));
        let expression = match next {
            Some(next) => expression.set(NEXT_PROBE_AT, time(next)),
            None => expression.remove(NEXT_PROBE_AT),
        };
        let before = match made {
            1 => Condition::absent(PROBES),
            made => Condition::equals(PROBES, n(made - 1)),
        };
        let still = Condition::equals(DISABLED_AT, time(disabled_at))
            .and(Condition::equals(DISABLED_REASON, serde_dynamo::to_attribute_value(DisabledReason::Failing)?))
            .and(before);
        applied(self.subscription_update(user_id, subscription_id).expression(expression.when(still)).send().await)
    }

    /// Arms the probes of a subscription disabled for failing at `disabled_at` by a version that
    /// did not probe (no probe set, none made): the next goes at `next`, its schedule standing
    /// as if `made` had gone before ([`ProbeSchedule::resumed`]). Only while it is still so.
    /// `true` when this call armed it.
    ///
    /// [`ProbeSchedule::resumed`]: crate::delivery::plan::ProbeSchedule::resumed
    pub async fn arm_probe(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        disabled_at: Timestamp,
        (next, made): (Timestamp, u32),
    ) -> Result<bool, StoreError> {
        let expression = Expression::new().set(NEXT_PROBE_AT, time(next));
        let expression = match made {
            0 => expression,
            made => expression.set(PROBES, n(made)),
        };
        let still = Condition::equals(DISABLED_AT, time(disabled_at))
            .and(Condition::equals(DISABLED_REASON, serde_dynamo::to_attribute_value(DisabledReason::Failing)?))
            .and(Condition::absent(NEXT_PROBE_AT))
            .and(Condition::absent(PROBES));
        applied(self.subscription_update(user_id, subscription_id).expression(expression.when(still)).send().await)
    }

    /// Turns the subscription back on and resets its failure clock; `None` when the user has
    /// no such subscription.
    pub async fn enable(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
    ) -> Result<Option<Subscription>, StoreError> {
        let changes = SubscriptionChanges { enabled: Some(true), ..SubscriptionChanges::default() };
        self.update(user_id, subscription_id, &changes, Replacing::default(), Timestamp::now()).await
    }

    /// Applies `changes` in one conditional write, at `at`: a new URL (only to a subscription
    /// that has one) or kinds replace the old ones; disabling pauses it as `manual` (a
    /// subscription disabled already keeps when that was); enabling is
    /// [`WebhookTable::enable`]. Id, `createdAt`, the external id and, unless `replacing`
    /// replaces them (turning asymmetric signing on or off), the secrets and the destination
    /// stay. `None` when the user has no such subscription, when a new URL or an identity
    /// token meets a destination, or when its secrets or destination are not the expected
    /// ones any more.
    pub async fn update(
        &self,
        user_id: &UserId,
        subscription_id: &SubscriptionId,
        changes: &SubscriptionChanges,
        replacing: Replacing<'_>,
        at: Timestamp,
    ) -> Result<Option<Subscription>, StoreError> {
        let mut expression = Expression::new();
        let mut target_unchanged = None;
        if let Some(url) = &changes.url {
            expression = expression.set(URL, s(url.as_str()));
            target_unchanged = Some(Condition::absent(DESTINATION));
        }
        if let Some(destination) = replacing.destination {
            expression = expression.set(DESTINATION, serde_dynamo::to_attribute_value(destination.new)?);
            let expected = serde_dynamo::to_attribute_value(destination.expected)?;
            target_unchanged = Some(Condition::equals(DESTINATION, expected));
        }
        if let Some(events) = &changes.events {
            expression = expression.set("events", serde_dynamo::to_attribute_value(events.kinds())?);
        }
        expression = match changes.enabled {
            // A pause ends any probing (section 20: only `failing` is probed).
            Some(false) => expression
                .set_if_absent(DISABLED_AT, time(at))
                .set(DISABLED_REASON, serde_dynamo::to_attribute_value(DisabledReason::Manual)?)
                .remove(NEXT_PROBE_AT)
                .remove(PROBES),
            Some(true) => enabling(expression),
            None => expression,
        };
        expression = match changes.trace_context {
            Some(true) => expression.set(TRACE_CONTEXT, AttributeValue::Bool(true)),
            Some(false) => expression.remove(TRACE_CONTEXT),
            None => expression,
        };
        expression = match changes.max_deliveries_per_second {
            Some(Some(rate)) => expression.set(MAX_DELIVERIES_PER_SECOND, n(rate.per_second())),
            Some(None) => expression.remove(MAX_DELIVERIES_PER_SECOND),
            None => expression,
        };
        if let Some(while_disabled) = changes.while_disabled {
            expression = expression.set(WHILE_DISABLED, s(while_disabled.as_str()));
        }
        expression = match &changes.identity_token {
            // Only to a subscription with a URL (section 21), whatever it was read as.
            Some(Some(token)) => {
                let no_destination = Condition::absent(DESTINATION);
                target_unchanged = Some(match target_unchanged {
                    Some(unchanged) => unchanged.and(no_destination),
                    None => no_destination,
                });
                expression.set(IDENTITY_TOKEN, serde_dynamo::to_attribute_value(token)?)
            }
            Some(None) => expression.remove(IDENTITY_TOKEN),
            None => expression,
        };
        let (expression, condition) = match replacing.secrets {
            Some(new) => new.apply(expression)?,
            None => (expression, Condition::exists(ID)),
        };
        let condition = match target_unchanged {
            Some(unchanged) => condition.and(unchanged),
            None => condition,
        };
        let update = self
            .subscription_update(user_id, subscription_id)
            .expression(expression.when(condition))
            .return_values(ReturnValue::AllNew);
        let updated = held(send_update(update).await)?;
        updated.map(|output| subscription_of(output.attributes.unwrap_or_default())).transpose()
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

/// What enabling a subscription removes: its disabling, its failure clock and its probing.
fn enabling(expression: Expression) -> Expression {
    expression.remove(DISABLED_AT).remove(DISABLED_REASON).remove(FAILING_SINCE).remove(NEXT_PROBE_AT).remove(PROBES)
}

fn subscription_of(item: Item) -> Result<Subscription, StoreError> {
    Ok(serde_dynamo::from_item::<_, SubscriptionItem>(item)?.into())
}

/// The subscriptions among the items a query or scan returned.
pub(super) fn subscriptions_of(items: Option<Vec<Item>>) -> Result<Vec<Subscription>, StoreError> {
    let items: Vec<SubscriptionItem> = serde_dynamo::from_items(items.unwrap_or_default())?;
    Ok(items.into_iter().map(Subscription::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscription(secrets: SecretsAtRest, health: Health) -> Subscription {
        Subscription {
            user_id: "u1".parse().unwrap(),
            id: "whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap(),
            target: Target::Url("https://hooks.example.com/".into()),
            events: vec![EventKind::ProfileUpdated],
            secrets,
            public_keys: None,
            trace_context: false,
            created_at: "2026-11-27T08:00:00.000Z".parse().unwrap(),
            health,
            max_deliveries_per_second: None,
            while_disabled: WhileDisabled::Hold,
            identity_token: None,
            fast_since: None,
            slow_at: None,
            recovered_at: None,
            next_probe_at: None,
            probes: 0,
        }
    }

    fn item_of(subscription: &Subscription) -> Item {
        serde_dynamo::to_item(SubscriptionItem::from(subscription)).unwrap()
    }

    #[test]
    fn items_hold_a_url_or_a_destination_map() {
        use crate::webhooks::destination::{Destination, DestinationPolicy, RoleArn};
        use crate::webhooks::UrlPolicy;
        let with_url = subscription(SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into())), Health::Active);
        let item = item_of(&with_url);
        assert_eq!((item.get(URL), item.get(DESTINATION)), (Some(&s("https://hooks.example.com/")), None));

        let sender = RoleArn::parse("arn:aws:iam::111111111111:role/deliver").unwrap();
        let policy = DestinationPolicy { sender_role: Some(&sender), urls: &UrlPolicy::default() };
        let bus = serde_json::json!({"type": "aws_eventbridge", "roleArn": "arn:aws:iam::222222222222:role/r",
            "eventBusArn": "arn:aws:events:eu-west-1:222222222222:event-bus/b"});
        let aws = AwsDestination::new(Destination::parse(&bus, &policy).unwrap());
        let with_destination = Subscription { target: Target::Aws(aws.clone()), ..with_url };
        let item = item_of(&with_destination);
        assert_eq!(item.get(URL), None);
        let Some(AttributeValue::M(map)) = item.get(DESTINATION) else { panic!("a map: {item:?}") };
        assert_eq!(map.get("externalId"), Some(&s(aws.external_id.as_str())));
        assert_eq!(map.get("type"), Some(&s("aws_eventbridge")));
        assert_eq!(subscription_of(item).unwrap(), with_destination);
    }

    #[test]
    fn items_hold_sealed_secrets_or_a_plain_secret_of_before() {
        let sealed = subscription(SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into())), Health::Active);
        let item = item_of(&sealed);
        assert_eq!(item.get("sealedSecrets"), Some(&s("c2VhbGVk")));
        assert!(!item.contains_key("secret"));
        assert_eq!(subscription_of(item).unwrap(), sealed);

        let legacy = "whsec_Ab-_0123456789abcdefghijklmnopqrstuvwxyzABE";
        let mut item = item_of(&sealed);
        item.remove("sealedSecrets");
        item.insert("secret".into(), s(legacy));
        let plain = subscription_of(item).unwrap();
        assert_eq!(plain.secrets, SecretsAtRest::Plain(WebhookSecret::parse(legacy).unwrap()));
    }

    #[test]
    fn public_keys_are_stored_in_clear_beside_the_sealed_secrets() {
        use crate::webhooks::rotation::{GracePeriod, SigningSecrets};
        let secrets = SigningSecrets::new(WebhookSecret::generate(), true).rotated(
            WebhookSecret::generate(),
            Timestamp::now(),
            GracePeriod::DEFAULT,
        );
        let mut with_keys = subscription(SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into())), Health::Active);
        with_keys.public_keys = secrets.public_keys();
        let item = item_of(&with_keys);
        let current = secrets.current_key.as_ref().unwrap().public_key().to_string();
        let Some(AttributeValue::M(keys)) = item.get("publicKeys") else { panic!("a map: {item:?}") };
        assert_eq!(keys.get("current"), Some(&s(&current)));
        assert!(keys.contains_key("previous"));
        assert_eq!(subscription_of(item).unwrap(), with_keys);
        let without = item_of(&subscription(SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into())), Health::Active));
        assert!(!without.contains_key("publicKeys"));
    }

    /// Trace context is one attribute, present only while on, so items of before read as off.
    #[test]
    fn trace_context_is_stored_only_while_on() {
        let mut subscription = subscription(SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into())), Health::Active);
        assert!(!item_of(&subscription).contains_key("traceContext"));
        subscription.trace_context = true;
        let item = item_of(&subscription);
        assert_eq!(item.get("traceContext"), Some(&AttributeValue::Bool(true)));
        assert_eq!(subscription_of(item).unwrap(), subscription);
    }

    /// An identity token is one map attribute, present only while on (contract section 21).
    #[test]
    fn an_identity_token_is_stored_only_while_on() {
        let mut subscription = subscription(SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into())), Health::Active);
        assert!(!item_of(&subscription).contains_key(IDENTITY_TOKEN));
        subscription.identity_token = IdentityToken::parse(&serde_json::json!({"audience": "api://r"})).unwrap();
        let item = item_of(&subscription);
        let Some(AttributeValue::M(map)) = item.get(IDENTITY_TOKEN) else { panic!("a map: {item:?}") };
        assert_eq!(map.get("audience"), Some(&s("api://r")));
        assert_eq!(subscription_of(item).unwrap(), subscription);
    }

    /// `whileDisabled` is stored as its name; an item of before, without it, holds.
    #[test]
    fn while_disabled_is_stored_by_name_and_holds_when_absent() {
        let mut skipping = subscription(SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into())), Health::Active);
        skipping.while_disabled = WhileDisabled::Skip;
        let mut item = item_of(&skipping);
        assert_eq!(item.get(WHILE_DISABLED), Some(&s("skip")));
        assert_eq!(subscription_of(item.clone()).unwrap(), skipping);
        item.remove(WHILE_DISABLED);
        assert_eq!(subscription_of(item).unwrap().while_disabled, WhileDisabled::Hold);
    }

    /// Each health is the attributes items have always had: `failingSince` while failing,
    /// `disabledAt` and `disabledReason` (the contract's words) while disabled.
    #[test]
    fn health_is_stored_in_the_attributes_of_before() {
        let (at, since) = ("2026-11-28T09:00:00.000Z", "2026-11-27T09:00:00.000Z");
        let sealed = || SecretsAtRest::Sealed(SealedSecrets("c2VhbGVk".into()));
        for (health, attributes) in [
            (Health::Active, vec![]),
            (Health::Failing { since: since.parse().unwrap() }, vec![("failingSince", since)]),
            (
                Health::Disabled { at: at.parse().unwrap(), reason: DisabledReason::Gone },
                vec![("disabledAt", at), ("disabledReason", "gone")],
            ),
            (
                Health::Disabled { at: at.parse().unwrap(), reason: DisabledReason::Manual },
                vec![("disabledAt", at), ("disabledReason", "manual")],
            ),
        ] {
            let item = item_of(&subscription(sealed(), health.clone()));
            for name in ["failingSince", "disabledAt", "disabledReason"] {
                let expected = attributes.iter().find(|(known, _)| *known == name).map(|(_, value)| s(value));
                assert_eq!(item.get(name), expected.as_ref(), "{health:?}: {name}");
            }
            assert_eq!(subscription_of(item).unwrap().health, health);
        }
        // Disabled while the failure clock ran (a pause of a failing subscription): disabled.
        let mut item = item_of(&subscription(sealed(), Health::Failing { since: since.parse().unwrap() }));
        item.insert("disabledAt".into(), s(at));
        item.insert("disabledReason".into(), s("manual"));
        let health = subscription_of(item).unwrap().health;
        assert_eq!(health, Health::Disabled { at: at.parse().unwrap(), reason: DisabledReason::Manual });
    }
}
