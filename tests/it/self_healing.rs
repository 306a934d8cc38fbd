//! Deliveries that heal themselves and listen to the receiver (contract section 12), end to
//! end against DynamoDB Local and the SQS emulator with receivers on loopback: the record
//! first and the sweep, generations, claims that keep the sweep off a delivery in flight,
//! manual retries that take a delivery over from a queued copy or an attempt in flight,
//! per-message acknowledgement, `Retry-After`, `410 Gone` and recovery after an outage.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use career_core::aws::queue::DeliveryQueues;
use career_core::aws::runtime::Invocation;
use career_core::clock::Timestamp;
use career_core::config::Settings;
use career_core::delivery::attempt::{Outcome, SendFailure};
use career_core::delivery::groups::Groups;
use career_core::delivery::log::{AttemptRecord, DeliveryRecord, DeliveryStatus};
use career_core::delivery::plan::{Claim, Lease, GONE_ERROR};
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::ids::{SubscriptionId, UserId};
use career_core::store::deliveries::{DeliveryTable, DueShard, Overdue, RecordKey};
use career_core::store::webhooks::WebhookTable;
use career_core::telemetry::SWEEP_LAG;
use career_core::webhooks::DisabledReason;
use career_service::calls::Calls;
use career_service::in_first_group;
use career_service::logs::capture_logs;
use career_service::pipeline::Pipeline;
use career_service::receiver::{HangingReceiver, Receiver};
use career_service::DEADLINE;
use career_service::{clients, deliver_instance, dynamodb, eventually_within, typed, unique_user, Api};
use career_sweep::{Reading, Shards};
use lambda_http::http::Method;
use local_aws::event_sources::pumps::run_queue_pump;
use local_aws::template::function;
use serde_json::{json, Value};

const NO_DELAY: Duration = Duration::ZERO;
/// The sweep window of the tests that run the sweep: shorter than their sends, so a sweep
/// that took a delivery in flight, or one waiting in a backlog, would send it a second time.
const SHORT_WINDOW: Duration = Duration::from_secs(5);
const SWEEP_EVERY: Duration = Duration::from_secs(1);

fn deliveries(pipeline: &Pipeline) -> DeliveryTable {
    DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries)
}

/// The subscription's records, newest first.
async fn records(pipeline: &Pipeline, subscription: &str) -> Vec<DeliveryRecord> {
    let page = deliveries(pipeline).list(&typed(subscription), None, 100, None).await.unwrap();
    page.deliveries
}

/// Waits until the subscription has `count` records and all satisfy `done`.
async fn records_when(
    pipeline: &Pipeline,
    subscription: &str,
    count: usize,
    done: impl Fn(&DeliveryRecord) -> bool,
) -> Vec<DeliveryRecord> {
    records_within(pipeline, subscription, count, DEADLINE, done).await
}

/// [`records_when`], waiting up to `within`.
async fn records_within(
    pipeline: &Pipeline,
    subscription: &str,
    count: usize,
    within: Duration,
    done: impl Fn(&DeliveryRecord) -> bool,
) -> Vec<DeliveryRecord> {
    let what = format!("{subscription}: {count} records as wanted");
    eventually_within(within, what, || async {
        let found = records(pipeline, subscription).await;
        if found.len() == count && found.iter().all(&done) {
            Ok(found)
        } else {
            Err(found)
        }
    })
    .await
}

/// `count` profile changes of `user`, `count` events, written at once: their deliveries are
/// queued close together however slow each write is on a loaded machine (the sibling tests
/// below hold a hanging or slow receiver's first attempt against the 10-second send timeout,
/// and one write after another would spend that time before the last event exists).
async fn events(pipeline: &Pipeline, user: &str, count: usize) {
    let writes = (0..count).map(|_| pipeline.api.admin.update_profile(user));
    for written in futures_util::future::join_all(writes).await {
        written.unwrap();
    }
}

/// A pipeline with the short sweep window, whose sweep runs every second.
async fn swept_pipeline(change: impl FnOnce(&mut Settings)) -> Pipeline {
    let mut pipeline = Pipeline::with_settings(true, |settings| {
        settings.sweep_after = SHORT_WINDOW;
        change(settings);
    })
    .await;
    pipeline.sweep_every(SWEEP_EVERY);
    pipeline
}

/// Six receivers that answer 200 after 9 s, with a 5-second sweep window: each delivery is
/// received once and its one attempt counted. Before deliveries claimed their records, the
/// sweep took each record while its send was in flight and sent it again, and the first
/// attempt could not be recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_receivers_get_each_delivery_once_under_a_short_sweep_window() {
    let pipeline = swept_pipeline(|_| {}).await;
    let user = unique_user();
    let mut receivers = Vec::new();
    for _ in 0..6 {
        let receiver = Receiver::start(&[200], Duration::from_secs(9)).await;
        let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
        receivers.push((receiver, subscription));
    }
    events(&pipeline, &user, 1).await;

    for (receiver, subscription) in &receivers {
        let done = records_when(&pipeline, subscription, 1, |r| r.status == DeliveryStatus::Succeeded).await;
        assert_eq!(done[0].attempts, 1, "{subscription}: one attempt, counted");
        assert_eq!(receiver.received().len(), 1, "{subscription}: received once");
    }
}

/// A receiver that never answers, with a 5-second sweep window: exactly the configured
/// attempts (three, each timing out after 10 s), then `failed`, the dead-letter queue and
/// the failure clock. Before, the sweep took the record during every send, the attempts
/// stayed at zero and the delivery was sent again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_that_never_answers_gets_exactly_the_configured_attempts_then_fails() {
    let pipeline = swept_pipeline(|_| {}).await;
    let user = unique_user();
    let hanging = HangingReceiver::start().await;
    let (subscription, _) = pipeline.subscribe(&user, &hanging.url, &["profile.updated"]).await;
    events(&pipeline, &user, 1).await;

    let failed = |r: &DeliveryRecord| r.status == DeliveryStatus::Failed;
    let record = records_within(&pipeline, &subscription, 1, Duration::from_secs(90), failed).await;
    let attempts = pipeline.settings().max_delivery_attempts;
    assert_eq!((record[0].attempts, hanging.taken()), (attempts, attempts as usize));
    assert_eq!(record[0].last_error.as_deref(), Some("timed out after 10 s"));
    let dead = pipeline.peek(&pipeline.queues.dead_letter, 1, DEADLINE).await;
    let dead: DeliveryMessage = serde_json::from_str(dead[0].body().unwrap()).unwrap();
    assert_eq!(dead.delivery_id, record[0].id, "the delivery is in the dead-letter queue");
    let webhooks = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    let stored = webhooks.get(&typed(&user), &typed(&subscription)).await.unwrap().unwrap();
    assert!(stored.health.failing_since().is_some(), "the failure clock runs");
}

/// Two hundred deliveries queued at once behind one consumer of one batch at a time, whose
/// receiver takes a second per delivery, with a 5-second sweep window: most wait in the
/// backlog far longer than the window, and the sweep runs every second throughout. It takes
/// none of them (their messages are still on the lane), no delivery is received twice, and
/// each is recorded as one successful attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backlog_behind_one_slow_consumer_is_received_once_each() {
    let pipeline = Pipeline::with_settings(false, |settings| settings.sweep_after = SHORT_WINDOW).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::from_secs(1)).await;
    let mut subscriptions = Vec::new();
    let mut messages = Vec::new();
    for _ in 0..10 {
        let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
        for _ in 0..20 {
            let event = Event::ping(&typed(&subscription));
            messages.push(DeliveryMessage::new(&event, &typed(&user), &typed(&subscription)));
        }
        subscriptions.push(subscription);
    }
    // As the fan-out does: the records first, then the messages on the main lane.
    let pending: Vec<_> = messages.iter().map(|message| (message, DeliveryStatus::Pending)).collect();
    for chunk in pending.chunks(25) {
        deliveries(&pipeline).insert_new(chunk, Timestamp::now()).await.unwrap();
    }
    DeliveryQueues::new(&clients(), pipeline.settings()).unwrap().post_all(&in_first_group(&messages)).await.unwrap();
    // The lanes as the template declares them, but the main lane with one consumer: slow.
    let mut lanes = career_service::queue_sources(function::DELIVER, pipeline.settings());
    lanes
        .iter_mut()
        .filter(|lane| lane.queue_url == pipeline.queues.delivery)
        .for_each(|lane| lane.maximum_concurrency = 1);
    let consumers: Vec<_> = lanes
        .into_iter()
        .map(|lane| {
            let deliver = deliver_instance(pipeline.settings());
            let sqs = career_service::acting_as(function::DELIVER, pipeline.settings(), &clients()).sqs().clone();
            tokio::spawn(async move { run_queue_pump(sqs, lane, &deliver, std::future::pending()).await })
        })
        .collect();
    let sweep = career_sweep::Deps::new(
        &career_service::acting_as(function::SWEEP, pipeline.settings(), &clients()),
        &career_service::function_settings(function::SWEEP, pipeline.settings()),
    )
    .unwrap();
    let requeued = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&requeued);
    let sweeping = tokio::spawn(async move {
        loop {
            let swept = career_sweep::sweep(&sweep, &Shards::all(), Timestamp::now()).await.unwrap();
            counted.fetch_add(swept.requeued, Ordering::SeqCst);
            tokio::time::sleep(SWEEP_EVERY).await;
        }
    });

    for subscription in &subscriptions {
        let succeeded = |r: &DeliveryRecord| r.status == DeliveryStatus::Succeeded;
        let done = records_within(&pipeline, subscription, 20, Duration::from_secs(180), succeeded).await;
        assert!(done.iter().all(|record| record.attempts == 1), "{done:#?}");
    }
    for consumer in consumers {
        consumer.abort();
    }
    sweeping.abort();
    assert_eq!(requeued.load(Ordering::SeqCst), 0, "the sweep took nothing from the backlog");
    let mut ids: Vec<String> = receiver.received().iter().map(|r| r.header("webhook-id").to_owned()).collect();
    ids.sort_unstable();
    let received = ids.len();
    ids.dedup();
    assert_eq!((received, ids.len()), (200, 200), "every delivery received once");
}

/// A healthy receiver's deliveries must not wait for a sibling subscription of the same user
/// whose receiver hangs: before per-message acknowledgement, the healthy one's next delivery
/// waited for the batch it shared with the hanging one (up to the 10-second send timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_healthy_sibling_does_not_wait_for_a_hanging_receiver_of_the_same_user() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let hanging = HangingReceiver::start().await;
    let healthy = Receiver::start(&[200], NO_DELAY).await;
    pipeline.subscribe(&user, &hanging.url, &["profile.updated"]).await;
    pipeline.subscribe(&user, &healthy.url, &["profile.updated"]).await;
    events(&pipeline, &user, 4).await;

    healthy.wait_for(4, DEADLINE).await;
    assert_eq!(hanging.closed(), 0, "all four arrived while the sibling's first attempts still hung");
}

/// The same with a sibling that succeeds, but only after 9.5 s: it never counts as failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_healthy_sibling_does_not_wait_for_a_slow_but_successful_receiver_of_the_same_user() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let answers_after = Duration::from_millis(9500);
    let slow = Receiver::start(&[200], answers_after).await;
    let healthy = Receiver::start(&[200], NO_DELAY).await;
    pipeline.subscribe(&user, &slow.url, &["profile.updated"]).await;
    pipeline.subscribe(&user, &healthy.url, &["profile.updated"]).await;
    events(&pipeline, &user, 4).await;

    let arrived = healthy.wait_for(4, DEADLINE).await;
    // The slow subscription's deliveries may arrive together (one batch of its message group,
    // as the fan-out queues a stream batch's messages together) or one after another; either
    // way its first answer comes `answers_after` its first arrival.
    let first_slow_answer = slow.wait_for(1, DEADLINE).await[0].at + answers_after;
    assert!(arrived[3].at < first_slow_answer, "all four arrived while the slow sibling's first answer was pending");
    slow.wait_for(4, DEADLINE).await;
}

/// `Retry-After: 3` on a 429 stretches a 1-second schedule's first wait to 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_429_with_retry_after_waits_as_long_as_the_receiver_asks() {
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(1)).await;
    let user = unique_user();
    let receiver = Receiver::scripted(&[429, 200], "slow down", &[("Retry-After", "3")], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    events(&pipeline, &user, 1).await;

    let attempts = receiver.wait_for(2, DEADLINE).await;
    let waited = attempts[1].at - attempts[0].at;
    assert!(waited >= Duration::from_secs(3), "the retry came after {waited:?}; the schedule alone says 0.8-1.2 s");
    let record = records_when(&pipeline, &subscription, 1, |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!(record[0].attempts, 2);
}

/// `410 Gone` ends the delivery at once and disables the subscription as gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_410_fails_the_delivery_at_once_and_disables_the_subscription() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[410], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    events(&pipeline, &user, 1).await;

    let failed = records_when(&pipeline, &subscription, 1, |r| r.status == DeliveryStatus::Failed).await;
    assert_eq!((failed[0].attempts, failed[0].last_response_status), (1, Some(410)), "no retry after a 410");
    assert_eq!(failed[0].last_error.as_deref(), Some(GONE_ERROR));
    let key = pipeline.api.key(&user, "read:webhooks").await;
    let listed = pipeline.api.get("/api/v1/webhooks", &key).await;
    let listed = listed.assert_status(200);
    assert_eq!(
        (&listed["webhooks"][0]["enabled"], &listed["webhooks"][0]["disabledReason"]),
        (&json!(false), &json!("gone"))
    );
    let dead = pipeline.peek(&pipeline.queues.dead_letter, 1, DEADLINE).await;
    let dead: DeliveryMessage = serde_json::from_str(dead[0].body().unwrap()).unwrap();
    assert_eq!(dead.delivery_id, failed[0].id, "the delivery is in the dead-letter queue");

    // Disabled: the next event is recorded `held` (whileDisabled's default, section 20) and sent nothing.
    events(&pipeline, &user, 1).await;
    records_when(&pipeline, &subscription, 2, |r| r.status != DeliveryStatus::Pending).await;
    assert_eq!(records(&pipeline, &subscription).await[0].status, DeliveryStatus::Held);
    assert_eq!(receiver.received().len(), 1);
}

/// A claim, against DynamoDB Local with explicit times: while it lasts, neither another copy
/// of the message nor the sweep takes the record; its holder records its attempt under it,
/// which ends it; once a claim has lapsed, the sweep takes the record and the late holder's
/// record is refused.
#[tokio::test]
async fn a_claimed_record_is_taken_by_no_one_else_until_its_claim_ends() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let (subscription, _) =
        pipeline.subscribe(&user, &format!("{}/hook", career_service::sink_url()), &["profile.updated"]).await;
    let table = deliveries(&pipeline);
    let message = DeliveryMessage::new(&Event::ping(&typed(&subscription)), &typed(&user), &typed(&subscription));
    let queued = Timestamp::now() - Duration::from_secs(3600);
    table.insert_new(&[(&message, DeliveryStatus::Pending)], queued).await.unwrap();
    let overdue = Overdue { key: RecordKey::of(&message), next_attempt_at: queued };

    let now = Timestamp::now();
    let lease = Lease::from(now);
    assert!(matches!(table.claim(&message, lease, now).await.unwrap(), Claim::Held { .. }));
    match table.claim(&message, Lease::from(now), now).await.unwrap() {
        Claim::Refused(record) => assert_eq!(record.lease_until, Some(lease.until), "another copy waits"),
        other => panic!("a second claim: {other:?}"),
    }
    assert_eq!(table.claim_overdue(&overdue, now, now).await.unwrap(), None, "the sweep leaves it alone");
    let failed = AttemptRecord::failed(&Outcome::NoAnswer(SendFailure::TimedOut), Some(queued), now);
    assert!(table.record_attempt(&message, &message.body(), &failed, Some(lease)).await.unwrap());
    assert!(matches!(table.claim(&message, Lease::from(now), now).await.unwrap(), Claim::Held { .. }), "ended");

    // This claim lapses with its holder still out: the sweep takes the record, and the
    // holder's late record is refused.
    let lapsed = Lease::from(now);
    let after = lapsed.until + Duration::from_millis(1);
    assert!(table.claim_overdue(&overdue, after, after).await.unwrap().is_some());
    assert!(!table.record_attempt(&message, &message.body(), &failed, Some(lapsed)).await.unwrap());
    let record = table.get(&message.subscription_id, &message.delivery_id).await.unwrap().unwrap();
    assert_eq!((record.record.attempts, record.generation), (1, 1), "one attempt counted, the sweep's generation");
}

/// A first attempt for the main lane is created claimed (its turn then writes no claim of
/// its own): the sweep and any other copy leave the record alone, its own turn may claim it
/// anew when it comes late, and records its outcome under it.
#[tokio::test]
async fn a_record_created_for_the_main_lane_is_claimed_for_its_first_attempt() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let (subscription, _) =
        pipeline.subscribe(&user, &format!("{}/hook", career_service::sink_url()), &["profile.updated"]).await;
    let table = deliveries(&pipeline);
    let created = Timestamp::now() - Duration::from_secs(3600);
    let message = DeliveryMessage::new(&Event::ping(&typed(&subscription)), &typed(&user), &typed(&subscription));
    let message = career_core::delivery::plan::created_claimed(message, Timestamp::now());
    table.insert_new(&[(&message, DeliveryStatus::Pending)], created).await.unwrap();
    let granted = Lease { until: message.claimed_until.unwrap() };

    let now = Timestamp::now();
    let overdue = Overdue { key: RecordKey::of(&message), next_attempt_at: created };
    assert_eq!(table.claim_overdue(&overdue, now, now).await.unwrap(), None, "the sweep leaves it alone");
    let other_copy = DeliveryMessage { claimed_until: None, ..message.clone() };
    match table.claim(&other_copy, Lease::from(now), now).await.unwrap() {
        Claim::Refused(record) => assert_eq!(record.lease_until, Some(granted.until), "another copy waits"),
        other => panic!("another copy's claim: {other:?}"),
    }
    let renewed = Lease::from(now + Duration::from_secs(1));
    assert!(matches!(table.claim(&message, renewed, now).await.unwrap(), Claim::Held { .. }), "its own, anew");
    assert!(!table.record_attempt(&message, &message.body(), &delivered(now), Some(granted)).await.unwrap());
    assert!(table.record_attempt(&message, &message.body(), &delivered(now), Some(renewed)).await.unwrap());
    let record = table.get(&message.subscription_id, &message.delivery_id).await.unwrap().unwrap().record;
    assert_eq!((record.status, record.attempts), (DeliveryStatus::Succeeded, 1));
}

/// A claim across a manual retry, against DynamoDB Local: the retry leaves it to its holder,
/// whose attempt is still recorded under it (counted, its answer kept, the record pending for
/// the new round) and whose hand-on moves the generation past the retry's, so the retry's own
/// copy is stale; once handed on, the claim is gone. A queued copy gives its unused creation
/// claim the same way, without an attempt.
#[tokio::test]
async fn a_claim_that_a_manual_retry_meets_is_handed_on_by_its_holder() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let (subscription, _) =
        pipeline.subscribe(&user, &format!("{}/hook", career_service::sink_url()), &["profile.updated"]).await;
    let table = deliveries(&pipeline);
    let now = Timestamp::now();
    for in_flight in [true, false] {
        let event = Event::ping(&typed(&subscription));
        let message = DeliveryMessage::new(&event, &typed(&user), &typed(&subscription));
        let message = career_core::delivery::plan::created_claimed(message, now);
        table.insert_new(&[(&message, DeliveryStatus::Pending)], now).await.unwrap();
        let lease = Lease { until: message.claimed_until.unwrap() };
        let seen = table.get(&message.subscription_id, &message.delivery_id).await.unwrap().unwrap();
        let retried = table.restart(&seen, None, now).await.unwrap().unwrap();
        assert_eq!(retried.generation, message.generation + 1);

        let attempt = in_flight.then(|| delivered(now));
        if let Some(attempt) = &attempt {
            assert!(
                !table.record_attempt(&message, &message.body(), attempt, Some(lease)).await.unwrap(),
                "superseded"
            );
        }
        let stale = DeliveryMessage { generation: retried.generation, claimed_until: None, ..message.clone() };
        assert_eq!(table.hand_on(&stale, lease, None).await.unwrap(), None, "only from an older generation");
        let round = table.hand_on(&message, lease, attempt.as_ref()).await.unwrap().expect("handed on");
        assert_eq!(round.generation, retried.generation + 1, "past the retry's own copy");
        let record = &round.record;
        let expected = if in_flight { (1, Some(204)) } else { (0, None) };
        assert_eq!(
            (record.status, record.attempts, record.last_response_status),
            (DeliveryStatus::Pending, expected.0, expected.1)
        );
        assert_eq!(table.hand_on(&message, lease, attempt.as_ref()).await.unwrap(), None, "the claim is gone");
        let round_message = round.message().unwrap();
        assert!(matches!(table.claim(&round_message, Lease::from(now), now).await.unwrap(), Claim::Held { .. }));
        let retry_copy = DeliveryMessage { generation: retried.generation, ..round_message };
        assert!(matches!(table.claim(&retry_copy, Lease::from(now), now).await.unwrap(), Claim::Refused(_)), "stale");
    }
}

fn delivered(at: Timestamp) -> AttemptRecord {
    let answer = career_core::delivery::attempt::Answer { status: 204, body: String::new(), retry_after: None };
    AttemptRecord::succeeded(&Outcome::Delivered(answer), at)
}

/// How long a receiver that holds a lane takes to answer 200: long enough that a second
/// delivery queued behind its first, and a manual retry, come while it is in flight.
const HOLDS_THE_LANE: Duration = Duration::from_secs(8);
/// How soon after a manual retry its send must come while another attempt was in flight (an
/// attempt of 8 s, then a few seconds): well before the claim that attempt held runs out
/// (the send timeout plus its margin, 30 s from the claim), when a retry that waited for it
/// would go.
const RETRY_WITHIN: Duration = Duration::from_secs(20);

/// Retries a delivery by hand, as its owner would: 202, `pending`.
async fn retry(pipeline: &Pipeline, user: &str, delivery: &str) {
    let key = pipeline.api.key(user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks/deliveries/retry?id={delivery}");
    let answer = pipeline.api.request(Method::POST, &path).key(&key).send().await;
    assert_eq!(answer.assert_status(202)["status"], "pending");
}

/// For each record of the subscription, how often the receiver got it and how many attempts
/// the record counts.
async fn sends_and_attempts(pipeline: &Pipeline, subscription: &str, receiver: &Receiver) -> Vec<(usize, u32)> {
    let received = receiver.received();
    let sent = |id: &str| received.iter().filter(|r| r.header("webhook-id") == id).count();
    records(pipeline, subscription).await.iter().map(|r| (sent(r.id.as_str()), r.attempts)).collect()
}

/// A manual retry of a delivery whose first message still waits in its lane behind another
/// (a receiver that takes 8 s holds the subscription's message group): the waiting copy is
/// dropped unsent, and the retry is the delivery's one send, counted. Before, the old copy
/// was sent (uncounted: the retry had moved the generation on) and the retry's copy again
/// when the old copy's claim ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_of_a_delivery_waiting_in_its_lane_drops_the_waiting_copy_unsent() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], HOLDS_THE_LANE).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    events(&pipeline, &user, 1).await;
    let first = receiver.wait_for(1, DEADLINE).await[0].header("webhook-id").to_owned();
    events(&pipeline, &user, 1).await;
    let both = records_when(&pipeline, &subscription, 2, |_| true).await;
    let waiting = both.iter().find(|r| r.id.as_str() != first).unwrap();
    retry(&pipeline, &user, waiting.id.as_str()).await;
    assert_eq!(receiver.received().len(), 1, "retried while the first delivery still held the lane");

    let succeeded = |r: &DeliveryRecord| r.status == DeliveryStatus::Succeeded;
    records_within(&pipeline, &subscription, 2, Duration::from_secs(60), succeeded).await;
    pipeline.drained().await;
    assert_eq!(sends_and_attempts(&pipeline, &subscription, &receiver).await, [(1, 1), (1, 1)], "sent once each");
}

/// A manual retry while the delivery's first attempt is in flight (its receiver answers 200
/// after 8 s): that attempt's answer is recorded (it counts; the record stays `pending` for the
/// retry), and the retry is sent as soon as it ended, long before the attempt's claim would
/// have run out. Before, the attempt was never recorded and the retry waited for the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_during_an_attempt_records_that_attempt_and_is_sent_right_after_it() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], HOLDS_THE_LANE).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    events(&pipeline, &user, 1).await;
    let delivery = receiver.wait_for(1, DEADLINE).await[0].header("webhook-id").to_owned();
    let retried = Instant::now();
    retry(&pipeline, &user, &delivery).await;

    let counted =
        |r: &DeliveryRecord| (r.status, r.attempts, r.last_response_status) == (DeliveryStatus::Pending, 1, Some(200));
    records_when(&pipeline, &subscription, 1, counted).await;
    let sends = receiver.wait_for(2, RETRY_WITHIN.saturating_sub(retried.elapsed())).await;
    assert!(sends[1].at - retried < RETRY_WITHIN, "the retry went {:?} after it was asked", sends[1].at - retried);
    let settled = |r: &DeliveryRecord| r.status == DeliveryStatus::Succeeded;
    records_within(&pipeline, &subscription, 1, Duration::from_secs(60), settled).await;
    pipeline.drained().await;
    assert_eq!(sends_and_attempts(&pipeline, &subscription, &receiver).await, [(2, 2)], "each send one attempt");
}

/// A retry already pending when PATCH drops its kind from the subscription is not sent
/// (contract section 13: every delivery sent after the response uses the new kinds); since
/// its first attempt was sent, it ends `failed`, not `skipped`, and `lastError` says why
/// (section 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pending_retry_of_a_kind_no_longer_listed_ends_failed_not_sent_again() {
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(3)).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 200], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    events(&pipeline, &user, 1).await;
    let retrying = |r: &DeliveryRecord| r.status == DeliveryStatus::Pending && r.attempts == 1;
    records_when(&pipeline, &subscription, 1, retrying).await;

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks?id={subscription}");
    let body = json!({"events": ["assessment.completed"]}).to_string();
    pipeline.api.send_json(Method::PATCH, &path, &key, &body).await.assert_status(200);
    let stopped = records_when(&pipeline, &subscription, 1, |r| r.status != DeliveryStatus::Pending).await;
    assert_eq!(
        (stopped[0].status, stopped[0].last_error.as_deref()),
        (DeliveryStatus::Failed, Some("not sent again: the subscription no longer lists profile.updated"))
    );
    assert_eq!((stopped[0].attempts, stopped[0].last_response_status), (1, Some(500)));
    assert_eq!(receiver.received().len(), 1, "the retry was not sent");
}

/// A delivery whose message never reached a lane is in the log from its fan-out, `pending`,
/// and the sweep sends it once it is overdue; a copy that turns up after the sweep is stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_message_is_in_the_log_at_once_and_the_sweep_sends_it_once() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;

    // The record is written as the fan-out writes it; its message is lost on its way.
    let event = Event::ping(&typed(&subscription));
    let message = DeliveryMessage::new(&event, &typed(&user), &typed(&subscription));
    let queued_at = Timestamp::now();
    deliveries(&pipeline).insert_new(&[(&message, DeliveryStatus::Pending)], queued_at).await.unwrap();
    let pending = records(&pipeline, &subscription).await;
    assert_eq!((pending[0].status, pending[0].attempts), (DeliveryStatus::Pending, 0), "in the log before any queue");

    let mut settings = pipeline.settings().clone();
    settings.sweep_after = Duration::from_secs(1);
    let sweep = career_sweep::Deps::new(
        &career_service::acting_as(function::SWEEP, &settings, &clients()),
        &career_service::function_settings(function::SWEEP, &settings),
    )
    .unwrap();
    let not_yet = career_sweep::sweep(&sweep, &Shards::all(), queued_at).await.unwrap();
    assert_eq!(not_yet.requeued, 0, "not overdue when it is due: the sweep waits a second");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let swept = career_sweep::sweep(&sweep, &Shards::all(), Timestamp::now()).await.unwrap();
    assert_eq!((swept.overdue, swept.requeued), (1, 1));
    receiver.wait_for(1, DEADLINE).await;
    records_when(&pipeline, &subscription, 1, |r| r.status == DeliveryStatus::Succeeded).await;

    // The lost message turns up after all: its generation is not the record's any more.
    let queues = DeliveryQueues::new(&clients(), pipeline.settings()).unwrap();
    queues.post_all(&in_first_group(std::slice::from_ref(&message))).await.unwrap();
    pipeline.drained().await;
    assert_eq!(receiver.received().len(), 1, "the stale copy was dropped unsent");
    let again = career_sweep::sweep(&sweep, &Shards::all(), Timestamp::now()).await.unwrap();
    assert_eq!((again.overdue, again.requeued), (0, 0), "a settled record is not in the due index");
}

/// A delivery of `subscription` whose id puts it in `shard`.
fn message_in(shard: DueShard, user: &UserId, subscription: &SubscriptionId) -> DeliveryMessage {
    // Each try has a chance of one in DUE_SHARDS; a thousand fail only when the shard is never used.
    let mut tries = (0..1000).map(|_| DeliveryMessage::new(&Event::ping(subscription), user, subscription));
    tries
        .find(|message| DueShard::of(&message.delivery_id) == shard)
        .unwrap_or_else(|| panic!("no id in shard {shard}"))
}

/// Writes a first try of `subscription` in `shard` as the fan-out writes it at `at` (its own
/// marker, then its record), its message lost.
async fn lost_first_try(pipeline: &Pipeline, shard: DueShard, subscription: &SubscriptionId, at: Timestamp) {
    let message = message_in(shard, &typed(unique_user()), subscription);
    deliveries(pipeline).insert_new(&[(&message, DeliveryStatus::Pending)], at).await.unwrap();
}

/// The sweep with the template's settings and role, reading as `reading` says.
fn sweep_reading(pipeline: &Pipeline, reading: Reading) -> career_sweep::Deps {
    let mut sweep = career_sweep::Deps::new(
        &career_service::acting_as(function::SWEEP, pipeline.settings(), &clients()),
        &career_service::function_settings(function::SWEEP, pipeline.settings()),
    )
    .unwrap();
    sweep.reading = reading;
    sweep
}

/// The sweep keeps up at scale (contract section 22): every due shard holds some of the
/// fan-out's markers and records, and a run reads each shard page after page, so a first try
/// lost in any shard is found, also past its shard's first page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_reads_every_shard_page_after_page() {
    let pipeline = Pipeline::start(false).await;
    let subscription = SubscriptionId::generate();
    let an_hour_ago = Timestamp::now() - Duration::from_secs(3600);
    // One lost first try in every shard, each with a marker of its own, and 4 more in the
    // first shard: 3 pages of 2 markers there.
    let first = DueShard::all().next().unwrap();
    let shards: Vec<DueShard> = DueShard::all().chain([first; 4]).collect();
    for &shard in &shards {
        lost_first_try(&pipeline, shard, &subscription, an_hour_ago).await;
    }
    let sweep = sweep_reading(&pipeline, Reading { page: 2, ..Reading::DEPLOYED });
    let swept = career_sweep::sweep(&sweep, &Shards::all(), Timestamp::now()).await.unwrap();
    let lost = shards.len();
    assert_eq!(
        (swept.indexed, swept.overdue, swept.requeued, swept.oldest_unread),
        (lost, lost, lost, None),
        "every shard read to its end"
    );
    assert_eq!(pipeline.count(&pipeline.queues.retry, QueueAttributeName::ApproximateNumberOfMessages).await, lost);
    let again = career_sweep::sweep(&sweep, &Shards::all(), Timestamp::now()).await.unwrap();
    assert_eq!((again.indexed, again.overdue), (0, 0), "every marker read once and removed");
}

/// A run whose reading budget is spent leaves the rest of its shard for the next run and says,
/// as its lag metric, how long that rest has waited; a run for one shard reads no other.
#[test]
fn a_run_out_of_budget_leaves_the_rest_for_the_next_and_logs_its_lag() {
    // One thread runs the sweep, so every line it logs is on this thread's capture.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    const SHARD: u8 = 7;
    let (shard, other) = (DueShard::try_from(SHARD).unwrap(), DueShard::try_from(SHARD + 1).unwrap());
    let hours_ago = |hours: u64| Timestamp::now() - Duration::from_secs(3600 * hours);
    let (pipeline, sweep) = runtime.block_on(async {
        let pipeline = Pipeline::start(false).await;
        let subscription = SubscriptionId::generate();
        for hours in [3, 2, 1] {
            lost_first_try(&pipeline, shard, &subscription, hours_ago(hours)).await;
        }
        lost_first_try(&pipeline, other, &subscription, hours_ago(4)).await;
        // No budget: each run reads one page of its shard, here one marker.
        let sweep = sweep_reading(&pipeline, Reading { page: 1, budget: Duration::ZERO });
        (pipeline, sweep)
    });
    let mut runs = Vec::new();
    let logged = capture_logs(|| {
        for _ in 0..4 {
            let run = career_sweep::handle(&sweep, json!({"shards": [SHARD]}));
            runs.push(runtime.block_on(run).into_invocation().expect("a run"));
        }
    });
    let indexed: Vec<usize> = runs.iter().map(|run| run.indexed).collect();
    assert_eq!(indexed, [1, 1, 1, 0], "one marker a run, oldest first: {runs:?}");
    assert_eq!(runs[3].oldest_unread, None, "nothing left once the shard is read");

    let namespace = &career_service::function_settings(function::SWEEP, pipeline.settings()).metrics_namespace;
    let lines: Vec<Value> = logged.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let lags: Vec<f64> = lines.iter().filter_map(|line| line[SWEEP_LAG].as_f64()).collect();
    assert_eq!(lags.len(), 4, "one lag a run: {logged}");
    // The oldest left: the marker of 2 hours ago after the first run, of an hour ago after the second.
    assert!((7200.0..10_800.0).contains(&lags[0]) && (3600.0..7200.0).contains(&lags[1]), "{lags:?}");
    assert_eq!(lags[3], 0.0);
    let directive =
        lines.iter().find(|line| line.get(SWEEP_LAG).is_some()).unwrap()["_aws"]["CloudWatchMetrics"][0].clone();
    assert_eq!(directive["Namespace"], json!(namespace));

    // The other shard's marker is where it was, for its own run.
    let everything = runtime.block_on(career_sweep::handle(&sweep, Value::Null)).into_invocation().unwrap();
    assert_eq!(everything.indexed, 1);
}

/// A sweep run that cannot do its work is a failed invocation, as Lambda counts it
/// (`SweepErrorsAlarm`), not a successful one whose answer holds the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sweep_run_is_a_failed_invocation() {
    let pipeline = Pipeline::start(false).await;
    let mut gone = pipeline.settings().clone();
    gone.tables.deliveries = format!("{}-gone", gone.tables.deliveries);
    let sweep = career_sweep::Deps::new(&clients(), &gone).unwrap();
    let failed = career_sweep::handle(&sweep, Value::Null).await.into_invocation();
    assert!(failed.unwrap_err().to_string().contains("ResourceNotFound"), "a missing table fails the run");
    let sweep = career_sweep::Deps::new(
        &career_service::acting_as(function::SWEEP, pipeline.settings(), &clients()),
        pipeline.settings(),
    )
    .unwrap();
    let swept = career_sweep::handle(&sweep, Value::Null).await.into_invocation().expect("a run with nothing to do");
    assert_eq!((swept.overdue, swept.requeued), (0, 0));
}

/// The fan-out writes each delivery's record before it queues the message: with the lanes
/// gone, the fan-out fails (the stream retries it) but the records are there, `pending`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_fan_out_writes_the_records_before_it_queues() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let (subscription, _) =
        pipeline.subscribe(&user, &format!("{}/hook", career_service::sink_url()), &["profile.updated"]).await;
    // The fan-out's own settings with its main lane gone (the template would give it the lane).
    let mut lost_lanes = career_service::function_settings(function::FANOUT, pipeline.settings());
    lost_lanes.delivery_queue_url = Some(format!("{}-gone.fifo", pipeline.queues.delivery.trim_end_matches(".fifo")));
    let fanout_clients = career_service::acting_as(function::FANOUT, pipeline.settings(), &clients());
    let fanout = career_fanout::Deps::new(&fanout_clients, &lost_lanes).unwrap();
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let sources = career_service::stream_sources(function::FANOUT, pipeline.settings());
    let pumping = tokio::spawn(async move {
        local_aws::event_sources::pumps::run_stream_pump(fanout_clients, sources, &fanout, None).await;
    });
    let pending = records_when(&pipeline, &subscription, 1, |r| r.status == DeliveryStatus::Pending).await;
    pumping.abort();
    assert_eq!(pending[0].attempts, 0);
    assert!(pending[0].next_attempt_at.is_some(), "due at once");
}

/// Makes the subscription skip, rather than hold, what comes while it is disabled (section 20).
async fn skip_while_disabled(webhooks: &WebhookTable, user: &str, subscription: &str) {
    use career_core::store::webhooks::Replacing;
    use career_core::webhooks::{SubscriptionChanges, WhileDisabled};
    let skip = SubscriptionChanges { while_disabled: Some(WhileDisabled::Skip), ..SubscriptionChanges::default() };
    let (user, subscription) = (typed(user), typed(subscription));
    webhooks.update(&user, &subscription, &skip, Replacing::default(), Timestamp::now()).await.unwrap().unwrap();
}

/// Recovery sends the window's failed and skipped deliveries again, once, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recover_sends_exactly_the_windows_failed_and_skipped_deliveries_once() {
    let pipeline = Pipeline::with_settings(true, |s| s.max_delivery_attempts = 1).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 500, 500, 500, 200], NO_DELAY).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let failed = |r: &DeliveryRecord| r.status == DeliveryStatus::Failed || r.status == DeliveryStatus::Skipped;
    // Before the window: one failed.
    events(&pipeline, &user, 1).await;
    records_when(&pipeline, &subscription, 1, failed).await;
    // In the window: two failed, and one skipped while the subscription was paused.
    events(&pipeline, &user, 2).await;
    records_when(&pipeline, &subscription, 3, failed).await;
    let webhooks = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    let at = Timestamp::now();
    skip_while_disabled(&webhooks, &user, &subscription).await;
    webhooks.disable(&typed(&user), &typed(&subscription), (DisabledReason::Manual, None), None, at).await.unwrap();
    events(&pipeline, &user, 1).await;
    records_when(&pipeline, &subscription, 4, failed).await;
    webhooks.enable(&typed(&user), &typed(&subscription)).await.unwrap();
    // After the window: one failed.
    events(&pipeline, &user, 1).await;
    let all = records_when(&pipeline, &subscription, 5, failed).await;
    assert_eq!(receiver.received().len(), 4, "four failed attempts; the skipped one was never sent");
    let (after, window, before) = (&all[0], &all[1..4], &all[4]);
    assert_eq!(window.iter().filter(|r| r.status == DeliveryStatus::Skipped).count(), 1);

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks/recover?id={subscription}");
    let body = json!({"since": window[2].created_at, "until": after.created_at}).to_string();
    let sqs_calls = Calls::default();
    let api = Api::on(career_service::clients_logging_sqs(&sqs_calls), pipeline.settings().clone());
    let answer = api.send_json(Method::POST, &path, &key, &body).await;
    assert_eq!(answer.assert_status(202), &json!({"recovering": 3, "more": false}));
    assert_eq!(sqs_calls.since(0), ["SendMessageBatch"], "the three messages in one call");

    let resent = receiver.wait_for(7, DEADLINE).await;
    let mut ids: Vec<&str> = resent[4..].iter().map(|r| r.header("webhook-id")).collect();
    ids.sort_unstable();
    let mut expected: Vec<&str> = window.iter().map(|r| r.id.as_str()).collect();
    expected.sort_unstable();
    assert_eq!(ids, expected, "each of the window's three, once");
    let now = records_when(&pipeline, &subscription, 5, |r| r.status != DeliveryStatus::Pending).await;
    for record in &now {
        let in_window = window.iter().any(|w| w.id == record.id);
        let expected = if in_window { DeliveryStatus::Succeeded } else { DeliveryStatus::Failed };
        assert_eq!(record.status, expected, "{}", record.id);
    }
    assert_ne!(before.id, after.id);

    // Nothing is left to recover in that window; a second call sends nothing more.
    let again = pipeline.api.send_json(Method::POST, &path, &key, &body).await;
    assert_eq!(again.assert_status(202), &json!({"recovering": 0, "more": false}));
    pipeline.drained().await;
    assert_eq!(receiver.received().len(), 7);
}

/// The operation's codes, in the contract's order of checks.
#[tokio::test]
async fn recover_answers_its_codes() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let (subscription, _) =
        pipeline.subscribe(&user, &format!("{}/hook", career_service::sink_url()), &["profile.updated"]).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let recover = |query: String, body: Value| {
        let (pipeline, key) = (&pipeline, key.clone());
        async move {
            let path = format!("/api/v1/webhooks/recover{query}");
            let answer = pipeline.api.send_json(Method::POST, &path, &key, &body.to_string()).await;
            (answer.status.as_u16(), answer.json["error"]["code"].as_str().unwrap_or_default().to_owned())
        }
    };
    let id = format!("?id={subscription}");
    let since = json!({"since": Timestamp::now() - Duration::from_secs(60)});
    let code = |status: u16, code: &str| (status, code.to_owned());
    assert_eq!(recover(String::new(), since.clone()).await, code(400, "webhooks.missing_subscription_id"));
    assert_eq!(recover("?id=".into(), since.clone()).await, code(400, "webhooks.missing_subscription_id"));
    for window in [json!({}), json!({"since": "yesterday"}), json!({"since": "2026-01-01T00:00:00Z"})] {
        assert_eq!(recover(id.clone(), window).await, code(400, "webhooks.invalid_recover_window"));
    }
    assert_eq!(recover(id.clone(), json!([])).await, code(400, "request.invalid_json"));
    let other = pipeline.api.key(unique_user(), "write:webhooks").await;
    let path = format!("/api/v1/webhooks/recover{id}");
    let foreign = pipeline.api.send_json(Method::POST, &path, &other, &since.to_string()).await;
    assert_eq!(foreign.status.as_u16(), 404, "another user's subscription is not found");
    let reader = pipeline.api.key(&user, "read:webhooks").await;
    let forbidden = pipeline.api.send_json(Method::POST, &path, &reader, &since.to_string()).await;
    assert_eq!(forbidden.status.as_u16(), 403);

    let webhooks = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    let at = Timestamp::now();
    webhooks.disable(&typed(&user), &typed(&subscription), (DisabledReason::Manual, None), None, at).await.unwrap();
    assert_eq!(recover(id.clone(), since.clone()).await, code(400, "webhooks.subscription_disabled"));
    webhooks.enable(&typed(&user), &typed(&subscription)).await.unwrap();
    assert_eq!(recover(id.clone(), since).await, (202, String::new()));

    // `since` as RFC 3339 allows it: nine fraction digits, a lowercase `t` and `z`, offsets.
    let minute_ago = (Timestamp::now() - Duration::from_secs(60)).to_string();
    let (date, time) = minute_ago.trim_end_matches('Z').split_once('T').unwrap();
    let (hour, rest) = time.split_once(':').unwrap();
    let mut east = hour.parse::<u32>().unwrap() + 1;
    let east_date = if east == 24 {
        east = 0;
        ((Timestamp::now() - Duration::from_secs(60)) + Duration::from_secs(3600)).to_string()[..10].to_owned()
    } else {
        date.to_owned()
    };
    for text in [
        format!("{date}T{time}456789Z"),
        format!("{date}t{time}z"),
        format!("{date}t{time}456789z"),
        format!("{date}T{time}-00:00"),
        format!("{east_date}T{east:02}:{rest}+01:00"),
    ] {
        assert_eq!(recover(id.clone(), json!({"since": text})).await, (202, String::new()), "{text}");
    }
}

/// A batch of one subscription's deliveries, or a message alone in its batch, is left for
/// the event source mapping, which deletes it as the invocation returns (an early delete
/// would be a second billed request and free no other subscription's message group); in a
/// batch with another subscription's, each is deleted as soon as its own attempt is
/// recorded, so none waits for the other's send.
#[tokio::test]
async fn only_a_batch_of_several_subscriptions_is_deleted_early() {
    // One message group a subscription, so that the messages queued in the first are sent
    // rather than moved to the others of a subscription whose receiver answers fast.
    let pipeline = Pipeline::with_settings(false, |s| s.delivery_groups = Groups::ONE).await;
    let user = unique_user();
    let url = format!("{}/hook", career_service::sink_url());
    let (first, _) = pipeline.subscribe(&user, &url, &["profile.updated"]).await;
    let (second, _) = pipeline.subscribe(&user, &url, &["profile.updated"]).await;
    let calls = Calls::default();
    let settings = career_service::function_settings(function::DELIVER, pipeline.settings());
    let logged = career_service::clients_logging_sqs(&calls);
    let deliver_clients = career_service::acting_as(function::DELIVER, pipeline.settings(), &logged);
    let deliver = career_deliver::Deps::new(&deliver_clients, &settings).unwrap();
    let queues = DeliveryQueues::new(&clients(), pipeline.settings()).unwrap();
    let table = deliveries(&pipeline);
    let lane = &pipeline.queues.delivery;
    let alone: &[&str] = &[&first];
    let one_subscription: &[&str] = &[&first, &first, &first];
    let two_subscriptions: &[&str] = &[&first, &second];
    for (batch, early) in [(alone, 0), (one_subscription, 0), (two_subscriptions, 2)] {
        let messages: Vec<DeliveryMessage> =
            batch.iter().map(|s| DeliveryMessage::new(&Event::ping(&typed(s)), &typed(&user), &typed(s))).collect();
        let records: Vec<_> = messages.iter().map(|m| (m, DeliveryStatus::Pending)).collect();
        table.insert_new(&records, Timestamp::now()).await.unwrap();
        queues.post_all(&in_first_group(&messages)).await.unwrap();
        let received = career_service::receive_messages(lane, batch.len()).await;
        let mark = calls.len();
        let response =
            career_deliver::handle(&deliver, local_aws::event_sources::pumps::sqs_event(received.clone())).await;
        assert!(response.batch_item_failures.is_empty());
        let deletes = calls.since(mark).iter().filter(|call| *call == "DeleteMessage").count();
        assert_eq!(deletes, early, "a batch of {batch:?}");
        // What the event source mapping then does: deletes the batch (already gone or not).
        for message in &received {
            let receipt = message.receipt_handle().unwrap_or_default();
            career_service::sqs().delete_message().queue_url(lane).receipt_handle(receipt).send().await.unwrap();
        }
    }
}

/// A retry whose wait is longer than a message's longest delay (a 429 asking for 30 minutes)
/// waits in the table, not in a message (contract section 22): once the attempt is recorded
/// neither lane holds a message for it (waiting, in flight or delayed), so no failing receiver
/// fills a queue's in-flight quota. When the record's time comes within the sweep's look-ahead
/// (the test moves its due time to a few seconds from now, as the passing of half an hour
/// would), a sweep queues it with the delay left, and it is sent once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_longer_than_a_message_delay_waits_in_the_table_and_holds_no_message() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::scripted(&[429, 200], "", &[("Retry-After", "1800")], Duration::ZERO).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    events(&pipeline, &user, 1).await;
    let waiting = |r: &DeliveryRecord| r.status == DeliveryStatus::Pending && r.attempts == 1;
    let record = records_when(&pipeline, &subscription, 1, waiting).await.remove(0);
    let due = record.next_attempt_at.expect("a next attempt");
    assert!(due > Timestamp::now() + Duration::from_secs(25 * 60), "the receiver's wait is kept: {due}");
    pipeline.drained().await;
    let deliveries = DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries);
    let shard = DueShard::of(&record.id);
    let parked = deliveries.parked(shard, due + Duration::from_secs(1), 100, None).await.unwrap().items;
    assert_eq!(parked.iter().map(|p| &p.key.delivery_id).collect::<Vec<_>>(), [&record.id], "parked in the due index");

    // Half an hour later: the record is due in two seconds.
    let soon = Timestamp::now() + Duration::from_secs(2);
    let key = RecordKey { subscription_id: typed(&subscription), delivery_id: record.id.clone() };
    dynamodb()
        .update_item()
        .table_name(&pipeline.settings().tables.deliveries)
        .set_key(Some(key.item()))
        .update_expression("SET nextAttemptAt = :soon")
        .expression_attribute_values(":soon", aws_sdk_dynamodb::types::AttributeValue::S(soon.to_string()))
        .send()
        .await
        .unwrap();
    let sweep = career_sweep::Deps::new(
        &career_service::acting_as(function::SWEEP, pipeline.settings(), &clients()),
        &career_service::function_settings(function::SWEEP, pipeline.settings()),
    )
    .unwrap();
    let swept = career_sweep::sweep(&sweep, &Shards::all(), Timestamp::now()).await.unwrap();
    assert_eq!(swept.unparked, 1, "{swept:?}");
    let again = career_sweep::sweep(&sweep, &Shards::all(), Timestamp::now()).await.unwrap();
    assert_eq!(again.unparked, 0, "queued once: {again:?}");

    let done = records_when(&pipeline, &subscription, 1, |r| r.status == DeliveryStatus::Succeeded).await;
    assert_eq!(done[0].attempts, 2);
    assert_eq!(receiver.received().len(), 2, "sent once more, once");
}
