//! Benchmark 10, Cold requests as Lambda runs them: each API function's release binary, the
//! hello-world floor and a Node.js 20 peer, each spawned into a fresh CPU cgroup with the
//! share of a Lambda memory size, answering a real GET through a TLS terminator in front
//! of DynamoDB Local; spawn → first complete response, then warm requests. From the same
//! figures: the memory-sizing table and the `MemorySize` each function should have.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use career_core::aws::runtime::EXTRA_ROOT_CERT_VAR;
use career_service::pipeline::Pipeline;
use career_service::tls::TlsTerminator;

use crate::cgroup::{self, CpuGroups};
use crate::payloads::api_request;
use crate::report::{Row, Section};
use crate::runtime_api::{lambda_env, LambdaProcess};
use crate::stats::{middle, ms, ratio, summarize};
use crate::{progress, Bench, HELLO};

pub const TITLE: &str = "Cold requests under Lambda's CPU share, over TLS";
pub const MEMORY_SIZES: [u32; 4] = [128, 256, 512, 1024];
const WARMUP_ROUNDS: usize = 2;
const ROUNDS: usize = 20;
const WARM_REQUESTS: usize = 8;
/// Between warm requests: one CFS period, so each starts with the period's quota as a
/// request arriving after a pause would (back-to-back requests are a throughput question).
const WARM_GAP: Duration = Duration::from_millis(cgroup::PERIOD_US / 1000);
/// A size is good for a function when its cold request takes at most this multiple of
/// hello-world's at the same size: the function's own start (clients, the first connection,
/// the first run of its code) then costs no more than the runtime's floor again. More memory
/// beyond that buys only what any function gets from a faster CPU.
const COLD_WITHIN_HELLO: f64 = 2.0;
/// AWS Lambda, arm64, first 7.5 billion GB-s a month, US East (N. Virginia), in USD per
/// GB-second, as https://aws.amazon.com/lambda/pricing/ gave it when looked up on the date
/// below; the request charge ($0.20 per million) does not depend on the memory size.
pub const ARM64_USD_PER_GB_SECOND: f64 = 0.000_013_333_4;
pub const PRICE_LOOKED_UP: &str = "2026-11-22";
const NODE_PEER: &str = "node-peer";
pub const API_FUNCTIONS: [(&str, &str); 3] = [
    ("career-alerts", "/api/v1/alerts"),
    ("career-data-sharing", "/api/v1/data-sharing"),
    ("career-webhooks", "/api/v1/webhooks"),
];

/// What is spawned: a release binary, or Node.js on the peer's runtime loop.
#[derive(Clone)]
enum Program {
    Binary(PathBuf),
    Node { node: String, script: PathBuf, modules: PathBuf },
}

struct Subject {
    name: &'static str,
    path: &'static str,
    program: Program,
}

/// The samples of one subject at one memory size.
#[derive(Default)]
struct Samples {
    cold: Vec<Duration>,
    init: Vec<Duration>,
    warm: Vec<Duration>,
    throttled: Vec<u64>,
}

/// One cold request and the warm ones after it, on one process.
struct Spawn {
    cold: Duration,
    init: Duration,
    warm: Vec<Duration>,
    throttled: Option<u64>,
}

/// What every spawn shares: the cgroups, the runtime environment's endpoints and the key.
struct Stage<'a> {
    groups: &'a CpuGroups,
    pipeline: &'a Pipeline,
    terminator: &'a TlsTerminator,
    sqs_endpoint: &'a str,
    key: String,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let groups = match CpuGroups::find() {
        Ok(groups) => groups,
        Err(why) => return Ok(skipped(&why)),
    };
    let pipeline = Pipeline::with_settings(false, |s| s.rate_limit_per_minute = 1_000_000).await;
    let terminator = TlsTerminator::start(&bench.dynamodb_endpoint).await?;
    let user = career_service::unique_user();
    let key = pipeline.api.full_key(&user).await;
    for i in 0..5 {
        pipeline.api.alert(&user, &format!("Cold request alert {i}")).await;
    }
    let (node_version, subjects) = subjects(&bench)?;
    let stage =
        Stage { groups: &groups, pipeline: &pipeline, terminator: &terminator, sqs_endpoint: &bench.sqs_endpoint, key };
    let rounds = std::env::var("BENCH_COLD_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(ROUNDS);
    let samples = measure_rounds(&stage, &subjects, rounds).await?;
    Ok(render(&bench.root, &groups.describe(), &node_version, &samples, rounds))
}

/// The hello-world floor, the three API functions and the Node.js peer (with its version).
fn subjects(bench: &Bench) -> Result<(String, Vec<Subject>), String> {
    let (node_version, node_peer) = node_peer(&bench.root)?;
    let mut subjects =
        vec![Subject { name: HELLO, path: "/api/v1/alerts", program: Program::Binary(bench.binary(HELLO)?) }];
    for (name, path) in API_FUNCTIONS {
        subjects.push(Subject { name, path, program: Program::Binary(bench.binary(name)?) });
    }
    subjects.push(Subject { name: NODE_PEER, path: "/api/v1/alerts", program: node_peer });
    Ok((node_version, subjects))
}

/// Every round spawns every subject at every memory size, in an order that rotates every
/// round (and size) so no subject always follows the same one; warm-up rounds are not kept.
async fn measure_rounds<'s>(
    stage: &Stage<'_>,
    subjects: &'s [Subject],
    rounds: usize,
) -> Result<BTreeMap<(u32, &'s str), Samples>, String> {
    progress(format!(
        "   {rounds} rounds ({WARMUP_ROUNDS} warm-up) × {} memory sizes × {} subjects, a fresh cgroup per spawn ({})",
        MEMORY_SIZES.len(),
        subjects.len(),
        stage.groups.describe()
    ));
    let mut samples: BTreeMap<(u32, &str), Samples> = BTreeMap::new();
    let mut n = 0u64;
    for round in 0..WARMUP_ROUNDS + rounds {
        for (size_index, memory_mb) in MEMORY_SIZES.into_iter().enumerate() {
            for k in 0..subjects.len() {
                let subject = &subjects[(round + size_index + k) % subjects.len()];
                let spawn = spawn_and_request(stage, subject, memory_mb, &mut n).await?;
                if round >= WARMUP_ROUNDS {
                    let entry = samples.entry((memory_mb, subject.name)).or_default();
                    entry.cold.push(spawn.cold);
                    entry.init.push(spawn.init);
                    entry.warm.extend(spawn.warm);
                    entry.throttled.extend(spawn.throttled);
                }
            }
        }
    }
    Ok(samples)
}

/// Spawns `subject` in a fresh cgroup with `memory_mb`'s CPU share, times its cold request
/// and the warm ones after it; `n` numbers the requests.
async fn spawn_and_request(stage: &Stage<'_>, subject: &Subject, memory_mb: u32, n: &mut u64) -> Result<Spawn, String> {
    let group = stage.groups.create(memory_mb)?;
    let mut env = lambda_env(subject.name, stage.pipeline.settings(), &stage.terminator.url, stage.sqs_endpoint);
    env.retain(|(name, _)| name != "AWS_LAMBDA_FUNCTION_MEMORY_SIZE");
    env.push(("AWS_LAMBDA_FUNCTION_MEMORY_SIZE".into(), memory_mb.to_string()));
    let root = stage.terminator.root_pem.display().to_string();
    let mut command = match &subject.program {
        Program::Binary(path) => {
            env.push((EXTRA_ROOT_CERT_VAR.into(), root));
            Command::new(path)
        }
        Program::Node { node, script, modules } => {
            env.push(("NODE_EXTRA_CA_CERTS".into(), root));
            env.push(("NODE_PATH".into(), modules.display().to_string()));
            env.push(("AWS_EXECUTION_ENV".into(), "AWS_Lambda_nodejs20.x".into()));
            let mut command = Command::new(node);
            command.arg(script);
            command
        }
    };
    group.confine(&mut command);
    let process = LambdaProcess::start(command, subject.name, &env).await?;
    *n += 1;
    let event = api_request("GET", subject.path, &[], &stage.key, None, *n);
    let (cold, init, reply) = process.cold_invoke(&event).await.map_err(|e| format!("{}: {e}", subject.name))?;
    expect_ok(subject.name, &reply)?;
    let mut warm = Vec::with_capacity(WARM_REQUESTS);
    for _ in 0..WARM_REQUESTS {
        tokio::time::sleep(WARM_GAP).await;
        *n += 1;
        let (took, reply) = process.api.invoke(&api_request("GET", subject.path, &[], &stage.key, None, *n)).await?;
        expect_ok(subject.name, &reply)?;
        warm.push(took);
    }
    let throttled = group.throttled_periods();
    Ok(Spawn { cold, init, warm, throttled })
}

/// The hello-world floor echoes its event; the functions and the peer answer 200.
fn expect_ok(name: &str, reply: &crate::runtime_api::Reply) -> Result<(), String> {
    let json = reply.json();
    let status = json["statusCode"].as_u64();
    if !reply.ok || (name != HELLO && status != Some(200)) {
        return Err(format!("{name} answered {}", String::from_utf8_lossy(&reply.body)));
    }
    Ok(())
}

/// Node.js and the peer's script, or why the peer cannot run.
fn node_peer(root: &Path) -> Result<(String, Program), String> {
    let modules = root.join(".local/node-peer/node_modules");
    if !modules.join("@aws-sdk/client-dynamodb").is_dir() {
        return Err(format!(
            "{} is missing: run `scripts/install-local-deps.sh --bench` (make bench does)",
            modules.display()
        ));
    }
    let output = Command::new("node").arg("--version").output().map_err(|e| format!("node: {e}"))?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let script = root.join("tests/bench/node-peer/runtime.js");
    Ok((version, Program::Node { node: "node".into(), script, modules }))
}

fn skipped(why: &str) -> Section {
    Section {
        number: 10,
        title: TITLE,
        rows: vec![Row::new(TITLE, "runs", format!("skipped: no writable CPU cgroup ({why})"), None)],
        body: format!(
            "Skipped: this bench needs a CPU cgroup it can create and write (cgroup v1 `/sys/fs/cgroup/cpu` or \
             v2 `cpu.max`), and none could be: {why}. No figures are given rather than figures without the CPU \
             share.\n"
        ),
        unmet_notes: vec![],
    }
}

/// GB-s cost in USD of one million requests that each last `duration` (billed per started ms).
fn cost_per_million(duration: Duration, memory_mb: u32) -> f64 {
    let billed_ms = (duration.as_secs_f64() * 1000.0).ceil();
    billed_ms / 1000.0 * f64::from(memory_mb) / 1024.0 * ARM64_USD_PER_GB_SECOND * 1e6
}

/// The size each function should have: the cheapest (per million warm requests) of the
/// sizes whose cold request is within [`COLD_WITHIN_HELLO`] of hello-world's.
fn chosen_size(sizes: &[SizeFigures]) -> Option<u32> {
    sizes
        .iter()
        .filter(|size| size.good())
        .min_by(|a, b| a.warm_cost().total_cmp(&b.warm_cost()).then(a.memory_mb.cmp(&b.memory_mb)))
        .map(|size| size.memory_mb)
}

/// One subject's medians at one memory size, beside hello-world's cold request there.
struct SizeFigures {
    memory_mb: u32,
    cold: Duration,
    warm: Duration,
    hello_cold: Duration,
}

impl SizeFigures {
    fn to_hello(&self) -> f64 {
        ratio(self.cold, self.hello_cold)
    }

    fn good(&self) -> bool {
        self.to_hello() <= COLD_WITHIN_HELLO
    }

    fn warm_cost(&self) -> f64 {
        cost_per_million(self.warm, self.memory_mb)
    }
}

fn render(
    root: &Path,
    groups: &str,
    node_version: &str,
    samples: &BTreeMap<(u32, &str), Samples>,
    rounds: usize,
) -> Section {
    let mut rows = Vec::new();
    let mut body = method(groups, node_version, rounds);
    body.push_str(&cold_table(samples));
    body.push_str(&first_request_paragraph(samples));
    body.push_str(&node_comparison(samples, &mut rows));
    body.push_str(&memory_sizing(root, samples, &mut rows));
    let unmet_notes = vec![
        "A `MemorySize` that differs from the table's choice: set it in template.yaml (the template comment says \
         why), or read the table for why this run chose otherwise."
            .to_owned(),
    ];
    Section { number: 10, title: TITLE, rows, body, unmet_notes }
}

fn method(groups: &str, node_version: &str, rounds: usize) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Each process is spawned into a fresh CPU cgroup ({groups}) whose quota is the CPU share Lambda gives the \
         memory size: MB / {} of one CPU per {} ms period (the throttling interval observed on Lambda), so \
         128 MB gets {} µs of CPU per period. The stand-in runtime API holds a real `GET` event before the \
         process starts, as on-demand Lambda does; the time is spawn → complete response (init and the first \
         request, TLS handshake included), then {WARM_REQUESTS} warm requests ({} ms apart) on the same process. \
         DynamoDB Local is reached over HTTPS through a TLS terminator on loopback (tests/support/tls.rs) whose \
         root and certificate for 127.0.0.1 are made at run time; the Rust functions trust that root through \
         the test hook `{EXTRA_ROOT_CERT_VAR}`, the Node.js peer through `NODE_EXTRA_CA_CERTS`. {rounds} rounds \
         after {WARMUP_ROUNDS} warm-up rounds; in each round every memory size and subject, in an order that \
         rotates every round.\n",
        cgroup::FULL_VCPU_MB,
        cgroup::PERIOD_US / 1000,
        cgroup::quota_us(128),
        WARM_GAP.as_millis()
    );
    let _ = writeln!(
        body,
        "Subjects: `hello-lambda` (the floor: `lambda_runtime` echoing its event, no AWS call), the three API \
         functions each with its own `GET` (alerts: key lookup, rate limit, the list's `Query`; data-sharing \
         and webhooks the same with their `GetItem`/`Query`), and `node-peer`: Node.js {node_version} running \
         tests/bench/node-peer/handler.js, a handler with `@aws-sdk/client-dynamodb` (pinned by \
         tests/bench/node-peer/package-lock.json, installed under `.local/node-peer`) making the same three \
         DynamoDB calls as `GET /api/v1/alerts`, behind a small runtime loop (runtime.js) in place of the Node.js \
         runtime's interface client.\n"
    );
    body
}

/// Every subject at every size, against hello-world at that size.
fn cold_table(samples: &BTreeMap<(u32, &str), Samples>) -> String {
    let mut body = String::from(
        "| Memory | Subject | Cold: min | median | p90 | of which init (median) | Ratio to hello-world (median) | Warm median | Throttled periods per spawn (median) |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for memory_mb in MEMORY_SIZES {
        let hello = samples.get(&(memory_mb, HELLO)).map(|s| summarize(&s.cold).median);
        for ((size, name), s) in samples.iter().filter(|((size, _), _)| *size == memory_mb) {
            let cold = summarize(&s.cold);
            let _ = writeln!(
                body,
                "| {size} MB | `{name}` | {} | {} | {} | {} | {} | {} | {} |",
                ms(cold.min),
                ms(cold.median),
                ms(cold.p90),
                ms(summarize(&s.init).median),
                hello.map_or("—".into(), |h| format!("{:.2}×", ratio(cold.median, h))),
                ms(summarize(&s.warm).median),
                middle(&s.throttled).map_or("—".into(), |t| t.to_string())
            );
        }
    }
    body
}

/// Where `career-alerts`'s cold request goes at the smallest size, and why init does not
/// open the connection.
fn first_request_paragraph(samples: &BTreeMap<(u32, &str), Samples>) -> String {
    let Some(alerts) = samples.get(&(MEMORY_SIZES[0], "career-alerts")) else { return String::new() };
    let (cold, init, warm) =
        (summarize(&alerts.cold).median, summarize(&alerts.init).median, summarize(&alerts.warm).median);
    let first = cold.saturating_sub(init);
    format!(
        "\nAt {} MB, `career-alerts` spends {} of its cold request in init and {} in the first request, \
         {} more than a warm request: the HTTPS connector, the TLS handshake with DynamoDB and the first run \
         of the SDK's code paths, all under the CPU quota. Building the connector and opening the connection \
         during init would move that work, not remove it: on on-demand Lambda the first request waits for \
         init, so spawn → response stays the same (and both phases are billed). It would pay only where init \
         runs ahead of requests (provisioned concurrency), so the functions do not do it.\n",
        MEMORY_SIZES[0],
        ms(init),
        ms(first),
        ms(first.saturating_sub(warm))
    )
}

/// `node-peer` against `career-alerts` at every size, with a reported row per size.
fn node_comparison(samples: &BTreeMap<(u32, &str), Samples>, rows: &mut Vec<Row>) -> String {
    let mut body = String::from(
        "\n### Node.js peer against the Rust function\n\n\
         | Memory | `career-alerts` cold (median) | `node-peer` cold (median) | Node.js ÷ Rust | `career-alerts` warm | `node-peer` warm | Node.js ÷ Rust |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for memory_mb in MEMORY_SIZES {
        let (Some(rust), Some(node)) =
            (samples.get(&(memory_mb, "career-alerts")), samples.get(&(memory_mb, NODE_PEER)))
        else {
            continue;
        };
        let (rc, nc) = (summarize(&rust.cold).median, summarize(&node.cold).median);
        let (rw, nw) = (summarize(&rust.warm).median, summarize(&node.warm).median);
        let _ = writeln!(
            body,
            "| {memory_mb} MB | {} | {} | {:.1}× | {} | {} | {:.1}× |",
            ms(rc),
            ms(nc),
            ratio(nc, rc),
            ms(rw),
            ms(nw),
            ratio(nw, rw)
        );
        rows.push(Row::new(
            format!("Cold request at {memory_mb} MB: `node-peer` vs `career-alerts`"),
            "(reported)",
            format!("{} vs {} → {:.1}×", ms(nc), ms(rc), ratio(nc, rc)),
            None,
        ));
    }
    body
}

/// The cost table, the size it chooses for each function, and a row per API function
/// comparing that choice with template.yaml.
fn memory_sizing(root: &Path, samples: &BTreeMap<(u32, &str), Samples>, rows: &mut Vec<Row>) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "\n### Memory sizing\n\n\
         GB-s cost of one million requests at each size: the median duration, billed per started millisecond, \
         × the memory in GB × ${ARM64_USD_PER_GB_SECOND} per GB-s (AWS Lambda, arm64, first 7.5 billion GB-s a \
         month, US East (N. Virginia), from https://aws.amazon.com/lambda/pricing/, looked up {PRICE_LOOKED_UP}). \
         Since August 2025 the init phase is billed too, so a cold request's cost is its whole spawn → response \
         time. The $0.20 per million requests is the same at every size and left out. The size chosen is the \
         cheapest per million warm requests among the sizes whose cold request (median) is within \
         {COLD_WITHIN_HELLO}× of hello-world's at the same size: there the function's own start costs no more \
         than the runtime's floor again, and more memory buys only the faster CPU that any function gets.\n\n\
         | Function | Memory | Cold median | Warm median | USD per million warm requests | USD per million cold requests | Cold within {COLD_WITHIN_HELLO}× of hello-world's |\n\
         |---|---|---|---|---|---|---|"
    );
    let template = template_memory_sizes(root);
    for (name, _) in API_FUNCTIONS.iter().chain(std::iter::once(&(NODE_PEER, ""))) {
        let sizes: Vec<SizeFigures> = MEMORY_SIZES
            .into_iter()
            .filter_map(|memory_mb| {
                let s = samples.get(&(memory_mb, *name))?;
                let hello = samples.get(&(memory_mb, HELLO))?;
                Some(SizeFigures {
                    memory_mb,
                    cold: summarize(&s.cold).median,
                    warm: summarize(&s.warm).median,
                    hello_cold: summarize(&hello.cold).median,
                })
            })
            .collect();
        let chosen = chosen_size(&sizes);
        for size in &sizes {
            let mark = if Some(size.memory_mb) == chosen { " **(chosen)**" } else { "" };
            let _ = writeln!(
                body,
                "| `{name}` | {} MB{mark} | {} | {} | ${:.3} | ${:.3} | {} ({:.2}×) |",
                size.memory_mb,
                ms(size.cold),
                ms(size.warm),
                size.warm_cost(),
                cost_per_million(size.cold, size.memory_mb),
                if size.good() { "yes" } else { "no" },
                size.to_hello()
            );
        }
        if *name == NODE_PEER {
            continue;
        }
        if let Some(smallest) = sizes.first() {
            rows.push(Row::new(
                format!("Cold request at {} MB `{name}`", smallest.memory_mb),
                format!("≤ {COLD_WITHIN_HELLO}× hello-world's"),
                format!("{} vs {} → {:.2}×", ms(smallest.cold), ms(smallest.hello_cold), smallest.to_hello()),
                Some(smallest.good()),
            ));
        }
        let configured = template.as_ref().ok().and_then(|sizes| sizes.get(*name).copied());
        let measured = format!(
            "chosen {} MB; template.yaml has {}",
            chosen.map_or("—".into(), |c| c.to_string()),
            configured.map_or_else(|| "no size".to_owned(), |c| format!("{c} MB"))
        );
        rows.push(Row::new(
            format!("`MemorySize` of `{name}`"),
            "the table's choice",
            measured,
            Some(chosen.is_some() && chosen == configured),
        ));
    }
    if let Err(problem) = &template {
        let _ = writeln!(body, "\ntemplate.yaml could not be read for its memory sizes: {problem}");
    }
    body
}

/// Each function's `MemorySize` in template.yaml (its own, or the Globals'), keyed by the
/// binary its `CodeUri` names.
fn template_memory_sizes(root: &Path) -> Result<BTreeMap<String, u32>, String> {
    let text = std::fs::read_to_string(root.join("template.yaml")).map_err(|e| e.to_string())?;
    let template: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
    let global = template["Globals"]["Function"]["MemorySize"].as_u64();
    let mut sizes = BTreeMap::new();
    let resources = template["Resources"].as_mapping().ok_or("no Resources")?;
    for resource in resources.values() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let properties = &resource["Properties"];
        let code = properties["CodeUri"].as_str().unwrap_or_default();
        let Some(binary) = API_FUNCTIONS.iter().map(|(name, _)| *name).find(|name| code.contains(name)) else {
            continue;
        };
        if let Some(size) = properties["MemorySize"].as_u64().or(global) {
            sizes.insert(binary.to_owned(), u32::try_from(size).map_err(|e| e.to_string())?);
        }
    }
    Ok(sizes)
}
