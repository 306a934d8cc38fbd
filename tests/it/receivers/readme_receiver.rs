use http::HeaderMap;
use standardwebhooks::Webhook;

/// `secret` is the whsec_... string exactly as the API returned it; `body` the raw bytes received.
pub fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let Ok(webhook) = Webhook::new(secret) else { return false };
    webhook.verify(body, headers).is_ok() // signatures and a 5-minute timestamp window
}
