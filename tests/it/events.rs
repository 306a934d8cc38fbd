//! The event pipeline end to end: DynamoDB streams → fan-out → SQS → signed delivery to real
//! receivers on loopback, with retries and the dead-letter queue.

use std::time::Duration;

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::delivery::attempt::{Answer, Outcome};
use career_core::delivery::log::{AttemptRecord, DeliveryStatus};
use career_core::delivery::DeliveryMessage;
use career_core::events::EventKind;
use career_core::ids;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::WebhookTable;
use career_core::webhooks::rotation::SigningSecrets;
use career_core::webhooks::signing::verify_hex;
use career_core::webhooks::{Health, SecretsAtRest, Subscription, WebhookSecret, MAX_SUBSCRIPTIONS_PER_USER};
use career_service::acting_as;
use career_service::calls::Calls;
use career_service::in_first_group;
use career_service::logs::capture_logs;
use career_service::pipeline::Pipeline;
use career_service::receiver::{HangingReceiver, Receiver};
use career_service::typed;
use career_service::DEADLINE;
use career_service::{clients, dynamodb, eventually, sqs, unique_user};
use local_aws::event_sources::pumps::sqs_event;
use local_aws::template::function;
use serde_json::json;

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
    let first = profile_only.wait_for(1, DEADLINE).await.remove(0);
    let second = both.wait_for(1, DEADLINE).await.remove(0);

    for (delivery, secret) in [(&first, &profile_secret), (&second, &both_secret)] {
        assert!(verify_hex(secret, &delivery.body, delivery.header("x-webhook-signature")), "signature verifies");
        assert_eq!(delivery.header("x-webhook-event"), "profile.updated");
        assert_eq!(delivery.header("content-type"), "application/json");
        assert!(delivery.header("user-agent").starts_with("career-webhooks/"));
        assert!(delivery.header("x-webhook-delivery").starts_with("dlv_"));
        assert!(delivery.header("x-webhook-timestamp").parse::<u64>().is_ok());
        let body = delivery.json();
        assert_eq!(body["type"], "profile.updated");
        assert_eq!(body["data"], json!({"userId": alice, "profileId": updated.profile_id}));
        assert!(body["id"].as_str().unwrap().starts_with("evt_"));
        assert!(body["createdAt"].as_str().unwrap().ends_with('Z'));
    }
    // One event, two subscriptions: the same event id, two delivery ids.
    assert_eq!(first.json()["id"], second.json()["id"]);
    assert_ne!(first.header("x-webhook-delivery"), second.header("x-webhook-delivery"));
    // A wrong secret does not verify.
    assert!(!verify_hex(&both_secret, &first.body, first.header("x-webhook-signature")));

    let assessment = pipeline.api.admin.complete_assessment(&alice, None).await.unwrap();
    let completed = assessments_only.wait_for(1, DEADLINE).await.remove(0);
    assert_eq!(completed.json()["data"], json!({"userId": alice, "assessmentId": assessment.assessment_id}));
    both.wait_for(2, DEADLINE).await;
    // Completing it again is no transition, so no event: the next assessment's event, after
    // it in the table's stream and on each subscription's lane, is the next to arrive.
    let id = Some(assessment.assessment_id.to_string());
    pipeline.api.admin.complete_assessment(&alice, id).await.unwrap();
    let next = pipeline.api.admin.complete_assessment(&alice, None).await.unwrap();
    let arrived = assessments_only.wait_for(2, DEADLINE).await.remove(1);
    assert_eq!(arrived.json()["data"]["assessmentId"], json!(next.assessment_id), "the repeat sent nothing");
    both.wait_for(3, DEADLINE).await;

    pipeline.drained().await;
    assert_eq!(profile_only.received().len(), 1);
    assert_eq!(both.received().len(), 3);
    assert_eq!(assessments_only.received().len(), 2);
    assert!(bobs.received().is_empty(), "another user's subscription got nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_that_fails_twice_gets_three_attempts_with_one_delivery_id() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 503, 200], NO_DELAY).await;
    let (subscription_id, secret) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();

    let attempts = receiver.wait_for(3, DEADLINE).await;
    let delivery_ids: Vec<_> = attempts.iter().map(|a| a.header("x-webhook-delivery").to_owned()).collect();
    assert_eq!(delivery_ids, vec![delivery_ids[0].clone(); 3]);
    for attempt in &attempts {
        assert!(verify_hex(&secret, &attempt.body, attempt.header("x-webhook-signature")));
        assert_eq!(attempt.body, attempts[0].body, "every retry sends the same bytes");
    }
    let settled = pipeline.settled(&subscription_id).await;
    assert_eq!((settled.len(), settled[0].status, settled[0].attempts), (1, DeliveryStatus::Succeeded, 3));
    assert_eq!(receiver.received().len(), 3, "no attempt after a success");
    assert_eq!(career_service::held(&sqs(), &pipeline.queues.dead_letter).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_always_failing_delivery_ends_in_the_dead_letter_queue_after_the_last_attempt() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500], NO_DELAY).await;
    let (subscription_id, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();

    let attempts = receiver.wait_for(3, DEADLINE).await;
    let dead = pipeline.peek(&pipeline.queues.dead_letter.clone(), 1, DEADLINE).await;
    assert_eq!(dead.len(), 1);
    let message: DeliveryMessage = serde_json::from_str(dead[0].body().unwrap()).unwrap();
    assert_eq!(message.subscription_id.as_str(), subscription_id);
    assert_eq!(message.delivery_id.as_str(), attempts[0].header("x-webhook-delivery"));
    let settled = pipeline.settled(&subscription_id).await;
    assert_eq!((settled.len(), settled[0].status), (1, DeliveryStatus::Failed));
    assert_eq!(receiver.received().len(), pipeline.settings().max_delivery_attempts as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_subscription_is_never_called_again() {
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(2)).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 200], NO_DELAY).await;
    let (subscription_id, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    receiver.wait_for(1, DEADLINE).await;

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks?id={subscription_id}");
    pipeline.api.request(lambda_http::http::Method::DELETE, &path).key(&key).send().await.assert_status(200);
    // The retry comes due after about 2 s: it finds no subscription and is dropped.
    pipeline.drained().await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(career_service::held(&sqs(), &pipeline.queues.dead_letter).await, 0, "nothing dead-lettered");
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
    let messages = fan_out_the_streams_and_take(&pipeline, 1).await;

    // ...and delivered with the protection on.
    let mut guarded = pipeline.settings().clone();
    guarded.webhook_urls = career_core::webhooks::UrlPolicy::default();
    let deliver = career_service::deliver_instance(&guarded);
    let response = career_deliver::handle(&deliver, sqs_event(messages)).await;
    assert!(response.batch_item_failures.is_empty(), "the main lane is done with it");
    assert!(receiver.received().is_empty(), "nothing reached the private address");
    let handed_over = pipeline.peek(&pipeline.queues.retry, 1, DEADLINE).await;
    let retry: DeliveryMessage = serde_json::from_str(handed_over[0].body().unwrap()).unwrap();
    assert_eq!(attempts_of(&pipeline, &retry).await, 1, "the failed attempt went to the retry lane, counted");

    // Its retry with the setting on (local stack and tests only) does reach it.
    let open = career_service::deliver_instance(pipeline.settings());
    let response = career_deliver::handle(&open, sqs_event(handed_over)).await;
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(receiver.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_batch_with_a_malformed_record_still_fans_out_the_others_and_a_repeat_changes_nothing() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let (subscription_id, _) =
        pipeline.subscribe(&user, &receiver.url, &["profile.updated", "assessment.completed"]).await;
    let fanout = fanout_of(&pipeline);

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

    let messages = take(&pipeline, 2).await;
    let mut kinds: Vec<_> = messages.iter().map(|m| delivery(m).event.kind().as_str()).collect();
    kinds.sort();
    assert_eq!(kinds, ["assessment.completed", "profile.updated"]);
    assert!(messages.iter().all(|m| delivery(m).subscription_id.as_str() == subscription_id));

    // The same record processed again (a retried batch) changes nothing: its delivery, which
    // succeeded meanwhile, keeps its record and is not queued again (contract section 12).
    let first = messages.iter().map(delivery).find(|d| d.event.kind().as_str() == "profile.updated").unwrap();
    let table = DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries);
    let answer = Answer { status: 204, body: String::new(), retry_after: None };
    let success = AttemptRecord::succeeded(&Outcome::Delivered(answer), Timestamp::now());
    assert!(table.record_attempt(&first, &first.body(), &success, None).await.unwrap());
    let mut again = StreamEvent::default();
    again.records = vec![profile];
    assert!(career_fanout::handle(&fanout, again).await.batch_item_failures.is_empty());
    assert_nothing_queued(&pipeline).await;
    let record = table.get(&first.subscription_id, &first.delivery_id).await.unwrap().expect("the record").record;
    assert_eq!((record.status, record.attempts), (DeliveryStatus::Succeeded, 1), "{record:?}");
}

/// Nothing waits on either lane.
async fn assert_nothing_queued(pipeline: &Pipeline) {
    for queue in [&pipeline.queues.delivery, &pipeline.queues.retry] {
        let output = sqs().receive_message().queue_url(queue).wait_time_seconds(1).send().await.unwrap();
        assert_eq!(output.messages.unwrap_or_default().len(), 0, "a message on {queue}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_event_for_25_subscriptions_is_one_message_for_each() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    for _ in 0..25 {
        pipeline.subscribe(&user, &format!("{}/never", career_service::sink_url()), &["profile.updated"]).await;
    }
    let fanout = fanout_of(&pipeline);
    fan_out_profile_change(&fanout, &user, "9").await;
    let messages = take(&pipeline, 25).await;
    let mut subscriptions: Vec<_> = messages.iter().map(|m| delivery(m).subscription_id).collect();
    subscriptions.sort();
    subscriptions.dedup();
    assert_eq!(subscriptions.len(), 25, "one message per subscription");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_healthy_delivery_does_not_wait_behind_a_receiver_that_hangs() {
    let pipeline = Pipeline::start(true).await;
    let (stuck, healthy_user) = (unique_user(), unique_user());
    let hanging = HangingReceiver::start().await;
    let healthy = Receiver::start(&[200], NO_DELAY).await;
    let (stuck_subscription, _) = pipeline.subscribe(&stuck, &hanging.url, &["profile.updated"]).await;
    pipeline.subscribe(&healthy_user, &healthy.url, &["profile.updated"]).await;
    // More deliveries to the hanging receiver than a lane has consumers, fanned out as one
    // stream batch (the stream pump's polling would only add time to what follows).
    let main_lane = &career_service::queue_sources(function::DELIVER, pipeline.settings())[0];
    let fanout = fanout_of(&pipeline);
    let sequences: Vec<String> = (1..=2 * main_lane.maximum_concurrency).map(|n| n.to_string()).collect();
    fan_out_profile_changes(&fanout, &stuck, &sequences).await;
    hanging.wait_for(1, DEADLINE).await;

    // The healthy change goes straight to the fan-out too: between the first hanging attempt
    // and the healthy arrival lie only the fan-out's call and one turn of the delivery
    // function, so a loaded machine does not let the hanging attempts time out (the contract's
    // 10 s) before a healthy delivery that did not wait behind them could arrive.
    fan_out_profile_change(&fanout, &healthy_user, "100").await;
    healthy.wait_for(1, DEADLINE).await;
    assert_eq!(hanging.closed(), 0, "the healthy delivery arrived while every hanging attempt was still waiting");
    assert!(hanging.taken() <= main_lane.batch_size as usize, "one batch of the hanging subscription at a time");

    // Its first attempt timed out: the subscription is failing, and what it still had
    // queued goes to the retry lane.
    wait_for_failure_clock(&pipeline, &stuck, &stuck_subscription, true).await;
    assert!(hanging.closed() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_failure_clock_starts_at_the_first_failure_and_stops_at_the_next_success() {
    let pipeline = Pipeline::with_settings(true, |s| s.max_delivery_attempts = 4).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 500, 500, 200], NO_DELAY).await;
    let (subscription_id, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let table = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    let failing_since =
        || async { table.get(&typed(&user), &typed(&subscription_id)).await.unwrap().unwrap().health.failing_since() };
    assert_eq!(failing_since().await, None);
    pipeline.api.admin.update_profile(&user).await.unwrap();

    // An attempt is made only once the previous failure is handled, clock included.
    receiver.wait_for(2, DEADLINE).await;
    let started = failing_since().await.expect("the first failure started the clock");
    receiver.wait_for(3, DEADLINE).await;
    assert_eq!(failing_since().await, Some(started), "a later failure leaves the clock as it is");
    receiver.wait_for(4, DEADLINE).await;
    wait_for_failure_clock(&pipeline, &user, &subscription_id, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliveries_to_a_failing_subscription_go_straight_to_the_retry_lane() {
    let (pipeline, user, subscription_id, receiver) = failing_subscription().await;

    // The fan-out puts a new delivery on the retry lane...
    let fanout = fanout_of(&pipeline);
    fan_out_profile_change(&fanout, &user, "7").await;
    let on_retry_lane = pipeline.peek(&pipeline.queues.retry, 1, DEADLINE).await;
    assert_eq!(delivery(&on_retry_lane[0]).subscription_id.as_str(), subscription_id);
    assert_eq!(career_service::held(&sqs(), &pipeline.queues.delivery).await, 0, "nothing on the main lane");

    // ...and one that was already on the main lane is handed over without an attempt.
    let queues = DeliveryQueues::new(&clients(), pipeline.settings()).unwrap();
    queues.post_all(&in_first_group(&[delivery(&on_retry_lane[0])])).await.unwrap();
    let deliver = career_service::deliver_instance(pipeline.settings());
    let response = career_deliver::handle(&deliver, sqs_event(take(&pipeline, 1).await)).await;
    assert!(response.batch_item_failures.is_empty());
    assert!(receiver.received().is_empty(), "no attempt on the main lane");
    let handed_over = pipeline.peek(&pipeline.queues.retry, 1, DEADLINE).await;
    assert_eq!(attempts_of(&pipeline, &delivery(&handed_over[0])).await, 0, "no attempt counted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_subscriptions_deliveries_in_one_batch_leave_the_main_lane_together() {
    let (pipeline, user, _, receiver) = failing_subscription().await;
    // Four deliveries with their records, as the fan-out writes them, queued on the main lane
    // (as they would be had the clock started after they were queued).
    let fanout = fanout_of(&pipeline);
    for sequence in ["1", "2", "3", "4"] {
        fan_out_profile_change(&fanout, &user, sequence).await;
    }
    let deliveries: Vec<DeliveryMessage> =
        pipeline.peek(&pipeline.queues.retry, 4, DEADLINE).await.iter().map(delivery).collect();
    DeliveryQueues::new(&clients(), pipeline.settings()).unwrap().post_all(&in_first_group(&deliveries)).await.unwrap();
    let batch = career_service::receive_messages(&pipeline.queues.delivery, 4).await;

    let (dynamodb_calls, sqs_calls) = (Calls::default(), Calls::default());
    let logging = career_service::clients_logging_dynamodb(&dynamodb_calls)
        .with_sqs(career_service::clients_logging_sqs(&sqs_calls).sqs().clone());
    let settings = career_service::function_settings(function::DELIVER, pipeline.settings());
    let deliver =
        career_deliver::Deps::new(&acting_as(function::DELIVER, pipeline.settings(), &logging), &settings).unwrap();
    let response = career_deliver::handle(&deliver, sqs_event(batch)).await;

    assert!(response.batch_item_failures.is_empty());
    assert!(receiver.received().is_empty(), "no attempt on the main lane");
    let read = dynamodb_calls.since(0);
    assert_eq!(read.iter().filter(|call| *call == "GetItem").count(), 1, "the subscription read once: {read:?}");
    // One subscription's batch is deleted by the event source mapping (nothing reported
    // failed), not early by the function as well.
    assert_eq!(sqs_calls.since(0), ["SendMessageBatch"], "one move, and no deletion of the function's own");
    let handed_over = pipeline.peek(&pipeline.queues.retry, 4, DEADLINE).await;
    assert_eq!(handed_over.len(), 4);
    for message in &handed_over {
        assert_eq!(attempts_of(&pipeline, &delivery(message)).await, 0, "no attempt counted");
    }
    let in_flight = aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible;
    let in_flight = pipeline.count(&pipeline.queues.delivery, in_flight).await;
    // Handed over and reported done: the mapping deletes all four with the batch.
    assert_eq!(in_flight, 4, "the four wait for the mapping's deletion, none deleted twice");
}

/// A pipeline, and a user's subscription to `profile.updated` (with its receiver) whose
/// failure clock runs.
async fn failing_subscription() -> (Pipeline, String, String, Receiver) {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let (subscription_id, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let table = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    let failed = career_service::failed_attempt(typed("2026-11-27T08:00:00.000Z"));
    table.start_failure_clock(&typed(&user), &typed(&subscription_id), &failed).await.unwrap();
    (pipeline, user, subscription_id, receiver)
}

/// The fan-out as the pipeline's stack deploys it.
fn fanout_of(pipeline: &Pipeline) -> career_fanout::Deps {
    career_fanout::Deps::new(
        &acting_as(function::FANOUT, pipeline.settings(), &clients()),
        &career_service::function_settings(function::FANOUT, pipeline.settings()),
    )
    .unwrap()
}

/// The attempts the delivery's record counts.
async fn attempts_of(pipeline: &Pipeline, delivery: &DeliveryMessage) -> u32 {
    let table = career_core::store::deliveries::DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries);
    table.get(&delivery.subscription_id, &delivery.delivery_id).await.unwrap().expect("a record").record.attempts
}

#[test]
fn the_delivery_log_shows_receiver_urls_without_query_string_or_user_info() {
    // One thread runs the handler, so every line it logs is on this thread's capture.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // Bound but not listening: connections are refused, and no other test can take the port.
    let closed = tokio::net::TcpSocket::new_v4().unwrap();
    closed.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    let logged = capture_logs(|| runtime.block_on(deliver_to_a_refused_port_with_secrets_in_the_url(closed_port)));
    assert!(logged.contains("delivery failed") && logged.contains("connection refused"), "{logged}");
    assert!(logged.contains(&format!("http://127.0.0.1:{closed_port}/hook")), "{logged}");
    for secret in ["s3cret", "token", "hook-user"] {
        assert!(!logged.contains(secret), "{secret} is in the log: {logged}");
    }
}

/// Fans out one change to a subscription of a new user whose stored URL carries user-info
/// and a query string, and hands its message to the delivery handler: the send is refused.
async fn deliver_to_a_refused_port_with_secrets_in_the_url(closed_port: u16) {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    // Stored directly: the API refuses user-info in a URL.
    let url = format!("http://hook-user:pw-s3cret@127.0.0.1:{closed_port}/hook?token=qs-s3cret");
    let subscription_id = ids::new_id(ids::SUBSCRIPTION);
    let sealer = Sealer::new(&clients(), pipeline.settings()).unwrap();
    let sealed = sealer
        .seal(&typed(&user), &typed(&subscription_id), &SigningSecrets::new(WebhookSecret::generate(), false))
        .await
        .unwrap();
    let subscription = Subscription {
        user_id: typed(&user),
        id: typed(&subscription_id),
        target: career_core::webhooks::Target::Url(url),
        events: vec![EventKind::ProfileUpdated],
        secrets: SecretsAtRest::Sealed(sealed),
        public_keys: None,
        trace_context: false,
        created_at: career_core::clock::Timestamp::now(),
        health: Health::Active,
        max_deliveries_per_second: None,
        while_disabled: career_core::webhooks::WhileDisabled::Hold,
        identity_token: None,
        fast_since: None,
        slow_at: None,
        recovered_at: None,
        next_probe_at: None,
        probes: 0,
    };
    let table = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    table.insert(&subscription, MAX_SUBSCRIPTIONS_PER_USER).await.unwrap();
    let fanout =
        career_fanout::Deps::new(&acting_as(function::FANOUT, pipeline.settings(), &clients()), pipeline.settings())
            .unwrap();
    fan_out_profile_change(&fanout, &user, "8").await;
    let deliver = career_service::deliver_instance(pipeline.settings());
    career_deliver::handle(&deliver, sqs_event(take(&pipeline, 1).await)).await;
}

/// Hands the fan-out handler one stream batch: `user`'s profile `prf_<sequence>` created.
async fn fan_out_profile_change(fanout: &career_fanout::Deps, user: &str, sequence: &str) {
    fan_out_profile_changes(fanout, user, &[sequence]).await
}

/// A profile of `user` created for each of `sequences`, fanned out as one stream batch.
async fn fan_out_profile_changes(fanout: &career_fanout::Deps, user: &str, sequences: &[impl AsRef<str>]) {
    let mut batch = StreamEvent::default();
    batch.records = sequences
        .iter()
        .map(|sequence| {
            let sequence = sequence.as_ref();
            let keys = json!({"userId": {"S": user}, "profileId": {"S": format!("prf_{sequence}")}});
            record(sequence, keys, "INSERT", json!(null))
        })
        .collect();
    assert!(career_fanout::handle(fanout, batch).await.batch_item_failures.is_empty());
}

/// Waits until the subscription's failure clock runs (`running`) or not.
async fn wait_for_failure_clock(pipeline: &Pipeline, user: &str, subscription_id: &str, running: bool) {
    let table = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    eventually(format!("the failure clock running: {running}"), || async {
        let stored = table.get(&typed(user), &typed(subscription_id)).await.unwrap().unwrap();
        let failing_since = stored.health.failing_since();
        if failing_since.is_some() == running {
            Ok(())
        } else {
            Err(failing_since)
        }
    })
    .await;
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

/// Receives `count` messages from the main lane (with their attributes) and deletes them, so
/// that their message groups are free again.
async fn take(pipeline: &Pipeline, count: usize) -> Vec<aws_sdk_sqs::types::Message> {
    let messages = career_service::receive_messages(&pipeline.queues.delivery, count).await;
    for message in &messages {
        let receipt = message.receipt_handle().unwrap_or_default();
        sqs().delete_message().queue_url(&pipeline.queues.delivery).receipt_handle(receipt).send().await.unwrap();
    }
    messages
}

/// Runs the stream pump until `count` messages it fanned out are taken from the main lane
/// (see [`take`]), however long the streams take on a loaded machine.
async fn fan_out_the_streams_and_take(pipeline: &Pipeline, count: usize) -> Vec<aws_sdk_sqs::types::Message> {
    let fanout_clients = acting_as(function::FANOUT, pipeline.settings(), &clients());
    let fanout_settings = career_service::function_settings(function::FANOUT, pipeline.settings());
    let fanout = career_fanout::Deps::new(&fanout_clients, &fanout_settings).unwrap();
    let sources = career_service::stream_sources(function::FANOUT, pipeline.settings());
    let pump = local_aws::event_sources::pumps::run_stream_pump(fanout_clients, sources, &fanout, None);
    tokio::select! {
        () = pump => unreachable!("the stream pump runs until dropped"),
        taken = take(pipeline, count) => taken,
    }
}
