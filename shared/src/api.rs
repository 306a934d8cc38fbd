//! The HTTP boundary shared by the three API functions: routing answers, authentication,
//! scopes, the rate limit, body limits, JSON parsing, the error body, and the request log.
//! Every error is mapped to its status and code here and nowhere else.

use std::future::Future;
use std::time::Instant;

use lambda_http::http::header::{
    HeaderName, HeaderValue, ALLOW, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE,
};
use lambda_http::http::{Method, StatusCode};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Serialize;
use serde_json::{json, Value};

use crate::alerts::AlertAction;
use crate::auth::{Authenticator, Principal};
use crate::config::Settings;
use crate::credentials::Scope;
use crate::excerpt::Excerpt;
use crate::ids::{self, UserId};
use crate::ratelimit::{RateLimitStatus, RateLimiter};
use crate::store::keys::KeyTable;
use crate::store::rate_limits::RateLimitTable;
use crate::store::StoreError;

pub const MAX_BODY_BYTES: usize = 64 * 1024;
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Every error the API answers with. `code()` and `status()` are the contract's table.
/// Messages quote client input only through [`Excerpt`].
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("No such resource.")]
    NotFound,
    #[error("Method not allowed; allowed: {allow}.")]
    MethodNotAllowed { allow: String },
    #[error("A valid API key is required: send 'Authorization: Bearer <key>'.")]
    Unauthorized,
    #[error("The API key lacks the scope '{0}'.")]
    Forbidden(Scope),
    #[error("Rate limit exceeded; retry in {retry_after} seconds.")]
    RateLimited { retry_after: u64 },
    #[error("The request body exceeds {MAX_BODY_BYTES} bytes.")]
    BodyTooLarge,
    #[error("{0}")]
    InvalidJson(&'static str),
    #[error("Send the body as application/json.")]
    UnsupportedMediaType,
    #[error("The cursor is not valid for this list.")]
    InvalidCursor,
    #[error("The query parameter 'id' is required.")]
    AlertMissingId,
    #[error("The action must be one of: {}.", AlertAction::names())]
    AlertInvalidAction,
    #[error("No alert with id '{}'.", Excerpt(.0))]
    AlertNotFound(String),
    #[error("Send at least one known preference with a boolean value.")]
    NoPreferencesProvided,
    #[error("The preference '{0}' must be a boolean.")]
    InvalidPreference(&'static str),
    #[error("'{}' is not a known preference.", Excerpt(.0))]
    UnknownPreference(String),
    #[error("Both 'url' and 'events' are required.")]
    WebhookMissingRequiredFields,
    #[error("Invalid url: {0}.")]
    WebhookInvalidUrl(crate::webhooks::InvalidUrl),
    #[error("Invalid events: {0}.")]
    WebhookInvalidEvents(crate::webhooks::InvalidEvents),
    #[error("A user can have at most {} webhook subscriptions.", crate::webhooks::MAX_SUBSCRIPTIONS_PER_USER)]
    WebhookLimitExceeded,
    #[error("The query parameter 'id' is required.")]
    WebhookMissingSubscriptionId,
    #[error("No webhook subscription with id '{}'.", Excerpt(.0))]
    WebhookNotFound(String),
    #[error("Invalid grace period: {0}.")]
    WebhookInvalidGracePeriod(crate::rotation::InvalidGracePeriod),
    #[error("The status must be one of: pending, succeeded, failed, skipped.")]
    WebhookInvalidStatus,
    #[error("The query parameter 'id' is required.")]
    WebhookMissingDeliveryId,
    #[error("No webhook delivery with id '{}'.", Excerpt(.0))]
    WebhookDeliveryNotFound(String),
    #[error("Invalid recovery window: {0}.")]
    WebhookInvalidRecoverWindow(crate::delivery::recovery::InvalidWindow),
    #[error("The subscription is disabled; enable it before recovering its deliveries.")]
    WebhookSubscriptionDisabled,
    #[error("Nothing to change: send at least one of url, events and enabled.")]
    WebhookNoChanges,
    #[error("'{}' cannot be changed; send only url, events and enabled.", Excerpt(.0))]
    WebhookUnknownField(String),
    #[error("'enabled' must be true or false.")]
    WebhookInvalidEnabled,
    #[error("Internal error.")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        ApiError::Internal(Box::new(err))
    }
}

impl From<crate::sealing::SealError> for ApiError {
    fn from(err: crate::sealing::SealError) -> Self {
        ApiError::Internal(Box::new(err))
    }
}

impl From<crate::queue::QueueError> for ApiError {
    fn from(err: crate::queue::QueueError) -> Self {
        ApiError::Internal(Box::new(err))
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            NotFound | AlertNotFound(_) | WebhookNotFound(_) | WebhookDeliveryNotFound(_) => StatusCode::NOT_FOUND,
            MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Forbidden(_) => StatusCode::FORBIDDEN,
            RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            InvalidJson(_)
            | UnsupportedMediaType
            | InvalidCursor
            | AlertMissingId
            | AlertInvalidAction
            | NoPreferencesProvided
            | InvalidPreference(_)
            | UnknownPreference(_)
            | WebhookMissingRequiredFields
            | WebhookInvalidUrl(_)
            | WebhookInvalidEvents(_)
            | WebhookLimitExceeded
            | WebhookMissingSubscriptionId
            | WebhookInvalidGracePeriod(_)
            | WebhookInvalidStatus
            | WebhookMissingDeliveryId
            | WebhookInvalidRecoverWindow(_)
            | WebhookSubscriptionDisabled
            | WebhookNoChanges
            | WebhookUnknownField(_)
            | WebhookInvalidEnabled => StatusCode::BAD_REQUEST,
        }
    }

    pub fn code(&self) -> &'static str {
        use ApiError::*;
        match self {
            NotFound => "not_found",
            MethodNotAllowed { .. } => "method_not_allowed",
            Unauthorized => "auth.unauthorized",
            Forbidden(_) => "auth.forbidden",
            RateLimited { .. } => "rate_limited",
            BodyTooLarge => "request.body_too_large",
            InvalidJson(_) => "request.invalid_json",
            UnsupportedMediaType => "request.unsupported_media_type",
            InvalidCursor => "request.invalid_cursor",
            AlertMissingId => "alerts.missing_id",
            AlertInvalidAction => "alerts.invalid_action",
            AlertNotFound(_) => "alerts.not_found",
            NoPreferencesProvided => "data_sharing.no_preferences_provided",
            InvalidPreference(_) => "data_sharing.invalid_preference",
            UnknownPreference(_) => "data_sharing.unknown_preference",
            WebhookMissingRequiredFields => "webhooks.missing_required_fields",
            WebhookInvalidUrl(_) => "webhooks.invalid_url",
            WebhookInvalidEvents(_) => "webhooks.invalid_events",
            WebhookLimitExceeded => "webhooks.limit_exceeded",
            WebhookMissingSubscriptionId => "webhooks.missing_subscription_id",
            WebhookNotFound(_) => "webhooks.not_found",
            WebhookInvalidGracePeriod(_) => "webhooks.invalid_grace_period",
            WebhookInvalidStatus => "webhooks.invalid_status",
            WebhookMissingDeliveryId => "webhooks.missing_delivery_id",
            WebhookDeliveryNotFound(_) => "webhooks.delivery_not_found",
            WebhookInvalidRecoverWindow(_) => "webhooks.invalid_recover_window",
            WebhookSubscriptionDisabled => "webhooks.subscription_disabled",
            WebhookNoChanges => "webhooks.no_changes",
            WebhookUnknownField(_) => "webhooks.unknown_field",
            WebhookInvalidEnabled => "webhooks.invalid_enabled",
            Internal(_) => "internal_error",
        }
    }

    fn headers(&self) -> Vec<(HeaderName, String)> {
        match self {
            ApiError::MethodNotAllowed { allow } => vec![(ALLOW, allow.clone())],
            ApiError::Unauthorized => vec![(WWW_AUTHENTICATE, r#"Bearer realm="api""#.into())],
            ApiError::Forbidden(scope) => {
                vec![(WWW_AUTHENTICATE, format!(r#"Bearer realm="api", error="insufficient_scope", scope="{scope}""#))]
            }
            ApiError::RateLimited { retry_after } => vec![(RETRY_AFTER, retry_after.to_string())],
            _ => Vec::new(),
        }
    }
}

impl From<crate::webhooks::InvalidChanges> for ApiError {
    fn from(err: crate::webhooks::InvalidChanges) -> Self {
        use crate::webhooks::InvalidChanges::*;
        match err {
            NoChanges => ApiError::WebhookNoChanges,
            UnknownField(name) => ApiError::WebhookUnknownField(name),
            InvalidEnabled => ApiError::WebhookInvalidEnabled,
            Url(invalid) => ApiError::WebhookInvalidUrl(invalid),
            Events(invalid) => ApiError::WebhookInvalidEvents(invalid),
        }
    }
}

impl From<crate::preferences::PreferenceError> for ApiError {
    fn from(err: crate::preferences::PreferenceError) -> Self {
        use crate::preferences::PreferenceError::*;
        match err {
            NoPreferencesProvided => ApiError::NoPreferencesProvided,
            InvalidPreference(name) => ApiError::InvalidPreference(name),
            UnknownPreference(name) => ApiError::UnknownPreference(name),
        }
    }
}

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
}

/// One path and the operations served on it: `(method, required scope, operation)`. A
/// function serves one or more of them.
pub struct Resource<Op: 'static> {
    pub path: &'static str,
    pub operations: &'static [(Method, Scope, Op)],
}

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
        if let Some(content_type) = self.request.headers().get(CONTENT_TYPE) {
            let essence = content_type.to_str().unwrap_or_default().split(';').next().unwrap_or_default();
            if !essence.trim().eq_ignore_ascii_case("application/json") {
                return Err(ApiError::UnsupportedMediaType);
            }
        }
        match serde_json::from_slice(body_bytes(self.request.body())) {
            Ok(StrictJson(value)) => Ok(value),
            // The only data error StrictJson raises: the syntax itself is valid.
            Err(err) if err.is_data() => Err(ApiError::InvalidJson("An object in the request body repeats a key.")),
            Err(_) => Err(ApiError::InvalidJson("The request body is not valid JSON.")),
        }
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

/// A JSON value parsed strictly: an object that repeats a key, at any depth, is an error
/// (serde_json would keep the last value, so a validated field could differ from the one
/// another reader of the same body sees).
struct StrictJson(Value);

impl<'de> Deserialize<'de> for StrictJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictJsonVisitor).map(StrictJson)
    }
}

struct StrictJsonVisitor;

impl<'de> Visitor<'de> for StrictJsonVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
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

fn body_bytes(body: &Body) -> &[u8] {
    match body {
        Body::Empty => &[],
        Body::Text(text) => text.as_bytes(),
        Body::Binary(bytes) => bytes,
        _ => &[],
    }
}

/// The checks in front of every operation, in the contract's order.
pub struct Front {
    authenticator: Authenticator,
    limiter: RateLimiter,
}

impl Front {
    pub fn new(dynamodb: &aws_sdk_dynamodb::Client, settings: &Settings) -> Self {
        let keys = KeyTable::new(dynamodb.clone(), &settings.tables.keys);
        let counters = RateLimitTable::new(dynamodb.clone(), &settings.tables.rate_limits);
        Self {
            authenticator: Authenticator::new(keys),
            limiter: RateLimiter::new(counters, settings.rate_limit_per_minute, settings.rate_limit_window),
        }
    }

    /// Answers `request` for the function's `resources`: the checks, then `operation`, then
    /// the request log.
    pub async fn serve<Op, F, Fut>(&self, resources: &[Resource<Op>], request: Request, operation: F) -> Response<Body>
    where
        Op: Copy,
        F: FnOnce(Op, Call) -> Fut,
        Fut: Future<Output = Result<Reply, ApiError>>,
    {
        let started = Instant::now();
        let request_id = request_id_of(&request);
        let route = format!("{} {}", request.method(), request.uri().path());
        let mut rate_limit = None;
        let mut user_id = None;
        let outcome = async {
            let op = route_of(resources, &request)?;
            let principal = self.authenticate(&request).await?;
            user_id = Some(principal.user_id.clone());
            let (method, scope, op) = op;
            if !principal.scopes.contains(scope) {
                // Refused requests change nothing, the rate-limit count included.
                rate_limit = Some(self.limiter.peek(&principal.key_hash).await?);
                return Err(ApiError::Forbidden(scope));
            }
            let key = principal.key_hash.clone();
            let too_large = body_bytes(request.body()).len() > MAX_BODY_BYTES;
            let call = Call { request, principal };
            // A read changes nothing, so it need not wait for the count: both go out at
            // once and a 429 drops what was read (one round trip instead of two). A key this
            // instance knows to be refused is answered from memory, not read for. A write waits for the
            // count, since a refused write must change nothing.
            if method == Method::GET && !too_large && !self.limiter.known_refused(&key) {
                let (status, outcome) = tokio::join!(self.limiter.count(&key), operation(op, call));
                let status = status?;
                rate_limit = Some(status);
                return within_limit(status).and(outcome);
            }
            let status = self.limiter.count(&key).await?;
            rate_limit = Some(status);
            within_limit(status)?;
            if too_large {
                return Err(ApiError::BodyTooLarge);
            }
            operation(op, call).await
        }
        .await;
        let status = match &outcome {
            Ok(reply) => reply.status,
            Err(err) => err.status(),
        };
        if let Err(ApiError::Internal(cause)) = &outcome {
            tracing::error!(request_id = %request_id, route = %route, error = %cause, "request failed");
        }
        let mut response = match outcome {
            Ok(reply) => json_response(reply.status, &reply.body),
            Err(err) => error_response(&err, &request_id),
        };
        let headers = response.headers_mut();
        insert(headers, REQUEST_ID, &request_id);
        if let Some(limit) = rate_limit {
            insert(headers, HeaderName::from_static("ratelimit-limit"), &limit.limit.to_string());
            insert(headers, HeaderName::from_static("ratelimit-remaining"), &limit.remaining.to_string());
            insert(headers, HeaderName::from_static("ratelimit-reset"), &limit.reset_seconds.to_string());
        }
        log_request(&request_id, &route, status, started, user_id.as_ref());
        response
    }

    /// Exactly one `Authorization` header: with two, which one names the caller would
    /// depend on who reads the request.
    async fn authenticate(&self, request: &Request) -> Result<Principal, ApiError> {
        let mut headers = request.headers().get_all(AUTHORIZATION).iter();
        let header = match (headers.next(), headers.next()) {
            (Some(value), None) => value.to_str().ok(),
            _ => None,
        };
        self.authenticator.authenticate(header).await?.ok_or(ApiError::Unauthorized)
    }
}

/// Answers a request that needs no key (the portal's files, contract section 14): `answer`
/// gives the response or the refusal, which gets the error body; `X-Request-Id` and the
/// request log as on every other answer.
pub fn serve_without_key(
    request: &Request,
    answer: impl FnOnce() -> Result<Response<Body>, ApiError>,
) -> Response<Body> {
    let started = Instant::now();
    let request_id = request_id_of(request);
    let mut response = answer().unwrap_or_else(|err| error_response(&err, &request_id));
    insert(response.headers_mut(), REQUEST_ID, &request_id);
    let route = format!("{} {}", request.method(), request.uri().path());
    log_request(&request_id, &route, response.status(), started, None);
    response
}

/// The request log's line for one answered request.
fn log_request(request_id: &str, route: &str, status: StatusCode, started: Instant, user_id: Option<&UserId>) {
    tracing::info!(
        request_id = %request_id,
        route = %route,
        status = status.as_u16(),
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        user_id = user_id.map_or("-", UserId::as_str),
        "request"
    );
}

/// The refusal of a counted request that is over the limit.
fn within_limit(status: RateLimitStatus) -> Result<(), ApiError> {
    if status.exceeded {
        return Err(ApiError::RateLimited { retry_after: status.reset_seconds });
    }
    Ok(())
}

fn route_of<Op: Copy>(resources: &[Resource<Op>], request: &Request) -> Result<(Method, Scope, Op), ApiError> {
    let path = request.uri().path();
    let resource = resources.iter().find(|resource| resource.path == path).ok_or(ApiError::NotFound)?;
    let found = resource.operations.iter().find(|(method, _, _)| method == request.method());
    found.cloned().ok_or_else(|| ApiError::MethodNotAllowed {
        allow: resource.operations.iter().map(|(method, _, _)| method.as_str()).collect::<Vec<_>>().join(", "),
    })
}

/// The API Gateway request id when there is one, otherwise a fresh one.
fn request_id_of(request: &Request) -> String {
    match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(context)) => context.request_id.clone(),
        _ => None,
    }
    .unwrap_or_else(|| ids::new_id("req_"))
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Body::Text(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The contract's error body. Internal errors say nothing of their cause.
fn error_response(err: &ApiError, request_id: &str) -> Response<Body> {
    let body = json!({"error": {"code": err.code(), "message": err.to_string(), "requestId": request_id}});
    let mut response = json_response(err.status(), &body);
    for (name, value) in err.headers() {
        insert(response.headers_mut(), name, &value);
    }
    response
}

fn insert(headers: &mut lambda_http::http::HeaderMap, name: HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}
