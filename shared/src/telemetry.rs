//! Structured JSON logs on stdout: one line per request, never a key, secret or body.

use tracing_subscriber::EnvFilter;

/// Installs the JSON log subscriber (`RUST_LOG` filters, `info` by default).
pub fn init() {
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_target(false)
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")))
        .try_init();
}
