//! Hold instead of skip (contract section 20): a disabled subscription's deliveries are kept
//! `held`, unsent and on no lane, and every enable releases them once, with their ids, at the
//! subscription's pace; `skip` keeps sections 9 and 13; a manual retry of a held delivery stays
//! held, a ping is skipped, a delete ends what was held `skipped`, and a release past one
//! call's share finishes in the sweep, each delivery once.

use std::collections::BTreeSet;
use std::time::Duration;

use career_core::delivery::log::DeliveryStatus;
use career_core::store::deliveries::DeliveryTable;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::{delivery_record, dynamodb, eventually, typed, unique_user, Api, DEADLINE};
use lambda_http::http::Method;
use serde_json::{json, Value};

const NO_DELAY: Duration = Duration::ZERO;

/// The subscription's deliveries of `status`, through the API, once there are `count`.
async fn listed(pipeline: &Pipeline, key: &str, subscription: &str, status: &str, count: usize) -> Vec<Value> {
    let path = format!("/api/v1/webhooks/deliveries?id={subscription}&status={status}");
    eventually(format!("{count} {status} deliveries"), || async {
        let answer = pipeline.api.get(&path, key).await;
        let listed = answer.assert_status(200)["deliveries"].as_array().unwrap().clone();
        if listed.len() == count {
            Ok(listed)
        } else {
            Err(listed)
        }
    })
    .await
}

fn ids(deliveries: &[Value]) -> BTreeSet<String> {
    deliveries.iter().map(|d| d["id"].as_str().unwrap().to_owned()).collect()
}

fn received_ids(received: &[Received]) -> Vec<String> {
    received.iter().map(|r| r.header("x-webhook-delivery").to_owned()).collect()
}

async fn patch(pipeline: &Pipeline, key: &str, subscription: &str, body: &str) -> Value {
    let path = format!("/api/v1/webhooks?id={subscription}");
    pipeline.api.send_json(Method::PATCH, &path, key, body).await.assert_status(200).clone()
}

async fn enable(pipeline: &Pipeline, key: &str, subscription: &str) -> Value {
    let path = format!("/api/v1/webhooks/enable?id={subscription}");
    pipeline.api.request(Method::POST, &path).key(key).send().await.assert_status(200).clone()
}

/// `count` profile changes of `user`, one after the other.
async fn changes(pipeline: &Pipeline, user: &str, count: usize) {
    for _ in 0..count {
        pipeline.api.admin.update_profile(user).await.unwrap();
    }
}

#[tokio::test]
async fn while_disabled_is_set_on_create_and_patch_and_anything_else_changes_nothing() {
    let api = Api::loopback();
    let key = api.full_key(&unique_user()).await;
    let body = json!({"url": career_service::sink_url(), "events": ["profile.updated"], "whileDisabled": "skip"});
    let created = api.send_json(Method::POST, "/api/v1/webhooks", &key, &body.to_string()).await;
    let id = created.assert_status(201)["id"].as_str().unwrap().to_owned();
    assert_eq!(created.json["whileDisabled"], "skip");
    let path = format!("/api/v1/webhooks?id={id}");
    let held = api.send_json(Method::PATCH, &path, &key, r#"{"whileDisabled": "hold"}"#).await;
    assert_eq!(held.assert_status(200)["whileDisabled"], "hold");
    for bad in [r#"{"whileDisabled": "drop"}"#, r#"{"whileDisabled": null, "url": 5}"#, r#"{"whileDisabled": true}"#] {
        let refused = api.send_json(Method::PATCH, &path, &key, bad).await;
        refused.assert_error(400, "webhooks.invalid_while_disabled");
    }
    // Checked after maxDeliveriesPerSecond, and before the creation's other checks that follow it.
    let both = json!({"url": career_service::sink_url(), "events": ["profile.updated"], "maxDeliveriesPerSecond": 0,
        "whileDisabled": "x"});
    let refused = api.send_json(Method::POST, "/api/v1/webhooks", &key, &both.to_string()).await;
    refused.assert_error(400, "webhooks.invalid_rate_limit");
    let bad = json!({"url": career_service::sink_url(), "events": ["profile.updated"], "whileDisabled": "x",
        "identityToken": 5});
    let refused = api.send_json(Method::POST, "/api/v1/webhooks", &key, &bad.to_string()).await;
    refused.assert_error(400, "webhooks.invalid_while_disabled");
    let listed = api.get("/api/v1/webhooks", &key).await;
    let listed = listed.assert_status(200)["webhooks"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1, "a refused create made nothing: {listed}");
    assert_eq!(listed[0]["whileDisabled"], "hold", "a refused PATCH changed nothing");
}

/// Held while paused: recorded, sent nothing, on no lane. Enabled: each released once, with
/// its id, at the subscription's pace (one a second here: no two share a signed second).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_deliveries_are_released_once_with_their_ids_at_the_subscriptions_pace() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.full_key(&user).await;
    let paused = patch(&pipeline, &key, &subscription, r#"{"enabled": false, "maxDeliveriesPerSecond": 1}"#).await;
    assert_eq!((&paused["enabled"], &paused["whileDisabled"]), (&json!(false), &json!("hold")));

    changes(&pipeline, &user, 4).await;
    let held = listed(&pipeline, &key, &subscription, "held", 4).await;
    for record in &held {
        assert_eq!(
            (&record["attempts"], &record["lastError"], &record["nextAttemptAt"]),
            (&json!(0), &json!("held: the subscription is disabled"), &Value::Null)
        );
    }
    pipeline.idle().await;
    assert!(receiver.received().is_empty(), "a held delivery is not sent");
    assert_eq!(listed(&pipeline, &key, &subscription, "held", 4).await.len(), 4, "and stays held, on no lane");

    let enabled = enable(&pipeline, &key, &subscription).await;
    assert_eq!((&enabled["enabled"], &enabled["released"]), (&json!(true), &json!(4)));
    let received = receiver.wait_for(4, DEADLINE).await;
    let sent: BTreeSet<String> = received_ids(&received).into_iter().collect();
    assert_eq!(sent, ids(&held), "the held deliveries, with their ids");
    let seconds: BTreeSet<&str> = received.iter().map(|r| r.header("webhook-timestamp")).collect();
    assert_eq!(seconds.len(), 4, "one a second, the subscription's limit: {seconds:?}");
    listed(&pipeline, &key, &subscription, "succeeded", 4).await;
    assert_eq!(enable(&pipeline, &key, &subscription).await["released"], 0, "nothing is released twice");
    pipeline.idle().await;
    assert_eq!(receiver.received().len(), 4, "each sent once");
}

/// A delivery sent before keeps its attempts and last answer while held, and a manual retry
/// leaves it held; a ping to the disabled subscription is skipped. Enabled, it is sent again
/// from its schedule's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_delivery_keeps_its_attempts_and_a_retry_while_disabled_leaves_it_held() {
    // A retry about 5 s after the first attempt: time to pause before it.
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(5)).await;
    let user = unique_user();
    let receiver = Receiver::answering(&[500, 200], "try later", NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.full_key(&user).await;
    changes(&pipeline, &user, 1).await;
    let sent = received_ids(&receiver.wait_for(1, DEADLINE).await).remove(0);
    eventually("the first attempt recorded", || async {
        let record = delivery_record(&pipeline.settings().tables, &user, &sent).await.map(|s| s.record);
        record.filter(|r| r.attempts == 1).ok_or("not yet")
    })
    .await;
    patch(&pipeline, &key, &subscription, r#"{"enabled": false}"#).await;
    let held = listed(&pipeline, &key, &subscription, "held", 1).await.remove(0);
    assert_eq!(
        (&held["id"], &held["attempts"], &held["lastResponseStatus"], &held["lastResponseBody"], &held["lastError"]),
        (&json!(sent), &json!(1), &json!(500), &json!("try later"), &json!("held: the subscription is disabled"))
    );

    let retried = pipeline.api.request(Method::POST, &format!("/api/v1/webhooks/deliveries/retry?id={sent}"));
    let retried = retried.key(&key).send().await;
    assert_eq!((&retried.assert_status(202)["status"], &retried.json["attempts"]), (&json!("held"), &json!(1)));
    let ping = pipeline.api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={subscription}"));
    let ping = ping.key(&key).send().await;
    assert_eq!(ping.assert_status(202)["status"], "skipped", "a ping is a check, not data");
    pipeline.idle().await;
    assert_eq!(receiver.received().len(), 1, "nothing sent while disabled");

    let enabled = patch(&pipeline, &key, &subscription, r#"{"enabled": true}"#).await;
    assert_eq!(enabled["released"], 1, "PATCH enabled: true releases as POST enable does");
    let again = receiver.wait_for(2, DEADLINE).await;
    assert_eq!(received_ids(&again), [sent.clone(), sent.clone()]);
    let done = listed(&pipeline, &key, &subscription, "succeeded", 1).await.remove(0);
    assert_eq!((&done["id"], &done["attempts"]), (&json!(sent), &json!(2)), "attempts kept");
}

/// Deleting a subscription ends what it held `skipped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_subscription_ends_what_it_held_skipped() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.full_key(&user).await;
    patch(&pipeline, &key, &subscription, r#"{"enabled": false}"#).await;
    changes(&pipeline, &user, 2).await;
    let held = listed(&pipeline, &key, &subscription, "held", 2).await;
    let path = format!("/api/v1/webhooks?id={subscription}");
    pipeline.api.request(Method::DELETE, &path).key(&key).send().await.assert_status(200);
    let deliveries = DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries);
    for id in ids(&held) {
        let record = deliveries.get(&typed(&subscription), &typed(&id)).await.unwrap().unwrap().record;
        assert_eq!(
            (record.status, record.attempts, record.last_error.as_deref()),
            (DeliveryStatus::Skipped, 0, Some("not sent: the subscription was deleted")),
            "{id}"
        );
    }
    pipeline.idle().await;
    assert!(receiver.received().is_empty());
}

/// More held than one enable's share: the call releases its share, the sweep the rest, and
/// each delivery is sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_past_the_calls_share_finishes_in_the_background_once_each() {
    let mut pipeline = Pipeline::with_settings(true, |s| s.release_per_call = 2).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.full_key(&user).await;
    patch(&pipeline, &key, &subscription, r#"{"enabled": false}"#).await;
    changes(&pipeline, &user, 5).await;
    let held = listed(&pipeline, &key, &subscription, "held", 5).await;

    assert_eq!(enable(&pipeline, &key, &subscription).await["released"], 2, "the call's share");
    pipeline.sweep_every(Duration::from_millis(500));
    let received = receiver.wait_for(5, DEADLINE).await;
    let sent: BTreeSet<String> = received_ids(&received).into_iter().collect();
    assert_eq!(sent, ids(&held));
    listed(&pipeline, &key, &subscription, "succeeded", 5).await;
    pipeline.idle().await;
    assert_eq!(receiver.received().len(), 5, "each released once");
}
