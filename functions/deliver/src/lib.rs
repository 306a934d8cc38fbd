//! The delivery function: for each batch, claim and load every message (each subscription
//! read once) → plan → for each message, sign and send → plan → execute. The decisions are
//! career_core::delivery::plan's; this file only does the I/O they name. It consumes both
//! lanes (career_core::aws::queue), each through its own event source mapping; the
//! messages of a batch are sent concurrently, and each leaves its lane as soon as its own
//! attempt is recorded (contract section 12), so none waits for another's send. A failing
//! subscription's deliveries leave the main lane together, unsent, in one move; so do those
//! whose subscription now spreads over other message groups than theirs (section 18).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use career_core::aws::aws_sender::AwsSender;
use career_core::aws::queue::{self, DeliveryQueues, Lane, QueueError};
use career_core::aws::sender::Sender;
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table};
use career_core::delivery::attempt::{Outcome, SendFailure};
use career_core::delivery::groups::{self, Groups, Pace};
use career_core::delivery::log::AttemptRecord;
use career_core::delivery::plan::{
    self, After, Before, Found, Lease, MessageFate, Policy, Step, SubscriptionChange, SubscriptionState,
};
use career_core::delivery::rate::{wait_after_failed_count, Admission, DeliveryLimiter};
use career_core::delivery::retry::{jitter, RetrySchedule};
use career_core::delivery::{DeliveryMessage, SignedDelivery};
use career_core::ids::{SubscriptionId, UserId};
use career_core::store::deliveries::{DeliveryTable, RecordKey};
use career_core::store::rate_limits::RateLimitTable;
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::WebhookTable;
use career_core::store::StoreError;
use career_core::telemetry::{self, delivery_metrics, DeliveryResult};
use career_core::trace::{SpanId, TraceContext, TraceParent};
use career_core::webhooks::rotation::SigningSecrets;
use career_core::webhooks::{DisabledReason, Subscription, Target};
use tracing::Instrument;

pub struct Deps {
    webhooks: WebhookTable,
    deliveries: DeliveryTable,
    sealer: Sealer,
    queues: DeliveryQueues,
    sender: Sender,
    /// Destinations in receivers' own AWS accounts (contract section 17).
    aws: AwsSender,
    policy: Policy,
    metrics_namespace: String,
    /// The most groups of the main lane a subscription spreads over.
    groups: Groups,
    /// Subscriptions' `maxDeliveriesPerSecond` (contract section 18).
    limiter: DeliveryLimiter,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        let [webhooks, deliveries, rate_limits] =
            settings.tables.require([Table::Webhooks, Table::Deliveries, Table::RateLimits])?;
        Ok(Self {
            webhooks: WebhookTable::new(clients.dynamodb().clone(), webhooks),
            deliveries: DeliveryTable::new(clients.dynamodb().clone(), deliveries),
            sealer: Sealer::new(clients, settings)?,
            queues: DeliveryQueues::with_dead_letter(clients, settings)?,
            sender: Sender::new(settings.webhook_urls.guard.clone()),
            aws: AwsSender::new(clients),
            policy: Policy {
                schedule: RetrySchedule { base: settings.retry_base, max_attempts: settings.max_delivery_attempts },
                disable_after: settings.webhook_disable_after,
            },
            metrics_namespace: settings.metrics_namespace.clone(),
            groups: settings.delivery_groups,
            limiter: DeliveryLimiter::new(
                RateLimitTable::new(clients.dynamodb().clone(), rate_limits),
                settings.partition_quota,
            ),
        })
    }
}

/// Every message is settled by its own turn; those that stay on their lane (a retry later,
/// or storage that failed) are reported, so the event source mapping leaves them there.
///
/// The batch's claims and subscriptions are read together (each subscription once, however
/// many of its deliveries the batch holds: a main-lane batch is mostly one subscription's),
/// and the deliveries of a failing subscription leave the main lane together (one
/// `SendMessageBatch` to the retry lane, one `DeleteMessageBatch`). Every other turn goes
/// on by itself from there, so none waits for another's send.
pub async fn handle(deps: &Deps, event: SqsEvent) -> SqsBatchResponse {
    let (mut received, mut unreadable, mut positions) = (Vec::new(), Vec::new(), Vec::new());
    for (position, message) in event.records.iter().enumerate() {
        match Received::of(message) {
            Ok(message) => {
                received.push(message);
                positions.push(position);
            }
            Err(message) => unreadable.push(message),
        }
    }
    let early = deletes_early(received.iter().map(|r| &r.delivery.subscription_id));
    let receipts = received.iter_mut().map(|r| &mut r.receipt).chain(unreadable.iter_mut().map(|u| &mut u.receipt));
    for receipt in receipts {
        receipt.early = early;
    }
    let loaded = load(deps, &received, Timestamp::now()).await;
    let received = &received;
    let mut handed_over = Vec::new();
    let mut regrouped = Vec::new();
    let mut own_turns = Vec::new();
    for (index, next) in loaded.into_iter().enumerate() {
        match next {
            Next::HandOver(lease) => handed_over.push((index, (&received[index], lease))),
            Next::Own(turn) => match moves_to(deps, &received[index], &turn) {
                Some((group, lease)) => regrouped.push((index, (&received[index], group, lease))),
                None => own_turns.push(async move { (index, take_turn(deps, &received[index], turn).await) }),
            },
        }
    }
    let (indices, handed_over): (Vec<usize>, Vec<_>) = handed_over.into_iter().unzip();
    let (regrouped_indices, regrouped): (Vec<usize>, Vec<_>) = regrouped.into_iter().unzip();
    let dropped = unreadable.iter().map(|message| acknowledge(deps, message.lane, message.receipt));
    let (own, handed, moved, _) = tokio::join!(
        futures_util::future::join_all(own_turns),
        hand_over_together(deps, handed_over),
        regroup_together(deps, regrouped),
        futures_util::future::join_all(dropped)
    );
    // An unreadable message is dropped: it leaves its lane.
    let mut dispositions = vec![Disposition::Acknowledged; event.records.len()];
    let moves = indices.into_iter().zip(handed).chain(regrouped_indices.into_iter().zip(moved));
    for (index, disposition) in own.into_iter().chain(moves) {
        dispositions[positions[index]] = disposition;
    }
    let mut response = SqsBatchResponse::default();
    let stays = event.records.iter().zip(dispositions).filter(|(_, disposition)| *disposition == Disposition::Stays);
    for (message, _) in stays {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = message.message_id.clone().unwrap_or_default();
        response.batch_item_failures.push(failure);
    }
    response
}

/// What becomes of a received message once its turn is over, as the batch answer tells the
/// event source mapping: each one that stays is one of the answer's item failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disposition {
    /// It leaves its lane: deleted at once, or with its batch.
    Acknowledged,
    /// It stays on its lane, visible again when the wait its turn set is over.
    Stays,
}

/// Whether a batch's messages are deleted one by one as each is settled, rather than by the
/// event source mapping as the invocation returns: only when the batch holds deliveries of
/// more than one subscription, so none waits for another subscription's send (contract
/// section 12). A batch of one subscription's deliveries holds only its own message groups,
/// and SQS fills a batch from one group as far as it can (a group stays held while any of its
/// messages is in flight), so an early delete would at most free another of its groups a
/// little sooner, for a second, billed request per message; a message alone in its batch
/// frees nothing by it.
fn deletes_early<'a>(mut subscriptions: impl Iterator<Item = &'a SubscriptionId>) -> bool {
    let Some(first) = subscriptions.next() else { return false };
    subscriptions.any(|other| other != first)
}

/// One received message whose body is a delivery: its lane, its receipt and the delivery,
/// with the span every line of its turn carries.
struct Received<'a> {
    lane: Lane,
    /// Its group among its subscription's, on the main lane.
    group: Option<u8>,
    receipt: Receipt<'a>,
    delivery: DeliveryMessage,
    span: tracing::Span,
}

/// A received message whose body cannot be read as a delivery: it is dropped.
struct Unreadable<'a> {
    lane: Lane,
    receipt: Receipt<'a>,
}

impl<'a> Received<'a> {
    /// The message as received; whether its turn deletes it early is the batch's to say.
    fn of(message: &'a SqsMessage) -> Result<Self, Unreadable<'a>> {
        let lane = Lane::of(message);
        let receipt = Receipt { handle: message.receipt_handle.as_deref().unwrap_or_default(), early: false };
        let body = message.body.as_deref().map(serde_json::from_str::<DeliveryMessage>);
        let Some(Ok(delivery)) = body else {
            tracing::warn!(message_id = ?message.message_id, "dropping a delivery message that cannot be read");
            return Err(Unreadable { lane, receipt });
        };
        // Every line of this delivery's turn carries these fields once, from its span.
        let span = tracing::info_span!(
            "delivery",
            delivery_id = %delivery.delivery_id,
            subscription_id = %delivery.subscription_id,
            lane = lane.as_str(),
            generation = delivery.generation,
        );
        Ok(Received { lane, group: queue::group_of(message), receipt, delivery, span })
    }
}

/// Where a message is on its lane, and whether its turn deletes it as soon as it is settled
/// (when its batch holds others) or leaves that to the event source mapping.
#[derive(Clone, Copy)]
struct Receipt<'a> {
    handle: &'a str,
    early: bool,
}

/// What a message's turn found: a turn of its own, or a place in its batch's hand-over to
/// the retry lane, with the claim it gives up.
enum Next {
    Own(Turn),
    HandOver(Option<Lease>),
}

/// A subscription as a turn read it, with what the plan reads of it.
struct Seen {
    state: SubscriptionState,
    subscription: Box<Subscription>,
}

impl AsRef<SubscriptionState> for Seen {
    fn as_ref(&self) -> &SubscriptionState {
        &self.state
    }
}

/// What a message's own turn found before acting.
enum Turn {
    /// Its claim or its subscription could not be read: it is tried again later.
    NotLoaded,
    /// The plan's step, with the turn's claim on the record (for a stale copy, the creation
    /// claim it holds unused, `plan::unused_claim`).
    Decided { step: Step<Seen>, lease: Option<Lease> },
}

/// Every message's claim on its record and its subscription, read together; each
/// subscription once. A first attempt that comes early holds the claim its record was
/// created with, and writes nothing to hold it.
async fn load(deps: &Deps, received: &[Received<'_>], now: Timestamp) -> Vec<Next> {
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

/// Takes one message's turn from what it found.
async fn take_turn(deps: &Deps, received: &Received<'_>, turn: Turn) -> Disposition {
    let span = received.span.clone();
    async move {
        let (step, lease) = match turn {
            // Tried again after the retry base (rather than the queue's visibility timeout,
            // for which a main-lane group would wait).
            Turn::NotLoaded => return stay(deps, received, deps.policy.schedule.base).await,
            Turn::Decided { step, lease } => (step, lease),
        };
        match step {
            Step::Send { attempt, subscription } => {
                attempt_delivery(deps, received, &subscription.subscription, attempt, lease).await
            }
            Step::Stale => {
                tracing::info!("stale copy dropped unsent: the record belongs to another generation or is settled");
                if let Some(lease) = lease {
                    if let Err(err) = hand_on(deps, &received.delivery, lease, None).await {
                        tracing::warn!(error = %err, "giving up the unused claim failed; the new round waits for it");
                    }
                }
                acknowledge(deps, received.lane, received.receipt).await
            }
            Step::NotSent(not_sent) => record_not_sent(deps, received, not_sent, Timestamp::now()).await,
            Step::NotYet(wait) => stay(deps, received, wait).await,
        }
    }
    .instrument(span)
    .await
}

/// How long a delivery about to be sent waits instead, when its subscription's
/// `maxDeliveriesPerSecond` has no place for it now (section 18). Unknown is over the limit:
/// the limit is never exceeded.
async fn over_rate(deps: &Deps, subscription: &Subscription) -> Option<Duration> {
    let rate = subscription.max_deliveries_per_second?;
    match deps.limiter.admit(&subscription.id, rate).await {
        Ok(Admission::Admitted) => None,
        Ok(Admission::Wait(wait)) => Some(wait),
        Err(err) => {
            tracing::error!(error = %err, "counting the attempt against the subscription's rate limit failed");
            Some(wait_after_failed_count(jitter()))
        }
    }
}

/// Sends a delivery over its subscription's limit back to its lane to wait, its attempt not
/// spent: the claim its turn wrote is given up (one it holds from its record's creation, it
/// keeps: the message carries it back), so its next turn can claim at once.
async fn wait_for_rate(deps: &Deps, received: &Received<'_>, lease: Option<Lease>, wait: Duration) -> Disposition {
    tracing::info!(wait_seconds = wait.as_secs_f64(), "over the subscription's rate limit; the delivery waits");
    let delivery = &received.delivery;
    if let Some(lease) = lease.filter(|lease| Some(lease.until) != delivery.claimed_until) {
        if let Err(err) = deps.deliveries.release(delivery, lease).await {
            tracing::warn!(error = %err, "giving up the claim failed; the delivery waits for it");
        }
    }
    stay(deps, received, wait).await
}

/// The group a main-lane message about to be sent moves to instead, with its turn's claim:
/// when its subscription's groups now give it another one ([`groups::regroup`]).
fn moves_to(deps: &Deps, received: &Received<'_>, turn: &Turn) -> Option<(u8, Option<Lease>)> {
    let Turn::Decided { step: Step::Send { subscription: Seen { subscription, .. }, .. }, lease } = turn else {
        return None;
    };
    let spread =
        Groups::of(&subscription.health, subscription.fast_since, subscription.max_deliveries_per_second, deps.groups);
    let group = groups::regroup(received.group?, &received.delivery.delivery_id, spread)?;
    Some((group, *lease))
}

/// The batch's main-lane deliveries whose subscription now spreads over other groups, each
/// moved to its own group unsent: one `SendMessageBatch`, the copies carrying the claims
/// their turns hold (the main lane hands each to one consumer at a time, and the original is
/// not sent), then one `DeleteMessageBatch`. In the same order: what became of each.
async fn regroup_together(deps: &Deps, regrouped: Vec<(&Received<'_>, u8, Option<Lease>)>) -> Vec<Disposition> {
    if regrouped.is_empty() {
        return Vec::new();
    }
    let copies: Vec<DeliveryMessage> = regrouped
        .iter()
        .map(|(received, _, lease)| DeliveryMessage {
            claimed_until: lease.map(|lease| lease.until),
            ..received.delivery.clone()
        })
        .collect();
    let messages: Vec<(&DeliveryMessage, u8)> =
        copies.iter().zip(&regrouped).map(|(copy, (_, group, _))| (copy, *group)).collect();
    for (received, group, _) in &regrouped {
        received
            .span
            .in_scope(|| tracing::info!(group, "moving the delivery to its subscription's message group, unsent"));
    }
    let sent = deps.queues.regroup(&messages).await;
    let received: Vec<&Received<'_>> = regrouped.iter().map(|(received, _, _)| *received).collect();
    leave_main_lane(deps, &received, sent, "moving the delivery to its message group failed").await
}

/// The batch's deliveries to failing subscriptions, each with its turn's claim, moved to
/// the retry lane together: their claims given up, then one `SendMessageBatch` and one
/// `DeleteMessageBatch`. In the same order: what became of each.
async fn hand_over_together(deps: &Deps, handed_over: Vec<(&Received<'_>, Option<Lease>)>) -> Vec<Disposition> {
    if handed_over.is_empty() {
        return Vec::new();
    }
    let releases = handed_over.iter().map(|(received, lease)| {
        async move {
            tracing::info!("subscription failing; delivery handed to the retry lane");
            // Kept, the claim would only make the handed-over copy wait for it to end.
            if let Some(lease) = lease {
                if let Err(err) = deps.deliveries.release(&received.delivery, *lease).await {
                    tracing::warn!(error = %err, "giving up the claim failed; the handed-over copy waits for it");
                }
            }
        }
        .instrument(received.span.clone())
    });
    futures_util::future::join_all(releases).await;
    let messages: Vec<(&DeliveryMessage, Duration)> =
        handed_over.iter().map(|(received, _)| (&received.delivery, Duration::ZERO)).collect();
    let sent = deps.queues.hand_over(&messages).await;
    let received: Vec<&Received<'_>> = handed_over.iter().map(|(received, _)| *received).collect();
    leave_main_lane(deps, &received, sent, "handing the delivery to the retry lane failed").await
}

/// The end of a batch's move off the main lane, once the messages were sent on (`sent`: the
/// position and SQS's reason of each it did not take): each one taken leaves the main lane (one
/// `DeleteMessageBatch`, when its batch holds others), each one refused stays, to be tried
/// again after the retry base. In the same order: what became of each.
async fn leave_main_lane(
    deps: &Deps,
    received: &[&Received<'_>],
    sent: Result<Vec<(usize, String)>, QueueError>,
    failed: &'static str,
) -> Vec<Disposition> {
    let refused = match sent {
        Ok(refused) => refused,
        Err(err) => (0..received.len()).map(|position| (position, err.to_string())).collect(),
    };
    let mut dispositions = Vec::new();
    let mut moved = Vec::new();
    for (position, received) in received.iter().enumerate() {
        match refused.iter().find(|(refused, _)| *refused == position) {
            Some((_, reason)) => {
                let span = received.span.clone();
                span.in_scope(|| tracing::error!(error = %reason, "{failed}"));
                dispositions.push(stay(deps, received, deps.policy.schedule.base).instrument(span).await);
            }
            None => {
                moved.push(received.receipt.handle);
                dispositions.push(Disposition::Acknowledged);
            }
        }
    }
    // Should the early delete fail, the messages are still not reported, so the event source
    // mapping (or the local pump) deletes them with their batch.
    if received.first().is_some_and(|first| first.receipt.early) && !moved.is_empty() {
        if let Err(err) = deps.queues.delete_all(Lane::Main, &moved).await {
            tracing::warn!(error = %err, "deleting the moved messages early failed; they go with their batch");
        }
    }
    dispositions
}

/// Opens the secrets, signs and sends, then records and executes the plan for the answer.
/// `lease` is the turn's claim on the record (none for a record not written yet).
async fn attempt_delivery(
    deps: &Deps,
    received: &Received<'_>,
    subscription: &Subscription,
    attempt: u32,
    lease: Option<Lease>,
) -> Disposition {
    let secrets = match deps.sealer.open(subscription).await {
        Ok(secrets) => secrets,
        Err(err) => {
            tracing::error!(error = %err, "opening the subscription's secrets failed");
            return stay(deps, received, deps.policy.schedule.base).await;
        }
    };
    if let Some(lease) = lease.filter(|lease| !lease.allows_send_at(Timestamp::now())) {
        // Too late to send under the claim; its next turn comes when the claim has ended.
        tracing::warn!("the claim ran short before the send; nothing sent");
        return stay(deps, received, lease.until.since(Timestamp::now())).await;
    }
    // Counted last before the send, so the attempt starts within the limit's margin of its count.
    if let Some(wait) = over_rate(deps, subscription).await {
        return wait_for_rate(deps, received, lease, wait).await;
    }
    // Each attempt is a span of the delivery's trace (contract section 19); a message queued
    // before trace context has none, so its attempt starts one.
    let trace = received.delivery.trace.clone().unwrap_or_else(TraceContext::start);
    let span_id = SpanId::generate();
    let trace_headers = if subscription.trace_context { trace.headers(span_id) } else { Vec::new() };
    let (started, started_at) = (Instant::now(), SystemTime::now());
    let (outcome, body) = send(deps, &received.delivery, &subscription.target, &secrets, trace_headers).await;
    let took = started.elapsed();
    let latency_ms = took.as_secs_f64() * 1000.0;
    let now = Timestamp::now();
    let failing_since = subscription.health.failing_since();
    let kind = received.delivery.event.kind();
    let after = plan::after_send(attempt, kind, &outcome, failing_since, now, &deps.policy, jitter());
    let pace = groups::pace_after(&outcome, took, subscription.fast_since.is_some());
    let (recorded, ()) = tokio::join!(
        record(deps, &received.delivery, subscription, &body, &after, lease),
        set_pace(deps, subscription, pace, now),
    );
    report(deps, &received.delivery, subscription, &outcome, &after, attempt, latency_ms);
    let span = (&trace.parent, span_id, started_at);
    log_span(&received.delivery, subscription, &outcome, &after, attempt, span, latency_ms);
    match recorded {
        // The attempt stands as recorded; the message follows the plan.
        Ok(Recorded::AsPlanned) => settle(deps, received, after.message).await,
        // The attempt counts; this copy's round is over, and the new one is on its way.
        Ok(Recorded::HandedOn) => acknowledge(deps, received.lane, received.receipt).await,
        Ok(Recorded::Not) => {
            tracing::info!(
                "the record moved on during the send (another generation, or the claim lapsed); this copy is dropped"
            );
            acknowledge(deps, received.lane, received.receipt).await
        }
        // Sent, but not recorded: tried again after the schedule's base, as the same attempt.
        Err(err) => {
            tracing::error!(error = %err, "recording the attempt failed");
            stay(deps, received, deps.policy.schedule.base).await
        }
    }
}

/// Signs the delivery for this attempt and POSTs it to its URL (on the blocking pool: ureq
/// blocks) or sends it into its AWS destination, with `trace_headers` beside the signed ones.
/// Returns the outcome and the exact bytes sent.
async fn send(
    deps: &Deps,
    delivery: &DeliveryMessage,
    target: &Target,
    secrets: &SigningSecrets,
    trace_headers: Vec<(&'static str, String)>,
) -> (Outcome, Vec<u8>) {
    let now = Timestamp::now();
    let mut signed = SignedDelivery::new(delivery, &secrets.active_at(now), now);
    signed.headers.extend(trace_headers);
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

/// What became of an attempt's write.
enum Recorded {
    /// As the plan said.
    AsPlanned,
    /// Under the turn's claim, but a manual retry or a recovery started a new round during the
    /// send: the attempt counts, and the new round was handed on (see [`hand_on`]).
    HandedOn,
    /// Not at all: the turn's claim was gone (or, for a message without one, another
    /// generation owns the record).
    Not,
}

/// The attempt's write (its record and the bytes sent), under the turn's claim, and the
/// subscription's when the plan changes it (independent, so together).
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
        Some(lease) if hand_on(deps, delivery, lease, Some(attempt)).await? => Ok(Recorded::HandedOn),
        _ => Ok(Recorded::Not),
    }
}

/// Gives the turn's claim to the round a manual retry or a recovery started while the turn
/// held it, with the attempt the turn made under it (which then counts) if any, and puts that
/// round's message on the retry lane at once rather than let the retry's own copy wait for the
/// claim to end (contract section 12). `Ok(false)` when the turn no longer holds the claim.
async fn hand_on(
    deps: &Deps,
    delivery: &DeliveryMessage,
    lease: Lease,
    attempt: Option<&AttemptRecord>,
) -> Result<bool, StoreError> {
    let Some(round) = deps.deliveries.hand_on(delivery, lease, attempt).await? else { return Ok(false) };
    tracing::info!(
        to_generation = round.generation,
        "a new round started while this turn held the claim; handed on at once"
    );
    // Should this fail, the record is pending and overdue soon: the sweep puts it back.
    let queued = match round.message() {
        Ok(message) => deps.queues.hand_over(&[(&message, Duration::ZERO)]).await.map_err(|err| err.to_string()),
        Err(err) => Err(err.to_string()),
    };
    match queued {
        Ok(refused) if refused.is_empty() => {}
        Ok(refused) => tracing::error!(error = ?refused, "queueing the new round failed; the sweep puts it back"),
        Err(err) => tracing::error!(error = %err, "queueing the new round failed; the sweep puts it back"),
    }
    Ok(true)
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
            // Failing disables only while the clock still shows the failure it measured.
            let since = subscription.health.failing_since().filter(|_| reason == DisabledReason::Failing);
            if deps.webhooks.disable(user_id, id, reason, since, now).await? {
                tracing::warn!(reason = ?reason, "subscription disabled");
            }
            Ok(())
        }
    }
}

/// Logs the attempt's outcome with its metrics.
fn report(
    deps: &Deps,
    delivery: &DeliveryMessage,
    subscription: &Subscription,
    outcome: &Outcome,
    after: &After,
    attempt: u32,
    latency_ms: f64,
) {
    let kind = delivery.event.kind().as_str();
    let receiver = subscription.target.logged();
    if let Outcome::Delivered(answer) = outcome {
        let metrics = delivery_metrics(&deps.metrics_namespace, kind, DeliveryResult::Succeeded, latency_ms);
        tracing::info!(%receiver, attempt, status = answer.status, latency_ms, emf = %metrics, "delivered");
        return;
    }
    let retry_in = match after.message {
        MessageFate::RetryIn(wait) => Some(wait.as_secs_f64()),
        _ => None,
    };
    let result = DeliveryResult::Failed { exhausted: retry_in.is_none() };
    let metrics = delivery_metrics(&deps.metrics_namespace, kind, result, latency_ms);
    tracing::warn!(
        %receiver,
        attempt,
        latency_ms,
        error = after.record.error.as_deref().unwrap_or_default(),
        retry_in_seconds = retry_in,
        emf = %metrics,
        "delivery failed"
    );
}

/// Logs the attempt as an OpenTelemetry span (contract section 19), `(parent, span id, start)`
/// in the delivery's trace, whether or not the subscription is sent trace context.
fn log_span(
    delivery: &DeliveryMessage,
    subscription: &Subscription,
    outcome: &Outcome,
    after: &After,
    attempt: u32,
    (parent, span_id, start): (&TraceParent, SpanId, SystemTime),
    duration_ms: f64,
) {
    let attempt = telemetry::Attempt {
        subscription_id: delivery.subscription_id.as_str(),
        delivery_id: delivery.delivery_id.as_str(),
        event_type: delivery.event.kind().as_str(),
        number: attempt,
        url: subscription.target.logged(),
        status: outcome.answer().map(|answer| answer.status),
        error: after.record.error.clone(),
    };
    let end = start + Duration::from_secs_f64(duration_ms / 1000.0);
    let span = telemetry::attempt_span(parent, span_id, start, end, &attempt);
    tracing::info!(span = %span, duration_ms, "{}", telemetry::ATTEMPT_SPAN);
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
            acknowledge(deps, received.lane, received.receipt).await
        }
        Err(err) => {
            // Nothing was sent; the message comes back to be recorded.
            tracing::error!(error = %err, "recording a delivery not sent failed");
            stay(deps, received, deps.policy.schedule.base).await
        }
    }
}

/// Executes the plan's fate for a recorded attempt.
async fn settle(deps: &Deps, received: &Received<'_>, fate: MessageFate) -> Disposition {
    match (fate, received.lane) {
        (MessageFate::Acknowledge, lane) => acknowledge(deps, lane, received.receipt).await,
        (MessageFate::RetryIn(wait), Lane::Retry) => stay(deps, received, wait).await,
        (MessageFate::RetryIn(wait), Lane::Main) => hand_over(deps, received, wait).await,
        (MessageFate::DeadLetter, lane) => match deps.queues.dead_letter(&received.delivery).await {
            Ok(()) => acknowledge(deps, lane, received.receipt).await,
            Err(err) => {
                // Visible again at once; its next turn finds the record failed and drops it,
                // or the lane's redrive policy moves it.
                tracing::error!(error = %err, "moving the delivery to the dead-letter queue failed");
                stay(deps, received, Duration::ZERO).await
            }
        },
    }
}

/// Moves the message to the retry lane (received after `delay`) and deletes it from the
/// main lane.
async fn hand_over(deps: &Deps, received: &Received<'_>, delay: Duration) -> Disposition {
    let handed = deps.queues.hand_over(&[(&received.delivery, delay)]).await;
    match handed.map(|refused| refused.into_iter().next()) {
        Ok(None) => acknowledge(deps, received.lane, received.receipt).await,
        Ok(Some((_, reason))) => {
            tracing::error!(error = %reason, "handing the delivery to the retry lane failed");
            stay(deps, received, deps.policy.schedule.base).await
        }
        Err(err) => {
            tracing::error!(error = %err, "handing the delivery to the retry lane failed");
            stay(deps, received, deps.policy.schedule.base).await
        }
    }
}

/// Deletes the message from its lane now, when its batch holds others (else it goes with its
/// batch). Should the early delete fail, the message is still not reported, so the event
/// source mapping (or the local pump) deletes it with its batch.
async fn acknowledge(deps: &Deps, lane: Lane, receipt: Receipt<'_>) -> Disposition {
    if !receipt.early {
        return Disposition::Acknowledged;
    }
    if let Err(err) = deps.queues.delete(lane, receipt.handle).await {
        tracing::warn!(error = %err, "deleting the message early failed; it goes with its batch");
    }
    Disposition::Acknowledged
}

/// Leaves the message on its lane, visible again after `wait`.
async fn stay(deps: &Deps, received: &Received<'_>, wait: Duration) -> Disposition {
    if let Err(err) = deps.queues.retry_after(received.lane, received.receipt.handle, wait).await {
        tracing::error!(error = %err, "scheduling the retry failed");
    }
    Disposition::Stays
}

#[cfg(test)]
mod tests;
