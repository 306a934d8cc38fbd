//! Trace context (contract section 19): `traceContext` on the subscription, the change's
//! trace carried through the stream, the fan-out, the lanes and every attempt to the receiver,
//! and each attempt's span line in the log.

use std::time::Duration;

use career_core::delivery::log::DeliveryStatus;
use career_core::trace::TraceParent;
use career_service::logs::capture_logs;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::{eventually, unique_user, Api, DEADLINE};
use lambda_http::http::Method;
use serde_json::{json, Value};

const NO_DELAY: Duration = Duration::ZERO;
/// The change's context, as the platform's writer sets it on the profile item.
const CHANGE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Creates `user`'s subscription to `profile.updated` at `url`, with trace context `on`; its id.
async fn subscribe(api: &Api, user: &str, url: &str, on: bool) -> String {
    let key = api.key(user, "write:webhooks").await;
    let body = json!({"url": url, "events": ["profile.updated"], "traceContext": on}).to_string();
    let created = api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await;
    let json = created.assert_status(201);
    assert_eq!(json["traceContext"], on, "{json}");
    json["id"].as_str().unwrap().to_owned()
}

/// The `traceparent` a receiver got.
fn traceparent(received: &Received) -> TraceParent {
    let header = received.header("traceparent");
    TraceParent::parse(header).unwrap_or_else(|| panic!("no valid traceparent: {header:?}"))
}

/// Waits until the delivery's record has `status`.
async fn until_status(pipeline: &Pipeline, user: &str, delivery_id: &str, status: DeliveryStatus) {
    eventually(format!("{delivery_id} {status:?}"), || async {
        let stored = career_service::delivery_record(&pipeline.settings().tables, user, delivery_id).await;
        match stored {
            Some(stored) if stored.record.status == status => Ok(()),
            other => Err(other.map(|s| s.record)),
        }
    })
    .await;
}

/// The span lines among `logged` of the trace `trace_id`.
fn spans_of(logged: &str, trace_id: &str) -> Vec<Value> {
    logged
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|line| line["message"] == "webhook.delivery.attempt" && line["span"]["traceId"] == trace_id)
        .collect()
}

/// The value of a span's attribute `key`.
fn attribute(span: &Value, key: &str) -> Value {
    let attributes = span["attributes"].as_array().expect("attributes");
    attributes.iter().find(|a| a["key"] == key).map(|a| a["value"].clone()).unwrap_or(Value::Null)
}

#[test]
fn a_traced_change_reaches_an_opted_in_receiver_in_its_trace_on_every_attempt_and_each_attempt_is_logged() {
    // One thread runs the pipeline, so every line it logs is on this thread's capture.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut seen = None;
    let logged = capture_logs(|| seen = Some(runtime.block_on(a_traced_change_retried_once())));
    let (opted_in, not_opted_in) = seen.unwrap();
    let change = TraceParent::parse(CHANGE).unwrap();

    // The receiver that asked: the change's trace on both attempts, each its own span.
    let [first, retry] = [traceparent(&opted_in[0]), traceparent(&opted_in[1])];
    assert_eq!((first.trace_id, retry.trace_id), (change.trace_id, change.trace_id));
    assert_ne!(first.parent_id, retry.parent_id, "each attempt is a span of its own");
    for attempt in [first, retry] {
        assert_ne!(attempt.parent_id, change.parent_id, "the attempt's span, not the change's");
        assert!(attempt.sampled);
    }
    assert_eq!(opted_in[0].header("tracestate"), "", "the change had none");
    // The one that did not ask gets nothing new.
    for header in ["traceparent", "tracestate"] {
        assert!(!not_opted_in[0].headers.contains_key(header), "{header} sent unasked");
    }

    // Every attempt, to either, is a span line of the change's trace under the change's span.
    let spans = spans_of(&logged, &change.trace_id.hex());
    assert_eq!(spans.len(), 3, "two attempts and one: {spans:#?}");
    let delivery = opted_in[0].header("x-webhook-delivery");
    let of_opted_in: Vec<&Value> = spans.iter().filter(|line| line["delivery_id"] == delivery).collect();
    assert_eq!(of_opted_in.len(), 2, "{spans:#?}");
    for (line, (sent, number, status, code)) in of_opted_in.iter().zip([(first, "1", "500", 2), (retry, "2", "200", 1)])
    {
        let span = &line["span"];
        assert_eq!(span["name"], "webhook.delivery.attempt");
        assert_eq!(span["spanId"], sent.parent_id.hex(), "the span the receiver was told of");
        assert_eq!(span["parentSpanId"], change.parent_id.hex());
        assert_eq!(attribute(span, "webhook.delivery.attempt"), json!({"intValue": number}));
        assert_eq!(attribute(span, "http.response.status_code"), json!({"intValue": status}));
        assert_eq!(attribute(span, "webhook.delivery.id"), json!({"stringValue": delivery}));
        assert_eq!(span["status"]["code"], code);
        let (start, end) = (span["startTimeUnixNano"].as_str().unwrap(), span["endTimeUnixNano"].as_str().unwrap());
        assert!(start.parse::<u128>().unwrap() <= end.parse::<u128>().unwrap(), "{span}");
        assert!(line["duration_ms"].is_number(), "{line}");
    }
    assert_eq!(of_opted_in[0]["span"]["status"]["message"], "answered 500");
}

/// A profile written in the trace [`CHANGE`], to two subscriptions of its user: one with
/// trace context on, whose receiver fails the first attempt, and one without. What each
/// receiver got, once both deliveries have succeeded.
async fn a_traced_change_retried_once() -> (Vec<Received>, Vec<Received>) {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let opted_in = Receiver::start(&[500, 200], NO_DELAY).await;
    let not_opted_in = Receiver::start(&[200], NO_DELAY).await;
    subscribe(&pipeline.api, &user, &opted_in.url, true).await;
    subscribe(&pipeline.api, &user, &not_opted_in.url, false).await;

    pipeline.api.admin.update_profile_in_trace(&user, Some(CHANGE)).await.unwrap();
    let (opted_in, not_opted_in) = (opted_in.wait_for(2, DEADLINE).await, not_opted_in.wait_for(1, DEADLINE).await);
    for received in [&opted_in[1], &not_opted_in[0]] {
        let delivery = received.header("x-webhook-delivery");
        until_status(&pipeline, &user, delivery, DeliveryStatus::Succeeded).await;
    }
    // Each attempt's span line is written before its message leaves the lane (or goes back to
    // it for the retry), so once the lanes are empty every line is in the capture.
    pipeline.drained().await;
    (opted_in, not_opted_in)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_without_a_trace_starts_one_that_a_manual_retry_keeps() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    subscribe(&pipeline.api, &user, &receiver.url, true).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let first = receiver.wait_for(1, DEADLINE).await.remove(0);
    let started = traceparent(&first);
    let delivery = first.header("x-webhook-delivery").to_owned();
    until_status(&pipeline, &user, &delivery, DeliveryStatus::Succeeded).await;

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks/deliveries/retry?id={delivery}");
    pipeline.api.request(Method::POST, &path).key(&key).send().await.assert_status(202);
    let again = receiver.wait_for(2, DEADLINE).await.remove(1);
    assert_eq!(again.header("x-webhook-delivery"), delivery);
    let retried = traceparent(&again);
    assert_eq!(retried.trace_id, started.trace_id, "a manual retry stays in the delivery's trace");
    assert_ne!(retried.parent_id, started.parent_id, "as a span of its own");

    // The next change, with no trace either, starts another.
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let next = receiver.wait_for(3, DEADLINE).await.remove(2);
    assert_ne!(next.header("x-webhook-delivery"), delivery);
    assert_ne!(traceparent(&next).trace_id, started.trace_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ping_continues_the_requests_trace_or_api_gateways() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let id = subscribe(&pipeline.api, &user, &receiver.url, true).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks/ping?id={id}");

    let ping = pipeline.api.request(Method::POST, &path).key(&key).header("traceparent", CHANGE);
    ping.header("tracestate", "rojo=00f067aa0ba902b7").send().await.assert_status(202);
    let traced = receiver.wait_for(1, DEADLINE).await.remove(0);
    assert_eq!(traceparent(&traced).trace_id, TraceParent::parse(CHANGE).unwrap().trace_id);
    assert_eq!(traced.header("tracestate"), "rojo=00f067aa0ba902b7");

    let amzn = "Root=1-6b093886-29ec148cead50263f4d6d235;Parent=53995c3f42cd8ad8;Sampled=1";
    let ping = pipeline.api.request(Method::POST, &path).key(&key).header("x-amzn-trace-id", amzn);
    ping.header("traceparent", "00-not-a-traceparent").send().await.assert_status(202);
    let gateway = receiver.wait_for(2, DEADLINE).await.remove(1);
    assert_eq!(traceparent(&gateway).trace_id.hex(), "6b09388629ec148cead50263f4d6d235", "the invalid one ignored");
    assert_eq!(gateway.header("tracestate"), "");
}

#[tokio::test]
async fn trace_context_is_a_boolean_and_bad_input_changes_nothing() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let url = format!("{}/trace", career_service::sink_url());
    for value in [json!(null), json!("true"), json!(1), json!([true]), json!({})] {
        let body = json!({"url": url, "events": ["profile.updated"], "traceContext": value}).to_string();
        let answer = api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await;
        answer.assert_error(400, "webhooks.invalid_trace_context");
    }
    // After url and events, before the limit (contract section 5).
    let body = json!({"url": "ftp://x/", "events": ["profile.updated"], "traceContext": 1}).to_string();
    api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await.assert_error(400, "webhooks.invalid_url");
    let listed = || async { api.get("/api/v1/webhooks", &key).await.assert_status(200)["webhooks"].clone() };
    assert_eq!(listed().await, json!([]), "no refused create stored anything");

    let off = json!({"url": url, "events": ["profile.updated"]}).to_string();
    let created = api.send_json(Method::POST, "/api/v1/webhooks", &key, &off).await;
    let id = created.assert_status(201)["id"].as_str().unwrap().to_owned();
    assert_eq!(created.json["traceContext"], false, "off unless asked");
    let path = format!("/api/v1/webhooks?id={id}");
    let before = listed().await;
    for (body, code) in [
        (json!({"traceContext": "yes"}), "webhooks.invalid_trace_context"),
        (json!({"traceContext": null, "url": format!("{url}/moved")}), "webhooks.invalid_trace_context"),
        (json!({"traceContext": 0, "events": []}), "webhooks.invalid_trace_context"),
        (json!({"traceContext": 1, "asymmetricSigning": "on"}), "webhooks.invalid_asymmetric_signing"),
        (json!({"traceContext": true, "url": null}), "webhooks.invalid_url"),
        (json!({"traceContext": true, "tracestate": "x=1"}), "webhooks.unknown_field"),
    ] {
        api.send_json(Method::PATCH, &path, &key, &body.to_string()).await.assert_error(400, code);
    }
    assert_eq!(listed().await, before, "no refused change applied");

    let on = api.send_json(Method::PATCH, &path, &key, r#"{"traceContext": true}"#).await;
    assert_eq!(on.assert_status(200)["traceContext"], true);
    assert_eq!(listed().await[0]["traceContext"], true);
    let other = api.send_json(Method::PATCH, &path, &key, r#"{"enabled": false}"#).await;
    assert_eq!(other.assert_status(200)["traceContext"], true, "a change of something else keeps it");
    let off = api.send_json(Method::PATCH, &path, &key, r#"{"traceContext": false}"#).await;
    assert_eq!(off.assert_status(200)["traceContext"], false);
}
