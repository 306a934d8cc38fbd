//! `careerctl demo receiver`: a webhook receiver on 127.0.0.1 for the demo's deliveries,
//! which checks each delivery's signature.

use std::convert::Infallible;
use std::sync::Arc;

use career_core::webhooks::signing::verify_hex;
use career_core::webhooks::WebhookSecret;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use lambda_http::http::{self, HeaderMap, StatusCode};
use serde::Serialize;
use tokio::net::TcpListener;

/// One delivery as `demo receiver` saw it (it prints this).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Received {
    /// `X-Webhook-Delivery`, the same as `webhook-id`.
    pub delivery_id: String,
    /// `X-Webhook-Event`.
    pub event_type: String,
    /// Whether a signature of `X-Webhook-Signature` is the body's with the secret.
    pub verified: bool,
    /// `traceparent`, sent when the subscription has trace context on (contract section 19).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The body: the event, or the text received if it is not JSON.
    pub body: serde_json::Value,
}

impl Received {
    fn check(secret: &WebhookSecret, headers: &HeaderMap, body: &[u8]) -> Self {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        // Two signatures, separated by a space, during a rotation's grace period.
        let verified = header("x-webhook-signature").split(' ').any(|hex| verify_hex(secret.expose(), body, hex));
        let body = serde_json::from_slice(body)
            .unwrap_or_else(|_| serde_json::Value::from(String::from_utf8_lossy(body).into_owned()));
        let traceparent = Some(header("traceparent")).filter(|value| !value.is_empty());
        Received {
            delivery_id: header("x-webhook-delivery"),
            event_type: header("x-webhook-event"),
            verified,
            traceparent,
            body,
        }
    }
}

/// Answers every request on `listener` as a webhook receiver does: 204 when the delivery's
/// signature verifies with `secret`, 401 when it does not, handing each to `report`.
pub async fn receive(
    listener: TcpListener,
    secret: WebhookSecret,
    report: impl Fn(Received) + Send + Sync + 'static,
) -> std::io::Result<()> {
    let shared = Arc::new((secret, report));
    local_aws::gateway::serve_connections(listener, None, move |request: http::Request<Incoming>| {
        let shared = shared.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let received = Received::check(&shared.0, &parts.headers, &body);
            let status = if received.verified { StatusCode::NO_CONTENT } else { StatusCode::UNAUTHORIZED };
            (shared.1)(received);
            let mut response = http::Response::new(Full::new(Bytes::new()));
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        }
    })
    .await
}
