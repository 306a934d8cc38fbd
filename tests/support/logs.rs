//! What the service logs during a test: its global log subscriber, installed once, writing to
//! the capture of the thread that logs, or else to the test's own output.

use std::cell::RefCell;

thread_local! {
    /// The log lines written on this thread while `capture_logs` runs.
    static CAPTURED: RefCell<Option<Vec<u8>>> = const { RefCell::new(None) };
}

/// Installs the service's log subscriber for the whole test binary, once, before anything
/// else installs one: the functions' and `careerctl local`'s lines then go to the test's
/// output, which the harness shows only for a failing test (`careerctl local` would write
/// them to the process's stdout, past the harness, into every green `make test`).
pub fn install() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| career_core::telemetry::init_writing_to(|| ThreadLog));
}

/// Runs `run` and returns what the service's log subscriber wrote on this thread meanwhile.
/// The subscriber is the process's global one, installed once. A scoped one
/// (`tracing::subscriber::set_default`) loses lines when another test's thread reaches a log
/// call first: with one dispatcher registered, tracing-core caches that call's interest from
/// the other thread's (absent) subscriber as "never" (tokio-rs/tracing#3611).
pub fn capture_logs(run: impl FnOnce()) -> String {
    install();
    CAPTURED.with(|captured| *captured.borrow_mut() = Some(Vec::new()));
    run();
    let lines = CAPTURED.with(|captured| captured.borrow_mut().take()).unwrap_or_default();
    String::from_utf8_lossy(&lines).into_owned()
}

/// Writes to this thread's capture, if one is open; else to the test's output (`print!`, which
/// the harness captures, for the threads the test started too).
struct ThreadLog;

impl std::io::Write for ThreadLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let captured =
            CAPTURED.with(|captured| captured.borrow_mut().as_mut().map(|lines| lines.extend_from_slice(bytes)));
        if captured.is_none() {
            print!("{}", String::from_utf8_lossy(bytes));
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
