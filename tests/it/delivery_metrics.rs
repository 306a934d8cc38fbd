//! The deliver function's metrics as CloudWatch reads them from its log lines (Embedded Metric
//! Format): what the alarms of template.yaml watch.

use std::time::{Duration, Instant};

use career_core::delivery::log::DeliveryStatus;
use career_core::telemetry::FIRST_ATTEMPT_WAIT;
use career_service::logs::capture_logs;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::{eventually, unique_user, DEADLINE};
use lambda_http::http::Method;
use serde_json::{json, Value};

const NO_DELAY: Duration = Duration::ZERO;

/// The backlog alarm watches `FirstAttemptWait`: a first attempt from the main lane reports how
/// long after its change it started, failed or not; its retry does not (it waited for its
/// schedule), nor does a first attempt to a subscription with `maxDeliveriesPerSecond` (its
/// deliveries wait on the main lane by design).
#[test]
fn a_first_attempt_reports_its_wait_and_neither_a_retry_nor_a_rate_limited_attempt_does() {
    // One thread runs the pipeline, so every line it logs is on this thread's capture.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let began = Instant::now();
    let mut seen = None;
    let logged =
        capture_logs(|| seen = Some(runtime.block_on(a_change_to_a_failing_once_and_a_limited_subscription())));
    let (unlimited, limited) = seen.unwrap();
    let attempts = |delivery: &str| -> Vec<Value> {
        let lines = logged.lines().filter_map(|line| serde_json::from_str::<Value>(line).ok());
        lines.filter(|line| line["delivery_id"] == delivery && line.get("_aws").is_some()).collect()
    };

    let unlimited = attempts(unlimited.header("x-webhook-delivery"));
    assert_eq!(unlimited.iter().map(|line| line["attempt"].clone()).collect::<Vec<_>>(), [json!(1), json!(2)]);
    let waited = unlimited[0][FIRST_ATTEMPT_WAIT].as_f64().unwrap_or_else(|| panic!("no wait: {}", unlimited[0]));
    assert!(waited >= 0.0 && waited <= began.elapsed().as_secs_f64(), "measured from the change: {waited}");
    let directives = unlimited[0]["_aws"]["CloudWatchMetrics"].as_array().unwrap();
    let names: Vec<&Value> =
        directives.iter().flat_map(|d| d["Metrics"].as_array().unwrap()).map(|m| &m["Name"]).collect();
    assert!(names.contains(&&json!(FIRST_ATTEMPT_WAIT)), "{}", unlimited[0]);
    assert!(unlimited[1].get(FIRST_ATTEMPT_WAIT).is_none(), "a retry: {}", unlimited[1]);

    let limited = attempts(limited.header("x-webhook-delivery"));
    assert_eq!(limited.len(), 1, "{limited:#?}");
    assert!(limited[0].get(FIRST_ATTEMPT_WAIT).is_none(), "a rate-limited attempt: {}", limited[0]);
}

/// A profile change to two subscriptions of one user: one whose receiver fails the first
/// attempt, one with `maxDeliveriesPerSecond`. What the first's receiver got second (the
/// retry) and what the second's got, once both deliveries have succeeded and the lanes are
/// empty (each attempt's line is written before its message leaves its lane).
async fn a_change_to_a_failing_once_and_a_limited_subscription() -> (Received, Received) {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let failing_once = Receiver::start(&[500, 200], NO_DELAY).await;
    let limited = Receiver::start(&[200], NO_DELAY).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    for (url, rate) in [(&failing_once.url, json!(null)), (&limited.url, json!(5))] {
        let body = json!({"url": url, "events": ["profile.updated"], "maxDeliveriesPerSecond": rate}).to_string();
        pipeline.api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await.assert_status(201);
    }

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let (mut failing_once, mut limited) =
        (failing_once.wait_for(2, DEADLINE).await, limited.wait_for(1, DEADLINE).await);
    let (retried, limited) = (failing_once.remove(1), limited.remove(0));
    for received in [&retried, &limited] {
        let delivery = received.header("x-webhook-delivery").to_owned();
        eventually(format!("{delivery} succeeded"), || async {
            let stored = career_service::delivery_record(&pipeline.settings().tables, &user, &delivery).await;
            match stored {
                Some(stored) if stored.record.status == DeliveryStatus::Succeeded => Ok(()),
                other => Err(other.map(|s| s.record)),
            }
        })
        .await;
    }
    pipeline.drained().await;
    (retried, limited)
}
