//! Benchmark 5, Footprint: peak RSS of each function's release binary over 1,000 invocations through
//! the stand-in runtime API, and each function's size (zipped, when `make build` made it).

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use career_core::clock;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::typed;
use serde_json::{json, Value};

use crate::payloads::{api_request, batch, profile_record, sqs_record};
use crate::report::{Row, Section};
use crate::runtime_api::{lambda_env, LambdaProcess, Reply};
use crate::stats::{mib, ms, summarize, Summary};
use crate::{progress, Bench, FUNCTIONS, HELLO};

pub const TITLE: &str = "Footprint";
const LIMIT_KIB: u64 = 32 * 1024;

/// What each function is sent, in turn.
struct Workload {
    key: String,
    user: String,
    alert: String,
    deliveries: Vec<String>,
    last_created: Option<String>,
}

impl Workload {
    fn event(&mut self, function: &str, i: u64) -> Value {
        let flag = (i / 2).is_multiple_of(2);
        match function {
            "career-alerts" if i.is_multiple_of(2) => api_request("GET", "/api/v1/alerts", &[], &self.key, None, i),
            "career-alerts" => {
                let body = format!(r#"{{"action":"{}"}}"#, if flag { "read" } else { "unread" });
                api_request("PATCH", "/api/v1/alerts", &[("id", &self.alert)], &self.key, Some(&body), i)
            }
            "career-data-sharing" if i.is_multiple_of(2) => {
                api_request("GET", "/api/v1/data-sharing", &[], &self.key, None, i)
            }
            "career-data-sharing" => {
                let body = format!(r#"{{"shareProfileData":{flag},"shareActivityData":{}}}"#, !flag);
                api_request("PUT", "/api/v1/data-sharing", &[], &self.key, Some(&body), i)
            }
            "career-webhooks" => match i % 3 {
                0 => {
                    let url = format!("{}/career/footprint", career_service::sink_url());
                    let body = serde_json::json!({"url": url, "events": ["profile.updated", "assessment.completed"]});
                    api_request("POST", "/api/v1/webhooks", &[], &self.key, Some(&body.to_string()), i)
                }
                1 => api_request("GET", "/api/v1/webhooks", &[], &self.key, None, i),
                _ => {
                    let id = self.last_created.take().unwrap_or_else(|| "whk_missing".into());
                    api_request("DELETE", "/api/v1/webhooks", &[("id", &id)], &self.key, None, i)
                }
            },
            "career-fanout" => batch(vec![profile_record(&self.user, "prf_footprint", 1000 + i)]),
            "career-deliver" => batch(
                self.deliveries.iter().enumerate().map(|(j, body)| sqs_record(body, i * 100 + j as u64)).collect(),
            ),
            _ => json!({"hello": "world", "n": i}),
        }
    }

    /// `Err` with what was wrong about the answer.
    fn check(&mut self, function: &str, reply: &Reply) -> Result<(), String> {
        let answer = reply.json();
        if !reply.ok {
            return Err(format!("invocation error: {answer}"));
        }
        match function {
            "career-alerts" | "career-data-sharing" | "career-webhooks" => {
                let status = answer["statusCode"].as_u64().unwrap_or_default();
                if !(200..300).contains(&status) {
                    return Err(format!("status {status}: {}", answer["body"]));
                }
                if status == 201 {
                    let created: Value =
                        serde_json::from_str(answer["body"].as_str().unwrap_or("{}")).unwrap_or_default();
                    self.last_created = created["id"].as_str().map(String::from);
                }
                Ok(())
            }
            "career-fanout" | "career-deliver" => match answer["batchItemFailures"].as_array() {
                Some(failures) if failures.is_empty() => Ok(()),
                _ => Err(format!("batch answer {answer}")),
            },
            _ => Ok(()),
        }
    }
}

/// One binary over its invocations.
struct Footprint {
    function: &'static str,
    /// Peak resident set (`VmHWM`) and resident set at the end (`VmRSS`), KiB.
    peak: u64,
    rss: u64,
    times: Summary,
    size: u64,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let pipeline = Pipeline::with_settings(false, |s| s.rate_limit_per_minute = 100_000_000).await;
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let mut workload = workload(&pipeline, &receiver).await;
    let n = bench.requests as u64;
    let mut footprints = Vec::new();
    for function in std::iter::once(HELLO).chain(FUNCTIONS) {
        progress(format!("   {function}: {n} invocations"));
        footprints.push(serve_invocations(&bench, &pipeline, &mut workload, function, n).await?);
    }
    Ok(render(&bench, &footprints, n, receiver.received().len()))
}

/// A user with a key and an alert for the API functions, and ten delivery messages to
/// `receiver` of another user (whose subscriptions the webhooks function's POSTs leave alone).
async fn workload(pipeline: &Pipeline, receiver: &Receiver) -> Workload {
    let user = career_service::unique_user();
    let key = pipeline.api.full_key(&user).await;
    let alert = pipeline.api.alert(&user, "Footprint").await;
    let events_user = career_service::unique_user();
    let mut deliveries = Vec::new();
    for _ in 0..10 {
        let (subscription, _) = pipeline.subscribe(&events_user, &receiver.url, &["profile.updated"]).await;
        let data = career_core::events::EventData::ProfileUpdated {
            user_id: typed(&events_user),
            profile_id: "prf_footprint".parse().unwrap(),
        };
        let event =
            Event { id: career_core::ids::EventId::generate(), created_at: career_core::clock::Timestamp::now(), data };
        let message = DeliveryMessage::new(&event, &typed(&events_user), &typed(&subscription));
        deliveries.push(serde_json::to_string(&message).expect("messages serialize"));
    }
    Workload { key, user: events_user, alert, deliveries, last_created: None }
}

/// Starts `function`'s release binary, sends it `n` invocations, and reads its memory.
async fn serve_invocations(
    bench: &Bench,
    pipeline: &Pipeline,
    workload: &mut Workload,
    function: &'static str,
    n: u64,
) -> Result<Footprint, String> {
    let binary = bench.binary(function)?;
    let env = lambda_env(function, pipeline.settings(), &bench.dynamodb_endpoint, &bench.sqs_endpoint);
    let mut process = LambdaProcess::spawn(&binary, function, &env).await?;
    process.first_poll(Duration::from_secs(10)).await?;
    let mut times = Vec::new();
    for i in 0..n {
        if function == "career-fanout" && i.is_multiple_of(10) {
            // The emulator's SendMessageBatch takes time in proportion to the messages on the
            // queue (about 0.2 ms each); nobody reads this queue, so it is emptied as it fills.
            career_service::sqs()
                .purge_queue()
                .queue_url(&pipeline.queues.delivery)
                .send()
                .await
                .map_err(|e| format!("PurgeQueue: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
        }
        let event = workload.event(function, i);
        let (took, reply) = process.api.invoke(&event).await.map_err(|e| format!("{function}: {e}"))?;
        workload.check(function, &reply).map_err(|e| format!("{function}, invocation {i}: {e}"))?;
        times.push(took);
    }
    let (peak, rss) = process.memory_kib().ok_or_else(|| format!("{function}: /proc status unreadable"))?;
    let size = std::fs::metadata(&binary).map(|m| m.len()).unwrap_or_default();
    Ok(Footprint { function, peak, rss, times: summarize(&times), size })
}

fn render(bench: &Bench, footprints: &[Footprint], n: u64, delivered: usize) -> Section {
    let mut rows = Vec::new();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Each release binary ran against the stand-in runtime API (Lambda's environment, DynamoDB Local and \
         the SQS emulator as endpoints, request logs on) and served {n} invocations; `VmHWM` (peak resident \
         set) and `VmRSS` were read from `/proc/<pid>/status` at the end. The API functions got API Gateway \
         v2 events with a real key (alerts: list and PATCH read/unread alternating; data-sharing: GET and PUT \
         alternating; webhooks: POST, GET, DELETE in turn); the fan-out function one-record stream batches \
         of a profile change for a user with 10 subscriptions (one `Query`, one `SendMessageBatch` of 10 \
         each); the delivery function SQS batches of 10 deliveries to a loopback receiver (10 concurrent \
         claims, `GetItem`s and signed POSTs each, {} deliveries in all). MiB = 1,048,576 bytes; the target \
         (32 MB) is read as 32 MiB.\n",
        n * 10
    );
    body.push_str(
        "| Binary | Peak RSS (VmHWM) | RSS at end | Invocation median | p99 | Binary size (x86_64, stripped) |\n\
         |---|---|---|---|---|---|\n",
    );
    let mut sizes = String::new();
    for Footprint { function, peak, rss, times, size } in footprints {
        let _ = writeln!(
            body,
            "| `{function}` | {} | {} | {} | {} | {:.1} MiB |",
            mib(*peak),
            mib(*rss),
            ms(times.median),
            ms(times.p99),
            *size as f64 / 1048576.0
        );
        if *function == HELLO {
            continue;
        }
        rows.push(Row::new(
            format!("Peak RSS `{function}` ({n} invocations)"),
            "< 32 MiB",
            mib(*peak),
            Some(*peak < LIMIT_KIB),
        ));
        let zipped = zipped_size(&bench.root, function);
        let deflated = bench.binary(function).map(|binary| deflated_size(&binary)).unwrap_or_default();
        let _ = writeln!(
            sizes,
            "| `{function}` | {} | {} |",
            zipped.clone().unwrap_or_else(|| "not built: run `make build`".into()),
            deflated
        );
        rows.push(Row::new(
            format!("Zipped size `{function}`"),
            "(reported)",
            zipped.unwrap_or_else(|| format!("not built: run `make build` (x86_64 deflate ≈ {deflated})")),
            None,
        ));
    }
    let _ = writeln!(
        body,
        "\nThe receiver got {delivered} deliveries. `hello-lambda` is the floor: what the Rust runtime and \
         tokio take with nothing else. The fan-out's invocation times are mostly the SQS emulator's: its \
         `SendMessageBatch` takes longer the more messages the queue holds, so the bench empties the queue \
         (which nothing reads) every 10 invocations.\n\n\
         Sizes: `target/lambda/<function>/bootstrap.zip` as `make build` writes it (arm64); this bench does not \
         run that build. For comparison, the x86_64 release binary compressed with deflate (`gzip -6`, which \
         is what a zip of it holds, within a few hundred bytes):\n\n\
         | Function | bootstrap.zip (arm64, `make build`) | x86_64 binary, deflated |\n|---|---|---|\n{sizes}"
    );
    let unmet_notes = vec!["Peak RSS is the process's high-water mark over the run.".to_owned()];
    Section { number: 5, title: TITLE, rows, body, unmet_notes }
}

fn zipped_size(root: &Path, function: &str) -> Option<String> {
    let zip = root.join("target/lambda").join(function).join("bootstrap.zip");
    let metadata = std::fs::metadata(zip).ok()?;
    let built = metadata
        .modified()
        .ok()
        .map(|at| clock::Timestamp::from(at).to_string())
        .map(|at| format!(" (built {})", &at[..16].replace('T', " ")))
        .unwrap_or_default();
    Some(format!("{:.1} MiB{built}", metadata.len() as f64 / 1048576.0))
}

fn deflated_size(binary: &Path) -> String {
    match std::process::Command::new("gzip").args(["-6", "-c"]).arg(binary).output() {
        Ok(output) if output.status.success() => format!("{:.1} MiB", output.stdout.len() as f64 / 1048576.0),
        _ => "unknown (no gzip)".into(),
    }
}
