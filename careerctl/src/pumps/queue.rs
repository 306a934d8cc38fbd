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
use crate::event_sources::QueueSource;
use career_core::delivery::queue::delete_entries;

/// Receives from one delivery lane, with the delivery function's role (its event source
/// mapping does on AWS), and hands each batch to the delivery handler, up to the source's
/// `MaximumConcurrency` batches at a time, as Lambda's event source mapping does. Messages
/// the handler does not report as failed are deleted; the others keep the visibility it set.
/// Once `stop` resolves it receives nothing more and returns when the batches in hand are
/// done.
pub async fn run_queue_pump(
    sqs: aws_sdk_sqs::Client,
    source: QueueSource,
    deliver: &career_deliver::Deps,
    stop: impl Future<Output = ()>,
) {
    let QueueSource { queue_url, batch_size, maximum_concurrency: concurrency } = source;
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
        let mut receiving = pin!(receive_batch(&sqs, &queue_url, batch_size));
        let received = loop {
            tokio::select! {
                received = &mut receiving => break received,
                Some(()) = in_hand.next(), if !in_hand.is_empty() => {}
                () = &mut stop, if !stopped => stopped = true,
            }
        };
        if let Some(event) = received {
            in_hand.push(handle_batch(&sqs, &queue_url, deliver, event));
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

/// Calls the delivery handler and deletes what it did not report as failed.
async fn handle_batch(sqs: &aws_sdk_sqs::Client, queue_url: &str, deliver: &career_deliver::Deps, event: SqsEvent) {
    let response = career_deliver::handle(deliver, event.clone()).await;
    let failed: Vec<&str> = response.batch_item_failures.iter().map(|f| f.item_identifier.as_str()).collect();
    let done = delete_entries(
        event
            .records
            .iter()
            .filter(|m| !failed.contains(&m.message_id.as_deref().unwrap_or_default()))
            .map(|m| m.receipt_handle.as_deref()),
    );
    if !done.is_empty() {
        if let Err(err) = sqs.delete_message_batch().queue_url(queue_url).set_entries(Some(done)).send().await {
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
    converted.aws_region = Some(crate::stack::REGION.to_owned());
    converted
}
