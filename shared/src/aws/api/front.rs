//! [`Front::serve`]: the checks in front of every operation, in the contract's order (route,
//! authentication, scope, rate limit, body size), then the operation, then the answer's
//! headers and the request log.

use std::future::Future;
use std::time::Instant;

use lambda_http::http::header::{HeaderName, AUTHORIZATION};
use lambda_http::http::StatusCode;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};

use super::call::body_bytes;
use super::metering::{self, Meter};
use super::reply::{error_response, insert};
use super::route::route_of;
use super::{ApiError, Call, Reply, Resource, MAX_BODY_BYTES};
use crate::auth::{Authenticator, Principal};
use crate::config::{ConfigError, Settings, Table};
use crate::ids::{self, UserId};
use crate::ratelimit::{RateLimitStatus, RateLimiter};
use crate::store::keys::KeyTable;
use crate::store::rate_limits::RateLimitTable;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The checks in front of every operation, in the contract's order.
pub struct Front {
    authenticator: Authenticator,
    meter: Meter,
}

/// What the checks learnt of the caller, for the answer's headers and the request log.
#[derive(Default)]
struct Caller {
    user_id: Option<UserId>,
    rate_limit: Option<RateLimitStatus>,
}

impl Front {
    pub fn new(dynamodb: &aws_sdk_dynamodb::Client, settings: &Settings) -> Result<Self, ConfigError> {
        let [keys, counters] = settings.tables.require([Table::Keys, Table::RateLimits])?;
        let (keys, counters) = (KeyTable::new(dynamodb.clone(), keys), RateLimitTable::new(dynamodb.clone(), counters));
        Ok(Self {
            authenticator: Authenticator::new(keys),
            meter: Meter::new(RateLimiter::new(counters, settings.rate_limit_per_minute, settings.rate_limit_window)),
        })
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
        let route = route_name(&request);
        let mut caller = Caller::default();
        let outcome = self.answer(resources, request, operation, &mut caller).await;
        let response = respond(outcome, &request_id, &route, caller.rate_limit.as_ref());
        log_request(&request_id, &route, response.status(), started, caller.user_id.as_ref());
        response
    }

    /// Routes, authenticates, then runs the operation under the rate limit's metering
    /// (which checks the scope first); the body's size is checked last, after the count.
    async fn answer<Op, F, Fut>(
        &self,
        resources: &[Resource<Op>],
        request: Request,
        operation: F,
        caller: &mut Caller,
    ) -> Result<Reply, ApiError>
    where
        Op: Copy,
        F: FnOnce(Op, Call) -> Fut,
        Fut: Future<Output = Result<Reply, ApiError>>,
    {
        let (method, scope, op) = route_of(resources, request.method(), request.uri().path())?;
        let principal = self.authenticate(&request).await?;
        caller.user_id = Some(principal.user_id.clone());
        let key = principal.key_hash.clone();
        let missing_scope = (!principal.scopes.contains(scope)).then_some(scope);
        let call = Call { request, principal };
        let run = || async move {
            if body_bytes(call.request.body()).len() > MAX_BODY_BYTES {
                return Err(ApiError::BodyTooLarge);
            }
            operation(op, call).await
        };
        self.meter.answer(&key, &method, missing_scope, run, &mut caller.rate_limit).await
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

/// The outcome as a response: the reply or the error body, with the request id and, for a
/// known key, the rate limit's headers. An internal error is logged with its cause, which
/// the answer never shows.
fn respond(
    outcome: Result<Reply, ApiError>,
    request_id: &str,
    route: &str,
    rate_limit: Option<&RateLimitStatus>,
) -> Response<Body> {
    let mut response = match outcome {
        Ok(reply) => reply.into_response(),
        Err(err) => {
            if let ApiError::Internal(cause) = &err {
                tracing::error!(request_id = %request_id, route = %route, error = %cause, "request failed");
            }
            error_response(&err, request_id)
        }
    };
    let headers = response.headers_mut();
    insert(headers, REQUEST_ID, request_id);
    for (name, value) in rate_limit.map(metering::headers).into_iter().flatten() {
        insert(headers, name, &value);
    }
    response
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
    log_request(&request_id, &route_name(request), response.status(), started, None);
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

/// The request as the log names it: its method and path.
fn route_name(request: &Request) -> String {
    format!("{} {}", request.method(), request.uri().path())
}

/// The API Gateway request id when there is one, otherwise a fresh one.
fn request_id_of(request: &Request) -> String {
    match request.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(context)) => context.request_id.clone(),
        _ => None,
    }
    .unwrap_or_else(|| ids::new_id("req_"))
}

#[cfg(test)]
mod tests {
    use lambda_http::aws_lambda_events::apigw::ApiGatewayV2httpRequestContext;
    use lambda_http::http::header::WWW_AUTHENTICATE;

    use super::*;

    #[test]
    fn the_request_id_is_api_gateways_when_there_is_one() {
        let mut context = ApiGatewayV2httpRequestContext::default();
        context.request_id = Some("VZ8kXj2QoAMEVfA=".into());
        let from_gateway = Request::default().with_request_context(RequestContext::ApiGatewayV2(context));
        assert_eq!(request_id_of(&from_gateway), "VZ8kXj2QoAMEVfA=");
        let local = request_id_of(&Request::default());
        assert!(local.starts_with("req_"), "{local}");
        assert_ne!(local, request_id_of(&Request::default()));
    }

    #[test]
    fn every_answer_carries_the_request_id_and_a_known_keys_answers_the_rate_limit() {
        let status = RateLimitStatus { limit: 600, remaining: 12, reset_seconds: 3, exceeded: false };
        let cases = [
            (Reply::ok("fine"), Some(status), StatusCode::OK),
            (Err(ApiError::Forbidden(crate::credentials::Scope::ReadAlerts)), Some(status), StatusCode::FORBIDDEN),
            (Err(ApiError::Unauthorized), None, StatusCode::UNAUTHORIZED),
            (Err(ApiError::NotFound), None, StatusCode::NOT_FOUND),
        ];
        for (outcome, rate_limit, expected) in cases {
            let response = respond(outcome, "req_1", "GET /api/v1/alerts", rate_limit.as_ref());
            assert_eq!(response.status(), expected);
            let headers = response.headers();
            assert_eq!(headers[REQUEST_ID], "req_1");
            let remaining = headers.get("ratelimit-remaining").map(|value| value.to_str().unwrap());
            assert_eq!(remaining, rate_limit.map(|_| "12"), "{expected}");
            let limit_headers = headers.keys().filter(|name| name.as_str().starts_with("ratelimit-")).count();
            assert_eq!(limit_headers, if rate_limit.is_some() { 3 } else { 0 });
            assert_eq!(
                headers.contains_key(WWW_AUTHENTICATE),
                expected.is_client_error() && expected != StatusCode::NOT_FOUND
            );
        }
    }
}
