//! `careerctl local` across a Ctrl-C: the deliveries its queues hold, waiting for their first
//! attempt or for a retry, are saved with their remaining waits and delivered once after the
//! restart. This drives the entry point `careerctl local` runs (careerctl::local::run) and
//! stops it with a real SIGINT, so it has a test binary of its own: the signal goes to the
//! whole process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use career_core::config::TableNames;
use career_core::credentials::Scopes;
use career_service::receiver::Receiver;
use career_service::{dynamodb_at, sqs_at, unique_user};
use careerctl::admin::Admin;
use careerctl::services::free_port;
use serde_json::Value;

const SOON: Duration = Duration::from_secs(30);
/// The slow receiver's answer time: while it is in flight, the slow subscription's later
/// deliveries wait on the main lane (one batch per subscription at a time).
const SLOW_ANSWER: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn queued_and_retry_pending_deliveries_survive_a_ctrl_c_and_arrive_once() {
    let local_dir = LocalDir::new();
    let mut settings = careerctl::local::settings_from_env().unwrap();
    // The flaky receiver's retry comes after 12 to 18 s: still pending at the Ctrl-C.
    settings.retry_base = Duration::from_secs(15);
    let first_run = tokio::spawn(run_local(local_dir.path.clone(), settings.clone()));
    let stack = Running::wait_for(&local_dir.path).await;

    let slow = Receiver::start(&[200], SLOW_ANSWER).await;
    let flaky = Receiver::start(&[500, 200], Duration::ZERO).await;
    let (slow_user, flaky_user) = (unique_user(), unique_user());
    stack.subscribe(&slow_user, &slow.url).await;
    stack.subscribe(&flaky_user, &flaky.url).await;

    // The flaky receiver fails its first attempt, which goes to the retry lane to wait.
    stack.admin.update_profile(&flaky_user).await.unwrap();
    flaky.wait_for(1, SOON).await;
    // Three events for the slow receiver: the first in flight, two queued behind it.
    for _ in 0..3 {
        stack.admin.update_profile(&slow_user).await.unwrap();
    }
    slow.wait_for(1, SOON).await;
    stack.wait_until_queued(3, 1).await;
    ctrl_c();
    first_run.await.unwrap().expect("the first run stops cleanly");

    assert_eq!(slow.received().len(), 1, "the delivery in flight finished; the queued ones waited");
    assert_eq!(flaky.received().len(), 1, "the retry was still waiting");
    let saved: Value =
        serde_json::from_slice(&std::fs::read(local_dir.path.join("data/queued-deliveries.json")).unwrap()).unwrap();
    assert_eq!(saved["queues"]["main lane"].as_array().map(Vec::len), Some(2), "{saved}");
    let retry = &saved["queues"]["retry lane"][0];
    assert!(retry["waitMillis"].as_u64().is_some_and(|wait| wait > 0), "saved with its remaining wait: {saved}");
    let body: Value = serde_json::from_str(retry["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["earlierAttempts"], 1, "its failed attempt still counts");
    stack.wait_until_stopped().await;

    let second_run = tokio::spawn(run_local(local_dir.path.clone(), settings));
    let restarted = Running::wait_for(&local_dir.path).await;
    assert!(!local_dir.path.join("data/queued-deliveries.json").exists(), "the snapshot was used up");
    let deliveries = slow.wait_for(3, SOON).await;
    let mut ids: Vec<&str> = deliveries.iter().map(|d| d.header("x-webhook-delivery")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "three different deliveries");
    let retried = flaky.wait_for(2, SOON).await;
    assert_eq!(retried[0].header("x-webhook-delivery"), retried[1].header("x-webhook-delivery"));

    // Nothing arrives twice, and nothing is left to save.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!((slow.received().len(), flaky.received().len()), (3, 2));
    restarted.wait_until_queued(0, 0).await;
    ctrl_c();
    second_run.await.unwrap().expect("the second run stops cleanly");
    assert!(!local_dir.path.join("data/queued-deliveries.json").exists(), "empty queues leave no snapshot");
}

async fn run_local(local_dir: PathBuf, settings: career_core::config::Settings) -> Result<(), String> {
    careerctl::local::run(free_port()?, &local_dir, settings).await
}

/// What Ctrl-C in a terminal does.
fn ctrl_c() {
    let sent = std::process::Command::new("kill").args(["-INT", &std::process::id().to_string()]).status();
    assert!(sent.is_ok_and(|status| status.success()), "SIGINT sent");
}

/// A local directory of its own, holding the installed tools (linked) and the stack's data.
struct LocalDir {
    path: PathBuf,
}

impl LocalDir {
    fn new() -> Self {
        let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join(".local");
        let path = std::env::temp_dir().join(format!("careerctl-local-{}", unique_user()));
        std::fs::create_dir_all(&path).unwrap();
        for tool in ["dynamodb", "venv"] {
            std::os::unix::fs::symlink(installed.join(tool), path.join(tool)).unwrap();
        }
        LocalDir { path }
    }
}

impl Drop for LocalDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A running `careerctl local`, as its `env` file describes it.
struct Running {
    env: HashMap<String, String>,
    admin: Admin,
}

impl Running {
    /// Waits until the stack has written its `env` file and its API answers.
    async fn wait_for(local_dir: &Path) -> Self {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            assert!(Instant::now() < deadline, "careerctl local did not start within two minutes");
            tokio::time::sleep(Duration::from_millis(200)).await;
            let Ok(text) = std::fs::read_to_string(local_dir.join("env")) else { continue };
            let env: HashMap<String, String> = text
                .lines()
                .filter_map(|line| line.strip_prefix("export ")?.split_once('='))
                .map(|(name, value)| (name.to_owned(), value.trim_matches('\'').to_owned()))
                .collect();
            let Some(api) = env.get("CAREER_API_URL").cloned() else { continue };
            // Any answer (a 401 here) means the gateway, and with it the Ctrl-C handler, runs.
            let alerts = format!("{api}/api/v1/alerts");
            let answered = tokio::task::spawn_blocking(move || {
                matches!(ureq::get(&alerts).call(), Err(ureq::Error::Status(401, _)))
            })
            .await
            .unwrap();
            if answered {
                let admin = Admin::new(dynamodb_at(&env["AWS_ENDPOINT_URL_DYNAMODB"]), TableNames::from_env());
                return Running { env, admin };
            }
        }
    }

    /// Subscribes `user` to `profile.updated` at `url`, through the stack's API.
    async fn subscribe(&self, user: &str, url: &str) {
        let issued =
            self.admin.create_key(user, Scopes::parse_list("write:webhooks").unwrap(), None, None).await.unwrap();
        let key = issued.key;
        let api = format!("{}/api/v1/webhooks", self.env["CAREER_API_URL"]);
        let body = serde_json::json!({"url": url, "events": ["profile.updated"]}).to_string();
        let created = tokio::task::spawn_blocking(move || {
            let request = ureq::post(&api).set("authorization", &format!("Bearer {key}"));
            request.set("content-type", "application/json").send_string(&body).map(|r| r.status()).unwrap_or(0)
        });
        assert_eq!(created.await.unwrap(), 201, "subscription created");
    }

    /// Waits until the main lane holds `main` messages and the retry lane `retry` (in flight
    /// and delayed ones included).
    async fn wait_until_queued(&self, main: usize, retry: usize) {
        let sqs = sqs_at(&self.env["AWS_ENDPOINT_URL_SQS"]);
        let held = |queue: String| {
            let sqs = sqs.clone();
            async move {
                let attributes = sqs
                    .get_queue_attributes()
                    .queue_url(queue)
                    .attribute_names(QueueAttributeName::All)
                    .send()
                    .await
                    .unwrap()
                    .attributes
                    .unwrap_or_default();
                [
                    QueueAttributeName::ApproximateNumberOfMessages,
                    QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
                    QueueAttributeName::ApproximateNumberOfMessagesDelayed,
                ]
                .iter()
                .filter_map(|name| attributes.get(name)?.parse::<usize>().ok())
                .sum::<usize>()
            }
        };
        let deadline = Instant::now() + SOON;
        loop {
            let now = (
                held(self.env["DELIVERY_QUEUE_URL"].clone()).await,
                held(self.env["DELIVERY_RETRY_QUEUE_URL"].clone()).await,
            );
            if now == (main, retry) {
                return;
            }
            assert!(Instant::now() < deadline, "queued (main, retry): expected {:?}, got {now:?}", (main, retry));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the stopped stack's DynamoDB Local has gone, before the next one opens its data.
    async fn wait_until_stopped(&self) {
        let address = self.env["AWS_ENDPOINT_URL_DYNAMODB"].trim_start_matches("http://").to_owned();
        let deadline = Instant::now() + SOON;
        while tokio::net::TcpStream::connect(&address).await.is_ok() {
            assert!(Instant::now() < deadline, "DynamoDB Local still runs");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
