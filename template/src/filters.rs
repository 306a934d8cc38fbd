//! Lambda's event filtering as template.yaml declares it for an event source
//! (`FilterCriteria`): the patterns read and checked, and a record or message matched against
//! them. The local pumps filter with these, and `careerctl streams replay` runs again only the
//! records the fan-out's filters pass, as Lambda would.

use anyhow::{bail, Context};
use aws_lambda_events::dynamodb::{Event as StreamEvent, EventRecord};
use career_core::config::TableNames;
use serde_json::Value as Json;
use serde_yaml::Value;

use crate::{Physical, Resolver, Template};

/// The patterns of `FilterCriteria`, each checked by `check`.
pub fn filters(properties: &Value, check: fn(&Json) -> anyhow::Result<()>) -> anyhow::Result<Vec<Json>> {
    let mut filters = Vec::new();
    let listed = properties.get("FilterCriteria").and_then(|f| f.get("Filters")).and_then(Value::as_sequence);
    for filter in listed.into_iter().flatten() {
        let pattern = filter.get("Pattern").and_then(Value::as_str).context("a filter without a pattern")?;
        let pattern = serde_json::from_str(pattern).with_context(|| format!("a filter pattern: {pattern}"))?;
        check(&pattern).with_context(|| format!("the filter pattern {pattern}"))?;
        filters.push(pattern);
    }
    Ok(filters)
}

/// Refuses a stream filter naming a key but `dynamodb`: a DynamoDB event source filters on
/// the record's `dynamodb` key only (AWS's "Using event filtering with a DynamoDB event
/// source"), so AWS would not honour it.
pub fn check_stream_pattern(pattern: &Json) -> anyhow::Result<()> {
    if let Some(key) = pattern.as_object().into_iter().flat_map(|p| p.keys()).find(|key| *key != "dynamodb") {
        bail!("a DynamoDB stream filter may name only the dynamodb key, not {key:?}");
    }
    check_pattern(pattern)
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
        let name = crate::tables::table_name(table.logical_id, tables)?.to_owned();
        let physical = Physical { reference: name.clone(), attributes: [("StreamArn".to_owned(), name)].into() };
        resolver.resources.insert(table.logical_id.to_owned(), physical);
    }
    let mut filters = Vec::new();
    for (_, properties) in template.events(function, "DynamoDB")? {
        let stream = properties.get("Stream").context("a stream source without a stream")?;
        filters.push((resolver.text(stream)?, self::filters(properties, check_stream_pattern)?));
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

/// Whether a message whose body is `body` passes the `filters` of an SQS source (any of
/// them, or there are none). SQS mappings filter on the `body` key only: a pattern that is
/// an object is matched against the body read as JSON (a body that is not JSON then passes
/// none), a list of values against the body as a plain string
/// (https://docs.aws.amazon.com/lambda/latest/dg/with-sqs-filtering.html and
/// https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html). Lambda
/// deletes a message that passes none: the caller does.
pub fn queue_message_passes(filters: &[Json], body: &str) -> bool {
    let parsed = serde_json::from_str::<Json>(body).ok();
    filters.is_empty()
        || filters.iter().any(|pattern| match &pattern["body"] {
            Json::Object(_) => parsed.as_ref().is_some_and(|json| matches_pattern(&pattern["body"], json)),
            wanted => matches_field(wanted, Some(&Json::String(body.to_owned()))),
        })
}

/// Refuses an SQS filter that names anything but `body` (Lambda's SQS mappings filter on the
/// body only), or a rule [`check_pattern`] refuses.
pub fn check_body_pattern(pattern: &Json) -> anyhow::Result<()> {
    let fields = pattern.as_object().context("a filter pattern is a JSON object")?;
    match (fields.len(), fields.get("body")) {
        (1, Some(body @ (Json::Object(_) | Json::Array(_)))) => check_pattern(body),
        _ => bail!("an SQS event source filters on the body key only, as a pattern or a list of values"),
    }
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
            filters(&properties, check_stream_pattern).map_err(|e| format!("{e:#}"))
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
