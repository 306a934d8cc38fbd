//! The local gateway: plays API Gateway's part, turning each HTTP request into a
//! `lambda_http::Request` and handing it to the function that owns the route.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use career_core::aws::AwsClients;
use career_core::config::Settings;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use lambda_http::http::header::{CONNECTION, CONTENT_TYPE};
use lambda_http::http::{self, HeaderValue, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use tokio::net::TcpListener;

use crate::deployment::Deployment;
use crate::stack::local_time_limit;
use crate::template::{function, Template};

/// API Gateway's own payload limit; larger bodies never reach a function.
const GATEWAY_MAX_BODY: usize = 10 * 1024 * 1024;
/// A connection that sends nothing for this long (no request yet, between requests, or in the
/// middle of headers or a body) is closed, so idle or half-open clients cannot pile up.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) mod connections;
mod routes;

pub use connections::serve_connections;
use routes::Routes;

/// The three API functions, routed as the SAM template routes them.
pub struct ApiFunctions {
    routes: Routes<Target>,
    alerts: career_alerts::Deps,
    data_sharing: career_data_sharing::Deps,
    webhooks: career_webhooks::Deps,
}

/// The functions whose handlers the gateway runs.
#[derive(Clone, Copy)]
enum Api {
    Alerts,
    DataSharing,
    Webhooks,
}

/// Where a route leads: the function, and how long the gateway lets it take.
struct Target {
    api: Api,
    time_limit: TimeLimit,
}

impl ApiFunctions {
    /// The three functions of `deployment` on `clients`, each acting as its role, with the
    /// environment the template gives it on a stack whose settings are `local`, on the routes
    /// the template gives them.
    pub fn new(deployment: &Deployment, clients: &AwsClients, local: &Settings) -> anyhow::Result<Self> {
        let template = &deployment.template;
        let routes = Routes::of(template, |function| {
            let api = match function {
                function::ALERTS => Api::Alerts,
                function::DATA_SHARING => Api::DataSharing,
                function::WEBHOOKS => Api::Webhooks,
                other => anyhow::bail!("the local gateway has no handler of {other}"),
            };
            Ok(Target { api, time_limit: time_limit(template, function)? })
        })?;
        let instance = |function| deployment.instance(function, clients, local);
        let (alerts, data_sharing, webhooks) =
            (instance(function::ALERTS)?, instance(function::DATA_SHARING)?, instance(function::WEBHOOKS)?);
        Ok(Self {
            routes,
            alerts: career_alerts::Deps::new(&alerts.0, &alerts.1)?,
            data_sharing: career_data_sharing::Deps::new(&data_sharing.0, &data_sharing.1)?,
            webhooks: career_webhooks::Deps::new(&webhooks.0, &webhooks.1)?,
        })
    }

    /// The answer of the function the request is routed to, or API Gateway's 404 when no
    /// route matches.
    pub async fn handle(&self, request: Request) -> Response<Body> {
        match self.routes.find(request.method(), request.uri().path()) {
            Some(target) => self.call(target.api, request).await,
            None => not_found().map(Body::Text),
        }
    }

    async fn call(&self, api: Api, request: Request) -> Response<Body> {
        match api {
            Api::Alerts => career_alerts::handle(&self.alerts, request).await,
            Api::DataSharing => career_data_sharing::handle(&self.data_sharing, request).await,
            Api::Webhooks => career_webhooks::handle(&self.webhooks, request).await,
        }
    }
}

/// API Gateway's integration timeout: an HTTP API waits at most this long for a function.
const INTEGRATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request may take, and the gateway's answer after that.
type TimeLimit = (Duration, StatusCode, &'static str);

/// Lambda ends a function at its timeout in template.yaml (API Gateway then answers 500), and
/// API Gateway stops waiting at its integration timeout (503), whichever comes first. Both are
/// the local stack's ([`local_time_limit`]), so their order is AWS's.
fn time_limit(template: &Template, function: &str) -> anyhow::Result<TimeLimit> {
    let timeout = template.function_timeout(function)?;
    Ok(if timeout < INTEGRATION_TIMEOUT {
        (local_time_limit(timeout), StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
    } else {
        (local_time_limit(INTEGRATION_TIMEOUT), StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable")
    })
}

/// Builds the request a function would get from API Gateway for this HTTP request.
pub fn lambda_request(parts: http::request::Parts, body: Bytes) -> Request {
    let query: HashMap<String, Vec<String>> = url::form_urlencoded::parse(
        parts.uri.query().unwrap_or_default().as_bytes(),
    )
    .into_owned()
    .fold(HashMap::new(), |mut params, (name, value)| {
        params.entry(name).or_default().push(value);
        params
    });
    let body = if body.is_empty() {
        Body::Empty
    } else {
        match String::from_utf8(body.to_vec()) {
            Ok(text) => Body::Text(text),
            Err(bytes) => Body::Binary(bytes.into_bytes()),
        }
    };
    Request::from_parts(parts, body).with_query_string_parameters(query)
}

/// Serves the API on `listener` until the task is dropped, closing connections idle for
/// `idle_timeout` ([`IDLE_TIMEOUT`] in the local stack).
pub async fn serve(listener: TcpListener, functions: Arc<ApiFunctions>, idle_timeout: Duration) -> std::io::Result<()> {
    serve_connections(listener, Some(idle_timeout), move |request| {
        let functions = functions.clone();
        async move { Ok::<_, Infallible>(answer(&functions, request, idle_timeout).await) }
    })
    .await
}

async fn answer(
    functions: &ApiFunctions,
    request: http::Request<Incoming>,
    idle_timeout: Duration,
) -> http::Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let body = match read_body(body, idle_timeout).await {
        Ok(body) => body,
        Err(BodyError::TooLarge) => return gateway_error(StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large"),
        Err(BodyError::Malformed) => return gateway_error(StatusCode::BAD_REQUEST, "Bad Request"),
        Err(BodyError::Idle) => return gateway_error(StatusCode::REQUEST_TIMEOUT, "Request Timeout"),
    };
    let Some(target) = functions.routes.find(&parts.method, parts.uri.path()) else {
        return not_found().map(|body| Full::new(Bytes::from(body)));
    };
    let (limit, status, message) = target.time_limit;
    match tokio::time::timeout(limit, functions.call(target.api, lambda_request(parts, body))).await {
        Ok(response) => response.map(|body| Full::new(Bytes::from(body.to_vec()))),
        Err(_) => gateway_error(status, message),
    }
}

enum BodyError {
    TooLarge,
    /// Not a valid HTTP body, such as broken chunked framing.
    Malformed,
    /// Nothing arrived for the idle timeout.
    Idle,
}

async fn read_body(body: Incoming, idle_timeout: Duration) -> Result<Bytes, BodyError> {
    let mut body = Limited::new(body, GATEWAY_MAX_BODY);
    let mut bytes = Vec::new();
    loop {
        let frame = tokio::time::timeout(idle_timeout, body.frame()).await.map_err(|_| BodyError::Idle)?;
        match frame {
            None => return Ok(bytes.into()),
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            Some(Err(err)) if err.is::<LengthLimitError>() => return Err(BodyError::TooLarge),
            Some(Err(_)) => return Err(BodyError::Malformed),
        }
    }
}

/// An answer of the gateway itself, shaped like API Gateway's.
fn gateway_answer(status: StatusCode, message: &str) -> http::Response<String> {
    let mut response = http::Response::new(serde_json::json!({"message": message}).to_string());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// API Gateway's answer to a request no route matches.
fn not_found() -> http::Response<String> {
    gateway_answer(StatusCode::NOT_FOUND, "Not Found")
}

/// The gateway's answer to a request it could not pass on; the connection is closed after
/// it, since what follows on it cannot be trusted to start a request.
fn gateway_error(status: StatusCode, message: &str) -> http::Response<Full<Bytes>> {
    let mut response = gateway_answer(status, message).map(|body| Full::new(Bytes::from(body)));
    response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_function_is_cut_off_at_its_template_timeout_within_the_integration_timeout() {
        let shipped = Template::shipped();
        for function in [function::ALERTS, function::DATA_SHARING, function::WEBHOOKS] {
            let (limit, status, _) = time_limit(&shipped, function).unwrap();
            let template = shipped.function_timeout(function).unwrap();
            assert_eq!(limit, local_time_limit(template.min(INTEGRATION_TIMEOUT)));
            let expected = if template < INTEGRATION_TIMEOUT { 500 } else { 503 };
            assert_eq!(status.as_u16(), expected);
        }
    }

    #[test]
    fn each_operation_is_routed_to_its_function() {
        let routes = Routes::of(&Template::shipped(), |function| Ok(function.to_owned())).unwrap();
        fn methods<Op>(resource: &career_core::aws::api::Resource<Op>) -> (&'static str, Vec<&http::Method>) {
            (resource.path, resource.operations.iter().map(|(method, _, _)| method).collect())
        }
        let operations = [(function::ALERTS, methods(&career_alerts::RESOURCE))]
            .into_iter()
            .chain([(function::DATA_SHARING, methods(&career_data_sharing::RESOURCE))])
            .chain(career_webhooks::RESOURCES.iter().map(|resource| (function::WEBHOOKS, methods(resource))));
        for (function, (path, methods)) in operations {
            for method in methods {
                assert_eq!(routes.find(method, path).map(String::as_str), Some(function), "{method} {path}");
            }
        }
    }
}
