//! A subscription's health (contract section 20, "Health"), end to end against DynamoDB Local
//! and the SQS emulator with receivers on loopback: `new` before any attempt, counts and
//! latency after successes and a failure, what waits (held and pending) counted from the
//! status index, one write of the figures per subscription per delivery batch, and the
//! refusals (400, another user's 404).

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, ReturnConsumedCapacity};
use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::health::HealthTable;
use career_core::webhooks::health::{Hour, Tally, BUCKETS};
use career_service::calls::Calls;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{
    acting_as, clients, clients_logging_dynamodb, dynamodb, eventually, function_settings, in_first_group,
    receive_messages, typed, unique_user, Api, DEADLINE,
};
use lambda_http::http::Method;
use local_aws::template::function;
use serde_json::Value;

async fn health(api: &Api, user: &str, subscription: &str) -> Value {
    let key = api.key(user, "read:webhooks").await;
    api.get(&format!("/api/v1/webhooks/health?id={subscription}"), &key).await.assert_status(200).clone()
}

/// Before any attempt a subscription is `new`, with nothing known; after a failure and three
/// successes against a receiver that answers after 300 ms, the counts are those, the latency
/// percentiles read about the receiver's delay, and the subscription is healthy again since
/// the success that stopped its failure clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_counts_each_outcome_and_reads_the_receivers_latency() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let delay = Duration::from_millis(300);
    let receiver = Receiver::start(&[500, 200], delay).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;

    let before = health(&pipeline.api, &user, &subscription).await;
    assert_eq!(before["subscriptionId"], subscription.as_str());
    assert_eq!(before["state"], "new");
    let nothing: Value = serde_json::json!({"attempts": 0, "succeeded": 0, "failed": 0, "p50Ms": null, "p95Ms": null});
    assert_eq!(before["last24h"], nothing);
    for field in ["lastSuccessAt", "lastFailureAt", "nextProbeAt"] {
        assert_eq!(before[field], Value::Null, "{field}");
    }
    assert_eq!((&before["held"], &before["pending"], &before["rateLimited"]), (&0.into(), &0.into(), &false.into()));

    for _ in 0..3 {
        pipeline.api.admin.update_profile(&user).await.unwrap();
    }
    receiver.wait_for(4, DEADLINE).await;
    pipeline.settled(&subscription).await;
    let api = &pipeline.api;
    let (user, subscription) = (&user, &subscription);
    let after = eventually("the health figures of four attempts", || async move {
        let after = health(api, user, subscription).await;
        if after["last24h"]["attempts"] == 4 {
            Ok(after)
        } else {
            Err(after)
        }
    })
    .await;
    let figures = &after["last24h"];
    assert_eq!((&figures["succeeded"], &figures["failed"]), (&3.into(), &1.into()), "{after}");
    let (p50, p95) = (figures["p50Ms"].as_u64().unwrap(), figures["p95Ms"].as_u64().unwrap());
    // The buckets' bounds around 300 ms are 256 and 384: a read is within them, or above.
    assert!((256..5_000).contains(&p50) && p50 <= p95 && p95 < 10_000, "{after}");
    assert_eq!(after["state"], "healthy", "{after}");
    let (success, failure) = (after["lastSuccessAt"].as_str().unwrap(), after["lastFailureAt"].as_str().unwrap());
    assert!(failure < success, "{after}");
    let since = after["since"].as_str().unwrap();
    assert!(failure < since && since <= success, "healthy since the success that stopped the clock: {after}");
    assert_eq!(after["pending"], 0, "{after}");
}

/// A ping waiting for its attempt is pending (no pumps here: it waits), a delivery held as
/// section 20's hold leaves it is held; both are counted from the status index.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn held_and_pending_deliveries_are_counted() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let (subscription, _) = pipeline.subscribe(&user, career_service::sink_url(), &["profile.updated"]).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    for _ in 0..2 {
        let ping = pipeline.api.request(Method::POST, &format!("/api/v1/webhooks/ping?id={subscription}")).key(&key);
        ping.send().await.assert_status(202);
    }
    let deliveries = DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries);
    let held = DeliveryMessage::new(&Event::ping(&typed(&subscription)), &typed(&user), &typed(&subscription));
    deliveries.create(&held, DeliveryStatus::Held, Timestamp::now()).await.unwrap();
    let (api, user, subscription) = (&pipeline.api, &user, &subscription);
    let counted = eventually("the held and pending counts", || async move {
        let answer = health(api, user, subscription).await;
        if (answer["held"].as_u64(), answer["pending"].as_u64()) == (Some(1), Some(2)) {
            Ok(answer)
        } else {
            Err(answer)
        }
    })
    .await;
    assert_eq!(counted["state"], "new", "nothing attempted: {counted}");
}

/// A batch of several deliveries to one subscription adds them to its figures with one write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_to_one_subscription_is_one_write_of_its_figures() {
    let pipeline = Pipeline::start(false).await;
    let settings = pipeline.settings();
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let messages: Vec<DeliveryMessage> = (0..5)
        .map(|_| DeliveryMessage::new(&Event::ping(&typed(&subscription)), &typed(&user), &typed(&subscription)))
        .collect();
    let records: Vec<_> = messages.iter().map(|m| (m, DeliveryStatus::Pending)).collect();
    DeliveryTable::new(dynamodb(), &settings.tables.deliveries).insert_new(&records, Timestamp::now()).await.unwrap();
    let queues = DeliveryQueues::new(&clients(), settings).unwrap();
    queues.post_all(&in_first_group(&messages)).await.unwrap();
    let main_lane = settings.delivery_queue_url.as_deref().expect("the main lane");
    let batch = receive_messages(main_lane, messages.len()).await;

    let calls = Calls::default();
    let deliver = career_deliver::Deps::new(
        &acting_as(function::DELIVER, settings, &clients_logging_dynamodb(&calls)),
        &function_settings(function::DELIVER, settings),
    )
    .unwrap();
    let answer = career_deliver::handle(&deliver, local_aws::event_sources::pumps::sqs_event(batch)).await;
    assert!(answer.batch_item_failures.is_empty(), "every delivery sent");
    assert_eq!(receiver.received().len(), messages.len());
    let health_item = format!("{subscription}#health\"");
    assert_eq!(calls.sent_with("UpdateItem", &health_item), 1, "one write of the figures for the batch");
    let figures = health(&pipeline.api, &user, &subscription).await;
    assert_eq!(figures["last24h"]["attempts"], messages.len(), "{figures}");
    assert_eq!(figures["state"], "healthy", "{figures}");
}

/// An hour's item at its largest (every bucket of the histogram counted, far past any
/// hour's count, and the three times set) stays under 1 KB, so each batch's write of it costs
/// one write unit, as DynamoDB (Local) reports it: at load, batches of 10 deliveries to one
/// subscription, 0.1 unit a delivery ($0.0625 a million at $0.625 a million units).
#[tokio::test]
async fn an_hours_item_at_its_largest_is_one_write_unit() {
    let pipeline = Pipeline::start(false).await;
    let table = pipeline.settings().tables.deliveries.clone();
    let subscription = career_core::ids::SubscriptionId::generate();
    let now = Timestamp::now();
    let tally = Tally {
        attempts: u64::from(u32::MAX),
        succeeded: u64::from(u32::MAX),
        failed: u64::from(u32::MAX),
        latency: [u64::from(u32::MAX); BUCKETS],
        last_success_at: Some(now),
        last_failure_at: Some(now),
        rate_limited_at: Some(now),
    };
    let hour = Hour::of(now);
    HealthTable::new(dynamodb(), &table).add(&subscription, hour, &tally).await.unwrap();
    // The same item written again, asking what it cost.
    let consumed = dynamodb()
        .update_item()
        .table_name(&table)
        .key("logPartition", AttributeValue::S(format!("{subscription}#health")))
        .key("deliveryId", AttributeValue::S(hour.key()))
        .update_expression("ADD attempts :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .unwrap()
        .consumed_capacity
        .and_then(|capacity| capacity.capacity_units);
    assert_eq!(consumed, Some(1.0), "one write unit");
}

/// An id missing or empty is a 400; another user's subscription, or no subscription, a 404.
#[tokio::test]
async fn health_refuses_a_missing_id_and_another_users_subscription() {
    let pipeline = Pipeline::start(false).await;
    let (owner, other) = (unique_user(), unique_user());
    let (subscription, _) = pipeline.subscribe(&owner, career_service::sink_url(), &["profile.updated"]).await;
    let key = pipeline.api.key(&other, "read:webhooks").await;
    for missing in ["/api/v1/webhooks/health", "/api/v1/webhooks/health?id="] {
        pipeline.api.get(missing, &key).await.assert_error(400, "webhooks.missing_subscription_id");
    }
    for id in [subscription.as_str(), "whk_nonsense"] {
        let answer = pipeline.api.get(&format!("/api/v1/webhooks/health?id={id}"), &key).await;
        answer.assert_error(404, "webhooks.not_found");
    }
    let owners = pipeline.api.key(&owner, "write:webhooks").await;
    let answer = pipeline.api.get(&format!("/api/v1/webhooks/health?id={subscription}"), &owners).await;
    answer.assert_error(403, "auth.forbidden");
}
