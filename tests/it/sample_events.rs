//! The sample events in `events/`, run the way docs/deploying.md's section "`cargo lambda` with the
//! sample events" runs them, and answering what its table of samples says.
//!
//! docs/deploying.md's table (after `<!-- sample answers -->`) names, for every file of `events/`,
//! the function it is for and its answer: a status for an API event, the function's JSON
//! answer for a stream or queue batch. The test reads that table, so a sample without a row
//! (or a row without a sample) fails it, and whoever adds a sample declares its answer there.
//! It then does what docs/deploying.md says with `make run` up: `careerctl demo seed` (the same
//! function, with the stack's settings), `careerctl demo receiver` (the same function, on a
//! free loopback port), and each sample in the table's order, with the demo key in place of
//! its placeholder, through the deserializer the Lambda runtime uses (lambda_http's own, or
//! aws_lambda_events') and the handler of the function the row names, while the stack's
//! pumps deliver what the samples queue. Rows this file knows get a closer look at their
//! answer and what it changed; any other row is checked for its status or JSON answer.

use career_service::acting_as;
use local_aws::template::function;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_lambda_events::sqs::SqsEvent;
use career_core::aws::queue::Lane;
use career_core::credentials::ApiKey;
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::DeliveryMessage;
use career_core::store::sealing::Sealer;
use career_core::store::stream::event_from_record;
use career_core::webhooks::WebhookSecret;
use career_service::pipeline::Pipeline;
use career_service::{clients, dynamodb, eventually};
use careerctl::demo::receiver::Received;
use careerctl::demo::{self, Seeded};
use lambda_http::http::Method;
use lambda_http::request::{LambdaRequest, RequestContext};
use lambda_http::{Body, RequestExt};
use serde_json::{json, Value};

/// The key every sample API event carries: `cak_` and 43 base64url characters.
const PLACEHOLDER_KEY: &str = "cak_REPLACE-with-a-key-from-careerctl-keys-crea";
const GUIDE: &str = include_str!("../../docs/deploying.md");
/// The line before the guide's table of samples and their answers.
const TABLE_MARKER: &str = "<!-- sample answers";

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("events")
}

/// Every file of `events/`, by name.
fn sample_files() -> BTreeMap<String, String> {
    let entries = std::fs::read_dir(events_dir()).expect("events/ exists");
    entries
        .map(|entry| {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (name, text)
        })
        .collect()
}

/// What the guide says a sample answers.
#[derive(Debug)]
enum Answer {
    /// An API event's status.
    Status(u16),
    /// A stream or queue batch's answer, as the function returns it.
    Json(Value),
}

/// One row of the guide's table of samples.
#[derive(Debug)]
struct Row {
    file: String,
    function: String,
    answer: Answer,
}

/// docs/deploying.md's table of samples, in its order.
fn readme_rows() -> Vec<Row> {
    let start =
        GUIDE.find(TABLE_MARKER).unwrap_or_else(|| panic!("docs/deploying.md has no line {TABLE_MARKER} … -->"));
    let lines = GUIDE[start..].lines().skip(1).skip_while(|line| line.trim().is_empty());
    // The header and its separator, then the rows.
    let rows: Vec<&str> = lines.take_while(|line| line.starts_with('|')).skip(2).collect();
    assert!(!rows.is_empty(), "docs/deploying.md: no table after {TABLE_MARKER}");
    rows.iter()
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let [file, function, answer, ..] = cells[..] else { panic!("docs/deploying.md: a row of three cells: {line}") };
            let code = |cell: &str| cell.trim_matches('`').to_owned();
            let answer = if let Some(json) = answer.strip_prefix('`') {
                let json = &json[..json.find('`').unwrap_or_else(|| panic!("docs/deploying.md: unclosed `: {line}"))];
                Answer::Json(serde_json::from_str(json).unwrap_or_else(|e| panic!("docs/deploying.md: not JSON ({e}): {line}")))
            } else {
                let status = answer.get(..3).and_then(|digits| digits.parse().ok());
                Answer::Status(status.unwrap_or_else(|| {
                    panic!("docs/deploying.md: an answer starts with its status, or the function's JSON in backticks: {line}")
                }))
            };
            Row { file: code(file), function: code(function), answer }
        })
        .collect()
}

#[test]
fn every_sample_has_one_row_in_the_readmes_table_and_every_row_a_sample() {
    let files: BTreeSet<String> = sample_files().into_keys().collect();
    let rows = readme_rows();
    let mut listed = BTreeSet::new();
    for row in &rows {
        assert!(listed.insert(row.file.clone()), "docs/deploying.md lists {} twice in its table of samples", row.file);
    }
    let unlisted: Vec<_> = files.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "events/ holds samples that docs/deploying.md's table of samples (after {TABLE_MARKER}) does not list: {unlisted:?}. \
         Add a row for each, naming its function and what it answers, in the order a newcomer runs them"
    );
    let missing: Vec<_> = listed.difference(&files).collect();
    assert!(
        missing.is_empty(),
        "docs/deploying.md's table of samples lists files that events/ does not hold: {missing:?}"
    );
}

/// Every URL in `value`, also inside strings that are JSON themselves (request bodies,
/// queue message bodies).
fn urls_in(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            if let Ok(inner @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str::<Value>(text) {
                urls_in(&inner, found);
            }
            let mut rest = text.as_str();
            while let Some(at) = rest.find("://") {
                let scheme_start = rest[..at].rfind(|c: char| !c.is_ascii_alphanumeric() && !"+.-".contains(c));
                let end =
                    rest[at..].find(|c: char| c.is_whitespace() || "\"'<>".contains(c)).map_or(rest.len(), |e| at + e);
                found.push(rest[scheme_start.map_or(0, |s| s + 1)..end].to_owned());
                rest = &rest[end..];
            }
        }
        Value::Array(items) => items.iter().for_each(|item| urls_in(item, found)),
        Value::Object(fields) => fields.iter().for_each(|(name, item)| {
            urls_in(&Value::String(name.clone()), found);
            urls_in(item, found);
        }),
        _ => {}
    }
}

#[test]
fn no_sample_names_a_url_outside_this_machine() {
    let mut checked = 0;
    for (name, text) in sample_files() {
        let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("events/{name}: not JSON: {e}"));
        let mut found = Vec::new();
        urls_in(&json, &mut found);
        for url in found {
            let parsed = url::Url::parse(&url).unwrap_or_else(|e| panic!("events/{name}: {url:?} is no URL ({e})"));
            let loopback = match parsed.host() {
                Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
                Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
                _ => false,
            };
            assert!(loopback, "events/{name} names {url}: a sample may only name receivers on 127.0.0.1 or [::1]");
            checked += 1;
        }
    }
    assert!(checked > 0, "the create sample's URL at least is found");
}

/// The API functions a row can name (the SAM template's functions behind the HTTP API).
#[derive(Clone, Copy, Debug)]
enum ApiFunction {
    Alerts,
    DataSharing,
    Webhooks,
}

impl ApiFunction {
    fn named(name: &str) -> Option<Self> {
        match name {
            "career-alerts" => Some(ApiFunction::Alerts),
            "career-data-sharing" => Some(ApiFunction::DataSharing),
            "career-webhooks" => Some(ApiFunction::Webhooks),
            _ => None,
        }
    }

    /// The path of the function's route.
    fn path(self) -> &'static str {
        match self {
            ApiFunction::Alerts => career_alerts::RESOURCE.path,
            ApiFunction::DataSharing => career_data_sharing::RESOURCE.path,
            ApiFunction::Webhooks => career_webhooks::RESOURCES[0].path,
        }
    }
}

/// Checks that `event` is a complete API Gateway HTTP API (payload format 2.0) event for
/// `function`'s route, as API Gateway would send it.
#[track_caller]
fn check_shape(name: &str, event: &Value, function: ApiFunction) {
    let path = function.path();
    let raw_path = event["rawPath"].as_str().unwrap_or_else(|| panic!("{name}: rawPath"));
    // The function's route, or the template's `{proxy+}` route for the operations below it.
    let route = match raw_path.strip_prefix(path).and_then(|rest| rest.strip_prefix('/')) {
        Some(proxy) => {
            assert_eq!(event["pathParameters"]["proxy"], proxy, "{name}: pathParameters.proxy");
            format!("ANY {path}/{{proxy+}}")
        }
        None => {
            assert_eq!(raw_path, path, "{name}: rawPath is {function:?}'s");
            format!("ANY {path}")
        }
    };
    let context = &event["requestContext"];
    assert_eq!(event["version"], "2.0", "{name}: version");
    assert_eq!(event["routeKey"], route.as_str(), "{name}: routeKey (the template's route)");
    assert_eq!(context["routeKey"], route.as_str(), "{name}: requestContext.routeKey");
    assert!(context["http"]["method"].as_str().is_some(), "{name}: requestContext.http.method");
    assert_eq!(context["http"]["path"], raw_path, "{name}: requestContext.http.path");
    assert!(context["http"]["sourceIp"].as_str().is_some_and(|ip| ip.parse::<IpAddr>().is_ok()));
    assert_eq!(context["stage"], "$default", "{name}: stage");
    assert!(context["requestId"].as_str().is_some_and(|id| !id.is_empty()), "{name}: requestId");
    assert!(context["timeEpoch"].as_u64().is_some_and(|t| t > 1_600_000_000_000), "{name}: timeEpoch in ms");
    assert_eq!(event["isBase64Encoded"], false, "{name}: isBase64Encoded");

    // The raw query string and the parsed parameters say the same thing.
    let raw = event["rawQueryString"].as_str().unwrap_or_else(|| panic!("{name}: rawQueryString"));
    let from_raw: BTreeMap<&str, &str> =
        raw.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').unwrap_or((p, ""))).collect();
    let parsed: BTreeMap<&str, &str> = event
        .get("queryStringParameters")
        .and_then(Value::as_object)
        .map(|params| params.iter().map(|(k, v)| (k.as_str(), v.as_str().expect("string values"))).collect())
        .unwrap_or_default();
    assert_eq!(from_raw, parsed, "{name}: rawQueryString and queryStringParameters");

    // Headers: lower-case names as API Gateway sends them, one well-formed placeholder key,
    // and a JSON content type (with the right length) exactly when there is a body.
    let headers = event["headers"].as_object().unwrap_or_else(|| panic!("{name}: headers"));
    assert!(headers.keys().all(|h| *h == h.to_ascii_lowercase()), "{name}: header names are lower case");
    assert_eq!(headers["authorization"], format!("Bearer {PLACEHOLDER_KEY}").as_str(), "{name}: authorization");
    assert!(ApiKey::parse(PLACEHOLDER_KEY).is_some(), "the placeholder has the shape of a key");
    match event.get("body").and_then(Value::as_str) {
        Some(body) => {
            assert_eq!(headers.get("content-type"), Some(&json!("application/json")), "{name}: content-type");
            assert_eq!(headers.get("content-length"), Some(&json!(body.len().to_string())), "{name}");
            serde_json::from_str::<Value>(body).unwrap_or_else(|e| panic!("{name}: the body is not JSON: {e}"));
        }
        None => assert!(!headers.contains_key("content-type"), "{name}: content-type without a body"),
    }
}

/// The local stack as `make run` runs it (its own tables and queues, and the pumps), after
/// `careerctl demo seed`, with `careerctl demo receiver` listening where the demo
/// subscription delivers.
struct Stack {
    pipeline: Pipeline,
    demo_key: String,
    seeded: Seeded,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Stack {
    async fn start() -> Self {
        let pipeline = Pipeline::start(true).await;
        let demo_key = demo::demo_key(&pipeline.api.admin).await.expect("the demo key").key;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().unwrap().port());
        let sealer = Sealer::new(&clients(), pipeline.settings()).expect("sealer settings");
        let seeded = demo::seed(&dynamodb(), pipeline.settings(), &sealer, &url).await.expect("demo seed");
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let log = received.clone();
        let secret = WebhookSecret::parse(&seeded.secret).expect("demo seed prints the secret");
        tokio::spawn(demo::receiver::receive(listener, secret, move |delivery| log.lock().unwrap().push(delivery)));
        Stack { pipeline, demo_key, seeded, received }
    }

    /// The deliveries with this id the receiver got, once it has `count` of them.
    async fn wait_for_delivery(&self, id: &str, count: usize) -> Vec<Received> {
        eventually(format!("{count} deliveries {id}"), || async {
            let got: Vec<Received> =
                self.received.lock().unwrap().iter().filter(|r| r.delivery_id == id).cloned().collect();
            if got.len() >= count {
                Ok(got)
            } else {
                Err(got.len())
            }
        })
        .await
    }

    async fn delivery_status(&self, id: &str) -> DeliveryStatus {
        let stored = career_service::delivery_record(&self.pipeline.settings().tables, demo::USER, id).await;
        stored.unwrap_or_else(|| panic!("no delivery record {id}")).record.status
    }

    /// Once the delivery's record says it succeeded: a turn records its send after the
    /// receiver answered, so the receiver may have it a moment before its record does.
    async fn wait_until_succeeded(&self, id: &str) {
        let tables = &self.pipeline.settings().tables;
        eventually(format!("{id} recorded succeeded"), || async {
            let stored = career_service::delivery_record(tables, demo::USER, id).await;
            match stored.map(|stored| stored.record.status) {
                Some(DeliveryStatus::Succeeded) => Ok(()),
                other => Err(other),
            }
        })
        .await
    }

    /// `text` with the demo key in place of the placeholder, through lambda_http's own
    /// deserializer and conversion, answered by `function`'s handler: its status and body.
    async fn invoke_api(&self, name: &str, text: &str, function: ApiFunction) -> (u16, Value) {
        let event: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
        check_shape(name, &event, function);
        assert_eq!(text.matches(PLACEHOLDER_KEY).count(), 1, "{name}: one placeholder key");
        let request: LambdaRequest = serde_json::from_str(&text.replace(PLACEHOLDER_KEY, &self.demo_key))
            .unwrap_or_else(|e| panic!("{name}: lambda_http cannot read the event: {e}"));
        let request = lambda_http::Request::from(request);
        assert!(
            matches!(request.request_context_ref(), Some(RequestContext::ApiGatewayV2(_))),
            "{name}: read as an HTTP API (payload 2.0) event"
        );
        let settings = self.pipeline.settings();
        let response = match function {
            ApiFunction::Alerts => {
                career_alerts::handle(
                    &career_alerts::Deps::new(
                        &acting_as(function::ALERTS, settings, &clients()),
                        &career_service::function_settings(function::ALERTS, settings),
                    )
                    .unwrap(),
                    request,
                )
                .await
            }
            ApiFunction::DataSharing => {
                let deps = career_data_sharing::Deps::new(
                    &acting_as(function::DATA_SHARING, settings, &clients()),
                    &career_service::function_settings(function::DATA_SHARING, settings),
                )
                .unwrap();
                career_data_sharing::handle(&deps, request).await
            }
            ApiFunction::Webhooks => {
                let deps = career_webhooks::Deps::new(
                    &acting_as(function::WEBHOOKS, settings, &clients()),
                    &career_service::function_settings(function::WEBHOOKS, settings),
                )
                .unwrap();
                career_webhooks::handle(&deps, request).await
            }
        };
        let (parts, body) = response.into_parts();
        let Body::Text(body) = body else { panic!("{name}: expected a text body") };
        // The contract: the API Gateway request id is the request id when there is one.
        let request_id = parts.headers.get("x-request-id").and_then(|v| v.to_str().ok());
        assert_eq!(request_id, event["requestContext"]["requestId"].as_str(), "{name}: X-Request-Id");
        let content_type = parts.headers.get("content-type").and_then(|v| v.to_str().ok());
        assert_eq!(content_type, Some("application/json"), "{name}: Content-Type");
        let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{name}: answer is not JSON ({e}): {body}"));
        (parts.status.as_u16(), json)
    }

    /// The batch through aws_lambda_events' deserializer and `function`'s handler: its answer
    /// as the runtime returns it.
    async fn invoke_batch(&self, name: &str, text: &str, function: &str) -> Value {
        let settings = self.pipeline.settings();
        let answer = match function {
            "career-fanout" => {
                let batch: StreamEvent =
                    serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: not a stream event: {e}"));
                let deps = career_fanout::Deps::new(
                    &acting_as(function::FANOUT, settings, &clients()),
                    &career_service::function_settings(function::FANOUT, settings),
                )
                .unwrap();
                serde_json::to_value(career_fanout::handle(&deps, batch).await)
            }
            "career-deliver" => {
                let batch: SqsEvent =
                    serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: not an SQS event: {e}"));
                let deps = career_service::deliver_instance(settings);
                serde_json::to_value(career_deliver::handle(&deps, batch).await)
            }
            other => panic!(
                "{name}: docs/deploying.md names the function {other}, which tests/it/sample_events.rs cannot invoke: \
                 add it to Stack::invoke_api or Stack::invoke_batch"
            ),
        };
        answer.expect("the answer serializes")
    }
}

/// The delivery messages of `deliver-sqs-batch.json`, checked to be a main-lane batch.
fn sample_deliveries(text: &str) -> Vec<DeliveryMessage> {
    let event: SqsEvent = serde_json::from_str(text).expect("an SQS event");
    event
        .records
        .iter()
        .map(|record| {
            assert!(record.receipt_handle.as_deref().is_some_and(|h| !h.is_empty()));
            let count = record.attributes.get("ApproximateReceiveCount").expect("ApproximateReceiveCount");
            assert!(count.parse::<u32>().is_ok_and(|n| n >= 1), "{count}");
            assert_eq!(Lane::of(record), Lane::Main, "a batch of the main lane, the FIFO queue");
            let body = record.body.as_deref().expect("a body");
            serde_json::from_str(body).unwrap_or_else(|e| panic!("a delivery message ({e}): {body}"))
        })
        .collect()
}

/// The recover (or replay) sample with its window starting a day ago.
fn with_recent_since(text: &str) -> String {
    let mut event: Value = serde_json::from_str(text).expect("a JSON event");
    let mut body: Value = serde_json::from_str(event["body"].as_str().expect("a body")).expect("a JSON body");
    let day_ago = career_core::clock::Timestamp::now() - std::time::Duration::from_secs(86_400);
    body["since"] = json!(day_ago);
    let body = body.to_string();
    event["headers"]["content-length"] = json!(body.len().to_string());
    event["body"] = json!(body);
    event.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_sample_answers_what_the_readme_says_after_demo_seed() {
    let files = sample_files();
    let stack = Stack::start().await;
    let seeded = &stack.seeded;
    let deliveries = sample_deliveries(&files["deliver-sqs-batch.json"]);
    for row in readme_rows() {
        let name = row.file.as_str();
        let text =
            files.get(name).unwrap_or_else(|| panic!("docs/deploying.md lists {name}, which events/ does not hold"));
        // As docs/deploying.md says: its `since` edited to within the last 30 days.
        let text = &match name {
            "webhooks-recover.json" | "webhooks-replay.json" => with_recent_since(text),
            _ => text.clone(),
        };
        let (status, json) = match ApiFunction::named(&row.function) {
            Some(function) => {
                let (status, json) = stack.invoke_api(name, text, function).await;
                (Some(status), json)
            }
            None => (None, stack.invoke_batch(name, text, &row.function).await),
        };
        match &row.answer {
            Answer::Status(expected) => {
                assert_eq!(status, Some(*expected), "{name}, as docs/deploying.md says: {json}")
            }
            Answer::Json(expected) => assert_eq!(&json, expected, "{name}, as docs/deploying.md says"),
        }
        let subscription = seeded.subscription_id.as_str();
        match name {
            "alerts-list.json" => {
                let listed: Vec<&Value> = json["alerts"].as_array().unwrap().iter().map(|a| &a["id"]).collect();
                assert!(listed.contains(&&json!(seeded.alert_id)), "the seeded alert is listed: {json}");
            }
            "alerts-mark-read.json" => {
                assert_eq!((&json["id"], &json["read"]), (&json!(seeded.alert_id), &json!(true)), "{json}");
            }
            "data-sharing-put.json" => {
                assert_eq!(json["preferences"]["shareAssessmentResults"], true, "{json}");
                assert_eq!(json["preferences"]["shareActivityData"], false, "{json}");
            }
            "webhooks-list.json" => {
                let listed: Vec<&Value> = json["webhooks"].as_array().unwrap().iter().map(|w| &w["id"]).collect();
                assert!(listed.contains(&&json!(subscription)), "the seeded subscription is listed: {json}");
            }
            "webhooks-deliveries-list.json" => {
                let listed = json["deliveries"].as_array().unwrap();
                assert_eq!(listed.len(), 1, "{json}");
                assert_eq!(
                    (&listed[0]["id"], &listed[0]["status"]),
                    (&json!(seeded.failed_delivery_id), &json!("failed"))
                );
                assert_eq!(listed[0]["lastError"], "connection refused", "{json}");
            }
            "webhooks-delivery-retry.json" => {
                assert_eq!((&json["id"], &json["status"]), (&json!(seeded.failed_delivery_id), &json!("pending")));
                let id = seeded.failed_delivery_id.as_str();
                assert!(stack.wait_for_delivery(id, 1).await[0].verified, "the pumps send it, signed");
            }
            "webhooks-ping.json" => {
                assert_eq!((&json["eventType"], &json["status"]), (&json!("webhook.ping"), &json!("pending")));
                let delivered = stack.wait_for_delivery(json["id"].as_str().unwrap(), 1).await;
                assert_eq!((delivered[0].verified, delivered[0].event_type.as_str()), (true, "webhook.ping"));
            }
            "webhooks-rotate-secret.json" => {
                assert_eq!(json["id"], subscription);
                assert!(json["secret"].as_str().is_some_and(|new| new != seeded.secret), "a new secret: {json}");
                assert!(json["previousSecretExpiresAt"].is_string(), "the old one keeps signing a while: {json}");
            }
            "webhooks-event-types.json" => {
                assert_eq!(
                    json["eventTypes"],
                    serde_json::to_value(career_core::events::catalog::event_types()).unwrap()
                );
            }
            "webhooks-update.json" => {
                let sent: Value = serde_json::from_str(
                    serde_json::from_str::<Value>(text).unwrap()["body"].as_str().expect("a body"),
                )
                .unwrap();
                assert_eq!((&json["id"], &json["events"]), (&json!(subscription), &sent["events"]), "{json}");
                assert_eq!((&json["enabled"], &json["disabledReason"]), (&json!(false), &json!("manual")), "{json}");
                assert!(json["publicKey"].as_str().is_some_and(|key| key.starts_with("whpk_")), "{json}");
            }
            "webhooks-signing-keys.json" => {
                let keys = json["keys"].as_array().unwrap();
                assert_eq!(keys.len(), 1, "{json}");
                assert_eq!((&keys[0]["status"], &keys[0]["expiresAt"]), (&json!("current"), &Value::Null), "{json}");
                assert!(keys[0]["publicKey"].as_str().is_some_and(|key| key.starts_with("whpk_")), "{json}");
            }
            "webhooks-enable.json" => assert_eq!((&json["id"], &json["enabled"]), (&json!(subscription), &json!(true))),
            "webhooks-health.json" => {
                assert_eq!(
                    (&json["subscriptionId"], &json["state"]),
                    (&json!(subscription), &json!("healthy")),
                    "{json}"
                );
                assert!(json["last24h"]["succeeded"].as_u64().is_some_and(|n| n >= 2), "{json}");
                assert_eq!(json["held"], 0, "{json}");
            }
            "webhooks-recover.json" => assert_eq!(json, json!({"recovering": 0, "more": false})),
            "fanout-stream-batch.json" => {
                // For the seeded subscription these events are the delivery sample's deliveries
                // (see the_fanout_sample_is_the_delivery_samples_events), sent and logged already:
                // their records stay as they are, and nothing is queued to send them again (once
                // the lanes are empty, anything the fan-out had queued would have arrived).
                stack.pipeline.drained().await;
                for message in &deliveries {
                    let id = message.delivery_id.as_str();
                    assert_eq!(stack.wait_for_delivery(id, 1).await.len(), 1, "{id} is not sent again");
                    assert_eq!(stack.delivery_status(id).await, DeliveryStatus::Succeeded);
                }
            }
            "deliver-sqs-batch.json" => {
                for message in &deliveries {
                    let id = message.delivery_id.as_str();
                    assert_eq!(message.subscription_id.as_str(), subscription, "{name} delivers to the seeded one");
                    // Sent before any fan-out wrote its record: by this batch, or, when the
                    // seeded receiver has answered fast, by the turn its copy gets in the message
                    // group its subscription now spreads to (moved there unsent).
                    let delivered = stack.wait_for_delivery(id, 1).await;
                    assert!(delivered.iter().all(|d| d.verified), "{delivered:?}");
                    stack.wait_until_succeeded(id).await;
                }
            }
            "webhooks-create.json" => {
                assert!(json["secret"].as_str().is_some_and(|s| WebhookSecret::parse(s).is_some()), "{json}");
                // No receiver of this test listens where the sample points, so nothing may go there.
                let id = json["id"].as_str().unwrap();
                let deleted = stack.pipeline.api.request(Method::DELETE, &format!("/api/v1/webhooks?id={id}"));
                deleted.key(&stack.demo_key).send().await.assert_status(200);
            }
            "webhooks-delete.json" => assert_eq!(json, json!({"id": subscription, "deleted": true})),
            _ => {}
        }
    }
}

/// The fan-out sample's stream records are those the streams hand the fan-out: one INSERT on
/// the profiles table and one MODIFY on the assessments table.
#[test]
fn the_fanout_sample_is_a_profile_insert_and_an_assessment_modify() {
    let batch: StreamEvent = serde_json::from_str(&sample_files()["fanout-stream-batch.json"]).expect("a stream event");
    let names: Vec<_> = batch.records.iter().map(|r| r.event_name.as_str()).collect();
    assert_eq!(names, ["INSERT", "MODIFY"]);
    for record in &batch.records {
        assert!(record.change.sequence_number.is_some());
        assert!(record
            .event_source_arn
            .as_deref()
            .is_some_and(|arn| arn.contains(":table/") && arn.contains("/stream/")));
        assert!(!record.change.keys.is_empty() && !record.change.new_image.is_empty());
    }
    assert!(batch.records[0].change.keys.contains_key("profileId"), "an INSERT on the profiles table");
    assert!(batch.records[1].change.keys.contains_key("assessmentId"), "a MODIFY on the assessments table");
}

/// As docs/deploying.md says, the fan-out sample's events are exactly those of the delivery sample,
/// so for the seeded subscription its deliveries are the delivery sample's, ids and bodies.
#[test]
fn the_fanout_sample_is_the_delivery_samples_events() {
    let files = sample_files();
    let batch: StreamEvent = serde_json::from_str(&files["fanout-stream-batch.json"]).expect("a stream event");
    let events: Vec<_> =
        batch.records.iter().map(|record| event_from_record(record).expect("readable").expect("an event")).collect();
    let delivered: Vec<_> = sample_deliveries(&files["deliver-sqs-batch.json"]).into_iter().map(|m| m.event).collect();
    assert_eq!(events, delivered);
}
