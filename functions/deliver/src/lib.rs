//! The delivery function: for each queue message, loads the subscription, signs the body and
//! POSTs it. It consumes both lanes (career_core::queue), each through its own event source
//! mapping. The messages of a batch are sent concurrently.
//!
//! - Main lane: a failed attempt is handed to the retry lane with the first retry wait as
//!   its delay, and a delivery to a subscription that is currently failing is handed over
//!   before any attempt, so the main lane only ever waits on receivers that were healthy.
//!   What a batch hands over goes in one `SendMessageBatch`.
//! - Retry lane: a failed attempt stays on the lane, visible again after the schedule's
//!   wait; after the last attempt the redrive policy moves it to the dead-letter queue.
//!
//! Every attempt is written to the delivery log with one write. The subscription's failure
//! clock (contract section 9) is written only when its state changes: its first failure
//! after a success, its first success after a failure, or its disabling. A disabled
//! subscription is sent nothing; its deliveries are logged `skipped`.

use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use career_core::clock::{self, Timestamp};
use career_core::config::{ConfigError, Settings};
use career_core::delivery::log::AttemptRecord;
use career_core::delivery::retry::{jitter, RetrySchedule};
use career_core::delivery::sender::{Outcome, SendFailure, Sender};
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::queue::{DeliveryQueues, Lane};
use career_core::rotation::SigningSecrets;
use career_core::sealing::Sealer;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::{StoredSubscription, WebhookTable};
use career_core::telemetry::{delivery_metrics, DeliveryResult};
use career_core::webhooks::{ClockChange, DisabledReason, LoggedUrl};
use chrono::{DateTime, Utc};
use tracing::Instrument;

pub struct Deps {
    webhooks: WebhookTable,
    deliveries: DeliveryTable,
    sealer: Sealer,
    queues: DeliveryQueues,
    sender: Sender,
    schedule: RetrySchedule,
    disable_after: Duration,
    metrics_namespace: String,
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
            deliveries: DeliveryTable::new(dynamodb.clone(), &settings.tables.deliveries),
            sealer: Sealer::new(kms, dynamodb, settings)?,
            queues: DeliveryQueues::new(sqs.clone(), settings)?,
            sender: Sender::new(settings.allow_insecure_webhook_urls),
            schedule: RetrySchedule { base: settings.retry_base, max_attempts: settings.max_delivery_attempts },
            disable_after: settings.webhook_disable_after,
            metrics_namespace: settings.metrics_namespace.clone(),
        })
    }
}

/// What becomes of a received message.
enum Disposition {
    /// Delivered, skipped, dropped or moved: deleted from its queue.
    Done,
    /// Left on its queue, visible again after the wait it was given (or the queue's
    /// visibility timeout).
    Stays,
    /// Moved to the retry lane, to be received after the delay.
    HandOver(Box<DeliveryMessage>, Duration),
}

pub async fn handle(deps: &Deps, event: SqsEvent) -> SqsBatchResponse {
    let dispositions = futures_util::future::join_all(event.records.iter().map(|message| process(deps, message))).await;
    let mut staying: Vec<&SqsMessage> = Vec::new();
    let mut hand_overs: Vec<(&SqsMessage, (&DeliveryMessage, Duration))> = Vec::new();
    for (message, disposition) in event.records.iter().zip(&dispositions) {
        match disposition {
            Disposition::Done => {}
            Disposition::Stays => staying.push(message),
            Disposition::HandOver(delivery, delay) => hand_overs.push((message, (&**delivery, *delay))),
        }
    }
    // One call hands over what the batch moves to the retry lane; what it does not take stays.
    let moving: Vec<(&DeliveryMessage, Duration)> = hand_overs.iter().map(|(_, moving)| *moving).collect();
    match deps.queues.hand_over(&moving).await {
        Ok(refused) => {
            staying.extend(refused.into_iter().filter_map(|i| hand_overs.get(i).map(|(message, _)| *message)))
        }
        Err(err) => {
            tracing::error!(error = %err, deliveries = moving.len(), "handing deliveries to the retry lane failed");
            staying.extend(hand_overs.iter().map(|(message, _)| *message));
        }
    }
    let mut response = SqsBatchResponse::default();
    for message in staying {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = message.message_id.clone().unwrap_or_default();
        response.batch_item_failures.push(failure);
    }
    response
}

async fn process(deps: &Deps, message: &SqsMessage) -> Disposition {
    let lane = Lane::of(message);
    let parsed = message.body.as_deref().map(serde_json::from_str::<DeliveryMessage>);
    let Some(Ok(delivery)) = parsed else {
        tracing::warn!(message_id = ?message.message_id, "dropping a delivery message that cannot be read");
        return Disposition::Done;
    };
    let receives: u32 = message.attributes.get("ApproximateReceiveCount").and_then(|n| n.parse().ok()).unwrap_or(1);
    let turn = Turn {
        lane,
        receipt: message.receipt_handle.as_deref().unwrap_or_default(),
        attempt: delivery.earlier_attempts + receives,
        delivery,
    };
    // Every line of this delivery's turn carries these fields once, from its span.
    let span = tracing::info_span!(
        "delivery",
        delivery_id = %turn.delivery.delivery_id,
        subscription_id = %turn.delivery.subscription_id,
        lane = lane.as_str(),
        attempt = turn.attempt,
    );
    take_turn(deps, turn).instrument(span).await
}

/// One received delivery message: which lane, its receipt, which attempt this is.
struct Turn<'a> {
    lane: Lane,
    receipt: &'a str,
    attempt: u32,
    delivery: DeliveryMessage,
}

/// Load → sign and send → decide.
async fn take_turn(deps: &Deps, turn: Turn<'_>) -> Disposition {
    if turn.attempt > deps.schedule.max_attempts {
        // Every attempt is used (a message handed over after its main-lane attempt gets here
        // one receive early): visible at once, its next receive redrives it.
        return keep(deps, &turn, Duration::ZERO).await;
    }
    let (subscription, secrets) = match load(deps, &turn).await {
        Ok(loaded) => loaded,
        Err(disposition) => return disposition,
    };
    let started = Instant::now();
    let (outcome, body) = send(deps, &turn.delivery, &subscription.url, &secrets).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    decide(deps, turn, &subscription, outcome, &body, latency_ms).await
}

/// The subscription and its secrets, or what becomes of the message when there are none
/// to send with (deleted, disabled, failing on the main lane, or storage failing).
async fn load(deps: &Deps, turn: &Turn<'_>) -> Result<(StoredSubscription, SigningSecrets), Disposition> {
    let delivery = &turn.delivery;
    let subscription = match deps.webhooks.get(&delivery.user_id, &delivery.subscription_id).await {
        Ok(Some(subscription)) => subscription,
        Ok(None) => {
            tracing::info!("subscription deleted; delivery dropped");
            return Err(Disposition::Done);
        }
        Err(err) => {
            // Tried again after the retry base (rather than the queue's 15-minute visibility
            // timeout, for which the subscription's main-lane group would wait).
            tracing::error!(error = %err, "loading the subscription failed");
            return Err(keep(deps, turn, deps.schedule.base).await);
        }
    };
    if !subscription.is_enabled() {
        return Err(skip(deps, turn).await);
    }
    if turn.lane == Lane::Main && subscription.failing_since.is_some() {
        tracing::info!("subscription failing; delivery handed to the retry lane");
        return Err(Disposition::HandOver(Box::new(delivery.clone()), Duration::ZERO));
    }
    match deps.sealer.open(&subscription).await {
        Ok(secrets) => Ok((subscription, secrets)),
        Err(err) => {
            tracing::error!(error = %err, "opening the subscription's secrets failed");
            Err(keep(deps, turn, deps.schedule.base).await)
        }
    }
}

/// Records the attempt, keeps the failure clock, logs the outcome with its metrics, and
/// says what becomes of the message: done, or retried after the schedule's wait.
async fn decide(
    deps: &Deps,
    turn: Turn<'_>,
    subscription: &StoredSubscription,
    outcome: Outcome,
    body: &[u8],
    latency_ms: f64,
) -> Disposition {
    let delivered = matches!(outcome, Outcome::Delivered(_));
    let wait = if delivered { None } else { deps.schedule.wait_after(turn.attempt, jitter()) };
    let finished_at = clock::now();
    // Two independent writes (the second only when the subscription's state changes).
    tokio::join!(
        record_attempt(deps, &turn.delivery, body, AttemptRecord::new(&outcome, finished_at, wait)),
        keep_failure_clock(deps, subscription, delivered, wait.is_none(), finished_at),
    );

    let kind = turn.delivery.event.kind().as_str();
    let receiver = LoggedUrl(&subscription.url);
    if let Outcome::Delivered(answer) = &outcome {
        let metrics = delivery_metrics(&deps.metrics_namespace, kind, DeliveryResult::Succeeded, latency_ms);
        tracing::info!(%receiver, status = answer.status, latency_ms, emf = %metrics, "delivered");
        return Disposition::Done;
    }
    let result = DeliveryResult::Failed { exhausted: wait.is_none() };
    let metrics = delivery_metrics(&deps.metrics_namespace, kind, result, latency_ms);
    tracing::warn!(
        %receiver,
        latency_ms,
        error = outcome.error().unwrap_or_default(),
        retry_in_seconds = wait.map(|w| w.as_secs_f64()),
        emf = %metrics,
        "delivery failed"
    );
    // After the last attempt the wait is none: visible at once, the retry lane's redrive
    // policy moves the message to the dead-letter queue on its next receive.
    let wait = wait.unwrap_or_default();
    match turn.lane {
        Lane::Main => {
            let retried = DeliveryMessage { earlier_attempts: turn.attempt, ..turn.delivery };
            Disposition::HandOver(Box::new(retried), wait)
        }
        Lane::Retry => keep(deps, &turn, wait).await,
    }
}

/// Signs the delivery for this attempt and POSTs it (on the blocking pool: ureq blocks).
/// Returns the outcome and the exact bytes sent.
async fn send(deps: &Deps, delivery: &DeliveryMessage, url: &str, secrets: &SigningSecrets) -> (Outcome, Vec<u8>) {
    let now = clock::now_millis() / 1000;
    let signed = SignedDelivery::new(delivery, &secrets.active_at(now), now);
    let (sender, url) = (deps.sender.clone(), url.to_owned());
    tokio::task::spawn_blocking(move || (sender.send(&url, &signed), signed.body)).await.unwrap_or_else(|err| {
        tracing::error!(delivery_id = %delivery.delivery_id, error = %err, "the sending task failed");
        (Outcome::NoAnswer(SendFailure::TaskFailed), delivery.body())
    })
}

/// A disabled subscription is sent nothing: the delivery is logged `skipped` and dropped.
async fn skip(deps: &Deps, turn: &Turn<'_>) -> Disposition {
    let delivery = &turn.delivery;
    if let Err(err) = deps.deliveries.record_skipped(delivery, &delivery.body(), clock::now()).await {
        // Nothing was sent; the message comes back to be recorded.
        tracing::error!(error = %err, "recording a skipped delivery failed");
        return keep(deps, turn, deps.schedule.base).await;
    }
    let metrics =
        delivery_metrics(&deps.metrics_namespace, delivery.event.kind().as_str(), DeliveryResult::Skipped, 0.0);
    tracing::info!(emf = %metrics, "delivery skipped: the subscription is disabled");
    Disposition::Done
}

/// One write per attempt. The receiver already has its answer, so a failure here is
/// logged and the delivery carries on.
async fn record_attempt(deps: &Deps, delivery: &DeliveryMessage, body: &[u8], attempt: AttemptRecord) {
    if let Err(err) = deps.deliveries.record_attempt(delivery, body, &attempt).await {
        tracing::error!(error = %err, "recording the attempt failed");
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
        ClockChange::StartFailing => {
            deps.webhooks.start_failure_clock(user_id, id, &Timestamp::from_datetime(now)).await
        }
        ClockChange::Recovered => deps.webhooks.reset_failure_clock(user_id, id).await,
        ClockChange::Disable => {
            // Disable follows only a running clock.
            let Some(since) = &subscription.failing_since else { return };
            let disabled = deps
                .webhooks
                .disable(user_id, id, DisabledReason::Failing, Some(since), &Timestamp::from_datetime(now))
                .await;
            if let Ok(true) = disabled {
                tracing::warn!(failing_since = %since, "subscription disabled: failing too long");
            }
            disabled.map(drop)
        }
    };
    if let Err(err) = written {
        tracing::error!(error = %err, "updating the failure clock failed");
    }
}

/// Leaves a message on its lane, visible again after `wait`.
async fn keep(deps: &Deps, turn: &Turn<'_>, wait: Duration) -> Disposition {
    if let Err(err) = deps.queues.retry_after(turn.lane, turn.receipt, wait).await {
        tracing::error!(error = %err, "scheduling the retry failed");
    }
    Disposition::Stays
}
