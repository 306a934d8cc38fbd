//! `careerctl local` when the SQS emulator dies (contract section 12): nothing that was on its
//! way is lost without a trace. This drives the entry point `careerctl local` runs and stops
//! it with a real SIGINT, so it has a test binary of its own: the signal goes to the whole
//! process.

use std::time::Duration;

use career_core::config::TableNames;
use career_core::delivery::log::DeliveryStatus;
use career_core::store::deliveries::DeliveryTable;
use career_service::local_run::{ctrl_c, run_local, LocalDir, Running};
use career_service::receiver::Receiver;
use career_service::{eventually, typed, unique_user, DEADLINE};

/// Contract section 12: after the SQS emulator is killed in the middle of a burst and the
/// stack restarts, every delivery is sent at least once (or shows as failed); none is lost
/// without a trace. What was queued died with the emulator; the records are the truth, and
/// the sweep puts the overdue ones back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_sqs_emulator_in_a_burst_loses_no_delivery() {
    const EVENTS: usize = 15;
    let local_dir = LocalDir::create();
    let mut settings = local_aws::stack::settings_from_env().unwrap();
    settings.sweep_after = Duration::from_secs(2);
    let first_run = tokio::spawn(run_local(local_dir.path.clone(), settings.clone()));
    let stack = Running::wait_for(&local_dir.path).await;
    let receiver = Receiver::start(&[200], Duration::from_millis(200)).await;
    let user = unique_user();
    let subscription = stack.subscribe(&user, &receiver.url).await;
    for _ in 0..EVENTS {
        stack.admin.update_profile(&user).await.unwrap();
    }
    receiver.wait_for(2, DEADLINE).await;
    let killed = std::process::Command::new("kill").args(["-KILL", &stack.sqs_emulator_pid().to_string()]).status();
    assert!(killed.is_ok_and(|status| status.success()), "SIGKILL sent");
    let ended = first_run.await.unwrap().expect_err("a dead emulator stops the stack");
    assert!(ended.contains("could not be saved") && ended.contains("sweep"), "{ended}");
    let arrived_before = receiver.received().len();
    assert!(arrived_before < EVENTS, "the kill came in the middle of the burst ({arrived_before} arrived)");
    stack.wait_until_stopped().await;

    let mut second_run = tokio::spawn(run_local(local_dir.path.clone(), settings));
    // A second run that fails to start says why, rather than leave the wait to time out.
    let restarted = tokio::select! {
        running = Running::wait_for(&local_dir.path) => running,
        ended = &mut second_run => panic!("the second run ended before it answered: {ended:?}"),
    };
    let table = DeliveryTable::new(restarted.clients().dynamodb().clone(), &TableNames::from_env().deliveries);
    let records = eventually(format!("{EVENTS} records settled"), || async {
        let page = table.list(&typed(&subscription), None, 100, None).await.unwrap();
        let settled = page.deliveries.iter().all(|r| r.status != DeliveryStatus::Pending);
        if page.deliveries.len() == EVENTS && settled {
            Ok(page.deliveries)
        } else {
            Err(page.deliveries)
        }
    })
    .await;
    let received: Vec<String> = receiver.received().iter().map(|r| r.header("webhook-id").to_owned()).collect();
    for record in &records {
        assert_eq!(record.status, DeliveryStatus::Succeeded, "{record:?}");
        assert!(received.contains(&record.id.to_string()), "{} was never sent", record.id);
    }
    ctrl_c();
    second_run.await.unwrap().expect("the second run stops cleanly");
}
