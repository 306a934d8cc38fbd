//! The sample events in `events/` (for `cargo lambda invoke --data-file events/<file>.json
//! <function>`) go through the same deserializers the Lambda runtime uses and through the
//! real handlers against DynamoDB Local and the SQS emulator.
//!
//! Each API event carries a placeholder key of the right shape; the test swaps in a real key
//! of a fresh user and seeds what the operation needs, using the ids the file names. The two
//! event-function samples tell one story: `fanout-stream-batch.json` is what the streams hand
//! the fan-out, and `deliver-sqs-batch.json` is exactly what the fan-out puts on the delivery
//! queue for it (given the two subscriptions that file names).

use std::collections::BTreeMap;
use std::time::Duration;

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_lambda_events::sqs::SqsEvent;
use career_core::alerts::{Alert, Category, Severity};
use career_core::config::Settings;
use career_core::credentials::ApiKey;
use career_core::delivery::DeliveryMessage;
use career_core::events::EventKind;
use career_core::queue::Lane;
use career_core::rotation::SigningSecrets;
use career_core::sealing::Sealer;
use career_core::signing::verify_hex;
use career_core::store::alerts::AlertTable;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::{Created, StoredSecrets, StoredSubscription, WebhookTable};
use career_core::webhooks::{DisabledReason, WebhookSecret, MAX_SUBSCRIPTIONS_PER_USER};
use career_core::{clock, ids};
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::typed;
use career_service::{dynamodb, sqs, unique_user, Api};
use lambda_http::http::Method;
use lambda_http::request::{LambdaRequest, RequestContext};
use lambda_http::{Body, RequestExt};
use serde_json::{json, Value};

/// The key every sample API event carries: `cak_` and 43 base64url characters.
const PLACEHOLDER_KEY: &str = "cak_REPLACE-with-a-key-from-careerctl-keys-crea";

fn sample(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("events").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The API function a sample is meant for (the SAM template's route for its path).
#[derive(Clone, Copy, Debug)]
enum Function {
    Alerts,
    DataSharing,
    Webhooks,
}

impl Function {
    /// The request's path.
    fn path(self) -> &'static str {
        match self {
            Function::Alerts => career_alerts::RESOURCE.path,
            Function::DataSharing => career_data_sharing::RESOURCE.path,
            Function::Webhooks => career_webhooks::RESOURCES[0].path,
        }
    }
}

/// What a sample API event holds, read as plain JSON (before any deserializer sees it).
struct HttpSample {
    name: &'static str,
    text: String,
    json: Value,
}

impl HttpSample {
    /// Reads `events/<name>.json` and checks that it is a complete API Gateway HTTP API
    /// (payload format 2.0) event for `method` on `function`'s route.
    fn load(name: &'static str, function: Function, method: Method) -> Self {
        let text = sample(&format!("{name}.json"));
        let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
        let sample = HttpSample { name, text, json };
        sample.check_shape(function, &method);
        sample
    }

    #[track_caller]
    fn check_shape(&self, function: Function, method: &Method) {
        let (name, event) = (self.name, &self.json);
        let path = function.path();
        let raw_path = event["rawPath"].as_str().unwrap_or_else(|| panic!("{name}: rawPath"));
        // The function's route, or the template's `{proxy+}` route for the operations below it.
        let route = match raw_path.strip_prefix(path).and_then(|rest| rest.strip_prefix('/')) {
            Some(proxy) => {
                assert_eq!(event["pathParameters"]["proxy"], proxy, "{name}: pathParameters.proxy");
                format!("ANY {path}/{{proxy+}}")
            }
            None => {
                assert_eq!(raw_path, path, "{name}: rawPath");
                format!("ANY {path}")
            }
        };
        let context = &event["requestContext"];
        assert_eq!(event["version"], "2.0", "{name}: version");
        assert_eq!(event["routeKey"], route.as_str(), "{name}: routeKey (the template's route)");
        assert_eq!(context["routeKey"], route.as_str(), "{name}: requestContext.routeKey");
        assert_eq!(context["http"]["method"], method.as_str(), "{name}: requestContext.http.method");
        assert_eq!(context["http"]["path"], raw_path, "{name}: requestContext.http.path");
        assert!(context["http"]["sourceIp"].as_str().is_some_and(|ip| ip.parse::<std::net::IpAddr>().is_ok()));
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

        // Headers: lower-case names as API Gateway sends them, a well-formed placeholder key,
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

    fn request_id(&self) -> &str {
        self.json["requestContext"]["requestId"].as_str().unwrap()
    }

    /// The query parameter `name` as the sample sends it.
    fn query(&self, name: &str) -> String {
        self.json["queryStringParameters"][name].as_str().unwrap_or_else(|| panic!("{}: no {name}", self.name)).into()
    }

    fn body(&self) -> Value {
        serde_json::from_str(self.json["body"].as_str().expect("a body")).unwrap()
    }

    /// The sample with `key` in place of the placeholder, through lambda_http's own
    /// deserializer and conversion, answered by `function`'s handler.
    async fn invoke(&self, api: &Api, function: Function, key: &str) -> Invoked {
        assert_eq!(self.text.matches(PLACEHOLDER_KEY).count(), 1, "{}: one placeholder key", self.name);
        let text = self.text.replace(PLACEHOLDER_KEY, key);
        let event: LambdaRequest = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: lambda_http cannot read the event: {e}", self.name));
        let request = lambda_http::Request::from(event);
        assert!(
            matches!(request.request_context_ref(), Some(RequestContext::ApiGatewayV2(_))),
            "{}: read as an HTTP API (payload 2.0) event",
            self.name
        );
        assert_eq!(request.method().as_str(), self.json["requestContext"]["http"]["method"]);
        let dynamodb = dynamodb();
        let response = match function {
            Function::Alerts => {
                career_alerts::handle(&career_alerts::Deps::new(&dynamodb, &api.settings).unwrap(), request).await
            }
            Function::DataSharing => {
                let deps = career_data_sharing::Deps::new(&dynamodb, &api.settings).unwrap();
                career_data_sharing::handle(&deps, request).await
            }
            Function::Webhooks => {
                let deps = career_webhooks::Deps::new(
                    &dynamodb,
                    &career_service::kms(),
                    &career_service::sqs(),
                    &api.settings,
                )
                .unwrap();
                career_webhooks::handle(&deps, request).await
            }
        };
        let (parts, body) = response.into_parts();
        let body = match body {
            Body::Text(text) => text,
            other => panic!("{}: expected a text body, got {other:?}", self.name),
        };
        let invoked = Invoked {
            name: self.name,
            status: parts.status.as_u16(),
            request_id: parts.headers.get("x-request-id").and_then(|v| v.to_str().ok()).map(String::from),
            content_type: parts.headers.get("content-type").and_then(|v| v.to_str().ok()).map(String::from),
            json: serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("{}: answer is not JSON ({e}): {body}", self.name)),
        };
        // The contract: the API Gateway request id is the request id when there is one.
        assert_eq!(invoked.request_id.as_deref(), Some(self.request_id()), "{}: X-Request-Id", self.name);
        assert_eq!(invoked.content_type.as_deref(), Some("application/json"), "{}: Content-Type", self.name);
        invoked
    }
}

#[derive(Debug)]
struct Invoked {
    name: &'static str,
    status: u16,
    request_id: Option<String>,
    content_type: Option<String>,
    json: Value,
}

impl Invoked {
    #[track_caller]
    fn expect(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "{}: {self:?}", self.name);
        &self.json
    }
}

fn alert(id: String, read: bool, dismissed: bool) -> Alert {
    let now = career_core::clock::Timestamp::now();
    Alert {
        id: typed(id),
        category: Category::RiskSignal,
        severity: Severity::Info,
        title: "Sample alert".into(),
        message: "Seeded for a sample event.".into(),
        created_at: now.clone(),
        read,
        read_at: read.then(|| now.clone()),
        dismissed,
        dismissed_at: dismissed.then_some(now),
    }
}

async fn seed_subscription(settings: &Settings, user: &str, id: &str, url: &str, events: Vec<EventKind>) -> String {
    let secret = WebhookSecret::generate();
    let sealer = Sealer::new(&career_service::kms(), &dynamodb(), settings).expect("sealer settings");
    let sealed = sealer.seal(&typed(user), &typed(id), &SigningSecrets::new(secret.clone())).await.expect("sealed");
    let stored = StoredSubscription {
        user_id: typed(user),
        subscription_id: typed(id),
        url: url.into(),
        events,
        secrets: StoredSecrets::Sealed { sealed_secrets: sealed },
        created_at: career_core::clock::Timestamp::now(),
        failing_since: None,
        disabled_at: None,
        disabled_reason: None,
    };
    let table = WebhookTable::new(dynamodb(), &settings.tables.webhooks);
    let created = table.insert(&stored, MAX_SUBSCRIPTIONS_PER_USER).await.expect("subscription stored");
    assert!(matches!(created, Created::Yes));
    secret.into()
}

#[tokio::test]
async fn alerts_list_lists_read_alerts_as_its_query_asks() {
    let sample = HttpSample::load("alerts-list", Function::Alerts, Method::GET);
    assert_eq!(sample.query("includeRead"), "true");
    let api = Api::new();
    let user = unique_user();
    let table = AlertTable::new(dynamodb(), &api.settings.tables.alerts);
    let (dismissed, read, unread) = (ids::new_id(ids::ALERT), ids::new_id(ids::ALERT), ids::new_id(ids::ALERT));
    table.insert(&typed(&user), &alert(dismissed, false, true)).await.unwrap();
    table.insert(&typed(&user), &alert(read.clone(), true, false)).await.unwrap();
    table.insert(&typed(&user), &alert(unread.clone(), false, false)).await.unwrap();
    let key = api.key(&user, "read:alerts").await;

    let answer = sample.invoke(&api, Function::Alerts, &key).await;
    let json = answer.expect(200);
    let listed: Vec<_> = json["alerts"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap()).collect();
    // includeRead=true: the read one too, newest first; the dismissed one stays out.
    assert_eq!(listed, [unread.as_str(), read.as_str()]);
    assert_eq!(json["nextCursor"], Value::Null);
}

#[tokio::test]
async fn alerts_mark_read_marks_the_alert_it_names() {
    let sample = HttpSample::load("alerts-mark-read", Function::Alerts, Method::PATCH);
    assert_eq!(sample.body(), json!({"action": "read"}));
    let id = sample.query("id");
    assert!(ids::has_shape(&id, ids::ALERT), "the sample's id has the shape of an alert id: {id}");
    let api = Api::new();
    let user = unique_user();
    let table = AlertTable::new(dynamodb(), &api.settings.tables.alerts);
    table.insert(&typed(&user), &alert(id.clone(), false, false)).await.unwrap();
    let key = api.key(&user, "write:alerts").await;

    let answer = sample.invoke(&api, Function::Alerts, &key).await;
    let json = answer.expect(200);
    assert_eq!(json["id"], id.as_str());
    assert_eq!(json["read"], true);
    assert!(json["readAt"].as_str().is_some_and(|at| at.ends_with('Z')), "{json}");
    assert_eq!(json["dismissed"], false);
}

#[tokio::test]
async fn data_sharing_get_returns_the_users_preferences() {
    let sample = HttpSample::load("data-sharing-get", Function::DataSharing, Method::GET);
    let api = Api::new();
    let user = unique_user();
    let key = api.key(&user, "read:data_sharing,write:data_sharing").await;
    let put = api.send_json(Method::PUT, "/api/v1/data-sharing", &key, r#"{"shareProfileData": true}"#).await;
    put.assert_status(200);

    let answer = sample.invoke(&api, Function::DataSharing, &key).await;
    let json = answer.expect(200);
    assert_eq!(
        json["preferences"],
        json!({"shareAssessmentResults": false, "shareProfileData": true, "shareActivityData": false})
    );
    assert_eq!(json["updatedAt"], put.json["updatedAt"]);
}

#[tokio::test]
async fn data_sharing_put_applies_the_flags_it_sends_and_keeps_the_others() {
    let sample = HttpSample::load("data-sharing-put", Function::DataSharing, Method::PUT);
    assert_eq!(sample.body(), json!({"shareAssessmentResults": true, "shareActivityData": false}));
    let api = Api::new();
    let user = unique_user();
    let key = api.key(&user, "write:data_sharing").await;
    api.send_json(Method::PUT, "/api/v1/data-sharing", &key, r#"{"shareProfileData": true}"#).await.assert_status(200);

    let answer = sample.invoke(&api, Function::DataSharing, &key).await;
    let json = answer.expect(200);
    assert_eq!(
        json["preferences"],
        json!({"shareAssessmentResults": true, "shareProfileData": true, "shareActivityData": false})
    );
    assert!(json["updatedAt"].as_str().is_some_and(|at| at.ends_with('Z')), "{json}");
}

#[tokio::test]
async fn webhooks_list_lists_the_users_subscriptions() {
    let sample = HttpSample::load("webhooks-list", Function::Webhooks, Method::GET);
    let api = Api::new();
    let user = unique_user();
    let id = ids::new_id(ids::SUBSCRIPTION);
    seed_subscription(&api.settings, &user, &id, "https://hooks.example.com/listed", vec![EventKind::ProfileUpdated])
        .await;
    let key = api.key(&user, "read:webhooks").await;

    let answer = sample.invoke(&api, Function::Webhooks, &key).await;
    let json = answer.expect(200);
    assert_eq!(json["webhooks"].as_array().unwrap().iter().map(|w| w["id"].clone()).collect::<Vec<_>>(), [json!(id)]);
    assert!(json["webhooks"][0].get("secret").is_none(), "secrets are never listed");
}

#[tokio::test]
async fn webhooks_create_creates_the_subscription_it_describes() {
    let sample = HttpSample::load("webhooks-create", Function::Webhooks, Method::POST);
    let body = sample.body();
    assert!(body["url"].as_str().is_some_and(|url| url.starts_with("https://")), "an https URL: {body}");
    let api = Api::new();
    assert!(!api.settings.allow_insecure_webhook_urls, "the sample must pass the production URL rules");
    let user = unique_user();
    let key = api.key(&user, "write:webhooks").await;

    let answer = sample.invoke(&api, Function::Webhooks, &key).await;
    let json = answer.expect(201);
    assert!(json["id"].as_str().is_some_and(|id| ids::has_shape(id, ids::SUBSCRIPTION)), "{json}");
    assert_eq!(json["url"], body["url"]);
    assert_eq!(json["events"], body["events"]);
    assert!(
        json["secret"].as_str().is_some_and(|s| WebhookSecret::parse(s).is_some_and(|p| p.expose().len() == 6 + 44)),
        "{json}"
    );
    let stored = WebhookTable::new(dynamodb(), &api.settings.tables.webhooks).list(&typed(&user)).await.unwrap();
    assert_eq!(stored.iter().map(|s| s.subscription_id.as_str()).collect::<Vec<_>>(), [json["id"].as_str().unwrap()]);
}

#[tokio::test]
async fn webhooks_delete_deletes_the_subscription_it_names() {
    let sample = HttpSample::load("webhooks-delete", Function::Webhooks, Method::DELETE);
    let id = sample.query("id");
    assert!(ids::has_shape(&id, ids::SUBSCRIPTION), "the sample's id has the shape of a subscription id: {id}");
    let api = Api::new();
    let user = unique_user();
    seed_subscription(&api.settings, &user, &id, "https://hooks.example.com/gone", vec![EventKind::ProfileUpdated])
        .await;
    let key = api.key(&user, "write:webhooks").await;

    let answer = sample.invoke(&api, Function::Webhooks, &key).await;
    assert_eq!(answer.expect(200), &json!({"id": id, "deleted": true}));
    let table = WebhookTable::new(dynamodb(), &api.settings.tables.webhooks);
    assert!(table.get(&typed(&user), &typed(&id)).await.unwrap().is_none(), "the subscription is gone");
}

#[tokio::test]
async fn webhooks_rotate_secret_rotates_the_subscription_it_names() {
    let sample = HttpSample::load("webhooks-rotate-secret", Function::Webhooks, Method::POST);
    let id = sample.query("id");
    assert!(ids::has_shape(&id, ids::SUBSCRIPTION), "the sample's id has the shape of a subscription id: {id}");
    let grace = sample.body()["gracePeriodSeconds"].as_u64().expect("a grace period");
    let api = Api::new();
    let user = unique_user();
    let old =
        seed_subscription(&api.settings, &user, &id, "https://hooks.example.com/r", vec![EventKind::ProfileUpdated])
            .await;
    let key = api.key(&user, "write:webhooks").await;

    let answer = sample.invoke(&api, Function::Webhooks, &key).await;
    let json = answer.expect(200);
    assert_eq!(json["id"], id.as_str());
    let new = json["secret"].as_str().unwrap();
    assert!(WebhookSecret::parse(new).is_some() && new != old, "{json}");
    let expires = chrono::DateTime::parse_from_rfc3339(json["previousSecretExpiresAt"].as_str().unwrap()).unwrap();
    let from_now = expires.timestamp() - chrono::Utc::now().timestamp();
    assert!((grace as i64 - 5..=grace as i64).contains(&from_now), "{json}");
}

/// A delivery of `subscription` with the given id, failed once, in the user's delivery log.
async fn seed_failed_delivery(api: &Api, user: &str, subscription: &str, delivery_id: &str) {
    use career_core::delivery::log::AttemptRecord;
    use career_core::delivery::sender::{Answer, Outcome};
    let message = DeliveryMessage {
        delivery_id: typed(delivery_id),
        user_id: typed(user),
        subscription_id: typed(subscription),
        event: career_core::events::Event::ping(&typed(subscription)),
        earlier_attempts: 0,
    };
    let outcome = Outcome::Rejected(Answer { status: 502, body: "bad gateway".into() });
    let attempt = AttemptRecord::new(&outcome, clock::now(), None);
    let table = DeliveryTable::new(dynamodb(), &api.settings.tables.deliveries);
    table.record_attempt(&message, &message.body(), &attempt).await.expect("delivery recorded");
}

#[tokio::test]
async fn webhooks_deliveries_list_lists_the_failed_deliveries_it_asks_for() {
    let sample = HttpSample::load("webhooks-deliveries-list", Function::Webhooks, Method::GET);
    let (id, status) = (sample.query("id"), sample.query("status"));
    let api = Api::new();
    let user = unique_user();
    seed_subscription(&api.settings, &user, &id, "https://hooks.example.com/log", vec![EventKind::ProfileUpdated])
        .await;
    let delivery = ids::new_id(ids::DELIVERY);
    seed_failed_delivery(&api, &user, &id, &delivery).await;
    let key = api.key(&user, "read:webhooks").await;

    let answer = sample.invoke(&api, Function::Webhooks, &key).await;
    let json = answer.expect(200);
    assert_eq!(json["deliveries"].as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(
        (json["deliveries"][0]["id"].as_str(), json["deliveries"][0]["status"].as_str()),
        (Some(delivery.as_str()), Some(status.as_str()))
    );
}

#[tokio::test]
async fn webhooks_delivery_retry_queues_the_delivery_it_names() {
    let sample = HttpSample::load("webhooks-delivery-retry", Function::Webhooks, Method::POST);
    let delivery = sample.query("id");
    assert!(ids::has_shape(&delivery, ids::DELIVERY), "the sample's id has the shape of a delivery id: {delivery}");
    let api = Api::new();
    let user = unique_user();
    let subscription = ids::new_id(ids::SUBSCRIPTION);
    seed_subscription(
        &api.settings,
        &user,
        &subscription,
        "https://hooks.example.com/retry",
        vec![EventKind::ProfileUpdated],
    )
    .await;
    seed_failed_delivery(&api, &user, &subscription, &delivery).await;
    let key = api.key(&user, "write:webhooks").await;

    let answer = sample.invoke(&api, Function::Webhooks, &key).await;
    let json = answer.expect(202);
    assert_eq!((json["id"].as_str(), json["status"].as_str()), (Some(delivery.as_str()), Some("pending")));
}

#[tokio::test]
async fn webhooks_ping_and_enable_act_on_the_subscription_they_name() {
    let ping = HttpSample::load("webhooks-ping", Function::Webhooks, Method::POST);
    let enable = HttpSample::load("webhooks-enable", Function::Webhooks, Method::POST);
    let id = ping.query("id");
    assert_eq!(enable.query("id"), id);
    let api = Api::new();
    let user = unique_user();
    let table = WebhookTable::new(dynamodb(), &api.settings.tables.webhooks);
    seed_subscription(
        &api.settings,
        &user,
        &id,
        "https://hooks.example.com/ping",
        vec![EventKind::AssessmentCompleted],
    )
    .await;
    let key = api.key(&user, "write:webhooks").await;

    let answer = ping.invoke(&api, Function::Webhooks, &key).await;
    let json = answer.expect(202);
    assert_eq!(
        (json["eventType"].as_str(), json["subscriptionId"].as_str()),
        (Some("webhook.ping"), Some(id.as_str()))
    );
    table.start_failure_clock(&typed(&user), &typed(&id), &typed("2026-11-01T00:00:00.000Z")).await.unwrap();
    table
        .disable(
            &typed(&user),
            &typed(&id),
            DisabledReason::Failing,
            Some(&typed("2026-11-01T00:00:00.000Z")),
            &typed("2026-11-06T00:00:00.000Z"),
        )
        .await
        .unwrap();
    let answer = enable.invoke(&api, Function::Webhooks, &key).await;
    assert_eq!(answer.expect(200)["enabled"], true);
    assert!(table.get(&typed(&user), &typed(&id)).await.unwrap().unwrap().is_enabled());
}

/// The delivery messages of `deliver-sqs-batch.json`.
fn sample_deliveries() -> (SqsEvent, Vec<DeliveryMessage>) {
    let event: SqsEvent = serde_json::from_str(&sample("deliver-sqs-batch.json")).expect("an SQS event");
    let messages = event
        .records
        .iter()
        .map(|record| {
            let body = record.body.as_deref().expect("a body");
            serde_json::from_str::<DeliveryMessage>(body).unwrap_or_else(|e| panic!("a delivery message ({e}): {body}"))
        })
        .collect();
    (event, messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliver_sqs_batch_sends_each_message_signed_to_its_subscription() {
    let (event, messages) = sample_deliveries();
    assert_eq!(event.records.len(), 2);
    for record in &event.records {
        assert!(record.message_id.as_deref().is_some_and(|id| !id.is_empty()));
        assert!(record.receipt_handle.as_deref().is_some_and(|h| !h.is_empty()));
        let count = record.attributes.get("ApproximateReceiveCount").expect("ApproximateReceiveCount");
        assert!(count.parse::<u32>().is_ok_and(|n| n >= 1), "{count}");
        assert_eq!(record.event_source.as_deref(), Some("aws:sqs"));
        assert_eq!(Lane::of(record), Lane::Main, "a batch of the main lane, the FIFO queue");
    }
    let pipeline = Pipeline::start(false).await;
    let mut receivers = Vec::new();
    for message in &messages {
        let receiver = Receiver::start(&[200], Duration::ZERO).await;
        let secret = seed_subscription(
            pipeline.settings(),
            message.user_id.as_str(),
            message.subscription_id.as_str(),
            &receiver.url,
            vec![message.event.kind()],
        )
        .await;
        receivers.push((receiver, secret));
    }

    let deps = career_service::deliver_instance(pipeline.settings());
    let response = career_deliver::handle(&deps, event).await;
    assert!(response.batch_item_failures.is_empty(), "every delivery succeeded: {response:?}");

    for (message, (receiver, secret)) in messages.iter().zip(&receivers) {
        let received = receiver.received();
        assert_eq!(received.len(), 1, "one request for {}", message.delivery_id);
        let delivery = &received[0];
        assert_eq!(delivery.header("x-webhook-delivery"), message.delivery_id.as_str());
        assert_eq!(delivery.header("x-webhook-event"), message.event.kind().as_str());
        assert_eq!(delivery.header("content-type"), "application/json");
        assert!(verify_hex(secret, &delivery.body, delivery.header("x-webhook-signature")), "signature verifies");
        assert_eq!(delivery.json(), serde_json::to_value(&message.event).unwrap(), "the body is the event");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fanout_stream_batch_becomes_exactly_the_sample_delivery_messages() {
    let batch: StreamEvent = serde_json::from_str(&sample("fanout-stream-batch.json")).expect("a stream event");
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

    let (_, expected) = sample_deliveries();
    let user = expected[0].user_id.clone();
    let pipeline = Pipeline::start(false).await;
    // The subscriptions the delivery sample names, one per kind, and another user's
    // subscription to both kinds, which must get nothing.
    for message in &expected {
        let url = "http://127.0.0.1:9/unused";
        seed_subscription(
            pipeline.settings(),
            user.as_str(),
            message.subscription_id.as_str(),
            url,
            vec![message.event.kind()],
        )
        .await;
    }
    let all = vec![EventKind::ProfileUpdated, EventKind::AssessmentCompleted];
    let other = ids::new_id(ids::SUBSCRIPTION);
    seed_subscription(pipeline.settings(), &unique_user(), &other, "http://127.0.0.1:9/other", all).await;

    let deps = career_fanout::Deps::new(&dynamodb(), &sqs(), pipeline.settings()).unwrap();
    let response = career_fanout::handle(&deps, batch).await;
    assert!(response.batch_item_failures.is_empty(), "{response:?}");

    let queue = pipeline.queues.delivery.clone();
    let messages = pipeline.peek(&queue, expected.len(), Duration::from_secs(15)).await;
    let mut got: Vec<DeliveryMessage> =
        messages.iter().map(|m| serde_json::from_str(m.body().expect("a body")).expect("a delivery message")).collect();
    got.sort_by(|a, b| a.delivery_id.cmp(&b.delivery_id));
    let mut expected = expected;
    expected.sort_by(|a, b| a.delivery_id.cmp(&b.delivery_id));
    assert_eq!(
        got, expected,
        "the fan-out of fanout-stream-batch.json is the delivery messages of deliver-sqs-batch.json \
         (if the id derivation changed on purpose, regenerate the samples)"
    );
    assert!(pipeline.peek(&queue, 1, Duration::from_secs(2)).await.is_empty(), "no other message");
}
