//! The fan-out's failure paths, against SDK clients that aws-smithy-mocks answers
//! in-process: where the stream resumes when a read or a queue send fails.

use std::collections::HashMap;

use aws_lambda_events::dynamodb::Event as StreamEvent;
use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_sdk_dynamodb::operation::put_item::PutItemOutput;
use aws_sdk_dynamodb::operation::query::{QueryError, QueryOutput};
use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use aws_sdk_sqs::types::error::InvalidAddress;
use aws_smithy_mocks::{mock, mock_client, Rule, RuleMode};
use aws_types::SdkConfig;
use serde_json::json;

use super::*;

const MAIN_LANE: &str = "https://sqs.local/main.fifo";

/// The function's dependencies on clients that answer only by the rules (any other call
/// fails), without the SDK's own retries: an error is what the SDK returns once they are spent.
fn deps(dynamodb: &[&Rule], sqs: &[&Rule]) -> Deps {
    let dynamodb = mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, dynamodb.iter().copied(), |config| config
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled()));
    let sqs = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, sqs.iter().copied(), |config| config
        .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled()));
    let clients = AwsClients::new(SdkConfig::builder().build()).with_dynamodb(dynamodb).with_sqs(sqs);
    let vars = [
        ("WEBHOOKS_TABLE", "webhooks"),
        ("DELIVERIES_TABLE", "deliveries"),
        ("DELIVERY_QUEUE_URL", MAIN_LANE),
        ("DELIVERY_RETRY_QUEUE_URL", "https://sqs.local/retry"),
        ("OPERATOR_TOPIC_ARN", "arn:aws:sns:us-east-1:111111111111:operator"),
    ];
    let vars: HashMap<String, String> = vars.into_iter().map(|(name, value)| (name.into(), value.into())).collect();
    Deps::new(&clients, &Settings::from_vars(&vars).unwrap()).unwrap()
}

/// A batch of profile changes, one per user, in order; each record's sequence number is
/// `seq-<user>`.
fn profile_changes(users: &[&str]) -> StreamEvent {
    let records: Vec<serde_json::Value> = users
        .iter()
        .map(|user| {
            let keys = json!({"userId": {"S": user}, "profileId": {"S": "prf_1"}});
            let image = |revision: &str| {
                json!({"userId": {"S": user}, "profileId": {"S": "prf_1"}, "revision": {"N": revision}})
            };
            json!({
                "awsRegion": "us-east-1",
                "eventID": format!("ev-{user}"),
                "eventName": "MODIFY",
                "eventSource": "aws:dynamodb",
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/profiles/stream/x",
                "dynamodb": {"ApproximateCreationDateTime": 1795766400.0, "Keys": keys,
                             "OldImage": image("1"), "NewImage": image("2"),
                             "SequenceNumber": format!("seq-{user}"), "SizeBytes": 10,
                             "StreamViewType": "NEW_AND_OLD_IMAGES"}
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).unwrap()
}

fn resumes_from(response: &DynamoDbEventResponse) -> Vec<&str> {
    response.batch_item_failures.iter().filter_map(|failure| failure.item_identifier.as_deref()).collect()
}

/// `user`'s subscriptions to a kind, as the table answers: one healthy subscription, or an
/// error (throttled, once the SDK's retries are spent).
fn subscriptions(user: &'static str, answer: Result<(), ()>) -> Rule {
    let rule = mock!(aws_sdk_dynamodb::Client::query).match_requests(move |request| {
        request.expression_attribute_values().and_then(|values| values.get(":u"))
            == Some(&AttributeValue::S(user.into()))
    });
    if answer.is_err() {
        return rule.then_error(|| {
            let meta = ErrorMetadata::builder().code("ProvisionedThroughputExceededException").build();
            QueryError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder().meta(meta).build(),
            )
        });
    }
    rule.then_output(move || {
        let item: HashMap<String, AttributeValue> = [
            ("userId", AttributeValue::S(user.into())),
            ("subscriptionId", AttributeValue::S(format!("whk_01JDQ40A1B2C3D4E5F6G7H8J9{}", &user[1..]))),
            ("url", AttributeValue::S("https://hooks.example.com/".into())),
            ("events", AttributeValue::L(vec![AttributeValue::S("profile.updated".into())])),
            ("sealedSecrets", AttributeValue::S("c2VhbGVk".into())),
            ("createdAt", AttributeValue::S("2026-11-27T08:00:00.000Z".into())),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect();
        QueryOutput::builder().items(item).build()
    })
}

/// A read of the subscriptions that fails stops the batch there: the records before it are
/// fanned out, and the stream resumes from that record, not before.
#[tokio::test]
async fn the_stream_resumes_from_the_first_record_whose_subscriptions_could_not_be_read() {
    let (read, throttled) = (subscriptions("u1", Ok(())), subscriptions("u2", Err(())));
    let recorded = mock!(aws_sdk_dynamodb::Client::put_item).then_output(|| PutItemOutput::builder().build());
    let queued = mock!(aws_sdk_sqs::Client::send_message_batch)
        .match_requests(|request| request.queue_url() == Some(MAIN_LANE) && request.entries().len() == 1)
        .then_output(|| {
            aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput::builder()
                .set_successful(Some(vec![]))
                .set_failed(Some(vec![]))
                .build()
                .unwrap()
        });
    let deps = deps(&[&read, &throttled, &recorded], &[&queued]);

    let response = handle(&deps, profile_changes(&["u1", "u2", "u3"])).await;

    assert_eq!(resumes_from(&response), ["seq-u2"]);
    assert_eq!((read.num_calls(), throttled.num_calls(), queued.num_calls()), (1, 1, 1), "u3 is not read");
}

/// Deliveries recorded but not queued: the stream resumes from the first record of the
/// batch's, whose records keep the retried fan-out from queueing any twice.
#[tokio::test]
async fn a_failed_queue_send_resumes_the_stream_from_the_first_fanned_out_record() {
    let (first, second) = (subscriptions("u1", Ok(())), subscriptions("u2", Ok(())));
    let recorded = mock!(aws_sdk_dynamodb::Client::put_item).then_output(|| PutItemOutput::builder().build());
    let refused = mock!(aws_sdk_sqs::Client::send_message_batch)
        .match_requests(|request| request.queue_url() == Some(MAIN_LANE) && request.entries().len() == 2)
        .then_error(|| SendMessageBatchError::InvalidAddress(InvalidAddress::builder().build()));
    let deps = deps(&[&first, &second, &recorded], &[&refused]);

    let response = handle(&deps, profile_changes(&["u1", "u2"])).await;

    assert_eq!(resumes_from(&response), ["seq-u1"]);
    assert_eq!(refused.num_calls(), 1);
}
