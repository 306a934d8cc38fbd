//! Wall-clock time in the contract's format: RFC 3339 UTC with milliseconds and `Z`.

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde::{Deserialize, Serialize};

pub fn now() -> DateTime<Utc> {
    Utc::now()
}

pub fn now_millis() -> u64 {
    u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default()
}

pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub fn rfc3339_from_millis(millis: u64) -> String {
    let at = i64::try_from(millis).ok().and_then(|ms| Utc.timestamp_millis_opt(ms).single()).unwrap_or_default();
    rfc3339(at)
}

/// A point in time as the contract writes it (`2026-11-27T08:00:00.123Z`). The text has a
/// fixed width, so timestamps sort as text in DynamoDB keys and conditions as they do here.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Timestamp(String);

impl Timestamp {
    pub fn now() -> Self {
        Timestamp(rfc3339(now()))
    }

    pub fn from_millis(millis: u64) -> Self {
        Timestamp(rfc3339_from_millis(millis))
    }

    pub fn from_datetime(at: DateTime<Utc>) -> Self {
        Timestamp(rfc3339(at))
    }

    pub fn datetime(&self) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(&self.0).map(|at| at.with_timezone(&Utc)).unwrap_or_default()
    }

    /// `Some` only for text in exactly the contract's format.
    pub fn parse(text: &str) -> Option<Self> {
        let at = DateTime::parse_from_rfc3339(text).ok()?.with_timezone(&Utc);
        (rfc3339(at) == text).then(|| Timestamp(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn millis(&self) -> u64 {
        u64::try_from(self.datetime().timestamp_millis()).unwrap_or_default()
    }
}

crate::text::text_traits!(Timestamp, "an RFC 3339 UTC time with milliseconds");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        assert_eq!(rfc3339_from_millis(1_795_766_400_123), "2026-11-27T08:00:00.123Z");
    }

    #[test]
    fn timestamps_take_only_the_contract_format_and_sort_as_time() {
        let at = Timestamp::from_millis(1_795_766_400_123);
        assert_eq!(at.as_str(), "2026-11-27T08:00:00.123Z");
        assert_eq!(at.millis(), 1_795_766_400_123);
        assert_eq!(Timestamp::parse(at.as_str()), Some(at.clone()));
        for other_format in ["2026-11-27T08:00:00Z", "2026-11-27T09:00:00.123+01:00", "2026-11-27", "soon"] {
            assert_eq!(Timestamp::parse(other_format), None, "{other_format}");
        }
        assert!(at < Timestamp::from_millis(1_795_766_400_124));
    }
}
