//! Recovering after an outage (contract section 12): the window of a `POST …/recover` call
//! (and of a replay's, section 20), checked once, and how much one call recovers.

use serde_json::{Map, Value};

use super::log::RETENTION;
use crate::clock::Timestamp;

/// At most this many deliveries are recovered, replayed or cancelled by one call (contract
/// sections 12 and 20).
pub const MAX_PER_CALL: u32 = 1000;

/// `[since, until)`: `since` before `until`, and no further back than the log keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoverWindow {
    pub since: Timestamp,
    pub until: Timestamp,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidWindow {
    #[error("'since' is required, as an RFC 3339 time")]
    MissingSince,
    #[error("'{0}' must be an RFC 3339 time")]
    NotATime(&'static str),
    #[error("'since' must be before 'until'")]
    Empty,
    #[error("'since' must be within the last {} days, the delivery log's retention", RETENTION.as_secs() / 86_400)]
    BeyondRetention,
}

impl RecoverWindow {
    /// The body's `since` and `until` (optional, default `now`), read at `now`.
    pub fn parse(body: &Map<String, Value>, now: Timestamp) -> Result<Self, InvalidWindow> {
        let time = |name: &'static str| -> Result<Option<Timestamp>, InvalidWindow> {
            match body.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(value) => {
                    value.as_str().and_then(Timestamp::parse_rfc3339).map(Some).ok_or(InvalidWindow::NotATime(name))
                }
            }
        };
        let since = time("since")?.ok_or(InvalidWindow::MissingSince)?;
        let until = time("until")?.unwrap_or(now);
        if since >= until {
            return Err(InvalidWindow::Empty);
        }
        if now.since(since) > RETENTION {
            return Err(InvalidWindow::BeyondRetention);
        }
        Ok(RecoverWindow { since, until })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<RecoverWindow, InvalidWindow> {
        let now = at("2026-11-23T12:00:00Z");
        RecoverWindow::parse(body.as_object().unwrap(), now)
    }

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn a_window_is_since_until_or_since_now() {
        assert_eq!(
            parse(json!({"since": "2026-11-23T08:00:00Z", "until": "2026-11-23T09:00:00.5+01:00"})),
            Ok(RecoverWindow { since: at("2026-11-23T08:00:00Z"), until: at("2026-11-23T08:00:00.5Z") })
        );
        assert_eq!(
            parse(json!({"since": "2026-10-25T12:00:00Z"})),
            Ok(RecoverWindow { since: at("2026-10-25T12:00:00Z"), until: at("2026-11-23T12:00:00Z") }),
            "29 days back, until now"
        );
    }

    #[test]
    fn each_broken_rule_has_its_reason() {
        let table = [
            (json!({}), InvalidWindow::MissingSince),
            (json!({"since": null}), InvalidWindow::MissingSince),
            (json!({"until": "2026-11-23T08:00:00Z"}), InvalidWindow::MissingSince),
            (json!({"since": "yesterday"}), InvalidWindow::NotATime("since")),
            (json!({"since": 1_795_766_400}), InvalidWindow::NotATime("since")),
            (json!({"since": "2026-11-23T08:00:00Z", "until": "later"}), InvalidWindow::NotATime("until")),
            (json!({"since": "2026-11-23T08:00:00Z", "until": "2026-11-23T08:00:00Z"}), InvalidWindow::Empty),
            (json!({"since": "2026-11-23T09:00:00Z", "until": "2026-11-23T08:00:00Z"}), InvalidWindow::Empty),
            (json!({"since": "2026-11-24T08:00:00Z"}), InvalidWindow::Empty),
            (json!({"since": "2026-10-24T11:59:59Z"}), InvalidWindow::BeyondRetention),
        ];
        for (body, reason) in table {
            assert_eq!(parse(body.clone()), Err(reason), "{body}");
        }
    }
}
