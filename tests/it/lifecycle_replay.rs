//! Replay across subscriptions and cancelling what waits (contract section 20), end to end
//! against DynamoDB Local and the SQS emulator with receivers on loopback: what a replay
//! selects by subscription, kind, status and window, its dry run, its cap of 1,000 a call,
//! its refusals; a cancel while a delivery waits for its retry and while an attempt is in
//! flight, and its refusals. The records a replay starts from are written straight into the
//! log (as their attempts would have left them), so each test controls exactly what matches;
//! a held one is held through the real path (a paused subscription and a change).

use std::time::Duration;

use career_core::clock::Timestamp;
use career_core::delivery::attempt::{Answer as Received, Outcome};
use career_core::delivery::log::{AttemptRecord, DeliveryRecord, DeliveryStatus};
use career_core::delivery::plan::CANCELLED_ERROR;
use career_core::delivery::recovery::MAX_PER_CALL;
use career_core::delivery::DeliveryMessage;
use career_core::events::{Event, EventData};
use career_core::ids::{AssessmentId, EventId, ProfileId};
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::WebhookTable;
use career_core::webhooks::DisabledReason;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{dynamodb, eventually, typed, unique_user, DEADLINE};
use lambda_http::http::Method;
use serde_json::{json, Value};

fn deliveries(pipeline: &Pipeline) -> DeliveryTable {
    DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries)
}

/// An event of `kind` (`profile.updated` or `assessment.completed`) of `user` made at `at`,
/// its id unique to `nth`.
fn event(user: &str, kind: &str, at: Timestamp, nth: usize) -> Event {
    let data = match kind {
        "profile.updated" => EventData::ProfileUpdated { user_id: typed(user), profile_id: ProfileId::generate() },
        _ => EventData::AssessmentCompleted { user_id: typed(user), assessment_id: AssessmentId::generate() },
    };
    Event { id: EventId::derived(at, &[user, &nth.to_string()]), created_at: at, data }
}

/// Writes a record of the subscription's delivery of `event` as its attempts would have left
/// it: `failed` (one attempt, answered 500, none left), `succeeded`, or `skipped` (never sent).
async fn recorded(
    pipeline: &Pipeline,
    user: &str,
    subscription: &str,
    event: &Event,
    status: DeliveryStatus,
) -> String {
    let message = DeliveryMessage::new(event, &typed(user), &typed(subscription));
    let table = deliveries(pipeline);
    let now = Timestamp::now();
    let answer = |status| Received { status, body: String::new(), retry_after: None };
    let attempt = match status {
        DeliveryStatus::Skipped => None,
        DeliveryStatus::Succeeded => Some(AttemptRecord::succeeded(&Outcome::Delivered(answer(200)), now)),
        _ => Some(AttemptRecord::failed(&Outcome::Rejected(answer(500)), None, now)),
    };
    match attempt {
        Some(attempt) => assert!(table.record_attempt(&message, &message.body(), &attempt, None).await.unwrap()),
        None => assert_eq!(table.insert_new(&[(&message, status)], now).await.unwrap(), [true]),
    }
    message.delivery_id.to_string()
}

/// The record of a delivery of the subscription.
async fn record(pipeline: &Pipeline, subscription: &str, delivery: &str) -> DeliveryRecord {
    let stored = deliveries(pipeline).get(&typed(subscription), &typed(delivery)).await.unwrap();
    stored.expect("the record").record
}

async fn replay(pipeline: &Pipeline, key: &str, body: Value) -> (u16, Value) {
    let answer = pipeline.api.send_json(Method::POST, "/api/v1/webhooks/replay", key, &body.to_string()).await;
    (answer.status.as_u16(), answer.json)
}

async fn cancel(pipeline: &Pipeline, key: &str, subscription: &str, body: Option<Value>) -> (u16, Value) {
    let path = format!("/api/v1/webhooks/deliveries/cancel?id={subscription}");
    let answer = match body {
        Some(body) => pipeline.api.send_json(Method::POST, &path, key, &body.to_string()).await,
        None => pipeline.api.request(Method::POST, &path).key(key).send().await,
    };
    (answer.status.as_u16(), answer.json)
}

/// The ids of the deliveries a receiver got, sorted.
fn got(receiver: &Receiver) -> Vec<String> {
    let mut ids: Vec<String> = receiver.received().iter().map(|r| r.header("webhook-id").to_owned()).collect();
    ids.sort_unstable();
    ids
}

fn sorted(ids: &[&String]) -> Vec<String> {
    let mut ids: Vec<String> = ids.iter().map(|id| (*id).clone()).collect();
    ids.sort_unstable();
    ids
}

/// A replay limited by subscription, kind and status sends exactly those again (the default
/// statuses `failed` and `skipped`), and its dry run, first, sends nothing and counts the same.
/// `succeeded` ones come from the log, and only when asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_sends_again_what_matches_and_its_dry_run_counts_the_same_and_sends_nothing() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let (first_receiver, second_receiver, third_receiver) = (
        Receiver::start(&[200], Duration::ZERO).await,
        Receiver::start(&[200], Duration::ZERO).await,
        Receiver::start(&[200], Duration::ZERO).await,
    );
    let kinds = ["profile.updated", "assessment.completed"];
    let (first, _) = pipeline.subscribe(&user, &first_receiver.url, &kinds).await;
    let (second, _) = pipeline.subscribe(&user, &second_receiver.url, &kinds).await;
    let (third, _) = pipeline.subscribe(&user, &third_receiver.url, &kinds).await;
    let since = Timestamp::now() - Duration::from_secs(60);
    let at = |nth: u64| since + Duration::from_millis(nth);
    let (failed, skipped, succeeded) = (DeliveryStatus::Failed, DeliveryStatus::Skipped, DeliveryStatus::Succeeded);
    let p = |nth| event(&user, "profile.updated", at(nth), nth as usize);
    let first_failed = recorded(&pipeline, &user, &first, &p(1), failed).await;
    let first_skipped = recorded(&pipeline, &user, &first, &p(2), skipped).await;
    let first_assessment =
        recorded(&pipeline, &user, &first, &event(&user, "assessment.completed", at(3), 3), failed).await;
    let first_succeeded = recorded(&pipeline, &user, &first, &p(4), succeeded).await;
    let second_failed = recorded(&pipeline, &user, &second, &p(5), failed).await;
    let third_failed = recorded(&pipeline, &user, &third, &p(6), failed).await;
    let before_window =
        recorded(&pipeline, &user, &first, &event(&user, "profile.updated", since - Duration::from_secs(1), 7), failed)
            .await;
    let key = pipeline.api.key(&user, "write:webhooks").await;

    let asked = json!({"since": since, "subscriptionIds": [first, second], "events": ["profile.updated"]});
    let dry =
        json!({"since": since, "subscriptionIds": [first, second], "events": ["profile.updated"], "dryRun": true});
    let by_subscription = json!({first.clone(): 2, second.clone(): 1});
    let (status, counted) = replay(&pipeline, &key, dry).await;
    assert_eq!((status, &counted), (200, &json!({"matching": 3, "more": false, "bySubscription": by_subscription})));
    pipeline.idle().await;
    assert!(got(&first_receiver).is_empty() && got(&second_receiver).is_empty(), "a dry run sends nothing");
    assert_eq!(record(&pipeline, &first, &first_failed).await.status, failed, "and changes nothing");

    let (status, replayed) = replay(&pipeline, &key, asked).await;
    assert_eq!((status, &replayed), (202, &json!({"replaying": 3, "more": false, "bySubscription": by_subscription})));
    first_receiver.wait_for(2, DEADLINE).await;
    second_receiver.wait_for(1, DEADLINE).await;
    pipeline.idle().await;
    assert_eq!(got(&first_receiver), sorted(&[&first_failed, &first_skipped]));
    assert_eq!(got(&second_receiver), sorted(&[&second_failed]));
    assert!(got(&third_receiver).is_empty(), "a subscription not named is not replayed");
    let sent = first_receiver.received();
    let resent = sent.iter().find(|r| r.header("webhook-id") == first_failed).unwrap();
    let kept = record(&pipeline, &first, &first_failed).await;
    assert_eq!(resent.body.as_ref(), kept.body.as_bytes(), "the same body bytes");
    assert_eq!((kept.status, kept.attempts), (succeeded, 2), "the schedule from its start, each send counted");
    for (subscription, unchanged, status) in [
        (&first, &first_assessment, failed),
        (&first, &first_succeeded, succeeded),
        (&first, &before_window, failed),
        (&third, &third_failed, failed),
    ] {
        assert_eq!(record(&pipeline, subscription, unchanged).await.status, status, "{unchanged}: not replayed");
    }

    // `succeeded` only when asked for, from the log; every subscription by default, 0 included.
    let dry = json!({"since": since, "status": ["succeeded"], "events": ["profile.updated"], "dryRun": true});
    let by_subscription = json!({first.clone(): 3, second.clone(): 1, third.clone(): 0});
    let (status, counted) = replay(&pipeline, &key, dry).await;
    assert_eq!((status, counted), (200, json!({"matching": 4, "more": false, "bySubscription": by_subscription})));
}

/// How a replayed delivery of a disabled subscription ends, which is not sent: contract
/// section 20 ends it `held` with the default `whileDisabled: hold` (as its turn would).
fn ended_while_disabled(record: &DeliveryRecord) -> bool {
    (record.status, record.last_error.as_deref()) == (DeliveryStatus::Held, Some("held: the subscription is disabled"))
}

/// A replay takes at most 1,000 a call, oldest first, and says when more matched; the next call,
/// from after the last one it took, takes the rest. The subscription is disabled, so nothing is
/// sent and each one replayed ends as its subscription's setting says ([`ended_while_disabled`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_takes_the_oldest_thousand_a_call_and_says_more() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let url = format!("{}/hook", career_service::sink_url());
    let (subscription, _) = pipeline.subscribe(&user, &url, &["profile.updated"]).await;
    let webhooks = WebhookTable::new(dynamodb(), &pipeline.settings().tables.webhooks);
    let now = Timestamp::now();
    webhooks.disable(&typed(&user), &typed(&subscription), (DisabledReason::Manual, None), None, now).await.unwrap();
    let since = now - Duration::from_secs(600);
    let count = MAX_PER_CALL as usize + 1;
    let events: Vec<Event> =
        (0..count).map(|nth| event(&user, "profile.updated", since + Duration::from_millis(nth as u64), nth)).collect();
    let messages: Vec<DeliveryMessage> =
        events.iter().map(|e| DeliveryMessage::new(e, &typed(&user), &typed(&subscription))).collect();
    let skipped: Vec<(&DeliveryMessage, DeliveryStatus)> =
        messages.iter().map(|m| (m, DeliveryStatus::Skipped)).collect();
    deliveries(&pipeline).insert_new(&skipped, now).await.unwrap();
    let key = pipeline.api.key(&user, "write:webhooks").await;

    let dry = json!({"since": since, "dryRun": true});
    let by_subscription = json!({subscription.clone(): MAX_PER_CALL});
    let (status, counted) = replay(&pipeline, &key, dry).await;
    assert_eq!(
        (status, counted),
        (200, json!({"matching": MAX_PER_CALL, "more": true, "bySubscription": by_subscription}))
    );
    let (status, replayed) = replay(&pipeline, &key, json!({"since": since})).await;
    assert_eq!(
        (status, replayed),
        (202, json!({"replaying": MAX_PER_CALL, "more": true, "bySubscription": by_subscription}))
    );
    let table = deliveries(&pipeline);
    let (oldest, newest) = (&messages[0], &messages[count - 1]);
    let taken = table.get(&oldest.subscription_id, &oldest.delivery_id).await.unwrap().unwrap();
    assert!(taken.generation > 0 && ended_while_disabled(&taken.record), "the oldest taken: {:?}", taken.record);
    let left = table.get(&newest.subscription_id, &newest.delivery_id).await.unwrap().unwrap();
    assert_eq!(left.generation, 0, "the newest left for the next call");

    let last_taken = messages[count - 2].event.created_at;
    let next = json!({"since": last_taken + Duration::from_millis(1)});
    let (status, rest) = replay(&pipeline, &key, next).await;
    assert_eq!(
        (status, rest),
        (202, json!({"replaying": 1, "more": false, "bySubscription": {subscription.clone(): 1}}))
    );
    let left = table.get(&newest.subscription_id, &newest.delivery_id).await.unwrap().unwrap();
    assert!(left.generation > 0 && ended_while_disabled(&left.record), "{:?}", left.record);
    pipeline.drained().await;
}

/// Two users, each with a subscription: `(user, other, user's, other's)`.
async fn two_users(pipeline: &Pipeline) -> (String, String, String, String) {
    let (user, other) = (unique_user(), unique_user());
    let url = format!("{}/hook", career_service::sink_url());
    let (own, _) = pipeline.subscribe(&user, &url, &["profile.updated"]).await;
    let (foreign, _) = pipeline.subscribe(&other, &url, &["profile.updated"]).await;
    (user, other, own, foreign)
}

/// A replay that names another user's subscription, or a body it refuses, changes nothing.
#[tokio::test]
async fn a_refused_replay_replays_nothing() {
    let pipeline = Pipeline::start(false).await;
    let (user, _, own, foreign) = two_users(&pipeline).await;
    let since = Timestamp::now() - Duration::from_secs(60);
    let own_failed =
        recorded(&pipeline, &user, &own, &event(&user, "profile.updated", since, 1), DeliveryStatus::Failed).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let code = |answer: (u16, Value)| (answer.0, answer.1["error"]["code"].as_str().unwrap_or_default().to_owned());

    let named = json!({"since": since, "subscriptionIds": [own, foreign]});
    assert_eq!(code(replay(&pipeline, &key, named).await), (404, "webhooks.not_found".to_owned()));
    let hour_ago = Timestamp::now() - Duration::from_secs(3600);
    let too_many: Vec<String> = (0..26).map(|_| career_core::ids::SubscriptionId::generate().to_string()).collect();
    for bad in [
        json!({}),
        json!({"since": "yesterday"}),
        json!({"since": hour_ago, "until": "later"}),
        json!({"since": hour_ago, "until": hour_ago}),
        json!({"since": "2026-01-01T00:00:00Z"}),
        json!({"since": hour_ago, "status": ["pending"]}),
        json!({"since": hour_ago, "status": "failed"}),
        json!({"since": hour_ago, "events": ["profile.created"]}),
        json!({"since": hour_ago, "subscriptionIds": []}),
        json!({"since": hour_ago, "subscriptionIds": too_many}),
        json!({"since": hour_ago, "dryRun": "yes"}),
        json!({"since": hour_ago, "subscriptionId": [own]}),
    ] {
        assert_eq!(
            code(replay(&pipeline, &key, bad.clone()).await),
            (400, "webhooks.invalid_replay".to_owned()),
            "{bad}"
        );
    }
    let stored = deliveries(&pipeline).get(&typed(&own), &typed(&own_failed)).await.unwrap().unwrap();
    assert_eq!((stored.record.status, stored.generation), (DeliveryStatus::Failed, 0), "nothing replayed");
}

/// A cancel while a delivery waits for its retry: the record ends `cancelled` with its attempt
/// and answer kept, the copy waiting on the retry lane is dropped unsent, and the receiver never
/// gets it again. A manual retry then sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_during_a_wait_drops_the_queued_copy_unsent() {
    // The retry waits at least 12 s: time enough to cancel it on a busy machine.
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(15)).await;
    let user = unique_user();
    let receiver = Receiver::start(&[500, 200], Duration::ZERO).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let key = pipeline.api.key(&user, "read:webhooks,write:webhooks").await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = receiver.wait_for(1, DEADLINE).await[0].header("webhook-id").to_owned();
    eventually("the delivery waits for its retry", || async {
        let record = record(&pipeline, &subscription, &delivery).await;
        if (record.status, record.attempts) == (DeliveryStatus::Pending, 1) {
            Ok(())
        } else {
            Err(record)
        }
    })
    .await;
    assert_eq!(cancel(&pipeline, &key, &subscription, None).await, (202, json!({"cancelling": 1, "more": false})));

    pipeline.drained().await;
    assert_eq!(receiver.received().len(), 1, "the waiting copy was dropped unsent");
    let cancelled = record(&pipeline, &subscription, &delivery).await;
    assert_eq!(
        (cancelled.status, cancelled.attempts, cancelled.last_response_status, cancelled.last_error.as_deref()),
        (DeliveryStatus::Cancelled, 1, Some(500), Some(CANCELLED_ERROR))
    );
    assert_eq!(cancelled.next_attempt_at, None);
    let listed =
        pipeline.api.get(&format!("/api/v1/webhooks/deliveries?id={subscription}&status=cancelled"), &key).await;
    assert_eq!(listed.assert_status(200)["deliveries"][0]["id"], delivery.as_str(), "in the cancelled list");
    assert_eq!(cancel(&pipeline, &key, &subscription, None).await, (202, json!({"cancelling": 0, "more": false})));

    let path = format!("/api/v1/webhooks/deliveries/retry?id={delivery}");
    pipeline.api.request(Method::POST, &path).key(&key).send().await.assert_status(202);
    receiver.wait_for(2, DEADLINE).await;
    pipeline.settled(&subscription).await;
    assert_eq!(record(&pipeline, &subscription, &delivery).await.status, DeliveryStatus::Succeeded);
}

/// A cancel while the delivery's first attempt is in flight (its receiver holds the request):
/// the attempt is recorded when it ends, as under a manual retry's takeover (it counts and its
/// answer shows), the record stays `cancelled`, and nothing more is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_during_an_attempt_records_the_attempt_and_stays_cancelled() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::holding(&[200]).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let delivery = receiver.wait_for(1, DEADLINE).await[0].header("webhook-id").to_owned();
    let key = pipeline.api.key(&user, "write:webhooks").await;
    assert_eq!(cancel(&pipeline, &key, &subscription, None).await, (202, json!({"cancelling": 1, "more": false})));
    receiver.open();

    eventually("the attempt in flight recorded", || async {
        let record = record(&pipeline, &subscription, &delivery).await;
        if record.attempts == 1 {
            Ok(record)
        } else {
            Err(record)
        }
    })
    .await;
    pipeline.drained().await;
    let cancelled = record(&pipeline, &subscription, &delivery).await;
    assert_eq!(
        (cancelled.status, cancelled.attempts, cancelled.last_response_status, cancelled.last_error),
        (DeliveryStatus::Cancelled, 1, Some(200), None),
        "the attempt counts and its answer shows"
    );
    assert_eq!(receiver.received().len(), 1, "nothing more was sent");
}

/// Holds a delivery through the real path (contract section 20): `subscription` paused,
/// holding what comes meanwhile (the default `whileDisabled`), then one change of `user`'s
/// profile through the stream and the fan-out, which records it `held`; its id.
async fn hold(pipeline: &Pipeline, key: &str, user: &str, subscription: &str) -> String {
    let path = format!("/api/v1/webhooks?id={subscription}");
    let paused = pipeline.api.send_json(Method::PATCH, &path, key, r#"{"enabled": false}"#).await;
    assert_eq!(paused.assert_status(200)["whileDisabled"], "hold");
    pipeline.api.admin.update_profile(user).await.unwrap();
    let path = format!("/api/v1/webhooks/deliveries?id={subscription}&status=held");
    eventually("a held delivery", || async {
        let listed = pipeline.api.get(&path, key).await.assert_status(200)["deliveries"].clone();
        let id = listed.as_array().and_then(|d| d.first()).and_then(|d| d["id"].as_str()).map(str::to_owned);
        id.ok_or(listed)
    })
    .await
}

/// A cancel ends a held delivery too (found through the status index), and a cancelled one is
/// replayed when asked for: sent, and `succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_ends_what_is_held_and_a_replay_sends_what_was_cancelled() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    let since = Timestamp::now() - Duration::from_secs(60);
    let key = pipeline.api.full_key(&user).await;
    let held = hold(&pipeline, &key, &user, &subscription).await;
    assert_eq!(cancel(&pipeline, &key, &subscription, None).await, (202, json!({"cancelling": 1, "more": false})));
    let cancelled = record(&pipeline, &subscription, &held).await;
    assert_eq!((cancelled.status, cancelled.attempts), (DeliveryStatus::Cancelled, 0));
    // Enabled again, it has nothing held to release: the cancel ended it.
    let enable = format!("/api/v1/webhooks/enable?id={subscription}");
    let enabled = pipeline.api.request(Method::POST, &enable).key(&key).send().await;
    assert_eq!(enabled.assert_status(200)["released"], 0);

    let by_subscription = json!({subscription.clone(): 1});
    let (status, default) = replay(&pipeline, &key, json!({"since": since, "dryRun": true})).await;
    assert_eq!((status, &default["matching"]), (200, &json!(0)), "not by default: {default}");
    let asked = json!({"since": since, "status": ["cancelled"]});
    let (status, replayed) = replay(&pipeline, &key, asked).await;
    assert_eq!((status, replayed), (202, json!({"replaying": 1, "more": false, "bySubscription": by_subscription})));
    receiver.wait_for(1, DEADLINE).await;
    pipeline.settled(&subscription).await;
    assert_eq!(got(&receiver), sorted(&[&held]));
    assert_eq!(record(&pipeline, &subscription, &held).await.status, DeliveryStatus::Succeeded);
}

/// A cancel's refusals, in the contract's order of checks, change nothing.
#[tokio::test]
async fn a_refused_cancel_cancels_nothing() {
    let pipeline = Pipeline::start(false).await;
    let (user, other, own, foreign) = two_users(&pipeline).await;
    let ping = |user: String, subscription: String| {
        let pipeline = &pipeline;
        async move {
            let key = pipeline.api.key(&user, "write:webhooks").await;
            let path = format!("/api/v1/webhooks/ping?id={subscription}");
            let answer = pipeline.api.request(Method::POST, &path).key(&key).send().await;
            answer.assert_status(202)["id"].as_str().unwrap().to_owned()
        }
    };
    let (own_ping, foreign_ping) = (ping(user.clone(), own.clone()).await, ping(other.clone(), foreign.clone()).await);
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let code = |answer: (u16, Value)| (answer.0, answer.1["error"]["code"].as_str().unwrap_or_default().to_owned());
    let path = "/api/v1/webhooks/deliveries/cancel";
    for missing in [path.to_owned(), format!("{path}?id=")] {
        let answer = pipeline.api.request(Method::POST, &missing).key(&key).send().await;
        answer.assert_error(400, "webhooks.missing_subscription_id");
    }
    for bad in [json!({"createdBefore": "now"}), json!({"createdBefore": 5}), json!({"before": Timestamp::now()})] {
        assert_eq!(
            code(cancel(&pipeline, &key, &own, Some(bad.clone())).await),
            (400, "webhooks.invalid_cancel".into()),
            "{bad}"
        );
    }
    assert_eq!(code(cancel(&pipeline, &key, &foreign, None).await), (404, "webhooks.not_found".into()));
    assert_eq!(record(&pipeline, &own, &own_ping).await.status, DeliveryStatus::Pending, "nothing cancelled");
    assert_eq!(record(&pipeline, &foreign, &foreign_ping).await.status, DeliveryStatus::Pending);
    // Created before a time past them: nothing of the subscription's waits from before.
    let long_ago = json!({"createdBefore": Timestamp::now() - Duration::from_secs(3600)});
    assert_eq!(cancel(&pipeline, &key, &own, Some(long_ago)).await, (202, json!({"cancelling": 0, "more": false})));
    assert_eq!(cancel(&pipeline, &key, &own, None).await, (202, json!({"cancelling": 1, "more": false})));
    assert_eq!(record(&pipeline, &own, &own_ping).await.status, DeliveryStatus::Cancelled);
    assert_eq!(record(&pipeline, &foreign, &foreign_ping).await.status, DeliveryStatus::Pending, "another user's left");
}
