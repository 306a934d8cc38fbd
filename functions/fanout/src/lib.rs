//! The fan-out function: each stream record becomes at most one event, and each event one
//! delivery per subscription of its user to its kind. A profile or assessment record is a
//! change of the user's data (contract section 5); a subscription's or a delivery record's
//! is an operational event (section 15), which never goes to the subscription it is about
//! and is also published to the operator's topic. Each delivery's record is written first
//! (section 12: `pending`, or `skipped` for a disabled subscription), then its message goes
//! on the main lane, in one of its subscription's message groups (section 18), or on the
//! retry lane for a subscription that is currently failing. Every delivery of an event
//! carries the trace of the change (contract section 19), or of a trace the event starts.

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table, TableNames};
use career_core::delivery::groups::Groups;
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::plan;
use career_core::delivery::queue::{DeliveryQueues, Lane, QueueError};
use career_core::delivery::DeliveryMessage;
use career_core::events::{event_from_record, trace_of_record, Event, MalformedRecord};
use career_core::operational;
use career_core::operator::{OperatorTopic, PublishError};
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::WebhookTable;
use career_core::store::StoreError;
use career_core::trace::TraceContext;
use career_core::webhooks::Subscription;

pub struct Deps {
    tables: TableNames,
    webhooks: WebhookTable,
    deliveries: DeliveryTable,
    queues: DeliveryQueues,
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
            deliveries: DeliveryTable::new(clients.dynamodb().clone(), deliveries),
            queues: DeliveryQueues::new(clients, settings)?,
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

#[derive(Debug, thiserror::Error)]
enum FanOutError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Publish(#[from] PublishError),
}

/// Handles records in order. A record that cannot be read is logged and skipped (a retry
/// cannot fix it); on a failure that a retry can fix, processing stops and that record is
/// reported, so the stream resumes from it without re-sending the records before it.
pub async fn handle(deps: &Deps, event: StreamEvent) -> DynamoDbEventResponse {
    let mut response = DynamoDbEventResponse::default();
    for record in &event.records {
        if let Err(err) = fan_out(deps, record).await {
            tracing::error!(event_id = %record.event_id, error = %err, "fan-out failed; the stream retries from this record");
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = record.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
            break;
        }
    }
    response
}

async fn fan_out(deps: &Deps, record: &EventRecord) -> Result<(), FanOutError> {
    let event = match Source::of(record, &deps.tables).event(record) {
        Ok(Some(event)) => event,
        Ok(None) => return Ok(()),
        Err(malformed) => {
            tracing::warn!(error = %malformed, "skipping a stream record");
            return Ok(());
        }
    };
    let Some(user_id) = event.user_id() else {
        // Nobody can have subscribed to an event of no (or no valid) user.
        tracing::warn!(event_id = %event.id, "skipping an event without a valid user id");
        return Ok(());
    };
    let mut subscriptions = deps.webhooks.subscribed_to(user_id, event.kind()).await?;
    subscriptions.retain(|s| Some(&s.id) != event.about());
    let now = Timestamp::now();
    // A record processed again may start another trace, but it queues nothing that its first
    // processing recorded, so no delivery has two.
    let trace = trace_of_record(record).unwrap_or_else(TraceContext::start);
    // A first attempt for the main lane is created claimed, so its turn writes no claim
    // (delivery::plan::granted); the retry lane's copies claim for themselves.
    let message = |s: &Subscription| {
        let message = DeliveryMessage::new(&event, user_id, &s.id).traced(trace.clone());
        match s.health.failing_since() {
            None => plan::created_claimed(message, now),
            Some(_) => message,
        }
    };
    let status = |s: &Subscription| match s.health.is_enabled() {
        true => DeliveryStatus::Pending,
        false => DeliveryStatus::Skipped,
    };
    let deliveries: Vec<(DeliveryMessage, DeliveryStatus)> =
        subscriptions.iter().map(|s| (message(s), status(s))).collect();
    let records: Vec<(&DeliveryMessage, DeliveryStatus)> = deliveries.iter().map(|(m, status)| (m, *status)).collect();
    let recorded = deps.deliveries.insert_new(&records, now).await?;
    // A disabled subscription is sent nothing: its record says `skipped` already. A delivery
    // that had its record already (this stream record processed again) is not queued again:
    // its first message, or the sweep if that was lost, sends it, and only once.
    let (mut main, mut retry) = (Vec::new(), Vec::new());
    for ((subscription, (message, status)), new) in subscriptions.iter().zip(deliveries).zip(recorded) {
        match (new, status, subscription.health.failing_since().is_some()) {
            (false, _, _) | (_, DeliveryStatus::Skipped, _) => {}
            (true, _, true) => retry.push(message),
            (true, _, false) => main.push((
                message,
                Groups::of(
                    &subscription.health,
                    subscription.fast_since,
                    subscription.max_deliveries_per_second,
                    deps.groups,
                ),
            )),
        }
    }
    deps.queues.send_spread(&main).await?;
    deps.queues.send(Lane::Retry, &retry).await?;
    // Last: a failure above retries the record, and the deliveries' records keep that from
    // sending twice; the topic cannot, so it is published to once the deliveries are queued.
    if event.about().is_some() {
        deps.operator.publish(&event).await?;
    }
    tracing::info!(event_id = %event.id, kind = event.kind().as_str(), user_id = %user_id, trace_id = %trace.parent.trace_id.hex(), deliveries = subscriptions.len(), to_main_lane = main.len(), to_retry_lane = retry.len(), "event fanned out");
    Ok(())
}
