//! `careerctl streams replay` against stream failures the local stack produces: the stream
//! pump gives up on a batch the fan-out keeps failing and writes AWS's on-failure record to
//! the stream failures queue; the replay re-runs its records, and the delivery arrives once.

use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;
use career_service::pipeline::Pipeline;
use career_service::receiver::Receiver;
use career_service::DEADLINE;
use career_service::{clients, eventually, function_settings, sqs, unique_user};
use career_template::on_failure::OnFailureRecord;
use careerctl::streams::{Replayed, Unrecovered};
use local_aws::template::{function, Template, TEMPLATE};

/// The fan-out's role without PutItem on the deliveries table: it fails every event's first
/// write, so the stream pump retries the batch until its retries run out.
fn fan_out_failing() -> Template {
    let grant = "# yet, before its message is queued (contract 12).\n                Action: dynamodb:PutItem";
    assert_eq!(TEMPLATE.matches(grant).count(), 1, "the grant is in the template once");
    let refused = "# yet, before its message is queued (contract 12).\n                Action: dynamodb:BatchWriteItem";
    Template::parse(&TEMPLATE.replace(grant, refused)).expect("the changed template parses")
}

/// Runs the replay as `careerctl streams replay` does, with the stack's own keys (an
/// operator's, which the local stack does not evaluate) and the shipped template's filters.
async fn replay(pipeline: &Pipeline, discard_lost: bool) -> Replayed {
    let settings = function_settings(function::FANOUT, pipeline.settings());
    let fanout = career_fanout::Deps::new(&clients(), &settings).expect("the fan-out's settings");
    let filters = career_template::filters::stream_filters_by_table(
        &Template::shipped(),
        &pipeline.settings().tables,
        function::FANOUT,
    )
    .expect("the fan-out's filters");
    let streams = aws_sdk_dynamodbstreams::Client::new(clients().sdk());
    let mut lines = Vec::new();
    let replayed = careerctl::streams::replay(
        &sqs(),
        &streams,
        &fanout,
        &filters.into_iter().collect(),
        &pipeline.queues.stream_failures,
        discard_lost,
        &mut |line| lines.push(line),
    )
    .await
    .expect("the replay runs");
    assert!(lines.len() > replayed.recovered + replayed.not_recovered.len(), "a line per message: {lines:?}");
    replayed
}

async fn in_queue(pipeline: &Pipeline, queue: &str) -> usize {
    pipeline.count(queue, QueueAttributeName::ApproximateNumberOfMessages).await
        + pipeline.count(queue, QueueAttributeName::ApproximateNumberOfMessagesNotVisible).await
}

/// Waits until the stream failures queue holds `count` messages, and returns their bodies
/// (left in the queue, visible).
async fn failures(pipeline: &Pipeline, count: usize) -> Vec<String> {
    let queue = &pipeline.queues.stream_failures;
    eventually(format!("{count} on-failure records of the stream pump"), || async {
        let held = pipeline.count(queue, QueueAttributeName::ApproximateNumberOfMessages).await;
        if held >= count {
            Ok(())
        } else {
            Err(held)
        }
    })
    .await;
    let received = sqs().receive_message().queue_url(queue).max_number_of_messages(10).visibility_timeout(0).send();
    let messages = received.await.expect("receive").messages.unwrap_or_default();
    messages.iter().map(|m| m.body().unwrap_or_default().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_the_fan_out_gave_up_on_is_replayed_and_delivered_once() {
    let pipeline = Pipeline::from_template(fan_out_failing(), true, |_| {}).await;
    let receiver = Receiver::start(&[200], Duration::ZERO).await;
    let user = unique_user();
    let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
    pipeline.api.admin.update_profile(&user).await.unwrap();

    // Eleven tries (MaximumRetryAttempts 10), a second apart, then AWS's on-failure record.
    let bodies = failures(&pipeline, 1).await;
    let record: OnFailureRecord = serde_json::from_str(&bodies[0]).expect("AWS's DynamoDB stream on-failure record");
    assert_eq!(record.request_context.condition, "RetryAttemptsExhausted");
    assert_eq!(record.request_context.approximate_invoke_count, 11);
    assert!(record.request_context.function_arn.ends_with("-fanout"), "{}", record.request_context.function_arn);
    assert_eq!(record.version, "1.0");
    let profiles = &pipeline.settings().tables.profiles;
    assert!(record.batch.stream_arn.contains(&format!(":table/{profiles}/stream/")), "{}", record.batch.stream_arn);
    assert_eq!(record.batch.batch_size, 1);
    assert_eq!(record.batch.start_sequence_number, record.batch.end_sequence_number);
    assert!(receiver.received().is_empty(), "the fan-out queued nothing");

    let replayed = replay(&pipeline, false).await;
    assert_eq!((replayed.recovered, replayed.records), (1, 1), "{replayed:?}");
    assert!(replayed.not_recovered.is_empty(), "{replayed:?}");
    assert_eq!(in_queue(&pipeline, &pipeline.queues.stream_failures).await, 0, "the recovered message is deleted");
    let delivered = receiver.wait_for(1, DEADLINE).await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].json()["type"], "profile.updated");
    let log = pipeline.api.admin.list_deliveries(&subscription, None, 10, None).await.unwrap();
    let log = serde_json::to_value(log).unwrap();
    let deliveries = log["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 1, "{log}");

    // The same batch replayed again (a second message, or a run that a crash cut short before
    // its delete): its delivery has a record, so nothing is queued and nothing sent twice.
    sqs().send_message().queue_url(&pipeline.queues.stream_failures).message_body(&bodies[0]).send().await.unwrap();
    let again = replay(&pipeline, false).await;
    assert_eq!((again.recovered, again.records), (1, 1), "{again:?}");
    for lane in [&pipeline.queues.delivery, &pipeline.queues.retry] {
        assert_eq!(in_queue(&pipeline, lane).await, 0, "nothing queued again on {lane}");
    }
    assert_eq!(receiver.received().len(), 1, "delivered once");
}

#[tokio::test]
async fn what_cannot_be_recovered_is_said_kept_and_discarded_only_when_lost_for_good() {
    let pipeline = Pipeline::start(false).await;
    let queue = &pipeline.queues.stream_failures;
    let profiles = &pipeline.settings().tables.profiles;
    let stream = career_service::dynamodb().describe_table().table_name(profiles).send().await.unwrap();
    let stream_arn = stream.table.unwrap().latest_stream_arn.unwrap();
    // A batch in a shard the stream does not have (as after the 24 hours a closed shard is
    // kept), and a message that is no batch's record.
    let gone = serde_json::json!({
        "requestContext": {"requestId": "r", "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:f",
                           "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST"},
        "version": "1.0", "timestamp": "2026-11-27T04:00:00.000Z",
        "DDBStreamBatchInfo": {"shardId": "shardId-00000001764216000000-0000dead",
            "startSequenceNumber": "000000000000000000001", "endSequenceNumber": "000000000000000000002",
            "approximateArrivalOfFirstRecord": "2026-11-27T03:59:00Z", "approximateArrivalOfLastRecord": "2026-11-27T03:59:00Z",
            "batchSize": 2, "streamArn": stream_arn},
    });
    for body in [gone.to_string(), "{\"not\": \"a batch\"}".to_owned()] {
        sqs().send_message().queue_url(queue).message_body(body).send().await.unwrap();
    }

    let kept = replay(&pipeline, false).await;
    assert_eq!(kept.recovered, 0);
    let mut reasons: Vec<_> = kept.not_recovered.iter().map(|n| (n.reason, n.deleted)).collect();
    reasons.sort_by_key(|(reason, _)| format!("{reason:?}"));
    assert_eq!(reasons, [(Unrecovered::ShardGone, false), (Unrecovered::Unreadable, false)], "{kept:?}");
    assert_eq!(in_queue(&pipeline, queue).await, 2, "both kept, and visible for the next run");
    assert_eq!(pipeline.count(queue, QueueAttributeName::ApproximateNumberOfMessages).await, 2);

    let discarded = replay(&pipeline, true).await;
    let deleted: Vec<_> = discarded.not_recovered.iter().filter(|n| n.deleted).map(|n| n.reason).collect();
    assert_eq!(deleted, [Unrecovered::ShardGone], "{discarded:?}");
    assert_eq!(in_queue(&pipeline, queue).await, 1, "the unreadable one stays");
}
