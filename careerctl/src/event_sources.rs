//! The functions' event sources as template.yaml declares them, for the pumps that play the
//! part of Lambda's event source mappings: which stream or queue, the batch size, the
//! concurrency, the filters and what happens to a batch that keeps failing.

use anyhow::{bail, Context};
use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use career_core::config::TableNames;
use serde_json::Value as Json;
use serde_yaml::Value;

use crate::template::{scalar, Physical, Resolver, Template, ACCOUNT};

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
    /// The function's ARN, which that metadata names.
    pub function_arn: String,
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
    let name = template.resource(function)?.property("FunctionName").map(|name| resolver.text(name)).transpose()?;
    let name = name.with_context(|| format!("{function} has no FunctionName"))?;
    let function_arn = format!("arn:aws:lambda:{}:{ACCOUNT}:function:{name}", resolver.region);
    let mut sources = Vec::new();
    for properties in events(template, function, "DynamoDB")? {
        let properties = resolver.resolve(properties)?;
        let filters = stream_filters(&properties)?;
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
            function_arn: function_arn.clone(),
        });
    }
    Ok(sources)
}

/// The filter patterns of a stream source's `properties`. A DynamoDB event source filters
/// on the record's `dynamodb` key only (AWS's "Using event filtering with a DynamoDB event
/// source"), so a pattern naming another key is refused here as AWS would not honour it.
fn stream_filters(properties: &Value) -> anyhow::Result<Vec<Json>> {
    let mut filters = Vec::new();
    let listed = properties.get("FilterCriteria").and_then(|f| f.get("Filters")).and_then(Value::as_sequence);
    for filter in listed.into_iter().flatten() {
        let pattern = filter.get("Pattern").and_then(Value::as_str).context("a filter without a pattern")?;
        let pattern: Json = serde_json::from_str(pattern).with_context(|| format!("a filter pattern: {pattern}"))?;
        if let Some(key) = pattern.as_object().into_iter().flat_map(|p| p.keys()).find(|key| *key != "dynamodb") {
            bail!("a DynamoDB stream filter may name only the dynamodb key, not {key:?}: {pattern}");
        }
        check_pattern(&pattern)?;
        filters.push(pattern);
    }
    Ok(filters)
}

/// The filters of `function`'s stream sources by the name of the table whose stream each
/// reads, in a stack whose tables `tables` names (a deployed one: nothing else of it needs
/// resolving).
pub fn stream_filters_by_table(
    template: &Template,
    tables: &TableNames,
    function: &str,
) -> anyhow::Result<Vec<(String, Vec<Json>)>> {
    // Each table's stream resolves to the table's name, which a stream's ARN carries.
    let mut resolver = Resolver::default();
    for table in template.resources_of("AWS::DynamoDB::Table") {
        let name = crate::resources::table_name(table.logical_id, tables)?.to_owned();
        let physical = Physical { reference: name.clone(), attributes: [("StreamArn".to_owned(), name)].into() };
        resolver.resources.insert(table.logical_id.to_owned(), physical);
    }
    let mut filters = Vec::new();
    for properties in events(template, function, "DynamoDB")? {
        let stream = properties.get("Stream").context("a stream source without a stream")?;
        filters.push((resolver.text(stream)?, stream_filters(properties)?));
    }
    Ok(filters)
}

/// The records of `batch` that pass `filters` (any of them; all records when there are
/// none), as the event source hands them to the function.
pub fn passing(filters: &[Json], batch: &StreamEvent) -> StreamEvent {
    let passes = |record: &EventRecord| {
        let record = serde_json::to_value(record).expect("a stream record serializes");
        filters.is_empty() || filters.iter().any(|pattern| matches_pattern(pattern, &record))
    };
    let mut passed = batch.clone();
    passed.records.retain(passes);
    passed
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
/// every field the pattern names has one of the values it lists, nested fields alike. A
/// listed value is a value, `{"exists": true|false}` (the field is there or not) or
/// `{"anything-but": [values]}` (the field is there with none of them), as Lambda's filters
/// have them; [`check_pattern`] refuses any other rule when the template is read.
pub fn matches_pattern(pattern: &Json, record: &Json) -> bool {
    matches_field(pattern, Some(record))
}

fn matches_field(pattern: &Json, value: Option<&Json>) -> bool {
    match pattern {
        Json::Object(fields) => {
            fields.iter().all(|(name, wanted)| matches_field(wanted, value.and_then(|value| value.get(name))))
        }
        Json::Array(alternatives) => alternatives.iter().any(|alternative| matches_rule(alternative, value)),
        other => value == Some(other),
    }
}

fn matches_rule(rule: &Json, value: Option<&Json>) -> bool {
    match (rule.get("exists").and_then(Json::as_bool), rule.get("anything-but").and_then(Json::as_array)) {
        (Some(exists), _) => value.is_some() == exists,
        (None, Some(excluded)) => value.is_some_and(|value| !excluded.contains(value)),
        (None, None) => value == Some(rule),
    }
}

/// Refuses a filter rule the local pump cannot evaluate (a prefix, a numeric range…), so a
/// filter added to the template is either honoured locally or an error, never ignored.
fn check_pattern(pattern: &Json) -> anyhow::Result<()> {
    match pattern {
        Json::Object(fields) => fields.values().try_for_each(check_pattern),
        Json::Array(alternatives) => {
            for rule in alternatives.iter().filter_map(Json::as_object) {
                let known = matches!(
                    (rule.len(), rule.get("exists"), rule.get("anything-but")),
                    (1, Some(Json::Bool(_)), None) | (1, None, Some(Json::Array(_)))
                );
                if !known {
                    bail!("a filter rule the local stack cannot evaluate: {}", Json::Object(rule.clone()));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pattern_matches_on_every_field_it_names() {
        let pattern =
            json!({"dynamodb": {"Keys": {"userId": {"S": ["u"]}}, "NewImage": {"status": {"S": ["completed"]}}}});
        let record = |user: &str, status: &str| json!({"eventName": "MODIFY", "dynamodb": {"Keys": {"userId": {"S": user}}, "NewImage": {"status": {"S": status}, "userId": {"S": user}}}});
        assert!(matches_pattern(&pattern, &record("u", "completed")));
        assert!(!matches_pattern(&pattern, &record("v", "completed")));
        assert!(!matches_pattern(&pattern, &record("u", "started")));
        assert!(!matches_pattern(
            &pattern,
            &json!({"eventName": "REMOVE", "dynamodb": {"Keys": {"userId": {"S": "u"}}}})
        ));
    }

    #[test]
    fn exists_and_anything_but_match_as_lambda_matches_them() {
        let failing = json!({"dynamodb": {
            "NewImage": {"failingSince": {"S": [{"exists": true}]}},
            "OldImage": {"userId": {"S": [{"exists": true}]}, "failingSince": {"S": [{"exists": false}]}}}});
        let record = |old: serde_json::Value, new: serde_json::Value| json!({"eventName": "MODIFY", "dynamodb": {"OldImage": old, "NewImage": new}});
        let since = json!({"failingSince": {"S": "2026-11-27T08:00:00.000Z"}});
        assert!(matches_pattern(&failing, &record(json!({"userId": {"S": "u"}}), since.clone())));
        assert!(!matches_pattern(&failing, &record(since.clone(), since.clone())));
        assert!(!matches_pattern(&failing, &record(json!({}), json!({}))));
        let insert = json!({"eventName": "INSERT", "dynamodb": {"NewImage": since.clone()}});
        assert!(!matches_pattern(&failing, &insert), "a field of a missing old image is absent, its key too");
        let exhausted = json!({"dynamodb": {"NewImage": {"status": {"S": ["failed"]}},
                                            "OldImage": {"status": {"S": [{"anything-but": ["failed"]}]}}}});
        let status = |s: &str| json!({"status": {"S": s}});
        assert!(matches_pattern(&exhausted, &record(status("pending"), status("failed"))));
        assert!(!matches_pattern(&exhausted, &record(status("failed"), status("failed"))));
        assert!(!matches_pattern(&exhausted, &record(json!({}), status("failed"))), "anything-but wants the field");
    }

    #[test]
    fn a_stream_filter_names_the_dynamodb_key_only() {
        let source = |pattern: &str| {
            let properties =
                serde_yaml::to_value(json!({"FilterCriteria": {"Filters": [{"Pattern": pattern}]}})).unwrap();
            stream_filters(&properties).map_err(|e| e.to_string())
        };
        assert!(source(r#"{"dynamodb": {"NewImage": {"userId": {"S": [{"exists": true}]}}}}"#).is_ok());
        let refused = source(r#"{"eventName": ["MODIFY"], "dynamodb": {"NewImage": {}}}"#).unwrap_err();
        assert!(refused.contains("eventName"), "{refused}");
    }

    #[test]
    fn a_rule_the_pump_cannot_evaluate_is_refused() {
        assert!(check_pattern(&json!({"a": [{"exists": false}], "b": {"c": [{"anything-but": ["x"]}, "y"]}})).is_ok());
        assert!(check_pattern(&json!({"a": [{"prefix": "x"}]})).is_err());
        assert!(check_pattern(&json!({"a": [{"numeric": [">", 1]}]})).is_err());
        assert!(check_pattern(&json!({"a": [{"exists": "yes"}]})).is_err());
    }
}
