//! Benchmark 17, Scale model: the promises of contract section 22 measured past the quota or
//! the capacity that binds them, at a size this machine can exceed. Its row here: busy
//! subscriptions share the main lane fairly, a quiet subscription's latency beside two busy
//! fast ones against its latency alone, with the main lane's groups and consumers divided by
//! [`SCALE`], the consumers in the shipped ratio to the groups and in the ratio before (20
//! consumers for 16 groups). And the sweep keeps up: lost first tries at ten times the old
//! sweep's capacity, each found within two of its windows ([`lost_first_tries`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::delivery::groups::{Groups, Pace};
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::plan::Place;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::ids::{DeliveryId, SubscriptionId, UserId};
use career_core::store::deliveries::{DeliveryTable, MARKER_RECORDS};
use career_core::store::webhooks::WebhookTable;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_sweep::Reading;
use local_aws::template::{function, Template, TEMPLATE};

use crate::isolation::{fan_out, lane_pumps, latencies};
use crate::payloads::{batch, profile_record};
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize};
use crate::{progress, Bench};

pub const TITLE: &str = "Scale model";
/// The quiet subscription's deliveries a run, one every tick.
const QUIET: usize = 20;
const TICK: Duration = Duration::from_millis(500);
/// Each busy subscription's backlog: more than its groups send while the quiet one's
/// deliveries are fanned out.
const BACKLOG: usize = 800;
/// The busy receivers' answer: fast (under the 2 s mark), and slow enough that the busy
/// subscriptions bind the lane's consumers rather than this machine's CPU.
const BUSY_ANSWER: Duration = Duration::from_millis(1500);
const ROUNDS: usize = 2;
/// How long the run waits for the quiet deliveries after the last is fanned out; one not
/// arrived by then counts as this late.
const STARVED: Duration = Duration::from_secs(30);
const TARGET_RATIO: f64 = 1.5;
/// The main lane's consumers before the fair-lanes rule (`DeliveryMaxConcurrency`).
const CONSUMERS_BEFORE: u32 = 20;
/// What the main lane's groups per subscription and consumers are divided by: the busy
/// subscriptions then bind a few consumers, not this machine's CPU, and their backlogs last
/// the run.
const SCALE: u32 = 4;

/// The quiet subscription's company on the main lane.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Beside {
    Nobody,
    TwoBusy,
}

pub async fn run(_bench: Arc<Bench>) -> Result<Section, String> {
    let shipped_groups = parameter_default("DeliveryGroupsPerSubscription")?;
    let groups = shipped_groups / SCALE;
    let shipped = shipped_consumers()? / SCALE;
    let layouts = [(shipped, "as shipped"), (CONSUMERS_BEFORE / SCALE, "as before")];
    let mut p99 = HashMap::new();
    for (consumers, _) in layouts {
        for beside in [Beside::Nobody, Beside::TwoBusy] {
            let mut pooled = Vec::new();
            for round in 1..=ROUNDS {
                let with = if beside == Beside::TwoBusy { "beside two busy fast subscriptions" } else { "alone" };
                progress(format!(
                    "   round {round} of {ROUNDS}: {QUIET} quiet deliveries {with}, {consumers} main-lane consumers, \
                     {groups} groups a subscription"
                ));
                pooled.extend(quiet_latencies(consumers, groups, beside).await?);
            }
            p99.insert((consumers, beside), summarize(&pooled).p99);
        }
    }
    let mut rows = Vec::new();
    let mut body = String::new();
    let _ = writeln!(
        body,
        "A quiet subscription gets one delivery every {} ms ({QUIET} a run) through `career_fanout::handle`, \
         alone or beside two other users' subscriptions, each with a backlog of {BACKLOG} deliveries on the main \
         lane spread over its {groups} message groups (their receivers answer after {} ms, which counts as fast). \
         The scale model divides the shipped groups per subscription ({shipped_groups}) and main-lane consumers \
         by {SCALE}, keeping their ratio, so that the busy subscriptions bind the lane's consumers rather than \
         this machine's two cores. \
         Latency is from the fan-out call to the quiet receiver's arrival; {ROUNDS} runs of each kind pooled, each \
         on a fresh DynamoDB Local, with the lanes' pumps as `careerctl local` runs them (as many batches at a \
         time per lane as MaximumConcurrency). The main lane is FIFO: a receive takes the oldest messages of the \
         groups not in flight, so a quiet subscription's delivery waits behind every busy group that no consumer \
         holds. With more consumers than the busy subscriptions have groups, every busy group is in flight and \
         the quiet one's message is the next received.\n",
        TICK.as_millis(),
        BUSY_ANSWER.as_millis(),
    );
    for (consumers, layout) in layouts {
        let (alone, beside) = (p99[&(consumers, Beside::Nobody)], p99[&(consumers, Beside::TwoBusy)]);
        let quiet_ratio = ratio(beside, alone);
        let met = (consumers == shipped).then_some(quiet_ratio <= TARGET_RATIO);
        rows.push(Row::new(
            format!("scale model: quiet p99 beside two busy, {consumers} consumers for {groups} groups ({layout})"),
            format!("≤ {TARGET_RATIO}x its p99 alone"),
            format!("{}{quiet_ratio:.2}x ({} vs {})", starved(beside), ms(beside), ms(alone)),
            met,
        ));
        let _ = writeln!(
            body,
            "- {consumers} main-lane consumers ({layout}): the quiet subscription's p99 {} alone, {}{} beside two \
             busy ones ({}{quiet_ratio:.2}x).",
            ms(alone),
            starved(beside),
            ms(beside),
            starved(beside),
        );
    }
    let (sweep_rows, sweep_body) = lost_first_tries().await?;
    rows.extend(sweep_rows);
    body.push_str(&sweep_body);
    let unmet_notes = vec![format!(
        "Fairness holds while the main lane's consumers (`DeliveryMaxConcurrency`) outnumber the message groups \
         of the busy subscriptions ({shipped_groups} each as shipped, `DeliveryGroupsPerSubscription`); \
         docs/deploying.md's capacity table says so."
    )];
    Ok(Section { number: 17, title: TITLE, rows, body, unmet_notes })
}

/// "≥ " for a p99 that is a delivery not arrived within [`STARVED`].
fn starved(p99: Duration) -> &'static str {
    if p99 >= STARVED {
        "≥ "
    } else {
        ""
    }
}

/// The template's default of `name`.
fn parameter_default(name: &str) -> Result<u32, String> {
    let defaults = Template::shipped().parameter_defaults();
    defaults.get(name).and_then(|value| value.parse().ok()).ok_or_else(|| format!("no numeric default for {name}"))
}

fn shipped_consumers() -> Result<u32, String> {
    parameter_default("DeliveryMaxConcurrency")
}

/// The shipped template with `consumers` as the main lane's `DeliveryMaxConcurrency`.
fn with_consumers(consumers: u32) -> Result<Template, String> {
    let shipped = format!("  DeliveryMaxConcurrency:\n    Type: Number\n    Default: {}\n", shipped_consumers()?);
    let changed = format!("  DeliveryMaxConcurrency:\n    Type: Number\n    Default: {consumers}\n");
    if !TEMPLATE.contains(&shipped) {
        return Err("the template's DeliveryMaxConcurrency is not where the bench looks for it".to_owned());
    }
    Template::parse(&TEMPLATE.replacen(&shipped, &changed, 1)).map_err(|e| e.to_string())
}

/// One run on a fresh DynamoDB Local: the quiet subscription's latencies.
async fn quiet_latencies(consumers: u32, groups: u32, beside: Beside) -> Result<Vec<Duration>, String> {
    career_service::fresh_dynamodb().await?;
    let spread = u8::try_from(groups).ok().and_then(Groups::new).ok_or("no such group count")?;
    let pipeline =
        Pipeline::from_template(with_consumers(consumers)?, false, |settings| settings.delivery_groups = spread).await;
    let busy_receivers = match beside {
        Beside::Nobody => Vec::new(),
        Beside::TwoBusy => vec![busy(&pipeline, groups).await?, busy(&pipeline, groups).await?],
    };
    let pumps = lane_pumps(&pipeline);
    for receiver in &busy_receivers {
        receiver.wait_for(1, Duration::from_secs(60)).await;
    }
    let quiet = Receiver::start(&[200], Duration::ZERO).await;
    let quiet_user = career_service::unique_user();
    pipeline.subscribe(&quiet_user, &quiet.url, &["profile.updated"]).await;
    let settings = pipeline.settings().clone();
    let fanout = career_fanout::Deps::new(&career_service::clients(), &settings).map_err(|e| e.to_string())?;
    let mut sent = HashMap::new();
    let mut ticks = tokio::time::interval(TICK);
    for tick in 0..QUIET {
        ticks.tick().await;
        let profile = format!("prf_quiet_{tick}");
        sent.insert(profile.clone(), Instant::now());
        fan_out(&fanout, &quiet_user, &profile, tick as u64 + 1).await?;
    }
    // A delivery starved behind the busy groups counts as the wait's end: a p99 of at least it.
    let waited = Instant::now();
    while quiet.received().len() < QUIET && waited.elapsed() < STARVED {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let arrived = quiet.received().len();
    let still_busy = busy_receivers.iter().all(|receiver| receiver.received().len() < BACKLOG);
    let mut measured = latencies(&quiet, &sent, arrived).await?;
    measured.extend(std::iter::repeat_n(STARVED, QUIET - arrived));
    for pump in pumps {
        pump.abort();
    }
    if arrived == QUIET && !still_busy {
        return Err("a busy subscription's backlog ran out before the quiet deliveries arrived".to_owned());
    }
    Ok(measured)
}

/// A busy user's subscription: its receiver known as fast, and its backlog queued on the
/// main lane over every group it spreads over, as the fan-out queues first attempts.
async fn busy(pipeline: &Pipeline, groups: u32) -> Result<Receiver, String> {
    let receiver = Receiver::start(&[200], BUSY_ANSWER).await;
    let user = career_service::unique_user();
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let (user_id, id): (UserId, SubscriptionId) = (career_service::typed(&user), career_service::typed(&subscription));
    let settings = pipeline.settings();
    let webhooks = WebhookTable::new(career_service::dynamodb(), &settings.tables.webhooks);
    webhooks.set_pace(&user_id, &id, Pace::Fast, Timestamp::now()).await.map_err(|e| e.to_string())?;
    let messages: Vec<DeliveryMessage> =
        (0..BACKLOG).map(|_| DeliveryMessage::new(&Event::ping(&id), &user_id, &id)).collect();
    let table = DeliveryTable::new(career_service::dynamodb(), &settings.tables.deliveries);
    let pending: Vec<_> = messages.iter().map(|message| (message, DeliveryStatus::Pending)).collect();
    for chunk in pending.chunks(25) {
        table.insert_new(chunk, Timestamp::now()).await.map_err(|e| e.to_string())?;
    }
    let spread: Vec<_> =
        messages.iter().zip((0..groups).cycle()).map(|(message, group)| (message, Place::Group(group as u8))).collect();
    let queues = DeliveryQueues::new(&career_service::clients(), settings).map_err(|e| e.to_string())?;
    queues.post_all(&spread).await.map_err(|e| e.to_string())?;
    Ok(receiver)
}

/// The sweep's row (contract section 22, issue 49): the deployed sweep's time divided by
/// [`SWEEP_TIME_SCALE`] (its window, reading budget and timeout) and its page by
/// [`SWEEP_PAGE_SCALE`], so that ten times the old sweep's capacity is a load this machine can
/// write. The old sweep read one page of markers per shard per run, in 14 of the 16 shards.
const SWEEP_TIME_SCALE: u32 = 5;
const SWEEP_PAGE_SCALE: u32 = 250;
const OLD_SHARDS_USED: u32 = 14;
/// The fan-out's load, in the old sweep's capacity.
const TIMES_OLD: u32 = 10;
/// How many windows the fan-out lasts, and how many more the run waits for the last lost ones.
const FANOUT_WINDOWS: u32 = 2;
const MORE_WINDOWS: u32 = 3;
/// Events in a stream batch handed to the fan-out, one subscription each: ten markers.
const FANOUT_BATCH: usize = 100;

/// What the sweep's scale model measured.
struct SweepModel {
    lost: usize,
    /// Each lost first try's time from its loss (its record's creation, its id's time) to its
    /// message on the retry lane (SQS's `SentTimestamp`).
    found: HashMap<DeliveryId, Duration>,
    /// Messages on the retry lane for a delivery already found: nothing attempts what the sweep
    /// queues, so its record is overdue again a window later, and put back in its next generation.
    twice: usize,
    window: Duration,
    budget: Duration,
    page: u32,
    /// Each run: how long it took and what it read.
    runs: Vec<(Duration, career_sweep::Swept)>,
    /// How long the ticks of runs that read something took, from the first run to the last.
    busy: Duration,
}

/// Lost first tries at [`TIMES_OLD`] times the old sweep's capacity, and how long each waited
/// for the sweep: its row and its paragraph.
async fn lost_first_tries() -> Result<(Vec<Row>, String), String> {
    career_service::fresh_dynamodb().await?;
    let swept = sweep_scale_model().await?;
    let window = swept.window;
    let waits: Vec<Duration> = swept.found.values().copied().collect();
    let p100 = waits.iter().copied().max().unwrap_or_default();
    let p50 = if waits.is_empty() { Duration::ZERO } else { summarize(&waits).median };
    let markers = swept.found.len() / MARKER_RECORDS;
    let rate = markers as f64 / swept.busy.as_secs_f64().max(1e-9);
    // A shard's run: markers read per second of its own time, over the runs that read any.
    let (read, took) = swept
        .runs
        .iter()
        .filter(|(_, run)| run.indexed > 0)
        .fold((0, Duration::ZERO), |(read, took), (time, run)| (read + run.indexed / MARKER_RECORDS, took + *time));
    let per_shard_run = read as f64 / took.as_secs_f64().max(1e-9) * swept.budget.as_secs_f64();
    let all_found = swept.found.len() == swept.lost;
    let met = all_found && p100 <= 2 * window;
    let row = Row::new(
        format!(
            "scale model: lost first tries at {TIMES_OLD}x the old sweep's capacity, sweep every {} s",
            window.as_secs()
        ),
        "each found within two windows".to_owned(),
        format!(
            "p100 {:.2} windows ({}), {} of {} found{}, {rate:.0} markers/s swept",
            p100.as_secs_f64() / window.as_secs_f64(),
            ms(p100),
            swept.found.len(),
            swept.lost,
            if swept.twice > 0 { format!(" ({} put back again a window later)", swept.twice) } else { String::new() },
        ),
        Some(met),
    );
    let capacity = Row::new(
        "scale model: the sweep's capacity per shard per run, as measured".to_owned(),
        String::new(),
        format!("{per_shard_run:.0} markers in its {} s budget", swept.budget.as_secs()),
        None,
    );
    let mut body = String::new();
    let _ = writeln!(
        body,
        "\nLost first tries: the fan-out (`career_fanout::handle`, batches of {FANOUT_BATCH} events to one \
         subscription each, so {} markers of {MARKER_RECORDS} records a batch) writes its records and markers as \
         deployed while its queue send fails (its delivery queue's URL names no queue), for {FANOUT_WINDOWS} sweep \
         windows at {TIMES_OLD} times what one run of the old sweep read ({OLD_SHARDS_USED} shards of one page each \
         a window); the sweep runs as template.yaml schedules it (a run per shard, all at once) with its time \
         divided by {SWEEP_TIME_SCALE} (window and `DELIVERY_SWEEP_AFTER_SECONDS` {} s, reading budget {} s) and \
         its page by {SWEEP_PAGE_SCALE} ({} markers). Each lost first try's wait is from its record's creation to \
         its message's arrival on the retry lane (SQS's `SentTimestamp`); a record overdue one window after its \
         loss is found by the next run, so a wait ends between one and two windows plus that run's own time. \
         {} of {} found (median {}, p100 {}), {rate:.0} markers a second swept while runs had work; a shard's run \
         read {per_shard_run:.0} markers in its budget on this machine (16 runs at once on its two cores).",
        FANOUT_BATCH / MARKER_RECORDS,
        window.as_secs(),
        swept.budget.as_secs(),
        swept.page,
        swept.found.len(),
        swept.lost,
        ms(p50),
        ms(p100),
    );
    Ok((vec![row, capacity], body))
}

/// Runs the sweep's scale model on a fresh pipeline (no pumps: nothing consumes the lanes).
async fn sweep_scale_model() -> Result<SweepModel, String> {
    let window = Duration::from_secs(parameter_default("DeliverySweepAfterSeconds")?.into()) / SWEEP_TIME_SCALE;
    let pipeline = Pipeline::start(false).await;
    let mut settings = pipeline.settings().clone();
    settings.sweep_after = window;
    let page = Reading::DEPLOYED.page / SWEEP_PAGE_SCALE;
    let budget = Reading::DEPLOYED.budget / SWEEP_TIME_SCALE;
    let template = Template::shipped();
    let timeout = template.function_timeout(function::SWEEP).map_err(|e| e.to_string())? / SWEEP_TIME_SCALE;
    let inputs = template.schedule_inputs(function::SWEEP).map_err(|e| e.to_string())?;

    let user = career_service::unique_user();
    pipeline.subscribe(&user, career_service::sink_url(), &["profile.updated"]).await;
    // The fan-out's main lane is a queue that is not there (SQS answers that it does not exist,
    // so its clients act as no role, which would refuse the queue first): each send fails after
    // its records are written.
    let mut lossy = career_service::function_settings(function::FANOUT, &settings);
    lossy.delivery_queue_url = lossy.delivery_queue_url.map(|url| format!("{url}-gone"));
    let fanout = career_fanout::Deps::new(&career_service::clients(), &lossy).map_err(|e| e.to_string())?;
    let mut sweep_settings = career_service::function_settings(function::SWEEP, &settings);
    sweep_settings.sweep_after = window;
    let sweep_clients = career_service::acting_as(function::SWEEP, &settings, &career_service::clients());
    let mut sweep = career_sweep::Deps::new(&sweep_clients, &sweep_settings).map_err(|e| e.to_string())?;
    sweep.reading = Reading { page, budget };

    let markers_a_window = TIMES_OLD * OLD_SHARDS_USED * page;
    let batches_a_window = markers_a_window as usize * MARKER_RECORDS / FANOUT_BATCH;
    let batches = batches_a_window * FANOUT_WINDOWS as usize;
    let lost = batches * FANOUT_BATCH;
    progress(format!(
        "   sweep: {lost} lost first tries over {FANOUT_WINDOWS} windows of {} s ({markers_a_window} markers a window)",
        window.as_secs()
    ));
    let runs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let busy = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sweeping = {
        let (runs, busy) = (runs.clone(), busy.clone());
        tokio::spawn(async move { sweep_runs(&sweep, &inputs, window, timeout, &runs, &busy).await })
    };
    let found = Arc::new(std::sync::Mutex::new((HashMap::new(), 0usize)));
    let retry_lane = pipeline.queues.retry.clone();
    let receiving = {
        let found = found.clone();
        tokio::spawn(async move { take_retry_lane(&retry_lane, &found).await })
    };
    let mut ticks = tokio::time::interval(window / batches_a_window as u32);
    for n in 0..batches {
        ticks.tick().await;
        let records = (0..FANOUT_BATCH)
            .map(|k| {
                let sequence = (n * FANOUT_BATCH + k) as u64 + 1;
                profile_record(&user, &format!("prf_lost_{sequence}"), sequence)
            })
            .collect();
        let event: StreamEvent = serde_json::from_value(batch(records)).map_err(|e| e.to_string())?;
        if career_fanout::handle(&fanout, event).await.batch_item_failures.is_empty() {
            return Err("the fan-out's queue send did not fail".to_owned());
        }
    }
    let until = Instant::now() + window * MORE_WINDOWS;
    while found.lock().unwrap().0.len() < lost && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sweeping.abort();
    receiving.abort();
    let (found, twice) = std::mem::take(&mut *found.lock().unwrap());
    let runs = std::mem::take(&mut *runs.lock().unwrap());
    let busy = busy.lock().unwrap().iter().sum();
    Ok(SweepModel { lost, found, twice, window, budget, page, runs, busy })
}

/// The sweep's runs as its schedules start them: every `window`, one run per schedule's input
/// at once, each stopped at `timeout`. Each run's time and result, and each tick's time when a
/// run read something.
async fn sweep_runs(
    sweep: &career_sweep::Deps,
    inputs: &[serde_json::Value],
    window: Duration,
    timeout: Duration,
    runs: &std::sync::Mutex<Vec<(Duration, career_sweep::Swept)>>,
    busy: &std::sync::Mutex<Vec<Duration>>,
) {
    let mut ticks = tokio::time::interval(window);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let tick = Instant::now();
        let each = inputs.iter().map(|input| async move {
            let started = Instant::now();
            let run = tokio::time::timeout(timeout, career_sweep::handle(sweep, input.clone())).await;
            (started.elapsed(), run)
        });
        let mut read = false;
        for (took, run) in futures_util::future::join_all(each).await {
            match run {
                Ok(Ok(swept)) => {
                    read |= swept.indexed > 0 || swept.requeued > 0;
                    runs.lock().unwrap().push((took, swept));
                }
                Ok(Err(err)) => progress(format!("   a sweep run failed: {err}")),
                Err(_) => progress("   a sweep run timed out"),
            }
        }
        if read {
            busy.lock().unwrap().push(tick.elapsed());
        }
    }
}

/// Takes every message off the retry lane, noting for each delivery its wait from its loss to
/// its message's arrival, and counting messages of a delivery already found.
async fn take_retry_lane(lane: &str, found: &std::sync::Mutex<(HashMap<DeliveryId, Duration>, usize)>) {
    let sqs = career_service::sqs();
    loop {
        let received = sqs
            .receive_message()
            .queue_url(lane)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await;
        let Ok(received) = received else { continue };
        let messages = received.messages.unwrap_or_default();
        let mut deletes = Vec::new();
        for (n, message) in messages.iter().enumerate() {
            let queued = message.attributes().and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp));
            let queued = queued.and_then(|millis| millis.parse().ok()).map(Timestamp::from_unix_millis);
            let body = serde_json::from_str::<DeliveryMessage>(message.body().unwrap_or_default());
            if let (Some(queued), Ok(body)) = (queued, body) {
                let mut found = found.lock().unwrap();
                let wait = queued.since(body.delivery_id.created_at());
                if found.0.insert(body.delivery_id, wait).is_some() {
                    found.1 += 1;
                }
            }
            let entry = DeleteMessageBatchRequestEntry::builder()
                .id(n.to_string())
                .set_receipt_handle(message.receipt_handle().map(str::to_owned))
                .build();
            deletes.extend(entry.ok());
        }
        if !deletes.is_empty() {
            let _ = sqs.delete_message_batch().queue_url(lane).set_entries(Some(deletes)).send().await;
        }
    }
}
