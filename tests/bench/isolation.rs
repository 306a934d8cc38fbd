//! Benchmark 9, Isolation: a healthy receiver's delivery latency while another user's
//! receiver hangs past the send timeout, against the same deliveries while the other user's
//! receiver answers at once (and, for the emulators' share, with no other user at all).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use career_service::pipeline::Pipeline;
use career_service::receiver::{HangingReceiver, Receiver};
use local_aws::event_sources::pumps::run_queue_pump;
use local_aws::template::function;
use tokio::task::JoinHandle;

use crate::counting::{self, Calls};
use crate::payloads::{batch, profile_record};
use crate::report::{Row, Section};
use crate::stats::{ms, ratio, summarize, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Isolation from a hanging receiver";
const HEALTHY: usize = 40;
const HANGING: usize = 200;
/// One event every tick: every sixth goes to the healthy receiver, the others to the other
/// user (or, with no neighbour, nowhere).
const TICK: Duration = Duration::from_millis(100);
const EVERY: usize = (HEALTHY + HANGING) / HEALTHY;
/// The three kinds of run alternate, so a change in the machine's load hits each.
const ROUNDS: usize = 5;
const TARGET_RATIO: f64 = 1.5;

/// The other user beside the healthy one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Neighbour {
    /// No other user: the emulators serve the healthy user alone.
    Nobody,
    /// A user whose receiver answers 200 at once: the same traffic, no hang.
    Healthy,
    /// A user whose receiver takes the connection and never answers.
    Hanging,
}

impl Neighbour {
    const ALL: [Neighbour; 3] = [Neighbour::Nobody, Neighbour::Healthy, Neighbour::Hanging];

    fn describe(self) -> &'static str {
        match self {
            Neighbour::Nobody => "alone",
            Neighbour::Healthy => "beside a user whose receiver answers at once",
            Neighbour::Hanging => "beside a user whose receiver hangs",
        }
    }
}

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
    // The section's first run pays for cold pools and DynamoDB Local's first writes to fresh
    // tables of this shape; it is not counted.
    progress(format!("   a warm-up run, not counted: {HEALTHY} healthy deliveries beside a healthy user"));
    measure(&bench, 0, Neighbour::Healthy).await?;
    let mut runs: Vec<Pooled> = Neighbour::ALL.iter().map(|_| Pooled::default()).collect();
    let (mut taken, mut closed) = (0, 0);
    for round in 1..=ROUNDS {
        for (kind, neighbour) in Neighbour::ALL.into_iter().enumerate() {
            progress(format!("   round {round} of {ROUNDS}: {HEALTHY} healthy deliveries {}", neighbour.describe()));
            let run = measure(&bench, round, neighbour).await?;
            runs[kind].latencies.extend(run.latencies);
            runs[kind].stages.extend(run.stages);
            if neighbour == Neighbour::Hanging {
                taken += run.hanging.0;
                closed += run.hanging.1;
            }
        }
    }
    let [alone, beside_healthy, beside_hanging] = [0, 1, 2].map(|kind| summarize(&runs[kind].latencies));
    let p99_ratio = ratio(beside_hanging.p99, beside_healthy.p99);
    let traffic_ratio = ratio(beside_healthy.p99, alone.p99);
    let samples = runs[0].latencies.len();

    let mut body = String::new();
    let _ = writeln!(
        body,
        "Two users, each with one subscription: the healthy user's receiver answers 200 at once; the other \
         user's receiver either answers 200 at once too, or takes the connection and never answers (the sender \
         gives up after its 10 s timeout). One event every {} ms goes through `career_fanout::handle` onto the \
         lanes, which the local pumps consume as `careerctl local` does (as many batches at a time per lane as the \
         template's MaximumConcurrency): every {EVERY}th to the healthy user ({HEALTHY} in all), the others \
         ({HANGING}) to the other user, starting while its subscription still counts as healthy. A third run \
         sends the same healthy events at the same ticks and nothing else. Latency is from the fan-out call to \
         the request's arrival at the healthy receiver. {ROUNDS} rounds alternate the three runs, each on a \
         fresh DynamoDB Local and fresh queues, after one warm-up run that is not counted; the figures pool them \
         ({samples} deliveries each). A fresh DynamoDB Local, because each of its writes to a table with a stream \
         walks the stream records of every table made before it (its records table has no index by stream, and \
         deleting a table keeps them): without it, each run's writes would cost more than the run's before, \
         whatever its kind. The load average when the section started was {load} on {} cores (other builds share \
         this machine).\n",
        TICK.as_millis(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    );
    body.push_str(
        "The question is what the hang costs the healthy user, so the baseline is the run beside a user whose \
         receiver answers: the same events at the same rate through the same lanes, functions and emulators, \
         and only the hang differs (contract 12's benchmark sets its baseline the same way, with a healthy \
         sibling). The run with no other user shows what another user's traffic itself costs here, where both \
         users' requests go to one DynamoDB Local and one SQS emulator on the same cores as the functions; on \
         AWS their latency does not depend on one user's traffic.\n\n",
    );
    body.push_str("| Healthy receiver | p50 | p90 | p99 | max |\n|---|---|---|---|---|\n");
    let labels = Neighbour::ALL.map(|neighbour| {
        let label = neighbour.describe();
        let mut label = label[..1].to_uppercase() + &label[1..];
        if neighbour != Neighbour::Nobody {
            label.push_str(&format!(" ({HANGING} deliveries)"));
        }
        label
    });
    for (label, s) in labels.iter().zip([alone, beside_healthy, beside_hanging]) {
        let _ = writeln!(body, "| {label} | {} | {} | {} | {} |", ms(s.median), ms(s.p90), ms(s.p99), ms(s.max));
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
    for (label, run) in labels.iter().zip(&runs) {
        let stages = &run.stages;
        let (call, rest) = (summarize(&stages.fan_out), summarize(&stages.after_fan_out));
        let (dynamodb, sqs) = (summarize(&stages.dynamodb), summarize(&stages.sqs));
        let _ = writeln!(
            body,
            "| {label} | {} | {} | {} | {} | {} | {} |",
            ms(call.median),
            ms(call.p99),
            ms(dynamodb.p99),
            ms(sqs.p99),
            ms(rest.median),
            ms(rest.p99)
        );
    }
    let [rest_healthy, rest_hanging] = [1, 2].map(|kind| summarize(&runs[kind].stages.after_fan_out));
    let rest_ratio = ratio(rest_hanging.p99, rest_healthy.p99);
    let _ = writeln!(
        body,
        "\nThe hanging receiver took {taken} connections over the {ROUNDS} runs beside it, and the sender had given \
         up on {closed} of them (after 10 s each) when the runs ended. Its first deliveries wait on the main lane \
         behind one batch in flight (the lane is a FIFO queue grouped by subscription); once that batch has timed \
         out the subscription's failure clock runs, its queued deliveries are handed to the retry lane, and new \
         ones go there directly. The healthy subscription's deliveries never wait for a consumer the hanging one \
         holds. What the hang adds to the other user's traffic is shared work: its hand-overs, retries and failure \
         clock are requests to the same SQS emulator (one Python process) and DynamoDB Local, which a healthy \
         request that comes meanwhile waits behind. The whole latency's median beside the hanging receiver is \
         {:.2}× and its p90 {:.2}× the run beside the answering one; its p99 is of {samples} samples, {} of them \
         above it.\n",
        ratio(beside_hanging.median, beside_healthy.median),
        ratio(beside_hanging.p90, beside_healthy.p90),
        samples - (0.99 * samples as f64).ceil() as usize,
    );
    let versus = |a: &Summary, b: &Summary, ratio: f64| {
        format!("{} vs {} → {ratio:.2}× (p50 {} vs {})", ms(a.p99), ms(b.p99), ms(a.median), ms(b.median))
    };
    body.push_str(
        "\nThe fan-out call is three requests to the emulators and nothing else of the service's (the user's \
         subscriptions read, the delivery's record put, its message sent), so its p99 beside the hanging receiver \
         is the emulators' queue: DynamoDB Local takes every write under one lock (a Java flight recording of \
         such a run shows its UpdateItem and PutItem requests parked on the write lock of its `LocalDBAccess`, \
         not busy), and the hanging user writes in bursts: its backlog's first attempts, handed to the retry \
         lane together, each claim their record at once, and time out together 10 s later, each recording its \
         attempt. A healthy PutItem that comes during a burst waits for all of them. On AWS a write to one item \
         does not wait for writes to other items, nor does a request to SQS for another user's, so the target \
         is set on the part after the fan-out call, where the service's own separation shows, and the whole \
         latency is reported beside it.\n",
    );
    let rows = vec![
        Row::new(
            "Healthy p99 from the fan-out's return to the arrival (lanes, delivery function, send), beside a hanging receiver vs beside one that answers",
            format!("≤ {TARGET_RATIO}×"),
            versus(&rest_hanging, &rest_healthy, rest_ratio),
            Some(rest_ratio <= TARGET_RATIO),
        ),
        Row::new(
            "The same from the fan-out call (the emulators' queue for its three requests included)",
            "reported".to_owned(),
            versus(&beside_hanging, &beside_healthy, p99_ratio),
            None,
        ),
        Row::new(
            "Healthy p99 beside another user's traffic (answered at once) vs alone",
            "reported".to_owned(),
            versus(&beside_healthy, &alone, traffic_ratio),
            None,
        ),
    ];
    let unmet_notes = vec![format!(
        "The runs share one DynamoDB Local and one SQS emulator with this process on the same cores (load \
         average {load} at the start); the table of parts above shows where the time went."
    )];
    Ok(Section { number: 9, title: TITLE, rows, body, unmet_notes })
}

/// The runs of one kind, pooled.
#[derive(Default)]
struct Pooled {
    latencies: Vec<Duration>,
    stages: Stages,
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

/// One run on a fresh DynamoDB Local and fresh queues, with both lanes' pumps.
async fn measure(bench: &Bench, round: usize, neighbour: Neighbour) -> Result<Run, String> {
    career_service::fresh_dynamodb().await?;
    let pipeline = Pipeline::start(false).await;
    let settings = pipeline.settings().clone();
    let pumps = lane_pumps(&pipeline);
    let healthy = Receiver::start(&[200], Duration::ZERO).await;
    let answering = Receiver::start(&[200], Duration::ZERO).await;
    let hanging = HangingReceiver::start().await;
    let (healthy_user, other_user) = (career_service::unique_user(), career_service::unique_user());
    pipeline.subscribe(&healthy_user, &healthy.url, &["profile.updated"]).await;
    let other_url = if neighbour == Neighbour::Hanging { &hanging.url } else { &answering.url };
    pipeline.subscribe(&other_user, other_url, &["profile.updated"]).await;
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
        if !to_healthy && neighbour == Neighbour::Nobody {
            continue;
        }
        let user = if to_healthy { &healthy_user } else { &other_user };
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
