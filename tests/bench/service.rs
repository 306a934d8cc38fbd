//! `make bench` (`cargo bench --bench service`): the service's benchmarks on the local
//! stack, written to BENCHMARKS.md at the repository root. Each figure is measured against
//! a baseline in the same run and reported with its target; none is a timed assertion.
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it does nothing. While working
//! on it: `BENCH_ONLY=cold,overhead,history,delivery,footprint,e2e,ratelimit,secrets,isolation,lambda,cpu,healing,cost,trace,destinations,tokens,scale,release`
//! runs some sections, `BENCH_ROWS=in-flight,…` only those parts of a section that it names
//! (each section says which it has), `BENCH_OUTPUT=path` writes elsewhere, `BENCH_REQUESTS=n` changes the
//! request counts, `BENCH_RELEASE_COUNT=n` the held deliveries section 18 releases (10,000;
//! fewer in a debug build), `BENCH_COLD_ROUNDS=n` the cold-request rounds, `BENCH_BINARIES=dir`
//! takes the functions' binaries from another build (another profile, to compare), and
//! `BENCH_COMPARE=label=dir,…` adds other builds' API functions to section 11's rounds.

mod capacity;
mod cgroup;
mod cold_request;
mod cold_start;
mod cost;
mod counting;
mod cpu_time;
mod delivery;
mod destinations;
mod end_to_end;
mod footprint;
mod healing;
mod history;
mod identity_tokens;
mod isolation;
mod meter;
mod overhead;
mod payloads;
mod rate_limit;
mod release;
mod report;
mod runtime_api;
mod scale_model;
mod secrets;
mod stats;
mod trace;

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use report::Section;

/// What every section needs: where things are and how many requests to time.
pub struct Bench {
    pub root: PathBuf,
    /// Where `make bench`'s release build put the binaries.
    pub release: PathBuf,
    pub dynamodb_endpoint: String,
    pub sqs_endpoint: String,
    /// Requests per timed series (at least 1,000 unless overridden).
    pub requests: usize,
}

pub const HELLO: &str = "hello-lambda";
pub const FUNCTIONS: [&str; 5] =
    ["career-alerts", "career-data-sharing", "career-webhooks", "career-fanout", "career-deliver"];

impl Bench {
    /// The release binary `name`, or why it is missing.
    pub fn binary(&self, name: &str) -> Result<PathBuf, String> {
        let path = self.release.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{} is missing: run `make bench` (it builds the release binaries)", path.display()))
        }
    }
}

static STARTED: OnceLock<Instant> = OnceLock::new();

/// A progress line on stdout.
pub fn progress(message: impl AsRef<str>) {
    let elapsed = STARTED.get_or_init(Instant::now).elapsed().as_secs_f64();
    println!("[bench {elapsed:6.1}s] {}", message.as_ref());
}

/// The functions' request and delivery logs, formatted as on Lambda (telemetry::init) but
/// written to /dev/null, so the in-process handlers pay for their logging as deployed.
fn init_logging() {
    use std::io::Write;
    struct DevNull(Arc<std::fs::File>);
    impl Write for DevNull {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            (&*self.0).write(buf)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let null = Arc::new(std::fs::OpenOptions::new().write(true).open("/dev/null").expect("/dev/null"));
    career_core::telemetry::init_writing_to(move || DevNull(null.clone()));
}

fn main() {
    if !std::env::args().skip(1).any(|arg| arg == "--bench") {
        println!("The service benchmarks run with `cargo bench --bench service` (`make bench`); nothing to do here.");
        return;
    }
    let started = *STARTED.get_or_init(Instant::now);
    let load_at_start = report::load_average();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // target/release/deps/service-… → target/release
    let exe = std::env::current_exe().expect("the bench's own path");
    let built = exe.parent().and_then(|deps| deps.parent()).expect("target/release").to_path_buf();
    let release = std::env::var("BENCH_BINARIES").map(PathBuf::from).unwrap_or(built);
    let only: Option<Vec<String>> =
        std::env::var("BENCH_ONLY").ok().map(|list| list.split(',').map(|s| s.trim().to_owned()).collect());
    let output = std::env::var("BENCH_OUTPUT").map(PathBuf::from).unwrap_or_else(|_| root.join("BENCHMARKS.md"));
    let requests = std::env::var("BENCH_REQUESTS").ok().and_then(|n| n.parse().ok()).unwrap_or(1000);
    init_logging();
    // The SQS emulator inherits this: it lets the footprint run empty the queue it fills
    // (moto otherwise allows one PurgeQueue a minute, like SQS).
    std::env::set_var("MOTO_SQS_ENFORCE_STRICT_QUEUE_PURGE_BEHAVIOUR", "false");

    progress("starting DynamoDB Local and the SQS emulator");
    let services = career_service::services();
    let bench = Arc::new(Bench {
        root: root.clone(),
        release,
        dynamodb_endpoint: services.dynamodb_endpoint.clone(),
        sqs_endpoint: services.sqs_endpoint.clone(),
        requests,
    });
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let wanted = |name: &str| only.as_ref().is_none_or(|only| only.iter().any(|o| o == name));
    let mut sections = Vec::new();
    runtime.block_on(async {
        if wanted("cold") {
            sections.push(section(1, cold_start::TITLE, cold_start::run(bench.clone())).await);
        }
        if wanted("overhead") {
            sections.push(section(2, overhead::TITLE, overhead::run(bench.clone())).await);
        }
        if wanted("history") {
            sections.push(section(3, history::TITLE, history::run(bench.clone())).await);
        }
        if wanted("delivery") {
            sections.push(section(4, delivery::TITLE, delivery::run(bench.clone())).await);
        }
        if wanted("footprint") {
            sections.push(section(5, footprint::TITLE, footprint::run(bench.clone())).await);
        }
        if wanted("e2e") {
            sections.push(section(6, end_to_end::TITLE, end_to_end::run(bench.clone())).await);
        }
        if wanted("ratelimit") {
            sections.push(section(7, rate_limit::TITLE, rate_limit::run(bench.clone())).await);
        }
        if wanted("secrets") {
            sections.push(section(8, secrets::TITLE, secrets::run(bench.clone())).await);
        }
        if wanted("isolation") {
            sections.push(section(9, isolation::TITLE, isolation::run(bench.clone())).await);
        }
        if wanted("lambda") {
            sections.push(section(10, cold_request::TITLE, cold_request::run(bench.clone())).await);
        }
        if wanted("cpu") {
            sections.push(section(11, cpu_time::TITLE, cpu_time::run(bench.clone())).await);
        }
        if wanted("healing") {
            sections.push(section(12, healing::TITLE, healing::run(bench.clone())).await);
        }
        if wanted("cost") {
            sections.push(section(13, cost::TITLE, cost::run(bench.clone())).await);
        }
        if wanted("trace") {
            sections.push(section(14, trace::TITLE, trace::run(bench.clone())).await);
        }
        if wanted("destinations") {
            sections.push(section(15, destinations::TITLE, destinations::run(bench.clone())).await);
        }
        if wanted("tokens") {
            sections.push(section(16, identity_tokens::TITLE, identity_tokens::run(bench.clone())).await);
        }
        if wanted("scale") {
            sections.push(section(17, scale_model::TITLE, scale_model::run(bench.clone())).await);
        }
        if wanted("release") {
            sections.push(section(18, release::TITLE, release::run(bench.clone())).await);
        }
    });
    let took = started.elapsed();
    let markdown = report::render(&sections, &root, took, &load_at_start);
    std::fs::write(&output, &markdown).unwrap_or_else(|e| panic!("writing {}: {e}", output.display()));
    progress(format!("wrote {} ({:.0} s)", output.display(), took.as_secs_f64()));
    for section in &sections {
        for row in &section.rows {
            let verdict = match row.met {
                Some(true) => "met",
                Some(false) => "NOT MET",
                None => "",
            };
            println!("  {}. {:<52} {:<22} {:<48} {verdict}", section.number, row.what, row.target, row.measured);
        }
    }
    // The local services and any pump tasks end with the process.
    drop(runtime);
    std::process::exit(0);
}

/// Runs one section in its own task, so a panic becomes a failed section, not a lost report,
/// on a fresh DynamoDB Local, so its figures do not depend on which sections ran before it.
async fn section<F>(number: u8, title: &'static str, run: F) -> Section
where
    F: Future<Output = Result<Section, String>> + Send + 'static,
{
    progress(format!("{number}. {title}"));
    let started = Instant::now();
    if let Err(error) = career_service::fresh_dynamodb().await {
        return Section::failed(number, title, &format!("starting a fresh DynamoDB Local: {error}"));
    }
    let outcome = match tokio::spawn(run).await {
        // The number given here is the one the report uses, whatever the section set.
        Ok(Ok(section)) => Section { number, ..section },
        Ok(Err(error)) => Section::failed(number, title, &error),
        Err(panic) => Section::failed(number, title, &format!("panicked: {panic}")),
    };
    progress(format!("{number}. done in {:.1} s", started.elapsed().as_secs_f64()));
    outcome
}

/// Whether `BENCH_ROWS` asks for the section part `part` (every part when it is unset).
pub fn part_wanted(part: &str) -> bool {
    std::env::var("BENCH_ROWS").map_or(true, |parts| parts.split(',').any(|wanted| wanted.trim() == part))
}

/// Waits for `ready`, polling every millisecond, for at most `within`.
pub async fn wait_until(within: Duration, mut ready: impl FnMut() -> bool) -> Option<Instant> {
    let deadline = Instant::now() + within;
    loop {
        if ready() {
            return Some(Instant::now());
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
