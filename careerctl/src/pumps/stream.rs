//! The stream pump: reads the DynamoDB streams and hands each batch to the fan-out handler.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord, StreamRecord, StreamViewType};
use aws_sdk_dynamodbstreams::error::DisplayErrorContext;
use aws_sdk_dynamodbstreams::types::{Record, ShardIteratorType};
use career_core::clock::Timestamp;
use serde::{Deserialize, Serialize};

use super::ERROR_PAUSE;

/// How long the pump waits before reading again when the streams had nothing new.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// Where each shard was read up to, kept in a file so a restart does not deliver old events
/// a second time.
#[derive(Default, Serialize, Deserialize)]
struct Checkpoints {
    after_sequence: HashMap<String, String>,
}

impl Checkpoints {
    fn load(path: Option<&PathBuf>) -> Self {
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

struct Shard {
    stream_arn: String,
    iterator: Option<String>,
}

/// Reads the streams of `tables` and hands each batch to the fan-out handler, resuming from
/// a reported failure, until the task is dropped.
pub async fn run_stream_pump(
    dynamodb: aws_sdk_dynamodb::Client,
    streams: aws_sdk_dynamodbstreams::Client,
    tables: Vec<String>,
    fanout: &career_fanout::Deps,
    checkpoint_file: Option<PathBuf>,
) {
    let mut checkpoints = Checkpoints::load(checkpoint_file.as_ref());
    let mut shards: HashMap<String, Shard> = HashMap::new();
    let mut finished: Vec<String> = Vec::new();
    loop {
        if let Err(err) = discover_shards(&dynamodb, &streams, &tables, &checkpoints, &finished, &mut shards).await {
            tracing::warn!(error = %format_args!("{err:#}"), "stream pump: listing shards failed");
            tokio::time::sleep(ERROR_PAUSE).await;
            continue;
        }
        let mut busy = false;
        for (shard_id, shard) in shards.iter_mut() {
            let Some(iterator) = shard.iterator.take() else { continue };
            let output = match streams.get_records().shard_iterator(&iterator).limit(100).send().await {
                Ok(output) => output,
                Err(err) => {
                    tracing::warn!(error = %DisplayErrorContext(err), "stream pump: reading a stream failed");
                    continue; // the iterator is dropped and fetched again from the checkpoint
                }
            };
            shard.iterator = output.next_shard_iterator;
            if shard.iterator.is_none() {
                finished.push(shard_id.clone());
            }
            let records = output.records.unwrap_or_default();
            if records.is_empty() {
                continue;
            }
            busy = true;
            let batch = stream_event(&shard.stream_arn, records);
            let failed_at = fan_out(fanout, batch, shard_id, &mut checkpoints, checkpoint_file.as_ref()).await;
            if failed_at {
                // Resume from the failed record, as Lambda does, after a pause.
                shard.iterator = None;
                finished.retain(|id| id != shard_id);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
        shards.retain(|id, shard| shard.iterator.is_some() || !finished.contains(id));
        if !busy {
            tokio::time::sleep(IDLE_POLL).await;
        }
    }
}

/// Hands one shard's batch to the fan-out handler and checkpoints the records before the
/// first it reports as failed; `true` when it reported one.
async fn fan_out(
    fanout: &career_fanout::Deps,
    batch: StreamEvent,
    shard_id: &str,
    checkpoints: &mut Checkpoints,
    checkpoint_file: Option<&PathBuf>,
) -> bool {
    let response = career_fanout::handle(fanout, batch.clone()).await;
    let failed_at = response.batch_item_failures.first().and_then(|f| f.item_identifier.clone());
    let done = batch
        .records
        .iter()
        .map(|r| r.change.sequence_number.clone().unwrap_or_default())
        .take_while(|sequence| Some(sequence) != failed_at.as_ref())
        .last();
    if let Some(sequence) = done {
        checkpoints.after_sequence.insert(shard_id.to_owned(), sequence);
        checkpoints.save(checkpoint_file);
    }
    failed_at.is_some()
}

/// Opens an iterator for every shard that has none: after its checkpoint, or from the start.
async fn discover_shards(
    dynamodb: &aws_sdk_dynamodb::Client,
    streams: &aws_sdk_dynamodbstreams::Client,
    tables: &[String],
    checkpoints: &Checkpoints,
    finished: &[String],
    shards: &mut HashMap<String, Shard>,
) -> anyhow::Result<()> {
    if shards.values().all(|shard| shard.iterator.is_some()) && !shards.is_empty() {
        return Ok(());
    }
    for table in tables {
        let described = dynamodb.describe_table().table_name(table).send().await.context("describing a table")?;
        let Some(stream_arn) = described.table.and_then(|t| t.latest_stream_arn) else { continue };
        let stream = streams.describe_stream().stream_arn(&stream_arn).send().await.context("describing a stream")?;
        let listed = stream.stream_description.and_then(|d| d.shards).unwrap_or_default();
        for shard_id in listed.into_iter().filter_map(|s| s.shard_id) {
            if finished.contains(&shard_id) || shards.get(&shard_id).is_some_and(|s| s.iterator.is_some()) {
                continue;
            }
            let request = streams.get_shard_iterator().stream_arn(&stream_arn).shard_id(&shard_id);
            let request = match checkpoints.after_sequence.get(&shard_id) {
                Some(sequence) => {
                    request.shard_iterator_type(ShardIteratorType::AfterSequenceNumber).sequence_number(sequence)
                }
                None => request.shard_iterator_type(ShardIteratorType::TrimHorizon),
            };
            let iterator = request.send().await.context("opening a shard")?.shard_iterator;
            shards.insert(shard_id, Shard { stream_arn: stream_arn.clone(), iterator });
        }
    }
    Ok(())
}

/// The event Lambda would build from these records.
fn stream_event(stream_arn: &str, records: Vec<Record>) -> StreamEvent {
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
    converted.aws_region = crate::stack::REGION.to_owned();
    converted.change = change;
    converted.event_id = record.event_id.unwrap_or_default();
    converted.event_name = record.event_name.map(|name| name.as_str().to_owned()).unwrap_or_default();
    converted.event_source = Some("aws:dynamodb".to_owned());
    converted.event_version = record.event_version;
    converted.event_source_arn = Some(stream_arn.to_owned());
    converted
}
