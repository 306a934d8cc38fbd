//! The sweep function (contract section 12): a message can be lost on its way (a queue
//! purged, the local SQS emulator killed, a hand-over cut half-way), but its record stays
//! `pending`. Every `pending` delivery whose next attempt is more than
//! `DELIVERY_SWEEP_AFTER_SECONDS` overdue goes back on the retry lane in its record's next
//! generation, so a copy that turns up after all is dropped unsent. It reads the sparse due
//! index, so what it costs follows the overdue deliveries, not the log's size. On AWS a
//! schedule runs it; `make run` runs it every 10 seconds.
//!
//! A first try that the fan-out created is in no due index entry of its own: the fan-out
//! lists a batch's records in one marker (`store::deliveries::Marker`), and the sweep puts
//! those of an overdue marker that are still `pending` in the index before it reads it.
//!
//! It also queues the records whose next attempt waits in the table rather than in a message
//! (a wait longer than SQS's longest delay, contract section 22): each run takes those due
//! within [`LOOKAHEAD`] out of their wait and posts them with the delay left.
//!
//! It takes only what is really lost. A delivery being attempted holds a claim on its record
//! (`delivery::plan::Lease`) that the sweep's write respects. A delivery whose message waits
//! in a lane backlog holds none, so the sweep tells it apart by the lanes' counts: as many
//! of the most recently due overdue records as the lanes hold messages may still have their
//! message on the way, and are left alone ([`lost`]), for at most an hour past the window.

use std::time::Duration;

use career_core::aws::outbox::{Outbox, OutboxError};
use career_core::aws::queue::{DeliveryQueues, QueueError};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table};
use career_core::store::deliveries::{DeliveryTable, Overdue};
use career_core::store::StoreError;
use futures_util::StreamExt;
use serde::Serialize;

/// At most this many overdue deliveries of each due shard per run; the next run takes the rest.
const PER_SHARD: u32 = 500;
/// How far ahead a run queues the parked records (those whose next attempt waits in the
/// table, contract section 22): beyond the time to the next run (five minutes on AWS), and
/// within a message's longest delay, so each goes out at its time.
const LOOKAHEAD: Duration = Duration::from_secs(10 * 60);
/// How many markers are read at once.
const MARKERS_AT_ONCE: usize = 16;
/// How long past the window a record may still be waiting in a backlog: one due longer ago is
/// taken whatever the lanes hold, so a lane that never empties (steady traffic) cannot hold
/// back a lost delivery for ever. A lane that far behind gains nothing from more patience.
const BACKLOG_PATIENCE: Duration = Duration::from_secs(60 * 60);

pub struct Deps {
    deliveries: DeliveryTable,
    queues: DeliveryQueues,
    outbox: Outbox,
    sweep_after: Duration,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        let deliveries =
            DeliveryTable::new(clients.dynamodb().clone(), settings.tables.require([Table::Deliveries])?[0]);
        let queues = DeliveryQueues::new(clients, settings)?;
        Ok(Self {
            deliveries: deliveries.clone(),
            queues: queues.clone(),
            outbox: Outbox::new(deliveries, queues),
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
    #[error(transparent)]
    Outbox(#[from] OutboxError),
}

/// What one run found and put back.
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
pub struct Swept {
    /// Pending first tries found through their fan-out's marker and put in the due index.
    pub indexed: usize,
    /// Pending deliveries found overdue.
    pub overdue: usize,
    /// Those left alone because their message may still wait on a lane.
    pub waiting: usize,
    /// Those put back on the retry lane (the others moved on, or were being attempted).
    pub requeued: usize,
    /// Parked records due within [`LOOKAHEAD`], queued with the delay left until they are due.
    pub unparked: usize,
}

/// One run, as the schedule (or `make run`) invokes it; the event carries nothing it needs. A
/// run that fails is a failed invocation (`SweepErrorsAlarm`, the dashboard's failed runs).
pub async fn handle(deps: &Deps, _event: serde_json::Value) -> Result<Swept, SweepError> {
    match sweep(deps, Timestamp::now()).await {
        Ok(swept) => {
            if swept.overdue > 0 {
                tracing::warn!(
                    overdue = swept.overdue,
                    waiting = swept.waiting,
                    requeued = swept.requeued,
                    "overdue deliveries put back"
                );
            }
            if swept.unparked > 0 {
                tracing::info!(unparked = swept.unparked, "parked retries queued for their time");
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
    // The lanes are counted before the records are read, not beside: a message deleted in
    // between has its record settled already, so it is counted and its record is not read.
    // Read the other way round, a delivery finishing in between would leave one more overdue
    // record than messages, and the sweep would take a waiting one as lost.
    let backlog = deps.queues.backlog().await;
    let marked = index_marked(deps, cutoff).await?;
    let indexed = marked.len();
    let mut overdue = deps.deliveries.overdue(cutoff, PER_SHARD).await?;
    // The index may already show what the markers' reading put in it.
    overdue.retain(|found| !marked.iter().any(|m| m.key == found.key));
    overdue.extend(marked.into_iter().filter(|found| found.next_attempt_at < cutoff));
    let found = overdue.len();
    let lost = lost(overdue, backlog?, cutoff - BACKLOG_PATIENCE);
    let requeued = deps.outbox.put_back(&lost, cutoff, now).await?;
    let parked = deps.deliveries.parked(now + LOOKAHEAD, PER_SHARD).await?;
    let unparked = deps.outbox.unpark(&parked, now).await?;
    Ok(Swept { indexed, overdue: found, waiting: found - lost.len(), requeued, unparked })
}

/// Reads the fan-out's markers made before `cutoff`: each record one lists that is still
/// `pending` and unindexed goes in the due index (so a later run finds it, should this one
/// leave it), and the marker goes. The records it indexed.
async fn index_marked(deps: &Deps, cutoff: Timestamp) -> Result<Vec<Overdue>, SweepError> {
    let markers = deps.deliveries.markers_due(cutoff, PER_SHARD).await?;
    let indexing: Vec<_> = markers.iter().map(|marker| deps.deliveries.index_marked(marker)).collect();
    let indexed: Vec<Result<Vec<Overdue>, StoreError>> =
        futures_util::stream::iter(indexing).buffer_unordered(MARKERS_AT_ONCE).collect().await;
    let mut found = Vec::new();
    for records in indexed {
        found.extend(records?);
    }
    Ok(found)
}

/// The overdue records taken as lost while the lanes hold `backlog` messages: all but the
/// `backlog` most recently due, and every one due before `patience_ends`. A message waits
/// in its lane behind those queued before it, so if a record's message is still on its way,
/// so are those of every record due after it; the records due longest ago are the ones
/// whose message is gone. Taking one that was not lost after all is still safe (its queued
/// copy is then stale), only wasteful; leaving a lost one for a later run only delays it.
pub fn lost(mut overdue: Vec<Overdue>, backlog: usize, patience_ends: Timestamp) -> Vec<Overdue> {
    overdue.sort_by_key(|found| found.next_attempt_at);
    let may_wait = overdue.iter().filter(|found| found.next_attempt_at >= patience_ends).count();
    overdue.truncate(overdue.len() - backlog.min(may_wait));
    overdue
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overdue(seconds: u64) -> Overdue {
        Overdue {
            key: career_core::store::deliveries::RecordKey {
                subscription_id: career_core::ids::SubscriptionId::generate(),
                delivery_id: career_core::ids::DeliveryId::generate(),
            },
            next_attempt_at: Timestamp::from_unix_seconds(1_795_766_400 + seconds),
        }
    }

    #[test]
    fn the_records_due_longest_ago_are_lost_and_as_many_as_the_lanes_hold_may_still_come() {
        let found = vec![overdue(30), overdue(10), overdue(20), overdue(40)];
        let due = |records: Vec<Overdue>| records.iter().map(|r| r.next_attempt_at).collect::<Vec<_>>();
        let patient = overdue(0).next_attempt_at;
        assert_eq!(due(lost(found.clone(), 0, patient)), due(vec![overdue(10), overdue(20), overdue(30), overdue(40)]));
        assert_eq!(due(lost(found.clone(), 1, patient)), due(vec![overdue(10), overdue(20), overdue(30)]));
        assert_eq!(due(lost(found.clone(), 3, patient)), due(vec![overdue(10)]));
        assert!(lost(found.clone(), 4, patient).is_empty(), "a backlog as large as what is overdue");
        assert!(lost(found.clone(), 200, patient).is_empty());
        let impatient = overdue(25).next_attempt_at;
        assert_eq!(
            due(lost(found, 200, impatient)),
            due(vec![overdue(10), overdue(20)]),
            "those due before the patience ends are lost whatever the lanes hold"
        );
    }
}
