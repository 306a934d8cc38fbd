//! Structured JSON logs on stdout: one line per request and per delivery attempt, never a
//! key, secret or body. Delivery lines also carry their figures as CloudWatch Embedded
//! Metric Format, so CloudWatch Logs turns them into metrics without an API call, and each
//! attempt has a line of its own that is an OpenTelemetry span (contract section 19).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;

use crate::trace::{SpanId, TraceParent};

/// A field of this name holding a JSON object is merged into the root of its line (EMF
/// reads its `_aws` directive and the metric values there).
pub const EMF_FIELD: &str = "emf";
/// A field of this name holding a JSON object is kept as that object, not as its text: the
/// OpenTelemetry span of an attempt line ([`attempt_span`]).
pub const SPAN_FIELD: &str = "span";
/// The name of a delivery attempt's span, and the message of its line.
pub const ATTEMPT_SPAN: &str = "webhook.delivery.attempt";

/// Installs the JSON log subscriber on stdout.
pub fn init() {
    init_writing_to(std::io::stdout);
}

/// The same subscriber writing elsewhere (the benchmarks send it to /dev/null; a test of
/// the delivery log to the capture of the thread that logs).
pub fn init_writing_to<W>(writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let _ = tracing::subscriber::set_global_default(json_subscriber(writer));
}

/// The service's log format, writing to `writer`. The level
/// is Lambda's `AWS_LAMBDA_LOG_LEVEL` (set by the function's logging configuration) or
/// `RUST_LOG`, `info` by default; a plain level, rather than env-filter's directives,
/// keeps the filter out of the cold start.
fn json_subscriber<W>(writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let level = ["AWS_LAMBDA_LOG_LEVEL", "RUST_LOG"]
        .iter()
        .find_map(|name| std::env::var(name).ok().and_then(|text| text.trim().parse().ok()))
        .unwrap_or(LevelFilter::INFO);
    tracing_subscriber::fmt()
        .fmt_fields(JsonSpanFields)
        .event_format(JsonLines)
        .with_max_level(level)
        .with_writer(writer)
        .finish()
}

/// One JSON object per event: `timestamp`, `level`, the fields of the spans it happens in
/// (a delivery's ids, say, given once on its span), then the event's own fields.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, context: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut line = Map::new();
        line.insert("timestamp".into(), crate::clock::Timestamp::now().to_string().into());
        line.insert("level".into(), event.metadata().level().as_str().into());
        for span in context.event_scope().into_iter().flat_map(|scope| scope.from_root()) {
            let extensions = span.extensions();
            let fields = extensions.get::<FormattedFields<N>>().map(|fields| fields.fields.as_str());
            if let Some(Ok(Value::Object(members))) = fields.map(serde_json::from_str::<Value>) {
                line.extend(members);
            }
        }
        event.record(&mut Fields(&mut line));
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Keeps a span's fields as a JSON object, for [`JsonLines`] to merge into each line.
struct JsonSpanFields;

impl<'writer> FormatFields<'writer> for JsonSpanFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut members = Map::new();
        fields.record(&mut Fields(&mut members));
        write!(writer, "{}", Value::Object(members))
    }
}

struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = format!("{value:?}");
        let object = || match serde_json::from_str(&text) {
            Ok(Value::Object(members)) => Some(members),
            _ => None,
        };
        match field.name() {
            EMF_FIELD => {
                if let Some(members) = object() {
                    return self.0.extend(members);
                }
            }
            SPAN_FIELD => {
                if let Some(members) = object() {
                    self.0.insert(SPAN_FIELD.into(), Value::Object(members));
                    return;
                }
            }
            _ => {}
        }
        self.0.insert(field.name().into(), text.into());
    }
}

/// One delivery attempt, for its span: which delivery, and how it ended.
pub struct Attempt<'a> {
    pub subscription_id: &'a str,
    pub delivery_id: &'a str,
    pub event_type: &'a str,
    /// The attempt's number (1 for the first).
    pub number: u32,
    /// The receiver's URL as logs show it ([`crate::webhooks::LoggedUrl`]).
    pub url: String,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<u16>,
    /// Why it failed (the record's `lastError`); `None` for a success.
    pub error: Option<String>,
}

/// An attempt as an OpenTelemetry span in OTLP/JSON's shape (its `Span` message, as
/// `resourceSpans[].scopeSpans[].spans[]` hold it), so a log pipeline forwards it unchanged:
/// span `span_id` of `parent`'s trace, child of `parent`'s span (the change), a client span
/// from `start` to `end`. Its status is OK for a success, else ERROR with the error.
pub fn attempt_span(
    parent: &TraceParent,
    span_id: SpanId,
    start: SystemTime,
    end: SystemTime,
    attempt: &Attempt<'_>,
) -> Value {
    let nanos = |at: SystemTime| at.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos().to_string();
    let text = |key: &str, value: &str| json!({"key": key, "value": {"stringValue": value}});
    // OTLP/JSON writes 64-bit integers as strings.
    let int = |key: &str, value: u64| json!({"key": key, "value": {"intValue": value.to_string()}});
    let mut attributes = vec![
        text("webhook.subscription.id", attempt.subscription_id),
        text("webhook.delivery.id", attempt.delivery_id),
        int("webhook.delivery.attempt", u64::from(attempt.number)),
        text("webhook.event.type", attempt.event_type),
        text("http.request.method", "POST"),
        text("url.full", &attempt.url),
    ];
    attributes.extend(attempt.status.map(|status| int("http.response.status_code", u64::from(status))));
    attributes.extend(attempt.error.as_deref().map(|error| text("error.type", error)));
    let status = match &attempt.error {
        None => json!({"code": STATUS_OK}),
        Some(error) => json!({"code": STATUS_ERROR, "message": error}),
    };
    json!({
        "traceId": parent.trace_id.hex(),
        "spanId": span_id.hex(),
        "parentSpanId": parent.parent_id.hex(),
        "name": ATTEMPT_SPAN,
        "kind": SPAN_KIND_CLIENT,
        "startTimeUnixNano": nanos(start),
        "endTimeUnixNano": nanos(end),
        "attributes": attributes,
        "status": status,
    })
}

/// OTLP's enum values: `SPAN_KIND_CLIENT`, `STATUS_CODE_OK`, `STATUS_CODE_ERROR`.
const SPAN_KIND_CLIENT: u8 = 3;
const STATUS_OK: u8 = 1;
const STATUS_ERROR: u8 = 2;

/// How a delivery's turn ended, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryResult {
    Succeeded,
    /// Failed; `exhausted` when it was the last attempt.
    Failed {
        exhausted: bool,
    },
    /// The subscription was disabled: nothing was sent.
    Skipped,
    /// A probe of a subscription disabled for failing (contract section 20), whatever its
    /// answer: counted as `Probes` only. It is a check of a receiver known to fail, not
    /// traffic, so it is no attempt, failure or latency of the failure-rate alarm's.
    Probed,
}

/// One delivery's figures in Embedded Metric Format: `Attempts`, `Successes`, `Failures`,
/// `Exhausted`, `Skipped`, `Probes` and `SendLatency`, by event type and in total.
pub fn delivery_metrics(namespace: &str, event_type: &str, result: DeliveryResult, send_latency_ms: f64) -> Value {
    let count = |yes: bool| u32::from(yes);
    let sent = matches!(result, DeliveryResult::Succeeded | DeliveryResult::Failed { .. });
    let mut metrics = vec![
        json!({"Name": "Attempts", "Unit": "Count"}),
        json!({"Name": "Successes", "Unit": "Count"}),
        json!({"Name": "Failures", "Unit": "Count"}),
        json!({"Name": "Exhausted", "Unit": "Count"}),
        json!({"Name": "Skipped", "Unit": "Count"}),
        json!({"Name": "Probes", "Unit": "Count"}),
    ];
    if sent {
        metrics.push(json!({"Name": "SendLatency", "Unit": "Milliseconds"}));
    }
    let mut line = json!({
        "_aws": {
            "Timestamp": crate::clock::Timestamp::now().unix_millis(),
            "CloudWatchMetrics": [{"Namespace": namespace, "Dimensions": [["EventType"], []], "Metrics": metrics}],
        },
        "EventType": event_type,
        "Attempts": count(sent),
        "Successes": count(result == DeliveryResult::Succeeded),
        "Failures": count(matches!(result, DeliveryResult::Failed { .. })),
        "Exhausted": count(result == DeliveryResult::Failed { exhausted: true }),
        "Skipped": count(result == DeliveryResult::Skipped),
        "Probes": count(result == DeliveryResult::Probed),
    });
    if sent {
        line["SendLatency"] = json!((send_latency_ms * 1000.0).round() / 1000.0);
    }
    line
}

/// The sweep's lag (contract section 22): how long the oldest fan-out marker or overdue record
/// that a run left unread has waited past the sweep's window; 0 when it read everything.
pub const SWEEP_LAG: &str = "SweepLagSeconds";

/// One sweep run's [`SWEEP_LAG`] in Embedded Metric Format: in seconds, with no dimensions.
pub fn sweep_metrics(namespace: &str, lag: std::time::Duration) -> Value {
    json!({
        "_aws": {
            "Timestamp": crate::clock::Timestamp::now().unix_millis(),
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [[]],
                "Metrics": [{"Name": SWEEP_LAG, "Unit": "Seconds"}],
            }],
        },
        SWEEP_LAG: (lag.as_secs_f64() * 1000.0).round() / 1000.0,
    })
}

/// Adds a first attempt's wait (`DeliveryMessage::first_attempt_wait`) to an attempt's [`delivery_metrics`]
/// as `FirstAttemptWait` (seconds), in a directive of its own with no dimension: one metric
/// for the alarm, not one per event type.
pub fn with_first_attempt_wait(mut metrics: Value, namespace: &str, wait: std::time::Duration) -> Value {
    let directive = json!({
        "Namespace": namespace,
        "Dimensions": [[]],
        "Metrics": [{"Name": FIRST_ATTEMPT_WAIT, "Unit": "Seconds"}],
    });
    if let Some(directives) = metrics["_aws"]["CloudWatchMetrics"].as_array_mut() {
        directives.push(directive);
    }
    metrics[FIRST_ATTEMPT_WAIT] = json!((wait.as_secs_f64() * 1000.0).round() / 1000.0);
    metrics
}

/// The metric the main lane's backlog alarm watches (template.yaml).
pub const FIRST_ATTEMPT_WAIT: &str = "FirstAttemptWait";

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_json_objects_with_the_metrics_at_their_root() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = json_subscriber(move || writer.clone());
        let metrics = delivery_metrics("Career/Webhooks", "profile.updated", DeliveryResult::Succeeded, 12.3456);
        tracing::subscriber::with_default(subscriber, || {
            let _delivery = tracing::info_span!("delivery", delivery_id = "dlv_1", attempt = 2u32).entered();
            tracing::info!(ok = true, emf = %metrics, "delivered");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let line: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["message"], "delivered");
        assert_eq!(
            (line["delivery_id"].clone(), line["attempt"].clone(), line["ok"].clone()),
            (json!("dlv_1"), json!(2), json!(true))
        );
        assert!(line["timestamp"].as_str().unwrap().ends_with('Z'));
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Career/Webhooks");
        assert_eq!(directive["Dimensions"], json!([["EventType"], []]));
        assert!(line["_aws"]["Timestamp"].is_u64());
        // Every metric the directive names is a number at the root, as EMF requires.
        for metric in directive["Metrics"].as_array().unwrap() {
            let name = metric["Name"].as_str().unwrap();
            assert!(line[name].is_number(), "{name}: {line}");
        }
        assert_eq!(
            (line["Attempts"].clone(), line["Successes"].clone(), line["Failures"].clone()),
            (json!(1), json!(1), json!(0))
        );
        assert_eq!(line["SendLatency"], 12.346);
        assert_eq!(line["EventType"], "profile.updated");
        assert!(line.get(EMF_FIELD).is_none());
    }

    #[test]
    fn an_attempt_span_is_an_otlp_span_under_the_changes_span_and_its_line_keeps_it_whole() {
        let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let span_id = SpanId::generate();
        let start = UNIX_EPOCH + std::time::Duration::from_nanos(1_795_766_400_123_456_789);
        let end = start + std::time::Duration::from_millis(250);
        let attempt = Attempt {
            subscription_id: "whk_1",
            delivery_id: "dlv_1",
            event_type: "profile.updated",
            number: 2,
            url: "https://hooks.example.com/h".into(),
            status: Some(500),
            error: Some("answered 500".into()),
        };
        let span = attempt_span(&parent, span_id, start, end, &attempt);
        assert_eq!(
            (&span["traceId"], &span["parentSpanId"], &span["spanId"]),
            (&json!("4bf92f3577b34da6a3ce929d0e0e4736"), &json!("00f067aa0ba902b7"), &json!(span_id.hex()))
        );
        assert_eq!((&span["name"], &span["kind"]), (&json!("webhook.delivery.attempt"), &json!(3)));
        assert_eq!(
            (&span["startTimeUnixNano"], &span["endTimeUnixNano"]),
            (&json!("1795766400123456789"), &json!("1795766400373456789"))
        );
        assert_eq!(span["status"], json!({"code": 2, "message": "answered 500"}));
        let attribute = |key: &str| {
            span["attributes"].as_array().unwrap().iter().find(|a| a["key"] == key).map(|a| a["value"].clone())
        };
        assert_eq!(attribute("http.response.status_code"), Some(json!({"intValue": "500"})));
        assert_eq!(attribute("webhook.delivery.attempt"), Some(json!({"intValue": "2"})));
        assert_eq!(attribute("webhook.subscription.id"), Some(json!({"stringValue": "whk_1"})));
        let delivered = Attempt { status: Some(204), error: None, ..attempt };
        let ok = attempt_span(&parent, span_id, start, end, &delivered);
        assert_eq!(ok["status"], json!({"code": 1}));
        assert!(ok["attributes"].as_array().unwrap().iter().all(|a| a["key"] != "error.type"));

        let captured = Captured::default();
        let writer = captured.clone();
        tracing::subscriber::with_default(json_subscriber(move || writer.clone()), || {
            tracing::info!(span = %ok, duration_ms = 250.0, "{ATTEMPT_SPAN}");
        });
        let line: Value = serde_json::from_slice(&captured.0.lock().unwrap()).unwrap();
        assert_eq!((&line["span"], &line["message"]), (&ok, &json!(ATTEMPT_SPAN)), "the span as an object: {line}");
    }

    #[test]
    fn a_sweep_runs_lag_is_one_metric_in_seconds_without_dimensions() {
        let line = sweep_metrics("Career/Webhooks", std::time::Duration::from_millis(612_345));
        let directive = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "Career/Webhooks");
        assert_eq!(directive["Dimensions"], json!([[]]));
        assert_eq!(directive["Metrics"], json!([{"Name": "SweepLagSeconds", "Unit": "Seconds"}]));
        assert_eq!(line["SweepLagSeconds"], 612.345);
        assert_eq!(sweep_metrics("n", std::time::Duration::ZERO)["SweepLagSeconds"], 0.0);
    }

    #[test]
    fn each_result_counts_once_and_neither_a_skip_nor_a_probe_is_an_attempt() {
        let value = |result| delivery_metrics("n", "webhook.ping", result, 5.0);
        let counts = |line: &Value| {
            ["Attempts", "Successes", "Failures", "Exhausted", "Skipped", "Probes"]
                .map(|name| line[name].as_u64().unwrap())
        };
        assert_eq!(counts(&value(DeliveryResult::Succeeded)), [1, 1, 0, 0, 0, 0]);
        assert_eq!(counts(&value(DeliveryResult::Failed { exhausted: false })), [1, 0, 1, 0, 0, 0]);
        assert_eq!(counts(&value(DeliveryResult::Failed { exhausted: true })), [1, 0, 1, 1, 0, 0]);
        for (result, expected) in
            [(DeliveryResult::Skipped, [0, 0, 0, 0, 1, 0]), (DeliveryResult::Probed, [0, 0, 0, 0, 0, 1])]
        {
            let line = value(result);
            assert_eq!(counts(&line), expected, "{result:?}");
            assert!(line.get("SendLatency").is_none(), "{result:?}");
            let names: Vec<_> = line["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["Name"].as_str().unwrap().to_owned())
                .collect();
            assert!(!names.contains(&"SendLatency".to_owned()), "{result:?}");
        }
    }

    #[test]
    fn a_first_attempts_wait_is_one_metric_without_dimensions_beside_the_attempts_own() {
        let metrics = delivery_metrics("n", "profile.updated", DeliveryResult::Succeeded, 5.0);
        let line = with_first_attempt_wait(metrics, "n", std::time::Duration::from_millis(390_250));
        let directives = line["_aws"]["CloudWatchMetrics"].as_array().unwrap();
        assert_eq!(directives.len(), 2, "{line}");
        assert_eq!(directives[0]["Dimensions"], json!([["EventType"], []]));
        assert_eq!(directives[1]["Dimensions"], json!([[]]));
        assert_eq!(directives[1]["Metrics"], json!([{"Name": "FirstAttemptWait", "Unit": "Seconds"}]));
        // Every metric each directive names is a number at the root, as EMF requires.
        for metric in directives.iter().flat_map(|d| d["Metrics"].as_array().unwrap()) {
            let name = metric["Name"].as_str().unwrap();
            assert!(line[name].is_number(), "{name}: {line}");
        }
        assert_eq!(line[FIRST_ATTEMPT_WAIT], 390.25);
        assert_eq!(line["Attempts"], 1);
    }
}
