//! The delivery function: for each queue message, loads the subscription, signs the body and
//! POSTs it. The messages of a batch are sent concurrently; failures are retried on the
//! contract's schedule through the message's visibility, then go to the dead-letter queue.
//! Every attempt is written to the delivery log with one write, and the subscription's
//! failure clock only when its state changes (contract section 9).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use career_core::clock;
use career_core::config::{ConfigError, Settings};
use career_core::delivery::log::AttemptRecord;
use career_core::delivery::retry::{jitter, RetrySchedule};
use career_core::delivery::sender::{Outcome, Sender};
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::queue::DeliveryQueue;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::{StoredSubscription, WebhookTable};
use career_core::telemetry::{delivery_metrics, DeliveryResult};
use career_core::webhooks::ClockChange;
use chrono::{DateTime, Utc};

pub struct Deps {
    webhooks: WebhookTable,
    deliveries: DeliveryTable,
    queue: DeliveryQueue,
    sender: Sender,
    schedule: RetrySchedule,
    disable_after: Duration,
    metrics_namespace: String,
}

impl Deps {
    pub fn new(
        dynamodb: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
        settings: &Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            webhooks: WebhookTable::new(dynamodb.clone(), &settings.tables.webhooks),
            deliveries: DeliveryTable::new(dynamodb.clone(), &settings.tables.deliveries),
            queue: DeliveryQueue::new(sqs.clone(), settings.require_queue_url()?),
            sender: Sender::new(settings.allow_insecure_webhook_urls),
            schedule: RetrySchedule { base: settings.retry_base, max_attempts: settings.max_delivery_attempts },
            disable_after: settings.webhook_disable_after,
            metrics_namespace: settings.metrics_namespace.clone(),
        })
    }
}

pub async fn handle(deps: &Deps, event: SqsEvent) -> SqsBatchResponse {
    let attempts = event.records.iter().map(|message| deliver(deps, message));
    let delivered = futures_util::future::join_all(attempts).await;
    let mut response = SqsBatchResponse::default();
    for (message, ok) in event.records.iter().zip(delivered) {
        if !ok {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = message.message_id.clone().unwrap_or_default();
            response.batch_item_failures.push(failure);
        }
    }
    response
}

/// `false` when the message must stay on the queue for another attempt.
async fn deliver(deps: &Deps, message: &SqsMessage) -> bool {
    let parsed = message.body.as_deref().map(serde_json::from_str::<DeliveryMessage>);
    let Some(Ok(delivery)) = parsed else {
        tracing::warn!(message_id = ?message.message_id, "dropping a delivery message that cannot be read");
        return true;
    };
    let subscription = match deps.webhooks.get(&delivery.user_id, &delivery.subscription_id).await {
        Ok(Some(subscription)) => subscription,
        Ok(None) => {
            tracing::info!(delivery_id = %delivery.delivery_id, "subscription deleted; delivery dropped");
            return true;
        }
        Err(err) => {
            // Left for the queue's visibility timeout to bring back.
            tracing::error!(delivery_id = %delivery.delivery_id, error = %err, "loading the subscription failed");
            return false;
        }
    };
    if !subscription.is_enabled() {
        return skip(deps, &delivery).await;
    }
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let signed = SignedDelivery::new(&delivery, &subscription.secret, now);
    let (sender, url) = (deps.sender.clone(), subscription.url.clone());
    let started = Instant::now();
    let (outcome, body) = tokio::task::spawn_blocking(move || (sender.send(&url, &signed), signed.body))
        .await
        .unwrap_or_else(|e| (Outcome::NoAnswer(format!("the sending task failed: {e}")), delivery.body()));
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let attempt: u32 = message.attributes.get("ApproximateReceiveCount").and_then(|n| n.parse().ok()).unwrap_or(1);
    let delivered = matches!(outcome, Outcome::Delivered(_));
    let wait = if delivered { None } else { deps.schedule.wait_after(attempt, jitter()) };
    let finished_at = clock::now();
    // Two independent writes (the second only when the subscription's state changes).
    tokio::join!(
        record_attempt(deps, &delivery, &body, AttemptRecord::new(&outcome, finished_at, wait)),
        keep_failure_clock(deps, &subscription, delivered, wait.is_none(), finished_at),
    );

    let kind = delivery.event.kind.as_str();
    if let Outcome::Delivered(answer) = &outcome {
        let metrics = delivery_metrics(&deps.metrics_namespace, kind, DeliveryResult::Succeeded, latency_ms);
        tracing::info!(delivery_id = %delivery.delivery_id, subscription_id = %delivery.subscription_id, attempt, status = answer.status, latency_ms, emf = %metrics, "delivered");
        return true;
    }
    let result = DeliveryResult::Failed { exhausted: wait.is_none() };
    let metrics = delivery_metrics(&deps.metrics_namespace, kind, result, latency_ms);
    tracing::warn!(
        delivery_id = %delivery.delivery_id,
        subscription_id = %delivery.subscription_id,
        attempt,
        latency_ms,
        error = outcome.error().unwrap_or_default(),
        retry_in_seconds = wait.map(|w| w.as_secs_f64()),
        emf = %metrics,
        "delivery failed"
    );
    // After the last attempt the message becomes visible at once, and the queue's redrive
    // policy moves it to the dead-letter queue on its next receive.
    let receipt = message.receipt_handle.as_deref().unwrap_or_default();
    if let Err(err) = deps.queue.retry_after(receipt, wait.unwrap_or_default()).await {
        tracing::error!(delivery_id = %delivery.delivery_id, error = %err, "scheduling the retry failed");
    }
    false
}

/// A disabled subscription is sent nothing: the delivery is logged `skipped` and dropped.
async fn skip(deps: &Deps, delivery: &DeliveryMessage) -> bool {
    if let Err(err) = deps.deliveries.record_skipped(delivery, &delivery.body(), clock::now()).await {
        // Nothing was sent; the message comes back to be recorded.
        tracing::error!(delivery_id = %delivery.delivery_id, error = %err, "recording a skipped delivery failed");
        return false;
    }
    let metrics = delivery_metrics(&deps.metrics_namespace, delivery.event.kind.as_str(), DeliveryResult::Skipped, 0.0);
    tracing::info!(delivery_id = %delivery.delivery_id, subscription_id = %delivery.subscription_id, emf = %metrics, "delivery skipped: the subscription is disabled");
    true
}

/// One write per attempt. The receiver already has its answer, so a failure here is
/// logged and the delivery carries on.
async fn record_attempt(deps: &Deps, delivery: &DeliveryMessage, body: &[u8], attempt: AttemptRecord) {
    if let Err(err) = deps.deliveries.record_attempt(delivery, body, &attempt).await {
        tracing::error!(delivery_id = %delivery.delivery_id, error = %err, "recording the attempt failed");
    }
}

/// Writes the subscription only when the attempt changes its state: the first failure
/// after a success, the first success after a failure, or disabling it.
async fn keep_failure_clock(
    deps: &Deps,
    subscription: &StoredSubscription,
    delivered: bool,
    last_attempt: bool,
    now: DateTime<Utc>,
) {
    let (user_id, id) = (&subscription.user_id, &subscription.subscription_id);
    let change =
        ClockChange::after_attempt(subscription.failing_since(), delivered, last_attempt, now, deps.disable_after);
    let written = match change {
        ClockChange::Unchanged => return,
        ClockChange::StartFailing => deps.webhooks.start_failure_clock(user_id, id, &clock::rfc3339(now)).await,
        ClockChange::Recovered => deps.webhooks.reset_failure_clock(user_id, id).await,
        ClockChange::Disable => {
            let since = subscription.failing_since.as_deref().unwrap_or_default();
            let disabled = deps.webhooks.disable(user_id, id, since, &clock::rfc3339(now)).await;
            if let Ok(true) = disabled {
                tracing::warn!(subscription_id = %id, failing_since = %since, "subscription disabled: failing too long");
            }
            disabled.map(drop)
        }
    };
    if let Err(err) = written {
        tracing::error!(subscription_id = %id, error = %err, "updating the failure clock failed");
    }
}
