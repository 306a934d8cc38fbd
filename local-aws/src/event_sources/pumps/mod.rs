//! The event pumps that play the part of Lambda's event source mappings and schedule
//! locally: one reads the DynamoDB streams and calls the fan-out handler; one per delivery
//! lane receives from its queue and calls the delivery handler, several batches at a time;
//! one calls the sweep function at a fixed interval. They add no behaviour of their own.

mod queue;
mod stream;

use std::time::Duration;

pub use queue::{run_queue_pump, sqs_event, RECEIVE_WAIT};
pub use stream::{checkpointed, run_stream_pump};

/// Runs the sweep function every `every` once for each of `inputs` (the template's schedules
/// of it, [`crate::template::Template::schedule_inputs`]), the runs at once, as the schedules
/// do on AWS, until `stop` resolves. A run that takes longer than the function's `timeout` is
/// ended, as Lambda ends it, and failed: neither the schedule nor Lambda retries it (the
/// template says so), the next run does its work.
pub async fn run_sweeps(
    sweep: &career_sweep::Deps,
    inputs: Vec<serde_json::Value>,
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
                // Their own log lines say what they found; a failed run is tried at the next tick.
                let runs = inputs.iter().map(|input| tokio::time::timeout(timeout, career_sweep::handle(sweep, input.clone())));
                for ended in futures_util::future::join_all(runs).await {
                    if ended.is_err() {
                        tracing::warn!(?timeout, "a sweep run timed out");
                    }
                }
            }
            () = &mut stop => return,
        }
    }
}

/// How long a pump waits after a failed call before the next.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
