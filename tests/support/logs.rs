//! What the service logs during a test: its global log subscriber, installed once, writing to
//! the capture of the thread that logs.

use std::cell::RefCell;

thread_local! {
    /// The log lines written on this thread while `capture_logs` runs.
    static CAPTURED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Runs `run` and returns what the service's log subscriber wrote on this thread meanwhile.
/// The subscriber is the process's global one, installed once and writing nowhere outside
/// a capture. A scoped one (`tracing::subscriber::set_default`) loses lines when another
/// test's thread reaches a log call first: with one dispatcher registered, tracing-core
/// caches that call's interest from the other thread's (absent) subscriber as "never"
/// (tokio-rs/tracing#3611).
pub fn capture_logs(run: impl FnOnce()) -> String {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| career_core::telemetry::init_writing_to(|| ThreadLog));
    CAPTURED.with(|captured| *captured.borrow_mut() = Some(Vec::new()));
    run();
    let lines = CAPTURED.with(|captured| captured.borrow_mut().take()).unwrap_or_default();
    String::from_utf8_lossy(&lines).into_owned()
}

/// Writes to this thread's capture, if one is open.
struct ThreadLog;

impl std::io::Write for ThreadLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        CAPTURED.with(|captured| captured.borrow_mut().as_mut().map(|lines| lines.extend_from_slice(bytes)));
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
