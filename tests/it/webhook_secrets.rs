//! Webhook secrets (contract sections 5, 10, 11 and 16) against DynamoDB Local and moto's KMS:
//! rotation through the webhooks function (every answer, scopes, other users, what a
//! refused rotation leaves), secrets and Ed25519 private keys sealed at rest (nothing
//! readable in a raw table dump, the public keys in clear those of the sealed ones), at most
//! one KMS call per cold start, and subscriptions stored before secrets were sealed.

use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use career_core::clock::Timestamp;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::ids;
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::WebhookTable;
use career_core::webhooks::rotation::SigningSecrets;
use career_core::webhooks::signing::{sign_standard, verify_hex};
use career_core::webhooks::WebhookSecret;
use career_service::calls::Calls;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::typed;
use career_service::DEADLINE;
use career_service::{clients, clients_logging_kms, dynamodb, sink_url, unique_user, Answer, Api};
use lambda_http::http::Method;
use serde_json::{json, Value};

const PATH: &str = "/api/v1/webhooks";
const ROTATE: &str = "/api/v1/webhooks/rotate-secret";

async fn create(api: &Api, key: &str, url: &str) -> Value {
    let body = json!({"url": url, "events": ["profile.updated"]}).to_string();
    api.send_json(Method::POST, PATH, key, &body).await.assert_status(201).clone()
}

async fn rotate(api: &Api, key: &str, id: &str, body: Option<&str>) -> Answer {
    let request = api.request(Method::POST, &format!("{ROTATE}?id={id}")).key(key);
    match body {
        Some(body) => request.json(body).send().await,
        None => request.send().await,
    }
}

/// The subscription's item exactly as the table holds it, attributes in name order.
async fn raw_item(api: &Api, user: &str, id: &str) -> Value {
    let item = dynamodb()
        .get_item()
        .table_name(&api.settings.tables.webhooks)
        .key("userId", aws_sdk_dynamodb::types::AttributeValue::S(user.into()))
        .key("subscriptionId", aws_sdk_dynamodb::types::AttributeValue::S(id.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap_or_default();
    format!("{:?}", item.into_iter().collect::<std::collections::BTreeMap<_, _>>()).into()
}

/// The secrets a delivery to this subscription is signed with now.
async fn signing_secrets(settings: &career_core::config::Settings, user: &str, id: &str) -> SigningSecrets {
    let stored =
        WebhookTable::new(dynamodb(), &settings.tables.webhooks).get(&typed(user), &typed(id)).await.unwrap().unwrap();
    Sealer::new(&clients(), settings).unwrap().open(&stored).await.unwrap()
}

fn unix_now() -> u64 {
    Timestamp::now().unix_seconds()
}

#[tokio::test]
async fn a_rotation_returns_the_new_secret_once_and_keeps_the_old_one_for_the_grace_period() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let created = create(&api, &key, &format!("{}/a", sink_url())).await;
    let (id, first) = (created["id"].as_str().unwrap(), created["secret"].as_str().unwrap());

    let before = unix_now();
    let answer = rotate(&api, &key, id, None).await;
    let body = answer.assert_status(200).clone();
    let mut fields: Vec<_> = body.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    let expected = [
        "createdAt",
        "disabledAt",
        "disabledReason",
        "enabled",
        "events",
        "id",
        "identityToken",
        "maxDeliveriesPerSecond",
        "previousPublicKey",
        "previousSecretExpiresAt",
        "publicKey",
        "secret",
        "traceContext",
        "url",
        "whileDisabled",
    ];
    assert_eq!(fields, expected, "{body}");
    for field in ["id", "url", "events", "createdAt", "enabled", "disabledAt", "disabledReason", "traceContext"] {
        assert_eq!(body[field], created[field], "{field}");
    }
    let second = body["secret"].as_str().unwrap();
    assert!(WebhookSecret::parse(second).is_some_and(|s| s.expose().len() == 50), "{second}");
    assert_ne!(second, first);
    let expires: Timestamp = body["previousSecretExpiresAt"].as_str().unwrap().parse().unwrap();
    assert!((before + 86_400..=unix_now() + 86_400).contains(&expires.unix_seconds()), "one day by default: {body}");

    let secrets = signing_secrets(&api.settings, &user, id).await;
    let active: Vec<&str> = secrets.active_at(Timestamp::now()).secrets.iter().map(|s| s.expose()).collect();
    assert_eq!(active, [second, first], "both sign, the new one first");
    assert_eq!(secrets.active_at(expires).secrets.len(), 1, "the old one stops at previousSecretExpiresAt");

    // A rotation during the grace period replaces the previous secret by the current one.
    let third = rotate(&api, &key, id, Some(r#"{"gracePeriodSeconds": 60}"#)).await;
    let third = third.assert_status(200)["secret"].as_str().unwrap().to_owned();
    let secrets = signing_secrets(&api.settings, &user, id).await;
    let active: Vec<&str> = secrets.active_at(Timestamp::now()).secrets.iter().map(|s| s.expose()).collect();
    assert_eq!(active, [third.as_str(), second]);

    // Without a grace period only the new secret signs.
    let fourth = rotate(&api, &key, id, Some(r#"{"gracePeriodSeconds": 0}"#)).await;
    assert_eq!(fourth.json["previousSecretExpiresAt"], Value::Null);
    let secrets = signing_secrets(&api.settings, &user, id).await;
    let active: Vec<&str> = secrets.active_at(Timestamp::now()).secrets.iter().map(|s| s.expose()).collect();
    assert_eq!(active, [fourth.json["secret"].as_str().unwrap()]);

    // Neither the list nor any answer but the rotation's shows a secret.
    let listed = api.get(PATH, &key).await.json.to_string();
    for secret in [first, second, third.as_str(), fourth.json["secret"].as_str().unwrap()] {
        assert!(!listed.contains(secret), "{listed}");
    }
    assert!(!listed.contains("whsec_") && !listed.contains("previousSecret"), "{listed}");
}

#[tokio::test]
async fn a_refused_rotation_changes_nothing() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let id = create(&api, &key, &format!("{}/a", sink_url())).await["id"].as_str().unwrap().to_owned();
    let stored = raw_item(&api, &user, &id).await;

    rotate(&api, &key, "", Some("{}")).await.assert_error(400, "webhooks.missing_subscription_id");
    for grace in ["-1", "604801", "86400.5", "\"86400\"", "false", "[1]", "{}"] {
        let body = format!(r#"{{"gracePeriodSeconds": {grace}}}"#);
        rotate(&api, &key, &id, Some(&body)).await.assert_error(400, "webhooks.invalid_grace_period");
    }
    for broken in ["{", "[]", "null", "\"x\""] {
        rotate(&api, &key, &id, Some(broken)).await.assert_error(400, "request.invalid_json");
    }
    let text = api.request(Method::POST, &format!("{ROTATE}?id={id}")).key(&key).header("content-type", "text/plain");
    text.body(b"{}").send().await.assert_error(400, "request.unsupported_media_type");
    let reader = api.key(&user, "read:webhooks").await;
    let forbidden = rotate(&api, &reader, &id, None).await;
    forbidden.assert_error(403, "auth.forbidden");
    assert_eq!(
        forbidden.header("www-authenticate"),
        Some(r#"Bearer realm="api", error="insufficient_scope", scope="write:webhooks""#)
    );
    rotate(&api, "cak_nope", &id, None).await.assert_error(401, "auth.unauthorized");
    api.request(Method::GET, &format!("{ROTATE}?id={id}"))
        .key(&key)
        .send()
        .await
        .assert_error(405, "method_not_allowed");

    assert_eq!(raw_item(&api, &user, &id).await, stored, "the stored secrets did not change");
}

#[tokio::test]
async fn another_users_subscription_is_not_found_and_keeps_its_secret() {
    let api = Api::loopback();
    let (owner, other) = (unique_user(), unique_user());
    let (owner_key, other_key) = (api.full_key(&owner).await, api.full_key(&other).await);
    let id = create(&api, &owner_key, &format!("{}/a", sink_url())).await["id"].as_str().unwrap().to_owned();
    let stored = raw_item(&api, &owner, &id).await;

    rotate(&api, &other_key, &id, None).await.assert_error(404, "webhooks.not_found");
    for unknown in [ids::new_id(ids::SUBSCRIPTION), "whk_nonsense".into(), "%23count".into()] {
        rotate(&api, &owner_key, &unknown, None).await.assert_error(404, "webhooks.not_found");
    }
    assert_eq!(raw_item(&api, &owner, &id).await, stored);

    api.request(Method::DELETE, &format!("{PATH}?id={id}")).key(&owner_key).send().await.assert_status(200);
    rotate(&api, &owner_key, &id, None).await.assert_error(404, "webhooks.not_found");
    assert_eq!(raw_item(&api, &owner, &id).await, json!("{}"), "a rotation does not bring it back");
}

/// Thirty rotations of one subscription at the same moment: each applies (200), none answers
/// 500 (contract section 12), and the pair left is two of the secrets they issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_rotations_leave_one_consistent_pair() {
    let api = Arc::new(Api::loopback());
    let user = unique_user();
    let key = api.full_key(&user).await;
    let created = create(&api, &key, &format!("{}/a", sink_url())).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (api, key, id) = (api.clone(), key.clone(), id.clone());
            tokio::spawn(async move { rotate(&api, &key, &id, None).await })
        })
        .collect();
    let mut issued = vec![created["secret"].as_str().unwrap().to_owned()];
    for task in tasks {
        issued.push(task.await.unwrap().assert_status(200)["secret"].as_str().unwrap().to_owned());
    }
    let secrets = signing_secrets(&api.settings, &user, &id).await;
    let active: Vec<String> =
        secrets.active_at(Timestamp::now()).secrets.iter().map(|s| s.expose().to_owned()).collect();
    assert_eq!(active.len(), 2);
    assert!(active.iter().all(|secret| issued.contains(secret)), "{active:?} among {issued:?}");
    assert_ne!(active[0], active[1]);
    assert_ne!(active[0], issued[0], "the current secret is one of the rotations'");
}

#[tokio::test]
async fn a_raw_table_dump_holds_no_secret() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let (mut secrets, mut seeds) = (Vec::new(), Vec::new());
    for n in 0..3 {
        let body =
            json!({"url": format!("{}/{n}", sink_url()), "events": ["profile.updated"], "asymmetricSigning": n > 0});
        let created = api.send_json(Method::POST, PATH, &key, &body.to_string()).await.assert_status(201).clone();
        secrets.push(created["secret"].as_str().unwrap().to_owned());
        let id = created["id"].as_str().unwrap();
        let rotated = rotate(&api, &key, id, None).await;
        secrets.push(rotated.json["secret"].as_str().unwrap().to_owned());
        // The private keys, current and previous, as only the sealed secrets hold them.
        let opened = signing_secrets(&api.settings, &user, id).await;
        for key in opened.active_at(Timestamp::now()).keys {
            seeds.push(serde_json::to_value(key).unwrap().as_str().unwrap().to_owned());
        }
    }
    assert_eq!(seeds.len(), 4, "two subscriptions with a key pair, each rotated with a grace period");
    let mut dump = String::new();
    let mut start = None;
    loop {
        let page = dynamodb()
            .scan()
            .table_name(&api.settings.tables.webhooks)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        dump.push_str(&format!("{:?}", page.items()));
        start = page.last_evaluated_key;
        if start.is_none() {
            break;
        }
    }
    assert!(dump.contains(&user) && dump.contains("sealedSecrets"), "the dump holds the subscriptions");
    assert!(!dump.contains("whsec_"), "{dump}");
    for secret in &secrets {
        let parsed = WebhookSecret::parse(secret).unwrap();
        let encoded = &secret["whsec_".len()..];
        for form in [encoded.to_owned(), hex(parsed.key()), format!("{:?}", parsed.key())] {
            assert!(!dump.contains(&form), "{form} is readable in the dump");
        }
    }
    assert!(dump.contains("publicKeys") && dump.contains("whpk_"), "the public keys are in clear");
    for seed in &seeds {
        let bytes = STANDARD.decode(seed).unwrap();
        for form in [seed.clone(), hex(&bytes), format!("{bytes:?}")] {
            assert!(!dump.contains(&form), "a private key is readable in the dump: {form}");
        }
    }
}

/// The public keys every read shows are those of the private keys sealed beside them, and a
/// rotation gives the new key pair the grace period of the new secret.
#[tokio::test]
async fn the_public_keys_shown_are_those_of_the_sealed_private_keys() {
    let api = Api::loopback();
    let user = unique_user();
    let key = api.full_key(&user).await;
    let body = json!({"url": format!("{}/a", sink_url()), "events": ["profile.updated"], "asymmetricSigning": true});
    let created = api.send_json(Method::POST, PATH, &key, &body.to_string()).await.assert_status(201).clone();
    let id = created["id"].as_str().unwrap();
    let public = |secrets: &SigningSecrets| -> Vec<String> {
        secrets.active_at(Timestamp::now()).keys.iter().map(|key| key.public_key().to_string()).collect()
    };
    assert_eq!(public(&signing_secrets(&api.settings, &user, id).await), [created["publicKey"].as_str().unwrap()]);

    let rotated = rotate(&api, &key, id, Some(r#"{"gracePeriodSeconds": 60}"#)).await;
    let rotated = rotated.assert_status(200);
    let secrets = signing_secrets(&api.settings, &user, id).await;
    let expected = [rotated["publicKey"].as_str().unwrap(), rotated["previousPublicKey"].as_str().unwrap()];
    assert_eq!(public(&secrets), expected, "the new key first");
    assert_eq!(expected[1], created["publicKey"].as_str().unwrap());
    let expires: Timestamp = rotated["previousSecretExpiresAt"].as_str().unwrap().parse().unwrap();
    let after = secrets.active_at(expires);
    assert_eq!((after.secrets.len(), after.keys.len()), (1, 1), "the old key stops with the old secret");

    let off = api.send_json(Method::PATCH, &format!("{PATH}?id={id}"), &key, r#"{"asymmetricSigning": false}"#).await;
    off.assert_status(200);
    let secrets = signing_secrets(&api.settings, &user, id).await;
    assert_eq!((secrets.current_key.as_ref(), secrets.active_at(Timestamp::now()).keys.len()), (None, 0));
    assert_eq!(secrets.active_at(Timestamp::now()).secrets.len(), 2, "the secrets and their grace period stay");
}

/// PATCHes that turn asymmetric signing on and off, racing rotations: every request succeeds
/// and the public keys left in clear are those of the sealed private keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_switches_and_rotations_keep_the_public_keys_those_of_the_sealed_ones() {
    let api = Arc::new(Api::loopback());
    let user = unique_user();
    let key = api.full_key(&user).await;
    let created = create(&api, &key, &format!("{}/a", sink_url())).await;
    let id = created["id"].as_str().unwrap().to_owned();
    // As many as the concurrent rotations above: each retries a few times after a conflict.
    let tasks: Vec<_> = (0..4)
        .map(|n| {
            let (api, key, id) = (api.clone(), key.clone(), id.clone());
            tokio::spawn(async move {
                match n % 3 {
                    0 => rotate(&api, &key, &id, None).await,
                    on => {
                        let body = json!({"asymmetricSigning": on == 1}).to_string();
                        api.send_json(Method::PATCH, &format!("{PATH}?id={id}"), &key, &body).await
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().assert_status(200);
    }
    let listed = api.get(PATH, &key).await.assert_status(200)["webhooks"][0].clone();
    let secrets = signing_secrets(&api.settings, &user, &id).await;
    let sealed: Vec<String> =
        secrets.active_at(Timestamp::now()).keys.iter().map(|key| key.public_key().to_string()).collect();
    let shown: Vec<&str> =
        ["publicKey", "previousPublicKey"].iter().filter_map(|field| listed[*field].as_str()).collect();
    assert_eq!(sealed, shown, "{listed}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn the_webhooks_function_calls_kms_once_per_cold_start_and_only_when_it_needs_a_secret() {
    let pipeline = Pipeline::start(false).await; // a webhooks table of its own: no data key yet
    let user = unique_user();
    let calls = Calls::default();
    let cold = Api::with_clients(clients_logging_kms(&calls), |s| *s = pipeline.settings().clone());
    let key = cold.full_key(&user).await;
    cold.get(PATH, &key).await.assert_status(200);
    assert!(calls.is_empty(), "listing needs no key: {:?}", calls.since(0));
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(create(&cold, &key, &format!("{}/{n}", sink_url())).await["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        rotate(&cold, &key, id, None).await.assert_status(200);
    }
    assert_eq!(calls.since(0), ["GenerateDataKey"], "the first use creates the data key, once");

    let calls = Calls::default();
    let next_cold_start = Api::with_clients(clients_logging_kms(&calls), |s| *s = pipeline.settings().clone());
    for id in &ids {
        rotate(&next_cold_start, &key, id, Some(r#"{"gracePeriodSeconds": 0}"#)).await.assert_status(200);
    }
    create(&next_cold_start, &key, &format!("{}/9", sink_url())).await;
    assert_eq!(calls.since(0), ["Decrypt"], "a later cold start decrypts the stored data key, once");
}

fn sqs_message(message: &DeliveryMessage) -> SqsMessage {
    let mut sqs_message = SqsMessage::default();
    sqs_message.message_id = Some(message.delivery_id.to_string());
    sqs_message.receipt_handle = Some("unused: every delivery succeeds".into());
    sqs_message.body = Some(serde_json::to_string(message).unwrap());
    sqs_message
}

fn profile_event(user: &str) -> Event {
    let data =
        career_core::events::EventData::ProfileUpdated { user_id: typed(user), profile_id: "prf_1".parse().unwrap() };
    Event { id: career_core::ids::EventId::generate(), created_at: career_core::clock::Timestamp::now(), data }
}

#[tokio::test]
async fn the_delivery_function_calls_kms_once_per_cold_start() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let mut subscriptions = Vec::new();
    let mut secrets = Vec::new();
    for _ in 0..3 {
        let (id, secret) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
        subscriptions.push(id);
        secrets.push(secret);
    }
    // Two batches of three deliveries each (a batch handled twice would be stale copies the
    // second time, dropped unsent).
    let batch = || {
        let mut batch = SqsEvent::default();
        let event = profile_event(&user);
        batch.records = subscriptions
            .iter()
            .map(|id| sqs_message(&DeliveryMessage::new(&event, &typed(&user), &typed(id))))
            .collect();
        batch
    };
    let calls = Calls::default();
    let deliver = career_deliver::Deps::new(
        &career_service::acting_as(
            local_aws::template::function::DELIVER,
            pipeline.settings(),
            &clients_logging_kms(&calls),
        ),
        &career_service::function_settings(local_aws::template::function::DELIVER, pipeline.settings()),
    )
    .unwrap();
    assert!(career_deliver::handle(&deliver, batch()).await.batch_item_failures.is_empty());
    assert!(career_deliver::handle(&deliver, batch()).await.batch_item_failures.is_empty());
    assert_eq!(calls.since(0), ["Decrypt"], "six deliveries, one KMS call");
    let received = receiver.wait_for(6, DEADLINE).await;
    for delivery in &received {
        assert!(secrets.iter().any(|s| verify_hex(s, &delivery.body, delivery.header("x-webhook-signature"))));
        assert!(secrets.iter().any(|s| standard_signature_verifies(s, delivery)));
    }
}

/// With asymmetric signing on, a delivery makes the same AWS calls as without: the key pair is
/// sealed in the item every delivery reads anyway, so no KMS call once warm and no other read.
#[tokio::test]
async fn a_delivery_signed_with_a_key_pair_makes_the_same_calls_as_one_without() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let mut subscriptions = Vec::new();
    for asymmetric in [false, true] {
        let body = json!({"url": receiver.url, "events": ["profile.updated"], "asymmetricSigning": asymmetric});
        let created = pipeline.api.send_json(Method::POST, PATH, &key, &body.to_string()).await;
        subscriptions.push(created.assert_status(201)["id"].as_str().unwrap().to_owned());
    }
    let (dynamodb_calls, kms_calls) = (Calls::default(), Calls::default());
    let kms = clients_logging_kms(&kms_calls).kms().clone();
    let clients = career_service::clients_logging_dynamodb(&dynamodb_calls).with_kms(kms);
    let deliver = career_deliver::Deps::new(&clients, pipeline.settings()).unwrap();
    let deliver_to = |id: &str| {
        let mut batch = SqsEvent::default();
        batch.records = vec![sqs_message(&DeliveryMessage::new(&profile_event(&user), &typed(&user), &typed(id)))];
        batch
    };
    // The instance's first delivery opens the data key; each subscription's first also records
    // that its receiver answers fast (contract section 18).
    for id in &subscriptions {
        assert!(career_deliver::handle(&deliver, deliver_to(id)).await.batch_item_failures.is_empty());
    }
    assert_eq!(kms_calls.since(0), ["Decrypt"]);
    let mut per_delivery = Vec::new();
    for id in [&subscriptions[0], &subscriptions[1], &subscriptions[0], &subscriptions[1]] {
        let (dynamodb_mark, kms_mark) = (dynamodb_calls.len(), kms_calls.len());
        assert!(career_deliver::handle(&deliver, deliver_to(id)).await.batch_item_failures.is_empty());
        per_delivery.push((dynamodb_calls.since(dynamodb_mark), kms_calls.since(kms_mark)));
    }
    assert!(per_delivery.iter().all(|calls| calls == &per_delivery[0]), "{per_delivery:?}");
    assert!(per_delivery[0].1.is_empty(), "no KMS call once warm: {per_delivery:?}");
    let received = receiver.wait_for(6, DEADLINE).await;
    let v1a = received.iter().filter(|r| r.header("webhook-signature").contains(" v1a,")).count();
    assert_eq!(v1a, 3, "the deliveries to the subscription with a key pair carry a v1a entry");
}

/// The Standard Webhooks rule, written out: any `v1,` entry equals the signature of
/// `{webhook-id}.{webhook-timestamp}.{body}` keyed with the secret's decoded bytes.
fn standard_signature_verifies(secret: &str, delivery: &Received) -> bool {
    let key = WebhookSecret::parse(secret).unwrap();
    let timestamp: u64 = delivery.header("webhook-timestamp").parse().unwrap();
    let expected = sign_standard(key.key(), delivery.header("webhook-id"), timestamp, &delivery.body);
    delivery.header("webhook-signature").split(' ').any(|entry| entry == expected)
}

/// A subscription as the seed stored it: the secret in plain text, 43 base64url characters.
async fn seed_era_subscription(settings: &career_core::config::Settings, user: &str, url: &str) -> (String, String) {
    let id = ids::new_id(ids::SUBSCRIPTION);
    let secret = career_core::random::random_token("whsec_");
    let s = |text: &str| aws_sdk_dynamodb::types::AttributeValue::S(text.into());
    dynamodb()
        .put_item()
        .table_name(&settings.tables.webhooks)
        .item("userId", s(user))
        .item("subscriptionId", s(&id))
        .item("url", s(url))
        .item("events", aws_sdk_dynamodb::types::AttributeValue::L(vec![s("profile.updated")]))
        .item("secret", s(&secret))
        .item("createdAt", s(&Timestamp::now().to_string()))
        .send()
        .await
        .unwrap();
    (id, secret)
}

#[tokio::test]
async fn subscriptions_stored_before_sealing_keep_their_secret_and_get_it_sealed() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let (old_id, old_secret) = seed_era_subscription(pipeline.settings(), &user, &receiver.url).await;
    let (other_id, other_secret) = seed_era_subscription(pipeline.settings(), &user, &receiver.url).await;
    let deliver = career_service::deliver_instance(pipeline.settings());
    let deliver_to = |id: String| {
        let mut batch = SqsEvent::default();
        batch.records.push(sqs_message(&DeliveryMessage::new(&profile_event(&user), &typed(&user), &typed(&id))));
        career_deliver::handle(&deliver, batch)
    };

    // Before the migration: delivered and verifiable with the secret as the receiver knows it.
    assert!(deliver_to(old_id.clone()).await.batch_item_failures.is_empty());
    let first = receiver.wait_for(1, DEADLINE).await.remove(0);
    assert!(verify_hex(&old_secret, &first.body, first.header("x-webhook-signature")));
    let key = STANDARD.encode(WebhookSecret::parse(&old_secret).unwrap().key());
    assert!(standard_signature_verifies(&format!("whsec_{key}"), &first), "keyed with the 32 bytes it encodes");
    assert!(pipeline.api.get(PATH, &pipeline.api.key(&user, "read:webhooks").await).await.status.is_success());

    // The migration seals both, once; the secrets themselves do not change.
    let admin = &pipeline.api.admin;
    let sealer = Sealer::new(&clients(), pipeline.settings()).unwrap();
    assert_eq!(admin.seal_plain_secrets(&sealer).await.unwrap().sealed, 2);
    assert_eq!(admin.seal_plain_secrets(&sealer).await.unwrap().sealed, 0);
    for (id, secret) in [(&old_id, &old_secret), (&other_id, &other_secret)] {
        let item = raw_item(&pipeline.api, &user, id).await.to_string();
        assert!(!item.contains(secret.as_str()) && item.contains("sealedSecrets"), "{item}");
    }
    assert!(deliver_to(old_id.clone()).await.batch_item_failures.is_empty());
    let second = receiver.wait_for(2, DEADLINE).await.remove(1);
    assert!(verify_hex(&old_secret, &second.body, second.header("x-webhook-signature")));

    // A rotation of a subscription of that era keeps its secret for the grace period.
    let user_key = pipeline.api.key(&user, "write:webhooks").await;
    let rotated = rotate(&pipeline.api, &user_key, &other_id, None).await;
    let new_secret = rotated.assert_status(200)["secret"].as_str().unwrap().to_owned();
    assert!(deliver_to(other_id.clone()).await.batch_item_failures.is_empty());
    let third = receiver.wait_for(3, DEADLINE).await.remove(2);
    let signatures: Vec<&str> = third.header("x-webhook-signature").split(' ').collect();
    assert_eq!(signatures.len(), 2);
    assert!(verify_hex(&new_secret, &third.body, signatures[0]));
    assert!(verify_hex(&other_secret, &third.body, signatures[1]));
}

/// Turning asymmetric signing on for a subscription whose secret is still in plain text seals
/// the secret with the new private key, in one conditional write; the secret itself stays.
#[tokio::test]
async fn asymmetric_signing_on_a_subscription_of_before_sealing_seals_its_secret_with_the_key() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let (id, secret) = seed_era_subscription(pipeline.settings(), &user, &receiver.url).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("{PATH}?id={id}");
    let on = pipeline.api.send_json(Method::PATCH, &path, &key, r#"{"asymmetricSigning": true}"#).await;
    let public_key = on.assert_status(200)["publicKey"].as_str().unwrap().to_owned();
    let item = raw_item(&pipeline.api, &user, &id).await.to_string();
    assert!(!item.contains(secret.as_str()) && item.contains("sealedSecrets"), "{item}");
    let secrets = signing_secrets(pipeline.settings(), &user, &id).await;
    assert_eq!(secrets.current.expose(), secret, "the secret stays");
    assert_eq!(secrets.current_key.map(|key| key.public_key().to_string()), Some(public_key));

    let deliver = career_service::deliver_instance(pipeline.settings());
    let mut batch = SqsEvent::default();
    batch.records.push(sqs_message(&DeliveryMessage::new(&profile_event(&user), &typed(&user), &typed(&id))));
    assert!(career_deliver::handle(&deliver, batch).await.batch_item_failures.is_empty());
    let delivery = receiver.wait_for(1, DEADLINE).await.remove(0);
    assert!(verify_hex(&secret, &delivery.body, delivery.header("x-webhook-signature")));
    assert!(delivery.header("webhook-signature").contains(" v1a,"), "{}", delivery.header("webhook-signature"));
}
