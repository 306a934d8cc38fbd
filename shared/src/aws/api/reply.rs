//! What goes back: a successful [`Reply`], the contract's error body, and either as a JSON
//! response.

use lambda_http::http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use lambda_http::http::{HeaderMap, StatusCode};
use lambda_http::{Body, Response};
use serde::Serialize;
use serde_json::{json, Value};

use super::ApiError;

/// A successful answer: a status and a JSON body.
pub struct Reply {
    status: StatusCode,
    body: Value,
}

impl Reply {
    pub fn ok(body: impl Serialize) -> Result<Self, ApiError> {
        Self::with_status(StatusCode::OK, body)
    }

    pub fn created(body: impl Serialize) -> Result<Self, ApiError> {
        Self::with_status(StatusCode::CREATED, body)
    }

    pub fn accepted(body: impl Serialize) -> Result<Self, ApiError> {
        Self::with_status(StatusCode::ACCEPTED, body)
    }

    fn with_status(status: StatusCode, body: impl Serialize) -> Result<Self, ApiError> {
        let body = serde_json::to_value(body).map_err(|e| ApiError::Internal(Box::new(e)))?;
        Ok(Reply { status, body })
    }

    pub(super) fn into_response(self) -> Response<Body> {
        json_response(self.status, &self.body)
    }
}

/// The contract's error body, with the headers of the error's status. Internal errors say
/// nothing of their cause.
pub(super) fn error_response(err: &ApiError, request_id: &str) -> Response<Body> {
    let body = json!({"error": {"code": err.code(), "message": err.to_string(), "requestId": request_id}});
    let mut response = json_response(err.status(), &body);
    for (name, value) in err.headers() {
        insert(response.headers_mut(), name, &value);
    }
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Body::Text(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Sets a header; a value that is not a valid header value is left out rather than sent.
pub(super) fn insert(headers: &mut HeaderMap, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use lambda_http::http::header::RETRY_AFTER;

    use super::*;

    fn body_of(response: &Response<Body>) -> Value {
        match response.body() {
            Body::Text(text) => serde_json::from_str(text).expect("a JSON body"),
            other => panic!("not a text body: {other:?}"),
        }
    }

    #[test]
    fn an_error_answers_with_its_status_code_message_request_id_and_headers() {
        let response = error_response(&ApiError::RateLimited { retry_after: 12 }, "req_1");
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(response.headers()[RETRY_AFTER], "12");
        let expected = json!({"error": {
            "code": "rate_limited",
            "message": "Rate limit exceeded; retry in 12 seconds.",
            "requestId": "req_1",
        }});
        assert_eq!(body_of(&response), expected);
    }

    #[test]
    fn a_reply_answers_with_its_status_and_body() {
        let cases = [
            (Reply::ok(json!({"a": 1})), StatusCode::OK),
            (Reply::created(json!({"a": 1})), StatusCode::CREATED),
            (Reply::accepted(json!({"a": 1})), StatusCode::ACCEPTED),
        ];
        for (reply, status) in cases {
            let response = reply.unwrap_or_else(|_| panic!("{status}")).into_response();
            assert_eq!((response.status(), body_of(&response)), (status, json!({"a": 1})));
            assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        }
    }

    #[test]
    fn a_header_value_that_cannot_be_sent_is_left_out() {
        let mut headers = HeaderMap::new();
        insert(&mut headers, RETRY_AFTER, "1\r\nSet-Cookie: x=y");
        assert!(headers.is_empty());
    }
}
