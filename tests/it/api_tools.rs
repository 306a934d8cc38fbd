//! openapi.yaml as third-party tools use it, against a stack this test starts (DynamoDB
//! Local, moto, the pumps and the gateway on free loopback ports):
//!
//! - Schemathesis (every check, the examples, coverage, fuzzing and stateful phases, the
//!   stateful one following the document's links) with a bounded number of examples;
//! - a client that openapi-python-client generates, driven through every operation by
//!   `tests/api_tools/drive_client.py`, including a subscription to a kind it does not know.
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
use local_aws::gateway::{self, ApiFunctions};
use tokio::net::TcpListener;

/// The stack for one tool: its own tables and queues, the pumps, a receiver every
/// subscription points at, and the gateway. Returns (base URL, API key, receiver, an alert id).
async fn stack() -> (Pipeline, String, String, Receiver, String) {
    let pipeline = Pipeline::with_settings(true, |s| {
        // The tools send hundreds of requests a minute with one key.
        s.rate_limit_per_minute = 1_000_000;
    })
    .await;
    let receiver = Receiver::start(&[204], Duration::ZERO).await;
    let user = unique_user();
    let key = pipeline.api.full_key(&user).await;
    let mut alert = String::new();
    for title in ["First", "Second", "Third"] {
        alert = pipeline.api.alert(&user, title).await;
    }
    let settings = pipeline.settings().clone();
    let functions = ApiFunctions::new(&career_service::deployment(&settings), &career_service::clients(), &settings)
        .expect("valid settings");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(gateway::serve(listener, Arc::new(functions), Duration::from_secs(30)));
    (pipeline, base, key, receiver, alert)
}

/// A fresh working directory for one tool run (the tools keep caches and output there).
fn work_dir(tool: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("career-{tool}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a working directory");
    dir
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
    let (_pipeline, base, key, receiver, _) = stack().await;
    // Schemathesis and Hypothesis keep caches in the working directory: one of their own.
    let work_dir = work_dir("schemathesis");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_generated_python_client_drives_every_operation() {
    let (_pipeline, base, key, receiver, alert) = stack().await;
    let work_dir = work_dir("python-client");
    // The document without one subscribable kind, so the client meets a kind it does not know,
    // as a client generated today will when v1 adds one.
    let unknown = "assessment.completed";
    let document = std::fs::read_to_string(root().join("openapi.yaml")).expect("openapi.yaml");
    let known = "enum: [profile.updated, assessment.completed, webhook.endpoint.failing, webhook.endpoint.disabled, \
                 webhook.endpoint.recovered, webhook.delivery.exhausted]\n      description: The event kinds of this version";
    assert!(document.contains(known), "KnownEventType lists {unknown}");
    let narrowed = document.replace(known, &known.replace(", assessment.completed", ""));
    std::fs::write(work_dir.join("openapi.yaml"), narrowed).expect("the narrowed document");

    let mut generate = Command::new(venv("openapi-python-client"));
    generate.current_dir(&work_dir).args([
        "generate",
        "--path",
        "openapi.yaml",
        "--output-path",
        "career_client",
        "--meta",
        "none",
    ]);
    run("openapi-python-client generate", generate).await;

    let mut drive = Command::new(venv("python"));
    drive
        .current_dir(&work_dir)
        .arg(root().join("tests/api_tools/drive_client.py"))
        .env("PYTHONPATH", &work_dir)
        .env("CAREER_API_URL", &base)
        .env("CAREER_API_KEY", &key)
        .env("CAREER_WEBHOOK_URL", &receiver.url)
        .env("CAREER_ALERT_ID", &alert)
        .env("CAREER_UNKNOWN_KIND", unknown);
    let output = run("the generated client", drive).await;
    let _ = std::fs::remove_dir_all(&work_dir);
    assert!(output.contains("every operation answered as documented"), "{output}");
}
