//! Reading a request body as JSON: its media type, then its syntax, strictly. An object
//! that repeats a key, at any depth, is refused: serde_json would keep the last value, so a
//! validated field could differ from the one another reader of the same body sees.

use lambda_http::http::HeaderValue;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::ApiError;

/// The body as JSON: the media type must be JSON (a missing `Content-Type` is read as
/// JSON, and parameters such as `charset` are allowed) and the syntax valid and strict.
pub(super) fn parse(content_type: Option<&HeaderValue>, body: &[u8]) -> Result<Value, ApiError> {
    if let Some(content_type) = content_type {
        let essence = content_type.to_str().unwrap_or_default().split(';').next().unwrap_or_default();
        if !essence.trim().eq_ignore_ascii_case("application/json") {
            return Err(ApiError::UnsupportedMediaType);
        }
    }
    match serde_json::from_slice(body) {
        Ok(StrictJson(value)) => Ok(value),
        // The only data error StrictJson raises: the syntax itself is valid.
        Err(err) if err.is_data() => Err(ApiError::InvalidJson("An object in the request body repeats a key.")),
        Err(_) => Err(ApiError::InvalidJson("The request body is not valid JSON.")),
    }
}

/// A JSON value parsed strictly: an object that repeats a key is an error.
struct StrictJson(Value);

impl<'de> Deserialize<'de> for StrictJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictJsonVisitor).map(StrictJson)
    }
}

struct StrictJsonVisitor;

impl<'de> Visitor<'de> for StrictJsonVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Value, A::Error> {
        let mut array = Vec::new();
        while let Some(StrictJson(item)) = items.next_element()? {
            array.push(item);
        }
        Ok(Value::Array(array))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = entries.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom("an object repeats a key"));
            }
            let StrictJson(value) = entries.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPEATS: &str = "An object in the request body repeats a key.";
    const INVALID: &str = "The request body is not valid JSON.";

    /// The message of an `InvalidJson` refusal, or the code of another one.
    fn refusal(result: Result<Value, ApiError>) -> Result<Value, &'static str> {
        result.map_err(|err| match err {
            ApiError::InvalidJson(message) => message,
            other => other.code(),
        })
    }

    #[test]
    fn valid_json_without_repeated_keys_reads_as_serde_json_reads_it() {
        let bodies = [
            r#"{"url":"https://example.com/hook","events":["profile.updated"]}"#,
            r#"{"a":{"b":{"c":[1,-2,3.5,18446744073709551615,-9223372036854775808]}},"d":null,"e":true}"#,
            r#"{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}"#,
            r#"{"\u00e9":"\ud83d\ude00","é2":"x"}"#,
            " \n\t{ } \n",
            "[]",
            "[[[]]]",
            r#""just a string""#,
            "42",
            "null",
        ];
        for body in bodies {
            let expected: Value = serde_json::from_str(body).expect(body);
            assert_eq!(refusal(parse(None, body.as_bytes())), Ok(expected), "{body}");
        }
    }

    #[test]
    fn a_repeated_key_at_any_depth_is_refused() {
        let bodies = [
            r#"{"action":"read","action":"dismiss"}"#,
            r#"{"a":{"b":1,"b":1}}"#,
            r#"[{"ok":1},{"a":1,"a":2}]"#,
            r#"{"a":[[{"deep":{"x":1,"x":2}}]]}"#,
            // The same key once escaped: keys compare after decoding.
            r#"{"a":1,"\u0061":2}"#,
            r#"{"enabled":true,"enabled":true}"#,
        ];
        for body in bodies {
            assert_eq!(refusal(parse(None, body.as_bytes())), Err(REPEATS), "{body}");
        }
    }

    #[test]
    fn broken_syntax_is_not_valid_json() {
        let bodies: [&[u8]; 8] = [
            b"",
            b"   ",
            br#"{"a":1"#,
            br#"{"a":1,}"#,
            br#"{"a":1} {"b":2}"#,
            br#"{'a':1}"#,
            b"NaN",
            b"{\"a\":\"\xff\"}",
        ];
        for body in bodies {
            assert_eq!(refusal(parse(None, body)), Err(INVALID), "{}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn only_a_json_media_type_is_read() {
        let cases = [
            ("application/json", Ok(())),
            ("Application/JSON", Ok(())),
            ("application/json; charset=utf-8", Ok(())),
            (" application/json ;charset=UTF-8", Ok(())),
            ("text/plain", Err("request.unsupported_media_type")),
            ("application/json-patch+json", Err("request.unsupported_media_type")),
            ("application/x-www-form-urlencoded", Err("request.unsupported_media_type")),
            ("", Err("request.unsupported_media_type")),
        ];
        for (content_type, expected) in cases {
            let header = HeaderValue::from_str(content_type).unwrap();
            let result = refusal(parse(Some(&header), br#"{"a":1}"#)).map(|_| ());
            assert_eq!(result, expected, "{content_type:?}");
        }
        // A media type that is not text is not JSON either.
        let opaque = HeaderValue::from_bytes(b"application/json\xff").unwrap();
        assert_eq!(refusal(parse(Some(&opaque), b"{}")).map(|_| ()), Err("request.unsupported_media_type"));
    }

    #[test]
    fn the_media_type_is_checked_before_the_syntax() {
        let header = HeaderValue::from_static("text/plain");
        assert_eq!(refusal(parse(Some(&header), b"{not json")), Err("request.unsupported_media_type"));
    }
}
