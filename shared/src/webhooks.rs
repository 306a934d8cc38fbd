//! Webhook subscriptions (contract section 5): URL and event validation, secrets, and the
//! subscription object.

use std::net::IpAddr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use url::{Host, Url};

use crate::events::EventKind;
use crate::{netguard, secrets};

pub const MAX_URL_LEN: usize = 2048;
pub const MAX_SUBSCRIPTIONS_PER_USER: u32 = 25;
const SECRET_PREFIX: &str = "whsec_";

/// A delivery target that passed the create-time rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebhookUrl(String);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidUrl {
    #[error("url must be a string")]
    NotAString,
    #[error("url must be at most {MAX_URL_LEN} characters")]
    TooLong,
    #[error("url is not an absolute URL")]
    Unparsable,
    #[error("url must use https")]
    NotHttps,
    #[error("url must have a host")]
    NoHost,
    #[error("url must not contain user information")]
    UserInfo,
    #[error("url must not point at localhost or a private, loopback, link-local or reserved address")]
    PrivateTarget,
}

impl WebhookUrl {
    /// `allow_insecure` (local stack and tests only) also admits `http` and private targets.
    pub fn parse(value: &serde_json::Value, allow_insecure: bool) -> Result<Self, InvalidUrl> {
        let text = value.as_str().ok_or(InvalidUrl::NotAString)?;
        if text.chars().count() > MAX_URL_LEN {
            return Err(InvalidUrl::TooLong);
        }
        let url = Url::parse(text).map_err(|_| InvalidUrl::Unparsable)?;
        match url.scheme() {
            "https" => {}
            "http" if allow_insecure => {}
            _ => return Err(InvalidUrl::NotHttps),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(InvalidUrl::UserInfo);
        }
        let host = url.host().ok_or(InvalidUrl::NoHost)?;
        if !allow_insecure && is_private_host(&host) {
            return Err(InvalidUrl::PrivateTarget);
        }
        Ok(WebhookUrl(url.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_private_host(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(name) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            name.is_empty() || name == "localhost" || name.ends_with(".localhost")
        }
        Host::Ipv4(ip) => netguard::is_forbidden(IpAddr::V4(*ip)),
        Host::Ipv6(ip) => netguard::is_forbidden(IpAddr::V6(*ip)),
    }
}

/// A non-empty list of known event kinds, duplicates collapsed, in the order first given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventKinds(Vec<EventKind>);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEvents {
    #[error("events must be a non-empty array")]
    NotANonEmptyArray,
    #[error("unknown event kind {0} (known: profile.updated, assessment.completed)")]
    Unknown(String),
}

impl EventKinds {
    pub fn parse(value: &serde_json::Value) -> Result<Self, InvalidEvents> {
        let items = value.as_array().filter(|items| !items.is_empty()).ok_or(InvalidEvents::NotANonEmptyArray)?;
        let mut kinds = Vec::new();
        for item in items {
            let kind = item
                .as_str()
                .and_then(EventKind::subscribable)
                .ok_or_else(|| InvalidEvents::Unknown(item.to_string()))?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        Ok(EventKinds(kinds))
    }

    pub fn kinds(&self) -> &[EventKind] {
        &self.0
    }
}

/// A subscription as listed (the secret is never listed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subscription {
    pub id: String,
    pub url: String,
    pub events: Vec<EventKind>,
    pub created_at: String,
    pub enabled: bool,
    pub disabled_at: Option<String>,
    pub disabled_reason: Option<String>,
}

/// Why a subscription was disabled: it kept failing (contract section 9).
pub const DISABLED_FAILING: &str = "failing";

/// What one delivery attempt changes in its subscription's failure clock. The clock is the
/// time of the first failure since the last success; the subscription item is written only
/// when the answer is not `Unchanged`.
#[derive(Debug, PartialEq, Eq)]
pub enum ClockChange {
    Unchanged,
    /// The first failure after a success starts the clock.
    StartFailing,
    /// The first success after a failure stops it.
    Recovered,
    /// A last attempt failed and the clock has run longer than the disable-after setting.
    Disable,
}

impl ClockChange {
    pub fn after_attempt(
        failing_since: Option<DateTime<Utc>>,
        succeeded: bool,
        last_attempt: bool,
        now: DateTime<Utc>,
        disable_after: Duration,
    ) -> Self {
        match (succeeded, failing_since) {
            (true, Some(_)) => ClockChange::Recovered,
            (true, None) => ClockChange::Unchanged,
            (false, None) => ClockChange::StartFailing,
            (false, Some(since)) => {
                let failing_for = (now - since).to_std().unwrap_or_default();
                if last_attempt && failing_for > disable_after {
                    ClockChange::Disable
                } else {
                    ClockChange::Unchanged
                }
            }
        }
    }
}

/// The create response: the subscription and, this once, its secret.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedSubscription {
    #[serde(flatten)]
    pub subscription: Subscription,
    pub secret: String,
}

pub fn new_secret() -> String {
    secrets::random_token(SECRET_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(url: &str) -> Result<WebhookUrl, InvalidUrl> {
        WebhookUrl::parse(&json!(url), false)
    }

    #[test]
    fn accepts_public_https_urls() {
        assert_eq!(
            parse("https://hooks.example.com/career?x=1").unwrap().as_str(),
            "https://hooks.example.com/career?x=1"
        );
        assert!(parse("https://93.184.216.34:8443/hook").is_ok());
    }

    #[test]
    fn refuses_each_broken_rule() {
        assert_eq!(WebhookUrl::parse(&json!(5), false), Err(InvalidUrl::NotAString));
        assert_eq!(parse(&format!("https://example.com/{}", "a".repeat(2048))), Err(InvalidUrl::TooLong));
        assert_eq!(parse("/relative"), Err(InvalidUrl::Unparsable));
        assert_eq!(parse("http://example.com/"), Err(InvalidUrl::NotHttps));
        assert_eq!(parse("ftp://example.com/"), Err(InvalidUrl::NotHttps));
        assert_eq!(parse("https://user:pw@example.com/"), Err(InvalidUrl::UserInfo));
        for private in [
            "https://localhost/",
            "https://LOCALHOST./",
            "https://api.localhost/",
            "https://127.0.0.1/",
            "https://127.1/",
            "https://10.0.0.1/",
            "https://169.254.169.254/latest",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://100.64.1.1/",
            "https://0.0.0.0/",
            "https://[::ffff:192.168.0.1]/",
            "https://224.0.0.1/",
            "https://255.255.255.255/",
            "https://0x7f000001/",
        ] {
            assert_eq!(parse(private), Err(InvalidUrl::PrivateTarget), "{private}");
        }
    }

    #[test]
    fn insecure_setting_admits_http_and_private_targets() {
        assert!(WebhookUrl::parse(&json!("http://127.0.0.1:8080/hook"), true).is_ok());
        assert!(WebhookUrl::parse(&json!("http://localhost/hook"), true).is_ok());
        assert_eq!(WebhookUrl::parse(&json!("ftp://localhost/"), true), Err(InvalidUrl::NotHttps));
    }

    #[test]
    fn events_must_be_known_and_are_deduplicated() {
        let kinds = EventKinds::parse(&json!(["profile.updated", "assessment.completed", "profile.updated"])).unwrap();
        assert_eq!(kinds.kinds(), [EventKind::ProfileUpdated, EventKind::AssessmentCompleted]);
        for bad in [
            json!([]),
            json!("profile.updated"),
            json!({}),
            json!(["nope"]),
            json!([1]),
            json!(["profile.updated", null]),
            json!(["webhook.ping"]),
        ] {
            assert!(EventKinds::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_failure_clock_changes_only_on_a_change_of_state() {
        let at = |seconds| DateTime::from_timestamp(seconds, 0).unwrap();
        let window = Duration::from_secs(100);
        let change = |since: Option<i64>, succeeded, last, now| {
            ClockChange::after_attempt(since.map(at), succeeded, last, at(now), window)
        };
        assert_eq!(change(None, true, false, 1_000), ClockChange::Unchanged, "healthy stays healthy");
        assert_eq!(change(None, false, false, 1_000), ClockChange::StartFailing);
        assert_eq!(change(None, false, true, 1_000), ClockChange::StartFailing);
        assert_eq!(change(Some(1_000), false, false, 1_050), ClockChange::Unchanged);
        assert_eq!(change(Some(1_000), false, false, 5_000), ClockChange::Unchanged, "not the last attempt");
        assert_eq!(change(Some(1_000), false, true, 1_100), ClockChange::Unchanged, "not more than the window");
        assert_eq!(change(Some(1_000), false, true, 1_101), ClockChange::Disable);
        assert_eq!(change(Some(1_000), true, true, 9_000), ClockChange::Recovered);
    }

    #[test]
    fn secrets_have_the_documented_shape() {
        let secret = new_secret();
        assert!(secrets::is_token(&secret, "whsec_"), "{secret}");
    }
}
