//! Benchmark 9, Isolation: a healthy receiver's delivery latency while another user's
//! receiver hangs past the send timeout, against the same deliveries without it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use career_service::pipeline::Pipeline;
use career_service::receiver::{HangingReceiver, Receiver};
use careerctl::pumps::run_queue_pump;
use careerctl::template::function;
use tokio::task::JoinHandle;

use crate::counting::{self, Calls};
use crate::payloads::{batch, profile_record};
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize};
use crate::{progress, Bench};

pub const TITLE: &str = "Isolation from a hanging receiver";
const HEALTHY: usize = 40;
const HANGING: usize = 200;
/// One event every tick: every sixth goes to the healthy receiver, the others to the
/// hanging one (or, undisturbed, nowhere).
const TICK: Duration = Duration::from_millis(100);
const EVERY: usize = (HEALTHY + HANGING) / HEALTHY;
/// Undisturbed and disturbed runs alternate, so a change in the machine's load hits both.
const ROUNDS: usize = 5;
const TARGET_RATIO: f64 = 1.5;

/// What one run measured.
struct Run {
    /// Fan-out call → arrival at the healthy receiver, one per healthy delivery.
    latencies: Vec<Duration>,
    /// The two parts of each: the fan-out call itself (the delivery's record and message
    /// written), then its return → arrival (the lane, the delivery function, the send).
    stages: Stages,
    /// Connections the hanging receiver took, and how many of them the sender gave up on.
    hanging: (usize, usize),
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("unknown").to_owned();
    let (mut undisturbed, mut disturbed) = (Vec::new(), Vec::new());
    let (mut stages_alone, mut stages_beside) = (Stages::default(), Stages::default());
    let (mut taken, mut closed) = (0, 0);
    for round in 1..=ROUNDS {
        progress(format!("   round {round} of {ROUNDS}: {HEALTHY} healthy deliveries alone"));
        let run = measure(&bench, round, false).await?;
        undisturbed.extend(run.latencies);
        stages_alone.extend(run.stages);
        progress(format!(
            "   round {round} of {ROUNDS}: {HEALTHY} healthy deliveries beside {HANGING} to a receiver that hangs"
        ));
        let run = measure(&bench, round, true).await?;
        disturbed.extend(run.latencies);
        stages_beside.extend(run.stages);
        taken += run.hanging.0;
        closed += run.hanging.1;
    }
    let (alone, beside) = (summarize(&undisturbed), summarize(&disturbed));
    let p99_ratio = ratio(beside.p99, alone.p99);

    let mut body = String::new();
    let _ = writeln!(
        body,
        "Two users, each with one subscription: one receiver answers 200 at once, the other takes the connection \
         and never answers (the sender gives up after its 10 s timeout). One event every {} ms goes through \
         `career_fanout::handle` onto the lanes, which the local pumps consume as `careerctl local` does (as many \
         batches at a time per lane as the template's MaximumConcurrency): every {EVERY}th to the healthy user ({HEALTHY} in all), \
         the others ({HANGING}) to the user whose receiver hangs, starting while that subscription still counts \
         as healthy. The undisturbed run sends the same healthy events at the same ticks and nothing else. \
         Latency is from the fan-out call to the request's arrival at the receiver. {ROUNDS} rounds alternate \
         the two runs, each on fresh queues and tables; the figures pool them ({} deliveries each). The load \
         average when the section started was {load} on {} cores (other builds share this machine).\n",
        TICK.as_millis(),
        undisturbed.len(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    );
    body.push_str("| Healthy receiver | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n");
    let beside_label = format!("Beside a receiver that hangs ({HANGING} deliveries)");
    for (name, s) in [("Alone", alone), (beside_label.as_str(), beside)] {
        let _ = writeln!(body, "| {name} | {} | {} | {} | {} |", ms(s.median), ms(s.p90), ms(s.p99), ms(s.max));
    }
    body.push_str(
        "\nThe same deliveries in two parts. First the fan-out call: the delivery's record and message written, \
         which is time spent waiting for DynamoDB Local and the SQS emulator (the two columns after it: what its \
         requests waited for each). Then from its return to the arrival: the lane, the delivery function and the \
         send, where the service keeps subscriptions apart (FIFO groups, each message deleted as soon as its own \
         attempt is recorded, the retry lane for a failing subscription).\n\n\
         | Healthy receiver | fan-out call p50 | p99 | its DynamoDB wait p99 | its SQS wait p99 | return → arrival p50 | p99 |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (name, stages) in [("Alone", &stages_alone), (beside_label.as_str(), &stages_beside)] {
        let (call, rest) = (summarize(&stages.fan_out), summarize(&stages.after_fan_out));
        let (dynamodb, sqs) = (summarize(&stages.dynamodb), summarize(&stages.sqs));
        let _ = writeln!(
            body,
            "| {name} | {} | {} | {} | {} | {} | {} |",
            ms(call.median),
            ms(call.p99),
            ms(dynamodb.p99),
            ms(sqs.p99),
            ms(rest.median),
            ms(rest.p99)
        );
    }
    let (rest_alone, rest_beside) = (summarize(&stages_alone.after_fan_out), summarize(&stages_beside.after_fan_out));
    let rest_ratio = ratio(rest_beside.p99, rest_alone.p99);
    let _ = writeln!(
        body,
        "\nThe hanging receiver took {taken} connections over the {ROUNDS} disturbed runs, and the sender had given \
         up on {closed} of them (after 10 s each) when the runs ended. Its first deliveries wait on the main lane \
         behind one batch in flight (the lane is a FIFO queue grouped by subscription); once that batch has timed \
         out the subscription's failure clock runs, its queued deliveries are handed to the retry lane, and new \
         ones go there directly. The healthy subscription's deliveries never wait for a consumer the hanging one \
         holds. From the fan-out's return to the arrival, where the delivery function too receives from the SQS \
         emulator and reads from DynamoDB Local, the p99 beside the hanging receiver is {rest_ratio:.2}× the \
         undisturbed one. What the hanging subscription still costs them is shared work: its hand-overs, \
         retries and failure clock are requests to the same SQS emulator (one Python process) and DynamoDB Local, \
         on the same two cores as this process, so a healthy fan-out call that comes while they run waits for the \
         emulators (the DynamoDB and SQS columns). On AWS the other user's deliveries run in other instances of \
         the delivery function, and its requests go to SQS and DynamoDB, whose latency does not depend on one \
         user's traffic, so only the second part's figure depends on the service. The whole latency's median is \
         {:.2}× and its p90 {:.2}× the undisturbed run's; its p99 (of {} samples, {} of them above it) moves \
         with the emulators' pauses.\n",
        ratio(beside.median, alone.median),
        ratio(beside.p90, alone.p90),
        undisturbed.len(),
        undisturbed.len() - (0.99 * undisturbed.len() as f64).ceil() as usize,
    );
    let rows = vec![
        Row::new(
            "Healthy p99 beside a hanging receiver vs alone",
            format!("≤ {TARGET_RATIO}×"),
            format!(
                "{} vs {} → {p99_ratio:.2}× (p50 {} vs {})",
                ms(beside.p99),
                ms(alone.p99),
                ms(beside.median),
                ms(alone.median)
            ),
            Some(p99_ratio <= TARGET_RATIO),
        ),
        Row::new(
            "The same after the fan-out call (lanes, delivery function, send)",
            format!("≤ {TARGET_RATIO}×"),
            format!(
                "{} vs {} → {rest_ratio:.2}× (p50 {} vs {})",
                ms(rest_beside.p99),
                ms(rest_alone.p99),
                ms(rest_beside.median),
                ms(rest_alone.median)
            ),
            Some(rest_ratio <= TARGET_RATIO),
        ),
    ];
    let unmet_notes = vec![format!(
        "The whole latency's p99 includes the fan-out call's waits for the emulators, which the hanging user's \
         requests share with it on this machine (load average {load} at the start); the table of parts above \
         shows where the time went."
    )];
    Ok(Section { number: 9, title: TITLE, rows, body, unmet_notes })
}

/// A healthy delivery's latency in two parts, one sample per delivery each.
#[derive(Default)]
struct Stages {
    fan_out: Vec<Duration>,
    /// Of the fan-out call: the time its requests waited for DynamoDB Local, and for the
    /// SQS emulator.
    dynamodb: Vec<Duration>,
    sqs: Vec<Duration>,
    after_fan_out: Vec<Duration>,
}

impl Stages {
    fn extend(&mut self, other: Stages) {
        self.fan_out.extend(other.fan_out);
        self.dynamodb.extend(other.dynamodb);
        self.sqs.extend(other.sqs);
        self.after_fan_out.extend(other.after_fan_out);
    }
}

/// One run on fresh tables and queues, with both lanes' pumps.
async fn measure(bench: &Bench, round: usize, with_hanging: bool) -> Result<Run, String> {
    let pipeline = Pipeline::start(false).await;
    let settings = pipeline.settings().clone();
    let pumps = lane_pumps(&pipeline);
    let healthy = Receiver::start(&[200], Duration::ZERO).await;
    let hanging = HangingReceiver::start().await;
    let (healthy_user, hanging_user) = (career_service::unique_user(), career_service::unique_user());
    pipeline.subscribe(&healthy_user, &healthy.url, &["profile.updated"]).await;
    pipeline.subscribe(&hanging_user, &hanging.url, &["profile.updated"]).await;
    // The fan-out's calls are logged, to tell how long each call waited for DynamoDB Local
    // and for the SQS emulator (one request at a time each: it reads, writes, then sends).
    let (dynamodb_calls, sqs_calls) = (Calls::default(), Calls::default());
    let clients = career_service::clients()
        .with_dynamodb(counting::dynamodb(&bench.dynamodb_endpoint, &dynamodb_calls))
        .with_sqs(counting::sqs(&bench.sqs_endpoint, &sqs_calls));
    let fanout = career_fanout::Deps::new(&clients, &settings).map_err(|e| e.to_string())?;

    let mut sent: HashMap<String, Instant> = HashMap::new();
    let (mut fanned, mut stages) = (HashMap::new(), Stages::default());
    let mut ticks = tokio::time::interval(TICK);
    for tick in 0..HEALTHY + HANGING {
        ticks.tick().await;
        let to_healthy = tick % EVERY == 0;
        if !to_healthy && !with_hanging {
            continue;
        }
        let user = if to_healthy { &healthy_user } else { &hanging_user };
        let profile = format!("prf_r{round}_{tick}");
        if to_healthy {
            sent.insert(profile.clone(), Instant::now());
        }
        let (started, marks) = (Instant::now(), (dynamodb_calls.len(), sqs_calls.len()));
        fan_out(&fanout, user, &profile, tick as u64 + 1).await?;
        if to_healthy {
            stages.fan_out.push(started.elapsed());
            stages.dynamodb.push(dynamodb_calls.waited_since(marks.0));
            stages.sqs.push(sqs_calls.waited_since(marks.1));
            fanned.insert(profile, Instant::now());
        }
    }
    let latencies = latencies(&healthy, &sent, HEALTHY).await?;
    stages.after_fan_out = self::latencies(&healthy, &fanned, HEALTHY).await?;
    for pump in pumps {
        pump.abort();
    }
    Ok(Run { latencies, stages, hanging: (hanging.taken(), hanging.closed()) })
}

/// Both lanes' pumps on the pipeline's queues, as `careerctl local` runs them.
pub fn lane_pumps(pipeline: &Pipeline) -> Vec<JoinHandle<()>> {
    let mut pumps = Vec::new();
    let settings = pipeline.settings();
    for lane in career_service::queue_sources(function::DELIVER, settings) {
        let deliver = career_service::deliver_instance(settings);
        let sqs = career_service::acting_as(function::DELIVER, settings, &career_service::clients()).sqs().clone();
        pumps.push(tokio::spawn(async move { run_queue_pump(sqs, lane, &deliver, std::future::pending()).await }));
    }
    pumps
}

/// Fans out the change of `user`'s profile `profile` (stream sequence `sequence`).
pub async fn fan_out(fanout: &career_fanout::Deps, user: &str, profile: &str, sequence: u64) -> Result<(), String> {
    let event: StreamEvent =
        serde_json::from_value(batch(vec![profile_record(user, profile, sequence)])).map_err(|e| e.to_string())?;
    if !career_fanout::handle(fanout, event).await.batch_item_failures.is_empty() {
        return Err(format!("fanning out the change of {profile} failed"));
    }
    Ok(())
}

/// Waits (at most 60 s) for `expected` deliveries at `receiver`; each one's latency from
/// its event's fan-out call (`sent`, by profile id).
pub async fn latencies(
    receiver: &Receiver,
    sent: &HashMap<String, Instant>,
    expected: usize,
) -> Result<Vec<Duration>, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while receiver.received().len() < expected {
        if Instant::now() > deadline {
            return Err(format!("{} of {expected} deliveries arrived within 60 s", receiver.received().len()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut latencies = Vec::new();
    for delivery in receiver.received() {
        let profile = delivery.json()["data"]["profileId"].as_str().unwrap_or_default().to_owned();
        let started = sent.get(&profile).ok_or_else(|| format!("an unexpected delivery for {profile}"))?;
        latencies.push(delivery.at.duration_since(*started));
    }
    Ok(latencies)
}
