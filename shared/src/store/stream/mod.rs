//! The tables' streams: how a DynamoDB stream record of the profiles or assessments table
//! becomes at most one event of the platform's data, and the trace of the change it carries;
//! `operational` reads the webhooks and deliveries tables' records (contract section 15).

pub mod operational;

use std::collections::HashMap;

use aws_lambda_events::dynamodb::{EventRecord, StreamRecord};
use serde_dynamo::AttributeValue;

use crate::clock::Timestamp;
use crate::config::TableNames;
use crate::events::{Event, EventData, EventKind};
use crate::ids::{AssessmentId, EventId, ProfileId, UserId};
use crate::trace::TraceContext;

/// Why a stream record cannot be read; such a record is skipped (retrying cannot fix it).
#[derive(Debug, thiserror::Error)]
#[error("malformed stream record {event_id:?}: {problem}")]
pub struct MalformedRecord {
    pub event_id: String,
    pub problem: &'static str,
}

/// Where an event of the platform's data comes from: the table whose stream carries it (as
/// named in [`TableNames`]), the key attribute that names the item, when a record of it is an
/// event, and the event's data. The one list of such sources: the fan-out reads records by it,
/// and careerctl's deploy checks hold template.yaml's streams and filters to it.
pub struct EventSource {
    pub kind: EventKind,
    pub table: fn(&TableNames) -> &str,
    pub item_key: &'static str,
    /// Whether the change (`INSERT` or `MODIFY`, the new image present) is the event.
    pub fires: fn(&EventRecord) -> bool,
    data: fn(UserId, &str) -> Option<EventData>,
}

/// Every source of the platform's events.
pub const EVENT_SOURCES: [EventSource; 2] = [
    EventSource {
        kind: EventKind::ProfileUpdated,
        table: |tables| &tables.profiles,
        item_key: "profileId",
        // Created, or really changed.
        fires: |record| record.event_name == "INSERT" || record.change.old_image != record.change.new_image,
        data: |user_id, id| Some(EventData::ProfileUpdated { user_id, profile_id: ProfileId::parse(id)? }),
    },
    EventSource {
        kind: EventKind::AssessmentCompleted,
        table: |tables| &tables.assessments,
        item_key: "assessmentId",
        // Only the transition to completed.
        fires: |record| {
            let change = &record.change;
            is_completed(&change.new_image) && (record.event_name == "INSERT" || !is_completed(&change.old_image))
        },
        data: |user_id, id| Some(EventData::AssessmentCompleted { user_id, assessment_id: AssessmentId::parse(id)? }),
    },
];

/// The event a stream record of the platform's data stands for, if any (see [`EVENT_SOURCES`]).
pub fn event_from_record(record: &EventRecord) -> Result<Option<Event>, MalformedRecord> {
    let malformed = |problem| MalformedRecord { event_id: record.event_id.clone(), problem };
    let change = &record.change;
    let source = EVENT_SOURCES.iter().find(|source| change.keys.contains_key(source.item_key));
    let source = source.ok_or_else(|| malformed("keys name no item of an event source (profileId, assessmentId)"))?;
    if record.event_name == "REMOVE" {
        return Ok(None);
    }
    if record.event_name != "INSERT" && record.event_name != "MODIFY" {
        return Err(malformed("unknown event name"));
    }
    if change.new_image.is_empty() {
        return Err(malformed("no new image (the stream must carry new and old images)"));
    }
    if !(source.fires)(record) {
        return Ok(None);
    }
    let user_id = string_attribute(&change.keys, "userId").and_then(UserId::parse);
    let user_id = user_id.ok_or_else(|| malformed("no userId key, or not a user id"))?;
    let item_id = string_attribute(&change.keys, source.item_key);
    let data = item_id.and_then(|id| (source.data)(user_id, id));
    let data = data.ok_or_else(|| malformed("the item's key is not an id of its kind"))?;
    let created_at = created_at(change);
    Ok(Some(Event {
        id: EventId::derived(created_at, &[record.event_source_arn.as_deref().unwrap_or_default(), &record.event_id]),
        created_at,
        data,
    }))
}

/// The trace of the change a stream record carries (contract section 19): the `traceparent`
/// (and `tracestate`) attributes that the write which made the change set on its item. One
/// the old image had already is an earlier write's, not this one's: the item keeps its
/// attributes, and a writer that sets none must not continue the trace of the write before.
pub fn trace_of_record(record: &EventRecord) -> Option<TraceContext> {
    let change = &record.change;
    let traceparent = string_attribute(&change.new_image, "traceparent");
    if traceparent.is_some() && traceparent == string_attribute(&change.old_image, "traceparent") {
        return None;
    }
    TraceContext::of(traceparent, string_attribute(&change.new_image, "tracestate"))
}

/// When the change happened: the item's own timestamp (`updatedAt`, `completedAt`) when it
/// has one, else the stream's approximate creation time. Both come from the record, so a
/// repeated record yields the same event.
fn created_at(change: &StreamRecord) -> Timestamp {
    ["updatedAt", "completedAt"]
        .iter()
        .filter_map(|name| string_attribute(&change.new_image, name))
        .find_map(Timestamp::parse_rfc3339)
        .unwrap_or_else(|| change.approximate_creation_date_time.into())
}

fn is_completed(image: &serde_dynamo::Item) -> bool {
    string_attribute(image, "status") == Some("completed")
}

fn string_attribute<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(text)) if !text.is_empty() => Some(text),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(name: &str, keys: serde_json::Value, old: serde_json::Value, new: serde_json::Value) -> EventRecord {
        serde_json::from_value(json!({
            "awsRegion": "us-east-1",
            "eventID": "ev-1",
            "eventName": name,
            "eventSource": "aws:dynamodb",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/profiles/stream/x",
            "dynamodb": {"ApproximateCreationDateTime": 1795766400.0, "Keys": keys, "OldImage": old, "NewImage": new,
                         "SequenceNumber": "100", "SizeBytes": 10, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        }))
        .unwrap()
    }

    fn profile(revision: &str) -> serde_json::Value {
        json!({"userId": {"S": "u1"}, "profileId": {"S": "prf_1"}, "revision": {"N": revision},
               "updatedAt": {"S": "2026-11-27T08:00:05.250Z"}})
    }

    fn assessment(status: &str) -> serde_json::Value {
        json!({"userId": {"S": "u1"}, "assessmentId": {"S": "asm_1"}, "status": {"S": status}})
    }

    const PROFILE_KEYS: fn() -> serde_json::Value = || json!({"userId": {"S": "u1"}, "profileId": {"S": "prf_1"}});
    const ASSESSMENT_KEYS: fn() -> serde_json::Value =
        || json!({"userId": {"S": "u1"}, "assessmentId": {"S": "asm_1"}});

    #[test]
    fn a_created_or_changed_profile_is_one_event() {
        let event = event_from_record(&record("INSERT", PROFILE_KEYS(), json!(null), profile("1"))).unwrap().unwrap();
        assert_eq!(event.kind(), EventKind::ProfileUpdated);
        assert_eq!(serde_json::to_value(&event.data).unwrap(), json!({"userId": "u1", "profileId": "prf_1"}));
        assert_eq!(event.created_at.to_string(), "2026-11-27T08:00:05.250Z");
        assert_eq!(event.id.created_at(), event.created_at, "the id sorts by the change's time");
        let changed = event_from_record(&record("MODIFY", PROFILE_KEYS(), profile("1"), profile("2"))).unwrap();
        assert!(changed.is_some());
    }

    #[test]
    fn a_write_that_changes_nothing_or_a_removal_is_no_event() {
        assert_eq!(event_from_record(&record("MODIFY", PROFILE_KEYS(), profile("1"), profile("1"))).unwrap(), None);
        assert_eq!(event_from_record(&record("REMOVE", PROFILE_KEYS(), profile("1"), json!(null))).unwrap(), None);
    }

    #[test]
    fn only_the_transition_to_completed_is_an_event() {
        let completed = |old, new| event_from_record(&record("MODIFY", ASSESSMENT_KEYS(), old, new)).unwrap();
        let event = completed(assessment("in_progress"), assessment("completed")).unwrap();
        assert_eq!(event.kind(), EventKind::AssessmentCompleted);
        assert_eq!(event.user_id().map(UserId::as_str), Some("u1"));
        assert_eq!(event.created_at.to_string(), "2026-11-27T08:00:00.000Z", "no item timestamp: the stream's time");
        assert_eq!(completed(assessment("completed"), assessment("completed")), None);
        assert_eq!(completed(assessment("started"), assessment("in_progress")), None);
        let inserted = event_from_record(&record("INSERT", ASSESSMENT_KEYS(), json!(null), assessment("completed")));
        assert!(inserted.unwrap().is_some());
    }

    #[test]
    fn the_trace_is_the_one_the_write_set_on_the_item() {
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let traced = |image: &serde_json::Value| {
            let mut image = image.clone();
            image["traceparent"] = json!({"S": traceparent});
            image["tracestate"] = json!({"S": "rojo=1"});
            image
        };
        let written = trace_of_record(&record("INSERT", PROFILE_KEYS(), json!(null), traced(&profile("1")))).unwrap();
        assert_eq!((written.parent.to_string().as_str(), written.state.unwrap().as_str()), (traceparent, "rojo=1"));
        let changed = record("MODIFY", PROFILE_KEYS(), profile("1"), traced(&profile("2")));
        assert!(trace_of_record(&changed).is_some());
        let kept = record("MODIFY", PROFILE_KEYS(), traced(&profile("1")), traced(&profile("2")));
        assert_eq!(trace_of_record(&kept), None, "the earlier write's traceparent, still on the item");
        assert_eq!(trace_of_record(&record("INSERT", PROFILE_KEYS(), json!(null), profile("1"))), None);
        let mut invalid = profile("1");
        invalid["traceparent"] = json!({"S": "00-zz"});
        assert_eq!(trace_of_record(&record("INSERT", PROFILE_KEYS(), json!(null), invalid)), None, "ignored");
    }

    #[test]
    fn the_event_id_is_stable_for_a_repeated_record() {
        let make = || event_from_record(&record("INSERT", PROFILE_KEYS(), json!(null), profile("1"))).unwrap().unwrap();
        assert_eq!(make().id, make().id);
    }

    #[test]
    fn records_without_usable_keys_or_images_are_malformed() {
        assert!(
            event_from_record(&record("INSERT", json!({"userId": {"S": "u1"}}), json!(null), profile("1"))).is_err()
        );
        assert!(event_from_record(&record("MODIFY", PROFILE_KEYS(), profile("1"), json!(null))).is_err());
        let no_user = json!({"profileId": {"S": "prf_1"}});
        assert!(event_from_record(&record("INSERT", no_user, json!(null), profile("1"))).is_err());
        let bad_profile = json!({"userId": {"S": "u1"}, "profileId": {"S": "prf\n1"}});
        assert!(event_from_record(&record("INSERT", bad_profile, json!(null), profile("1"))).is_err());
        let bad_assessment = json!({"userId": {"S": "u1"}, "assessmentId": {"S": " asm_1"}});
        assert!(event_from_record(&record("INSERT", bad_assessment, json!(null), assessment("completed"))).is_err());
    }
}
