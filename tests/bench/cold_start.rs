//! Benchmark 1, Cold start: each function's release binary from exec to its first request for work
//! from a stand-in runtime API, against the hello-world binary, interleaved in one run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use career_service::pipeline::Pipeline;
use lambda_http::http;
use local_aws::gateway::{lambda_request, ApiFunctions};
use tokio::net::TcpListener;

use crate::payloads::api_request;
use crate::report::{Row, Section};
use crate::runtime_api::{lambda_env, LambdaProcess};
use crate::stats::{mib, middle, ms, ratio, summarize, Summary};
use crate::{progress, Bench, FUNCTIONS, HELLO};

pub const TITLE: &str = "Cold start";
const WARMUP_ROUNDS: usize = 3;
const ROUNDS: usize = 40;
const FIRST_REQUEST_SPAWNS: usize = 30;
const FIRST_REQUEST_WARMUP: usize = 2;
const WARM_DYNAMODB_LOCAL: usize = 200;
const TARGET: f64 = 1.5;
/// The API functions and the route each one's first requests `GET`.
const API_CASES: [(&str, &str); 3] = [
    ("career-alerts", "/api/v1/alerts"),
    ("career-data-sharing", "/api/v1/data-sharing"),
    ("career-webhooks", "/api/v1/webhooks"),
];

/// A TCP endpoint that accepts connections and never answers: it counts any network call
/// a function makes during init.
struct Sentinel {
    url: String,
    accepted: Arc<AtomicUsize>,
}

impl Sentinel {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        Sentinel { url, accepted }
    }
}

/// One binary's start-up times over the counted rounds.
struct Startups {
    name: &'static str,
    binary: PathBuf,
    samples: Vec<Duration>,
    /// Page faults and resident set (KiB) when the process asked for work.
    faults: Vec<u64>,
    rss: Vec<u64>,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let pipeline = Pipeline::with_settings(false, |s| s.rate_limit_per_minute = 1_000_000).await;
    let (dynamodb, sqs) = (Sentinel::start().await, Sentinel::start().await);
    let mut binaries = std::iter::once(HELLO)
        .chain(FUNCTIONS)
        .map(|name| Ok(Startups { name, binary: bench.binary(name)?, samples: vec![], faults: vec![], rss: vec![] }))
        .collect::<Result<Vec<_>, String>>()?;
    spawn_rounds(&mut binaries, &pipeline, &dynamodb, &sqs).await?;
    let init_connections = dynamodb.accepted.load(Ordering::SeqCst) + sqs.accepted.load(Ordering::SeqCst);

    let hello = summarize(&binaries[0].samples);
    let (mut body, mut rows) = startup_table(&binaries, &hello);
    let function_spawns = (WARMUP_ROUNDS + ROUNDS) * FUNCTIONS.len();
    body.push_str(&init_connections_paragraph(init_connections, function_spawns));
    rows.push(Row::new(
        "Network connections during init (all spawns)",
        "0",
        init_connections.to_string(),
        Some(init_connections == 0),
    ));
    let distance = distance_note(&bench, &binaries, &hello, init_connections);

    progress("   first requests of a fresh process (does warming a connection at init help?)");
    body.push_str(&first_requests(&bench, &pipeline).await?);
    Ok(Section { number: 1, title: TITLE, rows, body, unmet_notes: vec![distance] })
}

/// Spawns every binary once per round, in an order that rotates every round so no binary
/// always follows the same one, and records the counted rounds.
async fn spawn_rounds(
    binaries: &mut [Startups],
    pipeline: &Pipeline,
    dynamodb: &Sentinel,
    sqs: &Sentinel,
) -> Result<(), String> {
    let count = binaries.len();
    progress(format!(
        "   {ROUNDS} spawns of each of {count} binaries ({WARMUP_ROUNDS} warm-up rounds not counted), interleaved"
    ));
    for round in 0..WARMUP_ROUNDS + ROUNDS {
        for k in 0..count {
            let binary = &mut binaries[(round + k) % count];
            let env = lambda_env(binary.name, pipeline.settings(), &dynamodb.url, &sqs.url);
            let mut process = LambdaProcess::spawn(&binary.binary, binary.name, &env).await?;
            let startup =
                process.first_poll(Duration::from_secs(10)).await.map_err(|e| format!("{}: {e}", binary.name))?;
            let (faults, rss) = (process.page_faults(), process.memory_kib().map(|(_, rss)| rss));
            drop(process);
            if round >= WARMUP_ROUNDS {
                binary.samples.push(startup);
                binary.faults.extend(faults);
                binary.rss.extend(rss);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}

/// The method, the table of start-up times and a row per function against its target.
fn startup_table(binaries: &[Startups], hello: &Summary) -> (String, Vec<Row>) {
    let mut rows = Vec::new();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Time from spawning the release binary to its first `GET /2018-06-01/runtime/invocation/next` on a \
         stand-in runtime API on loopback, over {ROUNDS} spawns per binary, interleaved (the order rotates \
         every round; {WARMUP_ROUNDS} warm-up rounds are not counted). Each process gets Lambda's environment \
         (`AWS_LAMBDA_*`, region, session credentials, `LAMBDA_TASK_ROOT`, `TZ`, …) and the service's \
         settings, and nothing else; it is killed once it asks for work. `hello-lambda` \
         (tests/bench/hello-lambda) is `lambda_runtime::run` on an echo handler, built in the same \
         `make bench` release build.\n"
    );
    body.push_str(
        "| Binary | Median | p90 | Min | Ratio to hello-world (median) | Page faults by then | RSS by then |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for binary in binaries {
        let s = summarize(&binary.samples);
        let r = ratio(s.median, hello.median);
        let _ = writeln!(
            body,
            "| `{}` | {} | {} | {} | {r:.2}× | {} | {} |",
            binary.name,
            ms(s.median),
            ms(s.p90),
            ms(s.min),
            middle(&binary.faults).map_or("—".into(), |f| f.to_string()),
            middle(&binary.rss).map_or("—".into(), mib)
        );
        if binary.name != HELLO {
            // On a busy machine the minimum is the least disturbed figure: shown next to the median.
            let measured = format!(
                "{} vs {} → {r:.2}× (min {} vs {} → {:.2}×)",
                ms(s.median),
                ms(hello.median),
                ms(s.min),
                ms(hello.min),
                ratio(s.min, hello.min)
            );
            rows.push(Row::new(
                format!("Cold start `{}`", binary.name),
                format!("≤ {TARGET}× hello-world"),
                measured,
                Some(r <= TARGET),
            ));
        }
    }
    (body, rows)
}

fn init_connections_paragraph(init_connections: usize, function_spawns: usize) -> String {
    format!(
        "\nNetwork calls during init: the DynamoDB and SQS endpoints pointed at listeners that count \
         connections and never answer; they saw **{init_connections}** connections over all {function_spawns} \
         spawns of the functions, so the SDK clients are built without a network call at init.\n\n"
    )
}

/// How far the functions are from the target and where that time goes (shown if one misses it).
fn distance_note(bench: &Bench, binaries: &[Startups], hello: &Summary, init_connections: usize) -> String {
    let functions = &binaries[1..];
    let mean = functions.iter().map(|b| summarize(&b.samples).median).sum::<Duration>() / functions.len() as u32;
    let hello_faults = middle(&binaries[0].faults).unwrap_or_default();
    let size = |name: &str| bench.binary(name).ok().and_then(|path| std::fs::metadata(path).ok()).map(|m| m.len());
    let function_size = FUNCTIONS.iter().filter_map(|name| size(name)).max().unwrap_or_default();
    format!(
        "Distance: the functions start in {} (mean of the five medians) against {} for hello-world; the \
         target allows {}. Nothing is fetched over the network at init ({init_connections} connections), and \
         no certificate store is read: the functions trust only the Amazon Trust Services roots compiled into \
         them (shared/src/aws/runtime.rs). The gap is the rest of init: the binary is up to {} against {} for \
         hello-world and touches more of it (page faults above, against {hello_faults} for hello-world), and \
         building the SDK clients (the `SdkConfig` itself is built by hand from Lambda's environment, with no \
         profile file or provider chain), next to the settings and the JSON logger. The SDK crates are without \
         their default features; what is left is mostly the size of the AWS SDK's generated code that init maps \
         and faults in, and the first run of its client set-up. Section 10 measures what that costs under \
         Lambda's CPU share.",
        ms(mean),
        ms(hello.median),
        ms(hello.median.mul_f64(TARGET)),
        mib(function_size / 1024),
        mib(size(HELLO).unwrap_or_default() / 1024)
    )
}

/// The first three requests of fresh API function processes against DynamoDB Local:
/// 1st: new connection, key not cached; 2nd: another key (lookup again) on the now warm
/// connection; 3rd: the first key again (cached). 1st − 2nd is what a connection opened
/// during init could save.
async fn first_requests(bench: &Bench, pipeline: &Pipeline) -> Result<String, String> {
    let user = career_service::unique_user();
    let keys = [pipeline.api.full_key(&user).await, pipeline.api.full_key(&user).await];
    warm_dynamodb_local(pipeline, &keys[0]).await?;
    let times = time_first_requests(bench, pipeline, &keys).await?;
    Ok(first_requests_table(&times))
}

/// DynamoDB Local compiles its code paths as they are first used: warm them (in process, on
/// the same tables) so the fresh processes' first requests do not pay for that.
async fn warm_dynamodb_local(pipeline: &Pipeline, key: &str) -> Result<(), String> {
    let warm = ApiFunctions::new(
        &career_service::deployment(pipeline.settings()),
        &career_service::clients(),
        pipeline.settings(),
    )
    .map_err(|e| e.to_string())?;
    for _ in 0..WARM_DYNAMODB_LOCAL {
        for (_, path) in API_CASES {
            let (parts, ()) = http::Request::builder()
                .uri(path)
                .header("authorization", format!("Bearer {key}"))
                .body(())
                .expect("a request")
                .into_parts();
            warm.handle(lambda_request(parts, Default::default())).await;
        }
    }
    Ok(())
}

/// Per API function, the invocation times of the 1st, 2nd and 3rd request over the counted
/// spawns. Spawns outer, functions inner, so drift hits every function alike.
async fn time_first_requests(
    bench: &Bench,
    pipeline: &Pipeline,
    [key_a, key_b]: &[String; 2],
) -> Result<Vec<[Vec<Duration>; 3]>, String> {
    let mut times: Vec<[Vec<Duration>; 3]> = API_CASES.iter().map(|_| Default::default()).collect();
    for spawn in 0..FIRST_REQUEST_WARMUP + FIRST_REQUEST_SPAWNS {
        for (case, (name, path)) in API_CASES.into_iter().enumerate() {
            let env = lambda_env(name, pipeline.settings(), &bench.dynamodb_endpoint, &bench.sqs_endpoint);
            let mut process = LambdaProcess::spawn(&bench.binary(name)?, name, &env).await?;
            process.first_poll(Duration::from_secs(10)).await?;
            for (i, key) in [key_a, key_b, key_a].into_iter().enumerate() {
                let event = api_request("GET", path, &[], key, None, (spawn * 3 + i) as u64);
                let (took, reply) = process.api.invoke(&event).await?;
                let status = reply.json()["statusCode"].as_u64().unwrap_or_default();
                if status != 200 {
                    let answer = String::from_utf8_lossy(&reply.body).into_owned();
                    return Err(format!("{name}: GET {path} answered {status}: {answer}"));
                }
                if spawn >= FIRST_REQUEST_WARMUP {
                    times[case][i].push(took);
                }
            }
        }
    }
    Ok(times)
}

fn first_requests_table(times: &[[Vec<Duration>; 3]]) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "### First requests of a fresh process\n\n\
         {FIRST_REQUEST_SPAWNS} fresh processes per API function against DynamoDB Local (after \
         {FIRST_REQUEST_WARMUP} warm-up rounds, and with DynamoDB Local's code paths warmed in process first), \
         each sent three GETs through the runtime API: the 1st opens the DynamoDB connection and looks its key up; the 2nd uses \
         another key (looked up too) on the now open connection; the 3rd repeats the first key (cached). \
         Medians of the invocation time (event handed over → response posted):\n"
    );
    body.push_str(
        "| Function | 1st (new connection, key lookup) | 2nd (open connection, key lookup) | 3rd (open connection, cached key) | 1st − 2nd (per process) |\n\
         |---|---|---|---|---|\n",
    );
    // 1st − 2nd is taken per process (paired), then the median over the processes.
    let mut deltas = Vec::new();
    for ((name, _), times) in API_CASES.iter().zip(times) {
        let paired: Vec<Duration> = times[0].iter().zip(&times[1]).map(|(a, b)| a.saturating_sub(*b)).collect();
        let delta = summarize(&paired).median;
        let [a, b, c] = [0, 1, 2].map(|i| summarize(&times[i]).median);
        let _ = writeln!(body, "| `{name}` | {} | {} | {} | {} |", ms(a), ms(b), ms(c), ms(delta));
        deltas.push(delta);
    }
    let mean = deltas.iter().sum::<Duration>() / deltas.len() as u32;
    let _ = writeln!(
        body,
        "\nThe first request of a fresh process costs about {} more than the second, which also looks a key \
         up (median over the processes of each function's difference, mean of the three functions). On loopback \
         the TCP handshake is a fraction of a millisecond. It is first-use work in the process: the SDK's HTTPS \
         connector, the connection, identity and endpoint resolution, and the first run of every code path. \
         Building the connector (or opening a connection) during init would move this out of the first request; \
         against real DynamoDB it would also move the TLS handshake, which loopback does not have. With \
         on-demand Lambda the first request waits for init anyway, so that pays off mainly with provisioned \
         concurrency or SnapStart, where init runs ahead of requests.\n",
        ms(mean)
    );
    body
}
