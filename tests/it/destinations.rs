//! Destinations in the receiver's own AWS account (contract section 17), end to end through
//! the local stack: the receiver's role, queue and bus live in an account of their own in moto
//! (local_aws::receiver), and the stack's IAM evaluates the role's trust policy on the
//! delivery function's `AssumeRole` and its permissions on the calls made with the
//! credentials STS gave, as AWS does.

use std::time::Duration;

use career_core::delivery::log::{DeliveryRecord, DeliveryStatus};
use career_service::pipeline::Pipeline;
use career_service::{eventually, unique_user};
use lambda_http::http::Method;
use local_aws::receiver::{permissions_policy, queue_arn, trust_policy, ReceiverAccount};
use serde_json::{json, Value};

/// A pipeline with its pumps, and the receiver's account.
async fn start() -> (Pipeline, ReceiverAccount) {
    let pipeline = Pipeline::start(true).await;
    (pipeline, ReceiverAccount::new(&career_service::clients()))
}

/// Creates `user`'s subscription to `profile.updated` with `destination`: the subscription.
async fn subscribe(pipeline: &Pipeline, user: &str, destination: Value) -> Value {
    let key = pipeline.api.key(user, "write:webhooks").await;
    let body = json!({"destination": destination, "events": ["profile.updated"]}).to_string();
    let created = pipeline.api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await;
    created.assert_status(201).clone()
}

/// The role `name` for `subscription`: trusting its sender role with `external_id`, allowed
/// `action` on `resource`.
async fn role_for(
    account: &ReceiverAccount,
    name: &str,
    subscription: &Value,
    external_id: &str,
    (action, resource): (&str, &str),
) {
    let sender = subscription["destination"]["senderRoleArn"].as_str().expect("the sender role");
    let trust = trust_policy(sender, external_id);
    account.replace_role(name, &trust, &permissions_policy(action, resource)).await.expect("the receiver's role");
}

/// A new user, and their subscription to a new queue of the receiver's: the queue
/// `<prefix>-…`, whose role of the same name (not made yet) the subscription names.
struct Subscribed {
    user: String,
    name: String,
    queue_url: String,
    subscription: Value,
}

impl Subscribed {
    async fn to_queue(pipeline: &Pipeline, account: &ReceiverAccount, prefix: &str) -> Self {
        let user = unique_user();
        let name = format!("{prefix}-{}", &user[user.len() - 8..]);
        let queue_url = account.create_queue(&name).await.expect("the receiver's queue");
        let destination = json!({"type": "aws_sqs", "queueUrl": queue_url, "roleArn": role_arn(&name)});
        let subscription = subscribe(pipeline, &user, destination).await;
        Subscribed { user, name, queue_url, subscription }
    }

    fn id(&self) -> &str {
        self.subscription["id"].as_str().unwrap()
    }

    fn external_id(&self) -> &str {
        self.subscription["destination"]["externalId"].as_str().unwrap()
    }
}

/// The ARN of the receiver's role `name`.
pub(crate) fn role_arn(name: &str) -> String {
    format!("arn:aws:iam::{}:role/{name}", local_aws::receiver::RECEIVER_ACCOUNT)
}

/// Waits for at least `count` messages on the receiver's queue and takes them.
pub(crate) async fn take(account: &ReceiverAccount, queue_url: &str, count: usize) -> Vec<aws_sdk_sqs::types::Message> {
    let taken = std::sync::Mutex::new(Vec::new());
    eventually(format!("{count} message(s) on the receiver's queue"), || async {
        let fetched = account.take(queue_url).await.map_err(|err| format!("{err:#}"))?;
        let mut taken = taken.lock().unwrap();
        taken.extend(fetched);
        match taken.len() >= count {
            true => Ok(()),
            false => Err(format!("{} so far", taken.len())),
        }
    })
    .await;
    taken.into_inner().unwrap()
}

/// Waits until the subscription's newest delivery record satisfies `done`.
async fn record_until(
    pipeline: &Pipeline,
    subscription: &str,
    done: impl Fn(&DeliveryRecord) -> bool,
) -> DeliveryRecord {
    let deliveries = career_core::store::deliveries::DeliveryTable::new(
        career_service::dynamodb(),
        &pipeline.settings().tables.deliveries,
    );
    let id = career_service::typed(subscription);
    eventually("the delivery record", || async {
        let records = deliveries.list(&id, None, 10, None).await.map_err(|err| err.to_string())?.deliveries;
        match records.into_iter().next() {
            Some(record) if done(&record) => Ok(record),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// Whether `body` verifies with `secret` under `headers`, with the Standard Webhooks library.
pub(crate) fn verifies(secret: &str, headers: &[(&str, &str)], body: &str) -> bool {
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        map.insert(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
    }
    let webhook = standardwebhooks::Webhook::new(secret).expect("a whsec_ secret");
    webhook.verify(body.as_bytes(), &map).is_ok()
}

/// A message's string attribute `name`.
pub(crate) fn attribute<'a>(message: &'a aws_sdk_sqs::types::Message, name: &str) -> &'a str {
    let attributes = message.message_attributes().expect("message attributes");
    attributes.get(name).and_then(|value| value.string_value()).unwrap_or_else(|| panic!("no attribute {name}"))
}

pub(crate) const STANDARD_HEADERS: [&str; 3] = ["webhook-id", "webhook-timestamp", "webhook-signature"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_sqs_destination_gets_the_event_with_headers_that_verify_and_its_pings_and_nothing_paused() {
    let (pipeline, account) = start().await;
    let subscribed = Subscribed::to_queue(&pipeline, &account, "recv").await;
    let Subscribed { user, name, queue_url, subscription } = &subscribed;
    let (id, secret) = (subscribed.id(), subscription["secret"].as_str().unwrap());
    let send = ("sqs:SendMessage", queue_arn(queue_url));
    role_for(&account, name, subscription, subscribed.external_id(), (send.0, &send.1)).await;

    pipeline.api.admin.update_profile(user).await.unwrap();
    let message = take(&account, queue_url, 1).await.remove(0);
    let body = message.body().unwrap();
    let event: Value = serde_json::from_str(body).unwrap();
    assert_eq!(event["type"], "profile.updated");
    assert_eq!(attribute(&message, "X-Webhook-Event"), "profile.updated");
    assert_eq!(attribute(&message, "X-Webhook-Delivery"), attribute(&message, "webhook-id"));
    let headers = STANDARD_HEADERS.map(|name| (name, attribute(&message, name)));
    assert!(verifies(secret, &headers, body), "the attributes verify the body: {headers:?}");
    assert!(!verifies("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &headers, body), "and only with its secret");
    let record = record_until(&pipeline, id, |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!(record.last_response_status, Some(200));
    let answered: Value = serde_json::from_str(record.last_response_body.as_deref().unwrap()).unwrap();
    assert_eq!(answered["MessageId"], message.message_id().unwrap(), "the record names the message SQS took");

    // A ping goes the same way.
    let key = pipeline.api.key(user, "write:webhooks").await;
    let ping = pipeline.api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={id}")).key(&key).send().await;
    ping.assert_status(202);
    let pinged = take(&account, queue_url, 1).await.remove(0);
    assert_eq!(attribute(&pinged, "X-Webhook-Event"), "webhook.ping");
    let headers = STANDARD_HEADERS.map(|name| (name, attribute(&pinged, name)));
    assert!(verifies(secret, &headers, pinged.body().unwrap()));
    let role = role_arn(name);
    assert_eq!(local_aws::iam::assumptions_of(&role), 1, "the session is kept for the next send");

    // Paused, skipping what comes meanwhile, it is sent nothing: the next change's delivery is skipped.
    let path = format!("/api/v1/webhooks?id={id}");
    let pause = r#"{"enabled": false, "whileDisabled": "skip"}"#;
    pipeline.api.send_json(Method::PATCH, &path, &key, pause).await.assert_status(200);
    pipeline.api.admin.update_profile(user).await.unwrap();
    let skipped = record_until(&pipeline, id, |r| r.status == DeliveryStatus::Skipped).await;
    assert_eq!(skipped.attempts, 0);
    pipeline.settled(id).await;
    assert!(account.take(queue_url).await.unwrap().is_empty(), "nothing sent while paused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fifo_queue_gets_the_subscription_as_group_and_the_delivery_as_deduplication_id() {
    let (pipeline, account) = start().await;
    let user = unique_user();
    let name = format!("fifo-{}", &user[user.len() - 8..]);
    let queue_url = account.create_queue(&format!("{name}.fifo")).await.unwrap();
    let destination = json!({"type": "aws_sqs", "queueUrl": queue_url, "roleArn": role_arn(&name)});
    let subscription = subscribe(&pipeline, &user, destination).await;
    let external_id = subscription["destination"]["externalId"].as_str().unwrap();
    role_for(&account, &name, &subscription, external_id, ("sqs:SendMessage", &queue_arn(&queue_url))).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let message = take(&account, &queue_url, 1).await.remove(0);
    let system = message.attributes().expect("the message's attributes");
    let attribute_of =
        |name| system.get(&aws_sdk_sqs::types::MessageSystemAttributeName::from(name)).map(String::as_str);
    assert_eq!(attribute_of("MessageGroupId"), subscription["id"].as_str());
    assert_eq!(attribute_of("MessageDeduplicationId"), Some(attribute(&message, "X-Webhook-Delivery")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_eventbridge_bus_gets_the_event_as_detail_with_the_headers_beside_it() {
    let (pipeline, account) = start().await;
    let user = unique_user();
    let name = format!("bus-{}", &user[user.len() - 8..]);
    // The receiver watches its bus through a rule that forwards to a queue.
    let queue_url = account.create_queue(&name).await.unwrap();
    let bus_arn = account.create_bus_to(&name, &queue_url).await.unwrap();
    let destination = json!({"type": "aws_eventbridge", "eventBusArn": bus_arn, "roleArn": role_arn(&name)});
    let subscription = subscribe(&pipeline, &user, destination).await;
    let secret = subscription["secret"].as_str().unwrap();
    let external_id = subscription["destination"]["externalId"].as_str().unwrap();
    role_for(&account, &name, &subscription, external_id, ("events:PutEvents", &bus_arn)).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let forwarded: Value = serde_json::from_str(take(&account, &queue_url, 1).await[0].body().unwrap()).unwrap();
    assert_eq!(
        (forwarded["source"].as_str(), forwarded["detail-type"].as_str()),
        (Some("career.webhooks"), Some("profile.updated"))
    );
    let detail = &forwarded["detail"];
    assert_eq!(detail["type"], "profile.updated", "the event's own fields, for rules to match");
    let envelope = &detail["webhook"];
    let body = envelope["body"].as_str().expect("the signed body");
    let headers = STANDARD_HEADERS.map(|name| (name, envelope["headers"][name].as_str().unwrap()));
    assert!(verifies(secret, &headers, body), "{envelope}");
    assert_eq!(serde_json::from_str::<Value>(body).unwrap()["id"], detail["id"]);
    assert_eq!(envelope["headers"]["X-Webhook-Event"], "profile.updated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_that_trusts_another_external_id_is_not_assumed_and_a_manual_retry_sends_once_it_does() {
    let (pipeline, account) = start().await;
    let subscribed = Subscribed::to_queue(&pipeline, &account, "trust").await;
    let Subscribed { user, name, queue_url, subscription } = &subscribed;
    let id = subscribed.id();
    let send = ("sqs:SendMessage", queue_arn(queue_url));
    let other_id = "another-subscriptions-external-id-0000000000";
    role_for(&account, name, subscription, other_id, (send.0, &send.1)).await;

    pipeline.api.admin.update_profile(user).await.unwrap();
    // Every attempt refused at the assumption, and retried until none is left.
    let record = record_until(&pipeline, id, |r| r.status == DeliveryStatus::Failed).await;
    assert_eq!(record.attempts, pipeline.settings().max_delivery_attempts, "retried as an HTTP failure is");
    let error = record.last_error.clone().unwrap();
    assert!(error.starts_with("sts:AssumeRole refused") && error.contains("trust policy"), "{error}");
    assert!(error.contains("sts:ExternalId"), "{error}");
    assert_eq!(record.last_response_status, None);
    assert!(account.take(queue_url).await.unwrap().is_empty(), "nothing reached the queue");

    // The owner fixes the trust policy and retries by hand.
    role_for(&account, name, subscription, subscribed.external_id(), (send.0, &send.1)).await;
    let key = pipeline.api.key(user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks/deliveries/retry?id={}", record.id);
    pipeline.api.request(Method::POST, &path).key(&key).send().await.assert_status(202);
    let message = take(&account, queue_url, 1).await.remove(0);
    assert_eq!(attribute(&message, "X-Webhook-Delivery"), record.id.as_str());
    record_until(&pipeline, id, |r| r.status == DeliveryStatus::Succeeded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_that_may_not_send_or_a_deleted_queue_fails_at_the_send_and_says_what_to_check() {
    let (pipeline, account) = start().await;
    let subscribed = Subscribed::to_queue(&pipeline, &account, "perm").await;
    let Subscribed { user, name, queue_url, subscription } = &subscribed;
    let (id, external_id) = (subscribed.id(), subscribed.external_id());
    // Trusted, but allowed to send only to another queue.
    let elsewhere = queue_arn(&format!("{queue_url}-elsewhere"));
    role_for(&account, name, subscription, external_id, ("sqs:SendMessage", &elsewhere)).await;

    pipeline.api.admin.update_profile(user).await.unwrap();
    let record = record_until(&pipeline, id, |r| r.attempts >= 2).await;
    let error = record.last_error.clone().unwrap();
    assert!(error.starts_with("sqs:SendMessage refused") && error.contains("permissions policy"), "{error}");
    pipeline.settled(id).await;

    // Allowed now, but the queue is gone.
    role_for(&account, name, subscription, external_id, ("sqs:SendMessage", &queue_arn(queue_url))).await;
    account.delete_queue(queue_url).await.unwrap();
    pipeline.api.admin.update_profile(user).await.unwrap();
    let missing = |r: &DeliveryRecord| r.last_error.as_deref().is_some_and(|e| e.contains("the queue does not exist"));
    let gone = record_until(&pipeline, id, |r| r.status == DeliveryStatus::Failed && missing(r)).await;
    assert_eq!(gone.attempts, pipeline.settings().max_delivery_attempts, "retried");
    assert!(gone.last_error.unwrap().starts_with("sqs:SendMessage: the queue does not exist"));
}

/// A probe goes to an AWS destination as any delivery does (contract section 20): the
/// receiver's role does not exist yet, so every attempt is refused at the assumption until the
/// subscription is disabled for failing, holding what comes meanwhile; once the receiver makes
/// the role, a probe lands on its queue, the subscription is enabled again and what it held
/// follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_probe_that_lands_on_an_sqs_destination_enables_it_and_releases_what_it_held() {
    let pipeline = Pipeline::probing(Duration::from_secs(2)).await;
    let account = ReceiverAccount::new(&career_service::clients());
    let subscribed = Subscribed::to_queue(&pipeline, &account, "probe").await;
    let Subscribed { user, name, queue_url, subscription } = &subscribed;
    let id = subscribed.id();
    let key = pipeline.api.full_key(user).await;

    pipeline.api.admin.update_profile(user).await.unwrap();
    let disabled = crate::lifecycle_probe::shown_when(&pipeline, &key, id, |s| s["enabled"] == false).await;
    assert_eq!(disabled["disabledReason"], "failing", "{disabled}");
    pipeline.api.admin.update_profile(user).await.unwrap();
    let path = format!("/api/v1/webhooks/deliveries?id={id}&status=held");
    let held = eventually("a held delivery", || async {
        let listed = pipeline.api.get(&path, &key).await.assert_status(200)["deliveries"].clone();
        listed.as_array().and_then(|d| d.first()).and_then(|d| d["id"].as_str()).map(str::to_owned).ok_or(listed)
    })
    .await;

    let send = ("sqs:SendMessage", queue_arn(queue_url));
    role_for(&account, name, subscription, subscribed.external_id(), (send.0, &send.1)).await;
    let back = crate::lifecycle_probe::shown_when(&pipeline, &key, id, |s| s["enabled"] == true).await;
    assert_eq!(back["disabledReason"], Value::Null, "{back}");
    let messages = take(&account, queue_url, 2).await;
    let probes: Vec<Value> = (messages.iter())
        .map(|m| serde_json::from_str::<Value>(m.body().unwrap()).unwrap())
        .filter(|body| body["data"]["probe"] == true)
        .collect();
    assert_eq!(probes.len(), 1, "one probe landed: {messages:?}");
    assert_eq!((&probes[0]["type"], &probes[0]["data"]["subscriptionId"]), (&json!("webhook.ping"), &json!(id)));
    let delivered: Vec<&str> = messages.iter().map(|m| attribute(m, "X-Webhook-Delivery")).collect();
    assert!(delivered.contains(&held.as_str()), "the held delivery, released: {delivered:?}");
    pipeline.idle().await;
    assert!(account.take(queue_url).await.unwrap().is_empty(), "nothing more: the first delivery had failed for good");
}

/// What `lastError` says of a refused `AssumeRole` (contract section 17), word for word.
const ASSUME_ROLE_REFUSED: &str = "sts:AssumeRole refused: check that roleArn exists and that its trust policy names \
     senderRoleArn as Principal with the condition sts:ExternalId equal to the subscription's externalId";

/// The red team's borrowing: a subscription naming a role of the deployment's own account and
/// the service's own retry lane, which the local stack's API takes. The delivery role's
/// template deny refuses the `AssumeRole`, answered as STS answers (403 `AccessDenied`), so the
/// record says what the contract says of any refused assumption.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_of_the_deployments_own_account_is_refused_with_the_contracts_sentence() {
    let (pipeline, _) = start().await;
    let user = unique_user();
    let own_role = format!("arn:aws:iam::{}:role/borrowed", local_aws::template::ACCOUNT);
    let own_queue = pipeline.settings().retry_queue_url.clone().expect("the retry lane");
    let subscription =
        subscribe(&pipeline, &user, json!({"type": "aws_sqs", "queueUrl": own_queue, "roleArn": own_role})).await;
    let id = subscription["id"].as_str().unwrap();

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let record = record_until(&pipeline, id, |r| r.status == DeliveryStatus::Failed).await;
    assert_eq!(record.last_error.as_deref(), Some(ASSUME_ROLE_REFUSED));
    assert_eq!(record.last_response_status, None);
    let by_its_own_policy = |(function, action, resource): &local_aws::iam::Denial| {
        function == local_aws::template::function::DELIVER && action == "sts:AssumeRole" && resource == &own_role
    };
    assert!(local_aws::iam::denials().iter().any(by_its_own_policy), "refused by the delivery role's deny");
    assert_eq!(local_aws::iam::assumptions_of(&own_role), 0);
}

/// Waits for at least `count` entries on the receiver's Custom Event Bus (which the emulator
/// retains, as the bus does) and reads them.
pub(crate) async fn landed(bus_arn: &str, count: usize) -> Vec<local_aws::emulators::HeldEvent> {
    let moto = &career_service::services().sqs_endpoint;
    eventually(format!("{count} event(s) on the receiver's Custom Event Bus"), || async {
        let held = local_aws::emulators::held_events(moto, bus_arn).await.map_err(|err| format!("{err:#}"))?;
        match held.len() >= count {
            true => Ok(held),
            false => Err(format!("{} so far", held.len())),
        }
    })
    .await
}

/// A receiver's Custom Event Bus `busv2-…` for a new user's subscription, and its ARN.
async fn on_custom_bus(pipeline: &Pipeline, account: &ReceiverAccount) -> (String, String, String, Value) {
    let user = unique_user();
    let name = format!("busv2-{}", &user[user.len() - 8..]);
    let bus_arn = account.create_event_bus_v2(&name).await.expect("the receiver's Custom Event Bus");
    let destination = json!({"type": "aws_eventbus", "eventBusArn": bus_arn, "roleArn": role_arn(&name)});
    let subscription = subscribe(pipeline, &user, destination).await;
    (user, name, bus_arn, subscription)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_custom_event_bus_gets_the_event_in_the_subscriptions_group_deduplicated_by_its_delivery_id() {
    let (pipeline, account) = start().await;
    let (user, name, bus_arn, subscription) = on_custom_bus(&pipeline, &account).await;
    let (id, secret) = (subscription["id"].as_str().unwrap(), subscription["secret"].as_str().unwrap());
    let external_id = subscription["destination"]["externalId"].as_str().unwrap();
    role_for(&account, &name, &subscription, external_id, ("events:PutEvents", &bus_arn)).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let held = landed(&bus_arn, 1).await.remove(0);
    assert_eq!((held.source.as_str(), held.detail_type.as_str()), ("career.webhooks", "profile.updated"));
    let detail: Value = serde_json::from_str(held.detail.as_deref().expect("a detail")).unwrap();
    assert_eq!(detail["type"], "profile.updated", "the event's own fields, as on an EventBridge bus");
    let envelope = &detail["webhook"];
    let body = envelope["body"].as_str().expect("the signed body");
    let headers = STANDARD_HEADERS.map(|name| (name, envelope["headers"][name].as_str().unwrap()));
    assert!(verifies(secret, &headers, body), "{envelope}");
    assert_eq!(held.event_group_id.as_deref(), Some(id), "the subscription is the event group");
    let delivery = envelope["headers"]["X-Webhook-Delivery"].as_str().unwrap();
    assert_eq!(held.deduplication_id.as_deref(), Some(delivery), "the delivery id deduplicates");
    let record = record_until(&pipeline, id, |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!((record.id.as_str(), record.last_response_status), (delivery, Some(200)));
    let answered: Value = serde_json::from_str(record.last_response_body.as_deref().unwrap()).unwrap();
    assert_eq!(answered, json!({"FailedEntryCount": 0, "EventId": held.event_id}), "the record names the bus's event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_custom_event_bus_that_does_not_trust_the_sender_may_not_put_or_is_gone_fails_with_the_contracts_sentences() {
    let (pipeline, account) = start().await;
    let (user, name, bus_arn, subscription) = on_custom_bus(&pipeline, &account).await;
    let id = subscription["id"].as_str().unwrap();
    let external_id = subscription["destination"]["externalId"].as_str().unwrap();
    // Trusting another role of the deployment's account, not the sender.
    let other = format!("arn:aws:iam::{}:role/someone-else", local_aws::template::ACCOUNT);
    let put = permissions_policy("events:PutEvents", &bus_arn);
    account.replace_role(&name, &trust_policy(&other, external_id), &put).await.unwrap();

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let record = record_until(&pipeline, id, |r| r.status == DeliveryStatus::Failed).await;
    assert_eq!(record.last_error.as_deref(), Some(ASSUME_ROLE_REFUSED));
    assert_eq!(record.last_response_status, None);

    // Trusted now, but allowed to put only on another bus.
    let elsewhere = bus_arn.replace("/busv2-", "/elsewhere-");
    role_for(&account, &name, &subscription, external_id, ("events:PutEvents", &elsewhere)).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let refused = |r: &DeliveryRecord| r.last_error.as_deref().is_some_and(|e| e.starts_with("events:PutEvents"));
    let record = record_until(&pipeline, id, refused).await;
    assert_eq!(
        record.last_error.as_deref(),
        Some("events:PutEvents refused: check that the role's permissions policy allows events:PutEvents on the bus")
    );
    pipeline.settled(id).await;
    assert!(landed_now(&bus_arn).await.is_empty(), "nothing reached the bus");

    // Allowed now, but the bus is gone.
    role_for(&account, &name, &subscription, external_id, ("events:PutEvents", &bus_arn)).await;
    account.delete_event_bus_v2(&bus_arn).await.unwrap();
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let missing = |r: &DeliveryRecord| r.last_error.as_deref().is_some_and(|e| e.contains("does not exist"));
    let gone = record_until(&pipeline, id, missing).await;
    assert_eq!(gone.last_error.as_deref(), Some("events:PutEvents: the event bus does not exist (check eventBusArn)"));
}

/// What the receiver's Custom Event Bus holds now.
async fn landed_now(bus_arn: &str) -> Vec<local_aws::emulators::HeldEvent> {
    local_aws::emulators::held_events(&career_service::services().sqs_endpoint, bus_arn).await.unwrap()
}

/// `careerctl demo aws-receiver --eventbus` (receiving-webhooks.md's walk-through): made again,
/// it is the same bus; given the subscription's two values, its role lets a delivery land.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_demo_receivers_custom_event_bus_is_made_once_and_takes_the_subscriptions_deliveries() {
    use careerctl::aws_receiver::{set_up, Kind};
    let (pipeline, _) = start().await;
    let clients = career_service::clients();
    let user = unique_user();
    let name = format!("demo-{}", &user[user.len() - 8..]);
    let made = set_up(&clients, &name, Kind::EventBus, None).await.unwrap();
    let again = set_up(&clients, &name, Kind::EventBus, None).await.unwrap();
    assert_eq!(made["destination"], again["destination"], "made again, the same bus");
    let subscription = subscribe(&pipeline, &user, made["destination"].clone()).await;
    let text = |field: &str| subscription["destination"][field].as_str().unwrap().to_owned();
    set_up(&clients, &name, Kind::EventBus, Some((text("senderRoleArn"), text("externalId")))).await.unwrap();

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let held = landed(&text("eventBusArn"), 1).await.remove(0);
    assert_eq!(held.event_group_id, subscription["id"].as_str().map(str::to_owned));
}
