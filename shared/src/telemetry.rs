//! Structured JSON logs on stdout: one line per request, never a key, secret or body.

use tracing::Subscriber;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Installs the JSON log subscriber on stdout.
pub fn init() {
    init_writing_to(std::io::stdout);
}

/// The same subscriber writing elsewhere (the benchmarks send it to /dev/null).
pub fn init_writing_to<W>(writer: W)
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let _ = tracing::subscriber::set_global_default(json_subscriber(writer));
}

/// The service's log format, writing to `writer` (tests capture it in a buffer). `RUST_LOG`
/// names the level (`info` by default); a plain level, rather than env-filter's directives,
/// keeps the filter out of the cold start.
pub fn json_subscriber<W>(writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let level = std::env::var("RUST_LOG").ok().and_then(|text| text.trim().parse().ok()).unwrap_or(LevelFilter::INFO);
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_max_level(level)
        .with_writer(writer)
        .finish()
}
