//! The scale model (contract section 22): the throttling layer in front of DynamoDB Local
//! answers a partition key past its units as DynamoDB does, and a subscription's
//! `maxDeliveriesPerSecond` above one item's modelled write quota holds on it (section 18),
//! with receivers on loopback.
//!
//! A binary of its own, which make test runs after the suite, alone: a scale model measures
//! against quotas in units a second, and beside the suite's other tests a starved DynamoDB
//! Local answered so late that the rate limit's counts were late too (each then waits, as
//! on AWS), and the test measured the machine rather than the model.

use std::time::Duration;

use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use career_core::store::PartitionQuota;
use career_service::calls::{Call, Calls};
use career_service::pipeline::Pipeline;
use career_service::scale_model::{layer, RateLimitRun};
use career_service::{services, unique_user};
use local_aws::throttling::{Modelled, ThrottlingLayer};
use serde_json::json;

/// A DynamoDB client through `layer`, with the SDK's retries (`retries`) or none.
fn client_through(layer: &ThrottlingLayer, retries: bool, calls: &Calls) -> aws_sdk_dynamodb::Client {
    let sdk = local_aws::stack::sdk_config(&layer.endpoint, &services().sqs_endpoint).unwrap();
    // Ten attempts rather than the SDK's default three: a key's unit comes back within a second,
    // which three jittered backoffs can fall short of.
    let retry = if retries { RetryConfig::standard().with_max_attempts(10) } else { RetryConfig::disabled() };
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk).retry_config(retry).interceptor(calls.clone()).build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// One counted write on the rate-limit table's item `bucket`.
async fn add(
    client: &aws_sdk_dynamodb::Client,
    bucket: &str,
) -> Result<(), aws_sdk_dynamodb::error::SdkError<UpdateItemError>> {
    client
        .update_item()
        .table_name(&services().settings.tables.rate_limits)
        .key("bucket", AttributeValue::S(bucket.to_owned()))
        .update_expression("ADD n :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .map(drop)
}

#[tokio::test]
async fn the_scale_model_throttles_a_key_past_its_write_units_as_dynamodb_does_and_no_other_key() {
    // One write unit a second: a second write to the key within the second is one too many.
    let layer = layer(PartitionQuota { write_units: 1, read_units: 3 }, Modelled::Every).await;
    let calls = Calls::default();
    let once = client_through(&layer, false, &calls);
    let (hot, cold) = (format!("scale-model-hot-{}", unique_user()), format!("scale-model-cold-{}", unique_user()));

    let mut throttled = None;
    for _ in 0..10 {
        if let Err(err) = add(&once, &hot).await {
            throttled = Some(err);
            break;
        }
    }
    let err = throttled.expect("a key past its write units is throttled");
    let service = err.as_service_error().expect("DynamoDB's answer, not a transport error");
    assert!(service.is_provisioned_throughput_exceeded_exception(), "{service:?}");
    assert_eq!(err.raw_response().map(|raw| raw.status().as_u16()), Some(400));
    let body = err.raw_response().and_then(|raw| raw.body().bytes()).map(|b| String::from_utf8_lossy(b).into_owned());
    let body: serde_json::Value = serde_json::from_str(&body.expect("a body")).unwrap();
    let table = &services().settings.tables.rate_limits;
    assert_eq!(
        body["ThrottlingReasons"],
        json!([{"reason": "TableWriteKeyRangeThroughputExceeded",
                "resource": format!("arn:aws:dynamodb:us-east-1:123456789012:table/{table}")}])
    );

    // Another key of the same table is not held back by it.
    add(&once, &cold).await.expect("another key has its own units");

    // With the SDK's standard retries, a throttled write is tried again after the SDK's backoff
    // and goes through once the key has its units back.
    let retrying = client_through(&layer, true, &calls);
    let mark = calls.len();
    add(&retrying, &hot).await.expect("retried until the key had its units");
    let sent = calls.log_since(mark).into_iter().filter(|call| matches!(call, Call::Sent(_))).count();
    assert!(sent >= 2, "the write was throttled first and retried ({sent} attempts)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limit_five_times_one_items_write_quota_holds_on_the_scale_model_and_never_stalls() {
    // DynamoDB's per-key quota divided by 200: an item takes 5 writes a second, and the
    // limit is five times that, as 5,000 is to DynamoDB's 1,000.
    const LIMIT: usize = 25;
    const DELIVERIES: usize = 300;
    // A failed count that waited the retry base would show as a gap of 30 s.
    let retry_base = Duration::from_secs(30);
    let run = RateLimitRun { limit: LIMIT, deliveries: DELIVERIES, divisor: 200, retry_base };
    // On one item, as before the counters were split, most counts are throttled (each retried
    // by the SDK, then waiting on the lane), and the deliveries do not all arrive in time.
    let delivered = run.run().await;

    assert_eq!((delivered.distinct(), delivered.arrivals.len()), (DELIVERIES, DELIVERIES), "every delivery once");
    let most = delivered.most_in_a_second();
    assert!(most <= LIMIT, "{most} attempts started in one second: {:?}", delivered.per_second());
    // No stall: a failed count that waited the retry base would leave a gap that long.
    let longest_gap = delivered.longest_gap();
    assert!(longest_gap < retry_base, "{longest_gap:?} without a delivery: {:?}", delivered.per_second());
}

/// The scale model holds a queue to its in-flight quota as SQS does: a receive takes at most
/// what the quota leaves, and nothing while the queue holds that many in flight, however many
/// messages wait (a long poll simply returns nothing); a message settled frees its place.
#[tokio::test]
async fn the_scale_model_holds_a_queue_to_its_in_flight_quota_as_sqs_does() {
    let pipeline = Pipeline::start(false).await;
    let retry_lane = &pipeline.queues.retry;
    let sqs = career_service::sqs();
    for n in 0..5 {
        sqs.send_message().queue_url(retry_lane).message_body(format!("m{n}")).send().await.unwrap();
    }
    local_aws::emulators::set_in_flight_quota(&services().sqs_endpoint, retry_lane, 3).await.unwrap();
    let receive = |wait: i32| {
        let sqs = sqs.clone();
        async move {
            let output = sqs
                .receive_message()
                .queue_url(retry_lane)
                .max_number_of_messages(10)
                .visibility_timeout(120)
                .wait_time_seconds(wait)
                .send()
                .await
                .unwrap();
            output.messages.unwrap_or_default()
        }
    };
    let first = receive(0).await;
    assert_eq!(first.len(), 3, "a receive takes what the quota leaves");
    assert!(receive(1).await.is_empty(), "nothing while the quota is taken, though two wait");
    let settled = first[0].receipt_handle().unwrap();
    sqs.delete_message().queue_url(retry_lane).receipt_handle(settled).send().await.unwrap();
    assert_eq!(receive(1).await.len(), 1, "a settled message frees its place");
}
