//! The fan-out function: each stream record becomes at most one event, and each event one
//! delivery per subscription of its user to its kind. A profile or assessment record is a
//! change of the user's data (contract section 5); a subscription's or a delivery record's
//! is an operational event (section 15), which never goes to the subscription it is about
//! and is also published to the operator's topic. Each delivery's record is written first
//! (section 12: `pending`, or `skipped` for a disabled subscription), then its message goes
//! on the main lane, in one of its subscription's message groups (section 18), or on the
//! retry lane for a subscription that is currently failing. Every delivery of an event
//! carries the trace of the change (contract section 19), or of a trace the event starts.

use std::collections::HashMap;

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use career_core::aws::operator::OperatorTopic;
use career_core::aws::outbox::{Outbox, OutboxError};
use career_core::aws::queue::DeliveryQueues;
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table, TableNames};
use career_core::delivery::groups::Groups;
use career_core::delivery::plan::{self, NewDelivery};
use career_core::delivery::DeliveryMessage;
use career_core::events::{Event, EventKind};
use career_core::ids::UserId;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::stream::operational;
use career_core::store::stream::{event_from_record, trace_of_record, MalformedRecord};
use career_core::store::webhooks::WebhookTable;
use career_core::trace::TraceContext;
use career_core::webhooks::Subscription;

pub struct Deps {
    tables: TableNames,
    webhooks: WebhookTable,
    outbox: Outbox,
    operator: OperatorTopic,
    /// The most groups of the main lane a subscription spreads over.
    groups: Groups,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        let [webhooks, deliveries] = settings.tables.require([Table::Webhooks, Table::Deliveries])?;
        Ok(Self {
            tables: settings.tables.clone(),
            webhooks: WebhookTable::new(clients.dynamodb().clone(), webhooks),
            outbox: Outbox::new(
                DeliveryTable::new(clients.dynamodb().clone(), deliveries),
                DeliveryQueues::new(clients, settings)?,
            ),
            operator: OperatorTopic::new(clients, settings)?,
            groups: settings.delivery_groups,
        })
    }
}

/// What a stream record is, by the table of its event source's ARN
/// (`arn:…:table/<name>/stream/<label>`): a subscription's or a delivery record's change,
/// or else a change of a user's data (a profile or an assessment, told apart by its keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    UserData,
    Subscriptions,
    Deliveries,
}

impl Source {
    fn of(record: &EventRecord, tables: &TableNames) -> Self {
        let arn = record.event_source_arn.as_deref().unwrap_or_default();
        let table = arn.split_once(":table/").and_then(|(_, rest)| rest.split('/').next());
        match table {
            Some(table) if table == tables.webhooks => Source::Subscriptions,
            Some(table) if table == tables.deliveries => Source::Deliveries,
            _ => Source::UserData,
        }
    }

    /// The event the record stands for, if any.
    fn event(self, record: &EventRecord) -> Result<Option<Event>, MalformedRecord> {
        match self {
            Source::UserData => event_from_record(record),
            Source::Subscriptions => operational::from_subscription_record(record),
            Source::Deliveries => operational::from_delivery_record(record),
        }
    }
}

/// Handles a batch's records in order, their deliveries together: each user's
/// subscriptions to a kind are read once per batch, every record is written (with the
/// markers that let the sweep find them, `store::deliveries::Marker`) before any message is
/// queued, and the messages go ten to a `SendMessageBatch` call whatever event they come
/// from, so a busy stream's deliveries share requests. A record that cannot be read is logged
/// and skipped (a retry cannot fix it); on a failure that a retry can fix, the record the
/// stream should resume from is reported: the first whose deliveries were not all queued, or
/// whose operational event was not published, so the records before it are not sent again.
pub async fn handle(deps: &Deps, event: StreamEvent) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    // Boxed: the batch's future nests deep enough to pass the compiler's layout limit.
    if let Some(index) = Box::pin(fan_out(deps, &event.records)).await {
        let record = &event.records[index];
        let mut failure = DynamoDbBatchItemFailure::default();
        failure.item_identifier = record.change.sequence_number.clone();
        response.batch_item_failures.push(failure);
    }
    response
}

/// One event of the batch and the subscriptions it goes to.
struct Fanned {
    /// Its record's position in the batch.
    index: usize,
    event: Event,
    user_id: UserId,
    subscriptions: Vec<Subscription>,
    trace: TraceContext,
}

/// Fans the batch out; the position of the record the stream retries from, if any.
async fn fan_out(deps: &Deps, records: &[EventRecord]) -> Option<usize> {
    let (fanned, stopped_at) = subscriptions_of(deps, records).await;
    let now = Timestamp::now();
    if let Err(err) = deliver(deps, &fanned, now).await {
        let index = fanned.first().map(|f| f.index).or(stopped_at)?;
        tracing::error!(event_id = %records[index].event_id, error = %err, "fan-out failed; the stream retries from this record");
        return Some(index);
    }
    // Last: a failure above retries the record, and the deliveries' records keep that from
    // sending twice; the topic cannot, so it is published to once the deliveries are queued.
    for fanned in &fanned {
        if fanned.event.about().is_some() {
            if let Err(err) = deps.operator.publish(&fanned.event).await {
                tracing::error!(event_id = %records[fanned.index].event_id, error = %err, "fan-out failed; the stream retries from this record");
                return Some(fanned.index);
            }
        }
        let event = &fanned.event;
        tracing::info!(event_id = %event.id, kind = event.kind().as_str(), user_id = %fanned.user_id, trace_id = %fanned.trace.parent.trace_id.hex(), deliveries = fanned.subscriptions.len(), "event fanned out");
    }
    if let Some(index) = stopped_at {
        tracing::error!(event_id = %records[index].event_id, "fan-out failed; the stream retries from this record");
    }
    stopped_at
}

/// The events of the batch's records and their subscriptions, each user's subscriptions to
/// a kind read once, up to the first record whose subscriptions could not be read (whose
/// position comes second).
async fn subscriptions_of(deps: &Deps, records: &[EventRecord]) -> (Vec<Fanned>, Option<usize>) {
    let mut read: HashMap<(UserId, EventKind), Vec<Subscription>> = HashMap::new();
    let mut fanned = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let event = match Source::of(record, &deps.tables).event(record) {
            Ok(Some(event)) => event,
            Ok(None) => continue,
            Err(malformed) => {
                tracing::warn!(error = %malformed, "skipping a stream record");
                continue;
            }
        };
        let Some(user_id) = event.user_id().cloned() else {
            // Nobody can have subscribed to an event of no (or no valid) user.
            tracing::warn!(event_id = %event.id, "skipping an event without a valid user id");
            continue;
        };
        let key = (user_id.clone(), event.kind());
        let mut subscriptions = match read.get(&key) {
            Some(subscriptions) => subscriptions.clone(),
            None => match deps.webhooks.subscribed_to(&key.0, key.1).await {
                Ok(subscriptions) => read.entry(key).or_insert(subscriptions).clone(),
                Err(err) => {
                    tracing::error!(event_id = %event.id, error = %err, "reading the subscriptions failed");
                    return (fanned, Some(index));
                }
            },
        };
        subscriptions.retain(|s| Some(&s.id) != event.about());
        // A record processed again may start another trace, but it queues nothing that its
        // first processing recorded, so no delivery has two.
        let trace = trace_of_record(record).unwrap_or_else(TraceContext::start);
        fanned.push(Fanned { index, event, user_id, subscriptions, trace });
    }
    (fanned, None)
}

/// Records every delivery of `fanned`, then queues those it recorded (the outbox), each
/// where the plan puts it.
async fn deliver(deps: &Deps, fanned: &[Fanned], now: Timestamp) -> Result<(), OutboxError> {
    let deliveries: Vec<NewDelivery> = fanned
        .iter()
        .flat_map(|f| f.subscriptions.iter().map(move |s| (f, s)))
        .map(|(f, s)| {
            let message = DeliveryMessage::new(&f.event, &f.user_id, &s.id).traced(f.trace.clone());
            plan::new_delivery(message, (&s.health, s.while_disabled), Groups::spread_of(s, deps.groups), now)
        })
        .collect();
    deps.outbox.create(&deliveries, now).await?;
    Ok(())
}

#[cfg(test)]
mod tests;
