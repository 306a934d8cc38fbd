//! The stream pump: reads the DynamoDB streams and hands each batch to the fan-out handler.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_template::stream_event::stream_event;
use serde::{Deserialize, Serialize};

use super::ERROR_PAUSE;
use crate::event_sources::on_failure::{BatchInfo, OnFailureRecord, RequestContext, ResponseContext, SequenceNumber};
use crate::event_sources::{failed_items, passing, StreamSource};

/// How long the pump waits before reading again when the streams had nothing new.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// Where each shard was read up to, kept in a file so a restart does not deliver old events
/// a second time.
#[derive(Default, Serialize, Deserialize)]
struct Checkpoints {
    after_sequence: HashMap<String, String>,
}

impl Checkpoints {
    fn load(path: Option<&Path>) -> Self {
        path.and_then(|p| std::fs::read(p).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    fn save(&self, path: Option<&PathBuf>) {
        if let Some(path) = path {
            let _ = std::fs::write(path, serde_json::to_vec(self).expect("checkpoints serialize"));
        }
    }
}

/// Where each shard of the pump's streams was read up to, as `checkpoint_file` holds it: a
/// shard's last sequence number passed to the fan-out (or given up on). Empty while the
/// file is missing or being written. What Lambda shows as an event source mapping's
/// iterator age, for a test to tell that every record of a stream was read.
pub fn checkpointed(checkpoint_file: &Path) -> HashMap<String, String> {
    Checkpoints::load(Some(checkpoint_file)).after_sequence
}

struct Shard {
    source: StreamSource,
    iterator: Option<String>,
    /// How often the batch that starts at this sequence number failed so far.
    failures: (String, u32),
}

/// Reads the `sources` streams with the fan-out function's `clients` (its role reads them on
/// AWS too) and hands each batch of the records its filters pass to the fan-out handler. A
/// batch that reports a failure is handed over again from the failed record, up to the
/// source's retries; then its metadata goes to the source's on-failure queue and the pump
/// moves past it. Runs until the task is dropped.
pub async fn run_stream_pump(
    clients: AwsClients,
    sources: Vec<StreamSource>,
    fanout: &career_fanout::Deps,
    checkpoint_file: Option<PathBuf>,
) {
    let streams = aws_sdk_dynamodbstreams::Client::new(clients.sdk());
    let mut checkpoints = Checkpoints::load(checkpoint_file.as_deref());
    let mut shards: HashMap<String, Shard> = HashMap::new();
    let mut finished: Vec<String> = Vec::new();
    loop {
        if let Err(err) = discover_shards(&streams, &sources, &checkpoints, &finished, &mut shards).await {
            tracing::warn!(error = %format_args!("{err:#}"), "stream pump: listing shards failed");
            tokio::time::sleep(ERROR_PAUSE).await;
            continue;
        }
        let mut busy = false;
        for (shard_id, shard) in shards.iter_mut() {
            let Some(iterator) = shard.iterator.take() else { continue };
            let Some(records) = read(&streams, shard, &iterator).await else { continue };
            if shard.iterator.is_none() {
                finished.push(shard_id.clone());
            }
            if records.is_empty() {
                continue;
            }
            busy = true;
            let batch = stream_event(&shard.source.stream_arn, records);
            let Some(failed_at) = fan_out(fanout, &batch, shard_id, &shard.source, &mut checkpoints).await else {
                checkpoints.save(checkpoint_file.as_ref());
                continue;
            };
            let failures = if shard.failures.0 == failed_at { shard.failures.1 + 1 } else { 1 };
            shard.failures = (failed_at.clone(), failures);
            if failures > shard.source.maximum_retry_attempts {
                give_up(clients.sqs(), &shard.source, shard_id, &batch, &failed_at).await;
                let last = batch.records.last().and_then(|r| r.change.sequence_number.clone());
                checkpoints.after_sequence.insert(shard_id.clone(), last.unwrap_or(failed_at));
            }
            checkpoints.save(checkpoint_file.as_ref());
            // Resume from the failed record (or past the batch given up), as Lambda does,
            // after a pause.
            shard.iterator = None;
            finished.retain(|id| id != shard_id);
            tokio::time::sleep(ERROR_PAUSE).await;
        }
        shards.retain(|id, shard| shard.iterator.is_some() || !finished.contains(id));
        if !busy {
            tokio::time::sleep(IDLE_POLL).await;
        }
    }
}

/// The next records of `shard`, its iterator moved on; `None` when the read failed (the
/// iterator is dropped, and opened again from the checkpoint).
async fn read(streams: &aws_sdk_dynamodbstreams::Client, shard: &mut Shard, iterator: &str) -> Option<Vec<Record>> {
    match streams.get_records().shard_iterator(iterator).limit(shard.source.batch_size).send().await {
        Ok(output) => {
            shard.iterator = output.next_shard_iterator;
            Some(output.records.unwrap_or_default())
        }
        // DynamoDB Local answers a shard's first read from its trim horizon this way while the
        // shard is new: nothing is lost, and the next read starts again.
        Err(err) if err.as_service_error().is_some_and(|e| e.is_trimmed_data_access_exception()) => {
            tracing::debug!("stream pump: a new shard's first read, tried again");
            None
        }
        Err(err) => {
            tracing::warn!(error = %DisplayErrorContext(err), "stream pump: reading a stream failed");
            None
        }
    }
}

/// Hands the records of one shard's batch that the filters pass to the fan-out handler (a
/// batch that none passes is not handed over), within the function's timeout, and
/// checkpoints the records before the first the mapping takes as failed ([`failed_items`]);
/// that record's sequence number when there is one.
async fn fan_out(
    fanout: &career_fanout::Deps,
    batch: &StreamEvent,
    shard_id: &str,
    source: &StreamSource,
    checkpoints: &mut Checkpoints,
) -> Option<String> {
    let filtered = passing(&source.filters, batch);
    let failed_at = if filtered.records.is_empty() {
        None
    } else {
        let sequences: Vec<String> =
            filtered.records.iter().map(|r| r.change.sequence_number.clone().unwrap_or_default()).collect();
        let invocation = tokio::time::timeout(source.timeout, career_fanout::handle(fanout, filtered)).await;
        if invocation.is_err() {
            tracing::warn!(timeout = ?source.timeout, "stream pump: the fan-out timed out; its batch is retried");
        }
        let reported: Option<Vec<Option<&str>>> = invocation
            .as_ref()
            .ok()
            .map(|response| response.batch_item_failures.iter().map(|f| f.item_identifier.as_deref()).collect());
        let sequences: Vec<&str> = sequences.iter().map(String::as_str).collect();
        let failed = failed_items(source.report_batch_item_failures, reported.as_deref(), &sequences);
        failed.first().map(|&first| sequences[first].to_owned())
    };
    let done = batch
        .records
        .iter()
        .map(|r| r.change.sequence_number.clone().unwrap_or_default())
        .take_while(|sequence| Some(sequence) != failed_at.as_ref())
        .last();
    if let Some(sequence) = done {
        checkpoints.after_sequence.insert(shard_id.to_owned(), sequence);
    }
    failed_at
}

/// Sends what Lambda's on-failure destination gets for a batch that ran out of retries (with
/// the function's role, as Lambda does), and logs it.
async fn give_up(sqs: &aws_sdk_sqs::Client, source: &StreamSource, shard_id: &str, batch: &StreamEvent, from: &str) {
    tracing::error!(stream = %source.stream_arn, shard = shard_id, from, "stream pump: a batch ran out of retries");
    let Some(queue) = &source.on_failure else { return };
    let Some(record) = on_failure_record(source, shard_id, batch, from) else {
        tracing::warn!(shard = shard_id, from, "stream pump: a batch without sequence numbers is not recorded");
        return;
    };
    let body = serde_json::to_string(&record).expect("an on-failure record serializes");
    if let Err(err) = sqs.send_message().queue_url(queue).message_body(body).send().await {
        tracing::warn!(error = %aws_sdk_sqs::error::DisplayErrorContext(err), "stream pump: the on-failure destination refused the batch's record");
    }
}

/// The invocation record of a batch given up on, as AWS documents it for a DynamoDB stream:
/// where the batch is (from the failed record `from` to its last), not its records. The
/// function answered with batch item failures, so there is no `functionError`.
fn on_failure_record(
    source: &StreamSource,
    shard_id: &str,
    batch: &StreamEvent,
    from: &str,
) -> Option<OnFailureRecord> {
    let from_index = batch.records.iter().position(|r| r.change.sequence_number.as_deref() == Some(from))?;
    let records = &batch.records[from_index..];
    let (first, last) = (records.first()?, records.last()?);
    let sequence = |record: &EventRecord| SequenceNumber::try_from(record.change.sequence_number.clone()?).ok();
    let arrival =
        |record: &EventRecord| record.change.approximate_creation_date_time.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    Some(OnFailureRecord {
        request_context: RequestContext {
            request_id: request_id(),
            function_arn: source.function_arn.clone(),
            condition: "RetryAttemptsExhausted".to_owned(),
            approximate_invoke_count: source.maximum_retry_attempts + 1,
        },
        response_context: ResponseContext {
            status_code: 200,
            executed_version: "$LATEST".to_owned(),
            function_error: None,
        },
        version: "1.0".to_owned(),
        timestamp: Timestamp::now().to_string(),
        batch: BatchInfo {
            shard_id: shard_id.to_owned(),
            start_sequence_number: sequence(first)?,
            end_sequence_number: sequence(last)?,
            approximate_arrival_of_first_record: arrival(first),
            approximate_arrival_of_last_record: arrival(last),
            batch_size: records.len(),
            stream_arn: source.stream_arn.clone(),
        },
    })
}

/// A request id as Lambda writes one: a random UUID.
fn request_id() -> String {
    let hex: String = career_core::random::random_bytes::<16>().iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// Opens an iterator for every shard that has none: after its checkpoint, or from the start.
async fn discover_shards(
    streams: &aws_sdk_dynamodbstreams::Client,
    sources: &[StreamSource],
    checkpoints: &Checkpoints,
    finished: &[String],
    shards: &mut HashMap<String, Shard>,
) -> anyhow::Result<()> {
    if shards.values().all(|shard| shard.iterator.is_some()) && !shards.is_empty() {
        return Ok(());
    }
    for source in sources {
        let stream_arn = &source.stream_arn;
        let stream = streams.describe_stream().stream_arn(stream_arn).send().await.context("describing a stream")?;
        let listed = stream.stream_description.and_then(|d| d.shards).unwrap_or_default();
        for shard_id in listed.into_iter().filter_map(|s| s.shard_id) {
            if finished.contains(&shard_id) || shards.get(&shard_id).is_some_and(|s| s.iterator.is_some()) {
                continue;
            }
            let request = streams.get_shard_iterator().stream_arn(stream_arn).shard_id(&shard_id);
            let request = match checkpoints.after_sequence.get(&shard_id) {
                Some(sequence) => {
                    request.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(sequence)
                }
                None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            let iterator = request.send().await.context("opening a shard")?.shard_iterator;
            let failures = shards.remove(&shard_id).map(|s| s.failures).unwrap_or_default();
            shards.insert(shard_id, Shard { source: source.clone(), iterator, failures });
        }
    }
    Ok(())
}
