//! Operational events (contract section 15): how a change of a subscription's health or of
//! a delivery record (one that ended `failed`) becomes at most one event; the store reads the
//! webhooks and deliveries tables' stream records into the states here
//! (`store::stream::operational`). Each transition is one conditional write, so one stream
//! record; the event's id comes from the subscription or delivery, the kind and the time
//! the write stored, so the same record processed twice is the same event.

use crate::clock::Timestamp;
use crate::delivery::log::DeliveryStatus;
use crate::events::{Event, EventData, EventKind};
use crate::ids::{DeliveryId, EventId, SubscriptionId, UserId};
use crate::webhooks::{DisabledReason, Target};

/// What a subscription's stream image says about its health: the attributes the deliver
/// function writes on a transition (`store::webhooks`), as `store::stream::operational` reads them.
#[derive(Debug)]
pub struct SubscriptionState {
    pub user_id: UserId,
    pub subscription_id: SubscriptionId,
    pub target: Target,
    pub failing_since: Option<Timestamp>,
    pub failing_error: Option<String>,
    pub failing_status: Option<u16>,
    pub recovered_at: Option<Timestamp>,
    pub disabled_at: Option<Timestamp>,
    pub disabled_reason: Option<DisabledReason>,
}

/// What a delivery record's stream image says about how it ended: what an exhausted
/// delivery's event carries.
#[derive(Debug)]
pub struct DeliveryState {
    pub user_id: UserId,
    pub delivery_id: DeliveryId,
    pub subscription_id: SubscriptionId,
    pub event_id: EventId,
    pub event_type: EventKind,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub last_attempt_at: Option<Timestamp>,
    pub last_error: Option<String>,
    /// A probe's record (contract section 20): its failure is its subscription's probing, not
    /// an exhausted delivery.
    pub probe: bool,
}

/// Said when a failure's error was not recorded with it (a write from before these events).
const NOT_RECORDED: &str = "not recorded";

/// The operational kinds. The template's filter on the deliveries table's stream names the
/// same ones (`careerctl`'s deploy checks hold it to [`reported`]).
pub const KINDS: [EventKind; 4] = [
    EventKind::EndpointFailing,
    EventKind::EndpointDisabled,
    EventKind::EndpointRecovered,
    EventKind::DeliveryExhausted,
];

/// Whether what becomes of a delivery of `kind` can be an operational event: not when it
/// carries one. Its end raises no `webhook.delivery.exhausted`, and its attempts move no
/// failure clock (`delivery::plan::after_send`), so an operational event never comes of
/// another's delivery: each comes of a delivery of the platform's events (or a ping), and
/// subscriptions that report on each other cannot chain, however many fail or flap
/// (contract section 15). What is lost is only news about news: the operator's topic has
/// every event such a delivery carried, and its record shows how it ended.
pub fn reported(kind: EventKind) -> bool {
    !KINDS.contains(&kind)
}

/// The event a change of a subscription item stands for: `failing` when its failure clock
/// starts, `disabled` when it is disabled for `failing` or `gone` (a pause is no event),
/// `recovered` when a success stops the clock (enabling stops it too, and is no event), or
/// when a probe's success enables it again (`reenabled`, contract section 20: the only enable
/// that writes a recovery time).
pub fn of_subscription_change(old: SubscriptionState, new: SubscriptionState) -> Option<Event> {
    let url = new.target.logged();
    let (user_id, subscription_id) = (new.user_id, new.subscription_id.clone());
    let (at, data) = match (&old, new.disabled_at, new.failing_since) {
        (old, Some(disabled_at), _) if old.disabled_at.is_none() => match new.disabled_reason {
            Some(DisabledReason::Manual) => return None,
            reason => (
                disabled_at,
                EventData::EndpointDisabled {
                    user_id,
                    subscription_id,
                    url,
                    disabled_at,
                    disabled_reason: reason.unwrap_or(DisabledReason::Failing),
                },
            ),
        },
        (_, Some(_), _) => return None,
        (old, None, Some(failing_since)) if old.failing_since.is_none() && old.disabled_at.is_none() => (
            failing_since,
            EventData::EndpointFailing {
                user_id,
                subscription_id,
                url,
                failing_since,
                last_error: new.failing_error.unwrap_or_else(|| NOT_RECORDED.to_owned()),
                last_response_status: new.failing_status,
            },
        ),
        (old, None, None) => match (old.disabled_at, old.failing_since, new.recovered_at) {
            (None, Some(failing_since), Some(recovered_at)) if old.recovered_at != Some(recovered_at) => (
                recovered_at,
                EventData::EndpointRecovered {
                    user_id,
                    subscription_id,
                    url,
                    failing_since,
                    recovered_at,
                    reenabled: false,
                },
            ),
            // Enabled again with a recovery time: a probe's success (contract section 20); the
            // owner's enable writes none.
            (Some(disabled_at), failing_since, Some(recovered_at)) if old.recovered_at != Some(recovered_at) => (
                recovered_at,
                EventData::EndpointRecovered {
                    user_id,
                    subscription_id,
                    url,
                    failing_since: failing_since.unwrap_or(disabled_at),
                    recovered_at,
                    reenabled: true,
                },
            ),
            _ => return None,
        },
        _ => return None,
    };
    Some(transition(at, new.subscription_id.as_str(), data))
}

/// The event a change of a delivery record stands for: `exhausted` when an attempt makes it
/// `failed` (its last, or a 410), unless it carries an operational event ([`reported`]). A
/// delivery stopped unsent after earlier attempts (its subscription disabled, deleted or no
/// longer listing the kind, contract section 9) ends `failed` with no attempt, and is no
/// event: its owner made that happen, or was told once that the subscription was disabled.
/// `stream_time` is when the stream saw the change, the event's time when the record has no
/// attempt time.
pub fn of_delivery_change(old: DeliveryState, new: DeliveryState, stream_time: Timestamp) -> Option<Event> {
    let ended_by_an_attempt =
        new.status == DeliveryStatus::Failed && old.status != DeliveryStatus::Failed && new.attempts != old.attempts;
    if !ended_by_an_attempt || !reported(new.event_type) || new.probe {
        return None;
    }
    let at = new.last_attempt_at.unwrap_or(stream_time);
    let about = new.delivery_id.to_string();
    let data = EventData::DeliveryExhausted {
        user_id: new.user_id,
        subscription_id: new.subscription_id,
        delivery_id: new.delivery_id,
        event_id: new.event_id,
        event_type: new.event_type,
        attempts: new.attempts,
        last_error: new.last_error.unwrap_or_else(|| NOT_RECORDED.to_owned()),
    };
    Some(transition(at, &about, data))
}

/// The event of a transition of `about` (a subscription or a delivery) written at `at`:
/// its id from what it is about, its kind and that time, the same however often the record
/// comes.
fn transition(at: Timestamp, about: &str, data: EventData) -> Event {
    let id = EventId::derived(at, &[about, data.kind().as_str(), &at.to_string()]);
    Event { id, created_at: at, data }
}
