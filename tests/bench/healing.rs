//! Benchmark 12, Deliveries that heal themselves (contract section 12): a healthy receiver's
//! latency beside a sibling subscription of the same user that hangs or answers after 9.5 s;
//! the DynamoDB calls and units of one delivery before and after its record comes first; and
//! what one sweep costs in a log of 10,000 delivered records.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::EventRecord;
use aws_sdk_dynamodb::types::AttributeValue;
use career_core::clock::Timestamp;
use career_core::config::Settings;
use career_core::delivery::attempt::{Answer, Outcome};
use career_core::delivery::log::{AttemptRecord, DeliveryStatus};
use career_core::delivery::plan::RecordUpdate;
use career_core::delivery::DeliveryMessage;
use career_core::events::{event_from_record, Event, EventKind};
use career_core::ids::{SubscriptionId, UserId};
use career_core::store::deliveries::{DeliveryTable, DUE_SHARDS};
use career_core::store::webhooks::WebhookTable;
use career_service::pipeline::Pipeline;
use career_service::receiver::{HangingReceiver, Receiver};
use career_service::{typed, unique_user};
use career_sweep::Swept;

use crate::capacity::{self, figure, Capacity, Consumed, Units};
use crate::counting::{self, per_request, Calls};
use crate::delivery::{one_by_one, receive};
use crate::isolation::{fan_out, lane_pumps, latencies};
use crate::payloads::profile_record;
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Deliveries that heal themselves";

/// Events per run, one every tick, each to both subscriptions of the user.
const EVENTS: usize = 40;
const TICK: Duration = Duration::from_millis(125);
/// The three kinds of run alternate, so a change in the machine's load hits all three.
const ROUNDS: usize = 4;
const SLOW_ANSWER: Duration = Duration::from_millis(9500);
const TARGET_RATIO: f64 = 1.5;
/// Deliveries whose calls are counted (after one that warms the instance up).
const COUNTED: usize = 5;
const DELIVERED: usize = 10_000;
const USERS: usize = 100;
const OVERDUE: usize = 10;
const SWEEPS: usize = 3;
/// Concurrent writers while seeding the log.
const SEEDERS: usize = 16;
/// The burst: this many profile updates of one user with this many subscriptions.
const BURST_UPDATES: usize = 300;
const BURST_SUBSCRIPTIONS: usize = 3;
/// The burst's sweep window and how often its sweep runs: the local stack's short window.
const BURST_SWEEP_AFTER: Duration = Duration::from_secs(5);
const BURST_SWEEP_EVERY: Duration = Duration::from_secs(1);

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("unknown").to_owned();
    let siblings = same_user_runs().await?;
    progress("   DynamoDB calls and units of one delivery, before and after the record comes first");
    let record_first = record_first(&bench).await?;
    let sweep = sweep_cost(&bench).await?;
    let burst = burst().await?;
    Ok(render(&load, &siblings, &record_first, &sweep, &burst))
}

// ---------------------------------------------------------------------------------------
// A burst, and how often each delivery arrived

/// What the receiver got of a burst's deliveries.
struct Burst {
    deliveries: usize,
    receipts: usize,
    /// The most receipts of one delivery.
    most: usize,
    /// Deliveries received more than once.
    repeated: usize,
    elapsed: Duration,
}

/// Issue 31's burst: the profile updates as fast as `careerctl`'s admin writes them, through
/// the stream pump, the fan-out and both lane pumps, with the sweep running every second on
/// a 5-second window; every delivery's receipts are counted by its `webhook-id` once all have
/// arrived and two more sweep windows have passed.
async fn burst() -> Result<Burst, String> {
    let deliveries = BURST_UPDATES * BURST_SUBSCRIPTIONS;
    progress(format!(
        "   a burst: {BURST_UPDATES} profile updates × {BURST_SUBSCRIPTIONS} subscriptions, sweep window {} s",
        BURST_SWEEP_AFTER.as_secs()
    ));
    let mut pipeline = Pipeline::with_settings(true, |s| s.sweep_after = BURST_SWEEP_AFTER).await;
    pipeline.sweep_every(BURST_SWEEP_EVERY);
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    for _ in 0..BURST_SUBSCRIPTIONS {
        pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    }
    let started = Instant::now();
    for _ in 0..BURST_UPDATES {
        pipeline.api.admin.update_profile(&user).await.map_err(|e| format!("a profile update: {e:#}"))?;
    }
    if crate::wait_until(Duration::from_secs(600), || receiver.received().len() >= deliveries).await.is_none() {
        return Err(format!("{} of the burst's {deliveries} deliveries arrived", receiver.received().len()));
    }
    let elapsed = started.elapsed();
    tokio::time::sleep(BURST_SWEEP_AFTER * 2).await;
    let mut receipts: HashMap<String, usize> = HashMap::new();
    for received in receiver.received() {
        *receipts.entry(received.header("webhook-id").to_owned()).or_default() += 1;
    }
    let burst = Burst {
        deliveries: receipts.len(),
        receipts: receipts.values().sum(),
        most: receipts.values().copied().max().unwrap_or_default(),
        repeated: receipts.values().filter(|n| **n > 1).count(),
        elapsed,
    };
    progress(format!(
        "     {} receipts of {} deliveries, at most {} per delivery",
        burst.receipts, burst.deliveries, burst.most
    ));
    Ok(burst)
}

fn burst_text(burst: &Burst) -> String {
    format!(
        "### A burst: receipts per delivery\n\n\
         {BURST_UPDATES} profile updates of one user with {BURST_SUBSCRIPTIONS} subscriptions to \
         `profile.updated` (one loopback receiver), written one after another, through the stream pump, \
         `career_fanout::handle` and the two lanes' pumps as `careerctl local` runs them, with the sweep \
         running every {} s on a {} s window (`DELIVERY_SWEEP_AFTER_SECONDS`, the tests' window). Each \
         delivery's receipts are counted by `webhook-id` once all had arrived ({} after the first update) and \
         two more sweep windows had passed.\n\n\
         | Deliveries | Receipts | Receipts per delivery | Received more than once |\n|---|---|---|---|\n\
         | {} | {} | {:.2} (at most {}) | {} |\n",
        BURST_SWEEP_EVERY.as_secs(),
        BURST_SWEEP_AFTER.as_secs(),
        ms(burst.elapsed),
        burst.deliveries,
        burst.receipts,
        burst.receipts as f64 / burst.deliveries.max(1) as f64,
        burst.most,
        burst.repeated,
    )
}

// ---------------------------------------------------------------------------------------
// Same user, a misbehaving sibling

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sibling {
    Healthy,
    Hanging,
    Slow,
}

impl Sibling {
    const ALL: [Sibling; 3] = [Sibling::Healthy, Sibling::Hanging, Sibling::Slow];

    fn describe(self) -> &'static str {
        match self {
            Sibling::Healthy => "a healthy sibling",
            Sibling::Hanging => "a sibling that hangs",
            Sibling::Slow => "a sibling that answers 200 after 9.5 s",
        }
    }
}

/// The sibling subscription's receiver.
enum SiblingReceiver {
    Answering(Receiver),
    Hanging(HangingReceiver),
}

impl SiblingReceiver {
    async fn start(sibling: Sibling) -> Self {
        match sibling {
            Sibling::Healthy => Self::Answering(Receiver::start(&[200], Duration::ZERO).await),
            Sibling::Slow => Self::Answering(Receiver::start(&[200], SLOW_ANSWER).await),
            Sibling::Hanging => Self::Hanging(HangingReceiver::start().await),
        }
    }

    fn url(&self) -> &str {
        match self {
            Self::Answering(receiver) => &receiver.url,
            Self::Hanging(receiver) => &receiver.url,
        }
    }

    /// Requests (or connections) that reached it so far.
    fn requests(&self) -> usize {
        match self {
            Self::Answering(receiver) => receiver.received().len(),
            Self::Hanging(receiver) => receiver.taken(),
        }
    }
}

/// The runs of one kind, pooled.
#[derive(Default)]
struct SiblingRuns {
    /// Fan-out call → arrival at the healthy receiver.
    latencies: Vec<Duration>,
    /// What had reached the sibling when each run's healthy deliveries were all in.
    sibling_requests: Vec<usize>,
}

async fn same_user_runs() -> Result<Vec<SiblingRuns>, String> {
    // The section's first run pays for cold pools and a cold DynamoDB Local; it is not counted.
    progress(format!("   a warm-up run, not counted: {EVENTS} events beside a healthy sibling"));
    same_user_run(0, Sibling::Healthy).await?;
    let mut runs: Vec<SiblingRuns> = Sibling::ALL.iter().map(|_| SiblingRuns::default()).collect();
    for round in 1..=ROUNDS {
        for (kind, sibling) in Sibling::ALL.into_iter().enumerate() {
            progress(format!(
                "   round {round} of {ROUNDS}: {EVENTS} events to one user, a healthy receiver beside {}",
                sibling.describe()
            ));
            let (latencies, requests) = same_user_run(round, sibling).await?;
            let slowest = latencies.iter().enumerate().max_by_key(|(_, latency)| **latency);
            if let Some((event, latency)) = slowest {
                let median = summarize(&latencies).median;
                progress(format!(
                    "     median {}, slowest {} (arrival {} of {EVENTS})",
                    ms(median),
                    ms(*latency),
                    event + 1
                ));
            }
            runs[kind].latencies.extend(latencies);
            runs[kind].sibling_requests.push(requests);
        }
    }
    Ok(runs)
}

/// One run on fresh tables and queues with both lanes' pumps: one user with two
/// subscriptions to `profile.updated`, the sibling's first (as the issue reproduced it).
/// Ends as soon as the healthy receiver has every delivery.
async fn same_user_run(round: usize, sibling: Sibling) -> Result<(Vec<Duration>, usize), String> {
    let pipeline = Pipeline::start(false).await;
    let pumps = lane_pumps(&pipeline);
    let healthy = Receiver::start(&[200], Duration::ZERO).await;
    let other = SiblingReceiver::start(sibling).await;
    let user = unique_user();
    pipeline.subscribe(&user, other.url(), &["profile.updated"]).await;
    pipeline.subscribe(&user, &healthy.url, &["profile.updated"]).await;
    let fanout =
        career_fanout::Deps::new(&career_service::clients(), pipeline.settings()).map_err(|e| e.to_string())?;

    let mut sent: HashMap<String, Instant> = HashMap::new();
    let mut ticks = tokio::time::interval(TICK);
    for n in 0..EVENTS {
        ticks.tick().await;
        let profile = format!("prf_r{round}_{n}");
        sent.insert(profile.clone(), Instant::now());
        fan_out(&fanout, &user, &profile, n as u64 + 1).await?;
    }
    let latencies = latencies(&healthy, &sent, EVENTS).await?;
    let requests = other.requests();
    // The sibling's sends still under way end on their own (the blocking pool's threads).
    for pump in pumps {
        pump.abort();
    }
    Ok((latencies, requests))
}

// ---------------------------------------------------------------------------------------
// Calls and units: clients that log both, and groups of calls (one delivery, one sweep)

/// DynamoDB and SQS clients that log every call, and what each DynamoDB call consumed.
struct Meter {
    dynamodb_calls: Calls,
    sqs_calls: Calls,
    capacity: Capacity,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
}

type Mark = (usize, usize, usize);

impl Meter {
    fn new(bench: &Bench) -> Self {
        let (dynamodb_calls, sqs_calls, capacity) = (Calls::default(), Calls::default(), Capacity::default());
        Meter {
            dynamodb: capacity::dynamodb(&bench.dynamodb_endpoint, &dynamodb_calls, &capacity),
            sqs: counting::sqs(&bench.sqs_endpoint, &sqs_calls),
            dynamodb_calls,
            sqs_calls,
            capacity,
        }
    }

    fn mark(&self) -> Mark {
        (self.dynamodb_calls.len(), self.sqs_calls.len(), self.capacity.len())
    }

    /// A function instance's clients, with the metered DynamoDB and SQS.
    fn clients(&self) -> career_core::aws::AwsClients {
        career_service::clients().with_dynamodb(self.dynamodb.clone()).with_sqs(self.sqs.clone())
    }
}

/// The calls of several groups, one group per delivery (or sweep, or scan).
#[derive(Default)]
struct Groups {
    dynamodb: Vec<Vec<String>>,
    sqs: Vec<Vec<String>>,
    units: Vec<Vec<Consumed>>,
}

impl Groups {
    /// Closes a group: the calls since `mark`.
    fn push(&mut self, meter: &Meter, (dynamodb, sqs, units): Mark) {
        self.dynamodb.push(meter.dynamodb_calls.since(dynamodb));
        self.sqs.push(meter.sqs_calls.since(sqs));
        self.units.push(meter.capacity.since(units));
    }

    fn cost(&self) -> Cost {
        let (dynamodb_count, dynamodb) = per_request(&self.dynamodb);
        let (sqs_count, sqs) = per_request(&self.sqs);
        let (reads, writes): (Vec<Vec<Consumed>>, Vec<Vec<Consumed>>) = self
            .units
            .iter()
            .map(|group| group.iter().cloned().partition(|consumed| is_read(consumed.operation)))
            .unzip();
        Cost { dynamodb_count, dynamodb, sqs_count, sqs, reads: Units::of(&reads), writes: Units::of(&writes) }
    }
}

fn is_read(operation: &str) -> bool {
    matches!(operation, "GetItem" | "Query" | "Scan" | "BatchGetItem")
}

/// A group's calls and units, averaged over the groups.
struct Cost {
    dynamodb_count: f64,
    dynamodb: String,
    sqs_count: f64,
    sqs: String,
    reads: Units,
    writes: Units,
}

impl Cost {
    fn calls(&self) -> String {
        if self.dynamodb.is_empty() {
            "none".into()
        } else {
            format!("{:.0}: {}", self.dynamodb_count, self.dynamodb)
        }
    }

    fn sqs_calls(&self) -> String {
        if self.sqs.is_empty() {
            "none".into()
        } else {
            format!("{:.0}: {}", self.sqs_count, self.sqs)
        }
    }
}

/// `figure (where: table 1, byStatus 2)`, with the tables named without the run's prefix.
fn units(units: &Units, prefix: &str) -> String {
    if units.total == 0.0 && units.by_part.is_empty() {
        return "0".into();
    }
    format!("**{}** ({})", figure(units.total), units.parts().replace(prefix, ""))
}

// ---------------------------------------------------------------------------------------
// The record first: one delivery's calls and units, before and after

struct RecordFirst {
    fan_out: Cost,
    delivery: Cost,
    before_fan_out: Cost,
    before_delivery: Cost,
    /// DynamoDB's size of a record (documented rules): pending as the fan-out wrote it,
    /// succeeded after its attempt, and as the previous design's first attempt wrote it.
    pending_bytes: usize,
    succeeded_bytes: usize,
    before_bytes: usize,
    /// The run's table-name prefix, left out when tables are named.
    prefix: String,
}

impl RecordFirst {
    /// Calls, read units and write units of a delivery in the previous design.
    fn before(&self) -> (f64, f64, f64) {
        in_all(&self.before_fan_out, &self.before_delivery)
    }

    /// The same with the record first.
    fn after(&self) -> (f64, f64, f64) {
        in_all(&self.fan_out, &self.delivery)
    }
}

fn in_all(fan_out: &Cost, delivery: &Cost) -> (f64, f64, f64) {
    (
        fan_out.dynamodb_count + delivery.dynamodb_count,
        fan_out.reads.total + delivery.reads.total,
        fan_out.writes.total + delivery.writes.total,
    )
}

/// One event to one subscription, `COUNTED` + 1 times, through the fan-out and the delivery
/// function with metered clients; then the previous design's calls for the same deliveries,
/// replayed with the store's functions.
async fn record_first(bench: &Bench) -> Result<RecordFirst, String> {
    let pipeline = Pipeline::start(false).await;
    let settings = pipeline.settings().clone();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let meter = Meter::new(bench);

    let fanout = career_fanout::Deps::new(&meter.clients(), &settings).map_err(|e| e.to_string())?;
    let mut fan_outs = Groups::default();
    for n in 0..=COUNTED {
        let mark = meter.mark();
        fan_out(&fanout, &user, &format!("prf_cost_{n}"), n as u64 + 1).await?;
        fan_outs.push(&meter, mark);
    }
    // Received with every attribute, as the event source mapping receives them.
    let messages = receive(&pipeline.queues.delivery, COUNTED + 1).await?;
    let first: DeliveryMessage =
        serde_json::from_str(messages[0].body().unwrap_or_default()).map_err(|e| format!("a queued message: {e}"))?;
    let pending_bytes = record_bytes(&settings.tables.deliveries, &first).await?;

    // The instance's first delivery also reads the sealed secrets' data key, once per
    // instance (section 8): a warm-up, left out of the counts.
    let deliver = career_deliver::Deps::new(&meter.clients(), &settings).map_err(|e| e.to_string())?;
    let event = careerctl::pumps::sqs_event(messages);
    let (warm_up, counted) = event.records.split_first().ok_or("no message")?;
    career_deliver::handle(&deliver, one_by_one(warm_up.clone())).await;
    let mut deliveries = Groups::default();
    for message in counted {
        let mark = meter.mark();
        let response = career_deliver::handle(&deliver, one_by_one(message.clone())).await;
        deliveries.push(&meter, mark);
        if !response.batch_item_failures.is_empty() {
            return Err("a counted delivery stayed on its lane".into());
        }
    }
    if receiver.received().len() != COUNTED + 1 {
        return Err(format!("the receiver got {} of {} deliveries", receiver.received().len(), COUNTED + 1));
    }
    let succeeded_bytes = record_bytes(&settings.tables.deliveries, &first).await?;

    // The previous design (main before 59fbaae; c15b1bf's BENCHMARKS.md counted its calls):
    // the fan-out only queried the subscriptions; the first attempt read the subscription and
    // created the record with one `UpdateItem` (what `record_attempt` still does when no record
    // exists).
    let webhooks = WebhookTable::new(meter.dynamodb.clone(), &settings.tables.webhooks);
    let records = DeliveryTable::new(meter.dynamodb.clone(), &settings.tables.deliveries);
    let (user_id, subscription_id): (UserId, SubscriptionId) = (typed(&user), typed(&subscription));
    let (mut before_fan_outs, mut before_deliveries) = (Groups::default(), Groups::default());
    let mut before_bytes = 0;
    for n in 0..COUNTED {
        let mark = meter.mark();
        webhooks.subscribed_to(&user_id, EventKind::ProfileUpdated).await.map_err(|e| e.to_string())?;
        before_fan_outs.push(&meter, mark);
        let event = profile_event(&user, &format!("prf_before_{n}"), 100 + n as u64)?;
        let message = DeliveryMessage::new(&event, &user_id, &subscription_id);
        let mark = meter.mark();
        webhooks.get(&user_id, &subscription_id).await.map_err(|e| e.to_string())?;
        let recorded = records.record_attempt(&message, &message.body(), &succeeded_attempt(), None).await;
        before_deliveries.push(&meter, mark);
        if !recorded.map_err(|e| e.to_string())? {
            return Err("the replayed first attempt was refused".into());
        }
        before_bytes = record_bytes(&settings.tables.deliveries, &message).await?;
    }
    Ok(RecordFirst {
        fan_out: fan_outs.cost(),
        delivery: deliveries.cost(),
        before_fan_out: before_fan_outs.cost(),
        before_delivery: before_deliveries.cost(),
        pending_bytes,
        succeeded_bytes,
        before_bytes,
        prefix: settings.tables.deliveries.trim_end_matches("deliveries").to_owned(),
    })
}

/// The event of a change of `user`'s profile, as the fan-out reads it from the stream.
fn profile_event(user: &str, profile: &str, sequence: u64) -> Result<Event, String> {
    let record: EventRecord =
        serde_json::from_value(profile_record(user, profile, sequence)).map_err(|e| e.to_string())?;
    event_from_record(&record).map_err(|e| e.to_string())?.ok_or_else(|| "the record makes no event".into())
}

/// A first attempt that got 200.
fn succeeded_attempt() -> AttemptRecord {
    let answer = Answer { status: 200, body: String::new(), retry_after: None };
    RecordUpdate::succeeded().attempt(&Outcome::Delivered(answer), Timestamp::now())
}

/// The stored record's size by DynamoDB's documented rules.
async fn record_bytes(table: &str, message: &DeliveryMessage) -> Result<usize, String> {
    let output = career_service::dynamodb()
        .get_item()
        .table_name(table)
        .key("userId", AttributeValue::S(message.user_id.as_str().to_owned()))
        .key("deliveryId", AttributeValue::S(message.delivery_id.as_str().to_owned()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| format!("GetItem: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
    output.item.map(|item| item_bytes(&item)).ok_or_else(|| format!("no record {}", message.delivery_id))
}

/// An item's size as DynamoDB counts it (Developer Guide, "Item sizes and formats"): each
/// attribute's name in UTF-8 bytes plus its value: a string's UTF-8 bytes, a number's one byte
/// per two significant digits plus one. The records hold nothing else.
fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    let value = |value: &AttributeValue| match value {
        AttributeValue::S(text) => text.len(),
        AttributeValue::N(number) => {
            let digits = number.trim_start_matches('-').replace('.', "");
            digits.trim_matches('0').len().max(1).div_ceil(2) + 1
        }
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        _ => 0,
    };
    item.iter().map(|(name, v)| name.len() + value(v)).sum()
}

// ---------------------------------------------------------------------------------------
// One sweep in a large log

struct SweepCost {
    /// 10 overdue, nothing else in the log.
    empty: Cost,
    empty_times: Vec<Duration>,
    /// 10 overdue beside 10,000 delivered.
    full: Cost,
    full_times: Vec<Duration>,
    /// Nothing overdue beside 10,000 delivered.
    idle: Cost,
    idle_time: Duration,
    /// A Scan that finds `OVERDUE` overdue records beside the others.
    scan: Cost,
    scan_time: Duration,
    scanned: usize,
    seeding: Duration,
    prefix: String,
}

async fn sweep_cost(bench: &Bench) -> Result<SweepCost, String> {
    let pipeline = Pipeline::start(false).await;
    let mut settings = pipeline.settings().clone();
    settings.sweep_after = Duration::from_secs(300);
    let meter = Meter::new(bench);
    let sweeper = career_sweep::Deps::new(&meter.clients(), &settings).map_err(|e| e.to_string())?;
    let table = DeliveryTable::new(career_service::dynamodb(), &settings.tables.deliveries);

    // The same overdue deliveries (so the same due shards) in the empty log and in the full one.
    let overdue = (0..SWEEPS as u64)
        .map(|round| messages(&unique_user(), "prf_overdue", 1_000_000 + round * 100, OVERDUE))
        .collect::<Result<Vec<_>, String>>()?;
    progress(format!("   {SWEEPS} sweeps, each of {OVERDUE} overdue deliveries in an otherwise empty log"));
    let (empty, empty_times) = sweeps(&meter, &sweeper, &settings, &overdue).await?;
    progress(format!(
        "   seeding {DELIVERED} delivered records ({USERS} users), as the fan-out and attempts write them"
    ));
    let started = Instant::now();
    seed_delivered(&table).await?;
    let seeding = started.elapsed();
    progress(format!("   {SWEEPS} sweeps, each of {OVERDUE} overdue deliveries beside {DELIVERED} delivered"));
    let (full, full_times) = sweeps(&meter, &sweeper, &settings, &overdue).await?;

    let (mut idle, mark, started) = (Groups::default(), meter.mark(), Instant::now());
    let swept = career_sweep::sweep(&sweeper, Timestamp::now()).await.map_err(|e| e.to_string())?;
    let idle_time = started.elapsed();
    idle.push(&meter, mark);
    if swept != (Swept { overdue: 0, waiting: 0, requeued: 0 }) {
        return Err(format!("a sweep with nothing overdue found {swept:?}"));
    }

    progress(format!("   a Scan of the same table for {OVERDUE} overdue records, for contrast"));
    let more = messages(&unique_user(), "prf_overdue", 1_000_000 + SWEEPS as u64 * 100, OVERDUE)?;
    insert_overdue(&settings.tables.deliveries, &more).await?;
    let (mut scan, mark, started) = (Groups::default(), meter.mark(), Instant::now());
    let (scanned, matched) = scan_overdue(&meter.dynamodb, &settings.tables.deliveries, settings.sweep_after).await?;
    let scan_time = started.elapsed();
    scan.push(&meter, mark);
    if matched != OVERDUE {
        return Err(format!("the Scan found {matched} of {OVERDUE} overdue records"));
    }
    Ok(SweepCost {
        empty: empty.cost(),
        empty_times,
        full: full.cost(),
        full_times,
        idle: idle.cost(),
        idle_time,
        scan: scan.cost(),
        scan_time,
        scanned,
        seeding,
        prefix: settings.tables.deliveries.trim_end_matches("deliveries").to_owned(),
    })
}

/// One sweep after each set of `overdue` deliveries was written an hour overdue; each must
/// put back exactly that set. What it put back is then taken off the retry lane, as its
/// consumers would: left there, it is a backlog the next sweep leaves alone.
async fn sweeps(
    meter: &Meter,
    sweeper: &career_sweep::Deps,
    settings: &Settings,
    overdue: &[Vec<DeliveryMessage>],
) -> Result<(Groups, Vec<Duration>), String> {
    let (mut groups, mut times) = (Groups::default(), Vec::new());
    let retry_lane = settings.retry_queue_url.as_deref().ok_or("no retry lane")?;
    for set in overdue {
        insert_overdue(&settings.tables.deliveries, set).await?;
        let (mark, started) = (meter.mark(), Instant::now());
        let swept = career_sweep::sweep(sweeper, Timestamp::now()).await.map_err(|e| e.to_string())?;
        times.push(started.elapsed());
        groups.push(meter, mark);
        if swept != (Swept { overdue: OVERDUE, waiting: 0, requeued: OVERDUE }) {
            return Err(format!("a sweep of {OVERDUE} overdue records found {swept:?}"));
        }
        let purged = career_service::sqs().purge_queue().queue_url(retry_lane).send().await;
        purged.map_err(|e| format!("PurgeQueue: {}", aws_sdk_sqs::error::DisplayErrorContext(e)))?;
    }
    Ok((groups, times))
}

/// The deliveries' records as the fan-out writes them, `pending` and due an hour ago: their
/// messages were lost. Records of the same ids written before are deleted first, since the
/// fan-out leaves an existing record as it is.
async fn insert_overdue(table: &str, messages: &[DeliveryMessage]) -> Result<(), String> {
    for message in messages {
        career_service::dynamodb()
            .delete_item()
            .table_name(table)
            .key("userId", AttributeValue::S(message.user_id.to_string()))
            .key("deliveryId", AttributeValue::S(message.delivery_id.to_string()))
            .send()
            .await
            .map_err(|e| format!("DeleteItem: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
    }
    let records: Vec<_> = messages.iter().map(|m| (m, DeliveryStatus::Pending)).collect();
    let an_hour_ago = Timestamp::now() - Duration::from_secs(3600);
    let written = DeliveryTable::new(career_service::dynamodb(), table)
        .insert_new(&records, an_hour_ago)
        .await
        .map_err(|e| e.to_string())?;
    match written.iter().all(|new| *new) {
        true => Ok(()),
        false => Err("an overdue record was there already".into()),
    }
}

/// `count` deliveries to one new subscription of `user`, of profile changes numbered from
/// `first_sequence`.
fn messages(user: &str, profile: &str, first_sequence: u64, count: usize) -> Result<Vec<DeliveryMessage>, String> {
    let (user_id, subscription): (UserId, SubscriptionId) = (typed(user), SubscriptionId::generate());
    (0..count as u64)
        .map(|n| {
            let event = profile_event(user, &format!("{profile}_{n}"), first_sequence + n)?;
            Ok(DeliveryMessage::new(&event, &user_id, &subscription))
        })
        .collect()
}

/// `DELIVERED` records of `USERS` users through a delivery's life: written `pending` by the
/// fan-out's batched writes (into the due index), then `succeeded` by their attempt (out of it).
async fn seed_delivered(table: &DeliveryTable) -> Result<(), String> {
    let per_user = DELIVERED / USERS;
    let mut seeders = Vec::new();
    for seeder in 0..SEEDERS {
        let table = table.clone();
        seeders.push(tokio::spawn(async move {
            for user in (seeder..USERS).step_by(SEEDERS) {
                let messages = messages(&unique_user(), "prf_seed", (user * per_user) as u64, per_user)?;
                let records: Vec<_> = messages.iter().map(|m| (m, DeliveryStatus::Pending)).collect();
                table.insert_new(&records, Timestamp::now()).await.map_err(|e| e.to_string())?;
                for message in &messages {
                    table
                        .record_attempt(message, &message.body(), &succeeded_attempt(), None)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            Ok::<(), String>(())
        }));
    }
    for seeder in seeders {
        seeder.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// What a sweep without the index would do: a Scan of the whole table, filtered to the
/// overdue `pending` records. Items read and items matched.
async fn scan_overdue(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    sweep_after: Duration,
) -> Result<(usize, usize), String> {
    let cutoff = (Timestamp::now() - sweep_after).to_string();
    let (mut scanned, mut matched, mut start) = (0, 0, None);
    loop {
        let output = dynamodb
            .scan()
            .table_name(table)
            .filter_expression("#status = :pending AND nextAttemptAt < :cutoff")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":pending", AttributeValue::S(DeliveryStatus::Pending.as_str().into()))
            .expression_attribute_values(":cutoff", AttributeValue::S(cutoff.clone()))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| format!("Scan: {}", aws_sdk_dynamodb::error::DisplayErrorContext(e)))?;
        scanned += output.scanned_count as usize;
        matched += output.count as usize;
        start = output.last_evaluated_key;
        if start.is_none() {
            return Ok((scanned, matched));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The report

fn render(load: &str, siblings: &[SiblingRuns], cost: &RecordFirst, sweep: &SweepCost, burst: &Burst) -> Section {
    let summaries: Vec<Summary> = siblings.iter().map(|runs| summarize(&runs.latencies)).collect();
    let baseline = summaries[0];
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Contract section 12, issue 21. Three parts: a user's healthy receiver beside a misbehaving sibling \
         subscription of the same user; the DynamoDB calls and units of one delivery before and after its record \
         is written by the fan-out; what one sweep costs in a large log; and how often each delivery of a \
         burst arrived (issue 31).\n"
    );
    body.push_str(&siblings_text(load, siblings, &summaries));
    body.push_str(&record_first_text(cost));
    body.push_str(&sweep_text(sweep));
    body.push_str(&burst_text(burst));

    let mut rows = Vec::new();
    for (sibling, summary) in Sibling::ALL.iter().zip(&summaries).skip(1) {
        let p99_ratio = ratio(summary.p99, baseline.p99);
        rows.push(Row::new(
            format!("Same user: healthy p99 beside {} vs beside a healthy one", sibling.describe()),
            format!("≤ {TARGET_RATIO}×"),
            format!(
                "{} vs {} → {p99_ratio:.2}× (p50 {} vs {})",
                ms(summary.p99),
                ms(baseline.p99),
                ms(summary.median),
                ms(baseline.median)
            ),
            Some(p99_ratio <= TARGET_RATIO),
        ));
    }
    let (before, after) = (cost.before(), cost.after());
    rows.push(Row::new(
        "Record first: DynamoDB calls, read and write units per successful delivery (fan-out + attempt)",
        "reported",
        format!(
            "calls {:.0} → {:.0}, read units {} → {}, write units {} → {}",
            before.0,
            after.0,
            figure(before.1),
            figure(after.1),
            figure(before.2),
            figure(after.2)
        ),
        None,
    ));
    let (empty_reads, full_reads) = (sweep.empty.reads.total, sweep.full.reads.total);
    rows.push(Row::new(
        format!("One sweep of {OVERDUE} overdue: read units beside {} delivered vs an empty log", grouped(DELIVERED)),
        "equal (the same overdue; no Scan)",
        format!("{} vs {} (a Scan: {})", figure(full_reads), figure(empty_reads), figure(sweep.scan.reads.total)),
        Some((full_reads - empty_reads).abs() < 1e-9),
    ));
    let expected = BURST_UPDATES * BURST_SUBSCRIPTIONS;
    rows.push(Row::new(
        format!("Burst of {BURST_UPDATES} updates × {BURST_SUBSCRIPTIONS} subscriptions: receipts per delivery"),
        "1",
        format!("{} receipts of {} deliveries, at most {} per delivery", burst.receipts, burst.deliveries, burst.most),
        Some(burst.deliveries == expected && burst.most == 1),
    ));
    let unmet_notes = vec![format!(
        "With {} samples per kind the p99 is the slowest delivery of the pooled runs, so one pause of this \
         shared machine (load average {load} at the start) moves it; the table in the section shows p50 and p90 \
         beside it, and how much of the sibling's traffic was in flight.",
        baseline_samples(siblings)
    )];
    Section { number: 12, title: TITLE, rows, body, unmet_notes }
}

fn baseline_samples(siblings: &[SiblingRuns]) -> usize {
    siblings.first().map(|runs| runs.latencies.len()).unwrap_or_default()
}

fn siblings_text(load: &str, siblings: &[SiblingRuns], summaries: &[Summary]) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "### One user, a healthy receiver and a misbehaving sibling\n\n\
         One user with two subscriptions to `profile.updated`: the sibling's (subscribed first) and a healthy \
         receiver's that answers 200 at once. One event every {} ms, {EVENTS} in all, goes through \
         `career_fanout::handle` to both (one `SendMessageBatch` of two messages on the main lane, one FIFO group \
         per subscription), and the local pumps consume the lanes as `careerctl local` does. Latency is from the \
         fan-out call to the request's arrival at the healthy receiver; a run ends once all {EVENTS} have arrived. \
         The sibling is healthy too (the baseline), hangs (takes the connection and never answers; the sender \
         gives up after 10 s), or answers 200 after 9.5 s (so it never counts as failing). {ROUNDS} rounds \
         alternate the three, each run on fresh queues and tables, after one uncounted warm-up run; the figures \
         pool them ({} deliveries each). \
         The load average when the section started was {load} on {} cores (other builds share this machine).\n",
        TICK.as_millis(),
        baseline_samples(siblings),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    );
    body.push_str(
        "| Healthy receiver beside | p50 | p90 | p99 | max | p99 vs baseline | Sibling requests when the run ended |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for ((sibling, summary), runs) in Sibling::ALL.iter().zip(summaries).zip(siblings) {
        let requests: Vec<String> = runs.sibling_requests.iter().map(|n| n.to_string()).collect();
        let _ = writeln!(
            body,
            "| {} | {} | {} | {} | {} | {:.2}× | {} |",
            sibling.describe(),
            ms(summary.median),
            ms(summary.p90),
            ms(summary.p99),
            ms(summary.max),
            ratio(summary.p99, summaries[0].p99),
            requests.join(", ")
        );
    }
    let _ = writeln!(
        body,
        "\nThe sibling's first delivery is in flight for the whole run when it hangs or answers after 9.5 s (its \
         FIFO group holds its later ones, and a run lasts about {:.0} s), yet the healthy receiver's deliveries do \
         not wait for it: each message is deleted from its lane as soon as its own attempt is recorded, so the \
         batch it shared with the sibling's message does not hold the healthy subscription's group. Before that \
         change, issue 21 found a healthy sibling's deliveries delayed by up to 8 s beside a receiver of the \
         same user that hung, and on every event beside one that answered after 9.5 s. What a slow sibling still costs is one of the lane's \
         concurrent batches (the template's MaximumConcurrency) for as long as its send lasts.\n",
        (EVENTS as f64 * TICK.as_secs_f64()).ceil(),
    );
    body
}

fn record_first_text(cost: &RecordFirst) -> String {
    let prefix = cost.prefix.as_str();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "### DynamoDB calls and units per delivery, before and after the record comes first\n\n\
         One event to one subscription, {} times: the fan-out (`career_fanout::handle`) and then the successful \
         delivery (`career_deliver::handle`, one message per invocation; the instance's first delivery, which \
         also reads the sealed secrets' data key, is left out) with clients that log every call and set \
         `ReturnConsumedCapacity` to `INDEXES` on it (tests/bench/capacity.rs, an SDK interceptor): the units \
         are those DynamoDB Local reports in `ConsumedCapacity`, for the table and each index. \
         **Before** is the previous design (main before 59fbaae): the fan-out wrote nothing, and the first attempt \
         read the subscription and created the record with one `UpdateItem`; no read of the record came before \
         a send. Its calls are those c15b1bf's BENCHMARKS.md measured (section 4: fan-out `Query ×1`; a \
         successful attempt `GetItem ×1, UpdateItem ×1`); its units are measured here by replaying those calls \
         with the store's functions against today's table (`subscribed_to`, the subscription's `get`, and \
         `record_attempt` on a delivery without a record, which creates it as the old first attempt did). \
         By DynamoDB's item-size rules a record is {} bytes `pending` as the fan-out writes it and {} bytes \
         `succeeded` ({} bytes as the replayed first attempt writes it, with today's `generation` and \
         `roundAttempts`, which the old record lacked), under 1 KB, so every item write costs 1 unit per table \
         or index it touches.\n",
        COUNTED + 1,
        cost.pending_bytes,
        cost.succeeded_bytes,
        cost.before_bytes,
    );
    body.push_str("| Per delivery | Before (previous design) | After (record first) |\n|---|---|---|\n");
    let rows: [(&str, String, String); 6] = [
        ("Fan-out: DynamoDB calls", cost.before_fan_out.calls(), cost.fan_out.calls()),
        ("Fan-out: read units", units(&cost.before_fan_out.reads, prefix), units(&cost.fan_out.reads, prefix)),
        ("Fan-out: write units", units(&cost.before_fan_out.writes, prefix), units(&cost.fan_out.writes, prefix)),
        ("Successful attempt: DynamoDB calls", cost.before_delivery.calls(), cost.delivery.calls()),
        (
            "Successful attempt: read units",
            units(&cost.before_delivery.reads, prefix),
            units(&cost.delivery.reads, prefix),
        ),
        (
            "Successful attempt: write units",
            units(&cost.before_delivery.writes, prefix),
            units(&cost.delivery.writes, prefix),
        ),
    ];
    for (what, before, after) in rows {
        let _ = writeln!(body, "| {what} | {before} | {after} |");
    }
    let ((before_calls, before_reads, before_writes), (after_calls, after_reads, after_writes)) =
        (cost.before(), cost.after());
    let _ = writeln!(
        body,
        "| **In all** (calls; read units; write units) | {before_calls:.0}; {}; {} | {after_calls:.0}; {}; {} |",
        figure(before_reads),
        figure(before_writes),
        figure(after_reads),
        figure(after_writes)
    );
    let _ = writeln!(
        body,
        "| SQS calls of the fan-out | 1: SendMessageBatch ×1 (c15b1bf) | {} |\n\
         | SQS calls of the attempt | none (the event source mapping deleted the batch) | {} |\n",
        cost.fan_out.sqs_calls(),
        cost.delivery.sqs_calls(),
    );
    let _ = writeln!(
        body,
        "The fan-out's conditional write puts the `pending` record into the table, both local indexes (which \
         project every attribute) and the sparse due index; the success then rewrites the table item and both \
         local indexes (the status index's key changes, so its entry is replaced) and takes the record out of \
         the due index. The new write before the send is the record's claim (a conditional `UpdateItem` whose \
         answer is the record's state), which the generations need and which keeps the sweep off a delivery \
         in flight; the new SQS call is the message's own deletion (per-message \
         acknowledgement), which the event source mapping's batch deletion then no longer needs to do. On \
         a fan-out to many subscriptions the writes are one `PutItem` per delivery, all at once (at most 25, one per \
         subscription), each only where the delivery has no record yet, so a stream record processed again leaves \
         its deliveries as they are.\n"
    );
    body
}

fn sweep_text(sweep: &SweepCost) -> String {
    let prefix = sweep.prefix.as_str();
    let delivered = grouped(DELIVERED);
    let median = |times: &[Duration]| summarize(times).median;
    let mut body = String::new();
    let _ = writeln!(
        body,
        "### One sweep in a large log\n\n\
         `career_sweep::sweep` (the function the schedule runs) with the same metered clients, `DELIVERY_SWEEP_\
         AFTER_SECONDS` 300. Before each of {SWEEPS} sweeps, {OVERDUE} `pending` records are written by the store's \
         `insert_new` (as the fan-out writes them) due an hour ago, their messages lost; each sweep must find and \
         put back exactly those {OVERDUE}. First in an otherwise empty log, then, with the same {SWEEPS} sets of \
         records written afresh (the same ids, so the same due shards), beside {delivered} delivered \
         records of {USERS} users, seeded as deliveries live (`insert_new` as `pending`, then `record_attempt` \
         with a success, which takes each out of the due index; {:.0} s with {SEEDERS} writers). The sweep \
         queries each of the {DUE_SHARDS} shards of the sparse, keys-only `byDue` index for records due before \
         the cutoff, claims each one with a conditional `UpdateItem` (next generation, due now) and sends the \
         claimed ones to the retry lane. For contrast, after the sweeps, {OVERDUE} more overdue records and a \
         Scan of the same table filtered to the overdue ones (what a sweep without the index would do; it read \
         {} items and kept those {OVERDUE}).\n",
        sweep.seeding.as_secs_f64(),
        grouped(sweep.scanned),
    );
    body.push_str("| One run | DynamoDB calls | Read units | Write units | SQS calls | Time (median) |\n|---|---|---|---|---|---|\n");
    let empty_label = format!("Sweep, {OVERDUE} overdue, empty log");
    let full_label = format!("Sweep, {OVERDUE} overdue, {delivered} delivered");
    let idle_label = format!("Sweep, nothing overdue, {delivered} delivered");
    let scan_label = format!("Scan for the {OVERDUE} overdue, {} items", grouped(sweep.scanned));
    let rows: [(&str, &Cost, Duration); 4] = [
        (&empty_label, &sweep.empty, median(&sweep.empty_times)),
        (&full_label, &sweep.full, median(&sweep.full_times)),
        (&idle_label, &sweep.idle, sweep.idle_time),
        (&scan_label, &sweep.scan, sweep.scan_time),
    ];
    for (what, cost, time) in rows {
        let _ = writeln!(
            body,
            "| {what} | {} | {} | {} | {} | {} |",
            cost.calls(),
            units(&cost.reads, prefix),
            units(&cost.writes, prefix),
            cost.sqs_calls(),
            ms(time)
        );
    }
    let _ = writeln!(
        body,
        "\nThe sweep's reads do not grow with the log: the delivered records left the sparse index when they \
         succeeded, so its {DUE_SHARDS} queries read only the overdue keys: half a unit (eventually consistent, up \
         to 4 KB of keys) for each shard that holds some, nothing here for one that holds none (DynamoDB Local's \
         figure; even if AWS charged an empty query its minimum half unit, a run would read at most {} units \
         at this size, whatever the log). Its writes are the claims, 5 units per overdue record (the table, \
         both local indexes, and the due index, whose sort key moves: its entry is replaced). The Scan reads \
         every item of the log whatever its filter keeps, so its units and time grow with the log, and on AWS \
         it would also compete with the service's own traffic for the table's throughput.\n",
        f64::from(DUE_SHARDS) / 2.0,
    );
    body
}

/// `10,000`: a count with its thousands grouped.
fn grouped(count: usize) -> String {
    let digits = count.to_string();
    let mut text = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}
