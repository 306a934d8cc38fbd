//! The functions' event sources as template.yaml declares them, for the pumps that play the
//! part of Lambda's event source mappings: which stream or queue, the batch size, the
//! concurrency, the filters, the function's timeout, what is made of its answer and what
//! happens to a batch that keeps failing. A property the pumps do not evaluate is an error
//! when the template is read, never ignored.

pub mod pumps;

use std::time::Duration;

use anyhow::{bail, Context};
// The filters are the template's (career_template::filters, which careerctl shares); the
// pumps take them from here, beside the sources they filter.
use career_template::filters::{check_body_pattern, check_stream_pattern, filters};
pub use career_template::filters::{matches_pattern, passing, queue_message_passes};
pub use career_template::on_failure;
use serde_json::Value as Json;
use serde_yaml::Value;

use crate::template::{scalar, Resolver, Template, ACCOUNT};

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
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`: see [`failed_items`].
    pub report_batch_item_failures: bool,
    /// The function's `Timeout`: an invocation that runs longer has failed.
    pub timeout: Duration,
}

/// An SQS event source.
#[derive(Clone, Debug)]
pub struct QueueSource {
    pub queue_url: String,
    pub batch_size: i32,
    /// Batches of this queue the function handles at once (`ScalingConfig`).
    pub maximum_concurrency: usize,
    /// Lambda's filter patterns, on the message's `body` only: see [`queue_message_passes`].
    pub filters: Vec<Json>,
    /// `FunctionResponseTypes: [ReportBatchItemFailures]`: see [`failed_items`].
    pub report_batch_item_failures: bool,
    /// The function's `Timeout`: an invocation that runs longer has failed.
    pub timeout: Duration,
}

/// The properties of an `SQS` event the queue pump evaluates.
const QUEUE_PROPERTIES: &[&str] = &[
    "Queue",
    "BatchSize",
    "MaximumBatchingWindowInSeconds",
    "FunctionResponseTypes",
    "ScalingConfig",
    "FilterCriteria",
    "Enabled",
];

/// The properties of a `DynamoDB` event the stream pump evaluates, and two it reads without
/// acting on them: `MaximumRecordAgeInSeconds`, checked to be no shorter than the stream's
/// 24 hours (so no record expires earlier on AWS than it does locally), and
/// `BisectBatchOnFunctionError`, which acts only on an invocation that fails as a whole (a
/// timeout, for the fan-out): the local pump then retries the batch whole.
const STREAM_PROPERTIES: &[&str] = &[
    "Stream",
    "StartingPosition",
    "BatchSize",
    "MaximumRetryAttempts",
    "FunctionResponseTypes",
    "FilterCriteria",
    "DestinationConfig",
    "Enabled",
    "MaximumRecordAgeInSeconds",
    "BisectBatchOnFunctionError",
];

/// A DynamoDB stream keeps its records for 24 hours.
const STREAM_RETENTION_SECONDS: i64 = 86_400;

/// The properties of `function`'s events of type `kind` that are enabled (`Enabled: false`
/// means the mapping exists but does not poll), each checked to name only `known` properties.
fn events(
    template: &Template,
    resolver: &Resolver,
    function: &str,
    kind: &str,
    known: &[&str],
) -> anyhow::Result<Vec<Value>> {
    let mut enabled = Vec::new();
    for (name, properties) in template.events(function, kind)? {
        let properties = resolver.resolve(properties).with_context(|| format!("{function}'s event {name}"))?;
        for (property, _) in properties.as_mapping().into_iter().flatten() {
            let property = property.as_str().unwrap_or_default();
            if !known.contains(&property) {
                bail!("{function}'s event {name}: the local stack's pump does not evaluate {property}");
            }
        }
        match properties.get("Enabled").map(|flag| scalar(flag).unwrap_or_default()).as_deref() {
            None | Some("true") => enabled.push(properties),
            Some("false") => {}
            Some(other) => bail!("{function}'s event {name}: Enabled is {other:?}, not a boolean"),
        }
    }
    Ok(enabled)
}

fn number(properties: &Value, name: &str, default: i64) -> anyhow::Result<i64> {
    match properties.get(name).and_then(scalar) {
        Some(text) => text.parse().with_context(|| format!("{name} is not a number: {text}")),
        None => Ok(default),
    }
}

/// Whether `FunctionResponseTypes` turns on `ReportBatchItemFailures` (its only value).
fn reports_batch_item_failures(properties: &Value) -> anyhow::Result<bool> {
    let Some(types) = properties.get("FunctionResponseTypes") else { return Ok(false) };
    let types = types.as_sequence().context("FunctionResponseTypes is not a list")?;
    let mut report = false;
    for kind in types {
        match kind.as_str() {
            Some("ReportBatchItemFailures") => report = true,
            other => bail!("FunctionResponseTypes: {other:?} is not a response type Lambda has"),
        }
    }
    Ok(report)
}

/// The URL of the queue whose ARN is `arn`, among the stack's resources.
fn queue_url(resolver: &Resolver, arn: &str) -> anyhow::Result<String> {
    let queue = resolver.resources.values().find(|r| r.attributes.get("Arn").map(String::as_str) == Some(arn));
    queue.map(|q| q.reference.clone()).with_context(|| format!("no local queue {arn}"))
}

/// The enabled DynamoDB stream sources of `function`.
pub fn stream_sources(template: &Template, resolver: &Resolver, function: &str) -> anyhow::Result<Vec<StreamSource>> {
    let name = template.resource(function)?.property("FunctionName").map(|name| resolver.text(name)).transpose()?;
    let name = name.with_context(|| format!("{function} has no FunctionName"))?;
    let function_arn = format!("arn:aws:lambda:{}:{ACCOUNT}:function:{name}", resolver.region);
    let mut sources = Vec::new();
    for properties in events(template, resolver, function, "DynamoDB", STREAM_PROPERTIES)? {
        let starting = properties.get("StartingPosition").and_then(Value::as_str);
        if starting != Some("TRIM_HORIZON") {
            bail!("{function}: the local stream pump reads from TRIM_HORIZON, not {starting:?}");
        }
        let age = number(&properties, "MaximumRecordAgeInSeconds", -1)?;
        if age != -1 && age < STREAM_RETENTION_SECONDS {
            bail!("{function}: the local stream pump does not expire records younger than the stream's 24 hours");
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
            filters: filters(&properties, check_stream_pattern)?,
            maximum_retry_attempts: number(&properties, "MaximumRetryAttempts", 10_000)? as u32,
            on_failure: on_failure.map(|arn| queue_url(resolver, arn)).transpose()?,
            function_arn: function_arn.clone(),
            report_batch_item_failures: reports_batch_item_failures(&properties)?,
            timeout: template.function_timeout(function)?,
        });
    }
    Ok(sources)
}

/// The enabled SQS sources of `function`.
pub fn queue_sources(template: &Template, resolver: &Resolver, function: &str) -> anyhow::Result<Vec<QueueSource>> {
    let mut sources = Vec::new();
    for properties in events(template, resolver, function, "SQS", QUEUE_PROPERTIES)? {
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
            filters: filters(&properties, check_body_pattern)?,
            report_batch_item_failures: reports_batch_item_failures(&properties)?,
            timeout: template.function_timeout(function)?,
        });
    }
    Ok(sources)
}

/// The positions in a batch of the items the event source mapping takes as failed, from the
/// invocation's answer: the identifiers it reports (`answer`), or `None` when the invocation
/// failed or ran out of time. `batch` holds each item's identifier (a message id, a sequence
/// number), in the batch's order.
///
/// As Lambda does: a failed invocation fails every item. Without `ReportBatchItemFailures`
/// the answer is not read, so an invocation that returns succeeds for every item ("Even when
/// your function code returns partial batch failure responses, these responses will not be
/// processed by Lambda unless the ReportBatchItemFailures feature is explicitly turned on",
/// https://docs.aws.amazon.com/lambda/latest/dg/services-ddb-batchfailurereporting.html; for
/// SQS, https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html). With
/// it, an identifier that is empty, missing or not of the batch fails the whole batch, as
/// those pages say.
pub fn failed_items(report: bool, answer: Option<&[Option<&str>]>, batch: &[&str]) -> Vec<usize> {
    let everything = (0..batch.len()).collect();
    let Some(reported) = answer else { return everything };
    if !report {
        return Vec::new();
    }
    let mut failed = Vec::new();
    for identifier in reported {
        match identifier.and_then(|id| batch.iter().position(|item| !id.is_empty() && *item == id)) {
            Some(position) => failed.push(position),
            None => return everything,
        }
    }
    failed.sort_unstable();
    failed.dedup();
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shipped template with `from` replaced by `to` (once, and it must be there).
    fn variant(from: &str, to: &str) -> Template {
        assert_eq!(crate::template::TEMPLATE.matches(from).count(), 1, "{from}");
        Template::parse(&crate::template::TEMPLATE.replace(from, to)).unwrap()
    }

    fn lanes(template: &Template) -> anyhow::Result<Vec<QueueSource>> {
        let paper = crate::deploy_checks::resolved_on_paper(&career_core::config::TableNames::with_prefix("p-"));
        queue_sources(template, &paper, crate::template::function::DELIVER)
    }

    fn streams(template: &Template) -> anyhow::Result<Vec<StreamSource>> {
        let paper = crate::deploy_checks::resolved_on_paper(&career_core::config::TableNames::with_prefix("p-"));
        stream_sources(template, &paper, crate::template::function::FANOUT)
    }

    const MAIN_LANE: &str = "            Queue: !GetAtt DeliveryQueue.Arn\n";

    #[test]
    fn the_shipped_sources_report_item_failures_and_carry_their_functions_timeouts() {
        let shipped = Template::shipped();
        let lanes = lanes(&shipped).unwrap();
        assert_eq!(lanes.len(), 2);
        assert!(lanes.iter().all(|l| l.report_batch_item_failures && l.filters.is_empty()));
        assert!(lanes
            .iter()
            .all(|l| l.timeout == shipped.function_timeout(crate::template::function::DELIVER).unwrap()));
        let streams = streams(&shipped).unwrap();
        assert!(streams.iter().all(|s| s.report_batch_item_failures));
        assert!(streams.iter().all(|s| s.timeout == Duration::from_secs(60)), "the fan-out's own Timeout");
    }

    #[test]
    fn a_disabled_source_does_not_poll_and_an_unknown_setting_is_refused() {
        let disabled = variant(MAIN_LANE, &format!("{MAIN_LANE}            Enabled: false\n"));
        let polled = lanes(&disabled).unwrap();
        assert_eq!(polled.len(), 1);
        assert!(polled[0].queue_url.ends_with("DeliveryRetryQueue"), "{polled:?}");
        let unknown = variant(MAIN_LANE, &format!("{MAIN_LANE}            MetricsConfig: {{Metrics: [EventCount]}}\n"));
        assert!(format!("{:#}", lanes(&unknown).unwrap_err()).contains("MetricsConfig"));
        let latest = Template::parse(&crate::template::TEMPLATE.replacen(
            "StartingPosition: TRIM_HORIZON",
            "StartingPosition: LATEST",
            1,
        ))
        .unwrap();
        assert!(format!("{:#}", streams(&latest).unwrap_err()).contains("LATEST"));
        let unknown_type = variant("[ReportBatchItemFailures]\n            ScalingConfig:\n              MaximumConcurrency: !Ref DeliveryMaxConcurrency\n", "[ReportBatchFailures]\n            ScalingConfig:\n              MaximumConcurrency: !Ref DeliveryMaxConcurrency\n");
        assert!(format!("{:#}", lanes(&unknown_type).unwrap_err()).contains("ReportBatchFailures"));
    }

    #[test]
    fn without_function_response_types_the_answer_is_not_read() {
        let main_lane = "            BatchSize: 10\n            FunctionResponseTypes: [ReportBatchItemFailures]\n            ScalingConfig:\n              MaximumConcurrency: !Ref DeliveryMaxConcurrency\n";
        let unreported = variant(
            main_lane,
            &main_lane.replace("            FunctionResponseTypes: [ReportBatchItemFailures]\n", ""),
        );
        let lanes = lanes(&unreported).unwrap();
        assert_eq!(lanes.iter().map(|l| l.report_batch_item_failures).collect::<Vec<_>>(), [false, true]);
    }

    #[test]
    fn sqs_filters_are_read_on_the_body_only_and_applied_as_lambda_applies_them() {
        let filtered = variant(
            MAIN_LANE,
            &format!("{MAIN_LANE}            FilterCriteria:\n              Filters:\n                - Pattern: '{{\"body\": {{\"kind\": [\"ping\"]}}}}'\n"),
        );
        let filters = lanes(&filtered).unwrap()[0].filters.clone();
        assert_eq!(filters, [json!({"body": {"kind": ["ping"]}})]);
        let table = [
            (r#"{"kind": "ping", "id": 1}"#, true),
            (r#"{"kind": "profile.updated"}"#, false),
            (r#"{"id": 1}"#, false),
            ("ping", false),
        ];
        for (body, passes) in table {
            assert_eq!(queue_message_passes(&filters, body), passes, "{body}");
        }
        let plain = [json!({"body": ["ping", {"anything-but": ["x"]}]})];
        assert!(queue_message_passes(&plain, "ping"));
        assert!(queue_message_passes(&plain, "pong"));
        assert!(!queue_message_passes(&plain, "x"));
        assert!(queue_message_passes(&[], "anything"), "no filter passes everything");
        for refused in [
            json!({"messageAttributes": {"a": ["b"]}}),
            json!({"body": {"a": [{"prefix": "b"}]}}),
            json!({"body": "ping"}),
        ] {
            assert!(check_body_pattern(&refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn the_items_taken_as_failed_follow_the_answer_and_the_response_types() {
        let batch = ["a", "b", "c"];
        /// `(ReportBatchItemFailures, the answer, the positions taken as failed, why)`.
        type Row<'a> = (bool, Option<&'a [Option<&'a str>]>, &'a [usize], &'a str);
        let table: [Row<'_>; 8] = [
            (true, Some(&[]), &[], "an empty list: all succeeded"),
            (true, Some(&[Some("c"), Some("b")]), &[1, 2], "those reported"),
            (true, Some(&[Some("")]), &[0, 1, 2], "an empty identifier fails the batch"),
            (true, Some(&[None]), &[0, 1, 2], "a missing identifier fails the batch"),
            (true, Some(&[Some("z")]), &[0, 1, 2], "an identifier not of the batch fails it"),
            (true, None, &[0, 1, 2], "a failed or timed-out invocation fails every item"),
            (false, Some(&[Some("b")]), &[], "without ReportBatchItemFailures the answer is ignored"),
            (false, None, &[0, 1, 2], "without it, a failed invocation still fails every item"),
        ];
        for (report, answer, expected, why) in table {
            assert_eq!(failed_items(report, answer, &batch), expected, "{why}");
        }
    }
}
