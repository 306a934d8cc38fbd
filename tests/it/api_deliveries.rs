//! The delivery log's operations (contract section 9) through the webhooks function against
//! DynamoDB Local and the SQS emulator: the list (status filter, pages, cursors), manual
//! retry, ping and enable, with every status and code, the scopes, and other users' ids.

use std::time::Duration;

use career_core::delivery::attempt::{Answer, Outcome, SendFailure};
use career_core::delivery::log::{AttemptRecord, DeliveryStatus};
use career_core::delivery::DeliveryMessage;
use career_core::events::{Event, EventKind};
use career_core::store::deliveries::{DeliveryTable, RecordKey};
use career_core::store::webhooks::{Replacing, WebhookTable};
use career_core::webhooks::{DisabledReason, Health, SubscriptionChanges, WhileDisabled};
use career_core::{clock, ids};
use career_service::typed;
use career_service::{assert_rfc3339_utc, dynamodb, sink_url, sqs, unique_user, Answer as Reply, Api};
use lambda_http::http::Method;
use serde_json::{json, Value};

/// A user with a key of all scopes and one subscription (to the test binary's loopback
/// receiver); its id and secret.
async fn subscriber(api: &Api) -> (String, String, String, String) {
    let user = unique_user();
    let key = api.full_key(&user).await;
    let body = json!({"url": sink_url(), "events": ["profile.updated"]}).to_string();
    let created = api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await;
    let created = created.assert_status(201);
    let (id, secret) = (created["id"].as_str().unwrap().to_owned(), created["secret"].as_str().unwrap().to_owned());
    (user, key, id, secret)
}

fn deliveries(api: &Api) -> DeliveryTable {
    DeliveryTable::new(dynamodb(), &api.settings.tables.deliveries)
}

fn profile_event(user: &str) -> Event {
    let data =
        career_core::events::EventData::ProfileUpdated { user_id: typed(user), profile_id: "prf_1".parse().unwrap() };
    Event { id: career_core::ids::EventId::generate(), created_at: career_core::clock::Timestamp::now(), data }
}

/// Records one attempt of a new delivery for the subscription, as the delivery function
/// does; its delivery id.
async fn seed(api: &Api, user: &str, subscription: &str, outcome: Outcome, retry_in: Option<Duration>) -> String {
    // Distinct milliseconds, so creation order is id order.
    tokio::time::sleep(Duration::from_millis(3)).await;
    let message = DeliveryMessage::new(&profile_event(user), &typed(user), &typed(subscription));
    let now = clock::Timestamp::now();
    let attempt = match (&outcome, retry_in) {
        (Outcome::Delivered(_), _) => AttemptRecord::succeeded(&outcome, now),
        (_, wait) => AttemptRecord::failed(&outcome, wait.map(|wait| now + wait), now),
    };
    deliveries(api).record_attempt(&message, &message.body(), &attempt, None).await.expect("attempt recorded");
    message.delivery_id.to_string()
}

fn rejected(status: u16, body: &str) -> Outcome {
    Outcome::Rejected(Answer { status, body: body.into(), retry_after: None })
}

fn delivered() -> Outcome {
    Outcome::Delivered(Answer { status: 204, body: String::new(), retry_after: None })
}

const SOON: Option<Duration> = Some(Duration::from_secs(30));

fn ids_of(answer: &Reply) -> Vec<String> {
    answer.json["deliveries"].as_array().unwrap().iter().map(|d| d["id"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn the_list_is_newest_first_in_pages_and_filters_by_status() {
    let api = Api::loopback();
    let (user, key, subscription, _) = subscriber(&api).await;
    let mut created = Vec::new();
    for (outcome, retry_in) in [
        (rejected(500, "down"), SOON),
        (delivered(), None),
        (rejected(503, "still down"), None),
        (delivered(), None),
        (Outcome::NoAnswer(SendFailure::ConnectionRefused), SOON),
    ] {
        created.push(seed(&api, &user, &subscription, outcome, retry_in).await);
    }
    // Another subscription's deliveries stay out of this list.
    let other = api
        .send_json(
            Method::POST,
            "/api/v1/webhooks",
            &key,
            &json!({"url": sink_url(), "events": ["profile.updated"]}).to_string(),
        )
        .await;
    let other = other.assert_status(201)["id"].as_str().unwrap().to_owned();
    seed(&api, &user, &other, delivered(), None).await;

    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    let all = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}"), &key).await;
    all.assert_status(200);
    assert_eq!(ids_of(&all), newest_first);
    assert_eq!(all.json["nextCursor"], Value::Null);
    assert_eq!(all.json.as_object().unwrap().len(), 2, "{}", all.json);

    // Pages of two, each cursor continuing where the last page ended.
    let mut paged = Vec::new();
    let mut path = format!("/api/v1/webhooks/deliveries?id={subscription}&limit=2");
    loop {
        let page = api.get(&path, &key).await;
        page.assert_status(200);
        assert!(ids_of(&page).len() <= 2);
        paged.extend(ids_of(&page));
        match page.json["nextCursor"].as_str() {
            Some(cursor) => path = format!("/api/v1/webhooks/deliveries?id={subscription}&limit=2&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(paged, newest_first);

    let succeeded = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}&status=succeeded"), &key).await;
    assert_eq!(ids_of(&succeeded), [created[3].clone(), created[1].clone()]);
    let failed = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}&status=failed"), &key).await;
    assert_eq!(ids_of(&failed), [created[2].clone()]);
    let record = &failed.json["deliveries"][0];
    assert_eq!(record["lastResponseStatus"], 503);
    assert_eq!(record["lastResponseBody"], "still down");
    assert_eq!(record["lastError"], "answered 503");
    assert_eq!(record["nextAttemptAt"], Value::Null);
    let pending = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}&status=pending&limit=1"), &key).await;
    assert_eq!(ids_of(&pending), [created[4].clone()]);
    let cursor = pending.json["nextCursor"].as_str().expect("a second pending delivery").to_owned();
    let next = format!("/api/v1/webhooks/deliveries?id={subscription}&status=pending&limit=1&cursor={cursor}");
    let next = api.get(&next, &key).await;
    assert_eq!(ids_of(&next), [created[0].clone()]);
    assert_eq!(next.json["nextCursor"], Value::Null);
    let skipped = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}&status=skipped"), &key).await;
    assert_eq!(ids_of(&skipped), Vec::<String>::new());

    // A cursor continues only the list it came from: same user, subscription and filter.
    let elsewhere = [
        format!("/api/v1/webhooks/deliveries?id={subscription}&cursor={cursor}"),
        format!("/api/v1/webhooks/deliveries?id={subscription}&status=failed&cursor={cursor}"),
        format!("/api/v1/webhooks/deliveries?id={other}&status=pending&cursor={cursor}"),
    ];
    for path in elsewhere {
        api.get(&path, &key).await.assert_error(400, "request.invalid_cursor");
    }
    let mut tampered = cursor.into_bytes();
    tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for cursor in [tampered.as_str(), "not-a-cursor", "AAAA"] {
        let path = format!("/api/v1/webhooks/deliveries?id={subscription}&status=pending&cursor={cursor}");
        api.get(&path, &key).await.assert_error(400, "request.invalid_cursor");
    }
}

#[tokio::test]
async fn a_record_has_the_documented_shape_and_no_secret() {
    let api = Api::loopback();
    let (user, key, subscription, secret) = subscriber(&api).await;
    let id = seed(&api, &user, &subscription, rejected(500, "boom"), SOON).await;
    let answer = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}"), &key).await;
    let record = answer.assert_status(200)["deliveries"][0].clone();
    let mut fields: Vec<_> = record.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "attempts",
            "body",
            "createdAt",
            "eventId",
            "eventType",
            "id",
            "lastAttemptAt",
            "lastError",
            "lastResponseBody",
            "lastResponseStatus",
            "nextAttemptAt",
            "status",
            "subscriptionId",
            "succeededAt"
        ]
    );
    assert_eq!(
        (record["id"].as_str(), record["subscriptionId"].as_str()),
        (Some(id.as_str()), Some(subscription.as_str()))
    );
    assert_eq!(
        (&record["status"], &record["attempts"], &record["eventType"]),
        (&json!("pending"), &json!(1), &json!("profile.updated"))
    );
    for time in ["createdAt", "lastAttemptAt", "nextAttemptAt"] {
        assert_rfc3339_utc(record[time].as_str().unwrap());
    }
    assert!(ids::has_shape(record["eventId"].as_str().unwrap(), ids::EVENT));
    // The body sent, as text: the event itself.
    let body: Value = serde_json::from_str(record["body"].as_str().unwrap()).expect("the body is the event's JSON");
    assert_eq!((&body["id"], &body["type"]), (&record["eventId"], &record["eventType"]));

    // Neither the answer nor the stored item holds the secret or a signature.
    let item = dynamodb()
        .get_item()
        .table_name(&api.settings.tables.deliveries)
        .set_key(Some(RecordKey { subscription_id: typed(&subscription), delivery_id: typed(&id) }.item()))
        .send()
        .await
        .unwrap()
        .item
        .expect("the stored record");
    let stored = format!("{item:?}");
    let message = DeliveryMessage::new(&profile_event(&user), &typed(&user), &typed(&subscription));
    let signature = career_core::webhooks::signing::sign_hex(&secret, &message.body());
    for text in [answer.json.to_string(), stored] {
        assert!(!text.contains(&secret) && !text.contains("whsec_"), "{text}");
        assert!(!text.contains(&signature) && !text.to_ascii_lowercase().contains("signature"), "{text}");
    }
}

#[tokio::test]
async fn list_parameters_are_checked_in_the_contract_order() {
    let api = Api::loopback();
    let (_, key, subscription, _) = subscriber(&api).await;
    let unknown = ids::new_id(ids::SUBSCRIPTION);
    let cases = [
        ("/api/v1/webhooks/deliveries".to_owned(), 400, "webhooks.missing_subscription_id"),
        ("/api/v1/webhooks/deliveries?id=".to_owned(), 400, "webhooks.missing_subscription_id"),
        ("/api/v1/webhooks/deliveries?status=bogus".to_owned(), 400, "webhooks.missing_subscription_id"),
        (format!("/api/v1/webhooks/deliveries?id={subscription}&status=bogus"), 400, "webhooks.invalid_status"),
        (format!("/api/v1/webhooks/deliveries?id={subscription}&status=FAILED"), 400, "webhooks.invalid_status"),
        // Query parameters come before existence.
        (format!("/api/v1/webhooks/deliveries?id={unknown}&status=all"), 400, "webhooks.invalid_status"),
        (format!("/api/v1/webhooks/deliveries?id={unknown}&cursor=junk"), 400, "request.invalid_cursor"),
        (format!("/api/v1/webhooks/deliveries?id={unknown}"), 404, "webhooks.not_found"),
        ("/api/v1/webhooks/deliveries?id=whk_nonsense".to_owned(), 404, "webhooks.not_found"),
    ];
    for (path, status, code) in cases {
        let answer = api.get(&path, &key).await;
        assert_eq!(answer.json["error"]["code"], code, "{path}: {answer:?}");
        answer.assert_error(status, code);
        assert!(answer.header("ratelimit-limit").is_some(), "{path}");
    }
    // Out-of-range limits are clamped, like the alerts list's.
    for limit in ["0", "1000", "x"] {
        let path = format!("/api/v1/webhooks/deliveries?id={subscription}&limit={limit}");
        api.get(&path, &key).await.assert_status(200);
    }
}

#[tokio::test]
async fn scopes_methods_and_paths_are_checked_first() {
    let api = Api::loopback();
    let (user, _, subscription, _) = subscriber(&api).await;
    let reader = api.key(&user, "read:webhooks").await;
    let writer = api.key(&user, "write:webhooks").await;
    let list = format!("/api/v1/webhooks/deliveries?id={subscription}");
    let forbidden = api.get(&list, &writer).await;
    forbidden.assert_error(403, "auth.forbidden");
    assert!(forbidden.header("www-authenticate").unwrap().ends_with(r#"scope="read:webhooks""#));
    api.get(&list, &reader).await.assert_status(200);
    for path in ["/api/v1/webhooks/deliveries/retry?id=dlv_x", "/api/v1/webhooks/ping", "/api/v1/webhooks/enable"] {
        let answer = api.request(Method::POST, path).key(&reader).send().await;
        answer.assert_error(403, "auth.forbidden");
        assert!(answer.header("www-authenticate").unwrap().ends_with(r#"scope="write:webhooks""#), "{path}");
        let answer = api.request(Method::POST, path).send().await;
        answer.assert_error(401, "auth.unauthorized");
        let answer = api.request(Method::GET, path).key(&writer).send().await;
        answer.assert_error(405, "method_not_allowed");
        assert_eq!(answer.header("allow"), Some("POST"), "{path}");
    }
    let answer = api.request(Method::POST, &list).key(&writer).send().await;
    answer.assert_error(405, "method_not_allowed");
    assert_eq!(answer.header("allow"), Some("GET"));
    for path in ["/api/v1/webhooks/nope", "/api/v1/webhooks/deliveries/", "/api/v1/webhooksx"] {
        api.get(path, &reader).await.assert_error(404, "not_found");
    }
}

#[tokio::test]
async fn another_users_subscription_or_delivery_is_not_found() {
    let api = Api::loopback();
    let (owner, _, subscription, _) = subscriber(&api).await;
    let delivery = seed(&api, &owner, &subscription, delivered(), None).await;
    let intruder = api.full_key(&unique_user()).await;

    let list = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}"), &intruder).await;
    list.assert_error(404, "webhooks.not_found");
    let retry = api.request(Method::POST, &format!("/api/v1/webhooks/deliveries/retry?id={delivery}"));
    retry.key(&intruder).send().await.assert_error(404, "webhooks.delivery_not_found");
    for operation in ["ping", "enable"] {
        let path = format!("/api/v1/webhooks/{operation}?id={subscription}");
        api.request(Method::POST, &path).key(&intruder).send().await.assert_error(404, "webhooks.not_found");
    }
    // Exactly like ids that do not exist at all.
    let missing_delivery = ids::new_id(ids::DELIVERY);
    for id in [missing_delivery.as_str(), "dlv_nonsense", subscription.as_str()] {
        let path = format!("/api/v1/webhooks/deliveries/retry?id={id}");
        api.request(Method::POST, &path).key(&intruder).send().await.assert_error(404, "webhooks.delivery_not_found");
    }
    for operation in ["ping", "enable"] {
        for id in [ids::new_id(ids::SUBSCRIPTION), "whk_nonsense".into(), "#count".into()] {
            let path = format!("/api/v1/webhooks/{operation}?id={}", id.replace('#', "%23"));
            api.request(Method::POST, &path).key(&intruder).send().await.assert_error(404, "webhooks.not_found");
        }
    }
    // Nothing of the owner's changed.
    let record = deliveries(&api).get(&typed(&subscription), &typed(&delivery)).await.unwrap().unwrap().record;
    assert_eq!((record.status.as_str(), record.attempts), ("succeeded", 1));
}

#[tokio::test]
async fn a_ping_is_queued_and_logged_pending() {
    let api = with_own_queue().await;
    let (user, key, subscription, _) = subscriber(&api).await;
    for path in ["/api/v1/webhooks/ping", "/api/v1/webhooks/ping?id="] {
        api.request(Method::POST, path).key(&key).send().await.assert_error(400, "webhooks.missing_subscription_id");
    }
    let answer = api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={subscription}")).key(&key).send().await;
    let record = answer.assert_status(202).clone();
    assert_eq!(
        (&record["status"], &record["attempts"], &record["eventType"]),
        (&json!("pending"), &json!(0), &json!("webhook.ping"))
    );
    assert_eq!(record["subscriptionId"], subscription.as_str());
    assert_eq!(
        (&record["lastAttemptAt"], &record["lastError"], &record["succeededAt"]),
        (&Value::Null, &Value::Null, &Value::Null)
    );
    assert!(ids::has_shape(record["id"].as_str().unwrap(), ids::DELIVERY));
    let listed = api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}"), &key).await;
    assert_eq!(listed.json["deliveries"], json!([record]));

    // The message on the queue carries the ping's delivery id, event and subscription.
    let queued = find_queued(&api, record["id"].as_str().unwrap()).await;
    assert_eq!((queued.user_id.as_str(), queued.subscription_id.as_str()), (user.as_str(), subscription.as_str()));
    assert_eq!(queued.event.kind(), EventKind::WebhookPing);
    assert_eq!(queued.event.id.as_str(), record["eventId"].as_str().unwrap());
    assert_eq!(serde_json::to_value(&queued.event.data).unwrap(), json!({"subscriptionId": subscription}));
}

/// An API whose delivery queue is this test's own.
async fn with_own_queue() -> Api {
    let pipeline = career_service::pipeline::Pipeline::start(false).await;
    let mut settings = pipeline.settings().clone();
    settings.webhook_urls = career_core::webhooks::UrlPolicy::local_stack();
    Api::on(career_service::clients(), settings)
}

/// The delivery message with this id on the API's delivery queue.
async fn find_queued(api: &Api, delivery_id: &str) -> DeliveryMessage {
    let queue = api.settings.delivery_queue_url.clone().unwrap();
    for _ in 0..10 {
        let output = sqs()
            .receive_message()
            .queue_url(&queue)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        for message in output.messages.unwrap_or_default() {
            let parsed: DeliveryMessage = serde_json::from_str(message.body().unwrap()).unwrap();
            if parsed.delivery_id.as_str() == delivery_id {
                return parsed;
            }
        }
    }
    panic!("no message for {delivery_id} on the delivery queue");
}

#[tokio::test]
async fn a_manual_retry_queues_the_same_delivery_again() {
    let api = with_own_queue().await;
    let (user, key, subscription, _) = subscriber(&api).await;
    for path in ["/api/v1/webhooks/deliveries/retry", "/api/v1/webhooks/deliveries/retry?id="] {
        api.request(Method::POST, path).key(&key).send().await.assert_error(400, "webhooks.missing_delivery_id");
    }
    let id = seed(&api, &user, &subscription, rejected(500, "down"), None).await;
    let path = format!("/api/v1/webhooks/deliveries/retry?id={id}");
    let answer = api.request(Method::POST, &path).key(&key).send().await;
    let record = answer.assert_status(202).clone();
    assert_eq!(
        (record["id"].as_str(), &record["status"], &record["attempts"]),
        (Some(id.as_str()), &json!("pending"), &json!(1))
    );
    assert_rfc3339_utc(record["nextAttemptAt"].as_str().unwrap());
    assert_eq!(record["lastResponseBody"], "down", "the last attempt's answer stays until the next one");
    let stored = deliveries(&api).get(&typed(&subscription), &typed(&id)).await.unwrap().unwrap();
    let queued = find_queued(&api, &id).await;
    assert_eq!(queued.body(), stored.record.body.as_bytes(), "the same body bytes are sent again");
    assert_eq!(queued.subscription_id.as_str(), subscription);

    // A delivery of a deleted subscription cannot be retried.
    let delete = format!("/api/v1/webhooks?id={subscription}");
    api.request(Method::DELETE, &delete).key(&key).send().await.assert_status(200);
    api.request(Method::POST, &path).key(&key).send().await.assert_error(404, "webhooks.delivery_not_found");
}

/// Thirty manual retries of one delivery at the same moment: each applies (202, `pending`),
/// none answers 500, and each starts a generation of its own, so only the last one's message
/// sends. The same while the subscription is paused: nothing is sent, and each answers 202
/// with `failed` ("not sent again"), since the delivery was sent before (contract section 9);
/// a delivery never sent answers `skipped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_concurrent_retries_of_one_delivery_all_apply() {
    let api = std::sync::Arc::new(with_own_queue().await);
    let (user, key, subscription, _) = subscriber(&api).await;
    let id = seed(&api, &user, &subscription, rejected(500, "down"), None).await;
    let before = deliveries(&api).get(&typed(&subscription), &typed(&id)).await.unwrap().unwrap().generation;
    let retries = |expected: &'static str| {
        let tasks: Vec<_> = (0..30)
            .map(|_| {
                let (api, key, path) = (api.clone(), key.clone(), format!("/api/v1/webhooks/deliveries/retry?id={id}"));
                tokio::spawn(async move { api.request(Method::POST, &path).key(&key).send().await })
            })
            .collect();
        async move {
            for task in tasks {
                let answer = task.await.unwrap();
                assert_eq!(answer.assert_status(202)["status"], expected, "{answer:?}");
            }
        }
    };
    retries("pending").await;
    let after = deliveries(&api).get(&typed(&subscription), &typed(&id)).await.unwrap().unwrap();
    assert_eq!((after.record.status, after.generation), (DeliveryStatus::Pending, before + 30));

    let webhooks = WebhookTable::new(dynamodb(), &api.settings.tables.webhooks);
    let at = clock::Timestamp::now();
    let skip = SubscriptionChanges { while_disabled: Some(WhileDisabled::Skip), ..SubscriptionChanges::default() };
    webhooks.update(&typed(&user), &typed(&subscription), &skip, Replacing::default(), at).await.unwrap().unwrap();
    webhooks.disable(&typed(&user), &typed(&subscription), (DisabledReason::Manual, None), None, at).await.unwrap();
    retries("failed").await;
    let stopped = deliveries(&api).get(&typed(&subscription), &typed(&id)).await.unwrap().unwrap().record;
    assert_eq!(stopped.last_error.as_deref(), Some("not sent again: the subscription is disabled"));
    assert_eq!((stopped.attempts, stopped.last_response_status), (1, Some(500)));

    let never = DeliveryMessage::new(&profile_event(&user), &typed(&user), &typed(&subscription));
    let now = clock::Timestamp::now();
    deliveries(&api).create(&never, DeliveryStatus::Pending, now).await.unwrap();
    let path = format!("/api/v1/webhooks/deliveries/retry?id={}", never.delivery_id);
    let skipped = api.request(Method::POST, &path).key(&key).send().await;
    let skipped = skipped.assert_status(202);
    assert_eq!((&skipped["status"], &skipped["attempts"]), (&json!("skipped"), &json!(0)));
    assert_eq!(skipped["lastError"], "not sent: the subscription is disabled");
}

#[tokio::test]
async fn enable_turns_a_disabled_subscription_back_on_and_is_harmless_to_repeat() {
    let api = Api::loopback();
    let (user, key, subscription, _) = subscriber(&api).await;
    for path in ["/api/v1/webhooks/enable", "/api/v1/webhooks/enable?id="] {
        api.request(Method::POST, path).key(&key).send().await.assert_error(400, "webhooks.missing_subscription_id");
    }
    let webhooks = WebhookTable::new(dynamodb(), &api.settings.tables.webhooks);
    webhooks
        .start_failure_clock(
            &typed(&user),
            &typed(&subscription),
            &career_service::failed_attempt(typed("2026-11-01T00:00:00.000Z")),
        )
        .await
        .unwrap();
    assert!(webhooks
        .disable(
            &typed(&user),
            &typed(&subscription),
            (DisabledReason::Failing, Some(typed("2026-11-01T00:00:00.000Z"))),
            None,
            typed("2026-11-06T00:00:01.000Z")
        )
        .await
        .unwrap());
    let listed = api.get("/api/v1/webhooks", &key).await;
    let shown = &listed.assert_status(200)["webhooks"][0];
    assert_eq!(
        (&shown["enabled"], &shown["disabledAt"], &shown["disabledReason"]),
        (&json!(false), &json!("2026-11-06T00:00:01.000Z"), &json!("failing"))
    );

    // A disabled subscription's ping sends nothing: a skipped record.
    let ping = api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={subscription}")).key(&key).send().await;
    assert_eq!(ping.assert_status(202)["status"], "skipped");
    assert_eq!(ping.json["nextAttemptAt"], Value::Null);

    let path = format!("/api/v1/webhooks/enable?id={subscription}");
    for _ in 0..2 {
        let answer = api.request(Method::POST, &path).key(&key).send().await;
        let body = answer.assert_status(200);
        assert_eq!(body["id"], subscription.as_str());
        assert_eq!(
            (&body["enabled"], &body["disabledAt"], &body["disabledReason"]),
            (&json!(true), &Value::Null, &Value::Null)
        );
        assert!(body.get("secret").is_none());
    }
    let stored = webhooks.get(&typed(&user), &typed(&subscription)).await.unwrap().unwrap();
    assert_eq!(stored.health, Health::Active, "enabled, and the failure clock is reset");
}

#[tokio::test]
async fn careerctl_lists_a_subscriptions_deliveries_without_knowing_its_owner() {
    let api = Api::loopback();
    let (user, _, subscription, _) = subscriber(&api).await;
    let older = seed(&api, &user, &subscription, rejected(500, "down"), None).await;
    let newer = seed(&api, &user, &subscription, delivered(), None).await;
    let listed = serde_json::to_value(api.admin.list_deliveries(&subscription, None, 1, None).await.unwrap()).unwrap();
    assert_eq!((&listed["userId"], &listed["subscriptionId"]), (&json!(user), &json!(subscription)));
    assert_eq!(listed["deliveries"][0]["id"], newer.as_str());
    assert_eq!(listed["nextAfter"], newer.as_str());
    let next =
        serde_json::to_value(api.admin.list_deliveries(&subscription, None, 1, Some(&newer)).await.unwrap()).unwrap();
    assert_eq!((&next["deliveries"][0]["id"], &next["nextAfter"]), (&json!(older), &Value::Null));
    let failed = api.admin.list_deliveries(&subscription, Some(DeliveryStatus::Failed), 50, None).await.unwrap();
    assert_eq!(failed.deliveries.len(), 1);
    let unknown = ids::new_id(ids::SUBSCRIPTION);
    assert!(api
        .admin
        .list_deliveries(&unknown, None, 50, None)
        .await
        .unwrap_err()
        .to_string()
        .contains("no subscription"));
}

#[tokio::test]
async fn a_webhooks_table_from_before_the_owner_index_gets_it() {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    let names = career_core::config::TableNames::with_prefix(&format!("{}-", unique_user()));
    let key = |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build().unwrap();
    let string = |name: &str| {
        AttributeDefinition::builder().attribute_name(name).attribute_type(ScalarAttributeType::S).build().unwrap()
    };
    dynamodb()
        .create_table()
        .table_name(&names.webhooks)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("userId", KeyType::Hash))
        .key_schema(key("subscriptionId", KeyType::Range))
        .attribute_definitions(string("userId"))
        .attribute_definitions(string("subscriptionId"))
        .send()
        .await
        .unwrap();
    let template = local_aws::template::Template::shipped();
    let (created, _) = career_template::tables::create_tables(&template, &dynamodb(), &names).await.unwrap();
    assert!(!created.contains(&names.webhooks), "the table was kept: {created:?}");
    let described = dynamodb().describe_table().table_name(&names.webhooks).send().await.unwrap();
    let indexes: Vec<_> = described.table.unwrap().global_secondary_indexes.unwrap_or_default();
    assert_eq!(indexes.iter().filter_map(|i| i.index_name.as_deref()).collect::<Vec<_>>(), ["bySubscription"]);
    // Running it again changes nothing.
    assert_eq!(
        career_template::tables::create_tables(&template, &dynamodb(), &names).await.unwrap().0,
        Vec::<String>::new()
    );
}
