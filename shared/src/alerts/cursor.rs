//! Tamper-proof pagination cursors: the last alert id of a page and an HMAC that binds it
//! to the user and the list filter, so a cursor cannot be forged, edited or reused elsewhere.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use super::ListFilter;
use crate::signing;

const TAG_LEN: usize = 32;

#[derive(Debug, PartialEq, Eq)]
pub struct InvalidCursor;

pub struct CursorKey(Vec<u8>);

impl CursorKey {
    pub fn new(secret: &str) -> Self {
        CursorKey(secret.as_bytes().to_vec())
    }

    pub fn seal(&self, user_id: &str, filter: ListFilter, last_alert_id: &str) -> String {
        let tag = signing::hmac_sha256(&self.0, &message(user_id, filter, last_alert_id));
        let mut bytes = last_alert_id.as_bytes().to_vec();
        bytes.extend_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The alert id after which the next page starts.
    pub fn open(&self, user_id: &str, filter: ListFilter, cursor: &str) -> Result<String, InvalidCursor> {
        let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| InvalidCursor)?;
        if bytes.len() <= TAG_LEN {
            return Err(InvalidCursor);
        }
        let (id, tag) = bytes.split_at(bytes.len() - TAG_LEN);
        let id = std::str::from_utf8(id).map_err(|_| InvalidCursor)?;
        if !signing::verify(&self.0, &message(user_id, filter, id), tag) {
            return Err(InvalidCursor);
        }
        Ok(id.to_owned())
    }
}

fn message(user_id: &str, filter: ListFilter, alert_id: &str) -> Vec<u8> {
    format!("cursor.v1\n{user_id}\n{}\n{alert_id}", filter.name()).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "alr_01JD0000000000000000000000";

    #[test]
    fn round_trips_for_the_same_user_and_filter() {
        let key = CursorKey::new("k".repeat(32).as_str());
        let cursor = key.seal("u1", ListFilter::Active, ID);
        assert_eq!(key.open("u1", ListFilter::Active, &cursor), Ok(ID.to_owned()));
    }

    #[test]
    fn refuses_other_users_filters_keys_and_edits() {
        let key = CursorKey::new("k".repeat(32).as_str());
        let cursor = key.seal("u1", ListFilter::Active, ID);
        assert_eq!(key.open("u2", ListFilter::Active, &cursor), Err(InvalidCursor));
        assert_eq!(key.open("u1", ListFilter::All, &cursor), Err(InvalidCursor));
        let other_key = CursorKey::new("x".repeat(32).as_str());
        assert_eq!(other_key.open("u1", ListFilter::Active, &cursor), Err(InvalidCursor));

        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        bytes[5] ^= 1;
        let edited = URL_SAFE_NO_PAD.encode(bytes);
        assert_eq!(key.open("u1", ListFilter::Active, &edited), Err(InvalidCursor));
        for junk in ["", "!!!", "abc", &URL_SAFE_NO_PAD.encode([0u8; 32])] {
            assert_eq!(key.open("u1", ListFilter::Active, junk), Err(InvalidCursor), "{junk}");
        }
    }
}
