//! What was published to the operator topic (contract section 15), read back from the queue
//! the local stack subscribes to it (`resources::TOPIC_INBOX`): `careerctl notifications`
//! and the tests read it so.

use anyhow::Context;
use aws_sdk_sqs::Client as Sqs;
use serde::{Deserialize, Serialize};

/// One published message: SNS's envelope as an SQS subscriber gets it, the message (an
/// event's body) read as JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    pub message_id: String,
    pub subject: Option<String>,
    pub published_at: String,
    pub message: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Envelope {
    message_id: String,
    subject: Option<String>,
    timestamp: String,
    message: String,
}

/// Takes every notification waiting in the inbox at `inbox_url`, oldest first as SQS gives
/// them; each is read once (removed from the inbox).
pub async fn take(sqs: &Sqs, inbox_url: &str) -> anyhow::Result<Vec<Notification>> {
    let mut taken = Vec::new();
    loop {
        let received = sqs.receive_message().queue_url(inbox_url).max_number_of_messages(10).wait_time_seconds(1);
        let messages =
            received.send().await.context("reading the operator topic's inbox")?.messages.unwrap_or_default();
        if messages.is_empty() {
            return Ok(taken);
        }
        for message in messages {
            let envelope: Envelope = serde_json::from_str(message.body().unwrap_or_default())
                .context("a message of the operator topic's inbox is not SNS's envelope")?;
            taken.push(Notification {
                message_id: envelope.message_id,
                subject: envelope.subject,
                published_at: envelope.timestamp,
                message: serde_json::from_str(&envelope.message).unwrap_or(serde_json::Value::String(envelope.message)),
            });
            let receipt = message.receipt_handle().unwrap_or_default();
            sqs.delete_message().queue_url(inbox_url).receipt_handle(receipt).send().await?;
        }
    }
}
