//! The webhooks and deliveries tables' stream records (contract section 15): each MODIFY
//! record's images read, with the tables' own declarations of the attributes
//! (`webhooks::HealthImage`, `deliveries::RecordSummary`), as the states that `operational`
//! decides an event of. Each transition is one conditional write, so one stream record.

use aws_lambda_events::dynamodb::EventRecord;
use serde::de::DeserializeOwned;

use crate::events::Event;
use crate::operational;
use crate::store::deliveries::RecordSummary;
use crate::store::stream::MalformedRecord;
use crate::store::webhooks::HealthImage;

/// The event a change of a subscription item stands for ([`operational::of_subscription_change`]).
pub fn from_subscription_record(record: &EventRecord) -> Result<Option<Event>, MalformedRecord> {
    let Some((old, new)) = images::<HealthImage>(record)? else { return Ok(None) };
    Ok(operational::of_subscription_change(old.into(), new.into()))
}

/// The event a change of a delivery record stands for ([`operational::of_delivery_change`]).
pub fn from_delivery_record(record: &EventRecord) -> Result<Option<Event>, MalformedRecord> {
    let Some((old, new)) = images::<RecordSummary>(record)? else { return Ok(None) };
    Ok(operational::of_delivery_change(old.into(), new.into(), record.change.approximate_creation_date_time.into()))
}

/// The old and new images of a MODIFY record; `None` for an insert or a removal, which are
/// no transition (a subscription or a record is created healthy, `pending` or `skipped`).
fn images<T: DeserializeOwned>(record: &EventRecord) -> Result<Option<(T, T)>, MalformedRecord> {
    let malformed = |problem| MalformedRecord { event_id: record.event_id.clone(), problem };
    if record.event_name != "MODIFY" {
        return Ok(None);
    }
    let read = |image: &serde_dynamo::Item| serde_dynamo::from_item::<_, T>(image.clone());
    let old = read(&record.change.old_image).map_err(|_| malformed("no readable old image"))?;
    let new = read(&record.change.new_image).map_err(|_| malformed("no readable new image"))?;
    Ok(Some((old, new)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;
    use crate::ids::SubscriptionId;
    use crate::operational::{reported, KINDS};
    use serde_json::{json, Value};

    fn record(old: Value, new: Value) -> EventRecord {
        serde_json::from_value(json!({
            "awsRegion": "us-east-1", "eventID": "ev-1", "eventName": "MODIFY", "eventSource": "aws:dynamodb",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/webhooks/stream/x",
            "dynamodb": {"ApproximateCreationDateTime": 1795766400.0,
                         "Keys": {"userId": {"S": "u1"}, "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"}},
                         "OldImage": old, "NewImage": new,
                         "SequenceNumber": "100", "SizeBytes": 10, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        }))
        .unwrap()
    }

    fn subscription(extra: Value) -> Value {
        let mut item = json!({"userId": {"S": "u1"}, "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"},
            "url": {"S": "https://user:pw@hooks.example.com/in?token=x"}, "events": {"L": []}});
        item.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        item
    }

    const SINCE: &str = "2026-11-27T08:00:00.000Z";
    const LATER: &str = "2026-11-27T09:00:00.000Z";

    fn failing() -> Value {
        subscription(json!({"failingSince": {"S": SINCE}, "failingError": {"S": "answered 500"},
                            "failingStatus": {"N": "500"}}))
    }

    fn event(old: Value, new: Value) -> Option<Event> {
        from_subscription_record(&record(old, new)).unwrap()
    }

    #[test]
    fn the_first_failure_is_failing_with_its_error() {
        let event = event(subscription(json!({})), failing()).expect("an event");
        assert_eq!(event.kind(), EventKind::EndpointFailing);
        assert_eq!(event.created_at.to_string(), SINCE);
        assert_eq!(
            serde_json::to_value(&event.data).unwrap(),
            json!({"userId": "u1", "subscriptionId": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K",
                   "url": "https://hooks.example.com/in", "failingSince": SINCE,
                   "lastError": "answered 500", "lastResponseStatus": 500}),
            "the URL as the logs show it"
        );
        assert_eq!(event.about().map(SubscriptionId::as_str), Some("whk_01JDQ40A1B2C3D4E5F6G7H8J9K"));
    }

    #[test]
    fn a_subscription_with_a_destination_is_named_by_its_queue() {
        let queue = "https://sqs.eu-west-1.amazonaws.com/210987654321/career-events";
        let destination = json!({"M": {"type": {"S": "aws_sqs"}, "queueUrl": {"S": queue},
            "roleArn": {"S": "arn:aws:iam::210987654321:role/sender"},
            "externalId": {"S": "Ab-_0123456789abcdefghijklmnopqrstuvwxyzABC"}}});
        let with_destination = |extra: Value| {
            let mut item = subscription(extra);
            let item_map = item.as_object_mut().unwrap();
            item_map.remove("url");
            item_map.insert("destination".into(), destination.clone());
            item
        };
        let failing = json!({"failingSince": {"S": SINCE}, "failingError": {"S": "the role may not send"}});
        let event = event(with_destination(json!({})), with_destination(failing)).expect("an event");
        assert_eq!(event.kind(), EventKind::EndpointFailing);
        assert_eq!(serde_json::to_value(&event.data).unwrap()["url"], queue);
    }

    #[test]
    fn the_same_transition_is_the_same_event_and_another_is_another() {
        let first = event(subscription(json!({})), failing()).unwrap();
        assert_eq!(event(subscription(json!({})), failing()).unwrap().id, first.id);
        let again = subscription(json!({"failingSince": {"S": LATER}, "failingError": {"S": "timed out after 10 s"}}));
        let second = event(subscription(json!({})), again).unwrap();
        assert_ne!(second.id, first.id);
        assert_eq!(serde_json::to_value(&second.data).unwrap()["lastResponseStatus"], Value::Null);
    }

    #[test]
    fn disabling_for_failing_or_gone_is_an_event_and_a_pause_is_not() {
        let disabled = |reason: &str| {
            subscription(
                json!({"failingSince": {"S": SINCE}, "disabledAt": {"S": LATER}, "disabledReason": {"S": reason}}),
            )
        };
        let event_for = |reason| event(failing(), disabled(reason));
        let failing_event = event_for("failing").unwrap();
        assert_eq!(failing_event.kind(), EventKind::EndpointDisabled);
        assert_eq!(serde_json::to_value(&failing_event.data).unwrap()["disabledReason"], "failing");
        assert_eq!(serde_json::to_value(&failing_event.data).unwrap()["disabledAt"], LATER);
        assert_eq!(event(subscription(json!({})), disabled("gone")).unwrap().kind(), EventKind::EndpointDisabled);
        assert_eq!(event_for("manual"), None);
        assert_eq!(event(subscription(json!({})), disabled("manual")), None);
        // A paused subscription disabled again (or renamed) changes nothing.
        assert_eq!(event(disabled("failing"), disabled("manual")), None);
    }

    #[test]
    fn a_success_after_failing_is_recovered_and_enabling_is_not() {
        let recovered = subscription(json!({"recoveredAt": {"S": LATER}}));
        let event_of = event(failing(), recovered.clone()).unwrap();
        assert_eq!(event_of.kind(), EventKind::EndpointRecovered);
        assert_eq!(
            serde_json::to_value(&event_of.data).unwrap(),
            json!({"userId": "u1", "subscriptionId": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K",
                   "url": "https://hooks.example.com/in", "failingSince": SINCE, "recoveredAt": LATER,
                   "reenabled": false})
        );
        // Enabling (a PATCH or POST …/enable) stops the clock without a success.
        assert_eq!(event(failing(), subscription(json!({}))), None);
        let earlier_recovery = subscription(json!({"recoveredAt": {"S": LATER}, "failingSince": {"S": SINCE}}));
        assert_eq!(event(earlier_recovery, recovered.clone()), None);
        let disabled = subscription(json!({"failingSince": {"S": SINCE}, "disabledAt": {"S": SINCE},
                                           "disabledReason": {"S": "failing"}}));
        assert_eq!(event(disabled.clone(), subscription(json!({}))), None, "enabling a disabled one");
        // A probe's success enables it with a recovery time (contract section 20).
        let reenabled = event(disabled, recovered).unwrap();
        assert_eq!(reenabled.kind(), EventKind::EndpointRecovered);
        let data = serde_json::to_value(&reenabled.data).unwrap();
        assert_eq!(
            (&data["reenabled"], &data["failingSince"], &data["recoveredAt"]),
            (&json!(true), &json!(SINCE), &json!(LATER))
        );
    }

    fn delivery_of(kind: &str, status: &str, attempts: u32) -> Value {
        json!({"userId": {"S": "u1"}, "deliveryId": {"S": "dlv_01JDQ41B2C3D4E5F6G7H8J9K0M"},
               "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"}, "eventId": {"S": "evt_01JDQ41B2C3D4E5F6G7H8J9K0M"},
               "eventType": {"S": kind}, "status": {"S": status}, "attempts": {"N": attempts.to_string()},
               "lastAttemptAt": {"S": LATER}, "lastError": {"S": "answered 500"}, "body": {"S": "{}"}})
    }

    /// A delivery of `profile.updated`, before (8 attempts) or after (9) its last attempt.
    fn delivery(status: &str) -> Value {
        delivery_of("profile.updated", status, if status == "pending" { 8 } else { 9 })
    }

    #[test]
    fn a_delivery_that_becomes_failed_is_exhausted_once() {
        let exhausted = |old, new| from_delivery_record(&record(old, new)).unwrap();
        let event = exhausted(delivery("pending"), delivery("failed")).unwrap();
        assert_eq!(event.kind(), EventKind::DeliveryExhausted);
        assert_eq!(event.created_at.to_string(), LATER);
        assert_eq!(
            serde_json::to_value(&event.data).unwrap(),
            json!({"userId": "u1", "subscriptionId": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K",
                   "deliveryId": "dlv_01JDQ41B2C3D4E5F6G7H8J9K0M", "eventId": "evt_01JDQ41B2C3D4E5F6G7H8J9K0M",
                   "eventType": "profile.updated", "attempts": 9, "lastError": "answered 500"})
        );
        assert_eq!(exhausted(delivery("pending"), delivery("failed")).unwrap().id, event.id);
        assert_eq!(exhausted(delivery("failed"), delivery("failed")), None);
        assert_eq!(exhausted(delivery("pending"), delivery("succeeded")), None);
    }

    #[test]
    fn a_delivery_of_an_operational_event_or_one_stopped_unsent_is_no_event() {
        let exhausted = |old, new| from_delivery_record(&record(old, new)).unwrap();
        for kind in KINDS {
            let (old, new) = (delivery_of(kind.as_str(), "pending", 2), delivery_of(kind.as_str(), "failed", 3));
            assert_eq!(exhausted(old, new), None, "{}", kind.as_str());
            assert!(!reported(kind));
        }
        for kind in [EventKind::ProfileUpdated, EventKind::AssessmentCompleted, EventKind::WebhookPing] {
            let (old, new) = (delivery_of(kind.as_str(), "pending", 2), delivery_of(kind.as_str(), "failed", 3));
            assert!(exhausted(old, new).is_some(), "{}", kind.as_str());
            assert!(reported(kind));
        }
        // A probe that failed is its subscription's probing (contract section 20).
        let mut probe = delivery_of("webhook.ping", "failed", 1);
        probe["probe"] = json!({"BOOL": true});
        assert_eq!(exhausted(delivery_of("webhook.ping", "pending", 0), probe), None);
        // Its subscription disabled before its second attempt: it ends failed, with no attempt.
        let stopped = delivery_of("profile.updated", "failed", 1);
        assert_eq!(exhausted(delivery_of("profile.updated", "pending", 1), stopped), None);
    }

    #[test]
    fn unreadable_images_are_malformed_and_inserts_no_transition() {
        assert!(from_subscription_record(&record(json!({"userId": {"S": "u1"}}), failing())).is_err());
        let mut insert = record(json!(null), failing());
        insert.event_name = "INSERT".into();
        assert_eq!(from_subscription_record(&insert).unwrap(), None);
    }
}
