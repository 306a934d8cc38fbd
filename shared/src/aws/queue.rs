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
//! - The retry lane, a standard queue with its own consumers, takes the retries (a wait of
//!   up to SQS's 15 minutes is a new message's delay; a longer one lives in the table, and
//!   the sweep queues the record ahead of its time: no message waits in flight for a retry,
//!   contract section 22), every delivery to a subscription whose failure clock runs, what
//!   the sweep puts back, and a manual retry or a recovery whose record a turn still holds
//!   (contract section 12).
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
use futures_util::StreamExt;

use crate::delivery::group_count;
pub use crate::delivery::lane::Lane;
use crate::delivery::plan::{Place, LONGEST_DELAY};
use crate::delivery::DeliveryMessage;
use crate::random;

/// SQS's limit of messages per `SendMessageBatch`.
pub const BATCH_SIZE: usize = 10;
/// How many `SendMessageBatch` calls of one post run at once: a fan-out batch's deliveries
/// go out in the time of a few calls, not one call after another.
const BATCHES_AT_ONCE: usize = 8;

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

    /// Puts every message in its place ([`Place`]: a group of the main lane, or the retry
    /// lane after a delay of at most [`LONGEST_DELAY`]), ten per `SendMessageBatch` call, the
    /// calls at once. Returns the position and SQS's reason of every message it did not take
    /// (every message of a call that failed).
    pub async fn post(&self, postings: &[(&DeliveryMessage, Place)]) -> Vec<(usize, String)> {
        let mut batches = Vec::new();
        for lane in [Lane::Main, Lane::Retry] {
            let on_lane: Vec<(usize, &DeliveryMessage, Place)> = (postings.iter().enumerate())
                .filter(|(_, (_, place))| place.lane() == lane)
                .map(|(position, (message, place))| (position, *message, *place))
                .collect();
            // Boxed: a post's future is part of many callers' and nests deep enough to pass the
            // compiler's layout limit.
            batches.extend(on_lane.chunks(BATCH_SIZE).map(|chunk| Box::pin(self.send_batch(lane, chunk.to_vec()))));
        }
        let sent = futures_util::stream::iter(batches).buffer_unordered(BATCHES_AT_ONCE).collect::<Vec<_>>().await;
        sent.into_iter().flatten().collect()
    }

    /// [`Self::post`], `Ok` when SQS took every message.
    pub async fn post_all(&self, postings: &[(&DeliveryMessage, Place)]) -> Result<(), QueueError> {
        let refused = self.post(postings).await;
        match refused.first() {
            Some((_, reason)) => Err(QueueError::Refused { count: refused.len(), reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// One `SendMessageBatch` of at most [`BATCH_SIZE`] messages, each with its position among
    /// a post's: the positions and SQS's reasons of those it did not take.
    async fn send_batch(&self, lane: Lane, chunk: Vec<(usize, &DeliveryMessage, Place)>) -> Vec<(usize, String)> {
        let entries = chunk.iter().map(|(position, message, place)| entry(position.to_string(), message, *place));
        let output = self
            .clients
            .sqs()
            .send_message_batch()
            .queue_url(self.url(lane))
            .set_entries(Some(entries.collect()))
            .send()
            .await;
        match output {
            Ok(output) => output
                .failed
                .into_iter()
                .map(|failed| (failed.id.parse().unwrap_or_default(), failed.message.unwrap_or_default()))
                .collect(),
            Err(err) => {
                let reason = sqs_error(err).to_string();
                chunk.iter().map(|(position, _, _)| (*position, reason.clone())).collect()
            }
        }
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

/// One message of a `SendMessageBatch`.
/// The main lane is a FIFO queue, which takes no per-message delay; a copy on the retry lane
/// carries no claim ([`Place::Delay`]).
fn entry(id: String, message: &DeliveryMessage, place: Place) -> SendMessageBatchRequestEntry {
    let body = |message: &DeliveryMessage| serde_json::to_string(message).expect("messages serialize");
    let entry = SendMessageBatchRequestEntry::builder().id(id);
    let entry = match place {
        Place::Group(index) => entry
            .message_body(body(message))
            .message_group_id(group_count::group_id(&message.subscription_id, index))
            .message_deduplication_id(random::random_token("")),
        Place::Delay(delay) => entry
            .message_body(body(&DeliveryMessage { claimed_until: None, ..message.clone() }))
            .delay_seconds(whole_seconds(delay.min(LONGEST_DELAY))),
    };
    entry.build().expect("entry has id and body")
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
        let claimed = crate::delivery::plan::created_claimed(message, event.created_at);
        let late = entry("0".into(), &claimed, Place::Delay(Duration::from_secs(3600)));
        assert_eq!(late.delay_seconds, Some(900));
        let copy: DeliveryMessage = serde_json::from_str(late.message_body()).unwrap();
        assert_eq!(copy.claimed_until, None, "a copy on the retry lane carries no claim");
        let main = entry("0".into(), &claimed, Place::Group(3));
        assert_eq!(main.message_group_id.as_deref(), Some("whk_01JDQ40A1B2C3D4E5F6G7H8J9K#3"));
        assert_eq!(main.delay_seconds, None, "FIFO queues take no per-message delay");
        let copy: DeliveryMessage = serde_json::from_str(main.message_body()).unwrap();
        assert_eq!(copy.claimed_until, claimed.claimed_until, "a main-lane message keeps its claim");
        let again = entry("0".into(), &claimed, Place::Group(3));
        assert_ne!(main.message_deduplication_id, again.message_deduplication_id);
    }
}
