//! `careerctl local` run by a test in its own process: a local directory of its own, the
//! running stack as its `env` file describes it, and the Ctrl-C that stops it. The signal goes
//! to the whole process, so each test that uses this has a test binary of its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use career_core::aws::AwsClients;
use career_core::config::TableNames;
use career_core::credentials::Scopes;
use careerctl::admin::Admin;
use local_aws::emulators::free_port;
use serde_json::Value;

use crate::{eventually, held, unique_user};

/// `careerctl local` on a free port, its log lines in the test's output; its error as
/// careerctl prints it.
pub async fn run_local(local_dir: PathBuf, settings: career_core::config::Settings) -> Result<(), String> {
    crate::logs::install();
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
        let env = eventually("careerctl local answering", || async {
            let text = std::fs::read_to_string(local_dir.join("env")).map_err(|e| format!("no env file: {e}"))?;
            let env: HashMap<String, String> = text
                .lines()
                .filter_map(|line| line.strip_prefix("export ")?.split_once('='))
                .map(|(name, value)| (name.to_owned(), value.trim_matches('\'').to_owned()))
                .collect();
            let api = env.get("CAREER_API_URL").cloned().ok_or("no API URL in the env file")?;
            // Any answer (a 401 here) means the gateway, and with it the Ctrl-C handler, runs.
            let alerts = format!("{api}/api/v1/alerts");
            let status = tokio::task::spawn_blocking(move || match ureq::get(&alerts).call() {
                Ok(response) => Some(response.status()),
                Err(ureq::Error::Status(status, _)) => Some(status),
                Err(ureq::Error::Transport(_)) => None,
            });
            match status.await.unwrap() {
                Some(401) => Ok(env),
                other => Err(format!("{api} answered with status {other:?}")),
            }
        })
        .await;
        let admin = Admin::new(clients_of(&env).dynamodb().clone(), TableNames::from_env());
        Running { env, admin }
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
        let lanes = (&self.env["DELIVERY_QUEUE_URL"], &self.env["DELIVERY_RETRY_QUEUE_URL"]);
        eventually(format!("(main, retry) lanes holding {:?}", (main, retry)), || async {
            let now = (held(&sqs, lanes.0).await, held(&sqs, lanes.1).await);
            if now == (main, retry) {
                Ok(())
            } else {
                Err(now)
            }
        })
        .await
    }

    /// Waits until the stack's API refuses connections: the stack has taken the Ctrl-C, and its
    /// delivery pumps take no more messages (they stop as the gateway does).
    pub async fn wait_until_stopping(&self) {
        until_refused("the stack's API closed", &self.env["CAREER_API_URL"]).await;
    }

    /// Waits until the stopped stack's DynamoDB Local has gone, before the next one opens its data.
    pub async fn wait_until_stopped(&self) {
        until_refused("the stopped stack's DynamoDB Local gone", &self.env["AWS_ENDPOINT_URL_DYNAMODB"]).await;
    }
}

/// Waits until nothing listens at `url` (`http://host:port`) any more.
async fn until_refused(what: &str, url: &str) {
    let address = url.trim_start_matches("http://");
    eventually(what, || async {
        match tokio::net::TcpStream::connect(address).await {
            Ok(_) => Err(format!("{address} still takes connections")),
            Err(_) => Ok(()),
        }
    })
    .await
}

/// The AWS clients that the environment `env` describes.
fn clients_of(env: &HashMap<String, String>) -> AwsClients {
    AwsClients::new(career_core::aws::runtime::sdk_config(env.clone()).expect("the stack's env file names credentials"))
}
