//! Benchmark 18, a release of held deliveries (contract section 20, issue 51): one user's
//! subscription, disabled with `whileDisabled` hold and a `maxDeliveriesPerSecond`, holds
//! `BENCH_RELEASE_COUNT` deliveries (10,000 unless told; a debug build's run takes fewer),
//! then one enable releases them: each must arrive once (the receiver's ids against the held
//! records'), at the subscription's pace, while another user's deliveries keep their latency
//! (measured as sections 9 and 12 measure it, against the same user's alone).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{unique_user, Api};
use lambda_http::http::Method;
use serde_json::json;

use crate::isolation::{fan_out, lane_pumps};
use crate::payloads::{batch, profile_record};
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Releasing what a disabled subscription held";
/// Held deliveries released, unless `BENCH_RELEASE_COUNT` says otherwise.
const HELD: usize = 10_000;
/// The held subscription's `maxDeliveriesPerSecond`: the pace its release must keep.
const PACE: usize = 100;
/// The other user's events: one every tick, first alone (`ALONE` of them), then for as long
/// as the release runs.
const TICK: Duration = Duration::from_millis(250);
const ALONE: usize = 40;
/// The stream batches the held deliveries are fanned out in (the template's `BatchSize`).
const STREAM_BATCH: usize = 100;
/// The sweep's window (`DELIVERY_SWEEP_AFTER_SECONDS`): the tests' (section 12's burst uses it
/// too), so that once the release has arrived, a sweep that would send a delivery again has had
/// its chance within seconds, not the deployment's five minutes.
const SWEEP_WINDOW: Duration = Duration::from_secs(5);
/// The same ratio section 9 holds its isolation to.
const TARGET_RATIO: f64 = 1.5;

/// The other user's deliveries: when each event's fan-out call started and returned.
#[derive(Default)]
struct Sent(HashMap<String, (Instant, Instant)>);

impl Sent {
    async fn one(&mut self, fanout: &career_fanout::Deps, user: &str, n: usize) -> Result<(), String> {
        let profile = format!("prf_other_{n}");
        let started = Instant::now();
        fan_out(fanout, user, &profile, n as u64 + 1).await?;
        self.0.insert(profile, (started, Instant::now()));
        Ok(())
    }

    /// Each arrival's latency from its fan-out call, and from the call's return.
    fn latencies(&self, receiver: &Receiver) -> (Vec<Duration>, Vec<Duration>) {
        let received = receiver.received();
        let arrivals = received.iter().filter_map(|r| {
            let profile = r.json()["data"]["profileId"].as_str().unwrap_or_default().to_owned();
            self.0
                .get(&profile)
                .map(|(called, returned)| (r.at.duration_since(*called), r.at.duration_since(*returned)))
        });
        arrivals.unzip()
    }
}

/// The ids of the subscription's deliveries of `status`, through the API's log, every page.
async fn listed(api: &Api, key: &str, subscription: &str, status: &str) -> Result<Vec<String>, String> {
    let (mut ids, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let mut path = format!("/api/v1/webhooks/deliveries?id={subscription}&status={status}&limit=100");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let answer = api.get(&path, key).await;
        let page = answer.json["deliveries"].as_array().ok_or_else(|| format!("the log: {}", answer.json))?;
        ids.extend(page.iter().filter_map(|d| d["id"].as_str().map(str::to_owned)));
        match answer.json["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(ids),
        }
    }
}

/// Waits until `receiver` has `count` requests, at most `within`; false if it never did.
async fn arrived(receiver: &Receiver, count: usize, within: Duration) -> bool {
    crate::wait_until(within, || receiver.received().len() >= count).await.is_some()
}

pub async fn run(_bench: Arc<Bench>) -> Result<Section, String> {
    let count = std::env::var("BENCH_RELEASE_COUNT").ok().and_then(|n| n.parse().ok()).unwrap_or(HELD);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("unknown").to_owned();
    let mut pipeline = Pipeline::with_settings(false, |s| s.sweep_after = SWEEP_WINDOW).await;
    let settings = pipeline.settings().clone();
    let pumps = lane_pumps(&pipeline);
    pipeline.sweep_every(Duration::from_secs(1));
    let fanout = career_fanout::Deps::new(&career_service::patient_clients(), &settings).map_err(|e| e.to_string())?;

    let (held_user, other_user) = (unique_user(), unique_user());
    let held_receiver = Receiver::start(&[200], Duration::ZERO).await;
    let other_receiver = Receiver::start(&[200], Duration::ZERO).await;
    let (subscription, _) = pipeline.subscribe(&held_user, &held_receiver.url, &["profile.updated"]).await;
    pipeline.subscribe(&other_user, &other_receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.full_key(&held_user).await;
    let pause = json!({"enabled": false, "whileDisabled": "hold", "maxDeliveriesPerSecond": PACE}).to_string();
    let path = format!("/api/v1/webhooks?id={subscription}");
    if pipeline.api.send_json(Method::PATCH, &path, &key, &pause).await.status.as_u16() != 200 {
        return Err("pausing the subscription failed".into());
    }

    progress(format!("   {count} deliveries held: the fan-out of {count} profile updates, {STREAM_BATCH} a batch"));
    let holding = Instant::now();
    for first in (0..count).step_by(STREAM_BATCH) {
        let records = (first..(first + STREAM_BATCH).min(count))
            .map(|n| profile_record(&held_user, &format!("prf_held_{n}"), n as u64 + 1))
            .collect();
        let event: StreamEvent = serde_json::from_value(batch(records)).map_err(|e| e.to_string())?;
        if !career_fanout::handle(&fanout, event).await.batch_item_failures.is_empty() {
            return Err("fanning out the held deliveries failed".into());
        }
    }
    let holding = holding.elapsed();
    let held: BTreeSet<String> = listed(&pipeline.api, &key, &subscription, "held").await?.into_iter().collect();
    if held.len() != count {
        return Err(format!("{} of {count} deliveries were held", held.len()));
    }

    progress(format!("   the other user alone: {ALONE} deliveries, one every {}", ms(TICK)));
    let (mut alone, mut beside) = (Sent::default(), Sent::default());
    let mut ticks = tokio::time::interval(TICK);
    for n in 0..ALONE {
        ticks.tick().await;
        alone.one(&fanout, &other_user, n).await?;
    }
    if !arrived(&other_receiver, ALONE, Duration::from_secs(60)).await {
        return Err(format!("{} of the other user's {ALONE} deliveries arrived", other_receiver.received().len()));
    }
    let (alone_whole, alone_after) = alone.latencies(&other_receiver);

    progress(format!("   one enable releases them at {PACE} a second, the other user's deliveries beside it"));
    let enabled = Instant::now();
    let enable = format!("/api/v1/webhooks/enable?id={subscription}");
    let answer = pipeline.api.request(Method::POST, &enable).key(&key).send().await;
    let first_call = answer.json["released"].as_u64().ok_or_else(|| format!("the enable: {}", answer.json))?;
    // Twice what the pace allows, and two minutes: a release still running then is reported
    // as far as it got, so the section's time stays bounded.
    let within = Duration::from_secs((2 * count / PACE) as u64 + 120);
    let mut n = ALONE;
    while held_receiver.received().len() < count && enabled.elapsed() <= within {
        ticks.tick().await;
        beside.one(&fanout, &other_user, n).await?;
        n += 1;
    }
    let released_in = enabled.elapsed();
    let finished = held_receiver.received().len() >= count;
    if !arrived(&other_receiver, n, Duration::from_secs(60)).await {
        return Err(format!("{} of the other user's {n} deliveries arrived", other_receiver.received().len()));
    }
    if finished {
        // Whatever might come twice has come once the lanes are empty and two sweeps have run.
        pipeline.drained().await;
        tokio::time::sleep(settings.sweep_after + Duration::from_secs(2)).await;
        pipeline.drained().await;
    }
    for pump in pumps {
        pump.abort();
    }
    let (beside_whole, beside_after) = beside.latencies(&other_receiver);

    let received = held_receiver.received();
    let ids: Vec<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    let distinct: BTreeSet<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    let once = ids.len() == count && distinct == held;
    let mut per_second: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &received {
        *per_second.entry(r.header("webhook-timestamp")).or_default() += 1;
    }
    let busiest = per_second.values().copied().max().unwrap_or_default();
    let arrivals: Vec<Instant> = received.iter().map(|r| r.at).collect();
    let span = match (arrivals.iter().min(), arrivals.iter().max()) {
        (Some(first), Some(last)) => last.duration_since(*first),
        _ => Duration::ZERO,
    };
    let pace = (count.saturating_sub(1)) as f64 / span.as_secs_f64().max(1e-9);

    let summaries = [&alone_whole, &beside_whole, &alone_after, &beside_after].map(|s| summarize(s));
    let [alone_whole, beside_whole, alone_after, beside_after] = summaries;
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Contract section 20, issue 51. One user's subscription to `profile.updated`, paused with `whileDisabled` \
         hold and `maxDeliveriesPerSecond` {PACE}, holds {count} deliveries: {count} profile updates fanned out \
         through `career_fanout::handle` in stream batches of {STREAM_BATCH} (the fan-out writes each record `held` \
         and queues nothing; {}). Then one `POST /api/v1/webhooks/enable` releases them: {first_call} in the call \
         (its share, contract section 20), the rest by the sweep from the subscription's marker (run every second \
         here on a window of {} instead of the deployment's 300 s, so that a sweep that would send a \
         delivery again has had its chance before the count); the lanes' pumps consume as `careerctl local` does, \
         and the subscription's receiver answers 200 at once. Beside it another user's subscription gets one event \
         every {} through the same fan-out, lanes and functions: {ALONE} before the enable (alone: the held \
         subscription sends nothing) and then until the release has arrived ({} events). Latency is from the \
         fan-out call to the arrival, and from the call's return to the arrival (the part section 9's target is \
         set on: the lanes, the delivery function and the send). One run on a fresh DynamoDB Local; the load \
         average when the section started was {load} on {} cores.\n",
        ms(holding),
        ms(SWEEP_WINDOW),
        ms(TICK),
        n - ALONE,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    );
    let _ = writeln!(
        body,
        "| The release | Figure |\n|---|---|\n\
         | Held deliveries, each one's id from the log | {count} |\n\
         | Received by the held subscription's receiver | {} requests, {} distinct ids, {} |\n\
         | Released by the enable's call / by the sweep | {first_call} / {} |\n\
         | From the enable to the last arrival | {} |\n\
         | Pace: between the first arrival and the last | {pace:.1} a second |\n\
         | Pace: the busiest signed second (`webhook-timestamp`) | {busiest} (limit {PACE}) |\n",
        ids.len(),
        distinct.len(),
        if distinct == held { "the held records' ids exactly" } else { "NOT the held records' ids" },
        count as u64 - first_call.min(count as u64),
        ms(released_in),
    );
    let line = |label: &str, s: &Summary| {
        format!("| {label} | {} | {} | {} | {} |", ms(s.median), ms(s.p90), ms(s.p99), ms(s.max))
    };
    let _ = writeln!(
        body,
        "| The other user's deliveries | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n{}\n{}\n{}\n{}\n",
        line(&format!("Alone, from the fan-out call ({ALONE})"), &alone_whole),
        line(&format!("Beside the release, from the fan-out call ({})", n - ALONE), &beside_whole),
        line("Alone, from the call's return", &alone_after),
        line("Beside the release, from the call's return", &beside_after),
    );
    let after_ratio = ratio(beside_after.p99, alone_after.p99);
    let whole_ratio = ratio(beside_whole.p99, alone_whole.p99);
    let rows = vec![
        Row::new(
            format!("A release of {count} held deliveries: each sent once"),
            "every held id once",
            format!("{} requests, {} distinct, {count} held", ids.len(), distinct.len()),
            Some(once),
        ),
        Row::new(
            "The release at the subscription's pace (maxDeliveriesPerSecond)",
            format!("≤ {PACE} in any second, ≥ {} a second from first to last", PACE / 2),
            format!(
                "busiest second {busiest}; {pace:.1}/s from first to last arrival; {} of {count} in {}",
                ids.len(),
                ms(released_in)
            ),
            Some(finished && busiest <= PACE && pace >= (PACE / 2) as f64),
        ),
        Row::new(
            "Another user's p99 beside the release vs alone, from the fan-out's return",
            format!("≤ {TARGET_RATIO}×"),
            format!("{} vs {} → {after_ratio:.2}×", ms(beside_after.p99), ms(alone_after.p99)),
            Some(after_ratio <= TARGET_RATIO),
        ),
        Row::new(
            "The same from the fan-out call",
            "reported",
            format!("{} vs {} → {whole_ratio:.2}×", ms(beside_whole.p99), ms(alone_whole.p99)),
            None,
        ),
    ];
    let unmet_notes = vec![format!(
        "One run beside one DynamoDB Local and one SQS emulator on the same cores (load average {load} at the \
         start): the release's writes and sends queue in the emulators beside the other user's."
    )];
    Ok(Section { number: 18, title: TITLE, rows, body, unmet_notes })
}
