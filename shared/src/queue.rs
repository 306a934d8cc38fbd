//! The delivery queue: one SQS message per delivery, sent ten to a call, and the visibility
//! changes that schedule retries.

use std::time::Duration;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use aws_sdk_sqs::Client;

use crate::delivery::DeliveryMessage;

/// SQS's limit of messages per `SendMessageBatch`.
pub const BATCH_SIZE: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("SQS: {0}")]
    Sqs(String),
    #[error("SQS refused {count} of the messages, the first because: {reason}")]
    Refused { count: usize, reason: String },
}

fn sqs_error(err: impl std::error::Error) -> QueueError {
    QueueError::Sqs(DisplayErrorContext(err).to_string())
}

#[derive(Clone)]
pub struct DeliveryQueue {
    sqs: Client,
    url: String,
}

impl DeliveryQueue {
    pub fn new(sqs: Client, url: impl Into<String>) -> Self {
        Self { sqs, url: url.into() }
    }

    /// Sends every message, ten per `SendMessageBatch` call.
    pub async fn send(&self, messages: &[DeliveryMessage]) -> Result<(), QueueError> {
        for chunk in messages.chunks(BATCH_SIZE) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, message)| {
                    SendMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .message_body(serde_json::to_string(message).expect("messages serialize"))
                        .build()
                        .expect("entry has id and body")
                })
                .collect();
            let output = self
                .sqs
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(sqs_error)?;
            if let Some(first) = output.failed.first() {
                return Err(QueueError::Refused {
                    count: output.failed.len(),
                    reason: first.message.clone().unwrap_or_default(),
                });
            }
        }
        Ok(())
    }

    /// Makes a received message visible again after `wait` (at most 12 hours).
    pub async fn retry_after(&self, receipt_handle: &str, wait: Duration) -> Result<(), QueueError> {
        let seconds = i32::try_from(wait.as_secs_f64().round() as u64).unwrap_or(i32::MAX);
        self.sqs
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(seconds)
            .send()
            .await
            .map_err(sqs_error)?;
        Ok(())
    }
}
