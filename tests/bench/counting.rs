//! SDK clients that log every request they transmit (tests/support/calls.rs), and the
//! per-request breakdown of such a log.

use std::collections::BTreeMap;

pub use career_service::calls::Calls;
use career_service::sdk_config;

/// Per-request average of each operation over `requests` (one list of names per request).
pub fn per_request(requests: &[Vec<String>]) -> (f64, String) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for name in requests.iter().flatten() {
        *counts.entry(name).or_default() += 1;
    }
    let n = requests.len().max(1) as f64;
    let total = counts.values().sum::<usize>() as f64 / n;
    let breakdown = counts
        .iter()
        .map(|(name, count)| {
            let each = *count as f64 / n;
            if (each - each.round()).abs() < 1e-9 {
                format!("{name} ×{}", each.round())
            } else {
                format!("{name} ×{each:.2}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    (total, breakdown)
}

pub fn dynamodb(endpoint: &str, calls: &Calls) -> aws_sdk_dynamodb::Client {
    let config = aws_sdk_dynamodb::config::Builder::from(&sdk_config())
        .endpoint_url(endpoint)
        .interceptor(calls.clone())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

pub fn sqs(endpoint: &str, calls: &Calls) -> aws_sdk_sqs::Client {
    let config =
        aws_sdk_sqs::config::Builder::from(&sdk_config()).endpoint_url(endpoint).interceptor(calls.clone()).build();
    aws_sdk_sqs::Client::from_conf(config)
}
