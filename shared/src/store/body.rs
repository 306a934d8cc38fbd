//! How a delivery record keeps the body it sends (contract section 9): the exact bytes,
//! as text, or deflated when that is smaller. A write to a record costs one unit per 1 KB of
//! the item, and a record holding a 1 KB body as text is over 1 KB, so each of its writes
//! would cost two; JSON with its repeated names and words deflates to well under that.
//! Deflate (raw, RFC 1951) through `flate2`'s pure-Rust backend: no C library to build for
//! Lambda, the format every platform reads, and for a body of a few hundred bytes to a few
//! KB it gains about what zstd does without a dictionary. Raw, without a zlib or gzip
//! header and checksum: DynamoDB keeps the bytes intact, and each header would cost bytes
//! in every write.

use std::io::{Read, Write};

use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;

/// The body as a record keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeptBody {
    /// The bytes as text (a body is JSON, so UTF-8).
    Text(String),
    /// The bytes deflated.
    Deflated(Vec<u8>),
}

impl KeptBody {
    /// The smaller of the two forms; text when deflating gains nothing (a short body).
    pub fn of(body: &[u8]) -> Self {
        let mut encoder = DeflateEncoder::new(Vec::new(), Compression::best());
        let deflated = encoder.write_all(body).and_then(|()| encoder.finish());
        match deflated {
            Ok(deflated) if deflated.len() < body.len() => KeptBody::Deflated(deflated),
            _ => KeptBody::Text(String::from_utf8_lossy(body).into_owned()),
        }
    }

    /// The exact bytes that were kept.
    pub fn bytes(&self) -> std::io::Result<Vec<u8>> {
        match self {
            KeptBody::Text(text) => Ok(text.as_bytes().to_vec()),
            KeptBody::Deflated(deflated) => {
                let mut bytes = Vec::new();
                DeflateDecoder::new(deflated.as_slice()).read_to_end(&mut bytes)?;
                Ok(bytes)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_body_is_kept_deflated_and_read_back_byte_for_byte() {
        let body = serde_json::json!({
            "id": "evt_01JDQ41B2C3D4E5F6G7H8J9K0M", "type": "webhook.endpoint.failing",
            "createdAt": "2026-11-27T08:00:00.000Z",
            "data": {"userId": "u1", "subscriptionId": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K",
                "url": "https://hooks.example.com/career/events",
                "lastError": "answered 503: the service is unavailable, the service is down for maintenance"}
        })
        .to_string();
        let kept = KeptBody::of(body.as_bytes());
        let KeptBody::Deflated(deflated) = &kept else { panic!("not deflated: {kept:?}") };
        assert!(deflated.len() < body.len());
        assert_eq!(kept.bytes().unwrap(), body.as_bytes());
    }

    #[test]
    fn a_body_that_deflating_does_not_shrink_is_kept_as_text() {
        let kept = KeptBody::of(b"{}");
        assert_eq!(kept, KeptBody::Text("{}".to_owned()));
        assert_eq!(kept.bytes().unwrap(), b"{}");
    }
}
