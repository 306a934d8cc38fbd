//! The functions' event sources as template.yaml declares them, for the pumps that play the
//! part of Lambda's event source mappings: which stream or queue, the batch size, the
//! concurrency, the filters and what happens to a batch that keeps failing.

use anyhow::{bail, Context};
use serde_json::Value as Json;
use serde_yaml::Value;

use crate::template::{scalar, Resolver, Template};

/// A DynamoDB stream event source.
#[derive(Clone, Debug)]
pub struct StreamSource {
    pub stream_arn: String,
    pub batch_size: i32,
    /// Lambda's filter patterns: a record goes to the function if any matches (or if none
    /// is given).
    pub filters: Vec<Json>,
    /// Retries of a failing batch before it goes to `on_failure`.
    pub maximum_retry_attempts: u32,
    /// Where the metadata of a batch that ran out of retries goes: a queue URL.
    pub on_failure: Option<String>,
}

/// An SQS event source.
#[derive(Clone, Debug)]
pub struct QueueSource {
    pub queue_url: String,
    pub batch_size: i32,
    /// Batches of this queue the function handles at once (`ScalingConfig`).
    pub maximum_concurrency: usize,
}

fn events<'a>(template: &'a Template, function: &str, kind: &'a str) -> anyhow::Result<Vec<&'a Value>> {
    let function = template.resource(function)?;
    let events = function.properties.and_then(|p| p.get("Events")).and_then(Value::as_mapping).into_iter().flatten();
    Ok(events
        .filter(|(_, event)| event.get("Type").and_then(Value::as_str) == Some(kind))
        .filter_map(|(_, event)| event.get("Properties"))
        .collect())
}

fn number(properties: &Value, name: &str, default: i64) -> anyhow::Result<i64> {
    match properties.get(name).and_then(scalar) {
        Some(text) => text.parse().with_context(|| format!("{name} is not a number: {text}")),
        None => Ok(default),
    }
}

/// The URL of the queue whose ARN is `arn`, among the stack's resources.
fn queue_url(resolver: &Resolver, arn: &str) -> anyhow::Result<String> {
    let queue = resolver.resources.values().find(|r| r.attributes.get("Arn").map(String::as_str) == Some(arn));
    queue.map(|q| q.reference.clone()).with_context(|| format!("no local queue {arn}"))
}

/// The DynamoDB stream sources of `function`.
pub fn stream_sources(template: &Template, resolver: &Resolver, function: &str) -> anyhow::Result<Vec<StreamSource>> {
    let mut sources = Vec::new();
    for properties in events(template, function, "DynamoDB")? {
        let properties = resolver.resolve(properties)?;
        let mut filters = Vec::new();
        let listed = properties.get("FilterCriteria").and_then(|f| f.get("Filters")).and_then(Value::as_sequence);
        for filter in listed.into_iter().flatten() {
            let pattern = filter.get("Pattern").and_then(Value::as_str).context("a filter without a pattern")?;
            filters.push(serde_json::from_str(pattern).with_context(|| format!("a filter pattern: {pattern}"))?);
        }
        let on_failure = properties.get("DestinationConfig").and_then(|d| d.get("OnFailure"));
        let on_failure = on_failure.and_then(|d| d.get("Destination")).and_then(Value::as_str);
        sources.push(StreamSource {
            stream_arn: properties
                .get("Stream")
                .and_then(Value::as_str)
                .context("a stream source without a stream")?
                .into(),
            batch_size: number(&properties, "BatchSize", 100)? as i32,
            filters,
            maximum_retry_attempts: number(&properties, "MaximumRetryAttempts", 10_000)? as u32,
            on_failure: on_failure.map(|arn| queue_url(resolver, arn)).transpose()?,
        });
    }
    Ok(sources)
}

/// The SQS sources of `function`.
pub fn queue_sources(template: &Template, resolver: &Resolver, function: &str) -> anyhow::Result<Vec<QueueSource>> {
    let mut sources = Vec::new();
    for properties in events(template, function, "SQS")? {
        let properties = resolver.resolve(properties)?;
        let arn = properties.get("Queue").and_then(Value::as_str).context("a queue source without a queue")?;
        let scaling = properties.get("ScalingConfig").cloned().unwrap_or(Value::Null);
        if number(&properties, "MaximumBatchingWindowInSeconds", 0)? != 0 {
            bail!("{function}: the local stack's queue pump does not wait to fill a batch");
        }
        sources.push(QueueSource {
            queue_url: queue_url(resolver, arn)?,
            batch_size: number(&properties, "BatchSize", 10)? as i32,
            // Lambda's own limit when no maximum is set.
            maximum_concurrency: number(&scaling, "MaximumConcurrency", 1000)? as usize,
        });
    }
    Ok(sources)
}

/// Whether the stream record `record` (as Lambda passes it on) matches the filter `pattern`:
/// every field the pattern names has one of the values it lists, nested fields alike.
pub fn matches_pattern(pattern: &Json, record: &Json) -> bool {
    match pattern {
        Json::Object(fields) => {
            fields.iter().all(|(name, wanted)| record.get(name).is_some_and(|value| matches_pattern(wanted, value)))
        }
        Json::Array(values) => values.contains(record),
        other => other == record,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pattern_matches_on_every_field_it_names() {
        let pattern =
            json!({"eventName": ["INSERT", "MODIFY"], "dynamodb": {"NewImage": {"status": {"S": ["completed"]}}}});
        let record = |name: &str, status: &str| json!({"eventName": name, "dynamodb": {"NewImage": {"status": {"S": status}, "userId": {"S": "u"}}}});
        assert!(matches_pattern(&pattern, &record("MODIFY", "completed")));
        assert!(!matches_pattern(&pattern, &record("REMOVE", "completed")));
        assert!(!matches_pattern(&pattern, &record("INSERT", "started")));
        assert!(!matches_pattern(&pattern, &json!({"eventName": "INSERT"})));
    }
}
