//! The delivery function: for each batch, claim and load every message (each subscription
//! read once) → plan → for each message, sign and send → plan → execute. The decisions are
//! career_core::delivery::plan's; this crate only does the I/O they name. It consumes both
//! lanes (career_core::aws::queue), each through its own event source mapping; the
//! messages of a batch are sent concurrently, and each leaves its lane as soon as its own
//! attempt is recorded (contract section 12), so none waits for another's send. A failing
//! subscription's deliveries leave the main lane together, unsent, in one move; so do those
//! whose subscription now spreads over other message groups than theirs (section 18).
//!
//! One job a file: this one the batch and its answer (each result carrying its message's
//! id), `turn` one message's turn, `moves` the batch's moves off its groups, `exit` what
//! becomes of a message (the plan's [`Exit`]), `report` what an attempt logs and what the
//! batch adds to its subscriptions' health figures (contract section 20).

mod exit;
mod moves;
mod report;
mod turn;

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use career_core::aws::aws_sender::AwsSender;
use career_core::aws::identity_tokens::IdentityTokens;
use career_core::aws::outbox::Outbox;
use career_core::aws::queue::{self, DeliveryQueues, Lane};
use career_core::aws::sender::Sender;
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table};
use career_core::delivery::groups::Groups;
use career_core::delivery::plan::{Exit, Policy, ProbeSchedule};
use career_core::delivery::rate::DeliveryLimiter;
use career_core::delivery::retry::RetrySchedule;
use career_core::delivery::DeliveryMessage;
use career_core::ids::SubscriptionId;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::health::HealthTable;
use career_core::store::rate_limits::RateLimitTable;
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::WebhookTable;

use exit::Disposition;
use report::Observed;
use turn::Next;

pub struct Deps {
    webhooks: WebhookTable,
    deliveries: DeliveryTable,
    outbox: Outbox,
    /// The subscriptions' health figures, one write per subscription a batch.
    health: HealthTable,
    sealer: Sealer,
    queues: DeliveryQueues,
    sender: Sender,
    /// Destinations in receivers' own AWS accounts (contract section 17).
    aws: AwsSender,
    /// HTTP subscriptions' identity tokens (contract section 21).
    identity_tokens: IdentityTokens,
    policy: Policy,
    metrics_namespace: String,
    /// The most groups of the main lane a subscription spreads over.
    groups: Groups,
    /// Subscriptions' `maxDeliveriesPerSecond` (contract section 18).
    limiter: DeliveryLimiter,
    /// How many held deliveries a probe's success releases itself (contract section 20).
    release_per_call: u32,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        let [webhooks, deliveries, rate_limits] =
            settings.tables.require([Table::Webhooks, Table::Deliveries, Table::RateLimits])?;
        // The health figures are kept beside the log, in its table.
        let health = HealthTable::new(clients.dynamodb().clone(), deliveries);
        let deliveries = DeliveryTable::new(clients.dynamodb().clone(), deliveries);
        let queues = DeliveryQueues::with_dead_letter(clients, settings)?;
        Ok(Self {
            webhooks: WebhookTable::new(clients.dynamodb().clone(), webhooks),
            outbox: Outbox::new(deliveries.clone(), queues.clone()),
            health,
            deliveries,
            sealer: Sealer::new(clients, settings)?,
            queues,
            sender: Sender::new(settings.webhook_urls.guard.clone()),
            aws: AwsSender::new(clients),
            identity_tokens: IdentityTokens::new(clients),
            policy: Policy {
                schedule: RetrySchedule { base: settings.retry_base, max_attempts: settings.max_delivery_attempts },
                disable_after: settings.webhook_disable_after,
                probes: ProbeSchedule { after: settings.probe_after, lasting: settings.probe_for },
            },
            metrics_namespace: settings.metrics_namespace.clone(),
            groups: settings.delivery_groups,
            limiter: DeliveryLimiter::new(
                RateLimitTable::new(clients.dynamodb().clone(), rate_limits),
                settings.partition_quota,
            ),
            release_per_call: settings.release_per_call,
        })
    }
}

/// Every message is settled by its own turn; those that stay on their lane (a short wait, or
/// storage that failed) are reported by their message id, so the event source mapping
/// leaves them there.
///
/// The batch's claims and subscriptions are read together (each subscription once, however
/// many of its deliveries the batch holds: a main-lane batch is mostly one subscription's),
/// and the deliveries of a failing subscription leave the main lane together (one
/// `SendMessageBatch` to the retry lane, one `DeleteMessageBatch`). Every other turn goes
/// on by itself from there, so none waits for another's send.
pub async fn handle(deps: &Deps, event: SqsEvent) -> SqsBatchResponse {
    let (mut received, mut unreadable) = (Vec::new(), Vec::new());
    for message in &event.records {
        match Received::of(message) {
            Ok(message) => received.push(message),
            Err(message) => unreadable.push(message),
        }
    }
    let early = deletes_early(received.iter().map(|r| &r.delivery.subscription_id));
    let receipts = received.iter_mut().map(|r| &mut r.receipt).chain(unreadable.iter_mut().map(|u| &mut u.receipt));
    for receipt in receipts {
        receipt.early = early;
    }
    let loaded = turn::load(deps, &received, Timestamp::now()).await;
    let observed = Observed::default();
    let (mut handed_over, mut regrouped, mut own_turns) = (Vec::new(), Vec::new(), Vec::new());
    for (received, next) in received.iter().zip(loaded) {
        match next {
            Next::HandOver(lease) => handed_over.push((received, lease)),
            Next::Own(turn) => match moves::regroup_of(deps, received, &turn) {
                Some((group, lease)) => regrouped.push((received, group, lease)),
                None => {
                    let observed = &observed;
                    own_turns.push(async move { (received.id, turn::take(deps, received, turn, observed).await) })
                }
            },
        }
    }
    // An unreadable message is dropped: it leaves its lane.
    let dropped = unreadable
        .iter()
        .map(|message| async move { (message.id, exit::execute(deps, &message.exiting(), Exit::Delete).await) });
    // Boxed: the batch's future nests deep enough to pass the compiler's layout limit.
    let (own, handed, moved, dropped) = Box::pin(async {
        tokio::join!(
            futures_util::future::join_all(own_turns),
            moves::hand_over_together(deps, handed_over),
            moves::regroup_together(deps, regrouped),
            futures_util::future::join_all(dropped)
        )
    })
    .await;
    // The batch's one write per subscription to the health figures, once its turns are over.
    observed.write(deps, Timestamp::now()).await;
    answer(own.into_iter().chain(handed).chain(moved).chain(dropped))
}

/// The batch's answer: each message that stays on its lane is one of its item failures, by id.
fn answer<'a>(settled: impl IntoIterator<Item = (&'a str, Disposition)>) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    for (id, _) in settled.into_iter().filter(|(_, disposition)| *disposition == Disposition::Stays) {
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id.to_owned();
        response.batch_item_failures.push(failure);
    }
    response
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

/// One received message whose body is a delivery: its id, lane, receipt and the delivery,
/// with the span every line of its turn carries.
struct Received<'a> {
    id: &'a str,
    lane: Lane,
    /// Its group among its subscription's, on the main lane.
    group: Option<u8>,
    receipt: Receipt<'a>,
    delivery: DeliveryMessage,
    span: tracing::Span,
}

/// A received message whose body cannot be read as a delivery: it is dropped.
struct Unreadable<'a> {
    id: &'a str,
    lane: Lane,
    receipt: Receipt<'a>,
}

impl<'a> Received<'a> {
    /// The message as received; whether its turn deletes it early is the batch's to say.
    fn of(message: &'a SqsMessage) -> Result<Self, Unreadable<'a>> {
        let id = message.message_id.as_deref().unwrap_or_default();
        let lane = Lane::of(message);
        let receipt = Receipt { handle: message.receipt_handle.as_deref().unwrap_or_default(), early: false };
        let body = message.body.as_deref().map(serde_json::from_str::<DeliveryMessage>);
        let Some(Ok(delivery)) = body else {
            tracing::warn!(message_id = id, "dropping a delivery message that cannot be read");
            return Err(Unreadable { id, lane, receipt });
        };
        // Every line of this delivery's turn carries these fields once, from its span.
        let span = tracing::info_span!(
            "delivery",
            delivery_id = %delivery.delivery_id,
            subscription_id = %delivery.subscription_id,
            lane = lane.as_str(),
            generation = delivery.generation,
        );
        Ok(Received { id, lane, group: queue::group_of(message), receipt, delivery, span })
    }

    /// What its exit needs of it.
    fn exiting(&self) -> exit::Exiting<'_> {
        exit::Exiting { lane: self.lane, receipt: self.receipt, delivery: Some(&self.delivery) }
    }
}

impl Unreadable<'_> {
    fn exiting(&self) -> exit::Exiting<'_> {
        exit::Exiting { lane: self.lane, receipt: self.receipt, delivery: None }
    }
}

/// Where a message is on its lane, and whether its turn deletes it as soon as it is settled
/// (when its batch holds others) or leaves that to the event source mapping.
#[derive(Clone, Copy)]
struct Receipt<'a> {
    handle: &'a str,
    early: bool,
}

#[cfg(test)]
mod tests;
