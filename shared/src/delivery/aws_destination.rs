//! What one attempt to a destination in the receiver's own AWS account sends, and what an
//! AWS error makes of it (contract section 17). Decisions only: `aws_sender` makes the calls.
//!
//! - SQS: the message body is the event body, byte for byte; the headers an HTTP receiver
//!   gets travel as `String` message attributes of the same names. A FIFO queue gets the
//!   subscription as its message group and the delivery id as its deduplication id.
//! - EventBridge: one entry, `Source` `career.webhooks`, `DetailType` the event kind, and as
//!   `Detail` the event body's object with one more member, `webhook`: `{"headers": {…},
//!   "body": "<the event body as sent, the bytes the signature covers>"}`. Rules match on
//!   the event's own fields; a receiver verifies `webhook.body` with `webhook.headers`
//!   (EventBridge may re-serialize `Detail`, so the signed bytes travel as a string).
//! - A Custom Event Bus (the eventsv2 API): the same entry, with the subscription as its
//!   `EventGroupId` (the bus keeps each group's order) and the delivery id as its
//!   `DeduplicationId`, as a FIFO queue gets them.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use super::SignedDelivery;

/// How long an assumed role's credentials last: STS's shortest session, 15 minutes.
pub const SESSION_SECONDS: i32 = 900;

/// Credentials (and an identity token, contract section 21) are used until this long before
/// they expire, then asked for again, so no send starts with credentials about to lapse.
pub const RENEW_BEFORE: Duration = Duration::from_secs(60);

/// The `Source` of every EventBridge entry.
pub const EVENT_SOURCE: &str = "career.webhooks";

/// The member of an EventBridge `Detail` that carries the headers and the signed bytes.
pub const ENVELOPE_FIELD: &str = "webhook";

/// The headers an HTTP receiver gets that travel with the message, in this order: the
/// Standard Webhooks headers (`v1`, and `v1a` when on, in `webhook-signature`), the event
/// kind and delivery id, and trace context when the subscription asked for it (section 19).
/// SQS takes at most 10 message attributes; these are at most 7.
const CARRIED_HEADERS: [&str; 7] = [
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "X-Webhook-Event",
    "X-Webhook-Delivery",
    "traceparent",
    "tracestate",
];

/// The signed delivery's headers that travel with it, in [`CARRIED_HEADERS`]' order.
pub fn carried_headers(signed: &SignedDelivery) -> Vec<(&'static str, String)> {
    CARRIED_HEADERS
        .iter()
        .filter_map(|name| signed.headers.iter().find(|(header, _)| header == name).cloned())
        .collect()
}

/// One `SendMessage`'s parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMessage {
    pub body: String,
    pub attributes: Vec<(&'static str, String)>,
    /// `(MessageGroupId, MessageDeduplicationId)` on a FIFO queue.
    pub fifo: Option<(String, String)>,
}

impl QueueMessage {
    pub fn new(signed: &SignedDelivery, subscription_id: &str, delivery_id: &str, fifo: bool) -> Self {
        QueueMessage {
            body: String::from_utf8_lossy(&signed.body).into_owned(),
            attributes: carried_headers(signed),
            fifo: fifo.then(|| (subscription_id.to_owned(), delivery_id.to_owned())),
        }
    }
}

/// One `PutEvents` entry's parameters, on either bus: its `Source` is [`EVENT_SOURCE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BusEvent {
    /// The event kind.
    pub detail_type: String,
    pub detail: String,
    /// `(EventGroupId, DeduplicationId)` on a Custom Event Bus.
    pub ordering: Option<(String, String)>,
}

impl BusEvent {
    pub fn new(signed: &SignedDelivery, kind: &str, subscription_id: &str, delivery_id: &str, ordered: bool) -> Self {
        BusEvent {
            detail_type: kind.to_owned(),
            detail: event_detail(signed),
            ordering: ordered.then(|| (subscription_id.to_owned(), delivery_id.to_owned())),
        }
    }
}

/// An EventBridge entry's `Detail`: the event's object with the [`ENVELOPE_FIELD`] member.
fn event_detail(signed: &SignedDelivery) -> String {
    let mut detail: Map<String, Value> = serde_json::from_slice(&signed.body).expect("an event is a JSON object");
    let headers: Map<String, Value> =
        carried_headers(signed).into_iter().map(|(name, value)| (name.to_owned(), Value::String(value))).collect();
    let body = String::from_utf8_lossy(&signed.body).into_owned();
    let envelope = serde_json::json!({"headers": headers, "body": body});
    detail.insert(ENVELOPE_FIELD.to_owned(), envelope);
    Value::Object(detail).to_string()
}

/// Whether credentials (or a token) that expire at `expires` may still be used at `now`.
pub fn still_fresh(expires: SystemTime, now: SystemTime) -> bool {
    now + RENEW_BEFORE < expires
}

/// The call of an attempt that failed: a destination's, or the identity token's of an HTTP
/// subscription (contract section 21), made with the delivery function's own role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    AssumeRole,
    SendMessage,
    PutEvents,
    GetWebIdentityToken,
}

impl Step {
    fn action(self) -> &'static str {
        match self {
            Step::AssumeRole => "sts:AssumeRole",
            Step::SendMessage => "sqs:SendMessage",
            Step::PutEvents => "events:PutEvents",
            Step::GetWebIdentityToken => "sts:GetWebIdentityToken",
        }
    }
}

/// What AWS said of a failed call, as far as the outcome cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AwsError<'a> {
    /// An error answer (or a `PutEvents` entry's error): its code and HTTP status, when known.
    Answered { code: Option<&'a str>, status: Option<u16> },
    /// No answer: a timeout, or no connection.
    NoAnswer,
}

/// Why the step failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Refused by IAM: the trust policy (for `AssumeRole`) or the role's permissions.
    Denied,
    /// Refused by the queue's KMS key.
    KeyDenied,
    /// The queue or the bus does not exist.
    Missing,
    /// The deployment's account has not turned outbound identity federation on.
    FederationOff,
    Throttled,
    /// An AWS service error (a 5xx).
    ServiceError(u16),
    NoAnswer,
    /// Any other error, by its AWS code.
    Other(String),
}

/// A failed attempt to a destination: the step and why. Its text is the record's
/// `lastError`, which says what to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DestinationFailure {
    pub step: Step,
    pub cause: Cause,
}

impl fmt::Display for DestinationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let action = self.step.action();
        match (&self.cause, self.step) {
            (Cause::Denied, Step::AssumeRole) => write!(
                f,
                "{action} refused: check that roleArn exists and that its trust policy names senderRoleArn as \
                 Principal with the condition sts:ExternalId equal to the subscription's externalId"
            ),
            (Cause::Denied, Step::SendMessage) => write!(
                f,
                "{action} refused: check that the role's permissions policy allows sqs:SendMessage on the queue \
                 (and the queue's policy does not deny it)"
            ),
            (Cause::Denied, Step::GetWebIdentityToken) => write!(
                f,
                "{action} refused: the deployment's delivery role may not mint identity tokens (its operator \
                 grants sts:GetWebIdentityToken and sts:TagGetWebIdentityToken)"
            ),
            (Cause::FederationOff, _) => write!(
                f,
                "{action}: outbound identity federation is off in the deployment's AWS account (its operator \
                 turns it on once, docs/deploying.md)"
            ),
            (Cause::Denied, Step::PutEvents) => {
                write!(
                    f,
                    "{action} refused: check that the role's permissions policy allows events:PutEvents on the bus"
                )
            }
            (Cause::KeyDenied, _) => write!(
                f,
                "{action} refused by the queue's KMS key: check that the key policy lets the role use \
                 kms:GenerateDataKey and kms:Decrypt"
            ),
            (Cause::Missing, Step::PutEvents) => {
                write!(f, "{action}: the event bus does not exist (check eventBusArn)")
            }
            (Cause::Missing, _) => write!(f, "{action}: the queue does not exist (check queueUrl)"),
            (Cause::Throttled, _) => write!(f, "{action} throttled by AWS"),
            (Cause::ServiceError(status), _) => write!(f, "{action} failed with an AWS service error ({status})"),
            (Cause::NoAnswer, _) => write!(f, "{action}: no answer from AWS (timed out or could not connect)"),
            (Cause::Other(code), _) => write!(f, "{action} refused: {code}"),
        }
    }
}

/// What an AWS error at `step` makes of the attempt.
pub fn classify(step: Step, error: AwsError<'_>) -> DestinationFailure {
    let (code, status) = match error {
        AwsError::NoAnswer => return DestinationFailure { step, cause: Cause::NoAnswer },
        AwsError::Answered { code, status } => (code.unwrap_or_default(), status),
    };
    let cause = match code {
        // A role that does not exist is refused as one that does not trust the caller.
        "AccessDenied" | "AccessDeniedException" | "AuthorizationError" | "NotAuthorized" => Cause::Denied,
        code if code.starts_with("KMS.") || code.starts_with("Kms") => Cause::KeyDenied,
        "AWS.SimpleQueueService.NonExistentQueue" | "QueueDoesNotExist" | "ResourceNotFoundException" => Cause::Missing,
        "OutboundWebIdentityFederationDisabledException" => Cause::FederationOff,
        "Throttling" | "ThrottlingException" | "RequestThrottled" | "TooManyRequestsException" => Cause::Throttled,
        _ if status == Some(429) => Cause::Throttled,
        _ if status.is_some_and(|status| status >= 500) => Cause::ServiceError(status.unwrap_or_default()),
        "" => Cause::Other(status.map_or("an unknown error".to_owned(), |status| format!("HTTP {status}"))),
        code => Cause::Other(code.to_owned()),
    };
    DestinationFailure { step, cause }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(extra: &[(&'static str, &str)]) -> SignedDelivery {
        let mut headers: Vec<(&'static str, String)> = [
            ("Content-Type", "application/json"),
            ("X-Webhook-Event", "profile.updated"),
            ("X-Webhook-Delivery", "dlv_1"),
            ("X-Webhook-Signature", "hex"),
            ("webhook-id", "dlv_1"),
            ("webhook-timestamp", "1700000000"),
            ("webhook-signature", "v1,abc v1a,def"),
        ]
        .iter()
        .map(|(name, value)| (*name, value.to_string()))
        .collect();
        headers.extend(extra.iter().map(|(name, value)| (*name, value.to_string())));
        SignedDelivery { body: br#"{"id":"evt_1","type":"profile.updated","data":{"a":"\u00e9"}}"#.to_vec(), headers }
    }

    #[test]
    fn a_queue_message_is_the_body_with_the_standard_headers_as_attributes() {
        let message = QueueMessage::new(&signed(&[]), "whk_1", "dlv_1", false);
        assert_eq!(message.body.as_bytes(), signed(&[]).body.as_slice(), "byte for byte");
        let names: Vec<&str> = message.attributes.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            names,
            ["webhook-id", "webhook-timestamp", "webhook-signature", "X-Webhook-Event", "X-Webhook-Delivery"]
        );
        assert_eq!(message.attributes[2].1, "v1,abc v1a,def", "v1 and v1a as signed");
        assert_eq!(message.fifo, None);
        let fifo = QueueMessage::new(&signed(&[("traceparent", "00-a-b-01")]), "whk_1", "dlv_1", true);
        assert_eq!(fifo.fifo, Some(("whk_1".to_owned(), "dlv_1".to_owned())));
        assert_eq!(fifo.attributes.last(), Some(&("traceparent", "00-a-b-01".to_owned())));
    }

    #[test]
    fn an_event_detail_is_the_event_with_the_envelope_beside_its_fields() {
        let signed = signed(&[]);
        let event = BusEvent::new(&signed, "profile.updated", "whk_1", "dlv_1", false);
        assert_eq!((event.detail_type.as_str(), event.ordering), ("profile.updated", None));
        let detail: Value = serde_json::from_str(&event.detail).unwrap();
        assert_eq!(detail["type"], "profile.updated");
        assert_eq!(detail["data"]["a"], "é");
        assert_eq!(detail[ENVELOPE_FIELD]["body"].as_str().unwrap().as_bytes(), signed.body.as_slice());
        assert_eq!(detail[ENVELOPE_FIELD]["headers"]["webhook-signature"], "v1,abc v1a,def");
        let keys: Vec<&String> = detail.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["id", "type", "data", ENVELOPE_FIELD], "the event's fields keep their order");
    }

    #[test]
    fn a_custom_event_bus_entry_is_the_same_event_in_the_subscriptions_group_deduplicated_by_the_delivery() {
        let signed = signed(&[]);
        let ordered = BusEvent::new(&signed, "profile.updated", "whk_1", "dlv_1", true);
        let plain = BusEvent::new(&signed, "profile.updated", "whk_1", "dlv_1", false);
        assert_eq!(ordered.ordering, Some(("whk_1".to_owned(), "dlv_1".to_owned())));
        assert_eq!((ordered.detail_type, ordered.detail), (plain.detail_type, plain.detail), "the same envelope");
    }

    #[test]
    fn credentials_are_renewed_a_minute_before_they_expire() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let session = Duration::from_secs(SESSION_SECONDS as u64);
        assert!(still_fresh(now + session, now));
        assert!(still_fresh(now + session, now + session - RENEW_BEFORE - Duration::from_secs(1)));
        assert!(!still_fresh(now + session, now + session - RENEW_BEFORE));
        assert!(!still_fresh(now, now + session));
    }

    #[test]
    fn each_aws_error_names_its_step_and_what_to_check() {
        let answered = |code: &'static str, status: u16| AwsError::Answered { code: Some(code), status: Some(status) };
        let cases = [
            (Step::AssumeRole, answered("AccessDenied", 403), Cause::Denied, "trust policy"),
            (Step::AssumeRole, answered("AccessDenied", 403), Cause::Denied, "sts:ExternalId"),
            (
                Step::SendMessage,
                answered("AccessDenied", 400),
                Cause::Denied,
                "permissions policy allows sqs:SendMessage",
            ),
            (Step::SendMessage, answered("KMS.AccessDeniedException", 400), Cause::KeyDenied, "key policy"),
            (
                Step::SendMessage,
                answered("AWS.SimpleQueueService.NonExistentQueue", 400),
                Cause::Missing,
                "queue does not exist",
            ),
            (Step::SendMessage, answered("QueueDoesNotExist", 400), Cause::Missing, "check queueUrl"),
            (Step::PutEvents, answered("AccessDeniedException", 400), Cause::Denied, "events:PutEvents on the bus"),
            (Step::PutEvents, answered("ResourceNotFoundException", 400), Cause::Missing, "event bus does not exist"),
            (Step::PutEvents, answered("ThrottlingException", 400), Cause::Throttled, "throttled"),
            (Step::SendMessage, answered("RequestThrottled", 403), Cause::Throttled, "throttled"),
            (Step::AssumeRole, answered("Whatever", 429), Cause::Throttled, "throttled"),
            (Step::SendMessage, answered("InternalError", 500), Cause::ServiceError(500), "service error (500)"),
            (
                Step::SendMessage,
                AwsError::Answered { code: None, status: Some(503) },
                Cause::ServiceError(503),
                "(503)",
            ),
            (Step::AssumeRole, AwsError::NoAnswer, Cause::NoAnswer, "no answer"),
            (Step::GetWebIdentityToken, answered("AccessDenied", 403), Cause::Denied, "sts:TagGetWebIdentityToken"),
            (
                Step::GetWebIdentityToken,
                answered("OutboundWebIdentityFederationDisabledException", 403),
                Cause::FederationOff,
                "outbound identity federation is off",
            ),
            (Step::GetWebIdentityToken, answered("Throttling", 400), Cause::Throttled, "throttled"),
            (
                Step::AssumeRole,
                answered("RegionDisabledException", 403),
                Cause::Other("RegionDisabledException".into()),
                "RegionDisabledException",
            ),
            (
                Step::PutEvents,
                AwsError::Answered { code: None, status: Some(400) },
                Cause::Other("HTTP 400".into()),
                "HTTP 400",
            ),
        ];
        for (step, error, cause, says) in cases {
            let failure = classify(step, error);
            assert_eq!(failure.cause, cause, "{step:?} {error:?}");
            let text = failure.to_string();
            assert!(text.starts_with(step.action()), "{text}");
            assert!(text.contains(says), "{text}");
        }
    }
}
