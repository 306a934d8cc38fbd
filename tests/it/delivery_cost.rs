//! What a first try writes (contract section 12, issue 42): the fan-out's markers that let the
//! sweep find a lost first try without a due index entry per record, and a record that keeps
//! its body deflated yet resends its exact bytes.

use std::time::Duration;

use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::delivery::log::{AttemptRecord, DeliveryStatus};
use career_core::delivery::DeliveryMessage;
use career_core::events::{Event, EventData};
use career_core::ids::EventId;
use career_core::store::deliveries::{DeliveryTable, RecordKey};
use career_core::webhooks::signing::verify_hex;
use career_service::in_first_group;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{clients, dynamodb, typed, unique_user, DEADLINE};
use lambda_http::http::Method;
use local_aws::template::function;

fn deliveries(pipeline: &Pipeline) -> DeliveryTable {
    DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries)
}

fn sweeper(pipeline: &Pipeline, sweep_after: Duration) -> career_sweep::Deps {
    let mut settings = pipeline.settings().clone();
    settings.sweep_after = sweep_after;
    career_sweep::Deps::new(
        &career_service::acting_as(function::SWEEP, &settings, &clients()),
        &career_service::function_settings(function::SWEEP, &settings),
    )
    .unwrap()
}

/// Three first tries recorded as the fan-out records them (one marker, no due index entry):
/// one delivered, two whose messages were lost. Once the marker is overdue, the sweep finds
/// the two through it and sends each once; the delivered one is left alone, and the marker
/// is gone, so the next run finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweep_finds_lost_first_tries_through_their_batch_marker() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let messages: Vec<DeliveryMessage> = (0..3)
        .map(|_| DeliveryMessage::new(&Event::ping(&typed(&subscription)), &typed(&user), &typed(&subscription)))
        .collect();
    let created_at = Timestamp::now();
    let records: Vec<_> = messages.iter().map(|m| (m, DeliveryStatus::Pending)).collect();
    deliveries(&pipeline).insert_new(&records, created_at).await.unwrap();
    let delivered = AttemptRecord::succeeded(
        &career_core::delivery::attempt::Outcome::Delivered(career_core::delivery::attempt::Answer {
            status: 204,
            body: String::new(),
            retry_after: None,
        }),
        Timestamp::now(),
    );
    assert!(deliveries(&pipeline).record_attempt(&messages[0], &messages[0].body(), &delivered, None).await.unwrap());

    let sweep = sweeper(&pipeline, Duration::from_secs(1));
    let not_yet = career_sweep::sweep(&sweep, &career_sweep::Shards::all(), created_at).await.unwrap();
    assert_eq!((not_yet.indexed, not_yet.overdue), (0, 0), "the marker is not overdue yet");
    let later = created_at + Duration::from_secs(2);
    let swept = career_sweep::sweep(&sweep, &career_sweep::Shards::all(), later).await.unwrap();
    assert_eq!((swept.indexed, swept.overdue, swept.requeued), (2, 2, 2), "{swept:?}");
    let received = receiver.wait_for(2, DEADLINE).await;
    let mut sent: Vec<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    sent.sort();
    let mut lost: Vec<&str> = messages[1..].iter().map(|m| m.delivery_id.as_str()).collect();
    lost.sort();
    assert_eq!(sent, lost, "each lost first try sent, the delivered one not");
    pipeline.drained().await;
    let again =
        career_sweep::sweep(&sweep, &career_sweep::Shards::all(), later + Duration::from_secs(1)).await.unwrap();
    assert_eq!((again.indexed, again.overdue, again.requeued), (0, 0, 0), "the marker is gone");
    assert_eq!(receiver.received().len(), 2);
}

/// A record keeps a body of about 1 KB deflated (so each write of it costs one unit), and a
/// manual retry resends exactly the bytes first sent, signed anew with the subscription's
/// secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_retry_of_a_deflated_body_resends_its_exact_bytes() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let (about, _) = pipeline.subscribe(&user, career_service::sink_url(), &["profile.updated"]).await;
    let (subscription, secret) = pipeline.subscribe(&user, &receiver.url, &["webhook.endpoint.failing"]).await;
    let error = "answered 503: the gateway returned an invalid response from the database connection pool, \
                 exhausted after 30 seconds while the worker wrote the candidate's assessment summary; "
        .repeat(5);
    let data = EventData::EndpointFailing {
        user_id: typed(&user),
        subscription_id: typed(&about),
        url: "https://hooks.example.com/career/events".into(),
        failing_since: Timestamp::now(),
        last_error: error,
        last_response_status: Some(503),
    };
    let event = Event { id: EventId::generate(), created_at: Timestamp::now(), data };
    let message = DeliveryMessage::new(&event, &typed(&user), &typed(&subscription));
    let body = message.body();
    assert!(body.len() > 1024, "a body over 1 KB: {}", body.len());
    deliveries(&pipeline).insert_new(&[(&message, DeliveryStatus::Pending)], Timestamp::now()).await.unwrap();
    let queues = DeliveryQueues::new(&clients(), pipeline.settings()).unwrap();
    queues.post_all(&in_first_group(std::slice::from_ref(&message))).await.unwrap();
    receiver.wait_for(1, DEADLINE).await;

    let stored = dynamodb()
        .get_item()
        .table_name(&pipeline.settings().tables.deliveries)
        .set_key(Some(RecordKey::of(&message).item()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert!(!stored.contains_key("body"), "not kept as text");
    let deflated = stored.get("bodyDeflated").and_then(|b| b.as_b().ok()).expect("kept deflated");
    assert!(
        deflated.as_ref().len() < body.len() / 2,
        "deflated to {} of {} bytes",
        deflated.as_ref().len(),
        body.len()
    );

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks/deliveries/retry?id={}", message.delivery_id);
    let answer = pipeline.api.request(Method::POST, &path).key(&key).send().await;
    let record = answer.assert_status(202);
    assert_eq!(record["body"].as_str().unwrap().as_bytes(), body.as_slice(), "the record shows the body as sent");
    let received = receiver.wait_for(2, DEADLINE).await;
    for delivery in &received {
        assert_eq!(delivery.body.as_ref(), body.as_slice(), "the exact bytes, each time");
        assert!(verify_hex(&secret, &delivery.body, delivery.header("x-webhook-signature")));
        assert_eq!(delivery.header("webhook-id"), message.delivery_id.as_str());
    }
}
