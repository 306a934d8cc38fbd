//! Replay across subscriptions (contract section 20): the body of a `POST …/replay`, checked
//! once, and which of the deliveries it found one call takes.

use serde_json::{Map, Value};

use super::log::DeliveryStatus;
use super::recovery::{InvalidWindow, RecoverWindow, MAX_PER_CALL};
use crate::events::EventKind;
use crate::ids::DeliveryId;
use crate::webhooks::MAX_SUBSCRIPTIONS_PER_USER;

/// The statuses a replay may ask for: every status a delivery ends in. `cancelled` is not in
/// the contract's list but in its promise (a cancelled delivery can be replayed).
pub const REPLAYABLE: [DeliveryStatus; 5] = [
    DeliveryStatus::Failed,
    DeliveryStatus::Skipped,
    DeliveryStatus::Held,
    DeliveryStatus::Succeeded,
    DeliveryStatus::Cancelled,
];
/// What a replay that names no status sends again.
const DEFAULT_STATUSES: [DeliveryStatus; 2] = [DeliveryStatus::Failed, DeliveryStatus::Skipped];
/// The fields a replay's body may have; any other is refused, as a misspelt filter would
/// otherwise widen the replay to everything.
const FIELDS: [&str; 6] = ["since", "until", "subscriptionIds", "events", "status", "dryRun"];

/// What one `POST …/replay` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayRequest {
    pub window: RecoverWindow,
    /// The subscriptions named, without repeats, as sent (an id of another shape is as missing
    /// as another user's, which the handler answers); `None`: all the caller's.
    pub subscription_ids: Option<Vec<String>>,
    /// `None`: every kind.
    pub kinds: Option<Vec<EventKind>>,
    pub statuses: Vec<DeliveryStatus>,
    pub dry_run: bool,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidReplay {
    #[error(transparent)]
    Window(#[from] InvalidWindow),
    #[error("'status' must be a non-empty array of: {}", names(&REPLAYABLE))]
    Status,
    #[error("'events' must be a non-empty array of event kinds ({})", EventKind::NAMES.join(", "))]
    Events,
    #[error("'subscriptionIds' must be an array of 1 to {MAX_SUBSCRIPTIONS_PER_USER} strings")]
    SubscriptionIds,
    #[error("'dryRun' must be a boolean")]
    DryRun,
    #[error("'{}' is not a field of a replay; the fields are {}", crate::excerpt::Excerpt(.0), FIELDS.join(", "))]
    UnknownField(String),
}

fn names(statuses: &[DeliveryStatus]) -> String {
    statuses.iter().map(|status| status.as_str()).collect::<Vec<_>>().join(", ")
}

impl ReplayRequest {
    /// The body, read at `now`, its checks in the contract's order.
    pub fn parse(body: &Map<String, Value>, now: crate::clock::Timestamp) -> Result<Self, InvalidReplay> {
        let window = RecoverWindow::parse(body, now)?;
        let statuses = match body.get("status") {
            None => DEFAULT_STATUSES.to_vec(),
            Some(value) => {
                list(value, usize::MAX, |text| DeliveryStatus::parse(text).filter(|s| REPLAYABLE.contains(s)))
                    .ok_or(InvalidReplay::Status)?
            }
        };
        let kinds = body.get("events").map(|value| list(value, usize::MAX, EventKind::parse));
        let kinds = kinds.map(|kinds| kinds.ok_or(InvalidReplay::Events)).transpose()?;
        let ids = body
            .get("subscriptionIds")
            .map(|value| list(value, MAX_SUBSCRIPTIONS_PER_USER as usize, |t| Some(t.to_owned())));
        let subscription_ids = ids.map(|ids| ids.ok_or(InvalidReplay::SubscriptionIds)).transpose()?;
        let dry_run = match body.get("dryRun") {
            None => false,
            Some(value) => value.as_bool().ok_or(InvalidReplay::DryRun)?,
        };
        if let Some(unknown) = body.keys().find(|name| !FIELDS.contains(&name.as_str())) {
            return Err(InvalidReplay::UnknownField(unknown.clone()));
        }
        Ok(ReplayRequest { window, subscription_ids, kinds, statuses, dry_run })
    }
}

/// `value` as an array of 1 to `most` strings that `parse` reads, repeats collapsed (each
/// counted once towards `most`); `None` if it is not.
fn list<T: PartialEq>(value: &Value, most: usize, parse: impl Fn(&str) -> Option<T>) -> Option<Vec<T>> {
    let mut parsed = Vec::new();
    for item in value.as_array()? {
        let item = parse(item.as_str()?)?;
        if !parsed.contains(&item) {
            parsed.push(item);
        }
    }
    (1..=most).contains(&parsed.len()).then_some(parsed)
}

/// What one call takes of what it found: the oldest [`MAX_PER_CALL`], and whether more were
/// found (a store read finds at most one more than that of each source, enough to tell).
#[derive(Debug, PartialEq, Eq)]
pub struct Taken<T> {
    pub deliveries: Vec<T>,
    pub more: bool,
}

/// The oldest [`MAX_PER_CALL`] of `found` (a delivery id sorts by its creation time), oldest first.
pub fn oldest<T>(mut found: Vec<T>, id: impl Fn(&T) -> &DeliveryId) -> Taken<T> {
    found.sort_by(|a, b| id(a).cmp(id(b)));
    let more = found.len() > MAX_PER_CALL as usize;
    found.truncate(MAX_PER_CALL as usize);
    Taken { deliveries: found, more }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).unwrap()
    }

    fn parse(body: Value) -> Result<ReplayRequest, InvalidReplay> {
        ReplayRequest::parse(body.as_object().unwrap(), at("2026-11-23T12:00:00Z"))
    }

    #[test]
    fn only_since_is_required_and_the_rest_has_its_default() {
        let replay = parse(json!({"since": "2026-11-23T08:00:00Z"})).unwrap();
        assert_eq!(
            replay,
            ReplayRequest {
                window: RecoverWindow { since: at("2026-11-23T08:00:00Z"), until: at("2026-11-23T12:00:00Z") },
                subscription_ids: None,
                kinds: None,
                statuses: vec![DeliveryStatus::Failed, DeliveryStatus::Skipped],
                dry_run: false,
            }
        );
    }

    #[test]
    fn every_field_is_read_and_repeats_collapse() {
        let replay = parse(json!({
            "since": "2026-11-23T08:00:00Z", "until": "2026-11-23T09:00:00Z",
            "subscriptionIds": ["whk_a", "whk_b", "whk_a"], "events": ["profile.updated", "webhook.ping"],
            "status": ["succeeded", "held", "cancelled", "held"], "dryRun": true
        }))
        .unwrap();
        assert_eq!(replay.window.until, at("2026-11-23T09:00:00Z"));
        assert_eq!(replay.subscription_ids, Some(vec!["whk_a".to_owned(), "whk_b".to_owned()]));
        assert_eq!(replay.kinds, Some(vec![EventKind::ProfileUpdated, EventKind::WebhookPing]));
        assert_eq!(
            replay.statuses,
            [DeliveryStatus::Succeeded, DeliveryStatus::Held, DeliveryStatus::Cancelled],
            "in the order asked"
        );
        assert!(replay.dry_run);
        let ids: Vec<String> = (0..25).map(|i| format!("whk_{i}")).collect();
        assert_eq!(
            parse(json!({"since": "2026-11-23T08:00:00Z", "subscriptionIds": ids}))
                .unwrap()
                .subscription_ids
                .map(|ids| ids.len()),
            Some(25)
        );
    }

    #[test]
    fn each_broken_rule_has_its_reason_in_the_contracts_order() {
        let since = "2026-11-23T08:00:00Z";
        let too_many: Vec<String> = (0..26).map(|i| format!("whk_{i}")).collect();
        let table = [
            (json!({}), InvalidReplay::Window(InvalidWindow::MissingSince)),
            (json!({"since": "yesterday", "status": 1}), InvalidReplay::Window(InvalidWindow::NotATime("since"))),
            (json!({"since": since, "until": 5}), InvalidReplay::Window(InvalidWindow::NotATime("until"))),
            (json!({"since": since, "until": since}), InvalidReplay::Window(InvalidWindow::Empty)),
            (json!({"since": "2026-10-01T00:00:00Z"}), InvalidReplay::Window(InvalidWindow::BeyondRetention)),
            (json!({"since": since, "status": "failed"}), InvalidReplay::Status),
            (json!({"since": since, "status": []}), InvalidReplay::Status),
            (json!({"since": since, "status": ["pending"]}), InvalidReplay::Status),
            (json!({"since": since, "status": ["failed", "lost"]}), InvalidReplay::Status),
            (json!({"since": since, "status": null}), InvalidReplay::Status),
            (json!({"since": since, "status": ["failed"], "events": ["profile.created"]}), InvalidReplay::Events),
            (json!({"since": since, "events": [], "subscriptionIds": 1}), InvalidReplay::Events),
            (json!({"since": since, "events": "profile.updated"}), InvalidReplay::Events),
            (json!({"since": since, "subscriptionIds": []}), InvalidReplay::SubscriptionIds),
            (json!({"since": since, "subscriptionIds": [7]}), InvalidReplay::SubscriptionIds),
            (json!({"since": since, "subscriptionIds": too_many}), InvalidReplay::SubscriptionIds),
            (json!({"since": since, "subscriptionIds": "whk_a"}), InvalidReplay::SubscriptionIds),
            (json!({"since": since, "dryRun": "true"}), InvalidReplay::DryRun),
            (json!({"since": since, "dryRun": null}), InvalidReplay::DryRun),
            (
                json!({"since": since, "subscriptionId": ["whk_a"]}),
                InvalidReplay::UnknownField("subscriptionId".into()),
            ),
        ];
        for (body, reason) in table {
            assert_eq!(parse(body.clone()), Err(reason), "{body}");
        }
    }

    #[test]
    fn a_call_takes_the_oldest_and_says_when_more_were_found() {
        let ids: Vec<DeliveryId> = (0..=MAX_PER_CALL).map(|_| DeliveryId::generate()).collect();
        let mut shuffled = ids.clone();
        shuffled.reverse();
        let taken = oldest(shuffled, |id| id);
        assert!(taken.more);
        assert_eq!(taken.deliveries, ids[..MAX_PER_CALL as usize]);
        let taken = oldest(ids[1..].to_vec(), |id| id);
        assert_eq!((taken.deliveries.len(), taken.more), (MAX_PER_CALL as usize, false));
    }
}
