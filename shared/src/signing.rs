//! HMAC-SHA256, the one primitive behind webhook signatures and pagination cursors.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

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

/// Constant-time check of `tag` against the HMAC of `message`.
pub fn verify(key: &[u8], message: &[u8], tag: &[u8]) -> bool {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac.verify_slice(tag).is_ok()
}

/// Constant-time check of a hex signature, as a receiver does it.
pub fn verify_hex(secret: &str, body: &[u8], signature_hex: &str) -> bool {
    hex::decode(signature_hex).is_ok_and(|tag| verify(secret.as_bytes(), body, &tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_test_case_2() {
        let tag = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex::encode(tag), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

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
