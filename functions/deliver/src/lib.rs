//! The delivery function: for each queue message, claim and load → plan → sign and send →
//! plan → execute. The decisions are career_core::delivery::plan's; this file only does the
//! I/O they name. It consumes both lanes (career_core::delivery::queue), each through its own event source
//! mapping; the messages of a batch are sent concurrently, and each leaves its lane as soon
//! as its own attempt is recorded (contract section 12), so none waits for another's send.

use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings};
use career_core::delivery::attempt::{Outcome, SendFailure};
use career_core::delivery::log::AttemptRecord;
use career_core::delivery::plan::{
    self, After, Answered, Before, Found, Lease, MessageFate, Policy, SubscriptionChange, SubscriptionState,
};
use career_core::delivery::queue::{DeliveryQueues, Lane};
use career_core::delivery::retry::{jitter, RetrySchedule};
use career_core::delivery::sender::Sender;
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::WebhookTable;
use career_core::store::StoreError;
use career_core::telemetry::{delivery_metrics, DeliveryResult};
use career_core::webhooks::rotation::SigningSecrets;
use career_core::webhooks::sealing::Sealer;
use career_core::webhooks::{DisabledReason, LoggedUrl, Subscription};
use tracing::Instrument;

pub struct Deps {
    webhooks: WebhookTable,
    deliveries: DeliveryTable,
    sealer: Sealer,
    queues: DeliveryQueues,
    sender: Sender,
    policy: Policy,
    metrics_namespace: String,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            webhooks: WebhookTable::new(clients.dynamodb().clone(), &settings.tables.webhooks),
            deliveries: DeliveryTable::new(clients.dynamodb().clone(), &settings.tables.deliveries),
            sealer: Sealer::new(clients, settings)?,
            queues: DeliveryQueues::with_dead_letter(clients, settings)?,
            sender: Sender::new(settings.allow_insecure_webhook_urls),
            policy: Policy {
                schedule: RetrySchedule { base: settings.retry_base, max_attempts: settings.max_delivery_attempts },
                disable_after: settings.webhook_disable_after,
            },
            metrics_namespace: settings.metrics_namespace.clone(),
        })
    }
}

/// Every message is settled by its own turn; those that stay on their lane (a retry later,
/// or storage that failed) are reported, so the event source mapping leaves them there.
pub async fn handle(deps: &Deps, event: SqsEvent) -> SqsBatchResponse {
    // A message alone in its batch waits for no other: the event source mapping deletes it as
    // this invocation returns, so an early delete would only be a second, billed request.
    let early = event.records.len() > 1;
    let stays = futures_util::future::join_all(event.records.iter().map(|message| process(deps, message, early))).await;
    let mut response = SqsBatchResponse::default();
    for (message, _) in event.records.iter().zip(stays).filter(|(_, stays)| *stays) {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = message.message_id.clone().unwrap_or_default();
        response.batch_item_failures.push(failure);
    }
    response
}

/// One received message: its lane, its receipt and the delivery it carries.
struct Received<'a> {
    lane: Lane,
    receipt: Receipt<'a>,
    delivery: DeliveryMessage,
}

/// Where a message is on its lane, and whether its turn deletes it as soon as it is settled
/// (when its batch holds others) or leaves that to the event source mapping.
#[derive(Clone, Copy)]
struct Receipt<'a> {
    handle: &'a str,
    early: bool,
}

/// Takes one message's turn; `true` when the message stays on its lane.
async fn process(deps: &Deps, message: &SqsMessage, early: bool) -> bool {
    let lane = Lane::of(message);
    let receipt = Receipt { handle: message.receipt_handle.as_deref().unwrap_or_default(), early };
    let parsed = message.body.as_deref().map(serde_json::from_str::<DeliveryMessage>);
    let Some(Ok(delivery)) = parsed else {
        tracing::warn!(message_id = ?message.message_id, "dropping a delivery message that cannot be read");
        return acknowledge(deps, lane, receipt).await;
    };
    // Every line of this delivery's turn carries these fields once, from its span.
    let span = tracing::info_span!(
        "delivery",
        delivery_id = %delivery.delivery_id,
        subscription_id = %delivery.subscription_id,
        lane = lane.as_str(),
        generation = delivery.generation,
    );
    take_turn(deps, Received { lane, receipt, delivery }).instrument(span).await
}

async fn take_turn(deps: &Deps, received: Received<'_>) -> bool {
    let now = Timestamp::now();
    let (subscription, found) = match load(deps, &received, now).await {
        Ok(loaded) => loaded,
        Err(err) => {
            // Tried again after the retry base (rather than the queue's visibility timeout,
            // for which a main-lane group would wait).
            tracing::error!(error = %err, "loading the delivery failed");
            return stay(deps, &received, deps.policy.schedule.base).await;
        }
    };
    let lease = found.claim.lease();
    match plan::before_send(&found, now, &deps.policy) {
        Before::Send { attempt } => {
            let subscription = subscription.expect("a send has a subscription");
            attempt_delivery(deps, received, &subscription, attempt, lease).await
        }
        Before::Stale => {
            tracing::info!("stale copy dropped unsent: the record belongs to another generation or is settled");
            acknowledge(deps, received.lane, received.receipt).await
        }
        Before::Skip(reason) => skip(deps, &received, reason, now).await,
        Before::HandOver => {
            tracing::info!("subscription failing; delivery handed to the retry lane");
            if let Some(lease) = lease {
                // Kept, the claim would only make the handed-over copy wait for it to end.
                if let Err(err) = deps.deliveries.release(&received.delivery, lease).await {
                    tracing::warn!(error = %err, "giving up the claim failed; the handed-over copy waits for it");
                }
            }
            hand_over(deps, &received, Duration::ZERO).await
        }
        Before::NotYet(wait) => stay(deps, &received, wait).await,
    }
}

/// The claim on the record and the subscription, together. A first attempt that comes
/// early holds the claim its record was created with, and writes nothing to hold it.
async fn load(
    deps: &Deps,
    received: &Received<'_>,
    now: Timestamp,
) -> Result<(Option<Subscription>, Found), StoreError> {
    let delivery = &received.delivery;
    let claim = async {
        match plan::granted(delivery, received.lane, now) {
            Some(granted) => Ok(granted),
            None => deps.deliveries.claim(delivery, Lease::from(now), now).await,
        }
    };
    let (claim, subscription) = tokio::join!(claim, deps.webhooks.get(&delivery.user_id, &delivery.subscription_id));
    let subscription = subscription?;
    let kind = delivery.event.kind();
    let found = Found {
        lane: received.lane,
        generation: delivery.generation,
        kind,
        claim: claim?,
        subscription: subscription.as_ref().map(|s| SubscriptionState::of(s, kind)),
    };
    Ok((subscription, found))
}

/// Opens the secrets, signs and sends, then records and executes the plan for the answer.
/// `lease` is the turn's claim on the record (none for a record not written yet).
async fn attempt_delivery(
    deps: &Deps,
    received: Received<'_>,
    subscription: &Subscription,
    attempt: u32,
    lease: Option<Lease>,
) -> bool {
    let secrets = match deps.sealer.open(subscription).await {
        Ok(secrets) => secrets,
        Err(err) => {
            tracing::error!(error = %err, "opening the subscription's secrets failed");
            return stay(deps, &received, deps.policy.schedule.base).await;
        }
    };
    if let Some(lease) = lease.filter(|lease| !lease.allows_send_at(Timestamp::now())) {
        // Too late to send under the claim; its next turn comes when the claim has ended.
        tracing::warn!("the claim ran short before the send; nothing sent");
        return stay(deps, &received, lease.until.since(Timestamp::now())).await;
    }
    let started = Instant::now();
    let (outcome, body) = send(deps, &received.delivery, &subscription.url, &secrets).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let now = Timestamp::now();
    let answer = outcome.answer();
    let answered = Answered::of(answer.map(|a| a.status), answer.and_then(|a| a.retry_after.as_deref()), now);
    let failing_since = subscription.health.failing_since();
    let after = plan::after_send(attempt, answered, failing_since, now, &deps.policy, jitter());
    let recorded = record(deps, &received.delivery, subscription, (&outcome, &body), &after, lease, now).await;
    report(deps, &received.delivery, subscription, &outcome, &after, attempt, latency_ms);
    match recorded {
        // The attempt stands as recorded; the message follows the plan.
        Ok(true) => settle(deps, &received, after.message).await,
        Ok(false) => {
            tracing::info!(
                "the record moved on during the send (another generation, or the claim lapsed); this copy is dropped"
            );
            acknowledge(deps, received.lane, received.receipt).await
        }
        // Sent, but not recorded: tried again after the schedule's base, as the same attempt.
        Err(err) => {
            tracing::error!(error = %err, "recording the attempt failed");
            stay(deps, &received, deps.policy.schedule.base).await
        }
    }
}

/// Signs the delivery for this attempt and POSTs it (on the blocking pool: ureq blocks).
/// Returns the outcome and the exact bytes sent.
async fn send(deps: &Deps, delivery: &DeliveryMessage, url: &str, secrets: &SigningSecrets) -> (Outcome, Vec<u8>) {
    let now = Timestamp::now();
    let signed = SignedDelivery::new(delivery, &secrets.active_at(now), now);
    let (sender, url) = (deps.sender.clone(), url.to_owned());
    tokio::task::spawn_blocking(move || (sender.send(&url, &signed), signed.body)).await.unwrap_or_else(|err| {
        tracing::error!(error = %err, "the sending task failed");
        (Outcome::NoAnswer(SendFailure::TaskFailed), delivery.body())
    })
}

/// The attempt's write (its outcome and the bytes sent), under the turn's claim, and the
/// subscription's when the plan changes it (independent, so together). `Ok(false)` when
/// another generation owns the record.
async fn record(
    deps: &Deps,
    delivery: &DeliveryMessage,
    subscription: &Subscription,
    (outcome, body): (&Outcome, &[u8]),
    after: &After,
    lease: Option<Lease>,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let attempt = after.record.attempt(outcome, now);
    let (recorded, changed) = tokio::join!(
        deps.deliveries.record_attempt(delivery, body, &attempt, lease),
        change_subscription(deps, subscription, after.subscription, &attempt),
    );
    if let Err(err) = changed {
        tracing::error!(error = %err, "updating the subscription's failure clock failed");
    }
    recorded
}

/// Writes the subscription only when the plan changes it.
async fn change_subscription(
    deps: &Deps,
    subscription: &Subscription,
    change: SubscriptionChange,
    attempt: &AttemptRecord,
) -> Result<(), StoreError> {
    let (user_id, id, now) = (&subscription.user_id, &subscription.id, attempt.at);
    match change {
        SubscriptionChange::Unchanged => Ok(()),
        SubscriptionChange::StartFailing => deps.webhooks.start_failure_clock(user_id, id, attempt).await,
        SubscriptionChange::Recovered => deps.webhooks.reset_failure_clock(user_id, id, now).await,
        SubscriptionChange::Disable(reason) => {
            // Failing disables only while the clock still shows the failure it measured.
            let since = subscription.health.failing_since().filter(|_| reason == DisabledReason::Failing);
            if deps.webhooks.disable(user_id, id, reason, since, now).await? {
                tracing::warn!(reason = ?reason, "subscription disabled");
            }
            Ok(())
        }
    }
}

/// Logs the attempt's outcome with its metrics.
fn report(
    deps: &Deps,
    delivery: &DeliveryMessage,
    subscription: &Subscription,
    outcome: &Outcome,
    after: &After,
    attempt: u32,
    latency_ms: f64,
) {
    let kind = delivery.event.kind().as_str();
    let receiver = LoggedUrl(&subscription.url);
    if let Outcome::Delivered(answer) = outcome {
        let metrics = delivery_metrics(&deps.metrics_namespace, kind, DeliveryResult::Succeeded, latency_ms);
        tracing::info!(%receiver, attempt, status = answer.status, latency_ms, emf = %metrics, "delivered");
        return;
    }
    let retry_in = match after.message {
        MessageFate::RetryIn(wait) => Some(wait.as_secs_f64()),
        _ => None,
    };
    let result = DeliveryResult::Failed { exhausted: retry_in.is_none() };
    let metrics = delivery_metrics(&deps.metrics_namespace, kind, result, latency_ms);
    tracing::warn!(
        %receiver,
        attempt,
        latency_ms,
        error = after.record.error.map(str::to_owned).or_else(|| outcome.error()).unwrap_or_default(),
        retry_in_seconds = retry_in,
        emf = %metrics,
        "delivery failed"
    );
}

/// A disabled or deleted subscription, or one that no longer lists the kind, is sent
/// nothing: the record says `skipped`, and why.
async fn skip(deps: &Deps, received: &Received<'_>, reason: plan::SkipReason, now: Timestamp) -> bool {
    let delivery = &received.delivery;
    match deps.deliveries.record_skipped(delivery, &delivery.body(), now, reason).await {
        Ok(_) => {
            let kind = delivery.event.kind().as_str();
            let metrics = delivery_metrics(&deps.metrics_namespace, kind, DeliveryResult::Skipped, 0.0);
            tracing::info!(emf = %metrics, reason = ?reason, "delivery skipped");
            acknowledge(deps, received.lane, received.receipt).await
        }
        Err(err) => {
            // Nothing was sent; the message comes back to be recorded.
            tracing::error!(error = %err, "recording a skipped delivery failed");
            stay(deps, received, deps.policy.schedule.base).await
        }
    }
}

/// Executes the plan's fate for a recorded attempt; `true` when the message stays.
async fn settle(deps: &Deps, received: &Received<'_>, fate: MessageFate) -> bool {
    match (fate, received.lane) {
        (MessageFate::Acknowledge, lane) => acknowledge(deps, lane, received.receipt).await,
        (MessageFate::RetryIn(wait), Lane::Retry) => stay(deps, received, wait).await,
        (MessageFate::RetryIn(wait), Lane::Main) => hand_over(deps, received, wait).await,
        (MessageFate::DeadLetter, lane) => match deps.queues.dead_letter(&received.delivery).await {
            Ok(()) => acknowledge(deps, lane, received.receipt).await,
            Err(err) => {
                // Visible again at once; its next turn finds the record failed and drops it,
                // or the lane's redrive policy moves it.
                tracing::error!(error = %err, "moving the delivery to the dead-letter queue failed");
                stay(deps, received, Duration::ZERO).await
            }
        },
    }
}

/// Moves the message to the retry lane (received after `delay`) and deletes it from the
/// main lane; `true` when it stays where it is.
async fn hand_over(deps: &Deps, received: &Received<'_>, delay: Duration) -> bool {
    match deps.queues.hand_over(&received.delivery, delay).await {
        Ok(()) => acknowledge(deps, received.lane, received.receipt).await,
        Err(err) => {
            tracing::error!(error = %err, "handing the delivery to the retry lane failed");
            stay(deps, received, deps.policy.schedule.base).await
        }
    }
}

/// Deletes the message from its lane now, not with its batch; always `false` (it does not
/// stay). Should the early delete fail, the message is still not reported, so the event
/// source mapping (or the local pump) deletes it with its batch.
async fn acknowledge(deps: &Deps, lane: Lane, receipt: Receipt<'_>) -> bool {
    if !receipt.early {
        return false;
    }
    if let Err(err) = deps.queues.delete(lane, receipt.handle).await {
        tracing::warn!(error = %err, "deleting the message early failed; it goes with its batch");
    }
    false
}

/// Leaves the message on its lane, visible again after `wait`; always `true` (it stays).
async fn stay(deps: &Deps, received: &Received<'_>, wait: Duration) -> bool {
    if let Err(err) = deps.queues.retry_after(received.lane, received.receipt.handle, wait).await {
        tracing::error!(error = %err, "scheduling the retry failed");
    }
    true
}
