//! Probing a failing subscription back (contract section 20): a subscription disabled for
//! `failing` is probed on the shortened schedule (the same two settings), a probe is a logged
//! `webhook.ping` with `"probe": true`, a failed probe leaves it disabled until the next, and a
//! 2xx enables it again, releases what it held and raises `webhook.endpoint.recovered` with
//! `"reenabled": true`; a paused subscription is never probed. A probe counts in the metrics
//! as a probe, not as an attempt or a failure; and a subscription disabled for failing by a
//! version from before probes gets its probes from `careerctl webhooks arm-probes`.

use std::time::Duration;

use career_core::clock::Timestamp;
use career_core::store::webhooks::WebhookTable;
use career_core::webhooks::DisabledReason;
use career_service::logs::capture_logs;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{dynamodb, eventually, typed, unique_user, DEADLINE};
use careerctl::admin::probe_schedule;
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
pub(crate) async fn shown_when(pipeline: &Pipeline, key: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
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
    let pipeline = Pipeline::probing(Duration::from_secs(2)).await;
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

/// The metrics' line of each attempt of `delivery` in `logged` (Embedded Metric Format).
fn metric_lines(logged: &str, delivery: &str) -> Vec<Value> {
    let lines = logged.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok());
    lines.filter(|line| line["delivery_id"] == delivery && line.get("_aws").is_some()).collect()
}

/// A probe is a check of a disabled subscription, not traffic: its line counts it as one of
/// `Probes`, and as no attempt, failure or latency, which the failure-rate alarm divides;
/// the attempts before it count as they always did.
#[test]
fn a_failed_probe_counts_as_a_probe_and_not_as_a_failed_attempt() {
    // One thread runs the pipeline, so every line it logs is on this thread's capture.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut seen = None;
    let logged = capture_logs(|| {
        seen = Some(runtime.block_on(async {
            let pipeline = Pipeline::probing(Duration::from_secs(1)).await;
            let user = unique_user();
            let receiver = Receiver::start(&[500], NO_DELAY).await;
            let (failing, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
            let key = pipeline.api.full_key(&user).await;
            pipeline.api.admin.update_profile(&user).await.unwrap();
            let received = receiver.wait_for(4, DEADLINE).await;
            assert_eq!(received[3].json()["data"]["probe"], true, "the fourth request is the first probe");
            // The probe's record is written after its line: once it is failed, the line is there.
            let path = format!("/api/v1/webhooks/deliveries?id={failing}&status=failed");
            let probe = received[3].header("x-webhook-delivery").to_owned();
            eventually("the probe recorded failed", || async {
                let listed = pipeline.api.get(&path, &key).await.assert_status(200)["deliveries"].clone();
                let ids: Vec<&str> = listed.as_array().unwrap().iter().filter_map(|d| d["id"].as_str()).collect();
                if ids.contains(&probe.as_str()) {
                    Ok(())
                } else {
                    Err(listed.clone())
                }
            })
            .await;
            (received[0].header("x-webhook-delivery").to_owned(), probe)
        }))
    });
    let (delivery, probe) = seen.unwrap();
    let counts = |line: &Value| ["Attempts", "Failures", "Exhausted", "Probes"].map(|name| line[name].clone());
    let attempts = metric_lines(&logged, &delivery);
    assert_eq!(attempts.len(), 3, "{attempts:#?}");
    assert_eq!(counts(&attempts[0]), [json!(1), json!(1), json!(0), json!(0)], "{}", attempts[0]);
    assert_eq!(counts(&attempts[2]), [json!(1), json!(1), json!(1), json!(0)], "the last: {}", attempts[2]);
    let probed = metric_lines(&logged, &probe);
    assert_eq!(probed.len(), 1, "{probed:#?}");
    assert_eq!(counts(&probed[0]), [json!(0), json!(0), json!(0), json!(1)], "{}", probed[0]);
    assert!(probed[0].get("SendLatency").is_none(), "{}", probed[0]);
}

/// A subscription disabled for failing by a version from before probes has no probe set and no
/// probe marker, so the sweep would never probe it. `careerctl webhooks arm-probes` (run once
/// after the upgrade) arms it at its schedule's next slot, once; it is probed and a 2xx brings
/// it back. One disabled longer ago than probing lasts is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn arm_probes_probes_a_subscription_disabled_for_failing_before_probes_once() {
    let pipeline = Pipeline::probing(Duration::from_secs(1)).await;
    let user = unique_user();
    let (receiver, ended_receiver) = (Receiver::start(&[200], NO_DELAY).await, Receiver::start(&[200], NO_DELAY).await);
    let (recent, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let (long_ago, _) = pipeline.subscribe(&user, &ended_receiver.url, &["profile.updated"]).await;
    // As the version before probes disabled them: no probe set, no marker.
    let webhooks = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    let now = Timestamp::now();
    for (id, ago) in [(&recent, 5), (&long_ago, 700)] {
        let at = now - Duration::from_secs(ago);
        let disabled = webhooks.disable(&typed(&user), &typed(id), (DisabledReason::Failing, None), None, at).await;
        assert!(disabled.unwrap());
    }
    let key = pipeline.api.full_key(&user).await;
    let before = shown(&pipeline, &key, &recent).await;
    assert_eq!((&before["disabledReason"], &before["nextProbeAt"]), (&json!("failing"), &Value::Null), "{before}");

    let schedule = probe_schedule(pipeline.settings());
    let armed = pipeline.api.admin.arm_probes(&schedule, Timestamp::now()).await.unwrap();
    assert_eq!((armed.armed, armed.ended), (1, 1));
    let again = pipeline.api.admin.arm_probes(&schedule, Timestamp::now()).await.unwrap();
    assert_eq!((again.armed, again.ended), (0, 1), "armed once");

    let probe = receiver.wait_for(1, DEADLINE).await.remove(0).json();
    assert_eq!(
        (&probe["type"], &probe["data"]),
        (&json!("webhook.ping"), &json!({"subscriptionId": recent, "probe": true}))
    );
    let back = shown_when(&pipeline, &key, &recent, |s| s["enabled"] == true).await;
    assert_eq!(back["disabledReason"], Value::Null);
    pipeline.idle().await;
    let ended = shown(&pipeline, &key, &long_ago).await;
    assert_eq!((&ended["enabled"], &ended["nextProbeAt"]), (&json!(false), &Value::Null), "{ended}");
    assert!(ended_receiver.received().is_empty(), "probing had ended for it");
    assert_eq!(receiver.received().len(), 1, "probed once");
}
