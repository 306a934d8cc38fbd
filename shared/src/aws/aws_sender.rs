//! Sends to a destination in the receiver's own AWS account (contract section 17): assumes
//! the subscription's role with its external id, then one `SendMessage` or `PutEvents` (to an
//! EventBridge bus, or to a Custom Event Bus through the eventsv2 API) signed with those
//! credentials only. The function's own credentials sign nothing but the
//! `AssumeRole`. What is sent and what an error means are `aws_destination`'s decisions.
//!
//! Each subscription's session (its credentials, and the queue's or bus's client made with
//! them) is kept for this instance until `aws_destination::RENEW_BEFORE` before it expires:
//! one `AssumeRole` per subscription per 14 minutes while warm. Sends to one subscription
//! that find no session wait for the one `AssumeRole` the first of them makes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use aws_sdk_eventbridgev2::types::{PutEventsRequestEntry as BusV2Entry, PutEventsSystemMetadata};
use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::MessageAttributeValue;
use aws_types::endpoint_config::AccountIdEndpointMode;
use aws_types::region::Region;

use crate::aws::AwsClients;
use crate::delivery::attempt::{Answer, Outcome};
use crate::delivery::aws_destination::{
    classify, still_fresh, AwsError, BusEvent, DestinationFailure, QueueMessage, Step, EVENT_SOURCE, SESSION_SECONDS,
};
use crate::delivery::{DeliveryMessage, SignedDelivery};
use crate::ids::SubscriptionId;
use crate::webhooks::destination::{session_name, AwsDestination, Destination};

#[derive(Clone)]
pub struct AwsSender {
    clients: AwsClients,
    sessions: Arc<Mutex<HashMap<SessionKey, Slot>>>,
}

/// A session belongs to one subscription, role and external id, and one queue or bus: a
/// PATCH of the destination starts another.
#[derive(Clone, PartialEq, Eq, Hash)]
struct SessionKey {
    subscription: SubscriptionId,
    role_arn: String,
    external_id: String,
    target: String,
}

type Slot = Arc<tokio::sync::Mutex<Option<Session>>>;

#[derive(Clone)]
struct Session {
    expires: SystemTime,
    client: TargetClient,
}

#[derive(Clone)]
enum TargetClient {
    Sqs(aws_sdk_sqs::Client),
    EventBridge(aws_sdk_eventbridge::Client),
    EventBusV2(aws_sdk_eventbridgev2::Client),
}

impl AwsSender {
    /// Makes no client yet: STS's is made on the first send to a destination.
    pub fn new(clients: &AwsClients) -> Self {
        AwsSender { clients: clients.clone(), sessions: Arc::default() }
    }

    /// One attempt: the session (assumed now if it has none fresh), then the message.
    pub async fn send(&self, delivery: &DeliveryMessage, aws: &AwsDestination, signed: &SignedDelivery) -> Outcome {
        let client = match self.session(&delivery.subscription_id, aws).await {
            Ok(client) => client,
            Err(failure) => return Outcome::NotTaken(failure),
        };
        let (subscription, id) = (delivery.subscription_id.as_str(), delivery.delivery_id.as_str());
        let bus_event = |ordered| BusEvent::new(signed, delivery.event.kind().as_str(), subscription, id, ordered);
        match (&aws.destination, client) {
            (Destination::AwsSqs { queue_url, .. }, TargetClient::Sqs(sqs)) => {
                let message = QueueMessage::new(signed, subscription, id, queue_url.is_fifo());
                send_message(&sqs, queue_url.as_str(), message).await
            }
            (Destination::AwsEventBridge { event_bus_arn, .. }, TargetClient::EventBridge(events)) => {
                let event = bus_event(false);
                let entry = PutEventsRequestEntry::builder()
                    .event_bus_name(event_bus_arn.as_str())
                    .source(EVENT_SOURCE)
                    .detail_type(event.detail_type)
                    .detail(event.detail)
                    .build();
                put_events(&events, entry).await
            }
            (Destination::AwsEventBus { event_bus_arn, .. }, TargetClient::EventBusV2(events)) => {
                put_events_v2(&events, event_bus_arn.as_str(), bus_event(true)).await
            }
            _ => unreachable!("a session's client is made for its destination's kind (the key holds its target)"),
        }
    }

    /// The subscription's client on its queue or bus, with credentials fresh for the send.
    async fn session(
        &self,
        subscription: &SubscriptionId,
        aws: &AwsDestination,
    ) -> Result<TargetClient, DestinationFailure> {
        let key = SessionKey {
            subscription: subscription.clone(),
            role_arn: aws.destination.role_arn().to_string(),
            external_id: aws.external_id.as_str().to_owned(),
            target: aws.destination.target().to_owned(),
        };
        let slot = self.sessions.lock().expect("sessions").entry(key).or_default().clone();
        let mut session = slot.lock().await;
        if let Some(fresh) = session.as_ref().filter(|s| still_fresh(s.expires, SystemTime::now())) {
            return Ok(fresh.client.clone());
        }
        let assumed = self.assume(subscription, aws).await?;
        *session = Some(assumed.clone());
        Ok(assumed.client)
    }

    /// `sts:AssumeRole` with the subscription's external id, for [`SESSION_SECONDS`].
    async fn assume(&self, subscription: &SubscriptionId, aws: &AwsDestination) -> Result<Session, DestinationFailure> {
        let assumed = self
            .clients
            .sts()
            .assume_role()
            .role_arn(aws.destination.role_arn().as_str())
            .external_id(aws.external_id.as_str())
            .role_session_name(session_name(subscription))
            .duration_seconds(SESSION_SECONDS)
            .send()
            .await
            .map_err(|err| classify(Step::AssumeRole, aws_error(&err)))?;
        let refused = || classify(Step::AssumeRole, AwsError::Answered { code: Some("NoCredentials"), status: None });
        let given = assumed.credentials().ok_or_else(refused)?;
        let expires = SystemTime::try_from(*given.expiration())
            .unwrap_or_else(|_| SystemTime::now() + Duration::from_secs(SESSION_SECONDS as u64));
        let credentials = Credentials::new(
            given.access_key_id(),
            given.secret_access_key(),
            Some(given.session_token().to_owned()),
            Some(expires),
            "the subscription's role",
        );
        let sdk = self.clients.sdk();
        let client = match &aws.destination {
            Destination::AwsSqs { queue_url, .. } => {
                let mut config = aws_sdk_sqs::config::Builder::from(sdk).credentials_provider(credentials);
                // A queue on AWS is called in its own region; an emulator's, in the function's.
                if let Some(region) = queue_url.region() {
                    config = config.region(Region::new(region));
                }
                TargetClient::Sqs(aws_sdk_sqs::Client::from_conf(config.build()))
            }
            Destination::AwsEventBridge { event_bus_arn, .. } => {
                let config = aws_sdk_eventbridge::config::Builder::from(sdk)
                    .credentials_provider(credentials)
                    .region(Region::new(event_bus_arn.region().to_owned()));
                TargetClient::EventBridge(aws_sdk_eventbridge::Client::from_conf(config.build()))
            }
            Destination::AwsEventBus { event_bus_arn, .. } => {
                // The bus's account picks its endpoint (the eventsv2 API's account-based
                // routing; an endpoint given, as the local stack's, wins).
                let config = aws_sdk_eventbridgev2::config::Builder::from(sdk)
                    .credentials_provider(credentials)
                    .region(Region::new(event_bus_arn.region().to_owned()))
                    .account_id_endpoint_mode(AccountIdEndpointMode::Preferred);
                TargetClient::EventBusV2(aws_sdk_eventbridgev2::Client::from_conf(config.build()))
            }
        };
        Ok(Session { expires, client })
    }
}

async fn send_message(sqs: &aws_sdk_sqs::Client, queue_url: &str, message: QueueMessage) -> Outcome {
    let mut request = sqs.send_message().queue_url(queue_url).message_body(message.body);
    for (name, value) in message.attributes {
        let value = MessageAttributeValue::builder().data_type("String").string_value(value).build();
        request = request.message_attributes(name, value.expect("a data type is set"));
    }
    if let Some((group, deduplication)) = message.fifo {
        request = request.message_group_id(group).message_deduplication_id(deduplication);
    }
    match request.send().await {
        Ok(sent) => accepted(serde_json::json!({"MessageId": sent.message_id().unwrap_or_default()})),
        Err(err) => Outcome::NotTaken(classify(Step::SendMessage, aws_error(&err))),
    }
}

async fn put_events(events: &aws_sdk_eventbridge::Client, entry: PutEventsRequestEntry) -> Outcome {
    let put = match events.put_events().entries(entry).send().await {
        Ok(put) => put,
        Err(err) => return Outcome::NotTaken(classify(Step::PutEvents, aws_error(&err))),
    };
    let entry = put.entries().first();
    put_outcome(put.failed_entry_count(), entry.and_then(|e| e.event_id()), entry.and_then(|e| e.error_code()))
}

/// One entry on a Custom Event Bus, in its event group with its deduplication id. A repeat
/// the bus drops as a duplicate is a success too: the delivery is on the bus.
async fn put_events_v2(events: &aws_sdk_eventbridgev2::Client, bus_arn: &str, event: BusEvent) -> Outcome {
    let mut metadata = PutEventsSystemMetadata::builder();
    if let Some((group, deduplication)) = event.ordering {
        metadata = metadata.event_group_id(group).deduplication_id(deduplication);
    }
    let entry = BusV2Entry::builder()
        .source(EVENT_SOURCE)
        .detail_type(event.detail_type)
        .detail(event.detail)
        .system_metadata(metadata.build())
        .build()
        .expect("the source and the detail type are set");
    let put = match events.put_events().event_bus_arn(bus_arn).entries(entry).send().await {
        Ok(put) => put,
        Err(err) => return Outcome::NotTaken(classify(Step::PutEvents, aws_error(&err))),
    };
    let entry = put.entries().first();
    put_outcome(put.failed_entry_count(), entry.and_then(|e| e.event_id()), entry.and_then(|e| e.error_code()))
}

/// What a `PutEvents` of one entry answered, on either bus: taken with its event id, or its
/// entry's error.
fn put_outcome(failed: i32, event_id: Option<&str>, error_code: Option<&str>) -> Outcome {
    match failed {
        0 => accepted(serde_json::json!({"FailedEntryCount": 0, "EventId": event_id})),
        _ => Outcome::NotTaken(classify(Step::PutEvents, AwsError::Answered { code: error_code, status: None })),
    }
}

/// A success: AWS's `200` and what it said of the message, as the record's response.
fn accepted(summary: serde_json::Value) -> Outcome {
    Outcome::Delivered(Answer { status: 200, body: summary.to_string(), retry_after: None })
}

/// What the SDK's error says, as `aws_destination::classify` reads it.
pub(crate) fn aws_error<E: ProvideErrorMetadata>(err: &SdkError<E>) -> AwsError<'_> {
    match err {
        SdkError::ServiceError(service) => {
            AwsError::Answered { code: service.err().code(), status: Some(service.raw().status().as_u16()) }
        }
        SdkError::ResponseError(response) => {
            AwsError::Answered { code: None, status: Some(response.raw().status().as_u16()) }
        }
        _ => AwsError::NoAnswer,
    }
}
