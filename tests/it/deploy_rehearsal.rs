//! The rehearsal of a first deploy: the local stack runs what template.yaml declares, IAM and
//! the AWS limits the code depends on included, so a defect that only AWS would show fails
//! here. (What it cannot rehearse, no real API Gateway or Lambda service, docs/deploying.md says.)

use std::time::Duration;

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use career_core::config::TableNames;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::DEADLINE;
use career_service::{eventually, sqs, unique_user};
use local_aws::deployment::Deployment;
use local_aws::template::{function, Template, TEMPLATE};

/// The shipped template with `grant` taken out of the text (one line of a role's statement).
fn without(grant: &str, replacement: &str) -> Template {
    edited(&[(grant, replacement)])
}

/// The shipped template with each `(text, replacement)` made, each text being there once.
fn edited(changes: &[(&str, &str)]) -> Template {
    let mut text = TEMPLATE.to_owned();
    for (from, to) in changes {
        assert_eq!(text.matches(from).count(), 1, "the text is in the template once: {from}");
        text = text.replace(from, to);
    }
    Template::parse(&text).expect("the changed template parses")
}

/// Waits until the local stack refused `function` the `action` on the table `table`.
async fn refused(function: &str, action: &str, table: &str) {
    refused_times(function, action, table, 1).await;
}

/// Waits until the local stack refused `function` the `action` on the table `table` `times`
/// times.
async fn refused_times(function: &str, action: &str, table: &str, times: usize) {
    let refusals = |denials: &[local_aws::iam::Denial]| {
        let on_table = |resource: &String| resource.ends_with(&format!("table/{table}"));
        denials.iter().filter(|(f, a, resource)| f == function && a == action && on_table(resource)).count()
    };
    eventually(format!("{function}'s {action} on {table} refused {times} times"), || async {
        let refused = refusals(&local_aws::iam::denials());
        if refused >= times {
            Ok(())
        } else {
            Err(refused)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_role_without_a_grant_its_code_needs_is_refused_and_nothing_is_delivered() {
    // The fan-out's role as it was before the records came first: no PutItem on the table.
    let template = without(
        "# yet, before its message is queued (contract 12).\n                Action: dynamodb:PutItem",
        "# yet, before its message is queued (contract 12).\n                Action: dynamodb:BatchWriteItem",
    );
    let pipeline = Pipeline::from_template(template, true, |_| {}).await;
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();

    refused(function::FANOUT, "dynamodb:PutItem", &pipeline.settings().tables.deliveries).await;
    // Once the fan-out's mapping has given up on the profile's record (its retries spent),
    // nothing more can come of it.
    pipeline.idle().await;
    assert!(receiver.received().is_empty(), "nothing is delivered");
}

#[tokio::test]
async fn sqs_limits_the_code_depends_on_are_enforced_locally() {
    let pipeline = Pipeline::start(false).await;
    let (sqs, retry) = (sqs(), pipeline.queues.retry.clone());

    // A delay of more than 15 minutes, a batch of more than ten and a message over 1 MiB
    // (SQS's limit since 2025) are refused (moto enforces these itself).
    let delayed = sqs.send_message().queue_url(&retry).message_body("x").delay_seconds(901).send().await;
    assert!(delayed.is_err(), "a delay over 900 s");
    let entries =
        (0..11).map(|i| SendMessageBatchRequestEntry::builder().id(i.to_string()).message_body("x").build().unwrap());
    let batch = sqs.send_message_batch().queue_url(&retry).set_entries(Some(entries.collect())).send().await;
    assert!(batch.is_err(), "eleven entries in a batch");
    let large = sqs.send_message().queue_url(&retry).message_body("x".repeat(1024 * 1024 + 1)).send().await;
    assert!(large.is_err(), "a message over 1 MiB");

    // The visibility limit counts 12 hours from the message's receive, not from its send: a
    // message sent two seconds before it could be received still takes the whole 12 hours.
    sqs.send_message().queue_url(&retry).message_body("late").delay_seconds(2).send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let received = sqs.receive_message().queue_url(&retry).wait_time_seconds(5).send().await.unwrap();
    let handle = received.messages.unwrap()[0].receipt_handle.clone().unwrap();
    let change = |seconds| {
        sqs.change_message_visibility().queue_url(&retry).receipt_handle(&handle).visibility_timeout(seconds).send()
    };
    change(43_199).await.expect("12 hours after the receive, though more than 12 hours after the send");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let beyond = change(43_199).await.expect_err("two seconds later, more than 12 hours after the receive");
    assert!(format!("{beyond:?}").contains("beyond the limit"), "{beyond:?}");
}

#[tokio::test]
async fn an_index_a_queue_setting_and_a_variable_come_from_the_template_alone() {
    let text = TEMPLATE
        .replacen(
            "        - IndexName: byDue\n",
            "        - IndexName: byRehearsal\n          KeySchema:\n            - AttributeName: deliveryId\n              KeyType: HASH\n          Projection:\n            ProjectionType: KEYS_ONLY\n        - IndexName: byDue\n",
            1,
        )
        .replacen(
            "  StreamFailuresQueue:\n    Type: AWS::SQS::Queue\n    DeletionPolicy: Delete\n    UpdateReplacePolicy: Delete\n    Properties:\n",
            "  StreamFailuresQueue:\n    Type: AWS::SQS::Queue\n    DeletionPolicy: Delete\n    UpdateReplacePolicy: Delete\n    Properties:\n      DelaySeconds: 7\n",
            1,
        );
    // The sweep without its deliveries table's name: it falls back to the default name.
    let sweep_start = text.find("  SweepFunction:\n").expect("the sweep function");
    let variable =
        text[sweep_start..].find("          DELIVERIES_TABLE: !Ref DeliveriesTable\n").unwrap() + sweep_start;
    let text = format!(
        "{}{}",
        &text[..variable],
        &text[variable + "          DELIVERIES_TABLE: !Ref DeliveriesTable\n".len()..]
    );
    assert_ne!(text, TEMPLATE);
    let pipeline = Pipeline::from_template(Template::parse(&text).unwrap(), false, |_| {}).await;
    let settings = pipeline.settings();

    let table =
        career_service::dynamodb().describe_table().table_name(&settings.tables.deliveries).send().await.unwrap();
    let indexes = table.table.unwrap().global_secondary_indexes.unwrap_or_default();
    assert!(indexes.iter().any(|i| i.index_name.as_deref() == Some("byRehearsal")), "{indexes:?}");

    let queue = &pipeline.queues.stream_failures;
    let attributes = sqs()
        .get_queue_attributes()
        .queue_url(queue)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::DelaySeconds)
        .send()
        .await
        .unwrap();
    let delay = attributes.attributes.unwrap()[&aws_sdk_sqs::types::QueueAttributeName::DelaySeconds].clone();
    assert_eq!(delay, "7");

    let deployment = career_service::deployment(settings);
    let sweep = deployment.settings_of(local_aws::template::function::SWEEP, settings).unwrap();
    assert_ne!(sweep.tables.deliveries, settings.tables.deliveries, "a variable the template does not give is unset");
    let deliver = deployment.settings_of(local_aws::template::function::DELIVER, settings).unwrap();
    assert_eq!(deliver.tables.deliveries, settings.tables.deliveries);
    assert_eq!(deliver.max_delivery_attempts, settings.max_delivery_attempts, "the stack's parameter");
}

/// A Deny written with `NotAction` denies every action it does not name, as IAM evaluates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deny_written_with_not_action_denies_what_it_does_not_name() {
    let statement = "              - Sid: DeliveryRecords\n";
    let deny = "              - Sid: ReadsOnly\n                Effect: Deny\n                NotAction: [dynamodb:GetItem, dynamodb:Query]\n                Resource: !GetAtt DeliveriesTable.Arn\n";
    let pipeline = Pipeline::from_template(edited(&[(statement, &format!("{deny}{statement}"))]), true, |_| {}).await;
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    refused(function::FANOUT, "dynamodb:PutItem", &pipeline.settings().tables.deliveries).await;
}

/// A policy element or condition operator the local stack's IAM cannot evaluate, an event
/// source setting its pumps do not evaluate, and a variable that names nothing stop the
/// stack when it starts (`make run` makes its stack so too), each named.
#[tokio::test]
async fn what_the_local_stack_cannot_evaluate_stops_it_at_start() {
    let decrypt = "                Action: kms:Decrypt\n                Resource: !GetAtt WebhookSecretsKey.Arn\n                Condition:\n                  StringEquals:\n";
    let records = "              - Sid: DeliveryRecords\n                Effect: Allow\n";
    let main_lane = "            Queue: !GetAtt DeliveryQueue.Arn\n";
    let sweep_after = "          DELIVERY_SWEEP_AFTER_SECONDS: !Ref DeliverySweepAfterSeconds\n";
    let variants = [
        (edited(&[(decrypt, &decrypt.replace("StringEquals:", "StringEqualsIfExists:"))]), "StringEqualsIfExists"),
        (edited(&[(records, &format!("{records}                Principal: '*'\n"))]), "Principal"),
        (
            edited(&[(
                main_lane,
                &format!("{main_lane}            FilterCriteria: {{Filters: [{{Pattern: '{{\"attributes\": {{\"SenderId\": [\"x\"]}}}}'}}]}}\n"),
            )]),
            "body key only",
        ),
        (edited(&[(sweep_after, &format!("{sweep_after}          EXTRA_TABLE: !Ref NoSuchTable\n"))]), "NoSuchTable"),
    ];
    for (template, named) in variants {
        let mut settings = career_service::services().settings.clone();
        let stack = unique_user();
        settings.tables = TableNames::with_prefix(&format!("{stack}-"));
        let created = Deployment::create(&template, &career_service::clients(), &stack, &mut settings).await;
        let error = format!("{:#}", created.err().unwrap_or_else(|| panic!("a stack with what names {named} started")));
        assert!(error.contains(named), "{named}: {error}");
    }
}

/// A variable the template gives a function is the template's value in this stack: a
/// variable that names the wrong table makes the function use that table, as on AWS (here
/// the fan-out writes its records to the subscriptions' table, which its role refuses).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_variable_that_names_the_wrong_table_makes_the_function_use_it() {
    let fanout = "          WEBHOOKS_TABLE: !Ref WebhooksTable\n          DELIVERIES_TABLE: !Ref DeliveriesTable\n          DELIVERY_QUEUE_URL: !Ref DeliveryQueue\n          DELIVERY_RETRY_QUEUE_URL: !Ref DeliveryRetryQueue\n          DELIVERY_GROUPS_PER_SUBSCRIPTION: !Ref DeliveryGroupsPerSubscription\n          OPERATOR_TOPIC_ARN";
    let wrong = fanout.replace("DELIVERIES_TABLE: !Ref DeliveriesTable", "DELIVERIES_TABLE: !Ref WebhooksTable");
    let pipeline = Pipeline::from_template(edited(&[(fanout, &wrong)]), true, |_| {}).await;
    let settings = pipeline.settings();
    let fanout_settings = career_service::function_settings(function::FANOUT, settings);
    assert_eq!(fanout_settings.tables.deliveries, settings.tables.webhooks, "the template's value, not the stack's");
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    refused(function::FANOUT, "dynamodb:PutItem", &settings.tables.webhooks).await;
}

/// The main lane's messages are in flight, waiting or gone: SQS's two counts of it.
async fn main_lane_holds(pipeline: &Pipeline) -> usize {
    use aws_sdk_sqs::types::QueueAttributeName::{ApproximateNumberOfMessages, ApproximateNumberOfMessagesNotVisible};
    let lane = &pipeline.queues.delivery;
    pipeline.count(lane, ApproximateNumberOfMessages).await
        + pipeline.count(lane, ApproximateNumberOfMessagesNotVisible).await
}

/// Waits until the main lane holds no message.
async fn main_lane_empties(pipeline: &Pipeline) {
    eventually("the main lane empty", || async {
        match main_lane_holds(pipeline).await {
            0 => Ok(()),
            held => Err(held),
        }
    })
    .await;
}

/// Without `FunctionResponseTypes: [ReportBatchItemFailures]`, Lambda does not read the
/// function's answer: a batch whose invocation returns is deleted whole, the messages the
/// function kept on the lane included. (The delivery function keeps a message whose
/// subscription it cannot read; here its role lacks the read.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_report_batch_item_failures_a_batch_that_returns_is_deleted_whole() {
    let response_types = "            BatchSize: 10\n            FunctionResponseTypes: [ReportBatchItemFailures]\n            ScalingConfig:\n              MaximumConcurrency: !Ref DeliveryMaxConcurrency\n";
    let subscriptions = "changes its message groups.\n                Action: [dynamodb:GetItem, dynamodb:UpdateItem]";
    let template = edited(&[
        (response_types, &response_types.replace("            FunctionResponseTypes: [ReportBatchItemFailures]\n", "")),
        (subscriptions, "changes its message groups.\n                Action: [dynamodb:UpdateItem]"),
    ]);
    let pipeline = Pipeline::from_template(template, true, |_| {}).await;
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    refused(function::DELIVER, "dynamodb:GetItem", &pipeline.settings().tables.webhooks).await;
    main_lane_empties(&pipeline).await;
    assert!(receiver.received().is_empty(), "the kept message was deleted unsent");
    // Kept and received again, it would have gone to the lane's dead letters after its
    // receives (the lane's maxReceiveCount).
    let dead_letters = &pipeline.queues.delivery_dead_letter;
    let dead = pipeline.count(dead_letters, aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages).await;
    assert_eq!(dead, 0, "deleted after its first invocation, not dead-lettered");
}

/// The same for a stream: without `ReportBatchItemFailures`, a batch whose invocation returns
/// is done, whatever it reports. Here the fan-out's role lacks the write of its records, so it
/// reports each record of a subscribed user failed: the stream moves on past it, and nothing
/// goes to the on-failure queue (with the shipped setting and no retries, each would).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_report_batch_item_failures_a_stream_batch_that_returns_is_done() {
    let profiles = "            Stream: !GetAtt ProfilesTable.StreamArn\n            StartingPosition: TRIM_HORIZON\n            BatchSize: 100\n            BisectBatchOnFunctionError: true\n            MaximumRetryAttempts: 10\n            MaximumRecordAgeInSeconds: 86400\n            FunctionResponseTypes: [ReportBatchItemFailures]\n";
    let unreported = profiles
        .replace("MaximumRetryAttempts: 10", "MaximumRetryAttempts: 0")
        .replace("            FunctionResponseTypes: [ReportBatchItemFailures]\n", "");
    let records = "# yet, before its message is queued (contract 12).\n                Action: dynamodb:PutItem";
    let template =
        edited(&[(profiles, &unreported), (records, &records.replace("dynamodb:PutItem", "dynamodb:BatchWriteItem"))]);
    let pipeline = Pipeline::from_template(template, true, |_| {}).await;
    let deliveries = pipeline.settings().tables.deliveries.clone();
    for times in 1..=2 {
        let user = unique_user();
        pipeline.subscribe(&user, &format!("{}/hook", career_service::sink_url()), &["profile.updated"]).await;
        pipeline.api.admin.update_profile(&user).await.unwrap();
        refused_times(function::FANOUT, "dynamodb:PutItem", &deliveries, times).await;
    }
    let failures = &pipeline.queues.stream_failures;
    let given_up = pipeline.count(failures, aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages).await;
    assert_eq!(given_up, 0, "each batch was done when its invocation returned");
}

/// An SQS source's filter is applied to the message body, as Lambda applies it, and a
/// message it drops is deleted unsent: here the main lane passes only assessments.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_queue_filter_drops_what_it_does_not_pass() {
    let main_lane = "            Queue: !GetAtt DeliveryQueue.Arn\n";
    let filter = r#"            FilterCriteria: {Filters: [{Pattern: '{"body": {"event": {"type": ["assessment.completed"]}}}'}]}"#;
    let pipeline =
        Pipeline::from_template(edited(&[(main_lane, &format!("{main_lane}{filter}\n"))]), true, |_| {}).await;
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    let (subscription, _) =
        pipeline.subscribe(&user, &receiver.url, &["profile.updated", "assessment.completed"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    // The fan-out writes a delivery's record before it queues its message, and reads the next
    // stream only once it is done: the profile's message is queued ahead of the assessment's.
    let deliveries = career_core::store::deliveries::DeliveryTable::new(
        career_service::dynamodb(),
        &pipeline.settings().tables.deliveries,
    );
    eventually("the profile's delivery recorded", || async {
        let listed = deliveries.list(&career_service::typed(&subscription), None, 10, None).await.unwrap();
        if listed.deliveries.is_empty() {
            Err("no record")
        } else {
            Ok(())
        }
    })
    .await;
    pipeline.api.admin.complete_assessment(&user, None).await.unwrap();
    let received = receiver.wait_for(1, DEADLINE).await;
    assert_eq!(
        received[0].json()["type"],
        "assessment.completed",
        "the profile's delivery, ahead in its group, was dropped"
    );
    main_lane_empties(&pipeline).await;
    assert_eq!(receiver.received().len(), 1);
}

/// An event function runs within its template `Timeout`: a delivery batch that outlasts it
/// has failed, so its message is not deleted (it returns after the lane's visibility timeout)
/// and the answer that came after the timeout is never recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_batch_that_outlasts_the_functions_timeout_is_not_deleted() {
    const ANSWER_AFTER: Duration = Duration::from_secs(8);
    let timeout =
        "      # Up to 10 messages per batch, each request capped at 10 s by the function.\n      Timeout: 120\n";
    let pipeline =
        Pipeline::from_template(edited(&[(timeout, &timeout.replace("Timeout: 120", "Timeout: 3"))]), true, |_| {})
            .await;
    let receiver = Receiver::start(&[200], ANSWER_AFTER).await;
    let user = unique_user();
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();
    receiver.wait_for(1, DEADLINE).await;
    // Past the receiver's answer (which the function, ended after 3 s, never reads), the
    // delivery is still in flight on the main lane and its record has no outcome.
    tokio::time::sleep(ANSWER_AFTER + Duration::from_secs(3)).await;
    assert_eq!(main_lane_holds(&pipeline).await, 1, "the message was not deleted");
    let deliveries = career_core::store::deliveries::DeliveryTable::new(
        career_service::dynamodb(),
        &pipeline.settings().tables.deliveries,
    );
    let records = deliveries.list(&career_service::typed(&subscription), None, 10, None).await.unwrap().deliveries;
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].status, records[0].attempts),
        (career_core::delivery::log::DeliveryStatus::Pending, 0),
        "{records:?}"
    );
}
