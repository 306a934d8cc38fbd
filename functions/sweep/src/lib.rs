//! The sweep function (contract section 12): a message can be lost on its way (a queue
//! purged, the local SQS emulator killed, a hand-over cut half-way), but its record stays
//! `pending`. Every `pending` delivery whose next attempt is more than
//! `DELIVERY_SWEEP_AFTER_SECONDS` overdue goes back on the retry lane in its record's next
//! generation, so a copy that turns up after all is dropped unsent. It reads the sparse due
//! index, so what it costs follows the overdue deliveries, not the log's size. On AWS one
//! schedule per due shard runs it every 5 minutes, so the shards are read by as many runs at
//! once; `make run` runs the same every 10 seconds.
//!
//! It keeps up with the fan-out (contract section 22): every record and marker is in one of
//! [`DUE_SHARDS`] shards, evenly, and a run reads each of its shards page after page until it
//! is read or the run's reading budget is spent ([`Reading`]), several shards at a time. What
//! it left for the next run is its lag, logged as a metric once per run.
//!
//! A first try that the fan-out created is in no due index entry of its own: the fan-out
//! lists a batch's records in one marker (`store::deliveries::Marker`), and the sweep puts
//! those of an overdue marker that are still `pending` in the index before it reads it.
//!
//! It also queues the records whose next attempt waits in the table rather than in a message
//! (a wait longer than SQS's longest delay, contract section 22): each run takes those of its
//! shards due within [`LOOKAHEAD`] out of their wait and posts them with the delay left.
//!
//! It also settles what disabled subscriptions held (contract section 20): an enable or a
//! delete settles at most its share of a subscription's `held` records itself and leaves a
//! marker in the subscription's shard for the rest (and for any a turn held as it read the
//! subscription just before); each run releases or ends, per marker due, at most that share
//! again, and removes the marker once nothing it names is held.
//!
//! It takes only what is really lost. A delivery being attempted holds a claim on its record
//! (`delivery::plan::Lease`) that the sweep's write respects. A delivery whose message waits
//! in a lane backlog holds none, so the sweep tells it apart by the lanes' counts: as many
//! of the most recently due overdue records as the lanes hold messages may still have their
//! message on the way, and are left alone ([`lost`]), for at most an hour past the window.

use std::time::{Duration, Instant};

use career_core::aws::outbox::{Outbox, OutboxError};
use career_core::aws::queue::{DeliveryQueues, QueueError};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table};
use career_core::store::deliveries::{
    DeliveryTable, DueShard, Marker, Overdue, PageStart, ShardPage, TaskMarker, DUE_SHARDS,
};
use career_core::store::StoreError;
use career_core::telemetry::sweep_metrics;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

/// How many markers of a page are read at once.
const MARKERS_AT_ONCE: usize = 16;
/// How far ahead a run queues the parked records (those whose next attempt waits in the
/// table, contract section 22): beyond the time to the next run (five minutes on AWS), and
/// within a message's longest delay, so each goes out at its time.
const LOOKAHEAD: Duration = Duration::from_secs(10 * 60);
/// How many shards one run reads at once.
const SHARDS_AT_ONCE: usize = 4;
/// At most this many overdue records are claimed in one run (the longest due first); the next
/// run takes the rest, which stay in the due index. It keeps a run's claims and sends within
/// [`AFTER_READING`] however much a mass loss (a purged lane) left overdue.
const CLAIMS_PER_RUN: usize = 10_000;
/// How long past the window a record may still be waiting in a backlog: one due longer ago is
/// taken whatever the lanes hold, so a lane that never empties (steady traffic) cannot hold
/// back a lost delivery for ever. A lane that far behind gains nothing from more patience.
const BACKLOG_PATIENCE: Duration = Duration::from_secs(60 * 60);
/// What a run may still need once its reading budget is spent: the pages its shards have
/// started, then the claims and sends of at most [`CLAIMS_PER_RUN`] records. The budget and
/// this fit in the function's timeout (local-aws's deploy checks).
pub const AFTER_READING: Duration = Duration::from_secs(60);

/// How a run reads each of its due shards: page after page of at most `page` items, until
/// the shard is read or `budget` (from the run's start) is spent. Each shard reads a first
/// page whatever the budget, so every run gets on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    pub page: u32,
    pub budget: Duration,
}

impl Reading {
    /// As deployed: a page of markers (each under 1 KB) stays under a query's 1 MB, and the
    /// budget leaves [`AFTER_READING`] of the function's timeout.
    pub const DEPLOYED: Reading = Reading { page: 500, budget: Duration::from_secs(200) };
}

pub struct Deps {
    deliveries: DeliveryTable,
    queues: DeliveryQueues,
    outbox: Outbox,
    sweep_after: Duration,
    /// How many held records a run settles per marker due (section 20).
    release_per_call: u32,
    metrics_namespace: String,
    /// [`Reading::DEPLOYED`]; tests read smaller pages, or with no budget.
    pub reading: Reading,
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
            release_per_call: settings.release_per_call,
            metrics_namespace: settings.metrics_namespace.clone(),
            reading: Reading::DEPLOYED,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("the run's input: {0}")]
    Input(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Outbox(#[from] OutboxError),
}

/// The due shards one run reads: those its schedule's input names (`{"shards": [3]}`: each
/// schedule in template.yaml names its own, so the shards are read by runs at once), or every
/// one for an event that names none (`make run`'s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shards(Vec<DueShard>);

impl Shards {
    pub fn all() -> Self {
        Shards(DueShard::all().collect())
    }

    /// The shards `event` names: at least one, each once.
    pub fn of(event: serde_json::Value) -> Result<Self, SweepError> {
        #[derive(Deserialize)]
        struct Input {
            #[serde(default)]
            shards: Option<Vec<DueShard>>,
        }
        if event.is_null() {
            return Ok(Self::all());
        }
        let input: Input = serde_json::from_value(event).map_err(|err| SweepError::Input(err.to_string()))?;
        let Some(mut shards) = input.shards else { return Ok(Self::all()) };
        shards.sort_unstable();
        shards.dedup();
        if shards.is_empty() {
            return Err(SweepError::Input("names no shard to read".into()));
        }
        Ok(Shards(shards))
    }

    pub fn iter(&self) -> impl Iterator<Item = DueShard> + '_ {
        self.0.iter().copied()
    }

    /// How many of the lanes' `backlog` messages may be deliveries of these shards: the
    /// messages are spread over every shard as their records are, so these shards' share.
    pub fn share_of(&self, backlog: usize) -> usize {
        backlog.saturating_mul(self.0.len()).div_ceil(usize::from(DUE_SHARDS))
    }
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
    /// Held records released or ended for the markers due (section 20).
    pub settled_held: usize,
    /// When the oldest marker or overdue record the run left for the next was made or due
    /// (none when it read everything): the first item after the last page of a shard whose
    /// reading the budget stopped, or the longest due of the records it found and could not
    /// claim ([`CLAIMS_PER_RUN`]).
    pub oldest_unread: Option<Timestamp>,
}

impl Swept {
    /// How long what the run left for the next has waited at `now` ([`SWEEP_LAG`]).
    ///
    /// [`SWEEP_LAG`]: career_core::telemetry::SWEEP_LAG
    pub fn lag(&self, now: Timestamp) -> Duration {
        self.oldest_unread.map_or(Duration::ZERO, |oldest| now.since(oldest))
    }
}

/// One run, as a schedule (or `make run`) invokes it, for the shards its event names. A run
/// that fails is a failed invocation (`SweepErrorsAlarm`, the dashboard's failed runs); one
/// that does not logs its lag as a metric.
pub async fn handle(deps: &Deps, event: serde_json::Value) -> Result<Swept, SweepError> {
    let now = Timestamp::now();
    let swept = match Shards::of(event) {
        Ok(shards) => sweep(deps, &shards, now).await,
        Err(err) => Err(err),
    };
    match swept {
        Ok(swept) => {
            let metrics = sweep_metrics(&deps.metrics_namespace, swept.lag(now));
            tracing::info!(emf = %metrics, "sweep run");
            if swept.overdue > 0 {
                tracing::warn!(
                    overdue = swept.overdue,
                    waiting = swept.waiting,
                    requeued = swept.requeued,
                    "overdue deliveries put back"
                );
            }
            if swept.settled_held > 0 {
                tracing::info!(settled = swept.settled_held, "held deliveries released or ended");
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

/// Puts the deliveries of `shards` overdue at `now` back on the retry lane.
pub async fn sweep(deps: &Deps, shards: &Shards, now: Timestamp) -> Result<Swept, SweepError> {
    let until = Instant::now() + deps.reading.budget;
    let cutoff = now - deps.sweep_after;
    // The lanes are counted before the records are read, not beside: a message deleted in
    // between has its record settled already, so it is counted and its record is not read.
    // Read the other way round, a delivery finishing in between would leave one more overdue
    // record than messages, and the sweep would take a waiting one as lost.
    let backlog = deps.queues.backlog().await;
    // No shard needs more than its share of a run's claims read.
    let cap = CLAIMS_PER_RUN.div_ceil(shards.0.len());
    let marked = read_shards(deps, Reads::Markers, shards, cutoff, until, cap).await?;
    let indexed = marked.found.len();
    let due = read_shards(deps, Reads::DueIndex, shards, cutoff, until, cap).await?;
    let mut overdue = due.found;
    // The index may already show what the markers' reading put in it.
    overdue.retain(|found| !marked.found.iter().any(|m| m.key == found.key));
    overdue.extend(marked.found.into_iter().filter(|found| found.next_attempt_at < cutoff));
    let found = overdue.len();
    let mut lost = lost(overdue, shards.share_of(backlog?), cutoff - BACKLOG_PATIENCE);
    let taken = lost.len();
    let unclaimed = lost.get(CLAIMS_PER_RUN).map(|left| left.next_attempt_at);
    lost.truncate(CLAIMS_PER_RUN);
    let requeued = deps.outbox.put_back(&lost, cutoff, now).await?;
    let parked = read_shards(deps, Reads::Parked, shards, now + LOOKAHEAD, until, cap).await?;
    let unparked = deps.outbox.unpark(&parked.found, now).await?;
    let settled_held = settle_held(deps, shards, now).await?;
    let oldest_unread = [marked.left_from, due.left_from, unclaimed].into_iter().flatten().min();
    Ok(Swept { indexed, overdue: found, waiting: found - taken, requeued, unparked, settled_held, oldest_unread })
}

/// Settles, for each held marker of `shards` due at `now` (a page of them per shard, the next
/// run takes more), at most a share of what its subscription holds ([`Outbox::settle_marked`]),
/// [`MARKERS_AT_ONCE`] markers at a time. How many held records it settled.
async fn settle_held(deps: &Deps, shards: &Shards, now: Timestamp) -> Result<usize, SweepError> {
    let mut markers: Vec<TaskMarker> = Vec::new();
    for shard in shards.iter() {
        markers.extend(deps.deliveries.task_markers_due(shard, now, deps.reading.page, None).await?.items);
    }
    let settling: Vec<_> =
        markers.iter().map(|marker| deps.outbox.settle_marked(marker, deps.release_per_call, now)).collect();
    let settled: Vec<Result<usize, OutboxError>> =
        futures_util::stream::iter(settling).buffer_unordered(MARKERS_AT_ONCE).collect().await;
    let mut total = 0;
    for each in settled {
        total += each?;
    }
    Ok(total)
}

/// What a run reads in each of its shards.
#[derive(Clone, Copy)]
enum Reads {
    /// The fan-out's markers made before the cutoff: each record one lists that is still
    /// `pending` and unindexed goes in the due index (so a later run finds it, should this
    /// one leave it), and the marker goes. What it finds is the records it indexed.
    Markers,
    /// The `pending` records due before the cutoff.
    DueIndex,
    /// The parked records (those whose next attempt waits in the table) due before the
    /// cutoff, here the run's look-ahead.
    Parked,
}

/// What a run read: the records it found, and when the oldest item it left unread in its
/// shards was made or due.
#[derive(Default)]
struct Read {
    found: Vec<Overdue>,
    left_from: Option<Timestamp>,
}

/// What one page gave: its records, and where the next starts.
struct PageRead {
    found: Vec<Overdue>,
    next: Option<PageStart>,
}

impl From<ShardPage<Overdue>> for PageRead {
    fn from(page: ShardPage<Overdue>) -> Self {
        PageRead { found: page.items, next: page.next }
    }
}

/// Reads each of `shards`, [`SHARDS_AT_ONCE`] at a time.
async fn read_shards(
    deps: &Deps,
    reads: Reads,
    shards: &Shards,
    cutoff: Timestamp,
    until: Instant,
    cap: usize,
) -> Result<Read, SweepError> {
    let reading: Vec<_> = shards.0.iter().map(|&shard| read_shard(deps, reads, shard, cutoff, until, cap)).collect();
    let each: Vec<Result<Read, SweepError>> =
        futures_util::stream::iter(reading).buffer_unordered(SHARDS_AT_ONCE).collect().await;
    let mut all = Read::default();
    for read in each {
        let read = read?;
        all.found.extend(read.found);
        all.left_from = [all.left_from, read.left_from].into_iter().flatten().min();
    }
    Ok(all)
}

/// Reads one shard page after page until it is read, the budget is spent (`until`) or `cap`
/// records are found.
async fn read_shard(
    deps: &Deps,
    reads: Reads,
    shard: DueShard,
    cutoff: Timestamp,
    until: Instant,
    cap: usize,
) -> Result<Read, SweepError> {
    let mut read = Read::default();
    let mut start = None;
    loop {
        let page = match reads {
            Reads::Markers => marker_page(deps, shard, cutoff, start).await?,
            Reads::DueIndex => deps.deliveries.overdue(shard, cutoff, deps.reading.page, start).await?.into(),
            Reads::Parked => deps.deliveries.parked(shard, cutoff, deps.reading.page, start).await?.into(),
        };
        read.found.extend(page.found);
        match page.next {
            Some(next) if Instant::now() < until && read.found.len() < cap => start = Some(next),
            Some(next) => return Ok(Read { left_from: first_left(deps, reads, shard, cutoff, next).await?, ..read }),
            None => return Ok(read),
        }
    }
}

/// When the first item a shard's reading left from `next` was made or due (none when the
/// page it stopped at was its last), read without touching it: the shard's oldest unread.
async fn first_left(
    deps: &Deps,
    reads: Reads,
    shard: DueShard,
    cutoff: Timestamp,
    next: PageStart,
) -> Result<Option<Timestamp>, SweepError> {
    Ok(match reads {
        Reads::Markers => {
            deps.deliveries.markers_due(shard, cutoff, 1, Some(next)).await?.items.first().map(|marker| marker.made_at)
        }
        Reads::DueIndex => deps
            .deliveries
            .overdue(shard, cutoff, 1, Some(next))
            .await?
            .items
            .first()
            .map(|found| found.next_attempt_at),
        Reads::Parked => {
            deps.deliveries.parked(shard, cutoff, 1, Some(next)).await?.items.first().map(|found| found.next_attempt_at)
        }
    })
}

async fn marker_page(
    deps: &Deps,
    shard: DueShard,
    cutoff: Timestamp,
    start: Option<PageStart>,
) -> Result<PageRead, SweepError> {
    let page = deps.deliveries.markers_due(shard, cutoff, deps.reading.page, start).await?;
    Ok(PageRead { found: index_marked(deps, &page.items).await?, next: page.next })
}

/// Indexes the records of `markers` that are still pending and removes the markers
/// ([`DeliveryTable::index_marked`]), [`MARKERS_AT_ONCE`] at a time. The records it indexed.
async fn index_marked(deps: &Deps, markers: &[Marker]) -> Result<Vec<Overdue>, SweepError> {
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
    fn a_runs_input_names_its_shards_once_each_or_none_for_every_shard() {
        let shards = |numbers: &[u8]| Shards(numbers.iter().map(|&n| DueShard::try_from(n).unwrap()).collect());
        assert_eq!(Shards::of(serde_json::Value::Null).unwrap(), Shards::all());
        assert_eq!(Shards::of(serde_json::json!({})).unwrap(), Shards::all());
        assert_eq!(Shards::of(serde_json::json!({"shards": [3, 1, 3]})).unwrap(), shards(&[1, 3]));
        for wrong in [serde_json::json!({"shards": []}), serde_json::json!({"shards": [16]}), serde_json::json!("3")] {
            assert!(matches!(Shards::of(wrong.clone()), Err(SweepError::Input(_))), "{wrong}");
        }
    }

    #[test]
    fn a_run_leaves_alone_its_shards_share_of_the_lanes_backlog() {
        assert_eq!(Shards::all().share_of(33), 33);
        let one = Shards(vec![DueShard::try_from(5).unwrap()]);
        assert_eq!((one.share_of(0), one.share_of(1), one.share_of(33)), (0, 1, 3));
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
