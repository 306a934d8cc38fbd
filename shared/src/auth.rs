//! Authentication (contract section 2): resolves an `Authorization` header to a
//! principal, with a short per-instance cache of key lookups. A key's expiry is checked on
//! every request, cached or not, so an expired key is refused at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clock::Timestamp;
use crate::credentials::{ApiKey, KeyHash, KeyRecord, Scopes};
use crate::ids::UserId;
use crate::store::keys::KeyTable;
use crate::store::StoreError;

/// How long a warm instance trusts a key lookup: a revoked key fails within this time.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(60);
/// How long a warm instance remembers that a key is unknown (or revoked), so a client
/// repeating one costs no DynamoDB read per request.
pub const UNKNOWN_KEY_CACHE_TTL: Duration = Duration::from_secs(5);
/// Unknown keys remembered at most: random ones must not grow the cache without bound.
const MAX_UNKNOWN_KEYS: usize = 10_000;

/// Who is calling: the key's owner and what the key may do.
#[derive(Clone, Debug)]
pub struct Principal {
    pub user_id: UserId,
    pub scopes: Scopes,
    pub key_hash: KeyHash,
    /// When the key stops working, if it expires.
    pub expires_at: Option<Timestamp>,
}

impl Principal {
    /// Whether the key has expired at `now` (an expiry is the first instant it is refused).
    pub fn has_expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|expires_at| now >= expires_at)
    }
}

/// Resolves `Authorization` headers to principals, caching lookups for [`KEY_CACHE_TTL`]
/// and unknown keys for [`UNKNOWN_KEY_CACHE_TTL`].
pub struct Authenticator {
    keys: KeyTable,
    /// Each looked-up key's principal (`None`: unknown or revoked) and when that expires.
    cache: Mutex<HashMap<KeyHash, (Option<Principal>, Instant)>>,
}

impl Authenticator {
    pub fn new(keys: KeyTable) -> Self {
        Self { keys, cache: Mutex::default() }
    }

    /// `Ok(None)` for a missing, malformed, unknown, revoked or expired key.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Option<Principal>, StoreError> {
        let Some(key) = authorization.and_then(ApiKey::from_authorization) else {
            return Ok(None);
        };
        let hash = key.hash();
        let unexpired = |principal: Option<Principal>| principal.filter(|known| !known.has_expired(Timestamp::now()));
        if let Some(principal) = self.cached(&hash) {
            return Ok(unexpired(principal));
        }
        let principal = self.keys.get(&hash).await?.and_then(principal_of);
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|_, (_, expires)| *expires > now);
        match &principal {
            Some(known) => {
                cache.insert(hash, (Some(known.clone()), now + KEY_CACHE_TTL));
            }
            None if cache.len() < MAX_UNKNOWN_KEYS => {
                cache.insert(hash, (None, now + UNKNOWN_KEY_CACHE_TTL));
            }
            None => {}
        }
        Ok(unexpired(principal))
    }

    /// `Some(lookup)` while a lookup of `hash` is cached.
    fn cached(&self, hash: &KeyHash) -> Option<Option<Principal>> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(hash).filter(|(_, expires)| *expires > Instant::now()).map(|(principal, _)| principal.clone())
    }
}

fn principal_of(record: KeyRecord) -> Option<Principal> {
    // The record was fetched by the key's very hash, so only revocation can disqualify it.
    if record.revoked_at.is_some() {
        return None;
    }
    Some(Principal {
        user_id: record.user_id,
        scopes: record.scopes,
        key_hash: record.hash,
        expires_at: record.expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoked_keys_are_not_principals() {
        let record = |revoked: Option<&str>| KeyRecord {
            hash: ApiKey::generate().hash(),
            user_id: "u1".parse().unwrap(),
            scopes: [crate::credentials::Scope::ReadAlerts].into_iter().collect(),
            label: None,
            created_at: "2026-01-01T00:00:00.000Z".parse().unwrap(),
            revoked_at: revoked.map(|at| at.parse().unwrap()),
            expires_at: None,
        };
        assert!(principal_of(record(None)).is_some());
        assert!(principal_of(record(Some("2026-01-02T00:00:00.000Z"))).is_none());
    }

    #[test]
    fn a_key_expires_at_its_expiry_and_not_before() {
        let at = |text: &str| text.parse::<Timestamp>().unwrap();
        let principal = |expires_at: Option<&str>| Principal {
            user_id: "u1".parse().unwrap(),
            scopes: Scopes::default(),
            key_hash: ApiKey::generate().hash(),
            expires_at: expires_at.map(at),
        };
        let expiring = principal(Some("2026-11-27T09:00:00.000Z"));
        assert!(!expiring.has_expired(at("2026-11-27T08:59:59.999Z")));
        assert!(expiring.has_expired(at("2026-11-27T09:00:00.000Z")));
        assert!(expiring.has_expired(at("2027-01-01T00:00:00.000Z")));
        assert!(!principal(None).has_expired(at("2999-01-01T00:00:00.000Z")));
    }
}
