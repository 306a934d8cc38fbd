//! Wall-clock time in the contract's format: RFC 3339 UTC with milliseconds and `Z`.

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        assert_eq!(rfc3339_from_millis(1_795_766_400_123), "2026-11-27T08:00:00.123Z");
    }
}
