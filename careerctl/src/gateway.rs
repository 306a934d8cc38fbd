//! The local gateway: plays API Gateway's part, turning each HTTP request into a
//! `lambda_http::Request` and handing it to the function that owns the route.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use career_core::config::{ConfigError, Settings};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use lambda_http::http::{self, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use tokio::net::TcpListener;

/// API Gateway's own payload limit; larger bodies never reach a function.
const GATEWAY_MAX_BODY: usize = 10 * 1024 * 1024;

/// The three API functions, routed as the SAM template routes them.
pub struct ApiFunctions {
    alerts: career_alerts::Deps,
    data_sharing: career_data_sharing::Deps,
    webhooks: career_webhooks::Deps,
}

impl ApiFunctions {
    pub fn new(
        dynamodb: &aws_sdk_dynamodb::Client,
        sqs: &aws_sdk_sqs::Client,
        settings: &Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            alerts: career_alerts::Deps::new(dynamodb, settings)?,
            data_sharing: career_data_sharing::Deps::new(dynamodb, settings)?,
            webhooks: career_webhooks::Deps::new(dynamodb, sqs, settings)?,
        })
    }

    /// `ANY /api/v1/data-sharing` and `ANY /api/v1/webhooks` (with `/api/v1/webhooks/{proxy+}`)
    /// go to their functions; every other request (`ANY /api/v1/alerts` and `$default`) to
    /// the alerts function.
    pub async fn handle(&self, request: Request) -> Response<Body> {
        match request.uri().path() {
            path if path == career_data_sharing::RESOURCE.path => {
                career_data_sharing::handle(&self.data_sharing, request).await
            }
            path if career_webhooks::owns(path) => career_webhooks::handle(&self.webhooks, request).await,
            _ => career_alerts::handle(&self.alerts, request).await,
        }
    }
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

/// Serves the API on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, functions: Arc<ApiFunctions>) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let functions = functions.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let functions = functions.clone();
                async move { Ok::<_, Infallible>(answer(&functions, request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn answer(functions: &ApiFunctions, request: http::Request<Incoming>) -> http::Response<Full<Bytes>> {
    let (parts, body) = request.into_parts();
    let Ok(body) = Limited::new(body, GATEWAY_MAX_BODY).collect().await.map(|b| b.to_bytes()) else {
        let mut response =
            http::Response::new(Full::new(Bytes::from_static(b"{\"message\":\"Request Entity Too Large\"}")));
        *response.status_mut() = StatusCode::PAYLOAD_TOO_LARGE;
        return response;
    };
    let response = functions.handle(lambda_request(parts, body)).await;
    response.map(|body| Full::new(Bytes::from(body.to_vec())))
}
