//! Webhook delivery (contract section 5, "Delivery"): the queue message, the signed
//! request, the retry schedule, each turn's decisions and the delivery log (section 9), each
//! in its own module. The queues and the senders that carry them out are `crate::aws`'s.

pub mod attempt;
pub mod aws_destination;
pub mod cancel;
pub mod group_count;
pub mod groups;
pub mod lane;
pub mod log;
pub mod plan;
pub mod rate;
pub mod recovery;
pub mod replay;
pub mod retry;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::delivery::lane::Lane;
use crate::events::Event;
use crate::ids::{DeliveryId, SubscriptionId, UserId};
use crate::trace::TraceContext;
use crate::webhooks::rotation::ActiveSecrets;
use crate::webhooks::signing;

/// One delivery of one event to one subscription: the body of a delivery queue message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryMessage {
    pub delivery_id: DeliveryId,
    pub user_id: UserId,
    pub subscription_id: SubscriptionId,
    pub event: Event,
    /// The generation of its record that this message belongs to (contract section 12): it
    /// is sent only while the record's generation is still this one. Messages queued before
    /// generations existed (2026-11-23) read as zero, the generation of a record that has none.
    /// Compatibility: the `default` goes after 2026-12-07, when SQS (14 days at most) holds
    /// no such message any more.
    #[serde(default)]
    pub generation: u32,
    /// The end of the claim its record was created with (`plan::Lease`), on a first attempt
    /// queued to the main lane: its turn holds the record without a write of its own while
    /// the claim still leaves time for a send (`plan::granted`) and the record is as its
    /// creation left it (`plan::created_claim`). A FIFO queue hands a message
    /// to one consumer at a time, so the claim is this message's alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_until: Option<Timestamp>,
    /// The trace of the change that caused the event (contract section 19), which every
    /// attempt continues. In the body rather than in message attributes, so every copy of the
    /// message (a hand-over, the dead-letter queue, `make run`'s saved queues) keeps it; a
    /// message queued before trace context (2026-11-27) has none, and each of its attempts
    /// starts one. Compatibility: reading such a message goes after 2026-12-11 (SQS keeps a
    /// message 14 days at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
}

impl DeliveryMessage {
    /// How long a first attempt started after its delivery was created (the change its event
    /// records, which the delivery id carries), for the main lane's backlog alarm. Only a first
    /// attempt of the fan-out's own round (a manual retry starts a later round of an old delivery)
    /// taken from the main lane, and only to a subscription without `maxDeliveriesPerSecond`: a
    /// limited subscription's deliveries wait on the main lane by design, and would raise the
    /// alarm for a backlog nothing is wrong with.
    pub fn first_attempt_wait(
        &self,
        lane: Lane,
        attempt: u32,
        rate_limited: bool,
        started: Timestamp,
    ) -> Option<std::time::Duration> {
        let first = lane == Lane::Main && attempt == 1 && self.generation == 0 && !rate_limited;
        first.then(|| started.since(self.delivery_id.created_at()))
    }

    /// The delivery id depends only on the event and the subscription, so a repeated stream
    /// record or a retry carries the same `X-Webhook-Delivery`.
    pub fn new(event: &Event, user_id: &UserId, subscription_id: &SubscriptionId) -> Self {
        DeliveryMessage {
            delivery_id: DeliveryId::derived(event.id.created_at(), &[event.id.as_str(), subscription_id.as_str()]),
            user_id: user_id.clone(),
            subscription_id: subscription_id.clone(),
            event: event.clone(),
            generation: 0,
            claimed_until: None,
            trace: None,
        }
    }

    /// The message as part of the trace `trace`.
    pub fn traced(self, trace: TraceContext) -> Self {
        DeliveryMessage { trace: Some(trace), ..self }
    }

    /// The body sent to the receiver: the event as JSON, the same bytes on every attempt.
    pub fn body(&self) -> Vec<u8> {
        serde_json::to_vec(&self.event).expect("events serialize")
    }
}

/// The exact bytes sent and the headers that go with them.
pub struct SignedDelivery {
    pub body: Vec<u8>,
    pub headers: Vec<(&'static str, String)>,
}

pub const USER_AGENT: &str = concat!("career-webhooks/", env!("CARGO_PKG_VERSION"));

impl SignedDelivery {
    /// Signs with each of the active secrets (the current one first, contract section 10):
    /// the seed's `X-Webhook-Signature` and the Standard Webhooks headers (section 11), whose
    /// timestamp is this attempt's, `at`, in Unix seconds; then with each active key, a `v1a`
    /// entry after the `v1` ones (section 16).
    pub fn new(message: &DeliveryMessage, active: &ActiveSecrets<'_>, at: Timestamp) -> Self {
        let unix_seconds = at.unix_seconds();
        let body = message.body();
        let id = &message.delivery_id;
        let hex: Vec<String> = active.secrets.iter().map(|secret| signing::sign_hex(secret.expose(), &body)).collect();
        let symmetric =
            active.secrets.iter().map(|secret| signing::sign_standard(secret.key(), id.as_str(), unix_seconds, &body));
        let asymmetric = active.keys.iter().map(|key| signing::sign_asymmetric(key, id.as_str(), unix_seconds, &body));
        let standard: Vec<String> = symmetric.chain(asymmetric).collect();
        let headers = vec![
            ("Content-Type", "application/json".to_owned()),
            ("User-Agent", USER_AGENT.to_owned()),
            ("X-Webhook-Event", message.event.kind().as_str().to_owned()),
            ("X-Webhook-Delivery", id.to_string()),
            ("X-Webhook-Signature", hex.join(" ")),
            ("X-Webhook-Timestamp", unix_seconds.to_string()),
            ("webhook-id", id.to_string()),
            ("webhook-timestamp", unix_seconds.to_string()),
            ("webhook-signature", standard.join(" ")),
        ];
        SignedDelivery { body, headers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::EventId;
    use crate::webhooks::signing::SigningKey;
    use crate::webhooks::WebhookSecret;

    /// A delivery whose change happened at 08:00:00 (its id carries the time).
    fn delivery_of_a_change_at_eight() -> DeliveryMessage {
        let at: Timestamp = "2026-11-27T08:00:00.000Z".parse().unwrap();
        let data = crate::events::EventData::ProfileUpdated {
            user_id: "u1".parse().unwrap(),
            profile_id: "prf_1".parse().unwrap(),
        };
        let event =
            crate::events::Event { id: crate::ids::EventId::derived(at, &["arn", "record-1"]), created_at: at, data };
        DeliveryMessage::new(&event, &"u1".parse().unwrap(), &"whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap())
    }

    #[test]
    fn only_an_unlimited_first_rounds_first_attempt_from_the_main_lane_has_a_wait() {
        let delivery = delivery_of_a_change_at_eight();
        let started: Timestamp = "2026-11-27T08:06:30.250Z".parse().unwrap();
        let wait = |delivery: &DeliveryMessage, lane, attempt, limited| {
            delivery.first_attempt_wait(lane, attempt, limited, started)
        };
        assert_eq!(wait(&delivery, Lane::Main, 1, false), Some(std::time::Duration::from_millis(390_250)));
        assert_eq!(wait(&delivery, Lane::Main, 1, true), None, "a rate limit's wait is by design");
        assert_eq!(wait(&delivery, Lane::Main, 2, false), None, "a retry waited for its schedule");
        assert_eq!(wait(&delivery, Lane::Retry, 1, false), None, "the retry lane's first attempts are handed over");
        let retried = DeliveryMessage { generation: 1, ..delivery };
        assert_eq!(wait(&retried, Lane::Main, 1, false), None, "a manual retry's change is old");
    }

    fn user() -> UserId {
        "u1".parse().unwrap()
    }

    fn subscription(n: u8) -> SubscriptionId {
        format!("whk_01JDQ40A1B2C3D4E5F6G7H8J9{n}").parse().unwrap()
    }

    fn event() -> Event {
        let data = crate::events::EventData::ProfileUpdated {
            user_id: "u1".parse().unwrap(),
            profile_id: "prf_1".parse().unwrap(),
        };
        Event {
            id: EventId::derived(Timestamp::from_unix_seconds(1_795_766_400), &["arn", "record-1"]),
            created_at: "2026-11-27T08:00:00.000Z".parse().unwrap(),
            data,
        }
    }

    /// A message queued before trace context reads as one without a trace, and one with a
    /// trace keeps it through its JSON.
    #[test]
    fn the_trace_travels_in_the_body_and_old_messages_still_read() {
        let message = DeliveryMessage::new(&event(), &user(), &subscription(1));
        let old = serde_json::to_value(&message).unwrap();
        assert!(old.get("trace").is_none(), "{old}");
        assert_eq!(serde_json::from_value::<DeliveryMessage>(old).unwrap(), message);
        let traced = message.traced(TraceContext::start());
        let json = serde_json::to_string(&traced).unwrap();
        assert_eq!(serde_json::from_str::<DeliveryMessage>(&json).unwrap(), traced);
    }

    #[test]
    fn delivery_ids_are_stable_per_event_and_subscription() {
        let a = DeliveryMessage::new(&event(), &user(), &subscription(1));
        assert_eq!(a.delivery_id, DeliveryMessage::new(&event(), &user(), &subscription(1)).delivery_id);
        assert_ne!(a.delivery_id, DeliveryMessage::new(&event(), &user(), &subscription(2)).delivery_id);
        assert_eq!(a.delivery_id.created_at(), event().id.created_at(), "sorts with its event");
    }

    fn header<'a>(signed: &'a SignedDelivery, name: &str) -> &'a str {
        signed.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()).unwrap_or_default()
    }

    #[test]
    fn the_signature_covers_the_exact_body_sent() {
        let message = DeliveryMessage::new(&event(), &user(), &subscription(1));
        let secret = WebhookSecret::generate();
        let active = ActiveSecrets { secrets: vec![&secret], keys: vec![] };
        let signed = SignedDelivery::new(&message, &active, Timestamp::from_unix_seconds(1_795_766_400));
        let header = |name| header(&signed, name);
        assert!(signing::verify_hex(secret.expose(), &signed.body, header("X-Webhook-Signature")));
        assert_eq!(header("X-Webhook-Event"), "profile.updated");
        assert_eq!(header("X-Webhook-Delivery"), message.delivery_id.as_str());
        assert_eq!(header("X-Webhook-Timestamp"), "1795766400");
        assert_eq!(header("webhook-id"), message.delivery_id.as_str());
        assert_eq!(header("webhook-timestamp"), "1795766400");
        let standard = signing::sign_standard(secret.key(), message.delivery_id.as_str(), 1_795_766_400, &signed.body);
        assert_eq!(header("webhook-signature"), standard);
        let body: serde_json::Value = serde_json::from_slice(&signed.body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"id": message.event.id, "type": "profile.updated",
                "createdAt": "2026-11-27T08:00:00.000Z", "data": {"userId": "u1", "profileId": "prf_1"}})
        );
    }

    #[test]
    fn during_a_grace_period_both_headers_carry_both_signatures_new_first() {
        let message = DeliveryMessage::new(&event(), &user(), &subscription(1));
        let (new, old) = (WebhookSecret::generate(), WebhookSecret::generate());
        let active = ActiveSecrets { secrets: vec![&new, &old], keys: vec![] };
        let signed = SignedDelivery::new(&message, &active, Timestamp::from_unix_seconds(1_795_766_400));
        let hex: Vec<&str> = header(&signed, "X-Webhook-Signature").split(' ').collect();
        assert_eq!(hex.len(), 2);
        assert!(signing::verify_hex(new.expose(), &signed.body, hex[0]));
        assert!(signing::verify_hex(old.expose(), &signed.body, hex[1]));
        let sign = |secret: &WebhookSecret| {
            signing::sign_standard(secret.key(), message.delivery_id.as_str(), 1_795_766_400, &signed.body)
        };
        assert_eq!(header(&signed, "webhook-signature"), format!("{} {}", sign(&new), sign(&old)));
    }

    #[test]
    fn v1a_entries_follow_the_v1_ones_new_key_first() {
        let message = DeliveryMessage::new(&event(), &user(), &subscription(1));
        let (new_secret, old_secret) = (WebhookSecret::generate(), WebhookSecret::generate());
        let (new_key, old_key) = (SigningKey::generate(), SigningKey::generate());
        let at = Timestamp::from_unix_seconds(1_795_766_400);
        let active = ActiveSecrets { secrets: vec![&new_secret, &old_secret], keys: vec![&new_key, &old_key] };
        let signed = SignedDelivery::new(&message, &active, at);
        let id = message.delivery_id.as_str();
        let expected = [
            signing::sign_standard(new_secret.key(), id, 1_795_766_400, &signed.body),
            signing::sign_standard(old_secret.key(), id, 1_795_766_400, &signed.body),
            signing::sign_asymmetric(&new_key, id, 1_795_766_400, &signed.body),
            signing::sign_asymmetric(&old_key, id, 1_795_766_400, &signed.body),
        ];
        assert_eq!(header(&signed, "webhook-signature"), expected.join(" "));
        assert_eq!(header(&signed, "X-Webhook-Signature").split(' ').count(), 2, "X-Webhook-Signature is HMAC only");
    }
}
