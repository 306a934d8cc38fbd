//! Real deliveries from the pipeline (DynamoDB streams → fan-out → SQS → delivery) verified
//! by receivers in other languages with the published Standard Webhooks libraries (Python's
//! `standardwebhooks` from PyPI, Node's from npm): first attempts, retries, the grace period
//! of a rotation (both secrets verify) and a rotation without one (the old secret fails).
//! Then every receiver snippet of docs/receiving-webhooks.md, extracted by its marker, run as it is; its `v1a`
//! receivers (Python's `cryptography`, Node's `node:crypto`: Ed25519 verifiers independent of
//! the service's) are sent real deliveries through a rotation of the key pair, and its
//! identity-token receivers (PyJWT, jose, go-oidc) real tokens of the local stack's issuer.

mod readme_receiver;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use career_core::aws::sender::Sender;
use career_core::clock::Timestamp;
use career_core::delivery::SignedDelivery;
use career_core::webhooks::signing::SigningKey;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::script_receiver::{gopath, project_dir, python, tsc, ScriptReceiver};
use career_service::DEADLINE;
use career_service::{clients, unique_user};
use lambda_http::http::Method;
use local_aws::gateway::{self, ApiFunctions};
use serde_json::{json, Value};

const GUIDE: &str = include_str!("../../docs/receiving-webhooks.md");

/// The code of the guide's snippet `name`: the fenced block after `<!-- receiver: name -->`.
fn snippet(name: &str) -> &'static str {
    let marker = format!("<!-- receiver: {name} -->\n```");
    let start = GUIDE.find(&marker).unwrap_or_else(|| panic!("docs/receiving-webhooks.md has no snippet {name}"))
        + marker.len();
    let code = &GUIDE[start..];
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
        let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/receivers");
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
    let lines = receiver.wait_for_lines(2).await;
    let (first_attempt, retry) = (report(&lines[0]), report(&lines[1]));
    assert!(first_attempt.0.starts_with("dlv_"), "{lines:?}");
    assert_eq!((first_attempt.1.as_slice(), first_attempt.2), (&[true][..], 500), "{library:?}: {lines:?}");
    assert_eq!((retry.0.as_str(), retry.1.as_slice(), retry.2), (first_attempt.0.as_str(), &[true][..], 204));

    // During the grace period of a rotation both the new and the old secret verify.
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let second = rotate(&pipeline, &key, &id, "{}").await;
    keep(&[&second, &first]);
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let (_, verified, _) = report(&receiver.wait_for_lines(3).await[2]);
    assert_eq!(verified, [true, true], "{library:?}: both secrets during the grace period");

    // Without a grace period the old secret fails at once.
    let third = rotate(&pipeline, &key, &id, r#"{"gracePeriodSeconds": 0}"#).await;
    keep(&[&third, &second]);
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let (_, verified, _) = report(&receiver.wait_for_lines(4).await[3]);
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

/// The guide's snippet `name`, written into `dir` as a receiver would save it (the TypeScript
/// one compiled once, in a directory of its own), and the command that runs it.
fn readme_program(name: &str, dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let write = |file: &str| {
        let path = dir.join(file);
        std::fs::write(&path, snippet(name)).unwrap();
        path
    };
    match name {
        "python-seed" | "python-standardwebhooks" | "python-v1a" | "python-identity-token" => {
            (python(), vec![write("receiver.py")])
        }
        "node-seed" | "node-v1a" => (PathBuf::from("node"), vec![write("receiver.js")]),
        "node-identity-token" => (PathBuf::from("node"), vec![write("receiver.mjs")]),
        "typescript-standardwebhooks" => (PathBuf::from("node"), vec![compiled_typescript_receiver().to_owned()]),
        "go-identity-token" => (compiled_go_receiver().to_owned(), vec![]),
        other => panic!("no way to run {other}"),
    }
}

/// The guide's TypeScript receiver, compiled with `tsc --strict` once for every test that runs
/// it (the compiler takes seconds of CPU a run); the JavaScript it compiled to.
fn compiled_typescript_receiver() -> &'static Path {
    static COMPILED: OnceLock<PathBuf> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let dir = project_dir();
        let source = dir.join("receiver.ts");
        std::fs::write(&source, snippet("typescript-standardwebhooks")).unwrap();
        let compiled = std::process::Command::new(tsc())
            .args(["--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext"])
            .args(["--types", "node", "--outDir"])
            .arg(dir.join("out"))
            .arg(&source)
            .current_dir(&dir)
            .output()
            .expect("tsc runs");
        let output = String::from_utf8_lossy(&compiled.stdout);
        assert!(compiled.status.success(), "the guide's TypeScript does not compile: {output}");
        dir.join("out/receiver.js")
    })
}

/// The guide's Go receiver, checked by `gofmt` and `go vet` and built once for every test that
/// runs it, offline with Debian's Go and go-oidc (GOPATH mode: no module proxy); the binary.
fn compiled_go_receiver() -> &'static Path {
    static COMPILED: OnceLock<PathBuf> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let dir = project_dir();
        std::fs::write(dir.join("receiver.go"), snippet("go-identity-token")).unwrap();
        let run = |program: &str, args: &[&str]| {
            let output = std::process::Command::new(program)
                .args(args)
                .current_dir(&dir)
                .env("GO111MODULE", "off")
                .env("GOPATH", gopath())
                .env("GOFLAGS", "")
                .env("GOPROXY", "off")
                .env("GOCACHE", Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-build"))
                .output()
                .unwrap_or_else(|e| panic!("{program}: {e}"));
            let said = [output.stdout, output.stderr].concat();
            let said = String::from_utf8_lossy(&said).into_owned();
            assert!(output.status.success(), "the guide's Go: {program} {args:?}: {said}");
            said
        };
        assert_eq!(run("gofmt", &["-l", "receiver.go"]), "", "the guide's Go is not as gofmt formats it");
        run("go", &["vet", "receiver.go"]);
        run("go", &["build", "-o", "receiver", "receiver.go"]);
        dir.join("receiver")
    })
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
        let lines = receiver.wait_for_lines(2).await;
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
    assert_eq!(
        snippet("rust-standardwebhooks"),
        source,
        "docs/receiving-webhooks.md and tests/it/receivers/readme_receiver.rs differ"
    );

    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[204], Duration::ZERO).await;
    let (_, secret) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = receiver.wait_for(1, DEADLINE).await.remove(0);
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

/// The guide's receiver `name`, started with `env`; its URL.
async fn readme_receiver(name: &str, env: &[(&str, &str)]) -> ScriptReceiver {
    let (port, _) = ScriptReceiver::reserve();
    let dir = project_dir();
    let (program, args) = readme_program(name, &dir);
    let args: Vec<&Path> = args.iter().map(PathBuf::as_path).collect();
    ScriptReceiver::start(&program, &args, &dir, port, env).await
}

/// The guide's `v1a` receiver `name`, pinning `keys`.
async fn pinning(name: &str, keys: &[&str]) -> ScriptReceiver {
    readme_receiver(name, &[("WEBHOOK_PUBLIC_KEYS", &keys.join(" "))]).await
}

/// A real delivery sent again, as it was but for its `webhook-signature` and body, to a
/// receiver on loopback; the receiver's status (204 verified, 401 refused).
async fn replay(receiver: &ScriptReceiver, delivery: &Received, signature: &str, body: &[u8]) -> u16 {
    let kept = ["Content-Type", "X-Webhook-Delivery", "X-Webhook-Signature", "webhook-id", "webhook-timestamp"];
    let headers = kept
        .into_iter()
        .map(|name| (name, delivery.header(name).to_owned()))
        .chain([("webhook-signature", signature.to_owned())])
        .collect();
    let signed = SignedDelivery { body: body.to_vec(), headers };
    let (sender, url) = (Sender::new(career_core::webhooks::UrlPolicy::local_stack().guard), receiver.url.clone());
    let outcome = tokio::task::spawn_blocking(move || sender.send(&url, &signed)).await.unwrap();
    outcome.answer().map_or(0, |answer| answer.status)
}

/// The entries of a delivery's `webhook-signature` of `version` (`v1` or `v1a`), in order.
fn entries<'a>(delivery: &'a Received, version: &str) -> Vec<&'a str> {
    let prefix = format!("{version},");
    delivery.header("webhook-signature").split(' ').filter(|entry| entry.starts_with(&prefix)).collect()
}

async fn signing_keys(pipeline: &Pipeline, key: &str, id: &str) -> Vec<Value> {
    let answer = pipeline.api.get(&format!("/api/v1/webhooks/signing-keys?id={id}"), key).await;
    answer.assert_status(200)["keys"].as_array().unwrap().clone()
}

async fn rotate_keys(pipeline: &Pipeline, key: &str, id: &str, grace: u32) -> Value {
    let path = format!("/api/v1/webhooks/rotate-secret?id={id}");
    let body = json!({"gracePeriodSeconds": grace}).to_string();
    pipeline.api.send_json(Method::POST, &path, key, &body).await.assert_status(200).clone()
}

async fn the_readmes_v1a_receiver_verifies_real_deliveries_through_a_rotation(name: &str) {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let key = pipeline.api.key(&user, "read:webhooks,write:webhooks").await;
    let capture = Receiver::start(&[204], Duration::ZERO).await;
    let body = json!({"url": capture.url, "events": ["profile.updated"], "asymmetricSigning": true}).to_string();
    let created = pipeline.api.send_json(Method::POST, "/api/v1/webhooks", &key, &body).await;
    let created = created.assert_status(201).clone();
    let (id, secret) = (created["id"].as_str().unwrap(), created["secret"].as_str().unwrap());
    let first = created["publicKey"].as_str().unwrap().to_owned();
    assert_eq!(
        signing_keys(&pipeline, &key, id).await,
        [json!({"publicKey": first, "status": "current", "expiresAt": null})]
    );

    // One v1a entry after the v1 one; it verifies with the key, not with another key, and not
    // once the body is altered.
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = capture.wait_for(1, DEADLINE).await.remove(0);
    let signature = delivery.header("webhook-signature").to_owned();
    assert_eq!((entries(&delivery, "v1").len(), entries(&delivery, "v1a").len()), (1, 1), "{signature}");
    assert!(signature.starts_with("v1,"), "v1 first: {signature}");
    let pins_first = pinning(name, &[&first]).await;
    assert_eq!(replay(&pins_first, &delivery, &signature, &delivery.body).await, 204, "{name}");
    let tampered = [&delivery.body[..], b" "].concat();
    assert_eq!(replay(&pins_first, &delivery, &signature, &tampered).await, 401, "{name}: a tampered body");
    let stranger = SigningKey::generate().public_key().to_string();
    let pins_stranger = pinning(name, &[&stranger]).await;
    assert_eq!(replay(&pins_stranger, &delivery, &signature, &delivery.body).await, 401, "{name}: a wrong key");
    let without_v1a = entries(&delivery, "v1").join(" ");
    assert_eq!(replay(&pins_first, &delivery, &without_v1a, &delivery.body).await, 401, "{name}: v1 is no v1a");

    // X-Webhook-Signature and the v1 entry verify as before, beside the v1a entry.
    for holder in ["python-seed", "node-seed", "python-standardwebhooks", "typescript-standardwebhooks"] {
        let receiver = readme_receiver(holder, &[("WEBHOOK_SECRET", secret)]).await;
        assert_eq!(replay(&receiver, &delivery, &signature, &delivery.body).await, 204, "{holder}");
    }

    // During the grace period of a rotation both keys verify, the new key's entry first.
    let rotated = rotate_keys(&pipeline, &key, id, 3600).await;
    let second = rotated["publicKey"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(rotated["previousPublicKey"], first.as_str());
    let expires = &rotated["previousSecretExpiresAt"];
    assert_eq!(
        signing_keys(&pipeline, &key, id).await,
        [
            json!({"publicKey": second, "status": "current", "expiresAt": null}),
            json!({"publicKey": first, "status": "previous", "expiresAt": expires}),
        ]
    );
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = capture.wait_for(2, DEADLINE).await.remove(1);
    let signature = delivery.header("webhook-signature").to_owned();
    let (v1, v1a) = (entries(&delivery, "v1"), entries(&delivery, "v1a"));
    assert_eq!((v1.len(), v1a.len()), (2, 2), "{signature}");
    assert!(signature.starts_with(&v1.join(" ")), "the v1 entries first: {signature}");
    let pins_second = pinning(name, &[&second]).await;
    for (receiver, verifies, which) in
        [(&pins_second, [204, 401], "the new key"), (&pins_first, [401, 204], "the old key")]
    {
        let each = [
            replay(receiver, &delivery, v1a[0], &delivery.body).await,
            replay(receiver, &delivery, v1a[1], &delivery.body).await,
        ];
        assert_eq!(each, verifies, "{name}: {which} verifies its own entry, the new key's first");
        assert_eq!(replay(receiver, &delivery, &signature, &delivery.body).await, 204, "{name}: {which}");
    }

    // After the grace period only the new key verifies.
    let rotated = rotate_keys(&pipeline, &key, id, 1).await;
    let third = rotated["publicKey"].as_str().unwrap().to_owned();
    let expires: Timestamp = rotated["previousSecretExpiresAt"].as_str().unwrap().parse().unwrap();
    while Timestamp::now() < expires {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(signing_keys(&pipeline, &key, id).await.len(), 1, "the previous key has expired");
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = capture.wait_for(3, DEADLINE).await.remove(2);
    let signature = delivery.header("webhook-signature").to_owned();
    assert_eq!((entries(&delivery, "v1").len(), entries(&delivery, "v1a").len()), (1, 1), "{signature}");
    let pins_third = pinning(name, &[&third]).await;
    assert_eq!(replay(&pins_third, &delivery, &signature, &delivery.body).await, 204, "{name}: the new key");
    assert_eq!(replay(&pins_second, &delivery, &signature, &delivery.body).await, 401, "{name}: the expired key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_python_v1a_receiver_verifies_real_deliveries_through_a_rotation() {
    the_readmes_v1a_receiver_verifies_real_deliveries_through_a_rotation("python-v1a").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_node_v1a_receiver_verifies_real_deliveries_through_a_rotation() {
    the_readmes_v1a_receiver_verifies_real_deliveries_through_a_rotation("node-v1a").await;
}

/// A real delivery sent again, as it was, with `authorization` in place of its own, to a
/// receiver on loopback; the receiver's status (204 verified, 401 refused).
async fn present(receiver: &ScriptReceiver, delivery: &Received, authorization: Option<String>) -> u16 {
    let kept = ["Content-Type", "X-Webhook-Delivery", "webhook-id", "webhook-timestamp", "webhook-signature"];
    let headers = kept
        .into_iter()
        .map(|name| (name, delivery.header(name).to_owned()))
        .chain(authorization.map(|value| ("Authorization", value)))
        .collect();
    let signed = SignedDelivery { body: delivery.body.to_vec(), headers };
    let (sender, url) = (Sender::new(career_core::webhooks::UrlPolicy::local_stack().guard), receiver.url.clone());
    let outcome = tokio::task::spawn_blocking(move || sender.send(&url, &signed)).await.unwrap();
    outcome.answer().map_or(0, |answer| answer.status)
}

async fn the_readmes_identity_token_receiver_verifies_real_tokens(name: &str) {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let capture = Receiver::start(&[204], Duration::ZERO).await;
    let audience = "https://receiver.example/hooks";
    let body = json!({"url": capture.url, "events": ["profile.updated"], "identityToken": {"audience": audience}});
    let created = pipeline.api.send_json(Method::POST, "/api/v1/webhooks", &key, &body.to_string()).await;
    let id = created.assert_status(201)["id"].as_str().unwrap().to_owned();
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = capture.wait_for(1, DEADLINE).await.remove(0);
    let token = delivery.header("authorization").to_owned();
    assert!(token.starts_with("Bearer "), "{token:?}");

    let issuer = local_aws::identity_token::issuer_url();
    let trusting = |audience: &str, subscription: &str| {
        let env = [("TOKEN_ISSUER", issuer), ("TOKEN_AUDIENCE", audience), ("SUBSCRIPTION_ID", subscription)];
        let env = env.map(|(name, value)| (name, value.to_owned()));
        async move { readme_receiver(name, &env.each_ref().map(|(n, v)| (*n, v.as_str()))).await }
    };
    let receiver = trusting(audience, &id).await;
    assert_eq!(present(&receiver, &delivery, Some(token.clone())).await, 204, "{name}: the delivery's token");
    assert_eq!(present(&receiver, &delivery, None).await, 401, "{name}: no token");
    let unsigned = format!("{}.", token.rsplit_once('.').unwrap().0);
    assert_eq!(present(&receiver, &delivery, Some(unsigned)).await, 401, "{name}: no signature");
    let (head, signature) = token.rsplit_once('.').unwrap();
    let flipped = if signature.starts_with('A') { 'B' } else { 'A' };
    let forged = format!("{head}.{flipped}{}", &signature[1..]);
    assert_eq!(present(&receiver, &delivery, Some(forged)).await, 401, "{name}: a changed signature");
    let elsewhere = trusting("https://someone-else.example", &id).await;
    assert_eq!(present(&elsewhere, &delivery, Some(token.clone())).await, 401, "{name}: another audience");
    let other = trusting(audience, "whk_01JDQ40A1B2C3D4E5F6G7H8J9K").await;
    assert_eq!(present(&other, &delivery, Some(token)).await, 401, "{name}: another subscription's token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_python_identity_token_receiver_verifies_real_tokens() {
    the_readmes_identity_token_receiver_verifies_real_tokens("python-identity-token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_node_identity_token_receiver_verifies_real_tokens() {
    the_readmes_identity_token_receiver_verifies_real_tokens("node-identity-token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_go_identity_token_receiver_verifies_real_tokens() {
    the_readmes_identity_token_receiver_verifies_real_tokens("go-identity-token").await;
}
