//! The delivery log (contract section 9): one record per delivery (one event to one
//! subscription), with its status and what its last attempt saw.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::attempt::Outcome;
use crate::clock::Timestamp;
use crate::events::EventKind;
use crate::ids::{DeliveryId, EventId, SubscriptionId};

/// How long a record is kept after its last change (DynamoDB TTL).
pub const RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

crate::text::wire_names! {
    pub enum DeliveryStatus: "status" {
        /// Queued, or waiting for its next attempt.
        Pending = "pending",
        /// A 2xx came back.
        Succeeded = "succeeded",
        /// Not sent again: every attempt used (the delivery sits in the dead-letter queue), or
        /// sent before and stopped because its subscription could not take it any more.
        Failed = "failed",
        /// The subscription could not take it when its turn came; never sent.
        Skipped = "skipped",
        /// Its turn found its subscription disabled with `whileDisabled: hold` (contract
        /// section 20): kept, with no message in any queue, until the subscription is enabled.
        Held = "held",
        /// Its owner cancelled it while it waited (section 20); never sent again unless
        /// retried by hand or replayed.
        Cancelled = "cancelled",
    }
}

/// A delivery record as the API shows it. It never holds a secret or a signature.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryRecord {
    pub id: DeliveryId,
    pub subscription_id: SubscriptionId,
    pub event_id: EventId,
    pub event_type: EventKind,
    pub created_at: Timestamp,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub last_attempt_at: Option<Timestamp>,
    pub last_response_status: Option<u16>,
    pub last_response_body: Option<String>,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<Timestamp>,
    pub succeeded_at: Option<Timestamp>,
    /// The exact body that was signed and sent (a JSON text): the same bytes on every
    /// attempt, a manual retry and a recovery. The portal shows it (contract section 14).
    pub body: String,
}

/// What one attempt changes in its record: what the log stores of its [`Outcome`], and what
/// the delivery plan decided of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    pub at: Timestamp,
    pub status: DeliveryStatus,
    /// The answer's status and the start of its body; `None` when no answer came.
    pub response: Option<(u16, String)>,
    pub error: Option<String>,
    pub next_attempt_at: Option<Timestamp>,
    /// The next attempt waits in the table, not in a message: its wait is longer than a
    /// message's longest delay, so the message is deleted and the sweep queues the record
    /// ahead of its time (contract section 22).
    pub parked: bool,
    /// Moves the record's generation on (after a success), so no other copy sends again.
    pub advance_generation: bool,
}

impl AttemptRecord {
    /// The attempt that got `outcome` at `at` succeeded: the generation moves on.
    pub fn succeeded(outcome: &Outcome, at: Timestamp) -> Self {
        AttemptRecord { status: DeliveryStatus::Succeeded, advance_generation: true, ..Self::failed(outcome, None, at) }
    }

    /// The attempt that got `outcome` at `at` failed: tried again at `next`, or none is left.
    pub fn failed(outcome: &Outcome, next: Option<Timestamp>, at: Timestamp) -> Self {
        AttemptRecord {
            at,
            status: if next.is_some() { DeliveryStatus::Pending } else { DeliveryStatus::Failed },
            response: outcome.answer().map(|answer| (answer.status, answer.body.clone())),
            error: outcome.error(),
            next_attempt_at: next,
            parked: false,
            advance_generation: false,
        }
    }
}
