//! Probing a failing subscription back (contract section 20): a subscription disabled for
//! `failing` is probed on the shortened schedule (the same two settings), a probe is a logged
//! `webhook.ping` with `"probe": true`, a failed probe leaves it disabled until the next, and a
//! 2xx enables it again, releases what it held and raises `webhook.endpoint.recovered` with
//! `"reenabled": true`; a paused subscription is never probed.

use std::time::Duration;

use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{eventually, unique_user, DEADLINE};
use lambda_http::http::Method;
use serde_json::{json, Value};

const NO_DELAY: Duration = Duration::ZERO;

/// The user's subscription `id` as listed.
async fn shown(pipeline: &Pipeline, key: &str, id: &str) -> Value {
    let listed = pipeline.api.get("/api/v1/webhooks", key).await;
    let webhooks = listed.assert_status(200)["webhooks"].as_array().unwrap().clone();
    webhooks.into_iter().find(|s| s["id"] == id).expect("the subscription listed")
}

/// Waits until the subscription `id`, as listed, satisfies `done`.
async fn shown_when(pipeline: &Pipeline, key: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(format!("{id} as wanted"), || async {
        let shown = shown(pipeline, key, id).await;
        if done(&shown) {
            Ok(shown)
        } else {
            Err(shown)
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_subscription_is_probed_and_a_2xx_brings_it_back_with_what_it_held() {
    let mut pipeline = Pipeline::with_settings(true, |s| {
        s.webhook_disable_after = Duration::from_millis(500);
        s.probe_after = Duration::from_secs(2);
        s.probe_for = Duration::from_secs(600);
    })
    .await;
    pipeline.sweep_every(Duration::from_millis(300));
    let user = unique_user();
    // Three failed attempts disable it; the first probe fails, the second succeeds.
    let receiver = Receiver::answering(&[500, 500, 500, 500, 200], "down", NO_DELAY).await;
    let (failing, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let watcher = Receiver::start(&[200], NO_DELAY).await;
    pipeline.subscribe(&user, &watcher.url, &["webhook.endpoint.recovered"]).await;
    let paused_receiver = Receiver::start(&[200], NO_DELAY).await;
    let (paused, _) = pipeline.subscribe(&user, &paused_receiver.url, &["assessment.completed"]).await;
    let key = pipeline.api.full_key(&user).await;
    let path = format!("/api/v1/webhooks?id={paused}");
    pipeline.api.send_json(Method::PATCH, &path, &key, r#"{"enabled": false}"#).await.assert_status(200);

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let disabled = shown_when(&pipeline, &key, &failing, |s| s["enabled"] == false).await;
    assert_eq!(disabled["disabledReason"], "failing");
    let first_probe_at = disabled["nextProbeAt"].as_str().expect("a disabled-for-failing subscription is probed");
    let manual = shown(&pipeline, &key, &paused).await;
    assert!(manual.get("nextProbeAt").is_none(), "a paused subscription is never probed: {manual}");
    // Held while disabled.
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let held = eventually("a held delivery", || async {
        let path = format!("/api/v1/webhooks/deliveries?id={failing}&status=held");
        let listed = pipeline.api.get(&path, &key).await.assert_status(200)["deliveries"].clone();
        listed.as_array().and_then(|d| d.first().cloned()).ok_or(listed)
    })
    .await;

    // The first probe, answered 500: still disabled, the next probe later.
    let probe = receiver.wait_for(4, DEADLINE).await.remove(3);
    let body = probe.json();
    assert_eq!(
        (&body["type"], &body["data"]),
        (&json!("webhook.ping"), &json!({"subscriptionId": failing, "probe": true}))
    );
    let still = shown_when(&pipeline, &key, &failing, |s| s["nextProbeAt"] != first_probe_at).await;
    assert_eq!((&still["enabled"], &still["disabledReason"]), (&json!(false), &json!("failing")), "{still}");
    assert!(still["nextProbeAt"].as_str().unwrap() > first_probe_at, "{still}");

    // The second, answered 200: enabled again, what it held released, the owner told.
    let received = receiver.wait_for(6, DEADLINE).await;
    assert_eq!(received[4].json()["data"]["probe"], true);
    assert_eq!(received[5].header("x-webhook-delivery"), held["id"], "the held delivery, released");
    let back = shown_when(&pipeline, &key, &failing, |s| s["enabled"] == true).await;
    assert_eq!(back["disabledReason"], Value::Null);
    assert!(back.get("nextProbeAt").is_none() && back.get("failingSince").is_none(), "{back}");
    let told = watcher.wait_for(1, DEADLINE).await.remove(0).json();
    assert_eq!(told["type"], "webhook.endpoint.recovered");
    assert_eq!((&told["data"]["subscriptionId"], &told["data"]["reenabled"]), (&json!(failing), &json!(true)));

    // The probes are in the log, one attempt each.
    let log = pipeline.api.get(&format!("/api/v1/webhooks/deliveries?id={failing}"), &key).await;
    let log = log.assert_status(200)["deliveries"].as_array().unwrap().clone();
    let probes: Vec<(&Value, &Value)> =
        log.iter().filter(|d| d["eventType"] == "webhook.ping").map(|d| (&d["status"], &d["attempts"])).collect();
    assert_eq!(probes, [(&json!("succeeded"), &json!(1)), (&json!("failed"), &json!(1))], "newest first");
    pipeline.idle().await;
    assert!(paused_receiver.received().is_empty(), "the paused subscription was sent nothing, no probe");
    assert_eq!(watcher.received().len(), 1);
}
