//! The stream failures queue (the fan-out's event sources' on-failure destination) and
//! `careerctl streams replay`. A batch of stream records that ran out of retries is not in
//! the queue: Lambda sends only where it was in the stream (the shard and the first and last
//! sequence numbers), and the stream keeps records 24 hours. The replay reads the records
//! back while the stream holds them and hands them to the fan-out's handler as the event
//! source would (the template's filters applied), with the operator's credentials; a record
//! processed again queues nothing for a delivery that has its record already (contract 12).

use std::collections::HashMap;

use anyhow::Context;
use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use aws_sdk_dynamodbstreams::Client as Streams;
use aws_sdk_sqs::types::{Message, QueueAttributeName};
use aws_sdk_sqs::Client as Sqs;
use serde::Serialize;
use serde_json::Value as Json;

use career_template::filters::passing;
use career_template::on_failure::{BatchInfo, OnFailureRecord, SequenceNumber};
use career_template::stream_event::stream_event;

/// Why a message of the queue was not recovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Unrecovered {
    /// The stream no longer holds the records: older than 24 hours. Lost for good.
    Trimmed,
    /// The stream or its shard no longer exists (the table's stream was turned off or the
    /// table deleted; a closed shard goes 24 hours after its last record). Lost for good.
    ShardGone,
    /// The fan-out failed again on a record of the batch; the message stays for a later run.
    FanOutFailed,
    /// Reading the stream failed otherwise (throttled, refused); the message stays.
    StreamError,
    /// The stream is none of the fan-out's event sources in the template; the message stays.
    UnknownStream,
    /// The message is not a DynamoDB stream batch's record; it stays.
    Unreadable,
}

impl Unrecovered {
    /// Whether the records are gone from the stream, so no later run can recover them.
    fn lost_for_good(self) -> bool {
        matches!(self, Unrecovered::Trimmed | Unrecovered::ShardGone)
    }
}

/// A message of the queue that was not recovered, and why.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NotRecovered {
    pub message_id: String,
    /// The batch it names, when it could be read.
    pub batch: Option<BatchInfo>,
    pub reason: Unrecovered,
    pub detail: String,
    /// Deleted from the queue (`--discard-lost`, for records lost for good); otherwise it
    /// is back in the queue for the next run.
    pub deleted: bool,
}

/// What `streams replay` did: the messages whose records went through the fan-out again
/// (and were deleted), the records handed to it, and every message it could not recover.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replayed {
    pub recovered: usize,
    pub records: usize,
    pub not_recovered: Vec<NotRecovered>,
}

/// The filters of each stream the fan-out reads, by table name: what the event source
/// would pass to the function.
pub type StreamFilters = HashMap<String, Vec<Json>>;

/// How long the replay keeps a received message out of sight: a message it could not
/// recover is made visible again at the end of the run, so one run sees each message once.
const OUT_OF_SIGHT_SECONDS: i32 = 900;

/// Empty pages of a shard read in a row before the replay stops looking for the batch's
/// last record (DynamoDB Streams may answer empty pages before the records).
const MAX_EMPTY_PAGES: usize = 10;

/// `streams replay`: re-runs the batch of every message of the stream failures queue `queue`
/// through the fan-out (`fanout`), with `filters` as its event sources apply them, and
/// deletes each message it recovered. `discard_lost` also deletes the messages whose records
/// the stream no longer holds. `progress` gets one line per message, for people.
pub async fn replay(
    sqs: &Sqs,
    streams: &Streams,
    fanout: &career_fanout::Deps,
    filters: &StreamFilters,
    queue: &str,
    discard_lost: bool,
    progress: &mut dyn FnMut(String),
) -> anyhow::Result<Replayed> {
    let waiting = approximate_count(sqs, queue).await?;
    progress(format!("about {waiting} failed batches wait in {queue}"));
    let mut replayed = Replayed::default();
    let mut kept = Vec::new();
    let mut seen = 0;
    loop {
        let received = sqs
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages(10)
            .visibility_timeout(OUT_OF_SIGHT_SECONDS)
            // A long poll asks every SQS server, so an empty answer means an empty queue.
            .wait_time_seconds(1)
            .send()
            .await
            .context("receiving from the stream failures queue")?;
        let messages = received.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for message in messages {
            seen += 1;
            let outcome = replay_message(streams, fanout, filters, &message).await;
            let receipt = message.receipt_handle().unwrap_or_default();
            let delete = match &outcome {
                Ok(_) => true,
                Err(failed) => discard_lost && failed.reason.lost_for_good(),
            };
            if delete {
                sqs.delete_message()
                    .queue_url(queue)
                    .receipt_handle(receipt)
                    .send()
                    .await
                    .context("deleting a message of the stream failures queue")?;
            } else {
                kept.push(receipt.to_owned());
            }
            match outcome {
                Ok((batch, records)) => {
                    progress(format!("{seen}: {} recovered ({records} records to the fan-out)", describe(&batch)));
                    replayed.recovered += 1;
                    replayed.records += records;
                }
                Err(failed) => {
                    let batch = failed.batch.as_ref().map_or_else(|| "a message".to_owned(), describe);
                    let what = if delete { "deleted" } else { "kept" };
                    let reason = serde_json::to_value(failed.reason).expect("a reason serializes");
                    let reason = reason.as_str().unwrap_or_default();
                    progress(format!("{seen}: {batch} not recovered ({reason}: {}; {what})", failed.detail));
                    replayed.not_recovered.push(NotRecovered {
                        message_id: message.message_id().unwrap_or_default().to_owned(),
                        batch: failed.batch,
                        reason: failed.reason,
                        detail: failed.detail,
                        deleted: delete,
                    });
                }
            }
        }
    }
    // Back in sight for the next run.
    for receipt in kept {
        let shown = sqs.change_message_visibility().queue_url(queue).receipt_handle(&receipt).visibility_timeout(0);
        shown.send().await.context("making a kept message visible again")?;
    }
    Ok(replayed)
}

fn describe(batch: &BatchInfo) -> String {
    format!(
        "{} {} {}..{}",
        batch.stream_arn,
        batch.shard_id,
        batch.start_sequence_number.as_str(),
        batch.end_sequence_number.as_str()
    )
}

async fn approximate_count(sqs: &Sqs, queue: &str) -> anyhow::Result<usize> {
    let name = QueueAttributeName::ApproximateNumberOfMessages;
    let output = sqs.get_queue_attributes().queue_url(queue).attribute_names(name.clone()).send().await;
    let attributes = output.context("reading the stream failures queue's depth")?.attributes.unwrap_or_default();
    Ok(attributes.get(&name).and_then(|n| n.parse().ok()).unwrap_or_default())
}

/// A message not recovered: the batch it names, if readable, why, and the details.
struct Failed {
    batch: Option<BatchInfo>,
    reason: Unrecovered,
    detail: String,
}

/// Re-runs the batch that `message` names: the batch and how many records went to the
/// fan-out.
async fn replay_message(
    streams: &Streams,
    fanout: &career_fanout::Deps,
    filters: &StreamFilters,
    message: &Message,
) -> Result<(BatchInfo, usize), Failed> {
    let record: OnFailureRecord = serde_json::from_str(message.body().unwrap_or_default()).map_err(|err| Failed {
        batch: None,
        reason: Unrecovered::Unreadable,
        detail: format!("not a DynamoDB stream batch's on-failure record: {err}"),
    })?;
    let batch = record.batch;
    let failed = |reason, detail: String| Failed { batch: Some(batch.clone()), reason, detail };
    let Some(filters) = table_of(&batch.stream_arn).and_then(|table| filters.get(table)) else {
        return Err(failed(Unrecovered::UnknownStream, "no event source of the fan-out reads this stream".into()));
    };
    let records = read_batch(streams, &batch).await.map_err(|(reason, detail)| failed(reason, detail))?;
    let passed = passing(filters, &stream_event(&batch.stream_arn, records));
    let count = passed.records.len();
    if count > 0 {
        let response = career_fanout::handle(fanout, passed).await;
        if let Some(failure) = response.batch_item_failures.first() {
            let at = failure.item_identifier.clone().unwrap_or_default();
            return Err(failed(
                Unrecovered::FanOutFailed,
                format!("at sequence number {at} (the fan-out's log line says why)"),
            ));
        }
    }
    Ok((batch, count))
}

/// The table of a stream ARN, `arn:…:table/<name>/stream/<label>`.
fn table_of(stream_arn: &str) -> Option<&str> {
    stream_arn.split_once(":table/").and_then(|(_, rest)| rest.split('/').next())
}

/// The records of `batch`, from its first sequence number to its last, read from its shard.
async fn read_batch(streams: &Streams, batch: &BatchInfo) -> Result<Vec<Record>, (Unrecovered, String)> {
    let opened = streams
        .get_shard_iterator()
        .stream_arn(&batch.stream_arn)
        .shard_id(&batch.shard_id)
        .shard_iterator_type(ShardIteratorType::AtSequenceNumber)
        .sequence_number(batch.start_sequence_number.as_str())
        .send()
        .await;
    let mut iterator = match opened {
        Ok(output) => output.shard_iterator,
        Err(err) => {
            let reason = match err.as_service_error() {
                Some(e) if e.is_trimmed_data_access_exception() => Unrecovered::Trimmed,
                Some(e) if e.is_resource_not_found_exception() => Unrecovered::ShardGone,
                _ => Unrecovered::StreamError,
            };
            return Err((reason, format!("opening the shard: {}", DisplayErrorContext(err))));
        }
    };
    let mut records = Vec::new();
    let mut empty_pages = 0;
    while let Some(at) = iterator.take() {
        let page = streams.get_records().shard_iterator(at).send().await.map_err(|err| {
            let reason = match err.as_service_error() {
                Some(e) if e.is_trimmed_data_access_exception() => Unrecovered::Trimmed,
                Some(e) if e.is_resource_not_found_exception() => Unrecovered::ShardGone,
                _ => Unrecovered::StreamError,
            };
            (reason, format!("reading the shard: {}", DisplayErrorContext(err)))
        })?;
        let page_records = page.records.unwrap_or_default();
        empty_pages = if page_records.is_empty() { empty_pages + 1 } else { 0 };
        for record in page_records {
            let sequence = record.dynamodb.as_ref().and_then(|r| r.sequence_number.clone());
            let sequence = sequence.and_then(|s| SequenceNumber::try_from(s).ok());
            match sequence {
                Some(sequence) if sequence > batch.end_sequence_number => return complete(batch, records),
                _ => records.push(record),
            }
        }
        if records.last().and_then(sequence_of).is_some_and(|last| last == batch.end_sequence_number) {
            return complete(batch, records);
        }
        if empty_pages >= MAX_EMPTY_PAGES {
            break;
        }
        iterator = page.next_shard_iterator;
    }
    complete(batch, records)
}

fn sequence_of(record: &Record) -> Option<SequenceNumber> {
    let sequence = record.dynamodb.as_ref()?.sequence_number.clone()?;
    SequenceNumber::try_from(sequence).ok()
}

/// `records` if they are the whole batch: its first record first and its last last.
fn complete(batch: &BatchInfo, records: Vec<Record>) -> Result<Vec<Record>, (Unrecovered, String)> {
    let first = records.first().and_then(sequence_of);
    let last = records.last().and_then(sequence_of);
    match (first, last) {
        (Some(first), Some(last)) if first == batch.start_sequence_number && last == batch.end_sequence_number => {
            Ok(records)
        }
        (first, last) => Err((
            Unrecovered::Trimmed,
            format!(
                "the shard holds {} of the batch's records ({}..{}), not from its first to its last",
                records.len(),
                first.as_ref().map_or("-", SequenceNumber::as_str),
                last.as_ref().map_or("-", SequenceNumber::as_str)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequence(text: &str) -> SequenceNumber {
        SequenceNumber::try_from(text.to_owned()).unwrap()
    }

    #[test]
    fn sequence_numbers_order_as_numbers() {
        assert!(sequence("900") < sequence("1000"));
        assert!(sequence("000000000000000000100") < sequence("99999999999999999999999"));
        assert_eq!(sequence("0042"), sequence("42"));
        for bad in ["", "12a", "-1", " 1"] {
            assert!(SequenceNumber::try_from(bad.to_owned()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn awss_documented_on_failure_record_reads_back() {
        let body = r#"{
            "requestContext": {"requestId": "316aa6d0-8154-xmpl-9af7-85d5f4a6bc81",
                "functionArn": "arn:aws:lambda:us-east-2:123456789012:function:myfunction",
                "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 1},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": "2019-11-14T00:13:49.717Z",
            "DDBStreamBatchInfo": {"shardId": "shardId-00000001573689847184-864758bb",
                "startSequenceNumber": "800000000003126276362", "endSequenceNumber": "800000000003126276362",
                "approximateArrivalOfFirstRecord": "2019-11-14T00:13:19Z",
                "approximateArrivalOfLastRecord": "2019-11-14T00:13:19Z", "batchSize": 1,
                "streamArn": "arn:aws:dynamodb:us-east-2:123456789012:table/mytable/stream/2019-11-14T00:04:06.388"}
        }"#;
        let record: OnFailureRecord = serde_json::from_str(body).unwrap();
        assert_eq!(record.batch.start_sequence_number, sequence("800000000003126276362"));
        assert_eq!(table_of(&record.batch.stream_arn), Some("mytable"));
        let written = serde_json::to_value(&record).unwrap();
        let again: OnFailureRecord = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(again.batch, record.batch);
        assert_eq!(written["DDBStreamBatchInfo"]["startSequenceNumber"], "800000000003126276362");
    }
}
