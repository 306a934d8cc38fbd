//! An admitted request as an operation sees it: its caller, its query parameters and its
//! body.

use lambda_http::http::header::CONTENT_TYPE;
use lambda_http::{Body, Request, RequestExt};
use serde_json::Value;

use super::{strict_json, ApiError};
use crate::auth::Principal;
use crate::ids::UserId;

/// An admitted request: routed, authenticated, in scope and within the rate limit.
pub struct Call {
    pub request: Request,
    pub principal: Principal,
}

impl Call {
    pub fn user_id(&self) -> &UserId {
        &self.principal.user_id
    }

    /// A query parameter; an empty value counts as missing.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.request
            .query_string_parameters_ref()
            .and_then(|params| params.first(name))
            .filter(|value| !value.is_empty())
    }

    /// The body as JSON: the media type must be JSON (a missing `Content-Type` is read as
    /// JSON) and the syntax valid.
    pub fn json_body(&self) -> Result<Value, ApiError> {
        strict_json::parse(self.request.headers().get(CONTENT_TYPE), body_bytes(self.request.body()))
    }

    /// The body as a JSON object.
    pub fn json_object(&self) -> Result<serde_json::Map<String, Value>, ApiError> {
        match self.json_body()? {
            Value::Object(map) => Ok(map),
            _ => Err(ApiError::InvalidJson("The request body must be a JSON object.")),
        }
    }

    /// The body as a JSON object, or `None` when there is none (an optional body).
    pub fn optional_json_object(&self) -> Result<Option<serde_json::Map<String, Value>>, ApiError> {
        if body_bytes(self.request.body()).is_empty() {
            return Ok(None);
        }
        self.json_object().map(Some)
    }
}

pub(super) fn body_bytes(body: &Body) -> &[u8] {
    match body {
        Body::Empty => &[],
        Body::Text(text) => text.as_bytes(),
        Body::Binary(bytes) => bytes,
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::credentials::{ApiKey, Scopes};

    fn call(query: &[(&str, &str)], body: Body) -> Call {
        let mut params: HashMap<String, Vec<String>> = HashMap::new();
        for (name, value) in query {
            params.entry(name.to_string()).or_default().push(value.to_string());
        }
        let principal = Principal {
            user_id: UserId::parse("alice").unwrap(),
            scopes: Scopes::all(),
            key_hash: ApiKey::generate().hash(),
            expires_at: None,
        };
        Call { request: Request::new(body).with_query_string_parameters(params), principal }
    }

    #[test]
    fn an_empty_query_value_counts_as_missing() {
        let call = call(&[("id", ""), ("limit", "5"), ("cursor", "c1"), ("cursor", "c2")], Body::Empty);
        assert_eq!(call.query("id"), None);
        assert_eq!(call.query("limit"), Some("5"));
        assert_eq!(call.query("cursor"), Some("c1"));
        assert_eq!(call.query("status"), None);
    }

    #[test]
    fn an_object_is_required_where_one_is_and_optional_where_it_may_be_left_out() {
        let not_an_object = "The request body must be a JSON object.";
        let cases: [(Body, Result<Option<usize>, &str>); 5] = [
            (Body::Empty, Ok(None)),
            (Body::Text(r#"{"a":1,"b":2}"#.into()), Ok(Some(2))),
            (Body::Binary(b"{}".to_vec()), Ok(Some(0))),
            (Body::Text("[]".into()), Err(not_an_object)),
            (Body::Text("null".into()), Err(not_an_object)),
        ];
        for (body, expected) in cases {
            let call = call(&[], body);
            let optional = call.optional_json_object().map(|object| object.map(|map| map.len()));
            let optional = optional.map_err(|err| match err {
                ApiError::InvalidJson(message) => message,
                other => other.code(),
            });
            assert_eq!(optional, expected, "{:?}", call.request.body());
            // Where the object is required, no body is not valid JSON.
            let required = call.json_object().map(|map| map.len()).map_err(|err| err.to_string());
            let expected = match expected {
                Ok(None) => Err("The request body is not valid JSON.".to_owned()),
                Ok(Some(len)) => Ok(len),
                Err(message) => Err(message.to_owned()),
            };
            assert_eq!(required, expected, "{:?}", call.request.body());
        }
    }
}
