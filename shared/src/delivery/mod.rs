//! Webhook delivery (contract section 5, "Delivery"): the queue message, the signed
//! request, the retry schedule, the guarded HTTP sender and the delivery log (section 9),
//! each in its own module.

pub mod log;
pub mod retry;
pub mod sender;

use serde::{Deserialize, Serialize};

use crate::events::Event;
use crate::ids;
use crate::signing;

/// One delivery of one event to one subscription: the body of a delivery queue message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryMessage {
    pub delivery_id: String,
    pub user_id: String,
    pub subscription_id: String,
    pub event: Event,
}

impl DeliveryMessage {
    /// The delivery id depends only on the event and the subscription, so a repeated stream
    /// record or a retry carries the same `X-Webhook-Delivery`.
    pub fn new(event: &Event, user_id: &str, subscription_id: &str) -> Self {
        let millis = ids::millis_of(&event.id).unwrap_or_default();
        DeliveryMessage {
            delivery_id: ids::derived_id(ids::DELIVERY, millis, &[&event.id, subscription_id]),
            user_id: user_id.to_owned(),
            subscription_id: subscription_id.to_owned(),
            event: event.clone(),
        }
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
    pub fn new(message: &DeliveryMessage, secret: &str, unix_seconds: u64) -> Self {
        let body = message.body();
        let headers = vec![
            ("Content-Type", "application/json".to_owned()),
            ("User-Agent", USER_AGENT.to_owned()),
            ("X-Webhook-Event", message.event.kind.as_str().to_owned()),
            ("X-Webhook-Delivery", message.delivery_id.clone()),
            ("X-Webhook-Signature", signing::sign_hex(secret, &body)),
            ("X-Webhook-Timestamp", unix_seconds.to_string()),
        ];
        SignedDelivery { body, headers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::EventKind;

    fn event() -> Event {
        let mut data = serde_json::Map::new();
        data.insert("userId".into(), "u1".into());
        data.insert("profileId".into(), "prf_1".into());
        Event {
            id: ids::derived_id(ids::EVENT, 1_795_766_400_000, &["arn", "record-1"]),
            kind: EventKind::ProfileUpdated,
            created_at: "2026-11-27T08:00:00.000Z".into(),
            data,
        }
    }

    #[test]
    fn delivery_ids_are_stable_per_event_and_subscription() {
        let a = DeliveryMessage::new(&event(), "u1", "whk_1");
        assert_eq!(a.delivery_id, DeliveryMessage::new(&event(), "u1", "whk_1").delivery_id);
        assert_ne!(a.delivery_id, DeliveryMessage::new(&event(), "u1", "whk_2").delivery_id);
        assert!(ids::has_shape(&a.delivery_id, ids::DELIVERY));
    }

    #[test]
    fn the_signature_covers_the_exact_body_sent() {
        let message = DeliveryMessage::new(&event(), "u1", "whk_1");
        let signed = SignedDelivery::new(&message, "whsec_test", 1_795_766_400);
        let header = |name| signed.headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str());
        assert!(signing::verify_hex("whsec_test", &signed.body, header("X-Webhook-Signature").unwrap()));
        assert_eq!(header("X-Webhook-Event"), Some("profile.updated"));
        assert_eq!(header("X-Webhook-Delivery"), Some(message.delivery_id.as_str()));
        assert_eq!(header("X-Webhook-Timestamp"), Some("1795766400"));
        let body: serde_json::Value = serde_json::from_slice(&signed.body).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"id": message.event.id, "type": "profile.updated",
                "createdAt": "2026-11-27T08:00:00.000Z", "data": {"userId": "u1", "profileId": "prf_1"}})
        );
    }
}
