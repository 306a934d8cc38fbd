//! Event kinds and events (contract section 5, "Events"). `catalog` describes each kind to
//! API clients; how a stream record becomes an event is the store's (`store::stream`).

pub mod catalog;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::ids::{AssessmentId, DeliveryId, EventId, ProfileId, SubscriptionId, UserId};
use crate::webhooks::disabled_reason::DisabledReason;

crate::text::wire_names! {
    /// Every event kind. The one list of them.
    pub enum EventKind: "event kind" {
        ProfileUpdated = "profile.updated",
        AssessmentCompleted = "assessment.completed",
        /// Operational kinds (contract section 15): a subscription's health changed, or one
        /// of its deliveries ran out of attempts. Sent to its owner's other subscriptions.
        EndpointFailing = "webhook.endpoint.failing",
        EndpointDisabled = "webhook.endpoint.disabled",
        EndpointRecovered = "webhook.endpoint.recovered",
        DeliveryExhausted = "webhook.delivery.exhausted",
        /// A test event sent on request to one subscription (contract section 9).
        WebhookPing = "webhook.ping",
    }
}

impl EventKind {
    /// The kinds a subscription can list; `webhook.ping` needs no listing.
    pub const SUBSCRIBABLE: [EventKind; 6] = [
        EventKind::ProfileUpdated,
        EventKind::AssessmentCompleted,
        EventKind::EndpointFailing,
        EventKind::EndpointDisabled,
        EventKind::EndpointRecovered,
        EventKind::DeliveryExhausted,
    ];

    /// Whether a subscription can list this kind.
    pub fn is_subscribable(self) -> bool {
        EventKind::SUBSCRIBABLE.contains(&self)
    }
}

/// An event, exactly the body a receiver gets: `{"id", "type", "createdAt", "data"}`, the
/// type given by its data, so the two cannot disagree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "EventBody", into = "EventBody")]
pub struct Event {
    pub id: EventId,
    pub created_at: Timestamp,
    pub data: EventData,
}

/// Each kind's data (contract sections 5 and 15). Read untagged, so no variant's fields
/// may be a subset of an earlier one's: the ping's single field comes last.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum EventData {
    #[serde(rename_all = "camelCase")]
    ProfileUpdated { user_id: UserId, profile_id: ProfileId },
    #[serde(rename_all = "camelCase")]
    AssessmentCompleted { user_id: UserId, assessment_id: AssessmentId },
    /// `url` is shown as the logs show it ([`crate::webhooks::LoggedUrl`]).
    #[serde(rename_all = "camelCase")]
    EndpointFailing {
        user_id: UserId,
        subscription_id: SubscriptionId,
        url: String,
        failing_since: Timestamp,
        last_error: String,
        last_response_status: Option<u16>,
    },
    #[serde(rename_all = "camelCase")]
    EndpointDisabled {
        user_id: UserId,
        subscription_id: SubscriptionId,
        url: String,
        disabled_at: Timestamp,
        disabled_reason: DisabledReason,
    },
    #[serde(rename_all = "camelCase")]
    EndpointRecovered {
        user_id: UserId,
        subscription_id: SubscriptionId,
        url: String,
        failing_since: Timestamp,
        recovered_at: Timestamp,
        /// Whether a probe's success enabled it again after it was disabled (contract section 20).
        /// Compatibility: the `default` reads an event queued before it was written (2026-12-07),
        /// until SQS (14 days at most) holds none, after 2026-12-21.
        #[serde(default)]
        reenabled: bool,
    },
    #[serde(rename_all = "camelCase")]
    DeliveryExhausted {
        user_id: UserId,
        subscription_id: SubscriptionId,
        delivery_id: DeliveryId,
        event_id: EventId,
        event_type: EventKind,
        attempts: u32,
        last_error: String,
    },
    #[serde(rename_all = "camelCase")]
    WebhookPing {
        subscription_id: SubscriptionId,
        /// Present, and true, on a probe of a subscription disabled for failing (section 20).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        probe: bool,
    },
}

impl EventData {
    pub fn kind(&self) -> EventKind {
        match self {
            EventData::ProfileUpdated { .. } => EventKind::ProfileUpdated,
            EventData::AssessmentCompleted { .. } => EventKind::AssessmentCompleted,
            EventData::EndpointFailing { .. } => EventKind::EndpointFailing,
            EventData::EndpointDisabled { .. } => EventKind::EndpointDisabled,
            EventData::EndpointRecovered { .. } => EventKind::EndpointRecovered,
            EventData::DeliveryExhausted { .. } => EventKind::DeliveryExhausted,
            EventData::WebhookPing { .. } => EventKind::WebhookPing,
        }
    }
}

impl Event {
    pub fn kind(&self) -> EventKind {
        self.data.kind()
    }

    /// The user whose subscriptions the event goes to; a ping names its subscription instead.
    pub fn user_id(&self) -> Option<&UserId> {
        match &self.data {
            EventData::ProfileUpdated { user_id, .. }
            | EventData::AssessmentCompleted { user_id, .. }
            | EventData::EndpointFailing { user_id, .. }
            | EventData::EndpointDisabled { user_id, .. }
            | EventData::EndpointRecovered { user_id, .. }
            | EventData::DeliveryExhausted { user_id, .. } => Some(user_id),
            EventData::WebhookPing { .. } => None,
        }
    }

    /// The subscription an operational event is about: never sent to it (contract section
    /// 15), so two failing subscriptions that report on each other cannot loop.
    pub fn about(&self) -> Option<&SubscriptionId> {
        match &self.data {
            EventData::EndpointFailing { subscription_id, .. }
            | EventData::EndpointDisabled { subscription_id, .. }
            | EventData::EndpointRecovered { subscription_id, .. }
            | EventData::DeliveryExhausted { subscription_id, .. } => Some(subscription_id),
            EventData::ProfileUpdated { .. }
            | EventData::AssessmentCompleted { .. }
            | EventData::WebhookPing { .. } => None,
        }
    }

    /// A `webhook.ping` for one subscription, created now.
    pub fn ping(subscription_id: &SubscriptionId) -> Self {
        let data = EventData::WebhookPing { subscription_id: subscription_id.clone(), probe: false };
        Event { id: EventId::generate(), created_at: Timestamp::now(), data }
    }

    /// A probe of a subscription disabled for failing (contract section 20), created now: a
    /// ping that says so.
    pub fn probe(subscription_id: &SubscriptionId) -> Self {
        let data = EventData::WebhookPing { subscription_id: subscription_id.clone(), probe: true };
        Event { id: EventId::generate(), created_at: Timestamp::now(), data }
    }

    /// Whether it is a probe ([`Event::probe`]).
    pub fn is_probe(&self) -> bool {
        matches!(self.data, EventData::WebhookPing { probe: true, .. })
    }
}

/// The event as JSON, in the contract's field order.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventBody {
    id: EventId,
    #[serde(rename = "type")]
    kind: EventKind,
    created_at: Timestamp,
    data: EventData,
}

impl From<Event> for EventBody {
    fn from(event: Event) -> Self {
        EventBody { id: event.id.clone(), kind: event.kind(), created_at: event.created_at, data: event.data }
    }
}

impl TryFrom<EventBody> for Event {
    type Error = String;

    fn try_from(body: EventBody) -> Result<Self, String> {
        let event = Event { id: body.id, created_at: body.created_at, data: body.data };
        match event.kind() == body.kind {
            true => Ok(event),
            false => Err(format!("an event of type {} with the data of {}", body.kind.as_str(), event.kind().as_str())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_whose_type_and_data_disagree_is_refused() {
        let body = json!({"id": EventId::generate(), "type": "assessment.completed", "createdAt": "2026-11-27T08:00:00.000Z",
            "data": {"userId": "u1", "profileId": "prf_1"}});
        assert!(serde_json::from_value::<Event>(body.clone()).is_err());
        let mut fixed = body;
        fixed["type"] = json!("profile.updated");
        assert_eq!(serde_json::from_value::<Event>(fixed).unwrap().kind(), EventKind::ProfileUpdated);
    }

    #[test]
    fn a_ping_names_its_subscription_and_cannot_be_subscribed_to() {
        let ping = Event::ping(&"whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap());
        assert_eq!(ping.kind().as_str(), "webhook.ping");
        assert_eq!(
            serde_json::to_value(&ping.data).unwrap(),
            json!({"subscriptionId": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"})
        );
        let body = serde_json::to_value(&ping).unwrap();
        assert_eq!(body["type"], "webhook.ping");
        assert_eq!(serde_json::from_value::<Event>(body).unwrap(), ping);
        let probe = Event::probe(&"whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap());
        assert_eq!(
            serde_json::to_value(&probe.data).unwrap(),
            json!({"subscriptionId": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K", "probe": true})
        );
        assert!(probe.is_probe() && !ping.is_probe());
        assert!(!EventKind::WebhookPing.is_subscribable());
        assert!(EventKind::ProfileUpdated.is_subscribable());
    }
}
