//! Secret rotation (contract sections 10 and 16): the secrets and Ed25519 keys a
//! subscription's deliveries are signed with, and the grace period during which the previous
//! ones still sign them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::{self, Timestamp};
use crate::webhooks::signing::{PublicKey, SigningKey};
use crate::webhooks::{SubscriptionObject, WebhookSecret};

/// The current secret and, until it expires, the one it replaced; with asymmetric signing on,
/// the current key and the one it replaced, which expires with the previous secret. Only one
/// previous secret (and key) is kept. This is what a subscription stores, sealed (see
/// `sealing`); the public halves of the keys are stored in clear as [`PublicKeys`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SigningSecrets {
    pub current: WebhookSecret,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_key: Option<SigningKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousSecret>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviousSecret {
    pub secret: WebhookSecret,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<SigningKey>,
    /// When it stops signing; stored as Unix seconds.
    #[serde(with = "clock::unix_seconds")]
    pub expires_at: Timestamp,
}

/// What signs one delivery: the secrets, then the keys, each current first.
#[derive(Debug, PartialEq)]
pub struct ActiveSecrets<'a> {
    pub secrets: Vec<&'a WebhookSecret>,
    pub keys: Vec<&'a SigningKey>,
}

impl SigningSecrets {
    pub fn new(current: WebhookSecret, asymmetric_signing: bool) -> Self {
        SigningSecrets { current, current_key: asymmetric_signing.then(SigningKey::generate), previous: None }
    }

    /// The secrets after rotating to `next` at `now`: the current secret (and key) becomes the
    /// previous one for `grace`, replacing any earlier previous one. With asymmetric signing
    /// on, a new key pair replaces the current one.
    pub fn rotated(&self, next: WebhookSecret, now: Timestamp, grace: GracePeriod) -> Self {
        // A whole second, as it is stored: the response shows the expiry that applies.
        let expires_at = Timestamp::from_unix_seconds(now.unix_seconds() + u64::from(grace.0));
        let previous = (grace.0 > 0).then(|| PreviousSecret {
            secret: self.current.clone(),
            key: self.current_key.clone(),
            expires_at,
        });
        SigningSecrets {
            current: next,
            current_key: self.current_key.as_ref().map(|_| SigningKey::generate()),
            previous,
        }
    }

    /// The secrets with asymmetric signing `on`: turning it on makes a key pair, turning it
    /// off drops every key at once (the previous one too); otherwise nothing changes.
    pub fn with_asymmetric_signing(&self, on: bool) -> Self {
        let mut secrets = self.clone();
        match (on, &secrets.current_key) {
            (true, None) => secrets.current_key = Some(SigningKey::generate()),
            (false, _) => {
                secrets.current_key = None;
                if let Some(previous) = &mut secrets.previous {
                    previous.key = None;
                }
            }
            (true, Some(_)) => {}
        }
        secrets
    }

    /// What signs a delivery sent at `now`: the current secret and key first, then the
    /// previous ones while their grace period lasts.
    pub fn active_at(&self, now: Timestamp) -> ActiveSecrets<'_> {
        let previous = self.previous.as_ref().filter(|previous| now < previous.expires_at);
        ActiveSecrets {
            secrets: std::iter::once(&self.current).chain(previous.map(|previous| &previous.secret)).collect(),
            keys: self.current_key.iter().chain(previous.and_then(|previous| previous.key.as_ref())).collect(),
        }
    }

    /// The public halves of the keys, as the subscription's item keeps them in clear.
    pub fn public_keys(&self) -> Option<PublicKeys> {
        let current = self.current_key.as_ref()?.public_key();
        let previous = self.previous.as_ref().and_then(|previous| {
            let key = previous.key.as_ref()?.public_key();
            Some(PreviousPublicKey { key, expires_at: previous.expires_at })
        });
        Some(PublicKeys { current, previous })
    }
}

/// A subscription's public keys (contract section 16): the current one and, after a rotation
/// with a grace period, the one it replaced until that expires.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PublicKeys {
    pub current: PublicKey,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousPublicKey>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviousPublicKey {
    pub key: PublicKey,
    pub expires_at: Timestamp,
}

impl PublicKeys {
    /// The previous key while it still signs at `now`.
    pub fn previous_at(&self, now: Timestamp) -> Option<&PreviousPublicKey> {
        self.previous.as_ref().filter(|previous| now < previous.expires_at)
    }

    /// The list a receiver pins (`GET …/signing-keys`): the current key, then the previous
    /// one while it still signs.
    pub fn listed_at(&self, now: Timestamp) -> Vec<ListedKey> {
        let current = ListedKey { public_key: self.current, status: KeyStatus::Current, expires_at: None };
        let previous = self.previous_at(now).map(|previous| ListedKey {
            public_key: previous.key,
            status: KeyStatus::Previous,
            expires_at: Some(previous.expires_at),
        });
        std::iter::once(current).chain(previous).collect()
    }
}

/// One key of the signing-keys list.
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedKey {
    pub public_key: PublicKey,
    pub status: KeyStatus,
    pub expires_at: Option<Timestamp>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyStatus {
    Current,
    Previous,
}

/// The rotation response: the subscription (with its new public key when asymmetric signing
/// is on), the new secret (shown this once) and when the previous one stops signing (`null`
/// without a grace period).
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
        let secrets = SigningSecrets::new(first.clone(), false);
        assert_eq!(secrets.active_at(at(0)).secrets, [&first]);

        let rotated = secrets.rotated(second.clone(), at(0), GracePeriod(60));
        assert_eq!(rotated.active_at(at(0)).secrets, [&second, &first], "the new secret first");
        assert_eq!(rotated.active_at(at(59)).secrets, [&second, &first]);
        assert_eq!(rotated.active_at(at(60)).secrets, [&second], "expired");
        assert_eq!(rotated.previous.as_ref().map(|p| p.expires_at), Some(at(60)));

        let immediate = secrets.rotated(second.clone(), at(0), GracePeriod(0));
        assert_eq!(immediate.active_at(at(0)).secrets, [&second]);
        assert_eq!(immediate.previous, None);
    }

    #[test]
    fn keys_rotate_with_the_secrets_and_expire_with_them() {
        let secrets = SigningSecrets::new(WebhookSecret::generate(), true);
        let first = secrets.current_key.clone().expect("a key pair");
        assert_eq!(secrets.active_at(at(0)).keys, [&first]);
        let listed = secrets.public_keys().unwrap().listed_at(at(0));
        assert_eq!(
            listed,
            [ListedKey { public_key: first.public_key(), status: KeyStatus::Current, expires_at: None }]
        );

        let rotated = secrets.rotated(WebhookSecret::generate(), at(0), GracePeriod(60));
        let second = rotated.current_key.clone().expect("a new key pair");
        assert_ne!(second, first);
        assert_eq!(rotated.active_at(at(59)).keys, [&second, &first], "the new key first");
        assert_eq!(rotated.active_at(at(60)).keys, [&second], "expired with the secret");
        let public = rotated.public_keys().unwrap();
        assert_eq!(public.previous_at(at(59)).map(|previous| previous.key), Some(first.public_key()));
        assert_eq!(public.previous_at(at(60)), None);
        let statuses: Vec<_> = public.listed_at(at(0)).iter().map(|key| (key.public_key, key.status)).collect();
        assert_eq!(statuses, [(second.public_key(), KeyStatus::Current), (first.public_key(), KeyStatus::Previous)]);
        assert_eq!(public.listed_at(at(0))[1].expires_at, Some(at(60)));
        assert_eq!(public.listed_at(at(60)).len(), 1);

        let off = rotated.with_asymmetric_signing(false);
        assert_eq!((off.active_at(at(0)).keys.len(), off.public_keys()), (0, None), "off drops both pairs");
        assert_eq!(off.active_at(at(0)).secrets.len(), 2, "the secrets stay");
        let on = off.with_asymmetric_signing(true);
        assert_eq!(on.active_at(at(0)).keys.len(), 1, "on makes one pair, with no previous one");
        assert_eq!(on.with_asymmetric_signing(true), on, "already on: unchanged");

        let plain = SigningSecrets::new(WebhookSecret::generate(), false).rotated(
            WebhookSecret::generate(),
            at(0),
            GracePeriod(60),
        );
        assert_eq!((plain.current_key.as_ref(), plain.public_keys()), (None, None), "off: no key made");
    }

    #[test]
    fn only_one_previous_secret_is_kept() {
        let (first, second, third) = (WebhookSecret::generate(), WebhookSecret::generate(), WebhookSecret::generate());
        let twice = SigningSecrets::new(first.clone(), false)
            .rotated(second.clone(), at(0), GracePeriod::DEFAULT)
            .rotated(third.clone(), at(10), GracePeriod(100));
        assert_eq!(twice.active_at(at(10)).secrets, [&third, &second]);
        assert!(!twice.active_at(at(10)).secrets.contains(&&first));
    }

    #[test]
    fn the_sealed_form_round_trips() {
        let secrets = SigningSecrets::new(WebhookSecret::generate(), false).rotated(
            WebhookSecret::generate(),
            at(0),
            GracePeriod::DEFAULT,
        );
        let json = serde_json::to_vec(&secrets).unwrap();
        assert_eq!(serde_json::from_slice::<SigningSecrets>(&json).unwrap(), secrets);
        let with_keys = SigningSecrets::new(WebhookSecret::generate(), true).rotated(
            WebhookSecret::generate(),
            at(0),
            GracePeriod::DEFAULT,
        );
        let json = serde_json::to_vec(&with_keys).unwrap();
        assert_eq!(serde_json::from_slice::<SigningSecrets>(&json).unwrap(), with_keys);
        // Secrets sealed before key pairs existed open as secrets without keys.
        let before = json!({"current": WebhookSecret::generate().expose()});
        assert_eq!(serde_json::from_value::<SigningSecrets>(before).unwrap().current_key, None);
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
