//! `careerctl demo`: the items that the sample events in `events/` act on, and a receiver for
//! their deliveries, so that every sample, invoked with `make run`'s demo key, answers what
//! the table of samples in docs/deploying.md says.
//!
//! The samples name fixed ids, and the API only ever makes fresh ones (`generate` in
//! `career_core::ids`). `demo seed` is the one deliberate way to put items with given ids in
//! place: an admin command, like every write that does not come through the API, for the
//! demo user of `make run` only, writing through the same store functions the API uses.

use std::net::IpAddr;

use anyhow::{anyhow, bail, Context};
use aws_sdk_dynamodb::Client as DynamoDb;
use career_core::alerts::{Alert, AlertAction, Category, Severity};
use career_core::clock::Timestamp;
use career_core::config::Settings;
use career_core::credentials::Scopes;
use career_core::delivery::attempt::{Outcome, SendFailure};
use career_core::delivery::log::AttemptRecord;
use career_core::delivery::DeliveryMessage;
use career_core::events::{Event, EventKind};
use career_core::ids::{AlertId, DeliveryId, SubscriptionId, UserId};
use career_core::store::alerts::AlertTable;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::{Created, WebhookTable};
use career_core::store::StoreError;
use career_core::webhooks::rotation::SigningSecrets;
use career_core::webhooks::{Subscription, WebhookSecret, WebhookUrl, MAX_SUBSCRIPTIONS_PER_USER};
use serde::Serialize;

use crate::admin::{Admin, IssuedKey};

// It answers on the local gateway's connection handling, so it comes with the local stack.
#[cfg(feature = "local")]
pub mod receiver;

/// The user `make run` issues its demo key for, and whose items `demo seed` makes.
pub const USER: &str = "demo-user";
/// The alert `events/alerts-mark-read.json` marks read.
pub const ALERT: &str = "alr_01M8BDWP008BW9FC8PBW4Q3DY4";
/// The subscription the webhook samples act on and the event-function samples deliver to.
pub const SUBSCRIPTION: &str = "whk_01M8DWVHC0HA1MTS2ZMV8KRM9T";
/// The failed delivery that `events/webhooks-delivery-retry.json` sends again.
pub const FAILED_DELIVERY: &str = "dlv_01M8DWX2B7K9Q4R6T8V0W2Y4Z6";
/// Where `demo receiver` listens by default (on 127.0.0.1), and so where the samples'
/// subscriptions deliver.
pub const RECEIVER_PORT: u16 = 4000;

/// What `demo seed` made (it prints this).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Seeded {
    pub user_id: UserId,
    pub alert_id: AlertId,
    pub subscription_id: SubscriptionId,
    pub url: String,
    /// The subscription's signing secret, for the receiver (`WEBHOOK_SECRET`).
    pub secret: String,
    pub failed_delivery_id: DeliveryId,
}

/// A key for the demo user with all six scopes, as `make run` prints it.
pub async fn demo_key(admin: &Admin) -> anyhow::Result<IssuedKey> {
    admin.create_key(USER, Scopes::all(), Some("make run demo key".into()), None).await
}

/// The receiver URL `demo seed` subscribes by default.
pub fn default_receiver_url() -> String {
    format!("http://127.0.0.1:{RECEIVER_PORT}/hook")
}

/// Puts the demo user's sample items in place as the samples expect them, whatever state
/// earlier runs of the samples left them in: the alert unread and not dismissed; the
/// subscription to both event kinds at `receiver_url`, enabled, with a fresh secret; and a
/// `webhook.ping` delivery of it that failed its last attempt (made up here: it was never
/// sent).
pub async fn seed(
    dynamodb: &DynamoDb,
    settings: &Settings,
    sealer: &Sealer,
    receiver_url: &str,
) -> anyhow::Result<Seeded> {
    let url = loopback_url(receiver_url, &settings.webhook_urls)?;
    let user_id = UserId::parse(USER).expect("the demo user is a user id");
    let alert_id = AlertId::parse(ALERT).expect("the sample alert id is an alert id");
    let subscription_id = SubscriptionId::parse(SUBSCRIPTION).expect("the sample subscription id is one");
    let delivery_id = DeliveryId::parse(FAILED_DELIVERY).expect("the sample delivery id is one");
    let alerts = AlertTable::new(dynamodb.clone(), &settings.tables.alerts);
    seed_alert(&alerts, &user_id, &alert_id).await.context("seeding the alert")?;
    let webhooks = WebhookTable::new(dynamodb.clone(), &settings.tables.webhooks);
    let secret = seed_subscription(&webhooks, sealer, &user_id, &subscription_id, &url).await?;
    let deliveries = DeliveryTable::new(dynamodb.clone(), &settings.tables.deliveries);
    seed_failed_delivery(&deliveries, &user_id, &subscription_id, &delivery_id)
        .await
        .context("seeding the failed delivery")?;
    Ok(Seeded {
        user_id,
        alert_id,
        subscription_id,
        url: url.as_str().to_owned(),
        secret: secret.expose().to_owned(),
        failed_delivery_id: delivery_id,
    })
}

/// The sample alert, unread and not dismissed.
async fn seed_alert(alerts: &AlertTable, user_id: &UserId, alert_id: &AlertId) -> Result<(), StoreError> {
    let now = Timestamp::now();
    if alerts.apply(user_id, alert_id, AlertAction::Unread, now).await?.is_some() {
        alerts.apply(user_id, alert_id, AlertAction::Undismiss, now).await?;
    } else {
        alerts.insert(user_id, &demo_alert(alert_id.clone(), now)).await?;
    }
    Ok(())
}

/// The sample subscription, made anew (so that its secret can be shown): its secret.
async fn seed_subscription(
    webhooks: &WebhookTable,
    sealer: &Sealer,
    user_id: &UserId,
    subscription_id: &SubscriptionId,
    url: &WebhookUrl,
) -> anyhow::Result<WebhookSecret> {
    const SEEDING: &str = "seeding the subscription";
    webhooks.delete(user_id, subscription_id).await.context(SEEDING)?;
    let secret = WebhookSecret::generate();
    let sealed = sealer
        .seal(user_id, subscription_id, &SigningSecrets::new(secret.clone(), false))
        .await
        .context("sealing the subscription's secret")?;
    let kinds = EventKind::SUBSCRIBABLE.to_vec();
    let subscription = Subscription::new(user_id.clone(), subscription_id.clone(), url.into(), kinds, sealed, None);
    if webhooks.insert(&subscription, MAX_SUBSCRIPTIONS_PER_USER).await.context(SEEDING)? == Created::LimitReached {
        bail!(
            "{USER} has {MAX_SUBSCRIPTIONS_PER_USER} subscriptions already (each run of the create sample adds one): delete one"
        );
    }
    Ok(secret)
}

/// A `webhook.ping` delivery of the subscription that failed its last attempt (made up: it
/// was never sent).
async fn seed_failed_delivery(
    deliveries: &DeliveryTable,
    user_id: &UserId,
    subscription_id: &SubscriptionId,
    delivery_id: &DeliveryId,
) -> Result<(), StoreError> {
    let message = DeliveryMessage {
        delivery_id: delivery_id.clone(),
        user_id: user_id.clone(),
        subscription_id: subscription_id.clone(),
        event: Event::ping(subscription_id),
        generation: 0,
        claimed_until: None,
        trace: None,
    };
    let refused = Outcome::NoAnswer(SendFailure::ConnectionRefused);
    let attempt = AttemptRecord::failed(&refused, None, Timestamp::now());
    deliveries.record_attempt(&message, &message.body(), &attempt, None).await.map(drop)
}

fn demo_alert(id: AlertId, now: Timestamp) -> Alert {
    Alert {
        id,
        category: Category::CareerHealth,
        severity: Severity::Warning,
        title: "Update your skills".into(),
        message: "The alert that the sample events in events/ act on (careerctl demo seed).".into(),
        created_at: now,
        read: false,
        read_at: None,
        dismissed: false,
        dismissed_at: None,
    }
}

/// `text` as a subscription URL, if it points at this machine (demo data never makes a
/// subscription that reaches out of it) and the API would take it with these settings.
fn loopback_url(text: &str, policy: &career_core::webhooks::UrlPolicy) -> anyhow::Result<WebhookUrl> {
    let refused = |why: &str| anyhow!("--receiver-url {text}: {why}");
    let parsed = url::Url::parse(text).map_err(|e| refused(&e.to_string()))?;
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        _ => false,
    };
    if !loopback {
        return Err(refused("the demo subscription delivers to this machine only (127.0.0.1 or [::1])"));
    }
    WebhookUrl::parse(&serde_json::Value::from(text), policy).map_err(|e| {
        refused(&format!(
            "{e}; the demo data is for the local stack, which allows http and loopback (source .local/env)"
        ))
    })
}
