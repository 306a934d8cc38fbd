//! The delivery log (contract section 9): one record per delivery (one event to one
//! subscription), with its status and what its last attempt saw.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::events::EventKind;
use crate::ids::{DeliveryId, EventId, SubscriptionId};

/// How long a record is kept after its last change (DynamoDB TTL).
pub const RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Queued, or waiting for its next attempt.
    Pending,
    /// A 2xx came back.
    Succeeded,
    /// Every attempt used; the delivery sits in the dead-letter queue.
    Failed,
    /// The subscription was disabled when its turn came; never sent.
    Skipped,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 4] =
        [DeliveryStatus::Pending, DeliveryStatus::Succeeded, DeliveryStatus::Failed, DeliveryStatus::Skipped];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Succeeded => "succeeded",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        DeliveryStatus::ALL.into_iter().find(|status| status.as_str() == text)
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

/// What one attempt changes in its record.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptRecord {
    pub at: DateTime<Utc>,
    pub status: DeliveryStatus,
    /// The answer's status and the start of its body; `None` when no answer came.
    pub response: Option<(u16, String)>,
    pub error: Option<String>,
    pub next_attempt_at: Option<Timestamp>,
    /// Moves the record's generation on (after a success), so no other copy sends again.
    pub advance_generation: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_parse_only_the_four_names() {
        for status in DeliveryStatus::ALL {
            assert_eq!(DeliveryStatus::parse(status.as_str()), Some(status));
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        for other in ["", "Failed", "failure", "all"] {
            assert_eq!(DeliveryStatus::parse(other), None, "{other}");
        }
    }
}
