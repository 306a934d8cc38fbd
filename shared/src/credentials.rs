//! Credential types (contract section 2): scopes, API keys, their hashes and what is kept
//! of an issued key. A leaf module: the authenticator and the keys table both build on it.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::clock::Timestamp;
use crate::ids::UserId;
use crate::random;

const KEY_PREFIX: &str = "cak_";

crate::text::wire_names! {
    pub enum Scope: "scope" {
        ReadAlerts = "read:alerts",
        WriteAlerts = "write:alerts",
        ReadDataSharing = "read:data_sharing",
        WriteDataSharing = "write:data_sharing",
        ReadWebhooks = "read:webhooks",
        WriteWebhooks = "write:webhooks",
    }
}

impl Scope {
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of scopes. No scope implies another.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    pub fn all() -> Self {
        Scope::ALL.into_iter().collect()
    }

    pub fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::ALL.into_iter().filter(move |scope| self.contains(*scope))
    }

    pub fn names(self) -> Vec<&'static str> {
        self.iter().map(Scope::as_str).collect()
    }

    /// Parses a comma-separated list such as `read:alerts,write:alerts`.
    pub fn parse_list(text: &str) -> Result<Self, String> {
        let mut scopes = Scopes::default();
        for name in text.split(',').map(str::trim).filter(|name| !name.is_empty()) {
            let scope =
                Scope::parse(name).ok_or_else(|| format!("unknown scope '{name}' (known: {})", Scope::names()))?;
            scopes.0 |= scope.bit();
        }
        if scopes.0 == 0 {
            return Err("at least one scope is required".into());
        }
        Ok(scopes)
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        Scopes(iter.into_iter().fold(0, |bits, scope| bits | scope.bit()))
    }
}

/// An API key as the client holds it. Only its hash is ever stored.
pub struct ApiKey(String);

impl ApiKey {
    pub fn generate() -> Self {
        ApiKey(random::random_token(KEY_PREFIX))
    }

    pub fn parse(text: &str) -> Option<Self> {
        random::is_token(text, KEY_PREFIX).then(|| ApiKey(text.to_owned()))
    }

    /// The key of an `Authorization: Bearer <key>` header (the scheme word is case-insensitive).
    pub fn from_authorization(header: &str) -> Option<Self> {
        let (scheme, key) = header.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        Self::parse(key.trim())
    }

    pub fn hash(&self) -> KeyHash {
        KeyHash(hex::encode(Sha256::digest(self.0.as_bytes())))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(…)")
    }
}

/// Lowercase hex SHA-256 of an API key: the key's identity in storage and in the rate limiter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyHash(String);

impl KeyHash {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An issued API key as the service keeps it: its hash (never the key), owner and scopes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    pub hash: KeyHash,
    pub user_id: UserId,
    pub scopes: Scopes,
    pub label: Option<String>,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    /// From this time on the key is refused (contract section 2); `None`: it never expires.
    pub expires_at: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive_and_key_must_be_well_formed() {
        let key = ApiKey::generate();
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let header = format!("{scheme} {}", key.expose());
            assert_eq!(ApiKey::from_authorization(&header).unwrap().hash(), key.hash());
        }
        assert!(ApiKey::from_authorization(&format!("Basic {}", key.expose())).is_none());
        assert!(ApiKey::from_authorization("Bearer cak_tooshort").is_none());
        assert!(ApiKey::from_authorization(key.expose()).is_none());
    }

    /// A known answer, computed apart from this crate:
    /// `python3 -c "import hashlib; print(hashlib.sha256(('cak_' + 'A' * 43).encode()).hexdigest())"`
    /// (`printf 'cak_%s' AAA…A | openssl dgst -sha256` gives the same).
    #[test]
    fn hash_is_lowercase_hex_sha256_of_the_key_text() {
        let key = ApiKey::parse(&format!("cak_{}", "A".repeat(43))).unwrap();
        assert_eq!(key.hash().as_str(), "42234239e7974b39f45bab7b3c6faf4087d6ca4092a0c992e9aec83cc6133001");
    }

    #[test]
    fn scopes_parse_and_do_not_imply_each_other() {
        let scopes = Scopes::parse_list("write:alerts, read:webhooks").unwrap();
        assert!(scopes.contains(Scope::WriteAlerts));
        assert!(!scopes.contains(Scope::ReadAlerts));
        assert_eq!(scopes.names(), ["write:alerts", "read:webhooks"]);
        assert!(Scopes::parse_list("admin").unwrap_err().contains("unknown scope"));
        assert!(Scopes::parse_list("").is_err());
        assert_eq!(Scopes::all().iter().count(), 6);
    }
}
