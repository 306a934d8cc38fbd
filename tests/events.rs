//! The event pipeline end to end: DynamoDB streams → fan-out → SQS → signed delivery to real
//! receivers on loopback, with retries and the dead-letter queue.

use std::time::Duration;

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use career_core::delivery::DeliveryMessage;
use career_core::signing::verify_hex;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{dynamodb, sqs, unique_user};
use careerctl::pumps::sqs_event;
use serde_json::json;

const SOON: Duration = Duration::from_secs(15);
const NO_DELAY: Duration = Duration::ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_event_reaches_every_matching_subscription_of_its_user_and_nobody_else() {
    let pipeline = Pipeline::start(true).await;
    let (alice, bob) = (unique_user(), unique_user());
    let profile_only = Receiver::start(&[200], NO_DELAY).await;
    let both = Receiver::start(&[200], NO_DELAY).await;
    let assessments_only = Receiver::start(&[200], NO_DELAY).await;
    let bobs = Receiver::start(&[200], NO_DELAY).await;
    let (_, profile_secret) = pipeline.subscribe(&alice, &profile_only.url, &["profile.updated"]).await;
    let (_, both_secret) = pipeline.subscribe(&alice, &both.url, &["assessment.completed", "profile.updated"]).await;
    pipeline.subscribe(&alice, &assessments_only.url, &["assessment.completed"]).await;
    pipeline.subscribe(&bob, &bobs.url, &["profile.updated", "assessment.completed"]).await;

    let updated = pipeline.api.admin.update_profile(&alice).await.unwrap();
    let first = profile_only.wait_for(1, SOON).await.remove(0);
    let second = both.wait_for(1, SOON).await.remove(0);

    for (delivery, secret) in [(&first, &profile_secret), (&second, &both_secret)] {
        assert!(verify_hex(secret, &delivery.body, delivery.header("x-webhook-signature")), "signature verifies");
        assert_eq!(delivery.header("x-webhook-event"), "profile.updated");
        assert_eq!(delivery.header("content-type"), "application/json");
        assert!(delivery.header("user-agent").starts_with("career-webhooks/"));
        assert!(delivery.header("x-webhook-delivery").starts_with("dlv_"));
        assert!(delivery.header("x-webhook-timestamp").parse::<u64>().is_ok());
        let body = delivery.json();
        assert_eq!(body["type"], "profile.updated");
        assert_eq!(body["data"], json!({"userId": alice, "profileId": updated["profileId"]}));
        assert!(body["id"].as_str().unwrap().starts_with("evt_"));
        assert!(body["createdAt"].as_str().unwrap().ends_with('Z'));
    }
    // One event, two subscriptions: the same event id, two delivery ids.
    assert_eq!(first.json()["id"], second.json()["id"]);
    assert_ne!(first.header("x-webhook-delivery"), second.header("x-webhook-delivery"));
    // A wrong secret does not verify.
    assert!(!verify_hex(&both_secret, &first.body, first.header("x-webhook-signature")));

    let assessment = pipeline.api.admin.complete_assessment(&alice, None).await.unwrap();
    let completed = assessments_only.wait_for(1, SOON).await.remove(0);
    assert_eq!(completed.json()["data"], json!({"userId": alice, "assessmentId": assessment["assessmentId"]}));
    both.wait_for(2, SOON).await;
    // Completing it again is no transition, so no event.
    let id = assessment["assessmentId"].as_str().map(String::from);
    pipeline.api.admin.complete_assessment(&alice, id).await.unwrap();

    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(profile_only.received().len(), 1);
    assert_eq!(both.received().len(), 2);
    assert_eq!(assessments_only.received().len(), 1);
    assert!(bobs.received().is_empty(), "another user's subscription got nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_that_fails_twice_gets_three_attempts_with_one_delivery_id() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 503, 200], NO_DELAY).await;
    let (_, secret) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();

    let attempts = receiver.wait_for(3, SOON).await;
    let delivery_ids: Vec<_> = attempts.iter().map(|a| a.header("x-webhook-delivery").to_owned()).collect();
    assert_eq!(delivery_ids, vec![delivery_ids[0].clone(); 3]);
    for attempt in &attempts {
        assert!(verify_hex(&secret, &attempt.body, attempt.header("x-webhook-signature")));
        assert_eq!(attempt.body, attempts[0].body, "every retry sends the same bytes");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.received().len(), 3, "no attempt after a success");
    assert!(pipeline.peek(&pipeline.queues.dead_letter.clone(), 1, Duration::from_secs(1)).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_always_failing_delivery_ends_in_the_dead_letter_queue_after_the_last_attempt() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500], NO_DELAY).await;
    let (subscription_id, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();

    let attempts = receiver.wait_for(3, SOON).await;
    let dead = pipeline.peek(&pipeline.queues.dead_letter.clone(), 1, SOON).await;
    assert_eq!(dead.len(), 1);
    let message: DeliveryMessage = serde_json::from_str(dead[0].body().unwrap()).unwrap();
    assert_eq!(message.subscription_id, subscription_id);
    assert_eq!(message.delivery_id, attempts[0].header("x-webhook-delivery"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.received().len(), pipeline.settings().max_delivery_attempts as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_subscription_is_never_called_again() {
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(2)).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 200], NO_DELAY).await;
    let (subscription_id, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    receiver.wait_for(1, SOON).await;

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks?id={subscription_id}");
    pipeline.api.request(lambda_http::http::Method::DELETE, &path).key(&key).send().await.assert_status(200);
    // The retry comes due after about 2 s: it finds no subscription and is dropped.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(receiver.received().len(), 1);
    assert!(pipeline.peek(&pipeline.queues.delivery.clone(), 1, Duration::from_secs(1)).await.is_empty());
    assert!(pipeline.peek(&pipeline.queues.dead_letter.clone(), 1, Duration::from_secs(1)).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_that_resolves_to_a_private_address_is_refused_at_send_time() {
    // Created while insecure URLs are allowed (as a rebinding host would pass at create time)...
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let url = receiver.url.replace("127.0.0.1", "localhost");
    pipeline.subscribe(&user, &url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    fan_out_the_streams(&pipeline).await;

    // ...and delivered with the protection on.
    let mut guarded = pipeline.settings().clone();
    guarded.allow_insecure_webhook_urls = false;
    let deliver = career_deliver::Deps::new(&dynamodb(), &sqs(), &career_service::kms(), &guarded).unwrap();
    let messages = receive(&pipeline, 1).await;
    let response = career_deliver::handle(&deliver, sqs_event(messages.clone())).await;
    assert_eq!(response.batch_item_failures.len(), 1, "the attempt failed and will be retried");
    assert!(receiver.received().is_empty(), "nothing reached the private address");

    // The same message with the setting on (local stack and tests only) does reach it.
    let open = career_deliver::Deps::new(&dynamodb(), &sqs(), &career_service::kms(), pipeline.settings()).unwrap();
    let response = career_deliver::handle(&open, sqs_event(messages.clone())).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(receiver.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_batch_with_a_malformed_record_still_fans_out_the_others_with_stable_ids() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let (subscription_id, _) =
        pipeline.subscribe(&user, &receiver.url, &["profile.updated", "assessment.completed"]).await;
    let fanout = career_fanout::Deps::new(&dynamodb(), &sqs(), pipeline.settings()).unwrap();

    let profile = record("1", json!({"userId": {"S": user}, "profileId": {"S": "prf_1"}}), "INSERT", json!(null));
    let malformed = record("2", json!({"somethingElse": {"S": "x"}}), "INSERT", json!(null));
    let assessment = record(
        "3",
        json!({"userId": {"S": user}, "assessmentId": {"S": "asm_1"}}),
        "MODIFY",
        json!({"userId": {"S": user}, "assessmentId": {"S": "asm_1"}, "status": {"S": "started"}}),
    );
    let mut batch = StreamEvent::default();
    batch.records = vec![profile.clone(), malformed, assessment];
    let response = career_fanout::handle(&fanout, batch).await;
    assert!(response.batch_item_failures.is_empty(), "a malformed record neither blocks nor fails the batch");

    let messages = receive(&pipeline, 2).await;
    let mut kinds: Vec<_> = messages.iter().map(|m| delivery(m).event.kind.as_str()).collect();
    kinds.sort();
    assert_eq!(kinds, ["assessment.completed", "profile.updated"]);
    assert!(messages.iter().all(|m| delivery(m).subscription_id == subscription_id));

    // The same record processed again yields the same event and delivery ids.
    let mut again = StreamEvent::default();
    again.records = vec![profile];
    career_fanout::handle(&fanout, again).await;
    let repeated = receive(&pipeline, 1).await;
    let first = messages.iter().map(delivery).find(|d| d.event.kind.as_str() == "profile.updated").unwrap();
    assert_eq!(delivery(&repeated[0]).delivery_id, first.delivery_id);
    assert_eq!(delivery(&repeated[0]).event.id, first.event.id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_event_for_25_subscriptions_is_one_message_for_each() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    for _ in 0..25 {
        pipeline.subscribe(&user, "http://127.0.0.1:9/never", &["profile.updated"]).await;
    }
    let fanout = career_fanout::Deps::new(&dynamodb(), &sqs(), pipeline.settings()).unwrap();
    let mut batch = StreamEvent::default();
    batch.records =
        vec![record("9", json!({"userId": {"S": user}, "profileId": {"S": "prf_9"}}), "INSERT", json!(null))];
    assert!(career_fanout::handle(&fanout, batch).await.batch_item_failures.is_empty());
    let messages = receive(&pipeline, 25).await;
    let mut subscriptions: Vec<_> = messages.iter().map(|m| delivery(m).subscription_id).collect();
    subscriptions.sort();
    subscriptions.dedup();
    assert_eq!(subscriptions.len(), 25, "one message per subscription");
}

fn record(sequence: &str, keys: serde_json::Value, name: &str, old: serde_json::Value) -> EventRecord {
    let mut new = keys.clone();
    if let (Some(new), true) = (new.as_object_mut(), keys.get("assessmentId").is_some()) {
        new.insert("status".into(), json!({"S": "completed"}));
    }
    serde_json::from_value(json!({
        "awsRegion": "us-east-1",
        "eventID": format!("event-{sequence}"),
        "eventName": name,
        "eventSource": "aws:dynamodb",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/test/stream/2026",
        "dynamodb": {"ApproximateCreationDateTime": 1795766400.0, "Keys": keys, "NewImage": new, "OldImage": old,
                     "SequenceNumber": sequence, "SizeBytes": 64, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    }))
    .expect("a stream record")
}

fn delivery(message: &aws_sdk_sqs::types::Message) -> DeliveryMessage {
    serde_json::from_str(message.body().unwrap()).unwrap()
}

/// Receives `count` messages from the delivery queue (with their receive counts).
async fn receive(pipeline: &Pipeline, count: usize) -> Vec<aws_sdk_sqs::types::Message> {
    let mut messages = Vec::new();
    let deadline = std::time::Instant::now() + SOON;
    while messages.len() < count && std::time::Instant::now() < deadline {
        let output = sqs()
            .receive_message()
            .queue_url(&pipeline.queues.delivery)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .unwrap();
        messages.extend(output.messages.unwrap_or_default());
    }
    assert_eq!(messages.len(), count);
    messages
}

/// Runs the stream pump just long enough to fan out what the streams hold.
async fn fan_out_the_streams(pipeline: &Pipeline) {
    let fanout = career_fanout::Deps::new(&dynamodb(), &sqs(), pipeline.settings()).unwrap();
    let tables = vec![pipeline.settings().tables.profiles.clone(), pipeline.settings().tables.assessments.clone()];
    let streams = career_service::streams();
    let pump = careerctl::pumps::run_stream_pump(dynamodb(), streams, tables, &fanout, None);
    let _ = tokio::time::timeout(Duration::from_secs(2), pump).await;
}
