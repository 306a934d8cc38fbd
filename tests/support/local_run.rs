//! `careerctl local` run by a test in its own process: a local directory of its own, the
//! running stack as its `env` file describes it, and the Ctrl-C that stops it. The signal goes
//! to the whole process, so each test that uses this has a test binary of its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use career_core::aws::AwsClients;
use career_core::config::TableNames;
use career_core::credentials::Scopes;
use careerctl::admin::Admin;
use careerctl::services::free_port;
use serde_json::Value;

use crate::unique_user;

const SOON: Duration = Duration::from_secs(30);

/// `careerctl local` on a free port; its error as careerctl prints it.
pub async fn run_local(local_dir: PathBuf, settings: career_core::config::Settings) -> Result<(), String> {
    let run = async { careerctl::local::run(free_port()?, &local_dir, settings).await };
    run.await.map_err(|e| format!("{e:#}"))
}

/// What Ctrl-C in a terminal does.
pub fn ctrl_c() {
    let sent = std::process::Command::new("kill").args(["-INT", &std::process::id().to_string()]).status();
    assert!(sent.is_ok_and(|status| status.success()), "SIGINT sent");
}

/// A local directory of its own, holding the installed tools (linked) and the stack's data.
pub struct LocalDir {
    pub path: PathBuf,
}

impl LocalDir {
    /// A fresh directory under the system's temporary one.
    pub fn create() -> Self {
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
pub struct Running {
    pub env: HashMap<String, String>,
    pub admin: Admin,
}

impl Running {
    /// Waits until the stack has written its `env` file and its API answers.
    pub async fn wait_for(local_dir: &Path) -> Self {
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
                let admin = Admin::new(clients_of(&env).dynamodb().clone(), TableNames::from_env());
                return Running { env, admin };
            }
        }
    }

    /// The AWS clients of the stack, made from its `env` file as a function would make them.
    pub fn clients(&self) -> AwsClients {
        clients_of(&self.env)
    }

    /// Subscribes `user` to `profile.updated` at `url`, through the stack's API; its id.
    pub async fn subscribe(&self, user: &str, url: &str) -> String {
        let issued =
            self.admin.create_key(user, Scopes::parse_list("write:webhooks").unwrap(), None, None).await.unwrap();
        let key = issued.key;
        let api = format!("{}/api/v1/webhooks", self.env["CAREER_API_URL"]);
        let body = serde_json::json!({"url": url, "events": ["profile.updated"]}).to_string();
        let created = tokio::task::spawn_blocking(move || {
            let request = ureq::post(&api).set("authorization", &format!("Bearer {key}"));
            let response = request.set("content-type", "application/json").send_string(&body).expect("created");
            assert_eq!(response.status(), 201, "subscription created");
            serde_json::from_str::<Value>(&response.into_string().expect("a body")).expect("a subscription")
        });
        created.await.unwrap()["id"].as_str().unwrap().to_owned()
    }

    /// The process id of the stack's SQS and KMS emulator (moto), found by its port.
    pub fn sqs_emulator_pid(&self) -> u32 {
        let port = self.env["AWS_ENDPOINT_URL_SQS"].rsplit(':').next().unwrap().to_owned();
        let processes =
            std::fs::read_dir("/proc").unwrap().filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok());
        let is_moto = |pid: &u32| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            comm.trim() != "sh" && args.windows(2).any(|pair| pair[0] == b"-p" && pair[1] == port.as_bytes())
        };
        let found: Vec<u32> = processes.filter(is_moto).collect();
        assert_eq!(found.len(), 1, "one emulator listens on port {port}: {found:?}");
        found[0]
    }

    /// Waits until the main lane holds `main` messages and the retry lane `retry` (in flight
    /// and delayed ones included).
    pub async fn wait_until_queued(&self, main: usize, retry: usize) {
        let sqs = self.clients().sqs().clone();
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
    pub async fn wait_until_stopped(&self) {
        let address = self.env["AWS_ENDPOINT_URL_DYNAMODB"].trim_start_matches("http://").to_owned();
        let deadline = Instant::now() + SOON;
        while tokio::net::TcpStream::connect(&address).await.is_ok() {
            assert!(Instant::now() < deadline, "DynamoDB Local still runs");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The AWS clients that the environment `env` describes.
fn clients_of(env: &HashMap<String, String>) -> AwsClients {
    AwsClients::new(career_core::runtime::sdk_config(env.clone()).expect("the stack's env file names credentials"))
}
