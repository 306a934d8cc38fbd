//! A hung DynamoDB: with DynamoDB Local paused (SIGSTOP), a request gets a 500
//! `internal_error` before the API functions' Lambda timeout; resumed (SIGCONT), requests
//! succeed again. The test pauses a DynamoDB Local of its own, so no other test waits on it.
//! And the benchmarks' clean slate: a local stack's DynamoDB Local replaced by an empty one on
//! the same endpoint, with the template's tables made again.

use std::process::Command;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use career_service::{
    base_settings, clients_at, clients_with_limits_at, eventually, installed, settings_without_kms_or_queues,
    unique_user, Answer, Api,
};
use career_template::tables::create_tables;
use careerctl::admin::Admin;
use local_aws::stack::LocalStack;
use local_aws::template::Template;

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

/// Waits until `path` answers `key` 200 within the Lambda timeout. DynamoDB Local answers
/// its first calls after a start or a pause slowly, and on a busy machine a call may then
/// reach AWS's time limits and get a 500 before one gets through.
async fn until_ok(api: &Api, path: &str, key: &str) {
    eventually(format!("{path} answering 200"), || async {
        // Boxed: the request's future nested in the wait is too deep for the compiler's layout.
        let answer = within_lambda_timeout(Box::pin(api.get(path, key))).await;
        if answer.status == 200 {
            Ok(())
        } else {
            Err(answer)
        }
    })
    .await
}

#[tokio::test]
async fn a_paused_dynamodb_gives_internal_error_before_the_lambda_timeout_then_recovers() {
    let own = installed().start_dynamodb(None).await.expect("a DynamoDB Local of this test");
    // No request here touches a webhook secret or a queue, so KMS and SQS are never called.
    let unreachable = "http://127.0.0.1:9";
    let settings = settings_without_kms_or_queues(unreachable);
    // The functions have AWS's time limits (the test is about them); the test's own writes
    // have the local stack's.
    let setup = clients_at(&own.endpoint, unreachable);
    create_tables(&Template::shipped(), setup.dynamodb(), &settings.tables).await.expect("tables");
    let mut api = Api::on(clients_with_limits_at(&own.endpoint, unreachable, 1), settings);
    api.admin = Admin::new(setup.dynamodb().clone(), api.settings.tables.clone());
    let user = unique_user();
    let cached = api.full_key(&user).await;
    let uncached = api.full_key(&user).await;
    until_ok(&api, "/api/v1/alerts", &cached).await;

    let paused = Paused::new(own.process_id().expect("the DynamoDB Local process"));
    // A key the instance has cached (the rate-limit count hangs) and one it must look up.
    within_lambda_timeout(api.get("/api/v1/alerts", &cached)).await.assert_error(500, "internal_error");
    within_lambda_timeout(api.get("/api/v1/data-sharing", &uncached)).await.assert_error(500, "internal_error");
    drop(paused);

    until_ok(&api, "/api/v1/alerts", &cached).await;
    until_ok(&api, "/api/v1/data-sharing", &uncached).await;
}

/// The rate limit's count is an `ADD`: a count that DynamoDB applies after its attempt's time
/// limit is not sent again, so the request is counted once. With DynamoDB Local paused for
/// longer than an attempt may take and resumed within the whole call's limit, the request is
/// answered, and the budget it used is one request.
#[tokio::test]
async fn a_count_answered_after_the_attempt_limit_counts_the_request_once() {
    // Three times AWS's limits (6 s an attempt, 12 s a call): the pause outlasts an attempt,
    // and a busy machine still has seconds to answer within the call's limit.
    const FACTOR: u32 = 3;
    const PAUSE: Duration = Duration::from_secs(8);
    let own = installed().start_dynamodb(None).await.expect("a DynamoDB Local of this test");
    let unreachable = "http://127.0.0.1:9";
    let settings = settings_without_kms_or_queues(unreachable);
    let setup = clients_at(&own.endpoint, unreachable);
    create_tables(&Template::shipped(), setup.dynamodb(), &settings.tables).await.expect("tables");
    let mut api = Api::on(clients_with_limits_at(&own.endpoint, unreachable, FACTOR), settings);
    api.admin = Admin::new(setup.dynamodb().clone(), api.settings.tables.clone());
    let key = api.full_key(unique_user()).await;
    let remaining = |answer: &Answer| answer.header("ratelimit-remaining").map(str::to_owned);
    let first = api.get("/api/v1/alerts", &key).await;
    first.assert_status(200);
    let before: u32 = remaining(&first).expect("the rate limit's headers").parse().unwrap();

    let paused = Paused::new(own.process_id().expect("the DynamoDB Local process"));
    let resume = tokio::spawn(async move {
        tokio::time::sleep(PAUSE).await;
        drop(paused);
    });
    let answer = api.get("/api/v1/alerts", &key).await;
    resume.await.unwrap();
    answer.assert_status(200);
    assert_eq!(remaining(&answer), Some((before - 1).to_string()), "one request, counted once: {answer:?}");
}

#[tokio::test]
async fn a_restarted_dynamodb_is_empty_on_the_same_endpoint_with_the_templates_tables() {
    let mut stack = LocalStack::start(&installed(), None, base_settings()).await.expect("a local stack of this test");
    let endpoint = stack.dynamodb.endpoint.clone();
    let dynamodb = stack.clients().dynamodb().clone();
    let table = stack.settings.tables.deliveries.clone();
    let key = [
        ("logPartition".to_owned(), AttributeValue::S("whk_restart#0".into())),
        ("deliveryId".to_owned(), AttributeValue::S("dlv_restart".into())),
    ];
    dynamodb.put_item().table_name(&table).set_item(Some(key.clone().into())).send().await.expect("a record");
    let stray = format!("{}-stray", unique_user());
    create_tables(&Template::shipped(), &dynamodb, &career_core::config::TableNames::with_prefix(&stray))
        .await
        .expect("another stack's tables");
    let tables_before = dynamodb.list_tables().send().await.expect("tables").table_names().len();
    let process_before = stack.dynamodb.process_id();

    stack.restart_dynamodb(&installed()).await.expect("a fresh DynamoDB Local");

    assert_eq!(stack.dynamodb.endpoint, endpoint);
    assert_ne!(stack.dynamodb.process_id(), process_before, "a new process");
    let tables: Vec<String> =
        dynamodb.list_tables().send().await.expect("the same client reaches it").table_names().to_vec();
    assert!(tables.contains(&table), "the template's tables are made again: {tables:?}");
    assert!(tables.iter().all(|t| !t.starts_with(&stray)), "another stack's tables are gone: {tables:?}");
    assert!(tables.len() < tables_before);
    let record = dynamodb.get_item().table_name(&table).set_key(Some(key.into())).send().await.expect("a read");
    assert!(record.item().is_none(), "the old record is gone");
}
