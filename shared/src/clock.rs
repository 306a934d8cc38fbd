//! Time, as one type: [`Timestamp`], a point in time kept to the millisecond and written as the
//! contract writes it (RFC 3339 UTC with milliseconds and `Z`). The other forms time takes at
//! the edges (Unix seconds in signatures and TTLs, Unix milliseconds in ids and metrics,
//! HTTP dates, the chrono times of foreign types) are converted here and nowhere else.

use std::ops::{Add, Sub};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time, to the millisecond (`2026-11-27T08:00:00.123Z`). Its text has a fixed
/// width, so timestamps sort as text in DynamoDB keys and conditions as they do here, and a
/// timestamp read back from storage equals the one written.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    pub fn now() -> Self {
        Timestamp::from(Utc::now())
    }

    pub fn from_unix_millis(millis: u64) -> Self {
        let at = i64::try_from(millis).ok().and_then(DateTime::from_timestamp_millis);
        Timestamp(at.unwrap_or(DateTime::<Utc>::MAX_UTC).trunc_subsecs(3))
    }

    pub fn from_unix_seconds(seconds: u64) -> Self {
        Timestamp::from_unix_millis(seconds.saturating_mul(1000))
    }

    /// Milliseconds since the Unix epoch (0 for earlier times, which the service never makes).
    pub fn unix_millis(self) -> u64 {
        u64::try_from(self.0.timestamp_millis()).unwrap_or_default()
    }

    /// Whole seconds since the Unix epoch, rounded down.
    pub fn unix_seconds(self) -> u64 {
        self.unix_millis() / 1000
    }

    /// `Some` only for text in exactly the contract's format: what the service itself wrote.
    pub fn parse(text: &str) -> Option<Self> {
        let at = Timestamp::parse_rfc3339(text)?;
        (at.to_string() == text).then_some(at)
    }

    /// Any RFC 3339 time (any offset, any precision), as a client may send one; a finer
    /// fraction than milliseconds is dropped.
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        DateTime::parse_from_rfc3339(text).ok().map(|at| Timestamp::from(at.with_timezone(&Utc)))
    }

    /// An HTTP date (RFC 9110 section 5.6.7), as `Retry-After` may carry one.
    pub fn parse_http_date(text: &str) -> Option<Self> {
        httpdate::parse_http_date(text).ok().map(Timestamp::from)
    }

    /// How long after `earlier` this is; zero when it is not after it.
    pub fn since(self, earlier: Timestamp) -> Duration {
        (self.0 - earlier.0).to_std().unwrap_or_default()
    }
}

/// Rounded down to the millisecond, the precision a timestamp keeps.
impl From<DateTime<Utc>> for Timestamp {
    fn from(at: DateTime<Utc>) -> Self {
        Timestamp(at.trunc_subsecs(3))
    }
}

impl From<Timestamp> for DateTime<Utc> {
    fn from(at: Timestamp) -> Self {
        at.0
    }
}

impl From<SystemTime> for Timestamp {
    fn from(at: SystemTime) -> Self {
        Timestamp::from(DateTime::<Utc>::from(at))
    }
}

impl From<Timestamp> for SystemTime {
    fn from(at: Timestamp) -> Self {
        at.0.into()
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    fn add(self, wait: Duration) -> Timestamp {
        let wait = chrono::TimeDelta::from_std(wait).unwrap_or(chrono::TimeDelta::MAX);
        Timestamp::from(self.0.checked_add_signed(wait).unwrap_or(DateTime::<Utc>::MAX_UTC))
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;

    fn sub(self, wait: Duration) -> Timestamp {
        let wait = chrono::TimeDelta::from_std(wait).unwrap_or(chrono::TimeDelta::MAX);
        Timestamp::from(self.0.checked_sub_signed(wait).unwrap_or(DateTime::<Utc>::MIN_UTC))
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Millis, true))
    }
}

impl std::fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Timestamp {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Timestamp::parse(text).ok_or_else(|| format!("{text:?} is not an RFC 3339 UTC time with milliseconds"))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Serde for a timestamp kept as Unix seconds (`#[serde(with = "clock::unix_seconds")]`),
/// where a stored format already says seconds.
pub mod unix_seconds {
    use super::*;

    pub fn serialize<S: Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(at.unix_seconds())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        u64::deserialize(deserializer).map(Timestamp::from_unix_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: u64 = 1_795_766_400_123;

    #[test]
    fn timestamps_are_written_with_millis_and_z_and_read_back_equal() {
        let at = Timestamp::from_unix_millis(AT);
        assert_eq!(at.to_string(), "2026-11-27T08:00:00.123Z");
        assert_eq!((at.unix_millis(), at.unix_seconds()), (AT, AT / 1000));
        assert_eq!(Timestamp::parse(&at.to_string()), Some(at));
        let json = serde_json::to_string(&at).unwrap();
        assert_eq!(json, "\"2026-11-27T08:00:00.123Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), at);
        let now = Timestamp::now();
        assert_eq!(Timestamp::parse(&now.to_string()), Some(now), "now is kept to the millisecond");
    }

    #[test]
    fn only_the_contract_format_parses_strictly_while_clients_may_send_any_rfc_3339() {
        for other_format in ["2026-11-27T08:00:00Z", "2026-11-27T09:00:00.123+01:00", "2026-11-27", "soon"] {
            assert_eq!(Timestamp::parse(other_format), None, "{other_format}");
            assert!(serde_json::from_value::<Timestamp>(other_format.into()).is_err(), "{other_format}");
        }
        let at = Timestamp::from_unix_millis(AT);
        assert_eq!(Timestamp::parse_rfc3339("2026-11-27T09:00:00.123456+01:00"), Some(at), "offset, micros dropped");
        assert_eq!(Timestamp::parse_rfc3339("soon"), None);
        assert_eq!(
            Timestamp::parse_http_date("Fri, 27 Nov 2026 08:00:00 GMT"),
            Some(Timestamp::from_unix_seconds(AT / 1000))
        );
    }

    /// Every form RFC 3339 section 5.6 allows is read (issue 31): any number of fraction
    /// digits, a lowercase `t` or `z`, any offset, `-00:00`; what it does not allow is not.
    #[test]
    fn client_times_are_read_as_rfc_3339_allows() {
        let at = Timestamp::from_unix_millis(AT);
        for text in [
            "2026-11-27T08:00:00.123Z",
            "2026-11-27T08:00:00.123456789Z",
            "2026-11-27T08:00:00.1239999999999Z",
            "2026-11-27t08:00:00.123z",
            "2026-11-27t08:00:00.123456789z",
            "2026-11-27T09:00:00.123+01:00",
            "2026-11-27T03:30:00.123-04:30",
            "2026-11-27T08:00:00.123-00:00",
            "2026-11-28T07:59:00.123+23:59",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(text), Some(at), "{text}");
        }
        let whole = Timestamp::from_unix_seconds(AT / 1000);
        assert_eq!(Timestamp::parse_rfc3339("2026-11-27T08:00:00Z"), Some(whole), "no fraction");
        for refused in [
            "2026-11-27T08:00:00",
            "2026-11-27T08:00:00.Z",
            "2026-11-27T08:00Z",
            "2026-11-27 08:00:00.123",
            "2026-11-27T08:00:00.123+0100",
            "2026-11-27T08:00:00.123+01",
            "2026-11-27T24:00:00Z",
            "2026-13-27T08:00:00Z",
            "2026-11-27",
            " 2026-11-27T08:00:00Z",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(refused), None, "{refused}");
        }
    }

    #[test]
    fn durations_move_a_timestamp_and_measure_between_two() {
        let at = Timestamp::from_unix_millis(AT);
        let later = at + Duration::from_millis(1500);
        assert_eq!(later.unix_millis(), AT + 1500);
        assert_eq!(later - Duration::from_millis(1500), at);
        assert_eq!(later.since(at), Duration::from_millis(1500));
        assert_eq!(at.since(later), Duration::ZERO, "not after");
        assert!(at < later && at.to_string() < later.to_string(), "sorts as time and as text");
        assert_eq!(at + Duration::from_nanos(999_999), at, "kept to the millisecond");
    }

    #[test]
    fn unix_seconds_serde_keeps_the_stored_seconds() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Stored {
            #[serde(with = "unix_seconds")]
            at: Timestamp,
        }
        let stored = Stored { at: Timestamp::from_unix_seconds(1_795_766_400) };
        let json = serde_json::to_value(&stored).unwrap();
        assert_eq!(json, serde_json::json!({"at": 1_795_766_400}));
        assert_eq!(serde_json::from_value::<Stored>(json).unwrap(), stored);
    }
}
