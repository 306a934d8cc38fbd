//! Cancelling what waits (contract section 20): the body of a `POST …/deliveries/cancel`,
//! checked once.

use serde_json::{Map, Value};

use crate::clock::Timestamp;

/// The only field of a cancel's body; any other is refused, as a misspelt one would
/// otherwise cancel everything up to now.
const CREATED_BEFORE: &str = "createdBefore";

/// Every `pending` or `held` delivery created before this time is cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CancelBefore(pub Timestamp);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCancel {
    #[error("'{CREATED_BEFORE}' must be an RFC 3339 time")]
    NotATime,
    #[error("'{}' is not a field of a cancel; its one field is '{CREATED_BEFORE}'", crate::excerpt::Excerpt(.0))]
    UnknownField(String),
}

impl CancelBefore {
    /// The optional body's `createdBefore` (absent or `null`: `now`).
    pub fn parse(body: Option<&Map<String, Value>>, now: Timestamp) -> Result<Self, InvalidCancel> {
        let Some(body) = body else { return Ok(CancelBefore(now)) };
        let before = match body.get(CREATED_BEFORE) {
            None | Some(Value::Null) => now,
            Some(value) => value.as_str().and_then(Timestamp::parse_rfc3339).ok_or(InvalidCancel::NotATime)?,
        };
        if let Some(unknown) = body.keys().find(|name| *name != CREATED_BEFORE) {
            return Err(InvalidCancel::UnknownField(unknown.clone()));
        }
        Ok(CancelBefore(before))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn created_before_is_read_or_now() {
        let now = at("2026-11-23T12:00:00Z");
        let parse = |body: Value| CancelBefore::parse(body.as_object(), now);
        assert_eq!(CancelBefore::parse(None, now), Ok(CancelBefore(now)));
        assert_eq!(parse(json!({})), Ok(CancelBefore(now)));
        assert_eq!(parse(json!({"createdBefore": null})), Ok(CancelBefore(now)));
        assert_eq!(
            parse(json!({"createdBefore": "2026-11-23T09:00:00+01:00"})),
            Ok(CancelBefore(at("2026-11-23T08:00:00Z")))
        );
        assert_eq!(
            parse(json!({"createdBefore": "2026-12-01T00:00:00Z"})),
            Ok(CancelBefore(at("2026-12-01T00:00:00Z")))
        );
        for bad in
            [json!({"createdBefore": "soon"}), json!({"createdBefore": 1_795_766_400}), json!({"createdBefore": []})]
        {
            assert_eq!(parse(bad.clone()), Err(InvalidCancel::NotATime), "{bad}");
        }
        assert_eq!(parse(json!({"before": "2026-11-23T08:00:00Z"})), Err(InvalidCancel::UnknownField("before".into())));
    }
}
