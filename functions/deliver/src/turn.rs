//! One message's turn: its claim and subscription loaded (a batch's together), the plan's
//! step before the send, the rate count and the plan's word at the send, the signed send,
//! the plan after it, the record, and the plan's exit. Every decision is the plan's.

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use career_core::clock::Timestamp;
use career_core::delivery::attempt::{Outcome, SendFailure};
use career_core::delivery::aws_destination::DestinationFailure;
use career_core::delivery::groups::{self, Pace};
use career_core::delivery::log::AttemptRecord;
use career_core::delivery::plan::{
    self, After, AtSend, Before, Exit, Found, HeldBack, Lease, Recorded, Step, SubscriptionChange, SubscriptionState,
    SubscriptionTask,
};
use career_core::delivery::rate::{self, wait_after_failed_count, Admission, OverLimit};
use career_core::delivery::retry::jitter;
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::ids::{SubscriptionId, UserId};
use career_core::store::deliveries::RecordKey;
use career_core::store::StoreError;
use career_core::telemetry::{delivery_metrics, DeliveryResult};
use career_core::trace::{SpanId, TraceContext};
use career_core::webhooks::health::Observation;
use career_core::webhooks::rotation::SigningSecrets;
use career_core::webhooks::{DisabledReason, Health, Subscription, Target};
use tracing::Instrument;

use crate::exit::{self, Disposition};
use crate::report::{log_span, report, Observed};
use crate::{Deps, Received};

/// What a message's turn found: a turn of its own, or a place in its batch's hand-over to
/// the retry lane, with the claim it gives up.
pub(crate) enum Next {
    Own(Turn),
    HandOver(Option<Lease>),
}

/// A subscription as a turn read it, with what the plan reads of it.
pub(crate) struct Seen {
    state: SubscriptionState,
    pub subscription: Box<Subscription>,
}

impl AsRef<SubscriptionState> for Seen {
    fn as_ref(&self) -> &SubscriptionState {
        &self.state
    }
}

/// What a message's own turn found before acting.
pub(crate) enum Turn {
    /// Its claim or its subscription could not be read: it is tried again later.
    NotLoaded,
    /// The plan's step, with the turn's claim on the record (for a stale copy, the creation
    /// claim it holds unused, `plan::unused_claim`).
    Decided { step: Step<Seen>, lease: Option<Lease> },
}

/// Every message's claim on its record and its subscription, read together; each
/// subscription once. A first attempt that comes early holds the claim its record was
/// created with, and writes nothing to hold it. In the order of `received`.
pub(crate) async fn load(deps: &Deps, received: &[Received<'_>], now: Timestamp) -> Vec<Next> {
    let mut keys: Vec<(&UserId, &SubscriptionId)> =
        received.iter().map(|r| (&r.delivery.user_id, &r.delivery.subscription_id)).collect();
    keys.sort();
    keys.dedup();
    let reads = keys.iter().map(|(user_id, id)| deps.webhooks.get(user_id, id));
    let claims = received.iter().map(|r| async move {
        let delivery = &r.delivery;
        let claim = async {
            match plan::granted(delivery, r.lane, now) {
                // A read, not a write: whether a manual retry restarted the record since.
                Some(lease) => {
                    let record = deps.deliveries.state(&RecordKey::of(delivery)).await?;
                    Ok(plan::created_claim(lease, delivery.generation, record))
                }
                None => deps.deliveries.claim(delivery, Lease::from(now), now).await,
            }
        };
        claim.instrument(r.span.clone()).await
    });
    let (subscriptions, claims) =
        tokio::join!(futures_util::future::join_all(reads), futures_util::future::join_all(claims));
    let subscriptions: HashMap<_, _> = keys.into_iter().zip(subscriptions).collect();
    received
        .iter()
        .zip(claims)
        .map(|(r, claim)| {
            let delivery = &r.delivery;
            let _entered = r.span.enter();
            let subscription = match &subscriptions[&(&delivery.user_id, &delivery.subscription_id)] {
                Ok(subscription) => subscription.clone().map(Box::new),
                Err(err) => {
                    tracing::error!(error = %err, "loading the delivery's subscription failed");
                    return Next::Own(Turn::NotLoaded);
                }
            };
            let claim = match claim {
                Ok(claim) => claim,
                Err(err) => {
                    tracing::error!(error = %err, "claiming the delivery failed");
                    return Next::Own(Turn::NotLoaded);
                }
            };
            let kind = delivery.event.kind();
            let found = Found {
                lane: r.lane,
                generation: delivery.generation,
                kind,
                probe: delivery.event.is_probe(),
                claim,
                subscription: subscription.map(|s| Seen { state: SubscriptionState::of(&s, kind), subscription: s }),
            };
            // A stale copy may hold its record's creation claim unused: it gives it up.
            let lease = found.claim.lease().or_else(|| plan::unused_claim(delivery, &found.claim));
            match plan::before_send(found, now, &deps.policy) {
                Before::Step(step) => Next::Own(Turn::Decided { step, lease }),
                Before::HandOver => Next::HandOver(lease),
            }
        })
        .collect()
}

/// Takes one message's turn from what it found; what it sees of the receiver goes to `observed`.
pub(crate) async fn take(deps: &Deps, received: &Received<'_>, turn: Turn, observed: &Observed) -> Disposition {
    let span = received.span.clone();
    async move {
        let (step, lease) = match turn {
            // Tried again after the retry base (rather than the queue's visibility timeout,
            // for which a main-lane group would wait).
            Turn::NotLoaded => return retry_later(deps, received).await,
            Turn::Decided { step, lease } => (step, lease),
        };
        match step {
            Step::Send { attempt, subscription } => {
                attempt_delivery(deps, received, &subscription.subscription, attempt, lease, observed).await
            }
            Step::Stale => {
                tracing::info!("stale copy dropped unsent: the record belongs to another generation or is settled");
                if let Some(lease) = lease {
                    if let Err(err) = deps.outbox.hand_on(&received.delivery, lease, None).await {
                        tracing::warn!(error = %err, "giving up the unused claim failed; the new round waits for it");
                    }
                }
                exit::execute(deps, &received.exiting(), Exit::Delete).await
            }
            Step::NotSent(not_sent) => record_not_sent(deps, received, not_sent, Timestamp::now()).await,
            Step::NotYet(wait) => exit::execute(deps, &received.exiting(), plan::waiting(wait)).await,
        }
    }
    .instrument(span)
    .await
}

/// A turn that could not go on (storage or a key failed): tried again after the retry base.
async fn retry_later(deps: &Deps, received: &Received<'_>) -> Disposition {
    exit::execute(deps, &received.exiting(), plan::waiting(deps.policy.schedule.base)).await
}

/// How long a delivery about to be sent waits on its lane instead, when its subscription's
/// `maxDeliveriesPerSecond` has no place for it (section 18): none once admitted, after the
/// waits in its turn the plan allows ([`rate::over_limit`]). Unknown is over the limit: the
/// limit is never exceeded. A refusal goes to `observed`.
async fn over_rate(
    deps: &Deps,
    subscription: &Subscription,
    lease: Option<Lease>,
    observed: &Observed,
) -> Option<HeldBack> {
    let rate = subscription.max_deliveries_per_second?;
    let began = Instant::now();
    loop {
        let admission = deps.limiter.admit(&subscription.id, rate).await;
        if matches!(admission, Ok(Admission::Admitted)) {
            return None;
        }
        observed.saw(&subscription.id, Observation::RateLimited { at: Timestamp::now() });
        let wait = match admission {
            Ok(Admission::Wait(wait)) => wait,
            Ok(Admission::Admitted) => return None,
            Err(err) => {
                tracing::error!(error = %err, "counting the attempt against the subscription's rate limit failed");
                return Some(HeldBack::OverRate(wait_after_failed_count(jitter())));
            }
        };
        match rate::over_limit(wait, began.elapsed(), lease, Timestamp::now()) {
            OverLimit::InTurn(wait) => tokio::time::sleep(wait).await,
            OverLimit::OnLane(held_back) => return Some(held_back),
        }
    }
}

/// A failing subscription's one open send ([`plan::one_send_open`]), held for this turn's
/// send: `Ok` with it (none when the subscription needs none), or `Err` with how long to wait
/// behind the one already open. Unknown is open: a failing receiver never gets two at once.
async fn open_send(deps: &Deps, subscription: &Subscription, lease: Option<Lease>) -> Result<Option<Lease>, HeldBack> {
    let now = Timestamp::now();
    let Some(open) = plan::one_send_open(subscription.health.failing_since(), lease, now) else {
        return Ok(None);
    };
    match deps.limiter.open_send(&subscription.id, open.until, now).await {
        Ok(true) => Ok(Some(open)),
        Ok(false) => Err(plan::behind_open_send(jitter())),
        Err(err) => {
            tracing::error!(error = %err, "opening the failing subscription's one send failed");
            Err(plan::behind_open_send(jitter()))
        }
    }
}

/// Closes the send [`open_send`] held, so the subscription's next may start at once.
async fn close_send(deps: &Deps, subscription: &Subscription, open: Option<Lease>) {
    let Some(open) = open else { return };
    if let Err(err) = deps.limiter.close_send(&subscription.id, open.until).await {
        tracing::warn!(error = %err, "closing the failing subscription's send failed; its next waits for it to lapse");
    }
}

/// Opens the secrets, counts the attempt, signs and sends, then records and executes the plan
/// for the answer. `lease` is the turn's claim on the record (none for a record not written
/// yet); the attempt, or the rate limit's refusal, goes to `observed`.
async fn attempt_delivery(
    deps: &Deps,
    received: &Received<'_>,
    subscription: &Subscription,
    attempt: u32,
    lease: Option<Lease>,
    observed: &Observed,
) -> Disposition {
    let secrets = match deps.sealer.open(subscription).await {
        Ok(secrets) => secrets,
        Err(err) => {
            tracing::error!(error = %err, "opening the subscription's secrets failed");
            return retry_later(deps, received).await;
        }
    };
    // An identity token asked for (contract section 21), minted or kept; a failed call fails
    // the attempt. Before the rate count: an admitted attempt starts at its count's stamp.
    let authorization = deps.identity_tokens.authorization(subscription).await;
    // A failing subscription sends one at a time (contract section 22). One that may send is
    // counted last before it: the count returns at the attempt's start.
    let (open, held_back) = match open_send(deps, subscription, lease).await {
        Ok(open) => (open, over_rate(deps, subscription, lease, observed).await),
        Err(behind) => (None, Some(behind)),
    };
    if let AtSend::Wait { exit, release } =
        plan::at_send(lease, received.delivery.claimed_until, held_back, Timestamp::now())
    {
        close_send(deps, subscription, open).await;
        tracing::info!(
            exit = ?exit,
            "not sent now (over the rate limit, behind its failing subscription's open send, or the claim ran short)"
        );
        if let Some(lease) = release {
            if let Err(err) = deps.deliveries.release(&received.delivery, lease).await {
                tracing::warn!(error = %err, "giving up the claim failed; the delivery waits for it");
            }
        }
        return exit::execute(deps, &received.exiting(), exit).await;
    }
    // Each attempt is a span of the delivery's trace (contract section 19); a message queued
    // before trace context has none, so its attempt starts one.
    let trace = received.delivery.trace.clone().unwrap_or_else(TraceContext::start);
    let span_id = SpanId::generate();
    let trace_headers = if subscription.trace_context { trace.headers(span_id) } else { Vec::new() };
    let (started, started_at) = (Instant::now(), SystemTime::now());
    let sending = send(deps, &received.delivery, &subscription.target, &secrets, trace_headers, authorization);
    let (outcome, body, marked_slow) = slow_marked(deps, subscription, sending).await;
    let took = started.elapsed();
    let latency_ms = took.as_secs_f64() * 1000.0;
    let now = Timestamp::now();
    let succeeded = matches!(outcome, Outcome::Delivered(_));
    observed.saw(&subscription.id, Observation::Attempt { succeeded, latency_ms, at: now });
    let failing_since = subscription.health.failing_since();
    let kind = received.delivery.event.kind();
    let after = match received.delivery.event.is_probe() {
        true => plan::after_probe(&outcome, now),
        false => plan::after_send(attempt, kind, &outcome, failing_since, now, &deps.policy, jitter()),
    };
    let fast = subscription.fast_since.is_some() && !marked_slow;
    let pace = groups::pace_after(&outcome, took, fast, subscription.slow_at, now);
    let (recorded, (), ()) = tokio::join!(
        record(deps, &received.delivery, subscription, &body, &after, lease),
        set_pace(deps, subscription, pace, now),
        close_send(deps, subscription, open),
    );
    report(deps, received, subscription, &outcome, &after, attempt, (started_at, latency_ms));
    let span = (&trace.parent, span_id, started_at);
    log_span(&received.delivery, subscription, &outcome, &after, attempt, span, latency_ms);
    match recorded {
        Ok(recorded) => {
            if recorded == Recorded::Not {
                tracing::info!(
                    "the record moved on during the send (another generation, or the claim lapsed); this copy is dropped"
                );
            }
            exit::execute(deps, &received.exiting(), plan::exit_recorded(recorded, after.message)).await
        }
        // Sent, but not recorded: tried again after the schedule's base, as the same attempt.
        Err(err) => {
            tracing::error!(error = %err, "recording the attempt failed");
            retry_later(deps, received).await
        }
    }
}

/// Awaits `sending`; should it still be open at its subscription's slow mark
/// ([`groups::slow_mark`]), the receiver is recorded as slow there and then, so the
/// subscription's other deliveries stop spreading before this send ends (contract section
/// 18). Whether it was so marked comes third.
async fn slow_marked(
    deps: &Deps,
    subscription: &Subscription,
    sending: impl std::future::Future<Output = (Outcome, Vec<u8>)>,
) -> (Outcome, Vec<u8>, bool) {
    let Some(mark) = groups::slow_mark(subscription.fast_since.is_some()) else {
        let (outcome, body) = sending.await;
        return (outcome, body, false);
    };
    tokio::pin!(sending);
    tokio::select! {
        (outcome, body) = &mut sending => (outcome, body, false),
        () = tokio::time::sleep(mark) => {
            let (_, (outcome, body)) = tokio::join!(set_pace(deps, subscription, Pace::Slow, Timestamp::now()), sending);
            (outcome, body, true)
        }
    }
}

/// Signs the delivery for this attempt and POSTs it to its URL (on the blocking pool: ureq
/// blocks) or sends it into its AWS destination, with the trace headers and the identity
/// token's `Authorization` beside the signed ones (a token that could not be had is the
/// attempt's failure). Returns the outcome and the exact bytes sent.
async fn send(
    deps: &Deps,
    delivery: &DeliveryMessage,
    target: &Target,
    secrets: &SigningSecrets,
    trace_headers: Vec<(&'static str, String)>,
    authorization: Result<Option<(&'static str, String)>, DestinationFailure>,
) -> (Outcome, Vec<u8>) {
    let now = Timestamp::now();
    let mut signed = SignedDelivery::new(delivery, &secrets.active_at(now), now);
    signed.headers.extend(trace_headers);
    match authorization {
        Ok(header) => signed.headers.extend(header),
        Err(failure) => return (Outcome::NotTaken(failure), signed.body),
    }
    let url = match target {
        Target::Url(url) => url.clone(),
        Target::Aws(aws) => return (deps.aws.send(delivery, aws, &signed).await, signed.body),
    };
    let sender = deps.sender.clone();
    tokio::task::spawn_blocking(move || (sender.send(&url, &signed), signed.body)).await.unwrap_or_else(|err| {
        tracing::error!(error = %err, "the sending task failed");
        (Outcome::NoAnswer(SendFailure::TaskFailed), delivery.body())
    })
}

/// The attempt's write (its record and the bytes sent), under the turn's claim, and the
/// subscription's when the plan changes it (independent, so together). Not recorded under
/// a claim the turn still holds: a new round started during the send, which it hands on.
async fn record(
    deps: &Deps,
    delivery: &DeliveryMessage,
    subscription: &Subscription,
    body: &[u8],
    after: &After,
    lease: Option<Lease>,
) -> Result<Recorded, StoreError> {
    let attempt = &after.record;
    let (recorded, changed) = tokio::join!(
        deps.deliveries.record_attempt(delivery, body, attempt, lease),
        change_subscription(deps, subscription, after.subscription, attempt),
    );
    if let Err(err) = changed {
        tracing::error!(error = %err, "updating the subscription's failure clock failed");
    }
    if recorded? {
        return Ok(Recorded::AsPlanned);
    }
    match lease {
        Some(lease) if deps.outbox.hand_on(delivery, lease, Some(attempt)).await? => Ok(Recorded::HandedOn),
        _ => Ok(Recorded::Not),
    }
}

/// Records what the answer showed of the receiver's pace, only when it changes (section 18).
async fn set_pace(deps: &Deps, subscription: &Subscription, pace: Pace, now: Timestamp) {
    if pace == Pace::Unchanged {
        return;
    }
    match deps.webhooks.set_pace(&subscription.user_id, &subscription.id, pace, now).await {
        Ok(()) => tracing::info!(pace = ?pace, "the receiver's pace changed its subscription's message groups"),
        Err(err) => tracing::error!(error = %err, "recording the receiver's pace failed"),
    }
}

/// Writes the subscription only when the plan changes it.
async fn change_subscription(
    deps: &Deps,
    subscription: &Subscription,
    change: SubscriptionChange,
    attempt: &AttemptRecord,
) -> Result<(), StoreError> {
    let (user_id, id, now) = (&subscription.user_id, &subscription.id, attempt.at);
    match change {
        SubscriptionChange::Unchanged => Ok(()),
        SubscriptionChange::StartFailing => deps.webhooks.start_failure_clock(user_id, id, attempt).await,
        SubscriptionChange::Recovered => deps.webhooks.reset_failure_clock(user_id, id, now).await,
        SubscriptionChange::Disable(reason) => {
            // Failing disables only while the clock still shows the failure it measured; it
            // is probed from then on (contract section 20), `gone` never is.
            let since = subscription.health.failing_since().filter(|_| reason == DisabledReason::Failing);
            let next_probe = deps.policy.probes.next(now, 0).filter(|_| reason == DisabledReason::Failing);
            if deps.webhooks.disable(user_id, id, (reason, since), next_probe, now).await? {
                tracing::warn!(reason = ?reason, "subscription disabled");
                if let Some(next) = next_probe {
                    deps.deliveries.mark_task((user_id, id), SubscriptionTask::Probe, next).await?;
                }
            }
            Ok(())
        }
        SubscriptionChange::Reenable => reenable(deps, subscription, now).await,
        SubscriptionChange::ProbeFailed => {
            let Health::Disabled { at: disabled_at, .. } = subscription.health else { return Ok(()) };
            let made = subscription.probes + 1;
            let next = deps.policy.probes.next(disabled_at, made);
            if deps.webhooks.probe_failed(user_id, id, (disabled_at, made), next).await? {
                tracing::info!(probes = made, next_probe_at = ?next, "probe failed; the subscription stays disabled");
                if let Some(next) = next {
                    deps.deliveries.mark_task((user_id, id), SubscriptionTask::Probe, next).await?;
                }
            }
            Ok(())
        }
    }
}

/// A probe's success (contract section 20): the subscription enabled again as `POST …/enable`
/// does, with its recovery recorded (the `recovered` event says `reenabled`), while it is still
/// disabled for failing; then what it held released, as every enable does.
async fn reenable(deps: &Deps, subscription: &Subscription, now: Timestamp) -> Result<(), StoreError> {
    let Health::Disabled { at: disabled_at, .. } = subscription.health else { return Ok(()) };
    let (user_id, id) = (&subscription.user_id, &subscription.id);
    let Some(enabled) = deps.webhooks.reenable(user_id, id, disabled_at, now).await? else { return Ok(()) };
    let spread = groups::Groups::spread_of(&enabled, deps.groups);
    match deps.outbox.release(&enabled, spread, deps.release_per_call, now).await {
        Ok(released) => tracing::info!(released, "a probe succeeded; the subscription is enabled again"),
        // What it could not release, the sweep does from the marker the release left.
        Err(err) => tracing::error!(error = %err, "releasing the held deliveries failed"),
    }
    Ok(())
}

/// A disabled or deleted subscription, or one that no longer lists the kind, is sent
/// nothing: the record says `skipped`, or `failed` if earlier attempts were sent, and why.
/// Either way the message leaves its lane (a delivery stopped so is not dead-lettered: no
/// attempt ran out).
async fn record_not_sent(deps: &Deps, received: &Received<'_>, not_sent: plan::NotSent, now: Timestamp) -> Disposition {
    let delivery = &received.delivery;
    match deps.deliveries.record_not_sent(delivery, &delivery.body(), now, not_sent).await {
        Ok(_) => {
            let kind = delivery.event.kind().as_str();
            let metrics = delivery_metrics(&deps.metrics_namespace, kind, DeliveryResult::Skipped, 0.0);
            let status = not_sent.status().as_str();
            tracing::info!(emf = %metrics, reason = %not_sent, status, "delivery not sent");
            exit::execute(deps, &received.exiting(), Exit::Delete).await
        }
        Err(err) => {
            // Nothing was sent; the message comes back to be recorded.
            tracing::error!(error = %err, "recording a delivery not sent failed");
            retry_later(deps, received).await
        }
    }
}
