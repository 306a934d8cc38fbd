//! Benchmark 15, Delivery into the receiver's own AWS account (contract section 17, issue 38):
//! what a delivery to an SQS queue pays beside one over HTTP. The send step as the delivery
//! function runs it (`AwsSender`, with the function's own role, through the local stack's IAM
//! enforcement, STS and SQS), against the HTTP send step to a loopback receiver, in the same
//! run; and how many `sts:AssumeRole` calls the warm sends make, counted by the IAM emulation.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use career_core::aws::aws_sender::AwsSender;
use career_core::aws::sender::Sender;
use career_core::clock::Timestamp;
use career_core::delivery::attempt::Outcome;
use career_core::delivery::aws_destination::{RENEW_BEFORE, SESSION_SECONDS};
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::events::Event;
use career_core::ids::SubscriptionId;
use career_core::webhooks::destination::{AwsDestination, Destination, QueueUrl, RoleArn};
use career_core::webhooks::rotation::ActiveSecrets;
use career_core::webhooks::WebhookSecret;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{typed, unique_user};
use local_aws::receiver::{permissions_policy, queue_arn, trust_policy, ReceiverAccount, RECEIVER_ACCOUNT};
use local_aws::template::function;

use crate::cost::{duration_usd_per_million, memory_sizes, usd, LAMBDA_GB_SECOND};
use crate::report::{Row, Section};
use crate::stats::{ms, renewals, summarize, Renewals, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Delivery to an AWS destination";

/// The target: at most one `sts:AssumeRole` per subscription per this long, warm.
const TARGET_WINDOW: Duration = Duration::from_secs(14 * 60);
/// Subscriptions whose first send (an `AssumeRole`, then a `SendMessage`) is timed.
const COLD_SUBSCRIPTIONS: usize = 20;

/// One send step, as the delivery function runs it: signed for this attempt, then sent.
struct Timed {
    cold: Summary,
    warm: Summary,
    http: Summary,
    /// `AssumeRole` calls the warm sends made (after their subscription's first).
    warm_assumptions: usize,
    warm_sends: usize,
    warm_took: Duration,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let memory_mb = *memory_sizes()?.get(function::DELIVER).ok_or("no MemorySize for the delivery function")?;
    let pipeline = Pipeline::start(false).await;
    let settings = pipeline.settings();
    let clients = career_service::acting_as(function::DELIVER, settings, &career_service::clients());
    // The role the webhooks function shows owners as `senderRoleArn`: this stack's delivery role.
    let shown = career_service::function_settings(function::WEBHOOKS, settings);
    let sender_role = shown.sender_role_arn.ok_or("the stack gives the webhooks function no SENDER_ROLE_ARN")?;

    // The receiver's queue and role, trusting the sender role with one external id for
    // every subscription here (each subscription still has a session of its own).
    let account = ReceiverAccount::new(&career_service::clients());
    let user = unique_user();
    let name = format!("bench-destination-{}", &user[user.len() - 8..]);
    let queue_url = account.create_queue(&name).await.map_err(|e| format!("{e:#}"))?;
    let role_arn = format!("arn:aws:iam::{RECEIVER_ACCOUNT}:role/{name}");
    let destination = Destination::AwsSqs {
        queue_url: QueueUrl::parse(&queue_url).ok_or("the emulator's queue URL")?,
        role_arn: RoleArn::parse(&role_arn).ok_or("the role's ARN")?,
    };
    let aws = AwsDestination::new(destination);
    let trust = trust_policy(sender_role.as_str(), aws.external_id.as_str());
    let permissions = permissions_policy("sqs:SendMessage", &queue_arn(&queue_url));
    account.replace_role(&name, &trust, &permissions).await.map_err(|e| format!("{e:#}"))?;

    let secret = WebhookSecret::generate();
    let signed = |message: &DeliveryMessage| {
        SignedDelivery::new(message, &ActiveSecrets { secrets: vec![&secret], keys: vec![] }, Timestamp::now())
    };
    let message =
        |subscription: &SubscriptionId| DeliveryMessage::new(&Event::ping(subscription), &typed(&user), subscription);
    let aws_sender = AwsSender::new(&clients);
    let delivered = |what: &str, outcome: Outcome| match outcome {
        Outcome::Delivered(_) => Ok(()),
        other => Err(format!("{what}: not delivered: {other:?}")),
    };

    progress(format!("   {COLD_SUBSCRIPTIONS} subscriptions' first sends to a queue (AssumeRole, then SendMessage)"));
    let subscriptions: Vec<SubscriptionId> = (0..COLD_SUBSCRIPTIONS).map(|_| SubscriptionId::generate()).collect();
    let mut cold = Vec::new();
    for subscription in &subscriptions {
        let message = message(subscription);
        let started = Instant::now();
        delivered("a first send", aws_sender.send(&message, &aws, &signed(&message)).await)?;
        cold.push(started.elapsed());
    }

    let sends = (bench.requests / 5).max(50);
    progress(format!("   {sends} warm sends to the queue, then {sends} over HTTP to a loopback receiver"));
    // The first subscription again: its session was made by its first send above.
    let warm_message = message(&subscriptions[0]);
    let assumed_before = local_aws::iam::assumptions_of(&role_arn);
    let warm_started = Instant::now();
    let mut warm = Vec::new();
    for _ in 0..sends {
        let started = Instant::now();
        delivered("a warm send", aws_sender.send(&warm_message, &aws, &signed(&warm_message)).await)?;
        warm.push(started.elapsed());
    }
    let warm_took = warm_started.elapsed();
    let warm_assumptions = local_aws::iam::assumptions_of(&role_arn) - assumed_before;

    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let http_sender = Sender::new(settings.webhook_urls.guard.clone());
    let mut http = Vec::new();
    for _ in 0..sends {
        let (sender, url, signed) = (http_sender.clone(), receiver.url.clone(), signed(&warm_message));
        let started = Instant::now();
        let outcome =
            tokio::task::spawn_blocking(move || sender.send(&url, &signed)).await.map_err(|e| e.to_string())?;
        http.push(started.elapsed());
        delivered("an HTTP send", outcome)?;
    }
    let arrived = account.take(&queue_url).await.map_err(|e| format!("{e:#}"))?;
    if arrived.is_empty() {
        return Err("the queue received nothing".into());
    }

    let timed = Timed {
        cold: summarize(&cold),
        warm: summarize(&warm),
        http: summarize(&http),
        warm_assumptions,
        warm_sends: sends,
        warm_took,
    };
    Ok(render(&timed, memory_mb))
}

fn render(timed: &Timed, memory_mb: f64) -> Section {
    let session = Duration::from_secs(SESSION_SECONDS as u64);
    let Renewals { per_window, renews_every, met } =
        renewals(timed.warm_assumptions, session, RENEW_BEFORE, TARGET_WINDOW);
    let extra = timed.warm.median.as_secs_f64() - timed.http.median.as_secs_f64();
    let cold_extra = timed.cold.median.as_secs_f64() - timed.warm.median.as_secs_f64();
    let rows = vec![
        Row::new(
            "Per delivery to a queue, warm: STS calls per subscription per 14 minutes",
            "≤ 1",
            format!(
                "{per_window} ({} warm sends over {:.1} s made {} `AssumeRole`; a {} min session is renewed {} s before it \
                 expires: one per {} min)",
                timed.warm_sends,
                timed.warm_took.as_secs_f64(),
                timed.warm_assumptions,
                SESSION_SECONDS / 60,
                RENEW_BEFORE.as_secs(),
                renews_every.as_secs() / 60
            ),
            Some(met),
        ),
        Row::new(
            "Per delivery to a queue, warm: extra latency and cost per million vs HTTP",
            "reported",
            format!(
                "{extra_ms:+.2} ms (median {} vs {} over HTTP to loopback); {} per million in the delivery function's \
                 duration ({memory_mb:.0} MB), STS free, SendMessage billed to the receiver",
                ms(timed.warm.median),
                ms(timed.http.median),
                // The delivery function's extra billed duration; STS does not charge for
                // AssumeRole, and the receiver's account pays for its SendMessage.
                usd(duration_usd_per_million(extra.max(0.0), memory_mb)),
                extra_ms = extra * 1000.0
            ),
            None,
        ),
    ];
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Issue 38: the send step of a delivery into the receiver's own SQS queue (contract section 17) as the delivery \
         function runs it, with its own role's credentials through the local stack's IAM enforcement, STS and SQS \
         emulators (moto), beside the HTTP send step to a loopback receiver, in this process. Each send signs the \
         delivery for its attempt, as the function does.\n"
    );
    let _ = writeln!(body, "| Send step | median | p90 | p99 | samples |\n|---|---|---|---|---|");
    for (what, summary, n) in [
        ("Queue, a subscription's first send (`AssumeRole`, then `SendMessage`)", &timed.cold, COLD_SUBSCRIPTIONS),
        ("Queue, warm (the session kept)", &timed.warm, timed.warm_sends),
        ("HTTP to a loopback receiver", &timed.http, timed.warm_sends),
    ] {
        let _ = writeln!(body, "| {what} | {} | {} | {} | {n} |", ms(summary.median), ms(summary.p90), ms(summary.p99));
    }
    let _ = writeln!(
        body,
        "\nThe IAM emulation counted {} `AssumeRole` for the {} warm sends to one subscription after its first: the \
         session (credentials for {} s, and the queue's client made with them) is kept until {} s before it expires, \
         so a warm subscription costs one STS call per {} minutes. A first send adds {:.2} ms (median) for the \
         assumption here; on AWS, STS charges nothing for it. The extra latency of a warm send is the emulators' (a \
         Python SQS on loopback, behind the local IAM enforcement, which reads the role's policies from the IAM \
         emulator on every call, as AWS evaluates the policy in force) against a Rust receiver on loopback: on AWS a `SendMessage` in the queue's region \
         and a receiver's HTTPS endpoint each take their own network time, so the figure orders the two, it does \
         not predict either. Its cost is the delivery function's billed duration at its `MemorySize` \
         ({memory_mb:.0} MB, {}); the receiver's account pays for the `SendMessage`.",
        timed.warm_assumptions,
        timed.warm_sends,
        SESSION_SECONDS,
        RENEW_BEFORE.as_secs(),
        renews_every.as_secs() / 60,
        cold_extra * 1000.0,
        LAMBDA_GB_SECOND.listed
    );
    Section {
        number: 15,
        title: TITLE,
        rows,
        body,
        unmet_notes: vec![
            "An `AssumeRole` for a warm subscription means its session was not kept: see `AwsSender::session`.".into(),
        ],
    }
}
