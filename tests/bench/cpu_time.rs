//! Benchmark 11, CPU time of a cold request: each API function's release binary and the
//! hello-world floor, reaching DynamoDB Local over TLS, each process's CPU time in init,
//! its first request and warm requests, read from /proc by the stand-in runtime API
//! (runtime_api.rs) while the process waits for its answer. CPU time, unlike wall time,
//! hardly depends on what else the machine runs, and under Lambda's CPU share it is what a
//! cold request's duration is made of (section 10).
//!
//! `BENCH_COMPARE=label=dir,…` adds the API functions' binaries from other builds as
//! subjects of the same rounds, so builds (a crypto provider, a build flag) are compared
//! in one run.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use career_core::aws::runtime::EXTRA_ROOT_CERT_VAR;
use career_service::pipeline::Pipeline;
use career_service::tls::TlsTerminator;

use crate::cold_request::API_FUNCTIONS;
use crate::payloads::api_request;
use crate::report::{Row, Section};
use crate::runtime_api::{lambda_env, LambdaProcess};
use crate::stats::{mib, ms, ratio, summarize};
use crate::{progress, Bench, HELLO};

pub const TITLE: &str = "CPU time of a cold request, over TLS";
const WARMUP_ROUNDS: usize = 2;
const ROUNDS: usize = 20;
/// Requests per process after the first: the second with another key, then warm ones.
const LATER_REQUESTS: usize = 6;
/// Between requests, so each finds the process idle, as a request after a pause would.
const GAP: Duration = Duration::from_millis(10);
/// A first request may take this many times a warm request's CPU time.
const TARGET: f64 = 2.0;
const THIS_BUILD: &str = "this build";

struct Subject {
    name: &'static str,
    /// `THIS_BUILD`, or the label of a `BENCH_COMPARE` build.
    build: String,
    path: &'static str,
    binary: PathBuf,
    samples: Samples,
}

/// CPU times over the counted spawns of one subject.
#[derive(Default)]
struct Samples {
    init: Vec<Duration>,
    /// New process: first AWS connection, TLS handshake, the key looked up.
    first: Vec<Duration>,
    /// Open connection, another key looked up.
    second: Vec<Duration>,
    /// Open connection, cached key: every request after the second.
    warm: Vec<Duration>,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let pipeline = Pipeline::with_settings(false, |s| s.rate_limit_per_minute = 1_000_000).await;
    let terminator = TlsTerminator::start(&bench.dynamodb_endpoint).await?;
    let user = career_service::unique_user();
    let keys = [pipeline.api.full_key(&user).await, pipeline.api.full_key(&user).await];
    for i in 0..5 {
        pipeline.api.alert(&user, &format!("CPU time alert {i}")).await;
    }
    let mut subjects = subjects(&bench)?;
    progress(format!(
        "   {ROUNDS} spawns ({WARMUP_ROUNDS} warm-up rounds) of each of {} subjects, 1 + {LATER_REQUESTS} requests each",
        subjects.len()
    ));
    let mut n = 0u64;
    for round in 0..WARMUP_ROUNDS + ROUNDS {
        let count = subjects.len();
        for k in 0..count {
            let subject = &mut subjects[(round + k) % count];
            let spawn = spawn_and_request(&bench, &pipeline, &terminator, subject, &keys, &mut n)
                .await
                .map_err(|e| format!("{} ({}): {e}", subject.name, subject.build))?;
            if round >= WARMUP_ROUNDS {
                subject.samples.init.push(spawn.init);
                subject.samples.first.push(spawn.first);
                subject.samples.second.push(spawn.second);
                subject.samples.warm.extend(spawn.warm);
            }
        }
    }
    Ok(render(&subjects))
}

/// hello-world and the API functions of this build, then those of each `BENCH_COMPARE` build.
fn subjects(bench: &Bench) -> Result<Vec<Subject>, String> {
    let subject = |name, build: &str, path, binary| Subject {
        name,
        build: build.to_owned(),
        path,
        binary,
        samples: Samples::default(),
    };
    let mut subjects = vec![subject(HELLO, THIS_BUILD, "/api/v1/alerts", bench.binary(HELLO)?)];
    for (name, path) in API_FUNCTIONS {
        subjects.push(subject(name, THIS_BUILD, path, bench.binary(name)?));
    }
    let compare = std::env::var("BENCH_COMPARE").unwrap_or_default();
    for build in compare.split(',').filter(|b| !b.trim().is_empty()) {
        let (label, dir) = build.split_once('=').ok_or(format!("BENCH_COMPARE: `{build}` is not label=dir"))?;
        for (name, path) in API_FUNCTIONS {
            let binary = PathBuf::from(dir.trim()).join(name);
            if !binary.is_file() {
                return Err(format!("BENCH_COMPARE: {} is missing", binary.display()));
            }
            subjects.push(subject(name, label.trim(), path, binary));
        }
    }
    Ok(subjects)
}

/// One process's CPU times.
struct Spawn {
    init: Duration,
    first: Duration,
    second: Duration,
    warm: Vec<Duration>,
}

/// Spawns `subject` with the whole machine, sends its first request (key A), a second
/// (key B), then warm ones (key A, cached), and reads the CPU time each took.
async fn spawn_and_request(
    bench: &Bench,
    pipeline: &Pipeline,
    terminator: &TlsTerminator,
    subject: &Subject,
    [key_a, key_b]: &[String; 2],
    n: &mut u64,
) -> Result<Spawn, String> {
    let mut env = lambda_env(subject.name, pipeline.settings(), &terminator.url, &bench.sqs_endpoint);
    env.push((EXTRA_ROOT_CERT_VAR.into(), terminator.root_pem.display().to_string()));
    let process = LambdaProcess::spawn(&subject.binary, subject.name, &env).await?;
    *n += 1;
    let (_, _, reply) = process.cold_invoke(&api_request("GET", subject.path, &[], key_a, None, *n)).await?;
    expect_ok(subject.name, &reply)?;
    let unread = || "its CPU time could not be read (it polled before its id was known?)".to_owned();
    let init = process.init_cpu().ok_or_else(unread)?;
    let mut readings = vec![init, reply.cpu.ok_or_else(unread)?];
    for i in 0..LATER_REQUESTS {
        tokio::time::sleep(GAP).await;
        *n += 1;
        let key = if i == 0 { key_b } else { key_a };
        let (_, reply) = process.api.invoke(&api_request("GET", subject.path, &[], key, None, *n)).await?;
        expect_ok(subject.name, &reply)?;
        readings.push(reply.cpu.ok_or_else(unread)?);
    }
    let used: Vec<Duration> = readings.windows(2).map(|w| w[1].saturating_sub(w[0])).collect();
    Ok(Spawn { init, first: used[0], second: used[1], warm: used[2..].to_vec() })
}

/// The hello-world floor echoes its event; the functions answer 200.
fn expect_ok(name: &str, reply: &crate::runtime_api::Reply) -> Result<(), String> {
    let status = reply.json()["statusCode"].as_u64();
    if !reply.ok || (name != HELLO && status != Some(200)) {
        return Err(format!("answered {}", String::from_utf8_lossy(&reply.body)));
    }
    Ok(())
}

fn render(subjects: &[Subject]) -> Section {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Each process is spawned with the whole machine (no CPU quota) and Lambda's environment; DynamoDB Local \
         is reached over HTTPS through the TLS terminator of section 10 (tests/support/tls.rs, an ECDSA P-256 \
         certificate made at run time). The stand-in runtime API reads the process's CPU time — the sum over its \
         threads of `/proc/<pid>/task/<tid>/schedstat`'s time on the CPU — when the process first asks for work \
         (init) and when each response arrives, while the process waits for the API's answer. Per process: the \
         1st request (a new process: first AWS connection, TLS handshake, the key looked up, first run of every \
         code path), the 2nd with another key (looked up too, on the open connection), then {} warm requests with \
         the first key (cached), {} ms apart. {ROUNDS} spawns per subject after {WARMUP_ROUNDS} warm-up rounds, \
         interleaved (the order rotates every round). Medians; `hello-lambda` echoes its event and makes no AWS \
         call.\n",
        LATER_REQUESTS - 1,
        GAP.as_millis()
    );
    body.push_str(
        "| Subject | Build | Binary | Init CPU | 1st request | 2nd request (another key) | Warm request | 1st ÷ warm | Init ÷ hello-world's |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    let hello_init = subjects.iter().find(|s| s.name == HELLO).map(|s| summarize(&s.samples.init).median);
    let mut rows = Vec::new();
    for subject in subjects {
        let s = &subject.samples;
        let [init, first, second, warm] = [&s.init, &s.first, &s.second, &s.warm].map(|v| summarize(v).median);
        let size = std::fs::metadata(&subject.binary).map_or("—".into(), |m| mib(m.len() / 1024));
        let _ = writeln!(
            body,
            "| `{}` | {} | {size} | {} | {} | {} | {} | {:.2}× | {} |",
            subject.name,
            subject.build,
            ms(init),
            ms(first),
            ms(second),
            ms(warm),
            ratio(first, warm),
            hello_init.map_or("—".into(), |h| format!("{:.2}×", ratio(init, h)))
        );
        if subject.name != HELLO {
            let measured = format!("{} vs {} → {:.2}×", ms(first), ms(warm), ratio(first, warm));
            let (what, met) = if subject.build == THIS_BUILD {
                (format!("First request's CPU time `{}`", subject.name), Some(ratio(first, warm) <= TARGET))
            } else {
                (format!("First request's CPU time `{}` ({})", subject.name, subject.build), None)
            };
            rows.push(Row::new(what, format!("≤ {TARGET}× a warm request"), measured, met));
        }
    }
    Section { number: 11, title: TITLE, rows, body, unmet_notes: distance_notes(subjects) }
}

/// Where a first request's CPU goes beyond a warm one's: the 2nd request looks its key up
/// as the 1st does, on the open connection, so 2nd − warm is the key lookup and 1st − 2nd
/// the new connection (the TLS handshake) and the first run of the code paths.
fn distance_notes(subjects: &[Subject]) -> Vec<String> {
    subjects
        .iter()
        .filter(|s| s.name != HELLO && s.build == THIS_BUILD)
        .map(|subject| {
            let s = &subject.samples;
            let [first, second, warm] = [&s.first, &s.second, &s.warm].map(|v| summarize(v).median);
            format!(
                "`{}`: the 1st request takes {} of CPU against {} for a warm request, whose key is cached. The 2nd \
                 request, with another key on the open connection, takes {}: {} more than a warm one is the key's \
                 lookup (a `GetItem` on the keys table and its JSON), which every first request makes. The \
                 remaining {} is the new connection (the TLS handshake: key exchange and the certificate's \
                 verification) and the first run of the code paths. Against the 2nd request the 1st is {:.2}×; \
                 a first request cannot skip the lookup or the handshake.",
                subject.name,
                ms(first),
                ms(warm),
                ms(second),
                ms(second.saturating_sub(warm)),
                ms(first.saturating_sub(second)),
                ratio(first, second)
            )
        })
        .collect()
}
