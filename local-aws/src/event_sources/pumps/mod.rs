//! The event pumps that play the part of Lambda's event source mappings and schedule
//! locally: one reads the DynamoDB streams and calls the fan-out handler; one per delivery
//! lane receives from its queue and calls the delivery handler, several batches at a time;
//! one calls the sweep function at a fixed interval. They add no behaviour of their own.

mod queue;
mod stream;

use std::time::Duration;

pub use queue::{run_queue_pump, sqs_event, RECEIVE_WAIT};
pub use stream::run_stream_pump;
pub use stream::stream_event;

/// Runs the sweep function every `every`, as the schedule does on AWS, until `stop` resolves.
/// A run that takes longer than the function's `timeout` is ended, as Lambda ends it, and
/// failed: neither the schedule nor Lambda retries it (the template says so), the next run
/// does its work.
pub async fn run_sweeps(
    sweep: &career_sweep::Deps,
    every: Duration,
    timeout: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                // Its own log lines say what it found; a failed run is tried at the next tick.
                if tokio::time::timeout(timeout, career_sweep::handle(sweep, serde_json::Value::Null)).await.is_err() {
                    tracing::warn!(?timeout, "the sweep timed out");
                }
            }
            () = &mut stop => return,
        }
    }
}

/// How long a pump waits after a failed call before the next.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
