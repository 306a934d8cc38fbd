//! openapi.yaml as third-party tools use it, against a stack this test starts (DynamoDB
//! Local, moto, the pumps and the gateway on free loopback ports):
//!
//! - Schemathesis (every check, the examples, coverage, fuzzing and stateful phases, the
//!   stateful one following the document's links) with a bounded number of examples.
//!
//! It runs as subprocesses from `.local/api-venv` (`scripts/install-local-deps.sh
//! --api-tools`); a failure shows the tool's output. Every webhook URL is a loopback
//! receiver of this test. `make api-check` runs only these and the linters.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::unique_user;
use careerctl::gateway::{self, ApiFunctions};
use tokio::net::TcpListener;

/// The stack for one tool: its own tables and queues, the pumps, a receiver every
/// subscription points at, and the gateway. Returns (base URL, API key, receiver URL).
async fn stack() -> (Pipeline, String, String, Receiver) {
    let pipeline = Pipeline::with_settings(true, |s| {
        // The tools send hundreds of requests a minute with one key.
        s.rate_limit_per_minute = 1_000_000;
    })
    .await;
    let receiver = Receiver::start(&[204], Duration::ZERO).await;
    let user = unique_user();
    let key = pipeline.api.full_key(&user).await;
    for title in ["First", "Second", "Third"] {
        pipeline.api.alert(&user, title).await;
    }
    let settings = pipeline.settings().clone();
    let functions =
        ApiFunctions::new(&career_service::dynamodb(), &career_service::kms(), &career_service::sqs(), &settings)
            .expect("valid settings");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway::serve(listener, Arc::new(functions), Duration::from_secs(30)));
    (pipeline, base, key, receiver)
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn venv(tool: &str) -> PathBuf {
    let path = root().join(".local/api-venv/bin").join(tool);
    assert!(path.exists(), "{} is missing: run scripts/install-local-deps.sh --api-tools", path.display());
    path
}

/// Runs `command` to its end off the async runtime (the stack keeps serving meanwhile);
/// panics with its output unless it succeeds.
async fn run(what: &str, mut command: Command) -> String {
    let started = Instant::now();
    let output = tokio::task::spawn_blocking(move || command.output()).await.unwrap();
    let output = output.unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{what} failed ({}):\n{text}", output.status);
    eprintln!("{what}: {:.1} s", started.elapsed().as_secs_f64());
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schemathesis_finds_nothing() {
    let (_pipeline, base, key, receiver) = stack().await;
    // Schemathesis and Hypothesis keep caches in the working directory: one of their own.
    let work_dir = std::env::temp_dir().join(format!("career-schemathesis-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir).expect("a working directory");
    let document = root().join("openapi.yaml");
    let mut command = Command::new(venv("st"));
    command
        .current_dir(&work_dir)
        .arg("--no-color")
        .arg("run")
        .arg(&document)
        .args(["--url", &base])
        .args(["--checks", "all", "--phases", "examples,coverage,fuzzing,stateful"])
        .args(["--max-examples", "50", "--workers", "1", "--seed", "12", "--request-timeout", "10"])
        .args(["--header", &format!("Authorization: Bearer {key}")])
        .env("SCHEMATHESIS_HOOKS", "schemathesis_hooks")
        .env("PYTHONPATH", root().join("tests/api_tools"))
        .env("CAREER_API_URL", &base)
        .env("CAREER_API_KEY", &key)
        .env("CAREER_WEBHOOK_URL", &receiver.url)
        .env("NO_COLOR", "1");
    let output = run("schemathesis", command).await;
    let _ = std::fs::remove_dir_all(&work_dir);
    eprintln!("{output}");
}
