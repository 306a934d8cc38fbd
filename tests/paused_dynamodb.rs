//! A hung DynamoDB: with DynamoDB Local paused (SIGSTOP), a request gets a 500
//! `internal_error` before the API functions' Lambda timeout; resumed (SIGCONT), requests
//! succeed again. The test pauses a DynamoDB Local of its own, so no other test waits on it.

use std::process::Command;
use std::time::Duration;

use career_service::{clients_at, installed, settings_without_kms_or_queues, unique_user, Answer, Api};
use careerctl::resources::create_tables;
use careerctl::template::Template;

/// `Timeout` of the API functions in template.yaml: Lambda ends an invocation after it.
const LAMBDA_TIMEOUT: Duration = Duration::from_secs(10);

/// A stopped process, continued when this is dropped (also when the test fails).
struct Paused(u32);

impl Paused {
    fn new(pid: u32) -> Self {
        signal("STOP", pid);
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal("CONT", self.0);
    }
}

fn signal(name: &str, pid: u32) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().expect("kill runs");
    assert!(status.success(), "kill -{name} {pid}");
}

/// The answer, or a failure if it would have come after Lambda ended the invocation.
async fn within_lambda_timeout(answer: impl std::future::Future<Output = Answer>) -> Answer {
    tokio::time::timeout(LAMBDA_TIMEOUT, answer).await.expect("an answer before the Lambda timeout")
}

#[tokio::test]
async fn a_paused_dynamodb_gives_internal_error_before_the_lambda_timeout_then_recovers() {
    let own = installed().start_dynamodb(None).await.expect("a DynamoDB Local of this test");
    // No request here touches a webhook secret or a queue, so KMS and SQS are never called.
    let unreachable = "http://127.0.0.1:9";
    let clients = clients_at(&own.endpoint, unreachable);
    let settings = settings_without_kms_or_queues(unreachable);
    create_tables(&Template::shipped(), clients.dynamodb(), &settings.tables).await.expect("tables");
    let api = Api::on(clients, settings);
    let user = unique_user();
    let cached = api.full_key(&user).await;
    let uncached = api.full_key(&user).await;
    api.get("/api/v1/alerts", &cached).await.assert_status(200);

    let paused = Paused::new(own.process_id().expect("the DynamoDB Local process"));
    // A key the instance has cached (the rate-limit count hangs) and one it must look up.
    within_lambda_timeout(api.get("/api/v1/alerts", &cached)).await.assert_error(500, "internal_error");
    within_lambda_timeout(api.get("/api/v1/data-sharing", &uncached)).await.assert_error(500, "internal_error");
    drop(paused);

    within_lambda_timeout(api.get("/api/v1/alerts", &cached)).await.assert_status(200);
    within_lambda_timeout(api.get("/api/v1/data-sharing", &uncached)).await.assert_status(200);
}
