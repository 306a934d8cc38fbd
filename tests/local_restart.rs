//! `careerctl local` across a Ctrl-C: the deliveries its queues hold, waiting for their first
//! attempt or for a retry, are saved with their remaining waits and delivered once after the
//! restart. This drives the entry point `careerctl local` runs (careerctl::local::run) and
//! stops it with a real SIGINT, so it has a test binary of its own: the signal goes to the
//! whole process.

use std::time::Duration;

use career_service::local_run::{ctrl_c, run_local, LocalDir, Running};
use career_service::receiver::Receiver;
use career_service::unique_user;
use career_service::DEADLINE;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_and_retry_pending_deliveries_survive_a_ctrl_c_and_arrive_once() {
    let local_dir = LocalDir::create();
    let mut settings = local_aws::stack::settings_from_env().unwrap();
    // The flaky receiver's retry comes after 48 to 72 s: still pending at the Ctrl-C, also on
    // a machine busy enough to take half a minute to get there.
    settings.retry_base = Duration::from_secs(60);
    let first_run = tokio::spawn(run_local(local_dir.path.clone(), settings.clone()));
    let stack = Running::wait_for(&local_dir.path).await;

    // The slow receiver answers once the stack is stopping (within the 10 s a send may take):
    // while its first delivery is in flight, the subscription's later ones wait on the main
    // lane (a FIFO queue: nothing more of a message group is received while one is in flight).
    let slow = Receiver::holding(&[200]).await;
    let flaky = Receiver::start(&[500, 200], Duration::ZERO).await;
    let (slow_user, flaky_user) = (unique_user(), unique_user());
    stack.subscribe(&slow_user, &slow.url).await;
    stack.subscribe(&flaky_user, &flaky.url).await;

    // The flaky receiver fails its first attempt, which goes to the retry lane to wait.
    stack.admin.update_profile(&flaky_user).await.unwrap();
    flaky.wait_for(1, DEADLINE).await;
    // Three events for the slow receiver: the first in flight, then two queued behind it
    // (had they come together, one batch would have taken all three).
    stack.admin.update_profile(&slow_user).await.unwrap();
    slow.wait_for(1, DEADLINE).await;
    let (second, third) = tokio::join!(stack.admin.update_profile(&slow_user), stack.admin.update_profile(&slow_user));
    second.unwrap();
    third.unwrap();
    stack.wait_until_queued(3, 1).await;
    ctrl_c();
    stack.wait_until_stopping().await;
    // A receive under way when the stack stops is finished, not dropped (its messages would
    // stay invisible), so the slow answer waits for it: a long poll, which would otherwise
    // take the two queued deliveries as soon as the answer frees their message group.
    tokio::time::sleep(local_aws::event_sources::pumps::RECEIVE_WAIT * 2).await;
    slow.open();
    first_run.await.unwrap().expect("the first run stops cleanly");

    assert_eq!(slow.received().len(), 1, "the delivery in flight finished; the queued ones waited");
    assert_eq!(flaky.received().len(), 1, "the retry was still waiting");
    let saved: Value =
        serde_json::from_slice(&std::fs::read(local_dir.path.join("data/queued-deliveries.json")).unwrap()).unwrap();
    assert_eq!(saved["queues"]["main lane"].as_array().map(Vec::len), Some(2), "{saved}");
    let retry = &saved["queues"]["retry lane"][0];
    assert!(retry["waitMillis"].as_u64().is_some_and(|wait| wait > 0), "saved with its remaining wait: {saved}");
    let body: Value = serde_json::from_str(retry["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["deliveryId"].as_str(), Some(flaky.received()[0].header("x-webhook-delivery")));
    stack.wait_until_stopped().await;

    let second_run = tokio::spawn(run_local(local_dir.path.clone(), settings));
    let restarted = Running::wait_for(&local_dir.path).await;
    assert!(!local_dir.path.join("data/queued-deliveries.json").exists(), "the snapshot was used up");
    let deliveries = slow.wait_for(3, DEADLINE).await;
    let mut ids: Vec<&str> = deliveries.iter().map(|d| d.header("x-webhook-delivery")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "three different deliveries");
    let retried = flaky.wait_for(2, DEADLINE).await;
    assert_eq!(retried[0].header("x-webhook-delivery"), retried[1].header("x-webhook-delivery"));

    // Nothing is left to send or to save, and nothing arrived twice.
    restarted.wait_until_queued(0, 0).await;
    assert_eq!((slow.received().len(), flaky.received().len()), (3, 2));
    ctrl_c();
    second_run.await.unwrap().expect("the second run stops cleanly");
    assert!(!local_dir.path.join("data/queued-deliveries.json").exists(), "empty queues leave no snapshot");
}
