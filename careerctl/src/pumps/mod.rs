//! The event pumps that play the part of Lambda's event source mappings locally: one reads
//! the DynamoDB streams and calls the fan-out handler; one per delivery lane receives from
//! its queue and calls the delivery handler, several batches at a time. They add no
//! behaviour of their own.

mod queue;
mod stream;

use std::time::Duration;

pub use queue::{run_queue_pump, sqs_event, BATCHES_PER_QUEUE};
pub use stream::run_stream_pump;

/// How long a pump waits after a failed call before the next.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
