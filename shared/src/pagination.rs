//! Pagination shared by every list: the page size, and tamper-proof cursors that hold the
//! last id of a page and an HMAC binding it to the user and the list (its filters included),
//! so a cursor cannot be forged, edited or reused on another list.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::ids::UserId;
use crate::mac;

pub const DEFAULT_PAGE_SIZE: u32 = 50;
pub const MAX_PAGE_SIZE: u32 = 100;

/// `limit`: 1–100, default 50; out-of-range values are clamped, unreadable ones ignored.
pub fn page_size(value: Option<&str>) -> u32 {
    match value.map(str::trim).and_then(|text| text.parse::<i64>().ok()) {
        Some(n) => n.clamp(1, i64::from(MAX_PAGE_SIZE)) as u32,
        None => DEFAULT_PAGE_SIZE,
    }
}

const TAG_LEN: usize = 32;

#[derive(Debug, PartialEq, Eq)]
pub struct InvalidCursor;

pub struct CursorKey(Vec<u8>);

impl CursorKey {
    pub fn new(secret: &str) -> Self {
        CursorKey(secret.as_bytes().to_vec())
    }

    /// A cursor after `last_id` on `list`, a name that says which list with which filters.
    pub fn seal(&self, user_id: &UserId, list: &str, last_id: &impl AsRef<str>) -> String {
        let last_id = last_id.as_ref();
        let tag = mac::hmac_sha256(&self.0, &message(user_id, list, last_id));
        let mut bytes = last_id.as_bytes().to_vec();
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The id after which the next page starts, as `parse` reads it.
    pub fn open<Id>(
        &self,
        user_id: &UserId,
        list: &str,
        cursor: &str,
        parse: impl Fn(&str) -> Option<Id>,
    ) -> Result<Id, InvalidCursor> {
        let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| InvalidCursor)?;
        if bytes.len() <= TAG_LEN {
            return Err(InvalidCursor);
        }
        let (id, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        let id = std::str::from_utf8(id).map_err(|_| InvalidCursor)?;
        if !mac::verify(&self.0, &message(user_id, list, id), tag) {
            return Err(InvalidCursor);
        }
        parse(id).ok_or(InvalidCursor)
    }
}

fn message(user_id: &UserId, list: &str, last_id: &str) -> Vec<u8> {
    format!("cursor.v1\n{user_id}\n{list}\n{last_id}").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ids::AlertId;

    const ID: &str = "alr_01JD0000000000000000000000";

    fn user(name: &str) -> UserId {
        UserId::parse(name).unwrap()
    }

    fn open(key: &CursorKey, user_id: &str, list: &str, cursor: &str) -> Result<AlertId, InvalidCursor> {
        key.open(&user(user_id), list, cursor, AlertId::parse)
    }

    #[test]
    fn page_size_defaults_and_clamps() {
        assert_eq!(page_size(None), 50);
        assert_eq!(page_size(Some("abc")), 50);
        assert_eq!(page_size(Some("0")), 1);
        assert_eq!(page_size(Some("-5")), 1);
        assert_eq!(page_size(Some("7")), 7);
        assert_eq!(page_size(Some("1000")), 100);
    }

    #[test]
    fn round_trips_for_the_same_user_and_filter() {
        let key = CursorKey::new("k".repeat(32).as_str());
        let cursor = key.seal(&user("u1"), "alerts/active", &ID);
        assert_eq!(open(&key, "u1", "alerts/active", &cursor), Ok(AlertId::parse(ID).unwrap()));
        let not_an_alert = key.seal(&user("u1"), "alerts/active", &"whk_01JD0000000000000000000000");
        assert_eq!(open(&key, "u1", "alerts/active", &not_an_alert), Err(InvalidCursor), "signed, but no alert id");
    }

    #[test]
    fn refuses_other_users_filters_keys_and_edits() {
        let key = CursorKey::new("k".repeat(32).as_str());
        let cursor = key.seal(&user("u1"), "alerts/active", &ID);
        assert_eq!(open(&key, "u2", "alerts/active", &cursor), Err(InvalidCursor));
        assert_eq!(open(&key, "u1", "alerts/all", &cursor), Err(InvalidCursor));
        let other_key = CursorKey::new("x".repeat(32).as_str());
        assert_eq!(open(&other_key, "u1", "alerts/active", &cursor), Err(InvalidCursor));

        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        bytes[5] ^= 1;
        let edited = URL_SAFE_NO_PAD.encode(bytes);
        assert_eq!(open(&key, "u1", "alerts/active", &edited), Err(InvalidCursor));
        for junk in ["", "!!!", "abc", &URL_SAFE_NO_PAD.encode([0u8; 32])] {
            assert_eq!(open(&key, "u1", "alerts/active", junk), Err(InvalidCursor), "{junk}");
        }
    }
}
