//! The rehearsal of a first deploy: the local stack runs what template.yaml declares, IAM and
//! the AWS limits the code depends on included, so a defect that only AWS would show fails
//! here. (What it cannot rehearse, no real API Gateway or Lambda service, docs/deploying.md says.)

use std::time::Duration;

use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::{sqs, unique_user};
use careerctl::template::{Template, TEMPLATE};

/// The shipped template with `grant` taken out of the text (one line of a role's statement).
fn without(grant: &str, replacement: &str) -> Template {
    assert_eq!(TEMPLATE.matches(grant).count(), 1, "the grant is in the template once: {grant}");
    Template::parse(&TEMPLATE.replace(grant, replacement)).expect("the changed template parses")
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

    let deliveries = &pipeline.settings().tables.deliveries;
    let refused = |denials: &[careerctl::iam::Denial]| {
        denials.iter().any(|(function, action, resource)| {
            function == "FanoutFunction"
                && action == "dynamodb:PutItem"
                && resource.ends_with(&format!("table/{deliveries}"))
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !refused(&careerctl::iam::denials()) {
        assert!(std::time::Instant::now() < deadline, "the fan-out's PutItem was never refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
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
    let sweep = deployment.settings_of(careerctl::template::function::SWEEP, settings).unwrap();
    assert_ne!(sweep.tables.deliveries, settings.tables.deliveries, "a variable the template does not give is unset");
    let deliver = deployment.settings_of(careerctl::template::function::DELIVER, settings).unwrap();
    assert_eq!(deliver.tables.deliveries, settings.tables.deliveries);
    assert_eq!(deliver.max_delivery_attempts, settings.max_delivery_attempts, "the stack's parameter");
}
