//! The webhook signatures: the seed's hex HMAC-SHA256, Standard Webhooks' `v1`, and the
//! Ed25519 key pairs of its `v1a` signatures (contract section 16). HMAC-SHA256 itself is
//! `mac`'s, which the pagination cursors use too.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::Mac;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::{Deserialize, Serialize};

use crate::mac::{hmac_sha256, verify, HmacSha256};
use crate::random;

/// The webhook signature: lowercase hex HMAC-SHA256 of the exact body bytes, keyed with
/// the subscription secret's UTF-8 bytes.
pub fn sign_hex(secret: &str, body: &[u8]) -> String {
    hex::encode(hmac_sha256(secret.as_bytes(), body))
}

/// The Standard Webhooks (v1) signature (contract section 11): `v1,` + the standard base64
/// of HMAC-SHA256 over `{id}.{timestamp}.{body}`, keyed with the secret's decoded bytes.
pub fn sign_standard(key: &[u8], id: &str, unix_seconds: u64, body: &[u8]) -> String {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(format!("{id}.{unix_seconds}.").as_bytes());
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The Standard Webhooks asymmetric signature (contract section 16): `v1a,` + the standard
/// base64 of the Ed25519 signature over `{id}.{timestamp}.{body}`, the message of `v1`.
pub fn sign_asymmetric(key: &SigningKey, id: &str, unix_seconds: u64, body: &[u8]) -> String {
    // Ed25519 hashes its message twice, so it takes it whole rather than streamed.
    let message = [format!("{id}.{unix_seconds}.").as_bytes(), body].concat();
    format!("v1a,{}", STANDARD.encode(key.pair.sign(&message)))
}

/// A subscription's Ed25519 private key: the 32-byte seed of RFC 8032, kept only sealed
/// (`sealing`), with the key pair it expands to. Never printed.
pub struct SigningKey {
    seed: [u8; 32],
    pair: Ed25519KeyPair,
}

impl SigningKey {
    pub fn generate() -> Self {
        Self::from_seed(random::random_bytes())
    }

    fn from_seed(seed: [u8; 32]) -> Self {
        // Any 32 bytes are a valid seed: there is nothing to check.
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("a 32-byte seed");
        SigningKey { seed, pair }
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.pair.public_key().as_ref().try_into().expect("an Ed25519 public key is 32 bytes"))
    }
}

impl Clone for SigningKey {
    fn clone(&self) -> Self {
        Self::from_seed(self.seed)
    }
}

impl PartialEq for SigningKey {
    fn eq(&self, other: &Self) -> bool {
        self.seed == other.seed
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public_key())
    }
}

/// Inside the sealed secrets only: the standard base64 of the seed.
impl Serialize for SigningKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(self.seed))
    }
}

impl<'de> Deserialize<'de> for SigningKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let seed = STANDARD.decode(text).ok().and_then(|bytes| bytes.try_into().ok());
        seed.map(Self::from_seed).ok_or_else(|| serde::de::Error::custom("not an Ed25519 seed"))
    }
}

/// An Ed25519 public key as receivers pin it: `whpk_` + the standard base64 (with padding)
/// of its 32 bytes, the prefix following `whsec_`. Not a secret.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    const PREFIX: &str = "whpk_";

    pub fn parse(text: &str) -> Option<Self> {
        let bytes = STANDARD.decode(text.strip_prefix(Self::PREFIX)?).ok()?;
        Some(PublicKey(bytes.try_into().ok()?))
    }

    /// The 32 bytes, as Ed25519 verifiers take them.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl std::fmt::Display for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", Self::PREFIX, STANDARD.encode(self.0))
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl TryFrom<String> for PublicKey {
    type Error = &'static str;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        PublicKey::parse(&text).ok_or("not a whpk_ public key")
    }
}

impl From<PublicKey> for String {
    fn from(key: PublicKey) -> Self {
        key.to_string()
    }
}

/// Constant-time check of a hex signature, as a receiver does it.
pub fn verify_hex(secret: &str, body: &[u8], signature_hex: &str) -> bool {
    hex::decode(signature_hex).is_ok_and(|tag| verify(secret.as_bytes(), body, &tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector of the Standard Webhooks libraries' own tests (`test_sign_function` in
    /// libraries/python/tests/test_webhooks.py, `TestSign` in libraries/go/webhook_test.go).
    #[test]
    fn standard_webhooks_known_answer() {
        let key = STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let signature = sign_standard(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, br#"{"test": 2432232314}"#);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn the_standard_signature_covers_id_timestamp_and_body() {
        let signed = sign_standard(b"key", "dlv_1", 1_795_766_400, b"{}");
        assert_ne!(signed, sign_standard(b"key", "dlv_2", 1_795_766_400, b"{}"));
        assert_ne!(signed, sign_standard(b"key", "dlv_1", 1_795_766_401, b"{}"));
        assert_ne!(signed, sign_standard(b"key", "dlv_1", 1_795_766_400, b"{ }"));
        assert_ne!(signed, sign_standard(b"kez", "dlv_1", 1_795_766_400, b"{}"));
    }

    /// RFC 8032 section 7.1, TEST 2: ring signs as the standard says, checked against the
    /// RFC's own public key and signature rather than against ring's verifier.
    #[test]
    fn ed25519_known_answer() {
        let seed = hex::decode("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb").unwrap();
        let key = SigningKey::from_seed(seed.try_into().unwrap());
        let public = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
        assert_eq!(hex::encode(key.public_key().bytes()), public);
        let signature = hex::encode(key.pair.sign(&[0x72]));
        assert_eq!(
            signature,
            "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da\
             085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
        );
    }

    #[test]
    fn the_asymmetric_signature_is_v1a_over_id_timestamp_and_body() {
        let key = SigningKey::generate();
        let signed = sign_asymmetric(&key, "dlv_1", 1_795_766_400, b"{}");
        let signature = STANDARD.decode(signed.strip_prefix("v1a,").expect("the v1a prefix")).unwrap();
        let public = key.public_key();
        let verifier = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public.bytes());
        assert!(verifier.verify(b"dlv_1.1795766400.{}", &signature).is_ok());
        assert!(verifier.verify(b"dlv_1.1795766400.{ }", &signature).is_err());
        assert_ne!(signed, sign_asymmetric(&SigningKey::generate(), "dlv_1", 1_795_766_400, b"{}"));
    }

    #[test]
    fn keys_round_trip_and_never_print_their_seed() {
        let key = SigningKey::generate();
        let json = serde_json::to_string(&key).unwrap();
        let back: SigningKey = serde_json::from_str(&json).unwrap();
        assert_eq!((back.public_key(), &back), (key.public_key(), &key));
        let printed = format!("{key:?}");
        assert_eq!(printed, format!("SigningKey({})", key.public_key()));
        assert!(!printed.contains(json.trim_matches('"')));
        assert!(serde_json::from_str::<SigningKey>(r#""c2hvcnQ=""#).is_err());

        let public = key.public_key().to_string();
        assert_eq!((public.len(), &public[..5]), (5 + 44, "whpk_"));
        assert_eq!(PublicKey::parse(&public), Some(key.public_key()));
        for bad in ["whpk_", "whsec_AAAA", &public[5..], &format!("whpk_{}", STANDARD.encode([1u8; 31]))] {
            assert_eq!(PublicKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn signatures_verify_only_for_the_same_bytes_and_secret() {
        let body = br#"{"id":"evt_1","type":"profile.updated"}"#;
        let signature = sign_hex("whsec_abc", body);
        assert_eq!(signature, signature.to_lowercase());
        assert!(verify_hex("whsec_abc", body, &signature));
        assert!(!verify_hex("whsec_abd", body, &signature));
        assert!(!verify_hex("whsec_abc", br#"{"id":"evt_2","type":"profile.updated"}"#, &signature));
        assert!(!verify_hex("whsec_abc", body, "not hex"));
    }
}
