//! What becomes of a received message at the end of its turn: the plan's [`Exit`], executed,
//! and what the batch answer then says of it ([`Disposition`]). No message stays in flight
//! longer than one attempt's claim (contract section 22): a longer wait is a new message's
//! delay, or the record's.

use std::time::Duration;

use career_core::aws::queue::Lane;
use career_core::delivery::plan::{Exit, Place};
use career_core::delivery::DeliveryMessage;

use crate::{Deps, Receipt};

/// What becomes of a received message once its turn is over, as the batch answer tells the
/// event source mapping: each one that stays is one of the answer's item failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// It leaves its lane: deleted at once, or with its batch.
    Acknowledged,
    /// It stays on its lane, visible again when the wait its turn set is over.
    Stays,
}

/// What an exit needs of a received message: its lane, its receipt, and its delivery (none
/// for a message that cannot be read, which is only ever deleted).
pub(crate) struct Exiting<'a> {
    pub lane: Lane,
    pub receipt: Receipt<'a>,
    pub delivery: Option<&'a DeliveryMessage>,
}

/// Executes `exit` for the message. Should a move or a dead-letter send fail, the message
/// stays: after the retry base (a move), or visible again at once (the dead-letter queue:
/// its next turn finds the record failed and drops it, or the lane's redrive policy moves it).
pub(crate) async fn execute(deps: &Deps, message: &Exiting<'_>, exit: Exit) -> Disposition {
    match exit {
        Exit::Delete => acknowledge(deps, message.lane, message.receipt).await,
        Exit::Stay(wait) => stay(deps, message, wait).await,
        Exit::Move(place) => {
            let Some(delivery) = message.delivery else {
                return acknowledge(deps, message.lane, message.receipt).await;
            };
            match deps.queues.post(&[(delivery, place)]).await.into_iter().next() {
                None => acknowledge(deps, message.lane, message.receipt).await,
                Some((_, reason)) => {
                    tracing::error!(error = %reason, lane = place.lane().as_str(), "moving the delivery failed");
                    stay(deps, message, deps.policy.schedule.base).await
                }
            }
        }
        Exit::DeadLetter => {
            let Some(delivery) = message.delivery else {
                return acknowledge(deps, message.lane, message.receipt).await;
            };
            match deps.queues.dead_letter(delivery).await {
                Ok(()) => acknowledge(deps, message.lane, message.receipt).await,
                Err(err) => {
                    tracing::error!(error = %err, "moving the delivery to the dead-letter queue failed");
                    stay(deps, message, Duration::ZERO).await
                }
            }
        }
    }
}

/// A move of `place` that failed leaves the message where it is, for the retry base.
pub(crate) fn moved_to(place: Place) -> &'static str {
    match place {
        Place::Group(_) => "moving the delivery to its message group failed",
        Place::Delay(_) => "handing the delivery to the retry lane failed",
    }
}

/// Deletes the message from its lane now, when its batch holds others (else it goes with its
/// batch). Should the early delete fail, the message is still not reported, so the event
/// source mapping (or the local pump) deletes it with its batch.
pub(crate) async fn acknowledge(deps: &Deps, lane: Lane, receipt: Receipt<'_>) -> Disposition {
    if !receipt.early {
        return Disposition::Acknowledged;
    }
    if let Err(err) = deps.queues.delete(lane, receipt.handle).await {
        tracing::warn!(error = %err, "deleting the message early failed; it goes with its batch");
    }
    Disposition::Acknowledged
}

/// Leaves the message on its lane, visible again after `wait`.
pub(crate) async fn stay(deps: &Deps, message: &Exiting<'_>, wait: Duration) -> Disposition {
    if let Err(err) = deps.queues.retry_after(message.lane, message.receipt.handle, wait).await {
        tracing::error!(error = %err, "scheduling the retry failed");
    }
    Disposition::Stays
}
