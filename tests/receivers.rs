//! Real deliveries from the pipeline (DynamoDB streams → fan-out → SQS → delivery) verified
//! by receivers in other languages with the published Standard Webhooks libraries (Python's
//! `standardwebhooks` from PyPI, Node's from npm): first attempts, retries, the grace period
//! of a rotation (both secrets verify) and a rotation without one (the old secret fails).
//! Then every receiver snippet of the README, extracted by its marker, run as it is.

#[path = "receivers/readme_receiver.rs"]
mod readme_receiver;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::script_receiver::{project_dir, python, tsc, ScriptReceiver};
use career_service::{clients, unique_user};
use careerctl::gateway::{self, ApiFunctions};
use lambda_http::http::Method;
use serde_json::Value;

const SOON: Duration = Duration::from_secs(20);
const README: &str = include_str!("../README.md");

/// The code of the README's snippet `name`: the fenced block after `<!-- receiver: name -->`.
fn snippet(name: &str) -> &'static str {
    let marker = format!("<!-- receiver: {name} -->\n```");
    let start = README.find(&marker).unwrap_or_else(|| panic!("README.md has no snippet {name}")) + marker.len();
    let code = &README[start..];
    let code = &code[code.find('\n').expect("a fence line") + 1..];
    &code[..code.find("\n```").expect("a closing fence") + 1]
}

#[derive(Clone, Copy, Debug)]
enum Library {
    Python,
    Node,
}

impl Library {
    async fn start(self, dir: &Path, port: u16, env: &[(&str, &str)]) -> ScriptReceiver {
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/receivers");
        match self {
            Library::Python => {
                ScriptReceiver::start(&python(), &[&here.join("standardwebhooks_receiver.py")], dir, port, env).await
            }
            Library::Node => {
                let script = dir.join("receiver.cjs");
                std::fs::copy(here.join("standardwebhooks_receiver.cjs"), &script).unwrap();
                ScriptReceiver::start(Path::new("node"), &[&script], dir, port, env).await
            }
        }
    }
}

/// One JSON line of a test receiver: what it got and which of its secrets verified it.
fn report(line: &str) -> (String, Vec<bool>, u16) {
    let report: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let verified = report["verified"].as_array().unwrap().iter().map(|v| v.as_bool().unwrap()).collect();
    (report["webhookId"].as_str().unwrap().to_owned(), verified, report["status"].as_u64().unwrap() as u16)
}

async fn rotate(pipeline: &Pipeline, key: &str, id: &str, body: &str) -> String {
    let path = format!("/api/v1/webhooks/rotate-secret?id={id}");
    let answer = pipeline.api.send_json(Method::POST, &path, key, body).await;
    answer.assert_status(200)["secret"].as_str().unwrap().to_owned()
}

async fn the_library_verifies_every_attempt_and_follows_rotations(library: Library) {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let (port, url) = ScriptReceiver::reserve();
    let (id, first) = pipeline.subscribe(&user, &url, &["profile.updated"]).await;
    let dir = project_dir();
    let secrets = dir.join("secrets");
    let keep = |list: &[&str]| std::fs::write(&secrets, list.join("\n")).unwrap();
    keep(&[&first]);
    let env = [("WEBHOOK_SECRETS_FILE", secrets.to_str().unwrap()), ("STATUSES", "500,204")];
    let receiver = library.start(&dir, port, &env).await;

    // A first attempt that fails and its retry: the same id, each verified as it arrives.
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let lines = receiver.wait_for_lines(2, SOON).await;
    let (first_attempt, retry) = (report(&lines[0]), report(&lines[1]));
    assert!(first_attempt.0.starts_with("dlv_"), "{lines:?}");
    assert_eq!((first_attempt.1.as_slice(), first_attempt.2), (&[true][..], 500), "{library:?}: {lines:?}");
    assert_eq!((retry.0.as_str(), retry.1.as_slice(), retry.2), (first_attempt.0.as_str(), &[true][..], 204));

    // During the grace period of a rotation both the new and the old secret verify.
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let second = rotate(&pipeline, &key, &id, "{}").await;
    keep(&[&second, &first]);
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let (_, verified, _) = report(&receiver.wait_for_lines(3, SOON).await[2]);
    assert_eq!(verified, [true, true], "{library:?}: both secrets during the grace period");

    // Without a grace period the old secret fails at once.
    let third = rotate(&pipeline, &key, &id, r#"{"gracePeriodSeconds": 0}"#).await;
    keep(&[&third, &second]);
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let (_, verified, _) = report(&receiver.wait_for_lines(4, SOON).await[3]);
    assert_eq!(verified, [true, false], "{library:?}: the new secret verifies, the old one no more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn python_standardwebhooks_verifies_every_attempt_and_follows_rotations() {
    the_library_verifies_every_attempt_and_follows_rotations(Library::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn node_standardwebhooks_verifies_every_attempt_and_follows_rotations() {
    the_library_verifies_every_attempt_and_follows_rotations(Library::Node).await;
}

/// The README's snippet `name`, written into `dir` as a receiver would save it, and the
/// command that runs it.
fn readme_program(name: &str, dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let write = |file: &str| {
        let path = dir.join(file);
        std::fs::write(&path, snippet(name)).unwrap();
        path
    };
    match name {
        "python-seed" | "python-standardwebhooks" => (python(), vec![write("receiver.py")]),
        "node-seed" => (PathBuf::from("node"), vec![write("receiver.js")]),
        "typescript-standardwebhooks" => {
            let source = write("receiver.ts");
            let compiled = std::process::Command::new(tsc())
                .args(["--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext"])
                .args(["--types", "node", "--outDir"])
                .arg(dir.join("out"))
                .arg(&source)
                .current_dir(dir)
                .output()
                .expect("tsc runs");
            let output = String::from_utf8_lossy(&compiled.stdout);
            assert!(compiled.status.success(), "the README's TypeScript does not compile: {output}");
            (PathBuf::from("node"), vec![dir.join("out/receiver.js")])
        }
        other => panic!("no way to run {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_receivers_verify_real_deliveries() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let mut receivers = Vec::new();
    for name in ["python-seed", "node-seed", "python-standardwebhooks", "typescript-standardwebhooks"] {
        let (port, url) = ScriptReceiver::reserve();
        let (_, secret) = pipeline.subscribe(&user, &url, &["profile.updated"]).await;
        // A second subscription to the same URL, whose secret the receiver does not have.
        pipeline.subscribe(&user, &url, &["profile.updated"]).await;
        let dir = project_dir();
        let (program, args) = readme_program(name, &dir);
        let args: Vec<&Path> = args.iter().map(PathBuf::as_path).collect();
        receivers
            .push((name, ScriptReceiver::start(&program, &args, &dir, port, &[("WEBHOOK_SECRET", &secret)]).await));
    }
    pipeline.api.admin.update_profile(&user).await.unwrap();
    for (name, receiver) in &receivers {
        // Its own subscription's delivery verifies; the other one's does not (and is retried).
        let lines = receiver.wait_for_lines(2, SOON).await;
        let verdicts = |word: &str| -> Vec<&str> {
            lines.iter().filter(|l| l.split(' ').nth(1) == Some(word)).map(|l| l.split(' ').next().unwrap()).collect()
        };
        let (valid, invalid) = (verdicts("valid"), verdicts("INVALID"));
        assert_eq!(valid.len(), 1, "{name}: {lines:?}");
        assert!(valid[0].starts_with("dlv_"), "{name}: {lines:?}");
        assert!(!invalid.is_empty() && invalid.iter().all(|id| *id != valid[0]), "{name}: {lines:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_rust_receiver_is_this_code_and_verifies_real_deliveries() {
    let source = include_str!("receivers/readme_receiver.rs");
    assert_eq!(snippet("rust-standardwebhooks"), source, "README.md and tests/receivers/readme_receiver.rs differ");

    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[204], Duration::ZERO).await;
    let (_, secret) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = receiver.wait_for(1, SOON).await.remove(0);
    assert!(readme_receiver::verify(&secret, &delivery.headers, &delivery.body));
    let (_, other) = pipeline.subscribe(&unique_user(), &receiver.url, &["profile.updated"]).await;
    assert!(!readme_receiver::verify(&other, &delivery.headers, &delivery.body));
    let mut altered = delivery.body.to_vec();
    altered.push(b' ');
    assert!(!readme_receiver::verify(&secret, &delivery.headers, &altered));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_rotation_commands_rotate() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let (id, first) =
        pipeline.subscribe(&user, &format!("{}/hook", career_service::sink_url()), &["profile.updated"]).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = format!("http://{}", listener.local_addr().unwrap());
    let functions = Arc::new(
        ApiFunctions::new(&career_service::deployment(pipeline.settings()), &clients(), pipeline.settings()).unwrap(),
    );
    let server = tokio::spawn(gateway::serve(listener, functions, gateway::IDLE_TIMEOUT));

    let script = snippet("rotate-secret").replace("whk_...", &id);
    let output = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("API", &api)
        .env("AUTH", format!("Authorization: Bearer {key}"))
        .env("JSON", "Content-Type: application/json")
        .output()
        .await
        .unwrap();
    server.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout} {}", String::from_utf8_lossy(&output.stderr));
    let answers: Vec<Value> = serde_json::Deserializer::from_str(&stdout).into_iter().map(Result::unwrap).collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    let secrets: Vec<&str> = answers.iter().map(|a| a["secret"].as_str().unwrap()).collect();
    assert!(secrets[0] != first && secrets[1] != first && secrets[0] != secrets[1], "{stdout}");
    assert!(answers.iter().all(|a| a["id"] == id.as_str() && a["previousSecretExpiresAt"].is_string()));
}
