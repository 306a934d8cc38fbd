//! Random tokens from the OS CSPRNG, as `prefix` + 43 base64url characters (32 bytes).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// Bytes of entropy in every key and secret the service issues.
pub const TOKEN_BYTES: usize = 32;
/// Length of the base64url (unpadded) text of [`TOKEN_BYTES`] bytes.
pub const TOKEN_TEXT_LEN: usize = 43;

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    bytes
}

pub fn random_token(prefix: &str) -> String {
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(random_bytes::<TOKEN_BYTES>()))
}

/// True when `text` is `prefix` followed by exactly one token's worth of base64url text.
pub fn is_token(text: &str, prefix: &str) -> bool {
    text.strip_prefix(prefix).is_some_and(|body| {
        body.len() == TOKEN_TEXT_LEN && body.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_have_the_documented_shape_and_differ() {
        let a = random_token("cak_");
        let b = random_token("cak_");
        assert!(is_token(&a, "cak_"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + TOKEN_TEXT_LEN);
    }

    #[test]
    fn malformed_tokens_are_refused() {
        assert!(!is_token("cak_short", "cak_"));
        assert!(!is_token(&random_token("whsec_"), "cak_"));
        let bad = format!("cak_{}", "+".repeat(TOKEN_TEXT_LEN));
        assert!(!is_token(&bad, "cak_"));
    }
}
