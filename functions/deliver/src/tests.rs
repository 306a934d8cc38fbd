//! The turn's failure paths, against SDK clients that aws-smithy-mocks answers in-process:
//! each rule matches only the request the path must make, so `num_calls` says it was made.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::error::{ConditionalCheckFailedException, ProvisionedThroughputExceededException};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::operation::change_message_visibility::ChangeMessageVisibilityOutput;
use aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput;
use aws_sdk_sqs::operation::send_message::{SendMessageError, SendMessageOutput};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::error::InvalidAddress;
use aws_sdk_sqs::types::{BatchResultErrorEntry, SendMessageBatchResultEntry};
use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
use aws_types::SdkConfig;
use career_core::events::Event;

use std::time::Duration;

use career_core::store::deliveries::RecordKey;

use super::*;

const WEBHOOKS: &str = "webhooks";
const DELIVERIES: &str = "deliveries";
const RETRY_LANE: &str = "https://sqs.local/retry";
const MAIN_LANE: &str = "https://sqs.local/main.fifo";
const DEAD_LETTERS: &str = "https://sqs.local/dead";

/// The function's dependencies on clients that answer only by `dynamodb`'s and `sqs`'s
/// rules (any other call fails), without the SDK's retries: a throttled call is the error
/// the SDK returns once its own retries are spent.
fn deps(dynamodb: &[&Rule], sqs: &[&Rule]) -> Deps {
    use aws_sdk_dynamodb::config::retry::RetryConfig;
    let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, dynamodb.iter().copied(), |config| config
        .retry_config(RetryConfig::disabled()));
    let sqs = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, sqs.iter().copied(), |config| config
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled()));
    let clients = AwsClients::new(SdkConfig::builder().build()).with_dynamodb(dynamodb).with_sqs(sqs);
    let vars = [
        ("WEBHOOKS_TABLE", WEBHOOKS),
        ("DELIVERIES_TABLE", DELIVERIES),
        ("RATE_LIMIT_TABLE", "rate-limits"),
        ("DELIVERY_QUEUE_URL", MAIN_LANE),
        ("DELIVERY_RETRY_QUEUE_URL", RETRY_LANE),
        ("DEAD_LETTER_QUEUE_URL", DEAD_LETTERS),
        ("SECRETS_KMS_KEY_ID", "alias/secrets"),
    ];
    let vars: HashMap<String, String> = vars.into_iter().map(|(name, value)| (name.into(), value.into())).collect();
    Deps::new(&clients, &Settings::from_vars(&vars).unwrap()).unwrap()
}

/// A delivery message of its own subscription as its lane hands it over: `group` for the
/// main lane (a FIFO queue names every message's group), none for the retry lane.
fn message(id: &str, group: Option<&str>) -> (SqsMessage, DeliveryMessage) {
    let subscription = SubscriptionId::generate();
    let delivery = DeliveryMessage::new(&Event::ping(&subscription), &"u1".parse().unwrap(), &subscription);
    let mut message = SqsMessage::default();
    message.message_id = Some(id.to_owned());
    message.receipt_handle = Some(format!("receipt-{id}"));
    message.body = Some(serde_json::to_string(&delivery).unwrap());
    if let Some(group) = group {
        message.attributes.insert("MessageGroupId".into(), group.into());
    }
    (message, delivery)
}

fn event(messages: &[&SqsMessage]) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages.iter().map(|message| (*message).clone()).collect();
    event
}

fn item_failures(response: &SqsBatchResponse) -> Vec<&str> {
    response.batch_item_failures.iter().map(|failure| failure.item_identifier.as_str()).collect()
}

/// The store's own error as the service words it (the store tells a failed condition by
/// its code).
fn service_error(code: &str) -> ErrorMetadata {
    ErrorMetadata::builder().code(code).build()
}

/// The subscription is read (here: deleted since), as the claim is written.
fn no_subscription() -> Rule {
    mock!(aws_sdk_dynamodb::Client::get_item)
        .match_requests(|request| request.table_name() == Some(WEBHOOKS))
        .then_output(|| GetItemOutput::builder().build())
}

/// The claim's write, throttled by the table.
fn throttled_claim() -> Rule {
    mock!(aws_sdk_dynamodb::Client::update_item)
        .match_requests(|request| request.table_name() == Some(DELIVERIES))
        .then_error(|| {
            UpdateItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .meta(service_error("ProvisionedThroughputExceededException"))
                    .build(),
            )
        })
}

/// Made visible again after `seconds`: the message stays on its lane that long.
fn visible_again(receipt: &str, seconds: std::ops::RangeInclusive<i32>) -> Rule {
    let receipt = receipt.to_owned();
    mock!(aws_sdk_sqs::Client::change_message_visibility)
        .match_requests(move |request| {
            request.receipt_handle() == Some(receipt.as_str())
                && request.visibility_timeout().is_some_and(|timeout| seconds.contains(&timeout))
        })
        .then_output(|| ChangeMessageVisibilityOutput::builder().build())
}

#[test]
fn only_a_batch_of_several_subscriptions_deletes_early() {
    let (a, b) = (SubscriptionId::generate(), SubscriptionId::generate());
    let early = |ids: &[&SubscriptionId]| deletes_early(ids.iter().copied());
    assert!(!early(&[]));
    assert!(!early(&[&a]), "alone in its batch");
    assert!(!early(&[&a; 10]), "one subscription's batch");
    assert!(early(&[&a, &a, &b]));
}

/// The message as a turn holds it, for a body that is a delivery.
fn readable(message: &SqsMessage) -> Received<'_> {
    Received::of(message).unwrap_or_else(|_| panic!("{:?} is a delivery", message.body))
}

/// A message whose body is no delivery is dropped (never reported, so it leaves its lane),
/// and the batch's answer still names the readable messages that stay, not their neighbours.
#[tokio::test]
async fn an_unreadable_message_is_dropped_and_the_batch_answer_names_the_message_that_stays() {
    let mut unreadable = SqsMessage::default();
    unreadable.message_id = Some("m0".into());
    unreadable.receipt_handle = Some("receipt-m0".into());
    unreadable.body = Some("{not a delivery".into());
    assert!(Received::of(&unreadable).is_err());
    let (message, _) = message("m1", None);
    let throttled = throttled_claim();
    let (subscription, stays) = (no_subscription(), visible_again("receipt-m1", 30..=30));
    let deps = deps(&[&throttled, &subscription], &[&stays]);

    let response = handle(&deps, event(&[&unreadable, &message])).await;

    assert_eq!(item_failures(&response), ["m1"]);
    assert_eq!(stays.num_calls(), 1);
}

/// A claim the table throttles is no answer: the message stays on its lane, tried again
/// after the retry base (30 s by default), and nothing is sent.
#[tokio::test]
async fn a_throttled_claim_leaves_the_message_on_its_lane_for_the_retry_base() {
    let (message, _) = message("m1", None);
    let throttled = throttled_claim();
    let (subscription, stays) = (no_subscription(), visible_again("receipt-m1", 30..=30));
    let deps = deps(&[&throttled, &subscription], &[&stays]);

    let response = handle(&deps, event(&[&message])).await;

    assert_eq!(item_failures(&response), ["m1"]);
    assert_eq!((throttled.num_calls(), stays.num_calls()), (1, 1));
}

/// A claim lost to another turn that holds the record: the message waits on its lane until
/// that turn's claim ends (at most one claim's length in flight), and sends nothing. A copy of a round that is over is dropped.
#[tokio::test]
async fn a_lost_claim_waits_for_the_turn_that_holds_it_and_a_stale_copy_is_dropped() {
    let (held, delivery) = message("m1", None);
    let (stale, _) = message("m2", None);
    let refused = mock!(aws_sdk_dynamodb::Client::update_item)
        .match_requests(|request| request.table_name() == Some(DELIVERIES))
        .then_error(|| {
            UpdateItemError::ConditionalCheckFailedException(
                ConditionalCheckFailedException::builder()
                    .meta(service_error("ConditionalCheckFailedException"))
                    .build(),
            )
        });
    let lease_until = Timestamp::now() + Duration::from_secs(25);
    let record = move |generation: u32| {
        let item = [
            ("generation", AttributeValue::N(generation.to_string())),
            ("status", AttributeValue::S("pending".into())),
            ("attempts", AttributeValue::N("1".into())),
            ("roundAttempts", AttributeValue::N("1".into())),
            ("leaseUntil", AttributeValue::S(lease_until.to_string())),
        ];
        GetItemOutput::builder().set_item(Some(item.map(|(name, value)| (name.to_owned(), value)).into())).build()
    };
    let (m1, m2) = (
        RecordKey::of(&delivery).item(),
        RecordKey::of(&serde_json::from_str(stale.body.as_deref().unwrap()).unwrap()).item(),
    );
    let held_record = mock!(aws_sdk_dynamodb::Client::get_item)
        .match_requests(move |request| request.table_name() == Some(DELIVERIES) && request.key() == Some(&m1))
        .then_output(move || record(delivery.generation));
    let newer_record = mock!(aws_sdk_dynamodb::Client::get_item)
        .match_requests(move |request| request.table_name() == Some(DELIVERIES) && request.key() == Some(&m2))
        .then_output(move || record(7));
    let subscription = no_subscription();
    let waits = visible_again("receipt-m1", 20..=25);
    let dropped = mock!(aws_sdk_sqs::Client::delete_message)
        .match_requests(|request| request.receipt_handle() == Some("receipt-m2"))
        .then_output(|| aws_sdk_sqs::operation::delete_message::DeleteMessageOutput::builder().build());
    let deps = deps(&[&refused, &held_record, &newer_record, &subscription], &[&waits, &dropped]);

    let response = handle(&deps, event(&[&held, &stale])).await;

    assert_eq!(item_failures(&response), ["m1"]);
    assert_eq!((waits.num_calls(), dropped.num_calls()), (1, 1));
}

/// A hand-over to the retry lane that SQS takes in part: each message it refused stays on
/// the main lane (tried again after the retry base), each one it took leaves it, deleted in
/// one `DeleteMessageBatch` when the batch holds other subscriptions' messages.
#[tokio::test]
async fn a_partly_refused_hand_over_keeps_only_the_refused_messages_on_the_main_lane() {
    let (taken, _) = message("m1", Some("g#0"));
    let (refused, _) = message("m2", Some("g#0"));
    let sent = mock!(aws_sdk_sqs::Client::send_message_batch)
        .match_requests(|request| request.queue_url() == Some(RETRY_LANE) && request.entries().len() == 2)
        .then_output(|| {
            let ok = SendMessageBatchResultEntry::builder().id("0").message_id("q1").md5_of_message_body("-");
            let no = BatchResultErrorEntry::builder().id("1").code("InternalError").sender_fault(false);
            SendMessageBatchOutput::builder()
                .successful(ok.build().unwrap())
                .failed(no.build().unwrap())
                .build()
                .unwrap()
        });
    let deleted = mock!(aws_sdk_sqs::Client::delete_message_batch)
        .match_requests(|request| {
            let receipts: Vec<&str> = request.entries().iter().map(|entry| entry.receipt_handle()).collect();
            request.queue_url() == Some(MAIN_LANE) && receipts == ["receipt-m1"]
        })
        .then_output(|| {
            DeleteMessageBatchOutput::builder().set_successful(Some(vec![])).set_failed(Some(vec![])).build().unwrap()
        });
    let stays = visible_again("receipt-m2", 30..=30);
    let deps = deps(&[], &[&sent, &deleted, &stays]);
    let mut received = [readable(&taken), readable(&refused)];
    for received in &mut received {
        received.receipt.early = true;
    }

    let settled = moves::hand_over_together(&deps, received.iter().map(|received| (received, None)).collect()).await;

    assert_eq!(settled, [("m1", Disposition::Acknowledged), ("m2", Disposition::Stays)]);
    assert_eq!((sent.num_calls(), deleted.num_calls(), stays.num_calls()), (1, 1, 1));
}

/// A delivery with no attempt left whose dead-letter send fails stays on its lane, visible
/// again at once: its next turn finds its record failed and drops it, or the lane's redrive
/// policy moves it. Sent, it leaves its lane.
#[tokio::test]
async fn a_failed_dead_letter_send_leaves_the_message_visible_again_at_once() {
    let (message, _) = message("m1", None);
    let refused = mock!(aws_sdk_sqs::Client::send_message)
        .match_requests(|request| request.queue_url() == Some(DEAD_LETTERS))
        .then_error(|| SendMessageError::InvalidAddress(InvalidAddress::builder().build()));
    let stays = visible_again("receipt-m1", 0..=0);
    let deps_refused = deps(&[], &[&refused, &stays]);
    let received = readable(&message);

    let exiting = received.exiting();
    let dead_letter = |deps| exit::execute(deps, &exiting, Exit::DeadLetter);
    assert_eq!(dead_letter(&deps_refused).await, Disposition::Stays);
    assert_eq!((refused.num_calls(), stays.num_calls()), (1, 1));

    let taken = mock!(aws_sdk_sqs::Client::send_message)
        .match_requests(|request| request.queue_url() == Some(DEAD_LETTERS))
        .then_output(|| SendMessageOutput::builder().message_id("q1").build());
    let deps_taken = deps(&[], &[&taken]);
    assert_eq!(dead_letter(&deps_taken).await, Disposition::Acknowledged);
    assert_eq!(taken.num_calls(), 1);
}
