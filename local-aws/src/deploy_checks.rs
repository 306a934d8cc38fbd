//! What a first deploy of template.yaml needs that no emulator checks: names that two stacks
//! in one account do not share, quotas that a new account may not grant, and the code's
//! waits against the template's timeouts and AWS's limits.

use std::time::Duration;

use career_core::delivery::retry::{MAX_WAIT, SQS_MAX_IN_FLIGHT};
use serde_yaml::Value;

use crate::template::{function, Resolver, Template};

fn resolver(stack_name: &str) -> Resolver {
    Resolver { stack_name: stack_name.into(), region: "eu-west-1".into(), ..Resolver::default() }
}

fn timeout(template: &Template, function: &str) -> Duration {
    template.function_timeout(function).expect("a timeout")
}

/// `rate(N minutes)` or `rate(N hours)` as a duration.
fn rate(expression: &str) -> Duration {
    let inner = expression.strip_prefix("rate(").and_then(|e| e.strip_suffix(')')).expect("a rate expression");
    let (count, unit) = inner.split_once(' ').expect("rate(<n> <unit>)");
    let count: u64 = count.parse().expect("a count");
    match unit.trim_end_matches('s') {
        "minute" => Duration::from_secs(60 * count),
        "hour" => Duration::from_secs(3600 * count),
        other => panic!("a rate in {other}"),
    }
}

fn schedules(template: &Template) -> Vec<(String, Value)> {
    let mut found = Vec::new();
    for function in template.resources_of("AWS::Serverless::Function") {
        let events = function.property("Events").and_then(Value::as_mapping).into_iter().flatten();
        for (_, event) in events.filter(|(_, e)| e.get("Type").and_then(Value::as_str) == Some("ScheduleV2")) {
            found.push((function.logical_id.to_owned(), event.get("Properties").cloned().unwrap_or(Value::Null)));
        }
    }
    found
}

#[test]
fn the_longest_retry_wait_leaves_the_deliver_functions_timeout_under_sqss_twelve_hours() {
    let deliver = timeout(&Template::shipped(), function::DELIVER);
    assert!(MAX_WAIT + deliver < SQS_MAX_IN_FLIGHT, "{MAX_WAIT:?} + {deliver:?} reaches SQS's limit");
}

#[test]
fn every_schedule_is_named_after_its_stack() {
    let template = Template::shipped();
    let schedules = schedules(&template);
    assert!(!schedules.is_empty());
    for (function, properties) in schedules {
        let name = properties
            .get("Name")
            .unwrap_or_else(|| panic!("{function}'s schedule has no name: SAM gives it a fixed one"));
        let (first, second) = (resolver("stack-a").text(name).unwrap(), resolver("stack-b").text(name).unwrap());
        assert_ne!(first, second, "{function}'s schedule has the same name in two stacks");
    }
}

/// Receivers' trust policies name the delivery role's ARN: its name is fixed, so a stack
/// deployed again under its name has the same; after its stack, so two stacks in one account do
/// not share it; and within IAM's 64 characters for every stack whose function names fit
/// Lambda's 64, whatever `DeliveryRoleSuffix` the template allows.
#[test]
fn the_delivery_roles_name_is_fixed_after_its_stack_and_fits_iam() {
    let template = Template::shipped();
    let in_stack = |stack: &str, suffix: &str| {
        let mut stack = resolver(stack);
        stack.parameters = [("DeliveryRoleSuffix".to_owned(), suffix.to_owned())].into();
        let role = template.resource("DeliverFunctionRole").unwrap();
        crate::resources::role_arn(&role, &stack).unwrap().rsplit('/').next().unwrap().to_owned()
    };
    let default = template.parameter_defaults()["DeliveryRoleSuffix"].clone();
    assert_eq!(in_stack("stack-a", &default), "stack-a-delivery");
    assert_ne!(in_stack("stack-a", &default), in_stack("stack-b", &default));
    let function_names = template.resources_of("AWS::Serverless::Function").map(|function| {
        resolver("").text(function.property("FunctionName").expect("a fixed function name")).unwrap().len()
    });
    let longest_stack = "s".repeat(64 - function_names.max().unwrap());
    let document: Value = serde_yaml::from_str(crate::template::TEMPLATE).unwrap();
    let pattern = document["Parameters"]["DeliveryRoleSuffix"]["AllowedPattern"].as_str().unwrap();
    let most = pattern.rsplit_once(',').and_then(|(_, most)| most.split_once('}')).unwrap().0;
    let longest_suffix = "r".repeat(most.parse().unwrap());
    assert!(in_stack(&longest_stack, &longest_suffix).len() <= 64, "{longest_stack}-{longest_suffix}");
}

#[test]
fn no_function_needs_reserved_concurrency_and_the_sweep_runs_one_at_a_time_by_its_schedule() {
    let template = Template::shipped();
    for function in template.resources_of("AWS::Serverless::Function") {
        assert!(
            function.property("ReservedConcurrentExecutions").is_none(),
            "{}: reserved concurrency can fail on an account at the reduced concurrency quota",
            function.logical_id
        );
    }
    let sweep = template.resource(function::SWEEP).unwrap();
    let retries = sweep.property("EventInvokeConfig").and_then(|c| c.get("MaximumRetryAttempts"));
    assert_eq!(retries.and_then(Value::as_u64), Some(0), "Lambda retrying a failed run would overlap the next");
    for (_, schedule) in schedules(&template).into_iter().filter(|(f, _)| f == function::SWEEP) {
        let every = rate(schedule.get("ScheduleExpression").and_then(Value::as_str).unwrap());
        assert!(timeout(&template, function::SWEEP) < every, "a run can outlast the schedule's rate");
        let retries = schedule.get("RetryPolicy").and_then(|p| p.get("MaximumRetryAttempts"));
        assert_eq!(retries.and_then(Value::as_u64), Some(0), "the scheduler retrying a run would overlap the next");
    }
}

#[test]
fn no_queue_has_a_fixed_name_that_a_quick_redeploy_would_find_deleted_recently() {
    for queue in Template::shipped().resources_of("AWS::SQS::Queue") {
        assert!(queue.property("QueueName").is_none(), "{} has a fixed name", queue.logical_id);
    }
}

/// The shipped template resolved to a stack of made-up names: each table's ARN and stream, each
/// queue's ARN and URL, as a deploy would give them, and every other resource's name and ARN.
pub(crate) fn resolved_on_paper(tables: &career_core::config::TableNames) -> Resolver {
    let template = Template::shipped();
    let mut resolver = resolver("paper");
    resolver.parameters = template.parameter_defaults();
    for table in template.resources_of("AWS::DynamoDB::Table") {
        let name = crate::resources::table_name(table.logical_id, tables).unwrap();
        let arn = format!("arn:aws:dynamodb:r:1:table/{name}");
        let attributes = [("Arn".to_owned(), arn.clone()), ("StreamArn".to_owned(), format!("{arn}/stream/label"))];
        let physical = crate::template::Physical { reference: name.to_owned(), attributes: attributes.into() };
        resolver.resources.insert(table.logical_id.to_owned(), physical);
    }
    for queue in template.resources_of("AWS::SQS::Queue") {
        let attributes = [("Arn".to_owned(), format!("arn:aws:sqs:r:1:{}", queue.logical_id))];
        let physical = crate::template::Physical {
            reference: format!("https://q/{}", queue.logical_id),
            attributes: attributes.into(),
        };
        resolver.resources.insert(queue.logical_id.to_owned(), physical);
    }
    for other in template.resources() {
        let arn = format!("arn:aws:paper:r:1:{}", other.logical_id);
        let physical = crate::template::Physical {
            reference: format!("paper-{}", other.logical_id),
            attributes: [("Arn".to_owned(), arn)].into(),
        };
        resolver.resources.entry(other.logical_id.to_owned()).or_insert(physical);
    }
    resolver
}

/// A change of an item of `source` that is its event, as the stream delivers it.
fn firing_record(source: &career_core::store::stream::EventSource) -> aws_lambda_events::dynamodb::EventRecord {
    let (item, old) = match source.kind {
        career_core::events::EventKind::AssessmentCompleted => {
            (serde_json::json!({"status": {"S": "completed"}}), serde_json::json!({"status": {"S": "started"}}))
        }
        _ => (serde_json::json!({"headline": {"S": "new"}}), serde_json::json!({"headline": {"S": "old"}})),
    };
    let keys = serde_json::json!({"userId": {"S": "user-1"}, source.item_key: {"S": "x_1"}});
    let mut new = item.as_object().unwrap().clone();
    new.extend(keys.as_object().unwrap().clone());
    let mut before = old.as_object().unwrap().clone();
    before.extend(keys.as_object().unwrap().clone());
    let record = serde_json::json!({
        "eventID": "1", "eventName": "MODIFY", "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "r",
        "dynamodb": {"Keys": keys, "NewImage": new, "OldImage": before, "SequenceNumber": "1", "SizeBytes": 1,
                     "StreamViewType": "NEW_AND_OLD_IMAGES"},
    });
    serde_json::from_value(record).expect("a stream record")
}

#[test]
fn every_event_source_has_its_tables_stream_on_the_fan_out_and_its_filters_pass_its_events() {
    let tables = career_core::config::TableNames::with_prefix("paper-");
    let sources =
        crate::event_sources::stream_sources(&Template::shipped(), &resolved_on_paper(&tables), function::FANOUT)
            .unwrap();
    for source in &career_core::store::stream::EVENT_SOURCES {
        let table = (source.table)(&tables);
        let stream = sources.iter().find(|s| s.stream_arn.contains(&format!("table/{table}/stream")));
        let stream =
            stream.unwrap_or_else(|| panic!("{}: no stream of {table} feeds the fan-out", source.kind.as_str()));
        let record = firing_record(source);
        assert!((source.fires)(&record), "{}: the sample record is its event", source.kind.as_str());
        let json = serde_json::to_value(&record).unwrap();
        let passes = stream.filters.is_empty()
            || stream.filters.iter().any(|pattern| crate::event_sources::matches_pattern(pattern, &json));
        assert!(passes, "{}: the template's filters drop its event", source.kind.as_str());
        let event = career_core::store::stream::event_from_record(&record).unwrap();
        assert_eq!(event.map(|e| e.kind()), Some(source.kind));
    }
}

/// The filters name only the `dynamodb` key (the local stack refuses any other, as AWS
/// honours no other), and they say what clauses on `eventName` said: a removal reaches the
/// fan-out from no stream, an insert from neither of the operational streams (a
/// subscription or a delivery is created healthy, `pending` or `skipped`: no transition),
/// and a new profile or a completed assessment passes as an insert too.
#[test]
fn the_stream_filters_drop_removals_everywhere_and_inserts_where_only_a_change_is_an_event() {
    let tables = career_core::config::TableNames::with_prefix("paper-");
    let sources =
        crate::event_sources::stream_sources(&Template::shipped(), &resolved_on_paper(&tables), function::FANOUT)
            .unwrap();
    let passes = |source: &crate::event_sources::StreamSource, record: serde_json::Value| {
        source.filters.is_empty()
            || source.filters.iter().any(|pattern| crate::event_sources::matches_pattern(pattern, &record))
    };
    // An item with every attribute the filters look at, as each transition leaves it.
    let item = serde_json::json!({
        "userId": {"S": "user-1"}, "profileId": {"S": "x_1"}, "status": {"S": "completed"},
        "failingSince": {"S": "2026-11-27T08:00:00.000Z"}, "disabledReason": {"S": "failing"},
        "recoveredAt": {"S": "2026-11-27T08:00:00.000Z"},
    });
    let failed = serde_json::json!({"userId": {"S": "user-1"}, "status": {"S": "failed"}});
    let record = |name: &str, old: Option<&serde_json::Value>, new: Option<&serde_json::Value>| {
        let mut change = serde_json::json!({"Keys": {"userId": {"S": "user-1"}}, "SequenceNumber": "1"});
        if let Some(old) = old {
            change["OldImage"] = old.clone();
        }
        if let Some(new) = new {
            change["NewImage"] = new.clone();
        }
        serde_json::json!({"eventName": name, "dynamodb": change})
    };
    let table = |source: &crate::event_sources::StreamSource| {
        [&tables.profiles, &tables.assessments, &tables.webhooks, &tables.deliveries]
            .into_iter()
            .find(|t| source.stream_arn.contains(&format!("table/{t}/stream")))
            .cloned()
            .unwrap_or_else(|| panic!("a stream of another table: {}", source.stream_arn))
    };
    assert_eq!(sources.len(), 4);
    for source in &sources {
        let table = table(source);
        for image in [&item, &failed] {
            assert!(!passes(source, record("REMOVE", Some(image), None)), "{table}: a removal passes");
        }
        let insert = |image| passes(source, record("INSERT", None, Some(image)));
        if table == tables.webhooks || table == tables.deliveries {
            assert!(!insert(&item) && !insert(&failed), "{table}: an insert passes");
        } else {
            assert!(insert(&item), "{table}: an insert of an event is dropped");
        }
    }
}

/// The deliveries stream's filters and the fan-out mean the same for each kind: a record that
/// an attempt makes `failed` passes the template's filters exactly when the fan-out makes a
/// `webhook.delivery.exhausted` of it, which it never does for a delivery of an operational
/// event (contract section 15).
#[test]
fn the_deliveries_streams_filters_pass_exactly_the_kinds_whose_end_is_an_event() {
    let tables = career_core::config::TableNames::with_prefix("paper-");
    let sources =
        crate::event_sources::stream_sources(&Template::shipped(), &resolved_on_paper(&tables), function::FANOUT)
            .unwrap();
    let stream = format!("table/{}/stream", tables.deliveries);
    let stream = sources.iter().find(|s| s.stream_arn.contains(&stream)).expect("the deliveries stream on the fan-out");
    for kind in career_core::events::EventKind::ALL {
        let image = |status: &str, attempts: u32| {
            serde_json::json!({"userId": {"S": "user-1"}, "logPartition": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K#0"},
                "deliveryId": {"S": "dlv_01JDQ41B2C3D4E5F6G7H8J9K0M"}, "subscriptionId": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K"},
                "eventId": {"S": "evt_01JDQ41B2C3D4E5F6G7H8J9K0M"}, "eventType": {"S": kind.as_str()},
                "status": {"S": status}, "attempts": {"N": attempts.to_string()},
                "lastAttemptAt": {"S": "2026-11-27T08:00:00.000Z"}, "lastError": {"S": "answered 500"}})
        };
        let record = serde_json::json!({
            "eventID": "1", "eventName": "MODIFY", "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "r",
            "eventSourceARN": stream.stream_arn,
            "dynamodb": {"ApproximateCreationDateTime": 1795766400.0,
                         "Keys": {"logPartition": {"S": "whk_01JDQ40A1B2C3D4E5F6G7H8J9K#0"}, "deliveryId": {"S": "dlv_01JDQ41B2C3D4E5F6G7H8J9K0M"}},
                         "OldImage": image("pending", 2), "NewImage": image("failed", 3),
                         "SequenceNumber": "1", "SizeBytes": 1, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        });
        let record: aws_lambda_events::dynamodb::EventRecord = serde_json::from_value(record).unwrap();
        // As the pump (and Lambda) match it: the record as it is passed on.
        let json = serde_json::to_value(&record).unwrap();
        let passes = stream.filters.iter().any(|pattern| crate::event_sources::matches_pattern(pattern, &json));
        let event = career_core::store::stream::operational::from_delivery_record(&record).unwrap();
        assert_eq!(passes, event.is_some(), "{}: the template's filters and the fan-out disagree", kind.as_str());
        assert_eq!(passes, career_core::operational::reported(kind), "{}", kind.as_str());
    }
}

#[test]
fn the_template_sets_none_of_the_hooks_of_the_tests_and_the_local_stack() {
    use career_core::aws::runtime::{EXTRA_ROOT_CERT_VAR, TIMEOUT_FACTOR_VAR};
    let template = Template::shipped();
    let globals = template.function_globals().and_then(|g| g.get("Environment")).cloned();
    let own = template.resources_of("AWS::Serverless::Function").filter_map(|f| f.property("Environment").cloned());
    let environments: Vec<Value> = globals.into_iter().chain(own).collect();
    assert!(!environments.is_empty(), "the functions' environments are where this looks");
    for environment in environments {
        let variables = environment.get("Variables").and_then(Value::as_mapping).cloned().unwrap_or_default();
        for hook in [TIMEOUT_FACTOR_VAR, EXTRA_ROOT_CERT_VAR] {
            assert!(variables.get(hook).is_none(), "template.yaml sets {hook}: on AWS it stays unset");
        }
    }
}
