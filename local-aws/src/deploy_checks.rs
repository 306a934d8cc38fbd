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
fn the_sweeps_schedules_read_every_due_shard_once_and_a_run_reads_within_its_timeout() {
    let template = Template::shipped();
    let mut named = Vec::new();
    for input in template.schedule_inputs(function::SWEEP).unwrap() {
        let shards = career_sweep::Shards::of(input.clone()).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_ne!(shards, career_sweep::Shards::all(), "{input}: one run for every shard reads them one CPU's worth");
        named.extend(shards.iter());
    }
    named.sort_unstable();
    let every: Vec<_> = career_core::store::deliveries::DueShard::all().collect();
    assert_eq!(named, every, "each due shard is read by exactly one schedule");
    let reading = career_sweep::Reading::DEPLOYED.budget + career_sweep::AFTER_READING;
    assert!(reading <= timeout(&template, function::SWEEP), "a run's reading and claims outlast its timeout");
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
        let name = crate::template::tables::table_name(table.logical_id, tables).unwrap();
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

/// The value a `Ref` names (`!Ref X` or `{Ref: X}`), unresolved.
fn reference(value: &Value) -> Option<&str> {
    match value {
        Value::Tagged(tagged) if tagged.tag.to_string().trim_start_matches('!') == "Ref" => tagged.value.as_str(),
        Value::Mapping(map) if map.len() == 1 => map.get("Ref").and_then(Value::as_str),
        _ => None,
    }
}

/// An alarm's metric math items (`Metrics`), by id; empty for an alarm on one metric.
fn metric_items<'a>(alarm: &crate::template::Resource<'a>) -> Vec<(&'a str, &'a Value)> {
    let items = alarm.property("Metrics").and_then(Value::as_sequence).into_iter().flatten();
    items.filter_map(|item| Some((item.get("Id")?.as_str()?, item))).collect()
}

/// The ids of `items` an expression names.
fn named_in<'a>(expression: &str, items: &[(&'a str, &'a Value)]) -> Vec<&'a str> {
    let words: Vec<&str> = expression.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
    items.iter().map(|(id, _)| *id).filter(|id| words.contains(id)).collect()
}

/// A metric math item's expression as the template writes it (a plain string or a `!Sub`).
fn expression(item: &Value) -> Option<&str> {
    match item.get("Expression")? {
        Value::String(text) => Some(text),
        Value::Tagged(tagged) => tagged.value.as_str(),
        _ => None,
    }
}

/// A queue's level: how many messages it holds, which stays above 0 for as long as they are kept.
fn is_queue_level(namespace: Option<&Value>, metric: Option<&Value>) -> bool {
    const LEVELS: [&str; 3] = [
        "ApproximateNumberOfMessagesVisible",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ];
    namespace.and_then(Value::as_str) == Some("AWS/SQS")
        && metric.and_then(Value::as_str).is_some_and(|m| LEVELS.contains(&m))
}

/// Whether metric math item `id` is a queue's level: the level itself, or an expression of levels
/// only that neither differentiates (DIFF) nor takes a rate (RATE) of them.
fn level_valued(id: &str, items: &[(&str, &Value)]) -> bool {
    let Some((_, item)) = items.iter().find(|(item_id, _)| *item_id == id) else { return false };
    if let Some(metric) = item.get("MetricStat").and_then(|stat| stat.get("Metric")) {
        return is_queue_level(metric.get("Namespace"), metric.get("MetricName"));
    }
    let Some(expression) = expression(item) else { return false };
    let named = named_in(expression, items);
    let changes = ["DIFF", "RATE"].iter().any(|f| expression.contains(f));
    !changes && !named.is_empty() && named.iter().all(|named| *named != id && level_valued(named, items))
}

/// Whether `alarm` fires while a queue merely holds a message: its watched figure is a queue's
/// level and its threshold is crossed by one message (the parameters at their defaults).
fn fires_on_a_held_message(template: &Template, alarm: &crate::template::Resource<'_>) -> bool {
    let items = metric_items(alarm);
    let watches_level = if items.is_empty() {
        is_queue_level(alarm.property("Namespace"), alarm.property("MetricName"))
    } else {
        let returned = items.iter().find(|(_, item)| item.get("ReturnData").and_then(Value::as_bool) != Some(false));
        returned.is_some_and(|(id, _)| level_valued(id, &items))
    };
    let mut resolver = resolver("stack");
    resolver.parameters = template.parameter_defaults();
    let threshold: f64 = resolver.text(alarm.property("Threshold").expect("a threshold")).unwrap().parse().unwrap();
    let one_message_crosses = match alarm.property("ComparisonOperator").and_then(Value::as_str) {
        Some("GreaterThanThreshold") => threshold < 1.0,
        Some("GreaterThanOrEqualToThreshold") => threshold <= 1.0,
        _ => false,
    };
    watches_level && one_message_crosses
}

/// Such an alarm stays in ALARM for as long as the queue keeps the message (up to 14 days) and
/// never notifies of the next one (contract section 22): a dead-letter queue's alarm watches what
/// arrived instead.
#[test]
fn no_alarm_fires_on_a_queue_merely_holding_a_message() {
    let template = Template::shipped();
    let alarms: Vec<_> = template.resources_of("AWS::CloudWatch::Alarm").collect();
    assert!(alarms.len() > 20, "the template's alarms are where this looks");
    for alarm in alarms {
        assert!(
            !fires_on_a_held_message(&template, &alarm),
            "{} fires for as long as a queue holds a message",
            alarm.logical_id
        );
    }
    // The rule sees the alarms it was written against: a dead-letter queue's level above 0, on
    // one metric or through metric math that only fills it in.
    let before = Template::parse(
        "Parameters: {Held: {Type: Number, Default: 0}}
Resources:
  Plain: {Type: 'AWS::CloudWatch::Alarm', Properties: {Namespace: AWS/SQS, MetricName: ApproximateNumberOfMessagesVisible,
    Threshold: !Ref Held, ComparisonOperator: GreaterThanThreshold}}
  Filled: {Type: 'AWS::CloudWatch::Alarm', Properties: {Threshold: 1, ComparisonOperator: GreaterThanOrEqualToThreshold, Metrics: [
    {Id: level, ReturnData: false, MetricStat: {Metric: {Namespace: AWS/SQS, MetricName: ApproximateNumberOfMessagesVisible}}},
    {Id: held, Expression: 'FILL(level, 0)', ReturnData: true}]}}
  Arrived: {Type: 'AWS::CloudWatch::Alarm', Properties: {Threshold: 0, ComparisonOperator: GreaterThanThreshold, Metrics: [
    {Id: level, ReturnData: false, MetricStat: {Metric: {Namespace: AWS/SQS, MetricName: ApproximateNumberOfMessagesVisible}}},
    {Id: arrived, Expression: 'DIFF(FILL(level, 0))', ReturnData: true}]}}
",
    )
    .unwrap();
    let flagged: Vec<_> = before
        .resources_of("AWS::CloudWatch::Alarm")
        .filter(|a| fires_on_a_held_message(&before, a))
        .map(|a| a.logical_id)
        .collect();
    assert_eq!(flagged, ["Plain", "Filled"]);
}

#[test]
fn every_alarm_notifies_the_alarm_topic() {
    for alarm in Template::shipped().resources_of("AWS::CloudWatch::Alarm") {
        let actions = alarm.property("AlarmActions").and_then(Value::as_sequence).cloned().unwrap_or_default();
        assert!(
            actions.iter().any(|action| reference(action) == Some("AlarmTopic")),
            "{} tells no one when it fires",
            alarm.logical_id
        );
    }
}

/// One tenant's dead receiver at low volume makes most of a quiet deployment's attempts: the
/// failure rate counts only periods with the floor's attempts (contract section 22).
#[test]
fn the_failure_rate_alarm_counts_only_periods_of_at_least_its_floor_of_attempts() {
    let template = Template::shipped();
    let alarm = template.resource("DeliveryFailureRateAlarm").unwrap();
    let items = metric_items(&alarm);
    let stat = |id: &str| {
        let (_, item) = items.iter().find(|(item_id, _)| *item_id == id).unwrap_or_else(|| panic!("no {id}"));
        let stat = item.get("MetricStat").expect("a metric");
        (stat["Metric"]["MetricName"].as_str().unwrap().to_owned(), stat["Stat"].as_str().unwrap().to_owned())
    };
    assert_eq!(stat("attempts"), ("Attempts".to_owned(), "Sum".to_owned()));
    let (_, returned) = items.iter().find(|(_, item)| item["ReturnData"].as_bool() == Some(true)).unwrap();
    let mut resolver = resolver("stack");
    resolver.parameters = template.parameter_defaults();
    let expression = resolver.text(returned.get("Expression").unwrap()).unwrap();
    let floor =
        expression.strip_prefix("IF(attempts >= ").and_then(|rest| rest.split_once(',')).map(|(floor, _)| floor);
    let floor: u64 = floor.unwrap_or_else(|| panic!("no floor of attempts: {expression}")).parse().unwrap();
    assert!(floor > 1, "one failed attempt alone would be a 100% failure rate");
    assert!(expression.ends_with(", 0)"), "a period below the floor counts as no failure: {expression}");
}

/// Every table and each of its indexes has its reads' and writes' throttles in one alarm's sum.
#[test]
fn every_table_and_index_has_its_throttles_in_an_alarm() {
    let template = Template::shipped();
    let alarms: Vec<_> = template.resources_of("AWS::CloudWatch::Alarm").collect();
    let tables: Vec<_> = template.resources_of("AWS::DynamoDB::Table").collect();
    assert!(tables.len() >= 8);
    for table in tables {
        let indexes =
            table.property("GlobalSecondaryIndexes").and_then(Value::as_sequence).cloned().unwrap_or_default();
        let mut wanted: Vec<Option<String>> =
            indexes.iter().map(|i| i.get("IndexName").and_then(Value::as_str).map(str::to_owned)).collect();
        wanted.push(None);
        let covers = |alarm: &crate::template::Resource<'_>| {
            let items = metric_items(alarm);
            let returned = items.iter().find(|(_, item)| item["ReturnData"].as_bool() == Some(true));
            let Some(summed) = returned.and_then(|(_, item)| expression(item)).map(|e| named_in(e, &items)) else {
                return false;
            };
            let throttles = |metric: &str, index: &Option<String>| {
                items.iter().any(|(id, item)| {
                    let Some(stat) = item.get("MetricStat") else { return false };
                    let dimensions = stat["Metric"]["Dimensions"].as_sequence().cloned().unwrap_or_default();
                    let dimension =
                        |name: &str| dimensions.iter().find(|d| d["Name"].as_str() == Some(name)).map(|d| &d["Value"]);
                    stat["Metric"]["Namespace"].as_str() == Some("AWS/DynamoDB")
                        && stat["Metric"]["MetricName"].as_str() == Some(metric)
                        && stat["Stat"].as_str() == Some("Sum")
                        && dimension("TableName").and_then(reference) == Some(table.logical_id)
                        && dimension("GlobalSecondaryIndexName").and_then(Value::as_str) == index.as_deref()
                        && summed.contains(id)
                })
            };
            wanted.iter().all(|index| throttles("ReadThrottleEvents", index) && throttles("WriteThrottleEvents", index))
        };
        assert!(
            alarms.iter().any(covers),
            "{}: no alarm sums the throttles of it and each of its indexes",
            table.logical_id
        );
    }
}

/// What one sweep run leaves unread, the next should read: the lag alarm fires past two windows
/// of the sweep's schedule.
#[test]
fn the_sweep_lag_alarm_fires_past_two_windows_of_the_sweeps_schedule() {
    let template = Template::shipped();
    let alarm = template.resource("SweepLagAlarm").unwrap();
    assert_eq!(alarm.property("MetricName").and_then(Value::as_str), Some("SweepLagSeconds"));
    let threshold = alarm.property("Threshold").and_then(Value::as_u64).expect("a threshold in seconds");
    for (_, schedule) in schedules(&template).into_iter().filter(|(f, _)| f == function::SWEEP) {
        let every = rate(schedule.get("ScheduleExpression").and_then(Value::as_str).unwrap());
        assert_eq!(Duration::from_secs(threshold), 2 * every);
    }
}

/// The backlog alarm watches the figure the deliver function writes, in its namespace.
#[test]
fn the_backlog_alarm_watches_the_first_attempts_wait_the_deliver_function_reports() {
    let template = Template::shipped();
    let alarm = template.resource("DeliveryMainLaneBacklogAlarm").unwrap();
    let items = metric_items(&alarm);
    let (_, wait) = items.iter().find(|(id, _)| *id == "wait").expect("the wait");
    let metric = &wait["MetricStat"]["Metric"];
    assert_eq!(metric["MetricName"].as_str(), Some(career_core::telemetry::FIRST_ATTEMPT_WAIT));
    let deliver = template.resource(function::DELIVER).unwrap();
    let namespace = &deliver.property("Environment").unwrap()["Variables"]["METRICS_NAMESPACE"];
    assert_eq!(resolver("s").text(&metric["Namespace"]).unwrap(), resolver("s").text(namespace).unwrap());
}
