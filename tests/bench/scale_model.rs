//! Benchmark 17, Scale model: the promises of contract section 22 measured past the quota or
//! the capacity that binds them, at a size this machine can exceed. Its rows here: busy
//! subscriptions share the main lane fairly, a quiet subscription's latency beside two busy
//! fast ones against its latency alone, with the main lane's groups and consumers divided by
//! [`SCALE`], the consumers in the shipped ratio to the groups and in the ratio before (20
//! consumers for 16 groups); and a rate limit at five times one item's modelled write quota
//! holds close to the limit without stalling ([`rate_limit_row`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::delivery::groups::{Groups, Pace};
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::plan::Place;
use career_core::delivery::rate;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::ids::{SubscriptionId, UserId};
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::WebhookTable;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::scale_model::RateLimitRun;
use local_aws::template::{Template, TEMPLATE};

use crate::isolation::{fan_out, lane_pumps, latencies};
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
    let mut unmet_notes = vec![format!(
        "Fairness holds while the main lane's consumers (`DeliveryMaxConcurrency`) outnumber the message groups \
         of the busy subscriptions ({shipped_groups} each as shipped, `DeliveryGroupsPerSubscription`); \
         docs/deploying.md's capacity table says so."
    )];
    match rate_limit_row().await {
        Ok((row, text)) => {
            rows.push(row);
            body.push('\n');
            body.push_str(&text);
        }
        Err(error) => rows.push(Row::new(rate_row(), "runs", format!("failed: {error}"), Some(false))),
    }
    unmet_notes.push(rate_note());
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
        "A subscription with `maxDeliveriesPerSecond` {RATE_LIMIT} gets {RATE_DELIVERIES} deliveries queued at once \
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
