//! Secret rotation (contract section 10): the secrets a subscription's deliveries are signed
//! with, and the grace period during which the previous secret still signs them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::{self, Timestamp};
use crate::webhooks::{SubscriptionObject, WebhookSecret};

/// The current secret and, until it expires, the one it replaced. Only one previous secret
/// is kept. This is what a subscription stores, sealed (see `sealing`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SigningSecrets {
    pub current: WebhookSecret,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousSecret>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviousSecret {
    pub secret: WebhookSecret,
    /// When it stops signing; stored as Unix seconds.
    #[serde(with = "clock::unix_seconds")]
    pub expires_at: Timestamp,
}

impl SigningSecrets {
    pub fn new(current: WebhookSecret) -> Self {
        SigningSecrets { current, previous: None }
    }

    /// The secrets after rotating to `next` at `now`: the current secret becomes the
    /// previous one for `grace`, replacing any earlier previous secret.
    pub fn rotated(&self, next: WebhookSecret, now: Timestamp, grace: GracePeriod) -> Self {
        // A whole second, as it is stored: the response shows the expiry that applies.
        let expires_at = Timestamp::from_unix_seconds(now.unix_seconds() + u64::from(grace.0));
        let previous = (grace.0 > 0).then(|| PreviousSecret { secret: self.current.clone(), expires_at });
        SigningSecrets { current: next, previous }
    }

    /// The secrets that sign a delivery sent at `now`: the current one first, then the
    /// previous one while its grace period lasts.
    pub fn active_at(&self, now: Timestamp) -> Vec<&WebhookSecret> {
        let previous = self.previous.as_ref().filter(|previous| now < previous.expires_at);
        std::iter::once(&self.current).chain(previous.map(|previous| &previous.secret)).collect()
    }
}

/// The rotation response: the subscription, the new secret (shown this once) and when the
/// previous one stops signing (`null` without a grace period).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RotatedSubscription {
    #[serde(flatten)]
    pub subscription: SubscriptionObject,
    pub secret: String,
    pub previous_secret_expires_at: Option<Timestamp>,
}

/// How long the previous secret keeps signing after a rotation: 0 to 7 days, 1 day unless
/// the request says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GracePeriod(u32);

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("gracePeriodSeconds must be an integer from 0 to {}", GracePeriod::MAX.0)]
pub struct InvalidGracePeriod;

impl GracePeriod {
    pub const DEFAULT: GracePeriod = GracePeriod(86_400);
    pub const MAX: GracePeriod = GracePeriod(604_800);

    /// The `gracePeriodSeconds` of a rotation request; absent or `null` is the default.
    pub fn parse(value: Option<&Value>) -> Result<Self, InvalidGracePeriod> {
        match value {
            None | Some(Value::Null) => Ok(Self::DEFAULT),
            Some(value) => value
                .as_u64()
                .filter(|seconds| *seconds <= u64::from(Self::MAX.0))
                .and_then(|seconds| u32::try_from(seconds).ok())
                .map(GracePeriod)
                .ok_or(InvalidGracePeriod),
        }
    }

    pub fn seconds(self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(seconds: u64) -> Timestamp {
        Timestamp::from_unix_seconds(1_795_766_400 + seconds)
    }

    #[test]
    fn a_rotation_keeps_the_replaced_secret_for_the_grace_period_only() {
        let (first, second) = (WebhookSecret::generate(), WebhookSecret::generate());
        let secrets = SigningSecrets::new(first.clone());
        assert_eq!(secrets.active_at(at(0)), [&first]);

        let rotated = secrets.rotated(second.clone(), at(0), GracePeriod(60));
        assert_eq!(rotated.active_at(at(0)), [&second, &first], "the new secret first");
        assert_eq!(rotated.active_at(at(59)), [&second, &first]);
        assert_eq!(rotated.active_at(at(60)), [&second], "expired");
        assert_eq!(rotated.previous.as_ref().map(|p| p.expires_at), Some(at(60)));

        let immediate = secrets.rotated(second.clone(), at(0), GracePeriod(0));
        assert_eq!(immediate.active_at(at(0)), [&second]);
        assert_eq!(immediate.previous, None);
    }

    #[test]
    fn only_one_previous_secret_is_kept() {
        let (first, second, third) = (WebhookSecret::generate(), WebhookSecret::generate(), WebhookSecret::generate());
        let twice = SigningSecrets::new(first.clone()).rotated(second.clone(), at(0), GracePeriod::DEFAULT).rotated(
            third.clone(),
            at(10),
            GracePeriod(100),
        );
        assert_eq!(twice.active_at(at(10)), [&third, &second]);
        assert!(!twice.active_at(at(10)).contains(&&first));
    }

    #[test]
    fn the_sealed_form_round_trips() {
        let secrets = SigningSecrets::new(WebhookSecret::generate()).rotated(
            WebhookSecret::generate(),
            at(0),
            GracePeriod::DEFAULT,
        );
        let json = serde_json::to_vec(&secrets).unwrap();
        assert_eq!(serde_json::from_slice::<SigningSecrets>(&json).unwrap(), secrets);
        assert!(serde_json::from_value::<SigningSecrets>(json!({"current": "whsec_nope"})).is_err());
    }

    #[test]
    fn grace_periods_are_integers_from_0_to_7_days() {
        assert_eq!(GracePeriod::parse(None), Ok(GracePeriod(86_400)));
        assert_eq!(GracePeriod::parse(Some(&json!(null))), Ok(GracePeriod(86_400)));
        for (value, seconds) in [(json!(0), 0), (json!(1), 1), (json!(604_800), 604_800)] {
            assert_eq!(GracePeriod::parse(Some(&value)), Ok(GracePeriod(seconds)), "{value}");
        }
        for bad in
            [json!(-1), json!(604_801), json!(1.5), json!(60.0), json!("60"), json!(true), json!([60]), json!({})]
        {
            assert_eq!(GracePeriod::parse(Some(&bad)), Err(InvalidGracePeriod), "{bad}");
        }
    }
}
