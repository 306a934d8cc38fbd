//! Identifiers: a type prefix and a ULID (48-bit millisecond time, 80 bits of randomness
//! or of a hash), so ids sort by creation time.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::clock::Timestamp;
use crate::text::text_traits;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

pub const ALERT: &str = "alr_";
pub const SUBSCRIPTION: &str = "whk_";
pub const EVENT: &str = "evt_";
pub const DELIVERY: &str = "dlv_";
pub const PROFILE: &str = "prf_";
pub const ASSESSMENT: &str = "asm_";

/// Declares an id type of one prefix. Its only constructors check the shape (prefix and
/// ULID) or make a fresh id, so a value of the type is always well formed, and the types of
/// two kinds of id cannot be swapped.
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident = $prefix:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A fresh id, later than every id this process made before.
            pub fn generate() -> Self {
                $name(new_id($prefix))
            }

            /// The id that the same `parts` always give (see [`derived_id`]).
            pub fn derived(at: Timestamp, parts: &[&str]) -> Self {
                $name(derived_id($prefix, at.unix_millis(), parts))
            }

            /// `Some` when `text` has this kind's prefix and a ULID: the one shape check.
            pub fn parse(text: &str) -> Option<Self> {
                has_shape(text, $prefix).then(|| $name(text.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// When the id was made, to the millisecond.
            pub fn created_at(&self) -> Timestamp {
                Timestamp::from_unix_millis(millis_of(&self.0).unwrap_or_default())
            }

            /// The last five bits of its random (or hashed) part, its last character's value:
            /// even over 0..32 whatever the time the id was made at, and even again for ids
            /// counted up within one millisecond, so a key made of it spreads items evenly over
            /// partitions.
            pub fn low_random_bits(&self) -> u8 {
                let last = self.0.bytes().last().unwrap_or_default();
                CROCKFORD.iter().position(|c| *c == last).and_then(|value| u8::try_from(value).ok()).unwrap_or_default()
            }
        }

        text_traits!($name, concat!("a valid ", stringify!($name)));
    };
}

prefixed_id!(
    /// An alert's id, `alr_…`.
    AlertId = ALERT
);
prefixed_id!(
    /// A webhook subscription's id, `whk_…`.
    SubscriptionId = SUBSCRIPTION
);
prefixed_id!(
    /// An event's id, `evt_…`.
    EventId = EVENT
);
prefixed_id!(
    /// A delivery's id (one event to one subscription), `dlv_…`.
    DeliveryId = DELIVERY
);

/// The longest id of the rest of the platform (users, profiles, assessments) the service takes.
pub const MAX_PLATFORM_ID_LEN: usize = 256;

/// Whether `text` can be an id that the rest of the platform made: not empty, at most
/// [`MAX_PLATFORM_ID_LEN`] bytes, no control characters and no surrounding blanks. Their
/// shape is the platform's, so nothing more is asked of them.
fn is_platform_id(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_PLATFORM_ID_LEN && text.trim() == text && !text.chars().any(char::is_control)
}

/// The user an API key belongs to, and so the owner of every item it reaches: a platform id
/// (see [`is_platform_id`]) not starting with `#`, which marks the service's own partitions.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UserId(String);

impl UserId {
    pub const MAX_LEN: usize = MAX_PLATFORM_ID_LEN;

    pub fn parse(text: &str) -> Option<Self> {
        (is_platform_id(text) && !text.starts_with('#')).then(|| UserId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

text_traits!(UserId, "a user id");

/// Declares the id type of one kind of platform item: checked once by `parse` (see
/// [`is_platform_id`]); `careerctl` makes fresh ones with `generate`, as the platform would.
macro_rules! platform_id {
    ($(#[$doc:meta])* $name:ident = $prefix:ident, $what:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn parse(text: &str) -> Option<Self> {
                is_platform_id(text).then(|| $name(text.to_owned()))
            }

            /// A fresh id, `<prefix><ULID>`.
            pub fn generate() -> Self {
                $name(new_id($prefix))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        text_traits!($name, $what);
    };
}

platform_id!(
    /// A profile's id, made by the platform.
    ProfileId = PROFILE,
    "a profile id"
);
platform_id!(
    /// An assessment's id, made by the platform.
    AssessmentId = ASSESSMENT,
    "an assessment id"
);

/// True when `id` could be an id of this `prefix` (a cheap check before touching storage).
pub fn has_shape(id: &str, prefix: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|ulid| ulid.len() == 26 && ulid.bytes().all(|b| CROCKFORD.contains(&b)))
}

/// A fresh id for `prefix`, e.g. `alr_01JD…`. Ids made by one process in the same
/// millisecond still increase (ULID's monotonic mode), so creation order is kept.
pub fn new_id(prefix: &str) -> String {
    static LAST: Mutex<(u64, u128)> = Mutex::new((0, 0));
    let millis = Timestamp::now().unix_millis();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let entropy = if millis <= last.0 && last.1 < ENTROPY_MAX {
        last.1 + 1
    } else {
        let random: [u8; 10] = crate::random::random_bytes();
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

/// The smallest id of `prefix` that can be made at `at`: a bound of a key range over ids by
/// their time (it is not an id of anything).
pub fn first_id_at(prefix: &str, at: Timestamp) -> String {
    format!("{prefix}{}", ulid_from_parts(at.unix_millis(), 0))
}

/// The creation time (Unix milliseconds) inside an id of any prefix.
fn millis_of(id: &str) -> Option<u64> {
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
    fn typed_ids_check_their_own_prefix_only() {
        let alert = AlertId::generate();
        assert_eq!(AlertId::parse(alert.as_str()), Some(alert.clone()));
        assert_eq!(SubscriptionId::parse(alert.as_str()), None);
        assert_eq!(AlertId::parse("alr_short"), None);
        let json = serde_json::to_string(&alert).unwrap();
        assert_eq!(serde_json::from_str::<AlertId>(&json).unwrap(), alert);
        assert!(serde_json::from_str::<DeliveryId>(&json).is_err(), "an alert id is no delivery id");
        let at = Timestamp::from_unix_millis(1_795_766_400_123);
        let event = EventId::derived(at, &["x"]);
        assert_eq!(event.created_at(), at);
        assert_eq!(event, EventId::derived(at, &["x"]));
    }

    #[test]
    fn user_ids_are_plain_text_outside_the_service_partitions() {
        for good in ["u1", "user@example.com", "Ünïcode user", &"x".repeat(UserId::MAX_LEN)] {
            assert_eq!(UserId::parse(good).map(|id| id.to_string()), Some(good.to_owned()));
        }
        for bad in ["", " u1", "u1 ", "#service", "a\nb", &"x".repeat(UserId::MAX_LEN + 1)] {
            assert_eq!(UserId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn platform_item_ids_are_plain_text() {
        for good in ["prf_1", "#profile", "Ünïcode", &"x".repeat(MAX_PLATFORM_ID_LEN)] {
            assert_eq!(ProfileId::parse(good).map(|id| id.to_string()), Some(good.to_owned()));
            assert_eq!(AssessmentId::parse(good).map(|id| id.to_string()), Some(good.to_owned()));
        }
        for bad in ["", " a1", "a1 ", "a\nb", &"x".repeat(MAX_PLATFORM_ID_LEN + 1)] {
            assert_eq!(ProfileId::parse(bad), None, "{bad:?}");
            assert_eq!(AssessmentId::parse(bad), None, "{bad:?}");
        }
        assert!(ProfileId::generate().as_str().starts_with(PROFILE));
        assert!(serde_json::from_str::<AssessmentId>("\"\"").is_err());
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
