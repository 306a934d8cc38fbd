//! HMAC-SHA256, the one keyed hash of the service: the webhook signatures
//! (`webhooks::signing`) and the list cursors (`pagination`) both use it, so it is a leaf of
//! its own rather than one of theirs.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub(crate) type HmacSha256 = Hmac<Sha256>;

pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// Constant-time check of `tag` against the HMAC of `message`.
pub fn verify(key: &[u8], message: &[u8], tag: &[u8]) -> bool {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac.verify_slice(tag).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_test_case_2() {
        let tag = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex::encode(tag), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        assert!(verify(b"Jefe", b"what do ya want for nothing?", &tag));
        assert!(!verify(b"Jefe", b"what do ya want for nothing!", &tag));
    }
}
