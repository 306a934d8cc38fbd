//! The delivery log (contract section 9): one record per delivery (one event to one
//! subscription), with its status and what its last attempt saw.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::plan::RecordUpdate;
use super::sender::Outcome;
use crate::clock::Timestamp;
use crate::events::EventKind;
use crate::ids::{DeliveryId, EventId, SubscriptionId};

/// How long a record is kept after its last change (DynamoDB TTL).
pub const RETENTION: Duration = Duration::from_secs(30 * 24 * 60 * 60);
/// How much of a receiver's answer a record keeps.
pub const MAX_RESPONSE_BODY_BYTES: usize = 1024;

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

impl AttemptRecord {
    /// The attempt that got `outcome` at `at`, written as the delivery plan says.
    pub fn new(outcome: &Outcome, at: DateTime<Utc>, update: &RecordUpdate) -> Self {
        AttemptRecord {
            at,
            status: update.status,
            response: outcome.answer().map(|answer| (answer.status, answer.body.clone())),
            error: update.error.map(str::to_owned).or_else(|| outcome.error()),
            next_attempt_at: update.next_attempt_at.map(Timestamp::from_datetime),
            advance_generation: update.advance_generation,
        }
    }
}

/// What a record keeps of a receiver's answer: at most its first 1024 bytes, as text.
pub fn response_excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(MAX_RESPONSE_BODY_BYTES)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::sender::SendFailure;

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

    #[test]
    fn an_attempt_keeps_the_answer_and_writes_what_the_plan_says() {
        use crate::delivery::sender::Answer;
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-21T08:00:00Z").unwrap().with_timezone(&Utc);
        let rejected = Outcome::Rejected(Answer { status: 500, body: "oops".into(), retry_after: None });
        let pending = AttemptRecord::new(&rejected, at, &RecordUpdate::retry_at(Some(at + Duration::from_secs(30))));
        assert_eq!(
            pending,
            AttemptRecord {
                at,
                status: DeliveryStatus::Pending,
                response: Some((500, "oops".into())),
                error: Some("answered 500".into()),
                next_attempt_at: Some("2026-11-21T08:00:30.000Z".parse().unwrap()),
                advance_generation: false,
            }
        );
        let refused = Outcome::NoAnswer(SendFailure::ConnectionRefused);
        let failed = AttemptRecord::new(&refused, at, &RecordUpdate::retry_at(None));
        assert_eq!((failed.status, failed.response, failed.next_attempt_at), (DeliveryStatus::Failed, None, None));
        assert_eq!(failed.error.as_deref(), Some("connection refused"));
        let gone = Outcome::Rejected(Answer { status: 410, body: String::new(), retry_after: None });
        let update = RecordUpdate { error: Some(crate::delivery::plan::GONE_ERROR), ..RecordUpdate::retry_at(None) };
        assert_eq!(
            AttemptRecord::new(&gone, at, &update).error.as_deref(),
            Some("answered 410; subscription disabled")
        );
        let delivered = Outcome::Delivered(Answer { status: 204, body: String::new(), retry_after: None });
        let succeeded = AttemptRecord::new(&delivered, at, &RecordUpdate::succeeded());
        assert_eq!(
            (succeeded.status, succeeded.error, succeeded.next_attempt_at, succeeded.advance_generation),
            (DeliveryStatus::Succeeded, None, None, true)
        );
    }

    #[test]
    fn an_excerpt_is_the_first_1024_bytes_as_text() {
        assert_eq!(response_excerpt(b"oops"), "oops");
        assert_eq!(response_excerpt(&[b'a'; 3000]).len(), 1024);
        assert_eq!(response_excerpt(b"bad \xff byte"), "bad \u{fffd} byte");
        // A character cut at the limit becomes a replacement character.
        let mut cut = vec![b'a'; 1023];
        cut.extend_from_slice("é".as_bytes());
        assert!(response_excerpt(&cut).ends_with('\u{fffd}'));
    }
}
