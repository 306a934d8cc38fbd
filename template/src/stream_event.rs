//! The event Lambda builds from a DynamoDB stream's records for the function it invokes: the
//! local stream pump hands it to the fan-out, and `careerctl streams replay` builds the same
//! from the records it reads again.

use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord, StreamRecord, StreamViewType};
use aws_sdk_dynamodbstreams::types::Record;
use career_core::clock::Timestamp;

/// The event Lambda would build from these records.
pub fn stream_event(stream_arn: &str, records: Vec<Record>) -> StreamEvent {
    let mut event = StreamEvent::default();
    event.records = records.into_iter().map(|record| event_record(stream_arn, record)).collect();
    event
}

fn event_record(stream_arn: &str, record: Record) -> EventRecord {
    let source = record.dynamodb.unwrap_or_else(|| aws_sdk_dynamodbstreams::types::StreamRecord::builder().build());
    let mut change = StreamRecord::default();
    if let Some(at) = source.approximate_creation_date_time {
        change.approximate_creation_date_time =
            Timestamp::from_unix_millis(u64::try_from(at.to_millis().unwrap_or_default()).unwrap_or_default()).into();
    }
    change.keys = source.keys.unwrap_or_default().into();
    change.new_image = source.new_image.unwrap_or_default().into();
    change.old_image = source.old_image.unwrap_or_default().into();
    change.sequence_number = source.sequence_number;
    change.size_bytes = source.size_bytes.unwrap_or_default();
    change.stream_view_type = Some(StreamViewType::NewAndOldImages);
    let mut converted = EventRecord::default();
    converted.aws_region = crate::REGION.to_owned();
    converted.change = change;
    converted.event_id = record.event_id.unwrap_or_default();
    converted.event_name = record.event_name.map(|name| name.as_str().to_owned()).unwrap_or_default();
    converted.event_source = Some("aws:dynamodb".to_owned());
    converted.event_version = record.event_version;
    converted.event_source_arn = Some(stream_arn.to_owned());
    converted
}
