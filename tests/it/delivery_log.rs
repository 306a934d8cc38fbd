//! The delivery log end to end (contract section 9): events and pings through the streams,
//! the queue and the delivery function to receivers on loopback, each attempt in the log;
//! disabling a failing subscription, enabling it, manual retries and the dead-letter redrive.

use std::time::Duration;

use career_core::delivery::log::{DeliveryRecord, DeliveryStatus};
use career_core::webhooks::signing::verify_hex;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::DEADLINE;
use career_service::{eventually, sqs, unique_user};
use lambda_http::http::Method;
use serde_json::{json, Value};

const NO_DELAY: Duration = Duration::ZERO;

/// Waits until the delivery's record satisfies `done`.
async fn record_when(
    pipeline: &Pipeline,
    user: &str,
    delivery_id: &str,
    done: impl Fn(&DeliveryRecord) -> bool,
) -> DeliveryRecord {
    eventually(format!("{delivery_id}'s record as wanted"), || async {
        let record = career_service::delivery_record(&pipeline.settings().tables, user, delivery_id).await;
        match record.map(|stored| stored.record) {
            Some(record) if done(&record) => Ok(record),
            other => Err(other),
        }
    })
    .await
}

/// The subscription's records of one status, through the API.
async fn listed(pipeline: &Pipeline, key: &str, subscription: &str, status: &str) -> Vec<Value> {
    let path = format!("/api/v1/webhooks/deliveries?id={subscription}&status={status}");
    let answer = pipeline.api.get(&path, key).await;
    answer.assert_status(200)["deliveries"].as_array().unwrap().clone()
}

/// The subscription's skipped deliveries, once there is one.
async fn skipped_deliveries(pipeline: &Pipeline, key: &str, subscription: &str) -> Vec<Value> {
    eventually("a skipped delivery", || async {
        let skipped = listed(pipeline, key, subscription, "skipped").await;
        if skipped.is_empty() {
            Err("none")
        } else {
            Ok(skipped)
        }
    })
    .await
}

async fn post(pipeline: &Pipeline, key: &str, path: &str) -> Value {
    let answer = pipeline.api.request(Method::POST, path).key(key).send().await;
    answer.json.clone()
}

fn delivery_id(received: &Received) -> String {
    received.header("x-webhook-delivery").to_owned()
}

async fn dead_letters(pipeline: &Pipeline) -> usize {
    let messages = aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages;
    pipeline.count(&pipeline.queues.dead_letter, messages).await
}

async fn until_dead_lettered(pipeline: &Pipeline, count: usize) {
    eventually(format!("{count} dead-lettered deliveries"), || async {
        match dead_letters(pipeline).await {
            dead if dead >= count => Ok(()),
            dead => Err(dead),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_success_is_logged_under_the_delivery_id_the_receiver_saw() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::answering(&[200], "thanks", NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let received = receiver.wait_for(1, DEADLINE).await.remove(0);
    let id = delivery_id(&received);

    let record = record_when(&pipeline, &user, &id, |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!((record.attempts, record.last_response_status), (1, Some(200)));
    assert_eq!((record.last_response_body.as_deref(), record.last_error.as_deref()), (Some("thanks"), None));
    assert_eq!(record.next_attempt_at, None);
    assert_eq!(record.succeeded_at, record.last_attempt_at);
    assert_eq!(record.event_id.as_str(), received.json()["id"].as_str().unwrap());
    assert_eq!(
        (record.subscription_id.as_str(), record.event_type.as_str()),
        (subscription.as_str(), "profile.updated")
    );
    let key = pipeline.api.key(&user, "read:webhooks").await;
    let shown = listed(&pipeline, &key, &subscription, "succeeded").await;
    assert_eq!(shown, [serde_json::to_value(&record).unwrap()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_failing_every_attempt_leaves_a_failed_record_with_its_last_answer() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::answering(&[500], "maintenance until 10:00", NO_DELAY).await;
    pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let attempts = receiver.wait_for(3, DEADLINE).await;
    let id = delivery_id(&attempts[0]);

    let record = record_when(&pipeline, &user, &id, |r| r.status == DeliveryStatus::Failed).await;
    assert_eq!((record.attempts, record.last_response_status), (3, Some(500)));
    assert_eq!(record.last_response_body.as_deref(), Some("maintenance until 10:00"));
    assert_eq!(record.last_error.as_deref(), Some("answered 500"));
    assert_eq!((record.next_attempt_at, record.succeeded_at), (None, None));
    until_dead_lettered(&pipeline, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscription_failing_past_the_window_is_disabled_and_comes_back_with_enable_and_retry() {
    let pipeline = Pipeline::with_settings(true, |s| s.webhook_disable_after = Duration::from_millis(500)).await;
    let user = unique_user();
    let receiver = Receiver::answering(&[500, 500, 500, 200], "busy", NO_DELAY).await;
    let (subscription, secret) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.full_key(&user).await;
    // Skipping, not holding, what comes while disabled (contract section 20).
    let path = format!("/api/v1/webhooks?id={subscription}");
    let skip = pipeline.api.send_json(Method::PATCH, &path, &key, r#"{"whileDisabled":"skip"}"#).await;
    skip.assert_status(200);
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let attempts = receiver.wait_for(3, DEADLINE).await;
    let failed = delivery_id(&attempts[0]);
    record_when(&pipeline, &user, &failed, |r| r.status == DeliveryStatus::Failed).await;

    // The last attempt came more than the window after the first failure: disabled.
    let shown = eventually("the subscription disabled", || async {
        let answer = pipeline.api.get("/api/v1/webhooks", &key).await;
        let shown = answer.assert_status(200)["webhooks"][0].clone();
        if shown["enabled"] == false {
            Ok(shown)
        } else {
            Err(shown)
        }
    })
    .await;
    assert_eq!((&shown["enabled"], &shown["disabledReason"]), (&json!(false), &json!("failing")), "{shown}");
    assert!(shown["disabledAt"].is_string());

    // A new event is logged skipped and not sent.
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let skipped = skipped_deliveries(&pipeline, &key, &subscription).await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!((&skipped[0]["attempts"], &skipped[0]["lastAttemptAt"]), (&json!(0), &Value::Null));
    let skipped = skipped[0]["id"].as_str().unwrap().to_owned();
    pipeline.drained().await;
    assert_eq!(receiver.received().len(), 3, "a disabled subscription is sent nothing");

    // Enabling does not resend the skipped delivery; a manual retry does.
    let enabled = post(&pipeline, &key, &format!("/api/v1/webhooks/enable?id={subscription}")).await;
    assert_eq!(enabled["enabled"], true);
    pipeline.drained().await;
    assert_eq!(receiver.received().len(), 3);
    let retried = post(&pipeline, &key, &format!("/api/v1/webhooks/deliveries/retry?id={failed}")).await;
    assert_eq!((retried["id"].as_str(), &retried["status"]), (Some(failed.as_str()), &json!("pending")));
    let again = receiver.wait_for(4, DEADLINE).await.remove(3);
    assert_eq!(delivery_id(&again), failed, "the same delivery id");
    assert_eq!(again.body, attempts[0].body, "the same body bytes");
    assert!(verify_hex(&secret, &again.body, again.header("x-webhook-signature")), "signed anew");
    let record = record_when(&pipeline, &user, &failed, |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!((record.attempts, record.last_response_status, record.last_error), (4, Some(200), None));

    let retried = post(&pipeline, &key, &format!("/api/v1/webhooks/deliveries/retry?id={skipped}")).await;
    assert_eq!(retried["status"], "pending");
    let resent = receiver.wait_for(5, DEADLINE).await.remove(4);
    assert_eq!(delivery_id(&resent), skipped);
    assert_eq!(resent.json()["type"], "profile.updated");
    record_when(&pipeline, &user, &skipped, |r| r.status == DeliveryStatus::Succeeded && r.attempts == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ping_arrives_signed_and_is_logged() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[204], NO_DELAY).await;
    // The subscription lists no kind a ping could match: pings need none.
    let (subscription, secret) = pipeline.subscribe(&user, &receiver.url, &["assessment.completed"]).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let queued = post(&pipeline, &key, &format!("/api/v1/webhooks/ping?id={subscription}")).await;
    assert_eq!(queued["status"], "pending");

    let ping = receiver.wait_for(1, DEADLINE).await.remove(0);
    assert!(verify_hex(&secret, &ping.body, ping.header("x-webhook-signature")));
    assert_eq!(ping.header("x-webhook-event"), "webhook.ping");
    assert_eq!(delivery_id(&ping), queued["id"].as_str().unwrap());
    let body = ping.json();
    assert_eq!((&body["type"], &body["data"]), (&json!("webhook.ping"), &json!({"subscriptionId": subscription})));
    assert_eq!(body["id"], queued["eventId"]);
    let record = record_when(&pipeline, &user, &delivery_id(&ping), |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!((record.attempts, record.last_response_status), (1, Some(204)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redrive_moves_dead_lettered_deliveries_back_and_they_are_delivered() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[503, 503, 503, 200], NO_DELAY).await;
    pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let attempts = receiver.wait_for(3, DEADLINE).await;
    until_dead_lettered(&pipeline, 1).await;

    let moved = pipeline.api.admin.redrive(&sqs(), &pipeline.queues.dead_letter, &pipeline.queues.retry).await.unwrap();
    assert_eq!(moved, careerctl::admin::Redriven { moved: 1, dropped: 0 });
    let delivered = receiver.wait_for(4, DEADLINE).await.remove(3);
    assert_eq!(delivery_id(&delivered), delivery_id(&attempts[0]));
    assert_eq!(delivered.body, attempts[0].body);
    record_when(&pipeline, &user, &delivery_id(&delivered), |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!(dead_letters(&pipeline).await, 0);
    let again = pipeline.api.admin.redrive(&sqs(), &pipeline.queues.dead_letter, &pipeline.queues.retry).await.unwrap();
    assert_eq!(again, careerctl::admin::Redriven { moved: 0, dropped: 0 });
}

/// Contract section 12: a dead letter whose delivery was retried by hand and succeeded is a
/// stale copy; the redrive drops it unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redrive_drops_a_dead_letter_whose_delivery_succeeded_since() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[503, 503, 503, 200], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let id = delivery_id(&receiver.wait_for(3, DEADLINE).await[0]);
    until_dead_lettered(&pipeline, 1).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    post(&pipeline, &key, &format!("/api/v1/webhooks/deliveries/retry?id={id}")).await;
    record_when(&pipeline, &user, &id, |r| r.status == DeliveryStatus::Succeeded).await;

    let redriven =
        pipeline.api.admin.redrive(&sqs(), &pipeline.queues.dead_letter, &pipeline.queues.retry).await.unwrap();
    assert_eq!(redriven, careerctl::admin::Redriven { moved: 0, dropped: 1 });
    assert_eq!(dead_letters(&pipeline).await, 0, "the stale copy left the dead-letter queue");
    // Were it sent, it would be on a lane until it was; it never was.
    pipeline.drained().await;
    assert_eq!(receiver.received().len(), 4, "one 2xx for {id} ({subscription}), no second");
    let record = record_when(&pipeline, &user, &id, |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!(record.attempts, 4);
}

/// Contract section 9: `skipped` means never sent. A retry pending when its subscription is
/// paused is not sent again and ends `failed`, saying why, with the answer its attempt got
/// (and no dead letter: no attempt ran out); a delivery created while paused is `skipped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_pending_when_its_subscription_is_paused_ends_failed_and_a_new_delivery_skipped() {
    // A retry about 5 s after the first attempt: time to pause before it.
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(5)).await;
    let user = unique_user();
    let receiver = Receiver::answering(&[500, 200], "try later", NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.full_key(&user).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let sent = delivery_id(&receiver.wait_for(1, DEADLINE).await[0]);
    record_when(&pipeline, &user, &sent, |r| r.status == DeliveryStatus::Pending && r.attempts == 1).await;

    let path = format!("/api/v1/webhooks?id={subscription}");
    let pause = r#"{"enabled":false,"whileDisabled":"skip"}"#;
    let paused = pipeline.api.send_json(Method::PATCH, &path, &key, pause).await;
    assert_eq!(paused.assert_status(200)["enabled"], false);
    let stopped = record_when(&pipeline, &user, &sent, |r| r.status != DeliveryStatus::Pending).await;
    assert_eq!(
        (stopped.status, stopped.last_error.as_deref()),
        (DeliveryStatus::Failed, Some("not sent again: the subscription is disabled"))
    );
    assert_eq!((stopped.attempts, stopped.last_response_status), (1, Some(500)), "its one attempt's answer");
    assert_eq!(stopped.last_response_body.as_deref(), Some("try later"));
    assert_eq!((stopped.next_attempt_at, stopped.succeeded_at), (None, None));
    assert_eq!(receiver.received().len(), 1, "the retry was not sent");
    assert_eq!(dead_letters(&pipeline).await, 0);
    let failed = listed(&pipeline, &key, &subscription, "failed").await;
    assert_eq!(failed, [serde_json::to_value(&stopped).unwrap()]);

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let skipped = skipped_deliveries(&pipeline, &key, &subscription).await;
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!((&skipped[0]["attempts"], &skipped[0]["lastResponseStatus"]), (&json!(0), &Value::Null));
    assert_eq!(skipped[0]["lastError"], "not sent: the subscription is disabled");
}
