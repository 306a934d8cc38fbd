//! Benchmark 17, Scale model: the promises of contract section 22 measured past the quota or
//! the capacity that binds them, at a size this machine can exceed. Its parts
//! (`BENCH_ROWS=fair,in-flight,rate,sweep`): busy subscriptions share the main lane fairly, a quiet
//! subscription's latency beside two busy fast ones against its latency alone, with the main
//! lane's groups and consumers divided by [`SCALE`], the consumers in the shipped ratio to the
//! groups and in the ratio before (20 consumers for 16 groups); and a failing subscription's
//! retries, ten times the retry lane's modelled in-flight quota, leave another user's retries
//! on time; a rate limit at five times one item's modelled write quota holds close to the
//! limit without stalling; and the sweep keeps up: lost first tries at ten times the old
//! sweep's capacity, each found within two of its windows ([`lost_first_tries`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::delivery::groups::{Groups, Pace};
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::plan::Place;
use career_core::delivery::rate;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::ids::{DeliveryId, SubscriptionId, UserId};
use career_core::store::deliveries::{DeliveryTable, MARKER_RECORDS};
use career_core::store::webhooks::WebhookTable;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::scale_model::RateLimitRun;
use career_service::QueueGauge;
use career_sweep::Reading;
use local_aws::emulators::{set_in_flight_quota, SQS_IN_FLIGHT};
use local_aws::template::{function, Template};

use crate::isolation::{fan_out, lane_pumps, latencies};
use crate::payloads::{batch, profile_record};
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize};
use crate::{part_wanted, progress, Bench};

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
    let mut section = Section::empty(17, TITLE);
    if part_wanted("fair") {
        section.add(fair_lanes().await?);
    }
    if part_wanted("in-flight") {
        section.add(retries_past_the_in_flight_quota().await?);
    }
    if part_wanted("rate") {
        section.add(rate_limit().await);
    }
    if part_wanted("sweep") {
        let (rows, body) = lost_first_tries().await?;
        section.add(Section { rows, body, ..Section::empty(17, TITLE) });
    }
    Ok(section)
}

/// The fair-lanes row (`BENCH_ROWS=fair`).
async fn fair_lanes() -> Result<Section, String> {
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
    Template::shipped().with_parameter_default("DeliveryMaxConcurrency", consumers).map_err(|e| e.to_string())
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

/// What SQS's in-flight quota is divided by in the in-flight row's scale model: a lane holds
/// at most 24 messages in flight, not 120,000.
const IN_FLIGHT_SCALE: u32 = 5_000;
/// What the retry lane's consumers (`DeliveryRetryMaxConcurrency`) are divided by in that
/// model, so that their batches hold fewer messages at once than the lane's quota, as on AWS
/// (10 batches of 10 beside 120,000): only messages that wait in flight could fill it.
const RETRY_CONSUMERS_SCALE: u32 = 5;
/// The failing subscription's deliveries, in multiples of the modelled quota.
const TIMES_THE_QUOTA: u32 = 10;
/// The other user's deliveries a run, one every [`RETRIED_TICK`], each failing its first
/// attempt once; far enough apart that a retry on time never meets its own subscription's
/// next first attempt (a failing subscription has one send open at a time).
const RETRIED: usize = 20;
const RETRIED_TICK: Duration = Duration::from_secs(2);
/// The retry base of the in-flight runs: the other user's retries are due 0.4 to 0.6 s after
/// their first attempt.
const RETRY_BASE: Duration = Duration::from_millis(500);
/// Attempts in all: the failing subscription's deliveries are still retrying when a run ends
/// (its sixth wait alone is 60 s).
const ATTEMPTS: u32 = 8;
/// How much later than in an unloaded run the other user's retries may go out (p99).
const LATENESS_MARGIN: Duration = Duration::from_secs(2);
/// How long a run waits for the other user's retries after its last delivery; one not sent
/// by then counts as this late.
const RETRY_STARVED: Duration = Duration::from_secs(60);
const IN_FLIGHT_ROUNDS: usize = 2;

/// What one in-flight run measured.
struct RetriedRun {
    /// Each of the other user's retries: when it was sent (its record's attempt) after it was
    /// due (its record's `nextAttemptAt` after the first attempt).
    lateness: Vec<Duration>,
    /// The retry lane's most messages in flight and delayed at one moment.
    most_in_flight: usize,
    most_delayed: usize,
    /// The retry lane's most messages due and not yet received at one moment.
    most_unreceived: usize,
    /// The other user's retries not sent within [`RETRY_STARVED`].
    unsent: usize,
    /// The failing receiver's requests while the other user's deliveries went out.
    failing_attempts: usize,
}

/// The in-flight row (`BENCH_ROWS=in-flight`): another user's retries beside a failing
/// subscription whose retries are ten times the retry lane's modelled in-flight quota, against
/// the same retries with no failing subscription, on the same model.
async fn retries_past_the_in_flight_quota() -> Result<Section, String> {
    let quota = SQS_IN_FLIGHT / IN_FLIGHT_SCALE;
    let consumers = parameter_default("DeliveryRetryMaxConcurrency")? / RETRY_CONSUMERS_SCALE;
    let failing = quota * TIMES_THE_QUOTA;
    let (mut alone, mut beside) = (Vec::new(), Vec::new());
    let mut unsent = [0, 0];
    let (mut most_in_flight, mut most_delayed, mut most_unreceived, mut failing_attempts) = (0, 0, 0, usize::MAX);
    for round in 1..=IN_FLIGHT_ROUNDS {
        for loaded in [false, true] {
            let with =
                if loaded { format!("beside a failing subscription's {failing} retries") } else { "alone".into() };
            progress(format!(
                "   round {round} of {IN_FLIGHT_ROUNDS}: {RETRIED} retries {with}, the retry lane held to {quota} in \
                 flight, {consumers} consumers"
            ));
            let run = retried_run(quota, consumers, loaded.then_some(failing as usize)).await?;
            unsent[usize::from(loaded)] += run.unsent;
            if loaded {
                beside.extend(run.lateness);
                most_in_flight = most_in_flight.max(run.most_in_flight);
                most_delayed = most_delayed.max(run.most_delayed);
                most_unreceived = most_unreceived.max(run.most_unreceived);
                failing_attempts = failing_attempts.min(run.failing_attempts);
            } else {
                alone.extend(run.lateness);
            }
        }
    }
    let (alone, beside) = (summarize(&alone), summarize(&beside));
    let later = beside.p99.saturating_sub(alone.p99);
    // "≥ " for a p99 that is a retry never sent, counted as RETRY_STARVED late.
    let late = |p99: Duration, unsent: usize| if unsent > 0 && p99 >= RETRY_STARVED { "≥ " } else { "" };
    let row = Row::new(
        format!(
            "scale model: another user's retry lateness p99 beside a failing subscription's retries at \
             {TIMES_THE_QUOTA}x the in-flight quota"
        ),
        format!("≤ its p99 alone + {} s", LATENESS_MARGIN.as_secs()),
        format!("+{} ({}{} vs {})", ms(later), late(beside.p99, unsent[1]), ms(beside.p99), ms(alone.p99)),
        Some(later <= LATENESS_MARGIN),
    );
    let mut body = String::new();
    let _ = writeln!(
        body,
        "\nRetries past the in-flight quota. The scale model holds each lane to SQS's in-flight quota divided by \
         {IN_FLIGHT_SCALE} ({quota} messages, as `set_in_flight_quota` has the SQS emulator refuse more, a receive \
         taking what is left), and the retry lane's consumers (`DeliveryRetryMaxConcurrency`) by \
         {RETRY_CONSUMERS_SCALE} ({consumers} batches of 10 at a time), so that, as on AWS, the turns under way \
         never fill the quota. One user's subscription fails every attempt (500 at once; its failure clock \
         runs) with {failing} deliveries due on the retry lane, {TIMES_THE_QUOTA} times the quota, retried with a \
         base of {} ms up to {ATTEMPTS} attempts; another user's gets {RETRIED} changes, one every {} s through \
         `career_fanout::handle`, its receiver answering each delivery's first attempt 500 and its retry 200. \
         Lateness is when a retry was sent (its record's attempt) after it was due (the record's `nextAttemptAt` \
         after the first attempt, read while it waited); one not sent within {} s counts as that late. \
         {IN_FLIGHT_ROUNDS} runs of each kind pooled, alternating, each on a fresh DynamoDB Local with the lanes' \
         pumps as `careerctl local` runs them.\n\n\
         - Another user's retries alone: lateness median {}, p99 {}, max {}.\n\
         - Beside the failing subscription: median {}, p99 {}{}, max {} (+{} at p99).\n\
         - The retry lane beside it held at most {most_in_flight} messages in flight of its {quota}, and up to \
         {most_delayed} waiting as delayed messages, and up to {most_unreceived} due and not yet received; the \
         failing receiver took at least {failing_attempts} attempts while the other user's changes went out.",
        RETRY_BASE.as_millis(),
        RETRIED_TICK.as_secs(),
        RETRY_STARVED.as_secs(),
        ms(alone.median),
        ms(alone.p99),
        ms(alone.max),
        ms(beside.median),
        late(beside.p99, unsent[1]),
        ms(beside.p99),
        ms(beside.max),
        ms(later),
    );
    let unmet_notes = vec![format!(
        "Another user's retries are late beside a failing subscription's when the retry lane's consumers are \
         busy with that subscription's turns, not because its waiting retries hold the lane's in-flight places \
         (at most {most_in_flight} of {quota} were in flight, the consumers' batches). Each of its {failing} \
         deliveries that finds its one open send taken (contract section 22) comes back after 20 to 30 s and \
         costs a turn (a claim, the open send's write, a new message), so its deliveries take about \
         {failing} / 25 turns a second of the lane whatever its receiver does, and up to {most_unreceived} \
         messages waited to be received, another user's retries among them. The cost grows with the failing \
         backlog, not with the quota: on AWS, a failing subscription with more deliveries due than the retry \
         lane's consumers turn over in 25 s does the same. A fix, not made: a delivery turned back waits in the \
         table, and the attempt that closes the open send queues the next one, so a failing subscription costs \
         one turn an attempt."
    )];
    Ok(Section { number: 17, title: TITLE, rows: vec![row], body, unmet_notes })
}

/// One in-flight run on a fresh DynamoDB Local: the other user's retries, beside `failing`
/// deliveries of a failing subscription or none.
async fn retried_run(quota: u32, consumers: u32, failing: Option<usize>) -> Result<RetriedRun, String> {
    career_service::fresh_dynamodb().await?;
    let template = Template::shipped()
        .with_parameter_default("DeliveryRetryMaxConcurrency", consumers)
        .map_err(|e| e.to_string())?;
    let pipeline = Pipeline::from_template(template, false, |settings| {
        settings.retry_base = RETRY_BASE;
        settings.max_delivery_attempts = ATTEMPTS;
    })
    .await;
    let settings = pipeline.settings().clone();
    for lane in [&pipeline.queues.delivery, &pipeline.queues.retry] {
        let sqs = &career_service::services().sqs_endpoint;
        set_in_flight_quota(sqs, lane, quota).await.map_err(|e| e.to_string())?;
    }
    let retry_lane = career_service::queue_sources(function::DELIVER, &settings)
        .into_iter()
        .find(|source| source.queue_url == pipeline.queues.retry)
        .ok_or("the retry lane is no event source of the delivery function")?;
    let in_batches = retry_lane.maximum_concurrency * retry_lane.batch_size as usize;
    if in_batches >= quota as usize {
        return Err(format!("the retry lane's batches ({in_batches} messages) fill its quota ({quota}) alone"));
    }
    let gauge = QueueGauge::start(&pipeline.queues.retry);
    let pumps = lane_pumps(&pipeline);
    let failing_receiver = match failing {
        None => None,
        Some(count) => {
            let receiver = Receiver::start(&[500], Duration::ZERO).await;
            pipeline.failing_with_backlog(&receiver.url, count).await;
            receiver.wait_for(1, Duration::from_secs(60)).await;
            // Its backlog taken once (each delivery sent or waiting behind its one open send).
            let visible = aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages;
            career_service::eventually_within(Duration::from_secs(120), "the failing backlog taken", || async {
                match pipeline.count(&pipeline.queues.retry, visible.clone()).await {
                    0 => Ok(()),
                    waiting => Err(format!("{waiting} not received yet")),
                }
            })
            .await;
            Some(receiver)
        }
    };
    let failing_before = failing_receiver.as_ref().map_or(0, |receiver| receiver.received().len());

    let retried = Receiver::per_delivery(&[500, 200], Duration::ZERO).await;
    let user = career_service::unique_user();
    let (subscription, _) = pipeline.subscribe(&user, &retried.url, &["profile.updated"]).await;
    let subscription: SubscriptionId = career_service::typed(&subscription);
    let deliveries = DeliveryTable::new(career_service::dynamodb(), &settings.tables.deliveries);
    let dues: Arc<Mutex<HashMap<DeliveryId, Timestamp>>> = Arc::default();
    let watcher = tokio::spawn(watch_dues(deliveries.clone(), subscription.clone(), dues.clone()));
    let fanout = career_fanout::Deps::new(&career_service::clients(), &settings).map_err(|e| e.to_string())?;
    let mut ticks = tokio::time::interval(RETRIED_TICK);
    for change in 0..RETRIED {
        ticks.tick().await;
        fan_out(&fanout, &user, &format!("prf_retried_{change}"), change as u64 + 1).await?;
    }
    let waited = Instant::now();
    while retried.received().len() < 2 * RETRIED && waited.elapsed() < RETRY_STARVED {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let failing_attempts = failing_receiver.as_ref().map_or(0, |receiver| receiver.received().len()) - failing_before;
    // The retries that arrived, recorded (a record is written once its answer is in).
    let arrived = retried.received().len().saturating_sub(RETRIED);
    let mut sent = Vec::new();
    let recorded = Instant::now();
    while sent.len() < arrived && recorded.elapsed() < Duration::from_secs(30) {
        let page = deliveries.list(&subscription, Some(DeliveryStatus::Succeeded), 100, None).await;
        sent = page.map_err(|e| e.to_string())?.deliveries;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    watcher.abort();
    for pump in pumps {
        pump.abort();
    }
    let dues = dues.lock().map_err(|_| "the due times' lock")?.clone();
    let mut lateness = Vec::new();
    for record in sent.iter().filter(|record| record.attempts >= 2) {
        let due = dues.get(&record.id).ok_or_else(|| format!("{}: its retry's due time was not seen", record.id))?;
        let at = record.last_attempt_at.ok_or("a succeeded record without its attempt")?;
        lateness.push(at.since(*due));
    }
    if lateness.len() > RETRIED {
        return Err(format!("{} retries of {RETRIED} deliveries", lateness.len()));
    }
    let unsent = RETRIED - lateness.len();
    lateness.extend(std::iter::repeat_n(RETRY_STARVED, unsent));
    Ok(RetriedRun {
        lateness,
        unsent,
        most_in_flight: gauge.most_in_flight(),
        most_delayed: gauge.most_delayed(),
        most_unreceived: gauge.most_waiting_to_be_received(),
        failing_attempts,
    })
}

/// Notes, until aborted, when each of `subscription`'s deliveries that failed its first
/// attempt is due for its retry (its record's `nextAttemptAt` while it waits).
async fn watch_dues(
    deliveries: DeliveryTable,
    subscription: SubscriptionId,
    dues: Arc<Mutex<HashMap<DeliveryId, Timestamp>>>,
) {
    loop {
        if let Ok(page) = deliveries.list(&subscription, Some(DeliveryStatus::Pending), 100, None).await {
            let waiting = page.deliveries.into_iter().filter(|record| record.attempts == 1);
            let due: Vec<_> = waiting.filter_map(|record| Some((record.id, record.next_attempt_at?))).collect();
            if let Ok(mut dues) = dues.lock() {
                dues.extend(due);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The rate-limit part: its row (a failed run is a row that says so), text and note.
async fn rate_limit() -> Section {
    let mut section = Section::empty(17, TITLE);
    match rate_limit_row().await {
        Ok((row, text)) => {
            section.rows.push(row);
            section.body.push_str(&text);
        }
        Err(error) => section.rows.push(Row::new(rate_row(), "runs", format!("failed: {error}"), Some(false))),
    }
    section.unmet_notes.push(rate_note());
    section
}

/// The rate-limit row's name.
fn rate_row() -> String {
    format!("scale model: a rate limit at 5x one item's modelled write quota ({RATE_LIMIT}/s, 5 writes/s an item)")
}

/// The rate-limit row's limit: five times one item's modelled write quota, as 5,000 a second
/// is to DynamoDB's 1,000 writes a second per partition key.
const RATE_LIMIT: usize = 25;
/// DynamoDB's per-key quota divided by this: an item takes 5 writes a second.
const RATE_DIVISOR: u32 = 200;
/// Deliveries queued at once behind the limit, each run.
const RATE_DELIVERIES: usize = 300;
const RATE_ROUNDS: usize = 2;
/// Within this share of the limit over a run.
const RATE_TARGET: f64 = 0.9;
/// A gap between two deliveries this long is a stall: no wait the limit gives is so long
/// (a place is a second away at most, a failed count waits 1 to 3 s).
const STALL: Duration = Duration::from_secs(5);

/// Why the rate-limit row may fall short.
fn rate_note() -> String {
    format!(
        "A rate limit's admitted attempts start at their count's stamp, {} ms after it is asked: a count answered \
         later, or an attempt that wakes more than {} ms after its stamp (a loaded machine's scheduler), gives its \
         place back and is counted again, so where DynamoDB Local answers that slowly the deliveries come slower \
         than the limit. The window covers {} ms and up to one slot more, and a saturated limit cannot fill it all.",
        rate::LEAD.as_millis(),
        rate::PRECISION.as_millis(),
        rate::WINDOW.as_millis()
    )
}

/// The row of a rate limit at five times one item's modelled write quota (contract sections
/// 18 and 22), its text for the section's body, and its note should it fall short.
async fn rate_limit_row() -> Result<(Row, String), String> {
    let mut runs = Vec::new();
    for round in 1..=RATE_ROUNDS {
        progress(format!(
            "   round {round} of {RATE_ROUNDS}: {RATE_DELIVERIES} deliveries at a limit of {RATE_LIMIT} a second, \
             the per-key quota divided by {RATE_DIVISOR}"
        ));
        career_service::fresh_dynamodb().await?;
        let run = RateLimitRun {
            limit: RATE_LIMIT,
            deliveries: RATE_DELIVERIES,
            divisor: RATE_DIVISOR,
            retry_base: Duration::from_secs(30),
        };
        let delivered = run.run().await;
        if delivered.distinct() != RATE_DELIVERIES || delivered.arrivals.len() != RATE_DELIVERIES {
            return Err(format!(
                "{} arrivals of {} distinct deliveries, for {RATE_DELIVERIES} queued",
                delivered.arrivals.len(),
                delivered.distinct()
            ));
        }
        runs.push((delivered.rate(), delivered.most_in_a_second(), delivered.longest_gap()));
    }
    let limit = RATE_LIMIT as f64;
    let slowest = runs.iter().map(|(rate, _, _)| *rate).fold(f64::INFINITY, f64::min);
    let most = runs.iter().map(|(_, most, _)| *most).max().unwrap_or(0);
    let longest_gap = runs.iter().map(|(_, _, gap)| *gap).max().unwrap_or_default();
    let met = slowest >= RATE_TARGET * limit && most <= RATE_LIMIT && longest_gap < STALL;
    let row = Row::new(
        rate_row(),
        format!("≥ {:.0}% of the limit over the run, never above it in a second, no stall", RATE_TARGET * 100.0),
        format!(
            "{slowest:.1}/s ({:.0}% of {RATE_LIMIT}), at most {most} in a second, longest gap {}",
            100.0 * slowest / limit,
            ms(longest_gap)
        ),
        Some(met),
    );
    let mut text = format!(
        "\nA rate limit past one item's write quota. A subscription with `maxDeliveriesPerSecond` {RATE_LIMIT} gets {RATE_DELIVERIES} deliveries queued at once \
         on the main lane (behind a first one that makes its receiver known as fast, so it spreads over the \
         groups its limit gives it), with DynamoDB's per-key quota divided by {RATE_DIVISOR} on the rate-limit \
         table (5 writes a second an item: the limit is five times one item's, as 5,000 a second is to \
         DynamoDB's 1,000), and two instances of the delivery function on each lane, their DynamoDB calls \
         through the scale model's throttling layer. The rate is the deliveries a second from the first arrival \
         to the last; the most in a second counts attempts by the second they were signed in. {RATE_ROUNDS} runs, \
         each on a fresh DynamoDB Local:\n"
    );
    for (round, (rate, most, gap)) in runs.iter().enumerate() {
        let _ = writeln!(
            text,
            "- run {}: {rate:.1} deliveries a second ({:.0}% of the limit), at most {most} in one second, longest \
             gap between two arrivals {}.",
            round + 1,
            100.0 * rate / limit,
            ms(*gap)
        );
    }
    Ok((row, text))
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
