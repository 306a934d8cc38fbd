//! `identityToken` (contract section 21): an HTTP subscription's opt-in to an AWS-signed JSON
//! Web Token on each attempt, `Authorization: Bearer <token>`, which its receiver (or its API
//! gateway) verifies against the deployment account's issuer with no shared secret. What the
//! token is asked for is decided here; `aws::identity_tokens` asks STS for it and keeps it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::excerpt::Excerpt;
use crate::ids::{SubscriptionId, UserId};

/// The most characters an audience has (STS takes up to 1,000; the contract's bound).
pub const MAX_AUDIENCE_CHARS: usize = 256;

/// How long a token lasts: STS's default, 5 minutes. Kept until `RENEW_BEFORE` (a minute)
/// before it expires, so about one STS call per subscription per 4 minutes.
pub const TOKEN_SECONDS: i32 = 300;

/// The signing algorithm asked for; a receiver's verifier pins it.
pub const SIGNING_ALGORITHM: &str = "ES384";

/// The request tags a token carries (claims under `https://sts.amazonaws.com/`'s
/// `request_tags`): the subscription it was minted for and the user who owns it.
pub const SUBSCRIPTION_TAG: &str = "subscription";
pub const USER_TAG: &str = "user";

/// A subscription's `identityToken`: the audience its tokens are minted for (their `aud`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IdentityToken {
    audience: String,
}

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidIdentityToken {
    #[error("identityToken must be null or an object {{\"audience\": \"…\"}}")]
    NotAnObject,
    #[error("identityToken.audience must be a string of 1 to {MAX_AUDIENCE_CHARS} characters")]
    Audience,
    #[error("identityToken takes only audience, not {}", Excerpt(.0))]
    UnknownMember(String),
    #[error("identityToken is for a subscription with a url: a destination's deliveries are not HTTP requests")]
    OnDestination,
}

impl IdentityToken {
    /// `null` (off), or `{"audience": "<1 to 256 characters>"}` and nothing else.
    pub fn parse(value: &Value) -> Result<Option<Self>, InvalidIdentityToken> {
        if value.is_null() {
            return Ok(None);
        }
        let object = value.as_object().ok_or(InvalidIdentityToken::NotAnObject)?;
        if let Some(unknown) = object.keys().find(|name| *name != "audience") {
            return Err(InvalidIdentityToken::UnknownMember(unknown.clone()));
        }
        let audience = object.get("audience").and_then(Value::as_str).ok_or(InvalidIdentityToken::Audience)?;
        if audience.is_empty() || audience.chars().count() > MAX_AUDIENCE_CHARS {
            return Err(InvalidIdentityToken::Audience);
        }
        Ok(Some(IdentityToken { audience: audience.to_owned() }))
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }
}

/// The request tags of a token minted for `subscription` of `user`, in this order.
pub fn tags<'a>(subscription: &'a SubscriptionId, user: &'a UserId) -> [(&'static str, &'a str); 2] {
    [(SUBSCRIPTION_TAG, subscription.as_str()), (USER_TAG, user.as_str())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_identity_token_is_null_or_an_audience_of_1_to_256_characters() {
        assert_eq!(IdentityToken::parse(&json!(null)), Ok(None));
        let parsed = IdentityToken::parse(&json!({"audience": "https://receiver.example/hooks"})).unwrap();
        assert_eq!(parsed.map(|token| token.audience), Some("https://receiver.example/hooks".to_owned()));
        let longest = "é".repeat(MAX_AUDIENCE_CHARS);
        assert_eq!(IdentityToken::parse(&json!({ "audience": longest })).unwrap().unwrap().audience(), longest);
        for (bad, refused) in [
            (json!(true), InvalidIdentityToken::NotAnObject),
            (json!("https://receiver.example"), InvalidIdentityToken::NotAnObject),
            (json!([{"audience": "a"}]), InvalidIdentityToken::NotAnObject),
            (json!({}), InvalidIdentityToken::Audience),
            (json!({"audience": ""}), InvalidIdentityToken::Audience),
            (json!({"audience": null}), InvalidIdentityToken::Audience),
            (json!({"audience": 5}), InvalidIdentityToken::Audience),
            (json!({"audience": ["a", "b"]}), InvalidIdentityToken::Audience),
            (json!({"audience": "a".repeat(MAX_AUDIENCE_CHARS + 1)}), InvalidIdentityToken::Audience),
            (json!({"audience": "a", "algorithm": "RS256"}), InvalidIdentityToken::UnknownMember("algorithm".into())),
        ] {
            assert_eq!(IdentityToken::parse(&bad), Err(refused), "{bad}");
        }
    }

    #[test]
    fn it_is_stored_and_shown_as_it_is_given() {
        let token = IdentityToken::parse(&json!({"audience": "api://receiver"})).unwrap().unwrap();
        assert_eq!(serde_json::to_value(&token).unwrap(), json!({"audience": "api://receiver"}));
        assert_eq!(serde_json::from_value::<IdentityToken>(json!({"audience": "api://receiver"})).unwrap(), token);
    }

    #[test]
    fn a_token_is_tagged_with_its_subscription_and_user() {
        let (subscription, user) = (SubscriptionId::generate(), "u1".parse::<UserId>().unwrap());
        assert_eq!(tags(&subscription, &user), [("subscription", subscription.as_str()), ("user", "u1")]);
    }
}
