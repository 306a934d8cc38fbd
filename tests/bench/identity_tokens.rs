//! Benchmark 16, Identity tokens on HTTP deliveries (contract section 21, issue 52): what a
//! token costs a warm attempt. The token step as the delivery function runs it
//! (`IdentityTokens::authorization` with the function's own role, through the local stack's IAM
//! enforcement and its `GetWebIdentityToken`), then the HTTP send with the token's header to a
//! loopback receiver, against the same send without one, alternating in the same run; and how
//! many tokens the warm attempts had minted, counted by the stack's issuer.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use career_core::aws::identity_tokens::IdentityTokens;
use career_core::aws::sender::Sender;
use career_core::clock::Timestamp;
use career_core::delivery::attempt::Outcome;
use career_core::delivery::aws_destination::RENEW_BEFORE;
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::events::{Event, EventKind};
use career_core::ids::SubscriptionId;
use career_core::webhooks::identity_token::{IdentityToken, TOKEN_SECONDS};
use career_core::webhooks::rotation::ActiveSecrets;
use career_core::webhooks::{SealedSecrets, Subscription, Target, WebhookSecret};
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{typed, unique_user};
use local_aws::identity_token::tokens_tagged;
use local_aws::template::function;

use crate::cost::{duration_usd_per_million, memory_sizes, usd, LAMBDA_GB_SECOND};
use crate::report::{Row, Section};
use crate::stats::{ms, renewals, summarize, Renewals, Summary};
use crate::{progress, Bench};

pub const TITLE: &str = "Identity tokens on HTTP deliveries";

/// The target: at most one token call per subscription per this long, warm.
const TARGET_WINDOW: Duration = Duration::from_secs(4 * 60);
/// Subscriptions whose first token (a `GetWebIdentityToken`) is timed.
const FIRST_TOKENS: usize = 20;

struct Timed {
    first: Summary,
    with_token: Summary,
    without: Summary,
    /// Tokens minted for the warm attempts' subscription after its first.
    warm_mints: usize,
    warm_sends: usize,
    warm_took: Duration,
}

pub async fn run(bench: Arc<Bench>) -> Result<Section, String> {
    let memory_mb = *memory_sizes()?.get(function::DELIVER).ok_or("no MemorySize for the delivery function")?;
    let pipeline = Pipeline::start(false).await;
    let settings = pipeline.settings();
    let clients = career_service::acting_as(function::DELIVER, settings, &career_service::clients());
    let tokens = IdentityTokens::new(&clients);
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    let audience = IdentityToken::parse(&serde_json::json!({"audience": "api://bench"}))
        .map_err(|e| e.to_string())?
        .ok_or("an audience")?;
    // What the token step reads of a subscription: its id, its user and its audience.
    let subscription = |id: SubscriptionId| Subscription {
        identity_token: Some(audience.clone()),
        ..Subscription::new(
            typed(&user),
            id,
            Target::Url(receiver.url.clone()),
            vec![EventKind::ProfileUpdated],
            SealedSecrets(String::new()),
            None,
        )
    };
    let secret = WebhookSecret::generate();
    let signed = |message: &DeliveryMessage| {
        SignedDelivery::new(message, &ActiveSecrets { secrets: vec![&secret], keys: vec![] }, Timestamp::now())
    };

    progress(format!("   {FIRST_TOKENS} subscriptions' first tokens (GetWebIdentityToken)"));
    let subscriptions: Vec<Subscription> =
        (0..FIRST_TOKENS).map(|_| subscription(SubscriptionId::generate())).collect();
    let mut first = Vec::new();
    for subscription in &subscriptions {
        let started = Instant::now();
        tokens.authorization(subscription).await.map_err(|failure| failure.to_string())?.ok_or("no token")?;
        first.push(started.elapsed());
    }

    let sends = (bench.requests / 5).max(50);
    progress(format!(
        "   {sends} warm attempts with the token, alternating with {sends} without, to a loopback receiver"
    ));
    // The first subscription again: its token was minted above.
    let warm = &subscriptions[0];
    let message = DeliveryMessage::new(&Event::ping(&warm.id), &typed(&user), &warm.id);
    let http_sender = Sender::new(settings.webhook_urls.guard.clone());
    let send = |signed: SignedDelivery| {
        let (sender, url) = (http_sender.clone(), receiver.url.clone());
        async move {
            match tokio::task::spawn_blocking(move || sender.send(&url, &signed)).await.map_err(|e| e.to_string())? {
                Outcome::Delivered(_) => Ok(()),
                other => Err(format!("not delivered: {other:?}")),
            }
        }
    };
    let minted_before = tokens_tagged(warm.id.as_str());
    let (mut with_token, mut without) = (Vec::new(), Vec::new());
    let warm_started = Instant::now();
    for _ in 0..sends {
        let started = Instant::now();
        let mut carrying = signed(&message);
        let header = tokens.authorization(warm).await.map_err(|failure| failure.to_string())?;
        carrying.headers.extend(header);
        send(carrying).await?;
        with_token.push(started.elapsed());

        let started = Instant::now();
        send(signed(&message)).await?;
        without.push(started.elapsed());
    }
    let warm_took = warm_started.elapsed();
    let warm_mints = tokens_tagged(warm.id.as_str()) - minted_before;
    let carried = receiver.received().iter().filter(|r| r.header("authorization").starts_with("Bearer ")).count();
    if carried != sends {
        return Err(format!("{carried} of {sends} attempts with a token carried it"));
    }

    let timed = Timed {
        first: summarize(&first),
        with_token: summarize(&with_token),
        without: summarize(&without),
        warm_mints,
        warm_sends: sends,
        warm_took,
    };
    Ok(render(&timed, memory_mb))
}

fn render(timed: &Timed, memory_mb: f64) -> Section {
    let token = Duration::from_secs(TOKEN_SECONDS as u64);
    let Renewals { per_window, renews_every, met } = renewals(timed.warm_mints, token, RENEW_BEFORE, TARGET_WINDOW);
    let extra = timed.with_token.median.as_secs_f64() - timed.without.median.as_secs_f64();
    let first_extra = timed.first.median.as_secs_f64();
    let rows = vec![
        Row::new(
            "Per HTTP delivery with a token, warm: token calls per subscription per 4 minutes",
            "≤ 1",
            format!(
                "{per_window} ({} warm attempts over {:.1} s minted {}; a {} min token is renewed {} s before it \
                 expires: one per {} min)",
                timed.warm_sends,
                timed.warm_took.as_secs_f64(),
                timed.warm_mints,
                TOKEN_SECONDS / 60,
                RENEW_BEFORE.as_secs(),
                renews_every.as_secs() / 60
            ),
            Some(met),
        ),
        Row::new(
            "Per HTTP delivery with a token, warm: added latency (median) and cost per million",
            "reported",
            format!(
                "{extra_ms:+.3} ms (median {} with vs {} without, to loopback); {} per million in the delivery \
                 function's duration ({memory_mb:.0} MB)",
                ms(timed.with_token.median),
                ms(timed.without.median),
                usd(duration_usd_per_million(extra.max(0.0), memory_mb)),
                extra_ms = extra * 1000.0
            ),
            None,
        ),
    ];
    let mut body = String::new();
    let _ = writeln!(
        body,
        "Issue 52: an HTTP delivery that carries an identity token (contract section 21), as the delivery function \
         makes its attempt: the token step (`IdentityTokens::authorization`, with the function's own role through \
         the local stack's IAM enforcement and its `GetWebIdentityToken`) and the send with its `Authorization` \
         header, against the same send without one, alternating, to a loopback receiver in this process. Each \
         attempt signs the delivery, as the function does.\n"
    );
    let _ = writeln!(body, "| Step | median | p90 | p99 | samples |\n|---|---|---|---|---|");
    for (what, summary, n) in [
        ("A subscription's first token (`GetWebIdentityToken`)", &timed.first, FIRST_TOKENS),
        ("Warm attempt with the token (kept), sent", &timed.with_token, timed.warm_sends),
        ("Warm attempt without a token, sent", &timed.without, timed.warm_sends),
    ] {
        let _ = writeln!(body, "| {what} | {} | {} | {} | {n} |", ms(summary.median), ms(summary.p90), ms(summary.p99));
    }
    let _ = writeln!(
        body,
        "\nThe stack's issuer counted {} tokens minted for the {} warm attempts of one subscription after its first: \
         a token ({} s) is kept per subscription and audience until {} s before it expires, so a warm subscription \
         costs one token call per {} minutes. A subscription's first attempt adds the first token's {:.2} ms \
         (median) here, the stack's in-process issuer behind the local IAM enforcement; on AWS it is a call to STS \
         in the deployment's region. A warm attempt's extra is the token's lookup and its header's bytes; its cost \
         is the delivery function's billed duration at its `MemorySize` ({memory_mb:.0} MB, {}).",
        timed.warm_mints,
        timed.warm_sends,
        TOKEN_SECONDS,
        RENEW_BEFORE.as_secs(),
        renews_every.as_secs() / 60,
        first_extra * 1000.0,
        LAMBDA_GB_SECOND.listed
    );
    Section {
        number: 16,
        title: TITLE,
        rows,
        body,
        unmet_notes: vec!["A token minted for a warm subscription means it was not kept: see `IdentityTokens`.".into()],
    }
}
