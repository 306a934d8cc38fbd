//! Event kinds and events (contract section 5, "Events"), and how a DynamoDB stream record
//! of the profiles or assessments table becomes at most one event.

use std::collections::HashMap;

use aws_lambda_events::dynamodb::{EventRecord, StreamRecord};
use serde::{Deserialize, Serialize};
use serde_dynamo::AttributeValue;

use crate::{clock, ids};

/// Every event kind a subscription can name. The one list of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    #[serde(rename = "profile.updated")]
    ProfileUpdated,
    #[serde(rename = "assessment.completed")]
    AssessmentCompleted,
}

impl EventKind {
    pub const ALL: [EventKind; 2] = [EventKind::ProfileUpdated, EventKind::AssessmentCompleted];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::ProfileUpdated => "profile.updated",
            EventKind::AssessmentCompleted => "assessment.completed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

/// An event, exactly the body a receiver gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: EventKind,
    pub created_at: String,
    pub data: serde_json::Map<String, serde_json::Value>,
}

impl Event {
    pub fn user_id(&self) -> Option<&str> {
        self.data.get("userId").and_then(|v| v.as_str())
    }
}

/// Why a stream record cannot be read; such a record is skipped (retrying cannot fix it).
#[derive(Debug, thiserror::Error)]
#[error("malformed stream record {event_id:?}: {problem}")]
pub struct MalformedRecord {
    pub event_id: String,
    pub problem: &'static str,
}

/// The event a stream record stands for, if any: `profile.updated` when a profile item is
/// created or really changed, `assessment.completed` when an assessment's status becomes
/// `completed`.
pub fn event_from_record(record: &EventRecord) -> Result<Option<Event>, MalformedRecord> {
    let malformed = |problem| MalformedRecord {
        event_id: record.event_id.clone(),
        problem,
    };
    let change = &record.change;
    let (kind, id_attribute) = if change.keys.contains_key("profileId") {
        (EventKind::ProfileUpdated, "profileId")
    } else if change.keys.contains_key("assessmentId") {
        (EventKind::AssessmentCompleted, "assessmentId")
    } else {
        return Err(malformed("keys name neither a profile nor an assessment"));
    };
    if record.event_name == "REMOVE" {
        return Ok(None);
    }
    if record.event_name != "INSERT" && record.event_name != "MODIFY" {
        return Err(malformed("unknown event name"));
    }
    let new = &change.new_image;
    if new.is_empty() {
        return Err(malformed(
            "no new image (the stream must carry new and old images)",
        ));
    }
    let happened = match kind {
        EventKind::ProfileUpdated => record.event_name == "INSERT" || change.old_image != *new,
        EventKind::AssessmentCompleted => {
            is_completed(new) && (record.event_name == "INSERT" || !is_completed(&change.old_image))
        }
    };
    if !happened {
        return Ok(None);
    }
    let user_id =
        string_attribute(&change.keys, "userId").ok_or_else(|| malformed("no userId key"))?;
    let item_id =
        string_attribute(&change.keys, id_attribute).ok_or_else(|| malformed("no item id key"))?;
    let created_millis = created_millis(change);
    let mut data = serde_json::Map::new();
    data.insert("userId".into(), user_id.into());
    data.insert(id_attribute.into(), item_id.into());
    Ok(Some(Event {
        id: ids::derived_id(
            ids::EVENT,
            created_millis,
            &[
                record.event_source_arn.as_deref().unwrap_or_default(),
                &record.event_id,
            ],
        ),
        kind,
        created_at: clock::rfc3339_from_millis(created_millis),
        data,
    }))
}

fn created_millis(change: &StreamRecord) -> u64 {
    u64::try_from(change.approximate_creation_date_time.timestamp_millis()).unwrap_or_default()
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
