//! The delivery function: for each queue message, loads the subscription, signs the body and
//! POSTs it. The messages of a batch are sent concurrently; failures are retried on the
//! contract's schedule through the message's visibility, then go to the dead-letter queue.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use career_core::config::{ConfigError, Settings};
use career_core::delivery::retry::{jitter, RetrySchedule};
use career_core::delivery::sender::{Outcome, Sender};
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::queue::DeliveryQueue;
use career_core::sealing::Sealer;
use career_core::store::webhooks::WebhookTable;

pub struct Deps {
    webhooks: WebhookTable,
    sealer: Sealer,
    queue: DeliveryQueue,
    sender: Sender,
    schedule: RetrySchedule,
}

impl Deps {
    pub fn new(
        dynamodb: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
        kms: &aws_sdk_kms::Client,
        settings: &Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            webhooks: WebhookTable::new(dynamodb.clone(), &settings.tables.webhooks),
            sealer: Sealer::new(kms, dynamodb, settings)?,
            queue: DeliveryQueue::new(sqs.clone(), settings.require_queue_url()?),
            sender: Sender::new(settings.allow_insecure_webhook_urls),
            schedule: RetrySchedule { base: settings.retry_base, max_attempts: settings.max_delivery_attempts },
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
    let secrets = match deps.sealer.open(&subscription).await {
        Ok(secrets) => secrets,
        Err(err) => {
            tracing::error!(delivery_id = %delivery.delivery_id, error = %err, "opening the subscription's secrets failed");
            return false;
        }
    };
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let signed = SignedDelivery::new(&delivery, &secrets.active_at(now), now);
    let (sender, url) = (deps.sender.clone(), subscription.url.clone());
    let started = Instant::now();
    let outcome = tokio::task::spawn_blocking(move || sender.send(&url, &signed))
        .await
        .unwrap_or_else(|e| Outcome::Failed(format!("the sending task failed: {e}")));
    let attempt: u32 = message.attributes.get("ApproximateReceiveCount").and_then(|n| n.parse().ok()).unwrap_or(1);
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let failure = match outcome {
        Outcome::Delivered(status) => {
            tracing::info!(delivery_id = %delivery.delivery_id, subscription_id = %delivery.subscription_id, attempt, status, latency_ms, "delivered");
            return true;
        }
        Outcome::Failed(reason) => reason,
    };
    let wait = deps.schedule.wait_after(attempt, jitter());
    tracing::warn!(
        delivery_id = %delivery.delivery_id,
        subscription_id = %delivery.subscription_id,
        attempt,
        latency_ms,
        error = %failure,
        retry_in_seconds = wait.map(|w| w.as_secs_f64()),
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
