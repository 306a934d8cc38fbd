//! What an attempt reports: one log line with its metrics (EMF), and its OpenTelemetry span
//! (contract section 19).

use std::time::{Duration, SystemTime};

use career_core::delivery::attempt::Outcome;
use career_core::delivery::plan::{After, MessageFate};
use career_core::delivery::DeliveryMessage;
use career_core::telemetry::{self, delivery_metrics, DeliveryResult};
use career_core::trace::{SpanId, TraceParent};
use career_core::webhooks::Subscription;

use crate::{Deps, Received};

/// Logs the attempt's outcome with its metrics; `(started, latency_ms)`: when its send started,
/// and how long it took. A first attempt also reports how long it waited for its send.
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
