//! Operational events end to end (contract section 15): a subscription's health transitions
//! and its exhausted deliveries reach the same user's other subscriptions that list them,
//! signed like any delivery, once per transition, and the operator's topic, with real
//! receivers on loopback and the stack's streams, pumps and SNS topic in moto.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::Event as StreamEvent;
use career_core::delivery::log::{DeliveryRecord, DeliveryStatus};
use career_core::store::deliveries::DeliveryTable;
use career_core::webhooks::signing::verify_hex;
use career_service::pipeline::Pipeline;
use career_service::receiver::{Received, Receiver};
use career_service::{acting_as, clients, dynamodb, eventually, typed, unique_user, DEADLINE};
use local_aws::template::function;
use serde_json::{json, Value};

const NO_DELAY: Duration = Duration::ZERO;

const FAILING: &str = "webhook.endpoint.failing";
const DISABLED: &str = "webhook.endpoint.disabled";
const RECOVERED: &str = "webhook.endpoint.recovered";
const EXHAUSTED: &str = "webhook.delivery.exhausted";
const OPERATIONAL: [&str; 4] = [FAILING, DISABLED, RECOVERED, EXHAUSTED];

/// The operational events a receiver got, each once (a retried delivery repeats its body).
fn operational(received: &[Received]) -> Vec<Value> {
    let mut seen = BTreeSet::new();
    received
        .iter()
        .map(Received::json)
        .filter(|body| OPERATIONAL.contains(&body["type"].as_str().unwrap_or_default()))
        .filter(|body| seen.insert(body["id"].as_str().unwrap_or_default().to_owned()))
        .collect()
}

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|event| event["type"].as_str().unwrap()).collect()
}

/// Waits until `receiver` got `count` distinct operational events, then until nothing more can
/// come ([`Pipeline::idle`]), so that one more would be among those returned.
async fn settled(pipeline: &Pipeline, receiver: &Receiver, count: usize) -> Vec<Value> {
    eventually(format!("{count} operational events"), || async {
        let events = operational(&receiver.received());
        if events.len() >= count {
            Ok(())
        } else {
            Err(kinds(&events).into_iter().map(str::to_owned).collect::<Vec<_>>())
        }
    })
    .await;
    pipeline.idle().await;
    operational(&receiver.received())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_receiver_is_reported_failing_disabled_and_exhausted_once_each_to_a_sibling_and_the_operator() {
    // Disabled at the first delivery's last attempt: it has been failing for longer than 0 s.
    let pipeline = Pipeline::with_settings(true, |s| s.webhook_disable_after = Duration::ZERO).await;
    let user = unique_user();
    let failing = Receiver::answering(&[500], "down", NO_DELAY).await;
    let watcher = Receiver::start(&[200], NO_DELAY).await;
    let (failing_id, _) = pipeline.subscribe(&user, &failing.url, &["profile.updated", FAILING]).await;
    let (_, secret) = pipeline.subscribe(&user, &watcher.url, &OPERATIONAL).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let events = settled(&pipeline, &watcher, 3).await;
    assert_eq!(kinds(&events).into_iter().collect::<BTreeSet<_>>(), [DISABLED, EXHAUSTED, FAILING].into());
    let of = |kind: &str| events.iter().find(|e| e["type"] == kind).unwrap().clone();
    let expected_failing = json!({"userId": user, "subscriptionId": failing_id, "url": failing.url,
        "failingSince": of(FAILING)["createdAt"], "lastError": "answered 500", "lastResponseStatus": 500});
    assert_eq!(of(FAILING)["data"], expected_failing);
    assert_eq!(of(DISABLED)["data"]["disabledReason"], "failing");
    assert_eq!(of(DISABLED)["data"]["subscriptionId"], failing_id);
    let exhausted = of(EXHAUSTED)["data"].clone();
    assert_eq!((exhausted["eventType"].as_str(), exhausted["attempts"].as_u64()), (Some("profile.updated"), Some(3)));
    assert_eq!(exhausted["lastError"], "answered 500");
    for delivery in watcher.received() {
        assert!(verify_hex(&secret, &delivery.body, delivery.header("x-webhook-signature")), "signed");
        assert_eq!(delivery.header("x-webhook-event"), delivery.json()["type"]);
    }
    // Never to the subscription it is about, though it lists failing.
    assert!(operational(&failing.received()).is_empty());

    let published = pipeline.notifications(3, DEADLINE).await;
    let by_id = |events: Vec<Value>| {
        events
            .into_iter()
            .map(|e| (e["id"].as_str().unwrap().to_owned(), e))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let published = by_id(published.into_iter().map(|n| n.message).collect());
    assert_eq!(published, by_id(events), "the operator's topic has the same events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_success_after_failing_is_reported_recovered() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let flaky = Receiver::start(&[500, 200], NO_DELAY).await;
    let watcher = Receiver::start(&[200], NO_DELAY).await;
    let (flaky_id, _) = pipeline.subscribe(&user, &flaky.url, &["profile.updated"]).await;
    pipeline.subscribe(&user, &watcher.url, &[FAILING, RECOVERED]).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let events = settled(&pipeline, &watcher, 2).await;
    let mut seen = kinds(&events);
    seen.sort();
    assert_eq!(seen, [FAILING, RECOVERED]);
    let recovered = events.iter().find(|e| e["type"] == RECOVERED).unwrap();
    let failing = events.iter().find(|e| e["type"] == FAILING).unwrap();
    assert_eq!(recovered["data"]["subscriptionId"], flaky_id);
    assert_eq!(recovered["data"]["failingSince"], failing["data"]["failingSince"]);
    assert_eq!(recovered["data"]["recoveredAt"], recovered["createdAt"]);
}

/// Flapping (fail, succeed, fail, succeed) is one event per transition, each with its own
/// id and time, the times in the order of the writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flapping_receiver_is_one_event_per_transition() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let flapping = Receiver::start(&[500, 200, 500, 200], NO_DELAY).await;
    let watcher = Receiver::start(&[200], NO_DELAY).await;
    pipeline.subscribe(&user, &flapping.url, &["profile.updated"]).await;
    pipeline.subscribe(&user, &watcher.url, &[FAILING, RECOVERED]).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    settled(&pipeline, &watcher, 2).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let mut events = settled(&pipeline, &watcher, 4).await;
    events.sort_by_key(|event| event["createdAt"].as_str().unwrap().to_owned());
    assert_eq!(kinds(&events), [FAILING, RECOVERED, FAILING, RECOVERED]);
    assert_eq!(events[1]["data"]["failingSince"], events[0]["createdAt"]);
    assert_eq!(events[3]["data"]["failingSince"], events[2]["createdAt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_failing_subscriptions_that_report_on_each_other_do_not_loop() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let first = Receiver::start(&[500], NO_DELAY).await;
    let second = Receiver::start(&[500], NO_DELAY).await;
    let (first_id, _) = pipeline.subscribe(&user, &first.url, &["profile.updated", FAILING]).await;
    let (second_id, _) = pipeline.subscribe(&user, &second.url, &["profile.updated", FAILING]).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    // Each gets the other's one transition, though delivering it fails too.
    let to_first = settled(&pipeline, &first, 1).await;
    let to_second = settled(&pipeline, &second, 1).await;
    assert_eq!(to_first.len(), 1, "{to_first:?}");
    assert_eq!(to_second.len(), 1, "{to_second:?}");
    assert_eq!(to_first[0]["data"]["subscriptionId"], second_id);
    assert_eq!(to_second[0]["data"]["subscriptionId"], first_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_users_only_subscription_is_not_told_but_the_operator_is() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let only = Receiver::start(&[500], NO_DELAY).await;
    let (only_id, _) = pipeline.subscribe(&user, &only.url, &["profile.updated", FAILING, EXHAUSTED]).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let published = pipeline.notifications(2, DEADLINE).await;
    let mut kinds: Vec<&str> = published.iter().map(|n| n.message["type"].as_str().unwrap()).collect();
    kinds.sort();
    assert_eq!(kinds, [EXHAUSTED, FAILING]);
    assert!(published.iter().all(|n| n.message["data"]["subscriptionId"] == only_id.as_str()));
    assert_eq!(published[0].subject.as_deref().map(|s| s.ends_with(&format!("({only_id})"))), Some(true));
    pipeline.idle().await;
    assert!(operational(&only.received()).is_empty(), "nowhere to send it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_pause_emits_nothing() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let paused = Receiver::start(&[200], NO_DELAY).await;
    let watcher = Receiver::start(&[200], NO_DELAY).await;
    let (paused_id, _) = pipeline.subscribe(&user, &paused.url, &["profile.updated"]).await;
    pipeline.subscribe(&user, &watcher.url, &OPERATIONAL).await;

    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks?id={paused_id}");
    let answer = pipeline.api.send_json(lambda_http::http::Method::PATCH, &path, &key, r#"{"enabled":false}"#).await;
    assert_eq!(answer.assert_status(200)["disabledReason"], "manual");
    pipeline.idle().await;
    assert!(watcher.received().is_empty());
    assert!(pipeline.notifications(0, Duration::ZERO).await.is_empty());
}

/// The same stream record of a transition, processed twice (a retried batch), is one event:
/// one delivery queued, with one id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replayed_transition_record_is_one_event() {
    let pipeline = Pipeline::start(false).await;
    let user = unique_user();
    let watcher = Receiver::start(&[200], NO_DELAY).await;
    pipeline.subscribe(&user, &watcher.url, &[FAILING]).await;
    let fanout = career_fanout::Deps::new(
        &acting_as(function::FANOUT, pipeline.settings(), &clients()),
        &career_service::function_settings(function::FANOUT, pipeline.settings()),
    )
    .unwrap();
    let subscription = |failing: Value| {
        let mut item = json!({"userId": {"S": user}, "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"},
            "url": {"S": "https://hooks.example.com/in"}});
        item.as_object_mut().unwrap().extend(failing.as_object().unwrap().clone());
        item
    };
    let table = &pipeline.settings().tables.webhooks;
    let record = json!({
        "awsRegion": "us-east-1", "eventID": "e-1", "eventName": "MODIFY", "eventSource": "aws:dynamodb",
        "eventSourceARN": format!("arn:aws:dynamodb:us-east-1:000000000000:table/{table}/stream/2026"),
        "dynamodb": {"ApproximateCreationDateTime": 1795766400.0,
                     "Keys": {"userId": {"S": user}, "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"}},
                     "OldImage": subscription(json!({})),
                     "NewImage": subscription(json!({"failingSince": {"S": "2026-11-27T08:00:00.000Z"},
                                                     "failingError": {"S": "answered 503"}, "failingStatus": {"N": "503"}})),
                     "SequenceNumber": "1", "SizeBytes": 64, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    });
    for _ in 0..2 {
        let mut batch = StreamEvent::default();
        batch.records = vec![serde_json::from_value(record.clone()).unwrap()];
        assert!(career_fanout::handle(&fanout, batch).await.batch_item_failures.is_empty());
    }
    let queued = pipeline.peek(&pipeline.queues.delivery, 2, Duration::from_secs(3)).await;
    assert_eq!(queued.len(), 1, "one delivery, queued once");
    let published = pipeline.notifications(2, DEADLINE).await;
    let ids: BTreeSet<&str> = published.iter().map(|n| n.message["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 1, "published at least once, always as the same event: {published:?}");
}

/// What the operator's topic got, each event once (the topic delivers at least once).
#[derive(Default)]
struct Published(Vec<Value>);

impl Published {
    /// Takes what the topic's inbox holds now.
    async fn take(&mut self, pipeline: &Pipeline) {
        for notification in pipeline.notifications(0, Duration::ZERO).await {
            if !self.0.iter().any(|seen| seen["id"] == notification.message["id"]) {
                self.0.push(notification.message);
            }
        }
    }

    /// The kinds of `user`'s events, sorted.
    fn kinds_of(&self, user: &str) -> Vec<&str> {
        let mut kinds: Vec<&str> =
            self.0.iter().filter(|e| e["data"]["userId"] == user).map(|e| e["type"].as_str().unwrap()).collect();
        kinds.sort();
        kinds
    }
}

/// Every record of `subscriptions` once the pipeline has settled for them: there are
/// `expected` records (never more: that fails at once), none `pending`, and the deliveries
/// and webhooks tables' streams have been fanned out past what made them so, with no record
/// added. A marker tells the streams are through: another user's delivery, ended at once by
/// a 410, whose `exhausted` and `disabled` reach the operator's topic only after every
/// earlier record of their streams was fanned out (the fan-out takes a stream's records in
/// order, and publishes last).
async fn settled_records(
    pipeline: &Pipeline,
    subscriptions: &[String],
    expected: usize,
    published: &mut Published,
) -> Vec<DeliveryRecord> {
    let table = DeliveryTable::new(dynamodb(), &pipeline.settings().tables.deliveries);
    let deadline = Instant::now() + DEADLINE * 2;
    let records = || async {
        let mut all = Vec::new();
        for subscription in subscriptions {
            all.extend(table.list(&typed(subscription), None, 100, None).await.unwrap().deliveries);
        }
        assert!(all.len() <= expected, "{} records where {expected} were expected: {all:#?}", all.len());
        all
    };
    loop {
        let before = records().await;
        if before.len() < expected || before.iter().any(|r| r.status == DeliveryStatus::Pending) {
            assert!(Instant::now() < deadline, "not settled: {before:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let marker_user = unique_user();
        let gone = Receiver::start(&[410], NO_DELAY).await;
        let (marker, _) = pipeline.subscribe(&marker_user, &gone.url, &["profile.updated"]).await;
        pipeline.api.admin.update_profile(&marker_user).await.unwrap();
        let marked = |published: &Published, kind: &str| {
            published.0.iter().any(|e| e["type"] == kind && e["data"]["subscriptionId"] == marker.as_str())
        };
        while !(marked(published, EXHAUSTED) && marked(published, DISABLED)) {
            assert!(Instant::now() < deadline, "the marker's event did not come");
            published.take(pipeline).await;
        }
        if records().await == before {
            return before;
        }
    }
}

/// Contract section 15: operational events never come of the deliveries of operational
/// events. Three failing subscriptions that list `webhook.delivery.exhausted` each hear once
/// of the two others' failed `profile.updated`; the failed deliveries of those reports raise
/// nothing (before, each raised the next round of reports, without end).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_failing_subscriptions_that_list_exhausted_hear_of_each_others_events_once_and_no_more() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let mut receivers = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let receiver = Receiver::answering(&[500], "down", NO_DELAY).await;
        ids.push(pipeline.subscribe(&user, &receiver.url, &["profile.updated", EXHAUSTED]).await.0);
        receivers.push(receiver);
    }
    pipeline.api.admin.update_profile(&user).await.unwrap();
    let mut published = Published::default();
    // Each: its own profile.updated, and the others' two reports of theirs.
    let records = settled_records(&pipeline, &ids, 9, &mut published).await;
    assert!(records.iter().all(|r| r.status == DeliveryStatus::Failed && r.attempts == 3), "{records:#?}");
    for (id, receiver) in ids.iter().zip(&receivers) {
        let mut about: Vec<Value> = operational(&receiver.received())
            .iter()
            .map(|e| {
                assert_eq!((&e["type"], &e["data"]["eventType"]), (&json!(EXHAUSTED), &json!("profile.updated")));
                e["data"]["subscriptionId"].clone()
            })
            .collect();
        about.sort_by_key(|id| id.as_str().unwrap().to_owned());
        let mut others: Vec<Value> = ids.iter().filter(|other| *other != id).map(|other| json!(other)).collect();
        others.sort_by_key(|id| id.as_str().unwrap().to_owned());
        assert_eq!(about, others, "{id}: one report of each other subscription's delivery");
    }
    published.take(&pipeline).await;
    assert_eq!(published.kinds_of(&user), [EXHAUSTED, EXHAUSTED, EXHAUSTED, FAILING, FAILING, FAILING]);
}

/// A subscription whose only failures are deliveries of operational events is not failing:
/// those deliveries start no failure clock, and their end raises no `exhausted` (contract
/// sections 9 and 15). Its records still show that they failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_deliveries_of_operational_events_make_their_subscription_neither_failing_nor_reported() {
    let pipeline = Pipeline::start(true).await;
    let user = unique_user();
    let failing = Receiver::answering(&[500], "down", NO_DELAY).await;
    let watcher = Receiver::answering(&[500], "down too", NO_DELAY).await;
    let (failing_id, _) = pipeline.subscribe(&user, &failing.url, &["profile.updated"]).await;
    let (watcher_id, _) = pipeline.subscribe(&user, &watcher.url, &[FAILING, EXHAUSTED]).await;

    pipeline.api.admin.update_profile(&user).await.unwrap();
    let mut published = Published::default();
    let ids = [failing_id.clone(), watcher_id.clone()];
    let records = settled_records(&pipeline, &ids, 3, &mut published).await;
    assert!(records.iter().all(|r| r.status == DeliveryStatus::Failed), "{records:#?}");
    let to_watcher: Vec<&DeliveryRecord> =
        records.iter().filter(|r| r.subscription_id.as_str() == watcher_id).collect();
    let mut kinds: Vec<&str> = to_watcher.iter().map(|r| r.event_type.as_str()).collect();
    kinds.sort();
    assert_eq!(kinds, [EXHAUSTED, FAILING]);
    published.take(&pipeline).await;
    assert_eq!(published.kinds_of(&user), [EXHAUSTED, FAILING], "only the failing subscription's");
    assert!(published
        .0
        .iter()
        .filter(|e| e["data"]["userId"] == user)
        .all(|e| e["data"]["subscriptionId"] == failing_id));
    let key = pipeline.api.key(&user, "read:webhooks").await;
    let listed = pipeline.api.get("/api/v1/webhooks", &key).await;
    let shown = listed.assert_status(200)["webhooks"].as_array().unwrap().clone();
    let watcher_shown = shown.iter().find(|s| s["id"] == watcher_id.as_str()).unwrap();
    assert_eq!((watcher_shown.get("failingSince"), &watcher_shown["enabled"]), (None, &json!(true)), "{watcher_shown}");
}

/// A retry pending when its subscription is paused ends `failed`, not sent again (contract
/// section 9), and raises no `webhook.delivery.exhausted`: its owner paused it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_stopped_by_a_pause_is_no_exhausted_event() {
    let pipeline = Pipeline::with_settings(true, |s| s.retry_base = Duration::from_secs(5)).await;
    let user = unique_user();
    let paused = Receiver::answering(&[500], "down", NO_DELAY).await;
    let watcher = Receiver::start(&[200], NO_DELAY).await;
    let (paused_id, _) = pipeline.subscribe(&user, &paused.url, &["profile.updated"]).await;
    pipeline.subscribe(&user, &watcher.url, &[EXHAUSTED]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    paused.wait_for(1, DEADLINE).await;
    let key = pipeline.api.key(&user, "write:webhooks").await;
    let path = format!("/api/v1/webhooks?id={paused_id}");
    let pause = r#"{"enabled":false,"whileDisabled":"skip"}"#;
    let answer = pipeline.api.send_json(lambda_http::http::Method::PATCH, &path, &key, pause).await;
    answer.assert_status(200);

    let mut published = Published::default();
    let records = settled_records(&pipeline, std::slice::from_ref(&paused_id), 1, &mut published).await;
    assert_eq!(
        (records[0].status, records[0].attempts, records[0].last_error.as_deref()),
        (DeliveryStatus::Failed, 1, Some("not sent again: the subscription is disabled"))
    );
    published.take(&pipeline).await;
    assert_eq!(published.kinds_of(&user), [FAILING], "its first failure only");
    assert!(watcher.received().is_empty());
}
