//! What an attempt reports: one log line with its metrics (EMF), its OpenTelemetry span
//! (contract section 19), and what it adds to its subscription's health figures (section
//! 20), which the batch writes once per subscription when its turns are over.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use career_core::clock::Timestamp;
use career_core::delivery::attempt::Outcome;
use career_core::delivery::plan::{After, MessageFate};
use career_core::delivery::DeliveryMessage;
use career_core::ids::SubscriptionId;
use career_core::telemetry::{self, delivery_metrics, DeliveryResult};
use career_core::trace::{SpanId, TraceParent};
use career_core::webhooks::health::{self, Hour, Observation};
use career_core::webhooks::Subscription;

use crate::{Deps, Received};

/// Logs the attempt's outcome with its metrics; `(started, latency_ms)`: when its send started,
/// and how long it took. A first attempt also reports how long it waited for its send; a probe
/// reports itself as one, apart from the attempts (contract section 20).
pub(crate) fn report(
    deps: &Deps,
    received: &Received<'_>,
    subscription: &Subscription,
    outcome: &Outcome,
    after: &After,
    attempt: u32,
    (started, latency_ms): (SystemTime, f64),
) {
    let delivery = &received.delivery;
    let kind = delivery.event.kind().as_str();
    let receiver = subscription.target.logged();
    let limited = subscription.max_deliveries_per_second.is_some();
    let waited = delivery.first_attempt_wait(received.lane, attempt, limited, started.into());
    let metrics_of = |result| {
        let metrics = delivery_metrics(&deps.metrics_namespace, kind, result, latency_ms);
        match waited {
            Some(wait) => telemetry::with_first_attempt_wait(metrics, &deps.metrics_namespace, wait),
            None => metrics,
        }
    };
    if delivery.event.is_probe() {
        let metrics = metrics_of(DeliveryResult::Probed);
        let status = outcome.answer().map(|answer| answer.status);
        let error = after.record.error.as_deref().unwrap_or_default();
        tracing::info!(%receiver, status, latency_ms, error, emf = %metrics, "probed");
        return;
    }
    if let Outcome::Delivered(answer) = outcome {
        let metrics = metrics_of(DeliveryResult::Succeeded);
        tracing::info!(%receiver, attempt, status = answer.status, latency_ms, emf = %metrics, "delivered");
        return;
    }
    let retry_in = match after.message {
        MessageFate::RetryIn(wait) => Some(wait.as_secs_f64()),
        _ => None,
    };
    let result = DeliveryResult::Failed { exhausted: retry_in.is_none() };
    let metrics = metrics_of(result);
    tracing::warn!(
        %receiver,
        attempt,
        latency_ms,
        error = after.record.error.as_deref().unwrap_or_default(),
        retry_in_seconds = retry_in,
        emf = %metrics,
        "delivery failed"
    );
}

/// Logs the attempt as an OpenTelemetry span (contract section 19), `(parent, span id, start)`
/// in the delivery's trace, whether or not the subscription is sent trace context.
pub(crate) fn log_span(
    delivery: &DeliveryMessage,
    subscription: &Subscription,
    outcome: &Outcome,
    after: &After,
    attempt: u32,
    (parent, span_id, start): (&TraceParent, SpanId, SystemTime),
    duration_ms: f64,
) {
    let attempt = telemetry::Attempt {
        subscription_id: delivery.subscription_id.as_str(),
        delivery_id: delivery.delivery_id.as_str(),
        event_type: delivery.event.kind().as_str(),
        number: attempt,
        url: subscription.target.logged(),
        status: outcome.answer().map(|answer| answer.status),
        error: after.record.error.clone(),
    };
    let end = start + Duration::from_secs_f64(duration_ms / 1000.0);
    let span = telemetry::attempt_span(parent, span_id, start, end, &attempt);
    tracing::info!(span = %span, duration_ms, "{}", telemetry::ATTEMPT_SPAN);
}

/// What a batch's turns saw of their subscriptions' receivers, for the health figures.
#[derive(Default)]
pub(crate) struct Observed(Mutex<Vec<(SubscriptionId, Observation)>>);

impl Observed {
    pub(crate) fn saw(&self, subscription: &SubscriptionId, seen: Observation) {
        // A turn that panicked while holding the lock loses nothing it saw: the list is whole.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((subscription.clone(), seen));
    }

    /// Adds what the batch saw to its subscriptions' hours: one write per subscription
    /// (`health::tally`), all at once. A failed write loses that batch's figures, logged,
    /// and never holds a delivery back: the figures are a view, the log is the record.
    pub(crate) async fn write(self, deps: &Deps, now: Timestamp) {
        let seen = self.0.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let hour = Hour::of(now);
        let writes = health::tally(seen).into_iter().map(|(subscription, tally)| async move {
            if let Err(err) = deps.health.add(&subscription, hour, &tally).await {
                tracing::warn!(error = %err, subscription_id = %subscription, "adding the batch to the health figures failed");
            }
        });
        futures_util::future::join_all(writes).await;
    }
}
