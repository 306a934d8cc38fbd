//! `careerctl local` as a person runs it (`make run`): when DynamoDB Local or the SQS emulator
//! dies under it, it says so on stderr and exits non-zero instead of answering 500s forever.
//! Each test runs its own stack, with its data in a directory of its own.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A `careerctl local` process, killed (and its directory removed) if the test ends early.
struct LocalStack {
    child: Child,
    dir: PathBuf,
}

impl LocalStack {
    /// Starts `careerctl local` in a fresh directory that borrows the installed tools, and
    /// waits until it is up.
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// The same, with these environment variables set for it.
    fn start_with(vars: &[(&str, &str)]) -> Self {
        let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.local");
        let dir = std::env::temp_dir().join(format!("careerctl-local-{}-{}", std::process::id(), free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        for tool in ["dynamodb", "venv"] {
            std::os::unix::fs::symlink(installed.join(tool).canonicalize().unwrap(), dir.join(tool)).unwrap();
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_careerctl"))
            .arg("local")
            .env("PORT", free_port().to_string())
            .env("CAREER_LOCAL_DIR", &dir)
            .envs(vars.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stack = LocalStack { child, dir };
        for line in stdout.by_ref() {
            if line.unwrap().starts_with("Career service is up") {
                // Keep reading what else it prints, as a terminal would.
                std::thread::spawn(move || stdout.for_each(drop));
                return stack;
            }
        }
        panic!("careerctl local did not come up: {}", stack.stderr());
    }

    /// The pid of the service process whose command line mentions `what`.
    fn service(&self, what: &str) -> u32 {
        let watchdogs = children(self.child.id());
        let services = watchdogs.into_iter().flat_map(children);
        services
            .into_iter()
            .find(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| contains(&c, what)))
            .unwrap_or_else(|| panic!("no process of {what} under careerctl"))
    }

    fn wait(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// What it wrote on stderr, once it has exited.
    fn stderr(&mut self) -> String {
        self.child.wait().unwrap();
        let mut text = String::new();
        self.child.stderr.take().unwrap().read_to_string(&mut text).unwrap();
        text
    }
}

impl Drop for LocalStack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect()).unwrap_or(Vec::new());
    tasks
        .iter()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle.as_bytes())
}

fn free_port() -> u16 {
    local_aws::emulators::free_port().expect("a free port")
}

fn kill(pid: u32) {
    assert!(Command::new("kill").arg("-KILL").arg(pid.to_string()).status().unwrap().success());
}

fn assert_stops_saying(stack: &mut LocalStack, what: &str) {
    let status = stack.wait(Duration::from_secs(30)).expect("careerctl local exits");
    let stderr = stack.stderr();
    assert!(!status.success(), "{status}: {stderr}");
    assert!(stderr.contains(what), "{stderr}");
}

#[test]
fn it_stops_with_an_error_when_dynamodb_local_dies() {
    let mut stack = LocalStack::start();
    kill(stack.service("DynamoDBLocal.jar"));
    assert_stops_saying(&mut stack, "careerctl: DynamoDB Local ended unexpectedly");
}

#[test]
fn it_stops_with_an_error_when_the_sqs_emulator_dies() {
    let mut stack = LocalStack::start();
    kill(stack.service("moto_server"));
    assert_stops_saying(&mut stack, "careerctl: the SQS emulator ended unexpectedly");
}

/// `make run` writes `.local/env` so that a function run on its own (`cargo lambda watch`)
/// sees the stack's settings: every one, its own variables included, and the local defaults.
#[test]
fn its_env_file_gives_a_function_the_stacks_settings() {
    let stack = LocalStack::start_with(&[("DELIVERY_SWEEP_AFTER_SECONDS", "7"), ("DELIVERY_MAX_ATTEMPTS", "4")]);
    let text = std::fs::read_to_string(stack.dir.join("env")).unwrap();
    let vars: std::collections::HashMap<&str, &str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("export ")?.split_once('='))
        .map(|(name, value)| (name, value.trim_matches('\'')))
        .collect();
    for (name, value) in [
        ("DELIVERY_SWEEP_AFTER_SECONDS", "7"),
        ("DELIVERY_MAX_ATTEMPTS", "4"),
        ("DELIVERY_RETRY_BASE_SECONDS", "1"),
        ("ALLOW_HTTP_WEBHOOK_URLS", "true"),
        ("WEBHOOK_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128"),
        ("DELIVERIES_TABLE", "career-deliveries"),
    ] {
        assert_eq!(vars.get(name), Some(&value), "{name} in {text}");
    }
    for lane in ["DELIVERY_QUEUE_URL", "DELIVERY_RETRY_QUEUE_URL", "DEAD_LETTER_QUEUE_URL", "STREAM_FAILURES_QUEUE_URL"]
    {
        assert!(vars.get(lane).is_some_and(|url| url.starts_with("http://127.0.0.1:")), "{lane} in {text}");
    }
    for set in ["CURSOR_SIGNING_KEY", "SECRETS_KMS_KEY_ID", "AWS_ENDPOINT_URL_DYNAMODB", "CAREER_DEMO_KEY"] {
        assert!(vars.get(set).is_some_and(|value| !value.is_empty()), "{set} in {text}");
    }
}
