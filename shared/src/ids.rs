//! Identifiers: a type prefix and a ULID (48-bit millisecond time, 80 bits of randomness
//! or of a hash), so ids sort by creation time.

use std::sync::Mutex;

use sha2::{Digest, Sha256};

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

pub const ALERT: &str = "alr_";
pub const SUBSCRIPTION: &str = "whk_";
pub const EVENT: &str = "evt_";
pub const DELIVERY: &str = "dlv_";
pub const PROFILE: &str = "prf_";
pub const ASSESSMENT: &str = "asm_";

/// True when `id` could be an id of this `prefix` (a cheap check before touching storage).
pub fn has_shape(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|ulid| ulid.len() == 26 && ulid.bytes().all(|b| CROCKFORD.contains(&b)))
}

/// A fresh id for `prefix`, e.g. `alr_01JD…`. Ids made by one process in the same
/// millisecond still increase (ULID's monotonic mode), so creation order is kept.
pub fn new_id(prefix: &str) -> String {
    static LAST: Mutex<(u64, u128)> = Mutex::new((0, 0));
    let millis = crate::clock::now_millis();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let entropy = if millis <= last.0 && last.1 < ENTROPY_MAX {
        last.1 + 1
    } else {
        let random: [u8; 10] = crate::secrets::random_bytes();
        // Leave room to count up within the millisecond.
        random.iter().fold(0u128, |acc, byte| (acc << 8) | u128::from(*byte)) >> 1
    };
    *last = (millis.max(last.0), entropy);
    format!("{prefix}{}", ulid_from_parts(last.0, entropy))
}

const ENTROPY_MAX: u128 = (1 << 80) - 1;

/// An id that is the same every time it is derived from the same `parts`, so a repeated
/// stream record or a retried delivery keeps its identity.
pub fn derived_id(prefix: &str, millis: u64, parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    let digest = hasher.finalize();
    let mut entropy = [0u8; 10];
    entropy.copy_from_slice(&digest[..10]);
    format!("{prefix}{}", ulid(millis, entropy))
}

/// The creation time (Unix milliseconds) inside an id of any prefix.
pub fn millis_of(id: &str) -> Option<u64> {
    let ulid = id.rsplit('_').next()?;
    if ulid.len() != 26 {
        return None;
    }
    let value = ulid
        .bytes()
        .try_fold(0u128, |acc, b| CROCKFORD.iter().position(|c| *c == b).map(|digit| (acc << 5) | digit as u128))?;
    u64::try_from(value >> 80).ok()
}

fn ulid(millis: u64, entropy: [u8; 10]) -> String {
    ulid_from_parts(millis, entropy.iter().fold(0u128, |acc, byte| (acc << 8) | u128::from(*byte)))
}

fn ulid_from_parts(millis: u64, entropy: u128) -> String {
    let value: u128 = (u128::from(millis & 0xFFFF_FFFF_FFFF) << 80) | (entropy & ENTROPY_MAX);
    (0..26).rev().map(|i| CROCKFORD[((value >> (i * 5)) & 0x1F) as usize] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_their_prefix_and_sort_by_time() {
        let early = format!("{ALERT}{}", ulid(1_000, [0xFF; 10]));
        let late = format!("{ALERT}{}", ulid(1_001, [0; 10]));
        assert!(early < late);
        assert_eq!(late.len(), ALERT.len() + 26);
        assert!(has_shape(&new_id(SUBSCRIPTION), SUBSCRIPTION));
        assert!(!has_shape(&new_id(SUBSCRIPTION), ALERT));
        assert!(!has_shape("whk_short", SUBSCRIPTION));
        assert!(!has_shape("whk_0000000000000000000000000u", SUBSCRIPTION));
    }

    #[test]
    fn fresh_ids_increase_even_within_one_millisecond() {
        let ids: Vec<String> = (0..1000).map(|_| new_id(ALERT)).collect();
        assert!(ids.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn derived_ids_are_stable_and_depend_on_every_part() {
        let a = derived_id(DELIVERY, 5, &["evt_1", "whk_1"]);
        assert_eq!(a, derived_id(DELIVERY, 5, &["evt_1", "whk_1"]));
        assert_ne!(a, derived_id(DELIVERY, 5, &["evt_1", "whk_2"]));
        assert_ne!(a, derived_id(DELIVERY, 5, &["evt_1whk_1"]));
    }

    #[test]
    fn the_time_can_be_read_back() {
        assert_eq!(millis_of(&derived_id(EVENT, 1_795_766_400_123, &["x"])), Some(1_795_766_400_123));
        assert_eq!(millis_of("evt_short"), None);
    }

    #[test]
    fn known_ulid_encoding() {
        // 48 bits of time and 80 bits of entropy, all ones, is the largest ULID.
        assert_eq!(ulid(u64::MAX, [0xFF; 10]), "7ZZZZZZZZZZZZZZZZZZZZZZZZZ");
        assert_eq!(ulid(0, [0; 10]), "00000000000000000000000000");
    }
}
