//! Benchmark 14, Trace context (contract section 19, issue 39): what a delivery pays for it.
//! A subscription that opted in is sent `traceparent` (and `tracestate`): one new span id and
//! one header per attempt. Every delivery, opted in or not, carries its trace in its queue
//! message and record and logs one span line per attempt. Init is section 1's: the functions'
//! binaries measured there are the ones that carry trace context.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use career_core::delivery::DeliveryMessage;
use career_core::events::{Event, EventData};
use career_core::ids::{EventId, SubscriptionId, UserId};
use career_core::telemetry::{self, Attempt};
use career_core::trace::{SpanId, TraceContext, TraceState};
use career_service::typed;

use crate::report::{Row, Section};
use crate::stats::{fine, time_each, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Trace context";

/// CloudWatch Logs, standard log class, data ingested, us-east-1, 2026-11
/// (aws.amazon.com/cloudwatch/pricing): the price of the span lines.
const LOG_INGESTION_PER_GB: f64 = 0.50;

/// What an attempt does for trace context, timed.
struct Timings {
    /// Opted in: a span id and the `traceparent` header (with a `tracestate` of two members).
    headers: Summary,
    /// Every attempt: the span built and written as a log line (to /dev/null, as the bench's
    /// logging is set up: the formatting is paid, the write is not).
    span_line: Summary,
}

/// What trace context adds to what a delivery carries, in bytes.
struct Sizes {
    /// The header lines an opted-in attempt adds to its request (`name: value\r\n`).
    header_bytes: usize,
    /// The delivery's queue message with its trace against without.
    message_with: usize,
    message_without: usize,
    /// The span object of one attempt's log line.
    span_bytes: usize,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let user: UserId = typed("usr_bench_trace");
    let subscription: SubscriptionId = typed("whk_01M8DXM3QDDJ874N9D4PXX9349");
    let event = Event {
        id: EventId::generate(),
        created_at: typed("2026-11-27T08:00:00.000Z"),
        data: EventData::ProfileUpdated { user_id: user.clone(), profile_id: typed("prf_bench") },
    };
    let trace = TraceContext {
        parent: TraceContext::start().parent,
        state: TraceState::parse("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
    };
    let mut message = DeliveryMessage::new(&event, &user, &subscription);
    message.trace = Some(trace.clone());
    let n = bench.requests * 10;
    progress(format!("   {n} attempts' trace headers and span lines"));
    let timings = time(&message, &trace, n);
    let sizes = sizes(&message, &trace)?;
    Ok(render(&timings, &sizes, n))
}

fn time(message: &DeliveryMessage, trace: &TraceContext, n: usize) -> Timings {
    let time = |run: &dyn Fn()| time_each(n, run);
    Timings {
        headers: time(&|| {
            std::hint::black_box(trace.headers(SpanId::generate()));
        }),
        span_line: time(&|| {
            let start = SystemTime::now();
            let span = telemetry::attempt_span(&trace.parent, SpanId::generate(), start, start, &attempt(message));
            tracing::info!(span = %span, duration_ms = 0.0, "{}", telemetry::ATTEMPT_SPAN);
        }),
    }
}

/// A first attempt answered 200, as the deliver function logs it.
fn attempt(message: &DeliveryMessage) -> Attempt<'_> {
    Attempt {
        subscription_id: message.subscription_id.as_str(),
        delivery_id: message.delivery_id.as_str(),
        event_type: message.event.kind().as_str(),
        number: 1,
        url: "https://hooks.example.com/career".into(),
        status: Some(200),
        error: None,
    }
}

fn sizes(message: &DeliveryMessage, trace: &TraceContext) -> Result<Sizes, String> {
    let header_bytes =
        trace.headers(SpanId::generate()).iter().map(|(name, value)| name.len() + ": ".len() + value.len() + 2).sum();
    let encoded = |message: &DeliveryMessage| serde_json::to_vec(message).map(|bytes| bytes.len());
    let without = DeliveryMessage { trace: None, ..message.clone() };
    let start = SystemTime::now();
    let span = telemetry::attempt_span(&trace.parent, SpanId::generate(), start, start, &attempt(message));
    Ok(Sizes {
        header_bytes,
        message_with: encoded(message).map_err(|e| e.to_string())?,
        message_without: encoded(&without).map_err(|e| e.to_string())?,
        span_bytes: span.to_string().len(),
    })
}

fn render(timings: &Timings, sizes: &Sizes, n: usize) -> Section {
    let logs_per_million = sizes.span_bytes as f64 * 1e6 / 1e9 * LOG_INGESTION_PER_GB;
    let rows = vec![
        Row::new(
            "Extra cost per delivery with trace context on",
            "reported",
            format!(
                "{} per attempt (median; a span id and its headers), {} B more on the wire",
                fine(timings.headers.median),
                sizes.header_bytes
            ),
            None,
        ),
        Row::new(
            "Trace context every delivery carries (opted in or not)",
            "reported",
            format!(
                "{} per attempt for its span line, whose span is {} B (${logs_per_million:.2} a million attempts in \
                 CloudWatch Logs); {} B more in the queue message (a two-member `tracestate`)",
                fine(timings.span_line.median),
                sizes.span_bytes,
                sizes.message_with - sizes.message_without
            ),
            None,
        ),
    ];
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Issue 39: what trace context (contract section 19) adds to a delivery, {n} times each in this process. \
         Init is section 1's: the five functions measured there carry trace context, and their init stays within \
         its 1.5× of hello-world.\n"
    );
    let _ = writeln!(body, "| What | median | p99 | bytes |\n|---|---|---|---|");
    let _ = writeln!(
        body,
        "| Opted in: a span id and the `traceparent` and `tracestate` headers (a `tracestate` of two members) | {} | {} | {} on the wire |",
        fine(timings.headers.median),
        fine(timings.headers.p99),
        sizes.header_bytes
    );
    let _ = writeln!(
        body,
        "| Every attempt: its span line (`webhook.delivery.attempt`, OTLP/JSON) built and formatted | {} | {} | {} of span |",
        fine(timings.span_line.median),
        fine(timings.span_line.p99),
        sizes.span_bytes
    );
    let _ = writeln!(
        body,
        "| Every delivery: its trace in the queue message | — | — | {} vs {} without |",
        sizes.message_with, sizes.message_without
    );
    let _ = writeln!(
        body,
        "\nThe span line is written to /dev/null here, so its time is the formatting a deployed function pays, not \
         the write. Its bytes cost what CloudWatch Logs charges for ingestion (${LOG_INGESTION_PER_GB:.2} per GB): \
         ${logs_per_million:.2} per million attempts, left out of section 13's per-delivery rows with the other log \
         lines. The record keeps the same trace as the message (its `traceparent` and `tracestate`), so section 13's \
         record sizes include it."
    );
    Section { number: 14, title: TITLE, rows, body, unmet_notes: Vec::new() }
}
