//! The sweep function (contract section 12): a message can be lost on its way (a queue
//! purged, the local SQS emulator killed, a hand-over cut half-way), but its record stays
//! `pending`. Every `pending` delivery whose next attempt is more than
//! `DELIVERY_SWEEP_AFTER_SECONDS` overdue goes back on the retry lane in its record's next
//! generation, so a copy that turns up after all is dropped unsent. It reads the sparse due
//! index, so what it costs follows the overdue deliveries, not the log's size. On AWS a
//! schedule runs it; `make run` runs it every 10 seconds.

use std::time::Duration;

use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings};
use career_core::delivery::DeliveryMessage;
use career_core::queue::{DeliveryQueues, Lane, QueueError};
use career_core::store::deliveries::{DeliveryTable, Overdue};
use career_core::store::StoreError;
use futures_util::StreamExt;
use serde::Serialize;

/// At most this many overdue deliveries of each due shard per run; the next run takes the rest.
const PER_SHARD: u32 = 500;
/// How many overdue records are claimed at once.
const CLAIMS_AT_ONCE: usize = 16;

pub struct Deps {
    deliveries: DeliveryTable,
    queues: DeliveryQueues,
    sweep_after: Duration,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            deliveries: DeliveryTable::new(clients.dynamodb().clone(), &settings.tables.deliveries),
            queues: DeliveryQueues::new(clients, settings)?,
            sweep_after: settings.sweep_after,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// What one run found and put back.
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
pub struct Swept {
    /// Pending deliveries found overdue.
    pub overdue: usize,
    /// Those put back on the retry lane (the others moved on while the sweep looked).
    pub requeued: usize,
}

/// One run, as the schedule (or `make run`) invokes it; the event carries nothing it needs. A
/// run that fails is a failed invocation (`SweepErrorsAlarm`, the dashboard's failed runs).
pub async fn handle(deps: &Deps, _event: serde_json::Value) -> Result<Swept, SweepError> {
    match sweep(deps, Timestamp::now()).await {
        Ok(swept) => {
            if swept.overdue > 0 {
                tracing::warn!(overdue = swept.overdue, requeued = swept.requeued, "overdue deliveries put back");
            }
            Ok(swept)
        }
        Err(err) => {
            tracing::error!(error = %err, "the sweep failed; the next run tries again");
            Err(err)
        }
    }
}

/// Puts the deliveries overdue at `now` back on the retry lane.
pub async fn sweep(deps: &Deps, now: Timestamp) -> Result<Swept, SweepError> {
    let cutoff = now - deps.sweep_after;
    let overdue = deps.deliveries.overdue(cutoff, PER_SHARD).await?;
    // The futures are made first: a stream that maps with a closure over `deps` is not
    // provably `Send`.
    let claims: Vec<_> = overdue.iter().map(|found| claim(deps, found, cutoff, now)).collect();
    let claimed: Vec<Result<Option<DeliveryMessage>, SweepError>> =
        futures_util::stream::iter(claims).buffer_unordered(CLAIMS_AT_ONCE).collect().await;
    let mut messages = Vec::new();
    for result in claimed {
        messages.extend(result?);
    }
    // Claimed first: should this send fail, the records are due now and the next run but one
    // finds them again.
    deps.queues.send(Lane::Retry, &messages).await?;
    Ok(Swept { overdue: overdue.len(), requeued: messages.len() })
}

/// Moves an overdue record to its next generation; its message, or `None` when it moved on.
async fn claim(
    deps: &Deps,
    found: &Overdue,
    cutoff: Timestamp,
    now: Timestamp,
) -> Result<Option<DeliveryMessage>, SweepError> {
    let Some(claimed) = deps.deliveries.claim_overdue(found, cutoff, now).await? else { return Ok(None) };
    match claimed.message() {
        Ok(message) => Ok(Some(message)),
        Err(err) => {
            tracing::error!(delivery_id = %found.delivery_id, error = %err, "an overdue record's body cannot be read");
            Ok(None)
        }
    }
}
