//! Benchmark 7, Rate limit at window edges: clients on several instances send requests of one
//! key as fast as they may for several windows; the figure is the most requests accepted in
//! any one window's span, against the limit. Also the DynamoDB calls the limiter makes, and
//! what repeating an unknown key costs.
//!
//! The requests carry a body over 64 KiB: one the limiter accepts is then answered 413 with no
//! further DynamoDB call, so its answer follows the limiter's decision as closely as it can,
//! and the decision's time is known within its request's send and answer.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use career_core::auth::UNKNOWN_KEY_CACHE_TTL;
use career_core::credentials::ApiKey;
use career_service::Api;
use lambda_http::http::Method;

use crate::counting::{self, Calls};
use crate::report::{load_average, Row, Section};
use crate::{progress, Bench};

pub const TITLE: &str = "Rate limit at window edges";
/// The window scaled down 5× (12 s for 60 s), with the limit's rate kept: 600 a minute is
/// 120 in 12 s. The code is the same; only `Settings::rate_limit_window` is shorter.
const WINDOW: Duration = Duration::from_secs(12);
const LIMIT: u32 = 120;
const WINDOWS: u32 = 5;
const INSTANCES: usize = 2;
const CLIENTS: usize = 4;
/// Each client's pause between requests: together about 400 requests a second.
const PACE: Duration = Duration::from_millis(10);
const UNKNOWN_REQUESTS: usize = 1000;

struct Sample {
    sent: Instant,
    answered: Instant,
    accepted: bool,
}

/// What the clients saw over the windows, and the limiter's writes meanwhile.
struct Burst {
    samples: Vec<Sample>,
    writes: usize,
}

/// The most accepted requests in any one window's span of decisions, bracketed.
struct BusiestSpan {
    at_least: usize,
    at_most: usize,
}

/// What repeating one unknown key cost.
struct UnknownKey {
    reads: usize,
    took: Duration,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let calls = Calls::default();
    let instances = instances(&bench, &calls);
    let key = instances[0].full_key(&career_service::unique_user()).await;
    wait_for_window_edge().await;
    let burst = send_for_windows(&instances, &key, &calls).await?;
    progress(format!("   {UNKNOWN_REQUESTS} requests with one unknown key on one instance"));
    let unknown = repeat_unknown_key(&instances[0], &calls).await?;
    Ok(render(&burst, &unknown))
}

/// The API functions as on several Lambda instances: each with its own caches, all counting
/// their DynamoDB calls in `calls`.
fn instances(bench: &Bench, calls: &Calls) -> Vec<Arc<Api>> {
    let mut settings = career_service::services().settings.clone();
    settings.rate_limit_per_minute = LIMIT;
    settings.rate_limit_window = WINDOW;
    (0..INSTANCES)
        .map(|_| {
            let clients = career_service::clients().with_dynamodb(counting::dynamodb(&bench.dynamodb_endpoint, calls));
            Arc::new(Api::on(clients, settings.clone()))
        })
        .collect()
}

/// Waits until 300 ms before a fixed window's edge would fall, where the old limiter let
/// twice the limit through.
async fn wait_for_window_edge() {
    let window_ms = WINDOW.as_millis() as u64;
    let into = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64 % window_ms;
    tokio::time::sleep(Duration::from_millis((window_ms - 300 + window_ms - into) % window_ms)).await;
}

/// Every client sends one oversized request after another for `WINDOWS` windows.
async fn send_for_windows(instances: &[Arc<Api>], key: &str, calls: &Calls) -> Result<Burst, String> {
    progress(format!(
        "   {CLIENTS} clients on {INSTANCES} instances, one key, limit {LIMIT} per {} s, for {} s",
        WINDOW.as_secs(),
        (WINDOW * WINDOWS).as_secs()
    ));
    let oversized = format!(r#"{{"shareProfileData":true,"padding":"{}"}}"#, "x".repeat(64 * 1024));
    let mark = calls.len();
    let deadline = Instant::now() + WINDOW * WINDOWS;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (api, key, body) = (instances[client % INSTANCES].clone(), key.to_owned(), oversized.clone());
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    let answer = api.send_json(Method::PUT, "/api/v1/data-sharing", &key, &body).await;
                    let accepted = match answer.status.as_u16() {
                        413 => true,
                        429 => false,
                        other => return Err(format!("unexpected {other}: {answer:?}")),
                    };
                    samples.push(Sample { sent, answered: Instant::now(), accepted });
                    tokio::time::sleep(PACE).await;
                }
                Ok(samples)
            })
        })
        .collect();
    let mut samples = Vec::new();
    for client in clients {
        samples.extend(client.await.map_err(|e| e.to_string())??);
    }
    let writes = calls.since(mark).iter().filter(|name| *name == "UpdateItem").count();
    Ok(Burst { samples, writes })
}

/// Each decision fell between its request's send and answer. At least: requests sent at or
/// after `a` was sent and answered within a window of it were decided within one window.
/// At most: a span that starts when `a` is answered can hold only requests answered then or
/// later and sent before it ends.
fn busiest_span(accepted: &[&Sample]) -> BusiestSpan {
    let at_least = accepted
        .iter()
        .map(|a| accepted.iter().filter(|b| b.sent >= a.sent && b.answered - a.sent < WINDOW).count())
        .max()
        .unwrap_or(0);
    let at_most = accepted
        .iter()
        .map(|a| accepted.iter().filter(|b| b.answered >= a.answered && b.sent < a.answered + WINDOW).count())
        .max()
        .unwrap_or(0);
    BusiestSpan { at_least, at_most }
}

async fn repeat_unknown_key(api: &Api, calls: &Calls) -> Result<UnknownKey, String> {
    let unknown = ApiKey::generate();
    let mark = calls.len();
    let started = Instant::now();
    for _ in 0..UNKNOWN_REQUESTS {
        let answer = api.get("/api/v1/alerts", unknown.expose()).await;
        if answer.status != 401 {
            return Err(format!("an unknown key got {answer:?}"));
        }
    }
    let took = started.elapsed();
    let reads = calls.since(mark).iter().filter(|name| *name == "GetItem").count();
    Ok(UnknownKey { reads, took })
}

fn render(burst: &Burst, unknown: &UnknownKey) -> Section {
    let accepted: Vec<&Sample> = burst.samples.iter().filter(|s| s.accepted).collect();
    let refused = burst.samples.len() - accepted.len();
    let BusiestSpan { at_least, at_most } = busiest_span(&accepted);
    let writes_per_accepted = burst.writes as f64 / accepted.len().max(1) as f64;
    let allowed_reads = (unknown.took.as_secs_f64() / UNKNOWN_KEY_CACHE_TTL.as_secs_f64()).ceil() as usize;

    let mut body = method();
    body.push_str("| Figure | Value |\n|---|---|\n");
    let _ =
        writeln!(body, "| Requests sent | {} ({} accepted, {refused} refused) |", burst.samples.len(), accepted.len());
    let _ = writeln!(
        body,
        "| Most accepted in one {} s span of decisions: at least (all sent and answered within it) | **{at_least}** \
         (limit {LIMIT}) |",
        WINDOW.as_secs()
    );
    let _ = writeln!(body, "| … at most (all whose send-to-answer time meets it) | {at_most} |");
    let per_window = accepted.len() as f64 / f64::from(WINDOWS);
    let _ = writeln!(
        body,
        "| Accepted per window on average | {per_window:.1} ({:.0} % of the limit) |",
        100.0 * per_window / f64::from(LIMIT)
    );
    let _ = writeln!(
        body,
        "| DynamoDB writes (`UpdateItem`) | {} for {} accepted and {refused} refused: {writes_per_accepted:.2} per \
         accepted |",
        burst.writes,
        accepted.len()
    );
    let _ = writeln!(
        body,
        "| {UNKNOWN_REQUESTS} requests with one unknown key | {} `GetItem` in {:.1} s (cache {} s) |",
        unknown.reads,
        unknown.took.as_secs_f64(),
        UNKNOWN_KEY_CACHE_TTL.as_secs()
    );
    body.push_str(&reading());
    let rows = vec![
        Row::new(
            format!("Accepted in any {} s span (window scaled 5×)", WINDOW.as_secs()),
            format!("no span certainly over {LIMIT} (the limit)"),
            format!("at least {at_least}, at most {at_most}"),
            Some(at_least <= LIMIT as usize),
        ),
        Row::new(
            "Rate-limit writes per accepted request",
            "(reported)",
            format!("{} for {} → {writes_per_accepted:.2}", burst.writes, accepted.len()),
            None,
        ),
        Row::new(
            format!("Key reads for {UNKNOWN_REQUESTS} requests with one unknown key"),
            format!("≤ 1 per {} s", UNKNOWN_KEY_CACHE_TTL.as_secs()),
            format!("{} in {:.1} s", unknown.reads, unknown.took.as_secs_f64()),
            Some(unknown.reads <= allowed_reads),
        ),
    ];
    let unmet_notes =
        vec!["The table above gives the counts; more than the limit certainly within one span would mean two \
         instances' clocks disagree by more than a slot, or a refused request was not taken back."
            .to_owned()];
    Section { number: 7, title: TITLE, rows, body, unmet_notes }
}

fn method() -> String {
    format!(
        "{CLIENTS} clients, spread over {INSTANCES} instances of the API functions (in process, each with its own \
         caches, sharing DynamoDB Local), sent `PUT /api/v1/data-sharing` with one key and a body over 64 KiB, \
         each pausing {} ms between requests, for {WINDOWS} windows, starting 300 ms before a fixed window's edge \
         would have fallen. A request the limiter accepts is then answered 413 without another DynamoDB call, \
         one it refuses 429, so each decision is known to lie between the request's send and its answer. The \
         window is scaled down 5× to {} s with the limit's rate kept ({LIMIT} per {} s is 600 a minute); the \
         limiter is the service's (shared/src/ratelimit.rs) with `Settings::rate_limit_window` shortened, \
         nothing else changed. The fixed one-minute window it replaces let up to twice the limit through \
         around each window's edge.\n\n",
        PACE.as_millis(),
        WINDOW.as_secs(),
        WINDOW.as_secs()
    )
}

fn reading() -> String {
    format!(
        "\nThe window counts 12 slots and the current one, so it spans between one window and one window plus \
         a slot: by design at most the limit in any window's span of decisions. The two bounds bracket the true \
         figure; they differ only by how long requests took on this machine (a span's edge may cut through a \
         request whose decision time is not known more closely). Refused requests are taken back out of the \
         count and then answered from the instance's memory until their reset, so they cost about nothing; the \
         writes beyond one per accepted request are those take-backs (one per instance per refusal spell, whose \
         memory lasts whole seconds). The load average (1, 5, 15 min) when the section ended: {}.\n",
        load_average()
    )
}
