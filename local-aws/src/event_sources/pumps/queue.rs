//! The queue pump: receives from one delivery lane and hands each batch to the delivery
//! handler, several batches at a time.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::ERROR_PAUSE;
use crate::event_sources::{failed_items, queue_message_passes, QueueSource};
use career_core::aws::queue::delete_entries;

/// Receives from one delivery lane, with the delivery function's role (its event source
/// mapping does on AWS), and hands each batch to the delivery handler, up to the source's
/// `MaximumConcurrency` batches at a time, as Lambda's event source mapping does. Messages
/// its filters drop are deleted unseen; of the others, those the mapping does not take as
/// failed ([`failed_items`]) are deleted, and the failed ones keep the visibility the
/// handler set, or their queue's if it ran out of time. Once `stop` resolves it receives
/// nothing more and returns when the batches in hand are done.
pub async fn run_queue_pump(
    sqs: aws_sdk_sqs::Client,
    source: QueueSource,
    deliver: &career_deliver::Deps,
    stop: impl Future<Output = ()>,
) {
    let (queue_url, batch_size, concurrency) = (&source.queue_url, source.batch_size, source.maximum_concurrency);
    let mut stop = pin!(stop);
    let mut stopped = false;
    let mut in_hand = FuturesUnordered::new();
    while !stopped {
        while in_hand.len() >= concurrency && !stopped {
            tokio::select! {
                _ = in_hand.next() => {}
                () = &mut stop => stopped = true,
            }
        }
        if stopped {
            break;
        }
        // Batches in hand go on while the next one is received; a receive is never dropped
        // half-way, as the messages it took would stay invisible.
        let mut receiving = pin!(receive_batch(&sqs, queue_url, batch_size));
        let received = loop {
            tokio::select! {
                received = &mut receiving => break received,
                Some(()) = in_hand.next(), if !in_hand.is_empty() => {}
                () = &mut stop, if !stopped => stopped = true,
            }
        };
        if let Some(event) = received {
            in_hand.push(handle_batch(&sqs, &source, deliver, event));
        }
    }
    while in_hand.next().await.is_some() {}
}

/// How long one receive waits for messages (a long poll). A receive under way when the pump
/// stops is finished, and what it took is handled.
pub const RECEIVE_WAIT: Duration = Duration::from_secs(1);

/// Up to `batch_size` messages, with every attribute Lambda passes on; `None` when there are none.
async fn receive_batch(sqs: &aws_sdk_sqs::Client, queue_url: &str, batch_size: i32) -> Option<SqsEvent> {
    let received = sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(batch_size)
        .wait_time_seconds(RECEIVE_WAIT.as_secs() as i32)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await;
    match received {
        Ok(output) => Some(output.messages.unwrap_or_default()).filter(|m| !m.is_empty()).map(sqs_event),
        Err(err) => {
            tracing::warn!(error = %DisplayErrorContext(err), "queue pump: receiving deliveries failed");
            tokio::time::sleep(ERROR_PAUSE).await;
            None
        }
    }
}

/// Deletes the messages the source's filters drop, calls the delivery handler with the others
/// (within the function's timeout) and deletes those the mapping does not take as failed.
async fn handle_batch(
    sqs: &aws_sdk_sqs::Client,
    source: &QueueSource,
    deliver: &career_deliver::Deps,
    event: SqsEvent,
) {
    let (passing, dropped): (Vec<SqsMessage>, Vec<SqsMessage>) = event
        .records
        .into_iter()
        .partition(|m| queue_message_passes(&source.filters, m.body.as_deref().unwrap_or_default()));
    let handed: Vec<(String, Option<String>)> =
        passing.iter().map(|m| (m.message_id.clone().unwrap_or_default(), m.receipt_handle.clone())).collect();
    let mut done = Vec::new();
    if !passing.is_empty() {
        let mut batch = SqsEvent::default();
        batch.records = passing;
        let invocation = tokio::time::timeout(source.timeout, career_deliver::handle(deliver, batch)).await;
        if invocation.is_err() {
            tracing::warn!(timeout = ?source.timeout, "queue pump: the delivery function timed out; its batch returns to the queue");
        }
        let reported: Option<Vec<Option<&str>>> = invocation
            .as_ref()
            .ok()
            .map(|response| response.batch_item_failures.iter().map(|f| Some(f.item_identifier.as_str())).collect());
        let ids: Vec<&str> = handed.iter().map(|(id, _)| id.as_str()).collect();
        let failed = failed_items(source.report_batch_item_failures, reported.as_deref(), &ids);
        done.extend(handed.iter().enumerate().filter(|(i, _)| !failed.contains(i)).map(|(_, (_, r))| r.as_deref()));
    }
    let entries = delete_entries(dropped.iter().map(|m| m.receipt_handle.as_deref()).chain(done));
    if !entries.is_empty() {
        let deleted = sqs.delete_message_batch().queue_url(&source.queue_url).set_entries(Some(entries)).send().await;
        if let Err(err) = deleted {
            tracing::warn!(error = %DisplayErrorContext(err), "queue pump: deleting delivered messages failed");
        }
    }
}

/// The event Lambda would build from these received messages.
pub fn sqs_event(messages: Vec<aws_sdk_sqs::types::Message>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages.into_iter().map(sqs_message).collect();
    event
}

fn sqs_message(message: aws_sdk_sqs::types::Message) -> SqsMessage {
    let mut converted = SqsMessage::default();
    converted.attributes = message
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| (name.as_str().to_owned(), value))
        .collect();
    converted.message_id = message.message_id;
    converted.receipt_handle = message.receipt_handle;
    converted.body = message.body;
    converted.md5_of_body = message.md5_of_body;
    converted.event_source = Some("aws:sqs".to_owned());
    converted.aws_region = Some(crate::template::REGION.to_owned());
    converted
}
