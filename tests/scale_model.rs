//! The scale model (contract section 22): the throttling layer in front of DynamoDB Local
//! answers a partition key past its units as DynamoDB does, a subscription's
//! `maxDeliveriesPerSecond` above one item's modelled write quota holds on it (section 18), and
//! a failing subscription's retries past a lane's modelled in-flight quota leave it to others,
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
use career_core::delivery::log::DeliveryStatus;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::PartitionQuota;
use career_service::calls::{Call, Calls};
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::scale_model::{layer, RateLimitRun};
use career_service::{dynamodb, eventually, queue_sources, services, typed, unique_user, QueueGauge, DEADLINE};
use local_aws::emulators::{set_in_flight_quota, SQS_IN_FLIGHT};
use local_aws::template::{function, Template};
use local_aws::throttling::{Modelled, ThrottlingLayer};
use serde_json::json;

/// Held by each test that drives deliveries through the model, so none runs beside another:
/// each measures against quotas a second, which another's load on the emulators would make late.
static DELIVERING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _alone = DELIVERING.lock().await;
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

/// A failing subscription whose retries are ten times the retry lane's modelled in-flight
/// quota (contract section 22): its retries wait as delayed messages, never in flight, so the
/// lane never holds its quota in flight, and another user's retries all go out beside them.
/// The lane's consumers are divided as the quota is, so their batches alone cannot fill it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_subscriptions_retries_at_ten_times_the_in_flight_quota_leave_the_lane_to_another_users_retries() {
    // SQS's quota divided by 5,000 (24 messages in flight), and the retry lane's consumers by 5.
    let _alone = DELIVERING.lock().await;
    let quota = SQS_IN_FLIGHT / 5_000;
    let consumers = Template::shipped().parameter_defaults()["DeliveryRetryMaxConcurrency"].parse::<u32>().unwrap() / 5;
    const OTHERS: usize = 5;
    let template = Template::shipped().with_parameter_default("DeliveryRetryMaxConcurrency", consumers).unwrap();
    let pipeline = Pipeline::from_template(template, true, |settings| {
        // Enough attempts that the failing deliveries retry for the whole test.
        settings.max_delivery_attempts = 8;
        settings.retry_base = Duration::from_millis(500);
    })
    .await;
    let retry_lane = queue_sources(function::DELIVER, pipeline.settings())
        .into_iter()
        .find(|source| source.queue_url == pipeline.queues.retry)
        .expect("the retry lane's event source");
    let in_batches = retry_lane.maximum_concurrency * retry_lane.batch_size as usize;
    assert!(in_batches < quota as usize, "the lane's {in_batches} messages in batches would fill the quota alone");
    for lane in [&pipeline.queues.delivery, &pipeline.queues.retry] {
        set_in_flight_quota(&services().sqs_endpoint, lane, quota).await.unwrap();
    }
    let gauge = QueueGauge::start(&pipeline.queues.retry);

    let failing = Receiver::start(&[500], Duration::ZERO).await;
    pipeline.failing_with_backlog(&failing.url, 10 * quota as usize).await;
    failing.wait_for(1, DEADLINE).await;

    // Another user's receiver fails each delivery's first attempt once.
    let flaky = Receiver::per_delivery(&[500, 200], Duration::ZERO).await;
    let other = unique_user();
    let (subscription, _) = pipeline.subscribe(&other, &flaky.url, &["profile.updated"]).await;
    for _ in 0..OTHERS {
        pipeline.api.admin.update_profile(&other).await.unwrap();
    }
    let arrivals = flaky.wait_for(2 * OTHERS, DEADLINE).await;
    let failing_during = failing.received().len();

    let records = eventually("the other user's deliveries recorded", || async {
        let deliveries = DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries);
        let listed = deliveries.list(&typed(&subscription), None, 100, None).await.unwrap().deliveries;
        match listed.iter().all(|record| record.status == DeliveryStatus::Succeeded) && listed.len() == OTHERS {
            true => Ok(listed),
            false => Err(listed),
        }
    })
    .await;
    assert!(records.iter().all(|record| record.attempts == 2), "each failed once and its retry went out: {records:?}");
    let mut per_delivery = std::collections::HashMap::<&str, usize>::new();
    for arrival in &arrivals {
        *per_delivery.entry(arrival.header("webhook-id")).or_default() += 1;
    }
    assert!(per_delivery.values().all(|n| *n == 2), "each delivery twice: {per_delivery:?}");
    assert!(failing_during > 1, "the failing subscription kept retrying beside them");
    assert!(gauge.most_delayed() > quota as usize, "more of its retries waited at once than the quota holds in flight");
    assert!(
        gauge.most_in_flight() < quota as usize,
        "the retry lane held its quota of {quota} in flight ({} at most): retries waited in flight",
        gauge.most_in_flight()
    );
}
