//! The delivery queues: two lanes, so that a healthy subscription's delivery never waits
//! behind a failing or slow one (contract section 5).
//!
//! - The main lane takes the first attempt of every delivery to a subscription that is not
//!   failing. It is a FIFO queue, and SQS hands out no message of a group while another of
//!   that group is in flight. A subscription's deliveries spread over several groups
//!   (`whk_…#k`) only while its receiver answers fast, and keep one otherwise
//!   ([`crate::delivery::groups`]): a receiver that hangs or answers slowly holds at most one batch
//!   (one consumer) of the main lane once that is known, and a hanging one only for one
//!   timeout, after which its failure clock sends its deliveries to the retry lane. FIFO
//!   order is not otherwise relied on, nor is FIFO de-duplication (every message gets a
//!   fresh de-duplication id).
//! - The retry lane, a standard queue with its own consumers, takes the retries (the wait
//!   is the message's delay, then its visibility), every delivery to a subscription whose
//!   failure clock runs, what the sweep puts back, and a manual retry or a recovery whose
//!   record a turn still holds (contract section 12).
//! - The dead-letter queue takes a delivery with no attempt left, or one a `410` ended. The
//!   delivery function moves it there itself; the lanes' redrive policies only catch a
//!   message that keeps coming back without an attempt being recorded.
//!
//! Each message is deleted from its lane as soon as its own attempt is recorded, not with
//! its batch: a FIFO group is blocked only while its received messages are neither deleted
//! nor visible again (SQS Developer Guide, "FIFO queue delivery logic"), so a subscription's
//! next delivery never waits for the send of another message that shared its batch.

use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, QueueAttributeName, SendMessageBatchRequestEntry};

use crate::aws::AwsClients;
use crate::config::{ConfigError, Settings};
use crate::delivery::group_count::{self, Groups};
pub use crate::delivery::lane::Lane;
use crate::delivery::DeliveryMessage;
use crate::random;

/// SQS's limit of messages per `SendMessageBatch`.
pub const BATCH_SIZE: usize = 10;
/// SQS's longest message delay. A hand-over to the retry lane waits at most this long, so
/// the first retry wait (at most 1.2 × the retry base) must fit in it.
pub const MAX_DELAY: Duration = Duration::from_secs(15 * 60);

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

impl Lane {
    /// The lane a received message comes from. Only the main lane is a FIFO queue, and SQS
    /// gives every message of a FIFO queue (and only those) a `MessageGroupId` attribute.
    pub fn of(message: &SqsMessage) -> Lane {
        match group_of(message) {
            Some(_) => Lane::Main,
            None => Lane::Retry,
        }
    }
}

/// The index of a received main-lane message's group among its subscription's
/// ([`group_count::index_in`]); `None` for a message of the retry lane.
pub fn group_of(message: &SqsMessage) -> Option<u8> {
    message.attributes.get("MessageGroupId").map(|group| group_count::index_in(group))
}

#[derive(Clone)]
pub struct DeliveryQueues {
    /// SQS is asked for on the first send or deletion, not at init.
    clients: AwsClients,
    main: String,
    retry: String,
    dead_letter: Option<String>,
}

impl DeliveryQueues {
    /// The two lanes, and the dead-letter queue when it is set (only the delivery function
    /// moves messages there: see [`DeliveryQueues::with_dead_letter`]).
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            clients: clients.clone(),
            main: settings.require_queue_url()?.to_owned(),
            retry: settings.require_retry_queue_url()?.to_owned(),
            dead_letter: settings.dead_letter_queue_url.clone(),
        })
    }

    /// The lanes and the dead-letter queue, which must be set.
    pub fn with_dead_letter(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        settings.require_dead_letter_queue_url()?;
        Self::new(clients, settings)
    }

    fn url(&self, lane: Lane) -> &str {
        match lane {
            Lane::Main => &self.main,
            Lane::Retry => &self.retry,
        }
    }

    /// Sends every message to `lane`, ten per `SendMessageBatch` call: on the main lane in
    /// its subscription's first group (a delivery of a subscription that spreads over more is
    /// moved to its own by its turn, `groups::regroup`).
    pub async fn send(&self, lane: Lane, messages: &[DeliveryMessage]) -> Result<(), QueueError> {
        let first = match lane {
            Lane::Main => Slot::Group(0),
            Lane::Retry => Slot::Delay(Duration::ZERO),
        };
        let slotted: Vec<(&DeliveryMessage, Slot)> = messages.iter().map(|m| (m, first)).collect();
        all_taken(self.send_batches(lane, &slotted).await?)
    }

    /// Sends first attempts to the main lane, each in its group among its subscription's
    /// `Groups`, ten per `SendMessageBatch` call.
    pub async fn send_spread(&self, messages: &[(DeliveryMessage, Groups)]) -> Result<(), QueueError> {
        let slotted: Vec<(&DeliveryMessage, Slot)> =
            messages.iter().map(|(m, groups)| (m, Slot::Group(groups.index_of(&m.delivery_id)))).collect();
        all_taken(self.send_batches(Lane::Main, &slotted).await?)
    }

    /// Moves received main-lane messages to other groups of their subscription (the caller
    /// then deletes them from theirs), each carrying the claim its turn holds, ten per
    /// `SendMessageBatch` call. Returns the position and SQS's reason of every message it did
    /// not take.
    pub async fn regroup(&self, messages: &[(&DeliveryMessage, u8)]) -> Result<Vec<(usize, String)>, QueueError> {
        let slotted: Vec<(&DeliveryMessage, Slot)> =
            messages.iter().map(|(message, index)| (*message, Slot::Group(*index))).collect();
        self.send_batches(Lane::Main, &slotted).await
    }

    /// Hands messages to the retry lane, each to be received after its delay (at most
    /// [`MAX_DELAY`]), ten per `SendMessageBatch` call. Returns the position and SQS's reason
    /// of every message it did not take.
    pub async fn hand_over(
        &self,
        messages: &[(&DeliveryMessage, Duration)],
    ) -> Result<Vec<(usize, String)>, QueueError> {
        // The retry lane may hand out a copy twice: a copy there carries no claim of its own.
        let unclaimed: Vec<DeliveryMessage> =
            messages.iter().map(|(message, _)| DeliveryMessage { claimed_until: None, ..(*message).clone() }).collect();
        let delayed: Vec<(&DeliveryMessage, Slot)> =
            unclaimed.iter().zip(messages).map(|(message, (_, delay))| (message, Slot::Delay(*delay))).collect();
        self.send_batches(Lane::Retry, &delayed).await
    }

    /// Moves a message to the dead-letter queue (the caller then deletes it from its lane).
    pub async fn dead_letter(&self, message: &DeliveryMessage) -> Result<(), QueueError> {
        let queue = self.dead_letter.as_deref().ok_or_else(|| QueueError::Sqs("no dead-letter queue is set".into()))?;
        self.clients
            .sqs()
            .send_message()
            .queue_url(queue)
            .message_body(serde_json::to_string(message).expect("messages serialize"))
            .send()
            .await
            .map_err(sqs_error)?;
        Ok(())
    }

    /// Deletes a received message from its lane: its delivery is settled or moved on.
    pub async fn delete(&self, lane: Lane, receipt_handle: &str) -> Result<(), QueueError> {
        self.clients
            .sqs()
            .delete_message()
            .queue_url(self.url(lane))
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(sqs_error)?;
        Ok(())
    }

    /// Deletes received messages (at most [`BATCH_SIZE`]: one batch's) from their lane in one
    /// `DeleteMessageBatch` call.
    pub async fn delete_all(&self, lane: Lane, receipt_handles: &[&str]) -> Result<(), QueueError> {
        let output = self
            .clients
            .sqs()
            .delete_message_batch()
            .queue_url(self.url(lane))
            .set_entries(Some(delete_entries(receipt_handles.iter().map(|handle| Some(*handle)))))
            .send()
            .await
            .map_err(sqs_error)?;
        match output.failed.first() {
            Some(failed) => Err(QueueError::Refused {
                count: output.failed.len(),
                reason: failed.message.clone().unwrap_or_default(),
            }),
            None => Ok(()),
        }
    }

    /// How many messages the lanes hold that may still be a delivery's only copy on its way
    /// to its first turn: those waiting to be received on either lane, and those received
    /// from the main lane and not yet settled. A retry lane's received messages are left
    /// out: most wait there, invisible, for a retry hours away, and their records are not
    /// overdue. SQS's counts are approximate, which is all the sweep needs of them.
    pub async fn backlog(&self) -> Result<usize, QueueError> {
        let (main, retry) = tokio::join!(
            self.counts(
                Lane::Main,
                &[
                    QueueAttributeName::ApproximateNumberOfMessages,
                    QueueAttributeName::ApproximateNumberOfMessagesNotVisible
                ]
            ),
            self.counts(Lane::Retry, &[QueueAttributeName::ApproximateNumberOfMessages]),
        );
        Ok(main? + retry?)
    }

    /// The sum of the lane's counts named `names`.
    async fn counts(&self, lane: Lane, names: &[QueueAttributeName]) -> Result<usize, QueueError> {
        let output = self
            .clients
            .sqs()
            .get_queue_attributes()
            .queue_url(self.url(lane))
            .set_attribute_names(Some(names.to_vec()))
            .send()
            .await
            .map_err(sqs_error)?;
        let attributes = output.attributes.unwrap_or_default();
        Ok(names.iter().filter_map(|name| attributes.get(name)?.parse::<usize>().ok()).sum())
    }

    /// The position and SQS's reason of every message it did not take.
    async fn send_batches(
        &self,
        lane: Lane,
        messages: &[(&DeliveryMessage, Slot)],
    ) -> Result<Vec<(usize, String)>, QueueError> {
        let mut refused = Vec::new();
        for (chunk_index, chunk) in messages.chunks(BATCH_SIZE).enumerate() {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, (message, slot))| entry((chunk_index * BATCH_SIZE + i).to_string(), message, *slot))
                .collect();
            let output = self
                .clients
                .sqs()
                .send_message_batch()
                .queue_url(self.url(lane))
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(sqs_error)?;
            refused.extend(
                output
                    .failed
                    .into_iter()
                    .map(|failed| (failed.id.parse().unwrap_or_default(), failed.message.unwrap_or_default())),
            );
        }
        Ok(refused)
    }

    /// Makes a received message of `lane` visible again after `wait` (at most 12 hours).
    pub async fn retry_after(&self, lane: Lane, receipt_handle: &str, wait: Duration) -> Result<(), QueueError> {
        self.clients
            .sqs()
            .change_message_visibility()
            .queue_url(self.url(lane))
            .receipt_handle(receipt_handle)
            .visibility_timeout(whole_seconds(wait))
            .send()
            .await
            .map_err(sqs_error)?;
        Ok(())
    }
}

/// Where a message waits on its lane: in a group of its subscription on the main lane, the
/// FIFO queue (which takes no per-message delay), or after a delay on the retry lane.
#[derive(Clone, Copy)]
enum Slot {
    Group(u8),
    Delay(Duration),
}

/// One message of a `SendMessageBatch`.
fn entry(id: String, message: &DeliveryMessage, slot: Slot) -> SendMessageBatchRequestEntry {
    let mut entry = SendMessageBatchRequestEntry::builder()
        .id(id)
        .message_body(serde_json::to_string(message).expect("messages serialize"));
    entry = match slot {
        Slot::Group(index) => entry
            .message_group_id(group_count::group_id(&message.subscription_id, index))
            .message_deduplication_id(random::random_token("")),
        Slot::Delay(delay) => entry.delay_seconds(whole_seconds(delay.min(MAX_DELAY))),
    };
    entry.build().expect("entry has id and body")
}

/// `Ok` when SQS took every message of a send.
fn all_taken(refused: Vec<(usize, String)>) -> Result<(), QueueError> {
    match refused.first() {
        Some((_, reason)) => Err(QueueError::Refused { count: refused.len(), reason: reason.clone() }),
        None => Ok(()),
    }
}

/// One `DeleteMessageBatch` entry per receipt handle, numbered from 0.
pub fn delete_entries<'a>(
    receipt_handles: impl IntoIterator<Item = Option<&'a str>>,
) -> Vec<DeleteMessageBatchRequestEntry> {
    receipt_handles
        .into_iter()
        .enumerate()
        .map(|(i, receipt_handle)| {
            DeleteMessageBatchRequestEntry::builder()
                .id(i.to_string())
                .receipt_handle(receipt_handle.unwrap_or_default())
                .build()
                .expect("entry has id and receipt handle")
        })
        .collect()
}

/// SQS takes delays and visibility timeouts in whole seconds.
fn whole_seconds(wait: Duration) -> i32 {
    i32::try_from(wait.as_secs_f64().round() as u64).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_from_a_fifo_queue_is_on_the_main_lane() {
        let mut message = SqsMessage::default();
        assert_eq!(Lane::of(&message), Lane::Retry);
        assert_eq!(group_of(&message), None);
        message.attributes.insert("MessageGroupId".into(), "whk_1".into());
        assert_eq!((Lane::of(&message), group_of(&message)), (Lane::Main, Some(0)));
        message.attributes.insert("MessageGroupId".into(), "whk_1#5".into());
        assert_eq!((Lane::of(&message), group_of(&message)), (Lane::Main, Some(5)));
    }

    #[test]
    fn waits_are_whole_seconds_and_delays_stop_at_the_sqs_limit() {
        assert_eq!(whole_seconds(Duration::from_millis(1600)), 2);
        assert_eq!(whole_seconds(Duration::from_millis(200)), 0);
        let event = crate::events::Event {
            id: crate::ids::EventId::generate(),
            created_at: "2026-11-27T08:00:00.000Z".parse().unwrap(),
            data: crate::events::EventData::ProfileUpdated {
                user_id: "u1".parse().unwrap(),
                profile_id: "prf_1".parse().unwrap(),
            },
        };
        let message =
            DeliveryMessage::new(&event, &"u1".parse().unwrap(), &"whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap());
        let late = entry("0".into(), &message, Slot::Delay(Duration::from_secs(3600)));
        assert_eq!(late.delay_seconds, Some(900));
        let main = entry("0".into(), &message, Slot::Group(3));
        assert_eq!(main.message_group_id.as_deref(), Some("whk_01JDQ40A1B2C3D4E5F6G7H8J9K#3"));
        assert_eq!(main.delay_seconds, None, "FIFO queues take no per-message delay");
        let again = entry("0".into(), &message, Slot::Group(3));
        assert_ne!(main.message_deduplication_id, again.message_deduplication_id);
    }
}
