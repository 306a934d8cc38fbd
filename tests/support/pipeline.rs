//! The event half of the service for one test: its own tables and queues (so tests do not
//! see each other's streams), the API, and optionally the pumps (the stream's, and one per
//! delivery lane, as `careerctl local` runs them).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::config::{Settings, TableNames};
use career_core::delivery::log::{DeliveryRecord, DeliveryStatus};
use career_core::delivery::plan::Place;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::ids::{SubscriptionId, UserId};
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::WebhookTable;
use local_aws::deployment::Deployment;
use local_aws::event_sources::pumps::checkpointed;
use local_aws::event_sources::StreamSource;
use local_aws::functions::Functions;
use local_aws::resources::QueueUrls;
use local_aws::template::Template;
use tokio::task::JoinHandle;

use crate::{clients, eventually, services, sqs, streams, unique_user, Api};

pub struct Pipeline {
    pub api: Api,
    pub queues: QueueUrls,
    pumps: Vec<JoinHandle<()>>,
    /// With the pumps: the stack's functions as `careerctl local` runs them (`api` serves
    /// their API functions), and the file the fan-out's pump checkpoints its streams in.
    pumped: Option<(Arc<Functions>, PathBuf)>,
}

impl Pipeline {
    /// Insecure (loopback) webhook URLs, three attempts, retries after about 0.2 s and 1 s.
    pub async fn start(with_pumps: bool) -> Self {
        Self::with_settings(with_pumps, |_| {}).await
    }

    pub async fn with_settings(with_pumps: bool, change: impl FnOnce(&mut Settings)) -> Self {
        Self::from_template(Template::shipped(), with_pumps, change).await
    }

    /// A pipeline whose tables, queues, roles and event sources are those of `template` (a
    /// changed copy of the shipped one).
    pub async fn from_template(template: Template, with_pumps: bool, change: impl FnOnce(&mut Settings)) -> Self {
        let prefix = format!("{}-", unique_user());
        let mut settings = services().settings.clone();
        settings.tables = TableNames::with_prefix(&prefix);
        settings.webhook_urls = career_core::webhooks::UrlPolicy::local_stack();
        settings.retry_base = Duration::from_millis(250);
        settings.max_delivery_attempts = 3;
        change(&mut settings);
        let stack = prefix.trim_end_matches('-');
        let deployment = Deployment::create(&template, &clients(), stack, &mut settings)
            .await
            .expect("the template's tables and queues created");
        let queues = deployment.queues().expect("the template's queues");
        // Without the pumps only the API's functions are made, so a template that leaves an
        // event function unable to start still serves the API.
        if !with_pumps {
            crate::register(&settings, deployment);
            return Pipeline { api: Api::on(clients(), settings), queues, pumps: Vec::new(), pumped: None };
        }
        let functions = Functions::new(&deployment, &clients(), &settings).expect("the functions' settings");
        let functions = Arc::new(functions);
        crate::register(&settings, deployment);
        let checkpoints = std::env::temp_dir().join(format!("career-checkpoints-{stack}.json"));
        let (fanout, deliver, into_stream) = (functions.clone(), functions.clone(), checkpoints.clone());
        let pumps = vec![
            tokio::spawn(async move { fanout.pump_streams(Some(into_stream)).await }),
            tokio::spawn(async move { deliver.pump_lanes(std::future::pending).await }),
        ];
        let api = Api::serving(functions.api.clone(), clients(), settings);
        Pipeline { api, queues, pumps, pumped: Some((functions, checkpoints)) }
    }

    pub fn settings(&self) -> &Settings {
        &self.api.settings
    }

    /// Runs the sweep every `every` with the pipeline's settings (its window is theirs), as
    /// the schedules do on AWS (a run per shard, at once), until the pipeline is dropped. A
    /// pipeline without its pumps makes the stack's functions for it.
    pub fn sweep_every(&mut self, every: Duration) {
        let sweep = match &self.pumped {
            Some((functions, _)) => functions.clone(),
            None => {
                let deployment = crate::deployment(self.settings());
                Arc::new(Functions::new(&deployment, &clients(), self.settings()).expect("the functions' settings"))
            }
        };
        self.pumps.push(tokio::spawn(async move { sweep.sweep_every(every, std::future::pending()).await }));
    }

    /// A pipeline with its pumps whose failing subscriptions are disabled after 0.5 s of
    /// failures and probed `probe_after` later, then at doubling intervals for ten minutes
    /// (contract section 20), with the sweep (which sends the probes) every 0.3 s.
    pub async fn probing(probe_after: Duration) -> Self {
        let mut pipeline = Self::with_settings(true, |s| {
            s.webhook_disable_after = Duration::from_millis(500);
            s.probe_after = probe_after;
            s.probe_for = Duration::from_secs(600);
        })
        .await;
        pipeline.sweep_every(Duration::from_millis(300));
        pipeline
    }

    /// Creates a subscription through the API and returns its id and secret.
    pub async fn subscribe(&self, user: impl AsRef<str>, url: &str, events: &[&str]) -> (String, String) {
        let key = self.api.key(user, "write:webhooks").await;
        let body = serde_json::json!({"url": url, "events": events}).to_string();
        let created = self.api.send_json(lambda_http::http::Method::POST, "/api/v1/webhooks", &key, &body).await;
        let json = created.assert_status(201);
        (json["id"].as_str().unwrap().to_owned(), json["secret"].as_str().unwrap().to_owned())
    }

    /// A new user's subscription to `url`, failing (its failure clock runs) and with `count`
    /// deliveries due now on the retry lane, where a failing subscription's deliveries wait:
    /// their records pending, their messages each a delivery's, as a turn moves them. Its id.
    pub async fn failing_with_backlog(&self, url: &str, count: usize) -> String {
        let user = unique_user();
        let (subscription, _) = self.subscribe(&user, url, &["profile.updated"]).await;
        let settings = self.settings();
        let (user_id, id): (UserId, SubscriptionId) = (crate::typed(&user), crate::typed(&subscription));
        let webhooks = WebhookTable::new(crate::dynamodb(), &settings.tables.webhooks);
        let clock = webhooks.start_failure_clock(&user_id, &id, &crate::failed_attempt(Timestamp::now())).await;
        clock.expect("the failure clock started");
        let messages: Vec<DeliveryMessage> =
            (0..count).map(|_| DeliveryMessage::new(&Event::ping(&id), &user_id, &id)).collect();
        let table = DeliveryTable::new(crate::dynamodb(), &settings.tables.deliveries);
        let pending: Vec<_> = messages.iter().map(|message| (message, DeliveryStatus::Pending)).collect();
        for chunk in pending.chunks(25) {
            table.insert_new(chunk, Timestamp::now()).await.expect("the records written");
        }
        let on_retry_lane: Vec<_> = messages.iter().map(|message| (message, Place::Delay(Duration::ZERO))).collect();
        let queues = DeliveryQueues::new(&clients(), settings).expect("the lanes");
        queues.post_all(&on_retry_lane).await.expect("the messages queued");
        subscription
    }

    /// One of SQS's approximate counts of a queue (the emulator's are exact).
    pub async fn count(&self, queue_url: &str, attribute: aws_sdk_sqs::types::QueueAttributeName) -> usize {
        let output = sqs().get_queue_attributes().queue_url(queue_url).attribute_names(attribute.clone()).send().await;
        let attributes = output.expect("the queue's attributes").attributes.unwrap_or_default();
        attributes.get(&attribute).and_then(|n| n.parse().ok()).expect("the count asked for")
    }

    /// Waits until neither delivery lane holds a message (waiting, in flight or delayed): each
    /// delivery queued so far has had its last turn (sent, dropped or dead-lettered), so
    /// nothing more is sent until something new happens (an event, a retry by hand, a sweep).
    /// What is still in a stream is not on a lane yet: a test waits for an event's deliveries
    /// to arrive first, or for a later event of the same table that must arrive after it.
    pub async fn drained(&self) {
        let sqs = sqs();
        let lanes = (&self.queues.delivery, &self.queues.retry);
        eventually("the delivery lanes drained", || async {
            let held = (crate::held(&sqs, lanes.0).await, crate::held(&sqs, lanes.1).await);
            if held == (0, 0) {
                Ok(())
            } else {
                Err(format!("(main, retry) hold {held:?}"))
            }
        })
        .await
    }

    /// Waits until nothing more can arrive until something new happens: every record of the
    /// fan-out's streams read (fanned out, or given up on), both lanes empty, and no record
    /// added to a stream meanwhile. A delivery's turn writes its record before its message
    /// leaves its lane, and the fan-out queues a batch's messages (and publishes its
    /// operational events) before its pump moves past the batch, so once all three hold no
    /// delivery, operational event or notification is on its way.
    pub async fn idle(&self) {
        let (functions, checkpoints) = self.pumped.as_ref().expect("a pipeline with its pumps");
        let sources = &functions.streams;
        let sqs = sqs();
        let lanes = (&self.queues.delivery, &self.queues.retry);
        eventually("the streams read and the delivery lanes empty", || async {
            let ends = stream_ends(sources).await?;
            let read = checkpointed(checkpoints);
            let unread: Vec<&String> =
                ends.iter().filter(|(shard, end)| read.get(*shard) != Some(end)).map(|e| e.0).collect();
            if !unread.is_empty() {
                return Err(format!("shards not read to their end: {unread:?}"));
            }
            let held = (crate::held(&sqs, lanes.0).await, crate::held(&sqs, lanes.1).await);
            if held != (0, 0) {
                return Err(format!("(main, retry) hold {held:?}"));
            }
            match stream_ends(sources).await? == ends {
                true => Ok(()),
                false => Err("a record was added to a stream meanwhile".to_owned()),
            }
        })
        .await
    }

    /// [`Pipeline::drained`], and every record of `subscription` settled (none `pending`): its
    /// records, newest first.
    pub async fn settled(&self, subscription: &str) -> Vec<DeliveryRecord> {
        self.drained().await;
        let deliveries = DeliveryTable::new(crate::dynamodb(), &self.settings().tables.deliveries);
        let subscription = crate::typed(subscription);
        eventually("the records settled", || async {
            let records = deliveries.list(&subscription, None, 100, None).await.expect("the delivery log").deliveries;
            match records.iter().any(|record| record.status == DeliveryStatus::Pending) {
                false => Ok(records),
                true => Err(records),
            }
        })
        .await
    }

    /// What was published to the stack's operator topic, waiting up to `within` for at
    /// least `count` notifications (each is returned once: they are taken from its inbox).
    pub async fn notifications(&self, count: usize, within: Duration) -> Vec<careerctl::notifications::Notification> {
        let inbox = crate::deployment(self.settings()).operator_inbox().expect("the operator topic's inbox");
        let deadline = std::time::Instant::now() + within;
        let mut taken = Vec::new();
        loop {
            taken.extend(careerctl::notifications::take(&sqs(), &inbox).await.expect("the inbox"));
            if taken.len() >= count || std::time::Instant::now() >= deadline {
                return taken;
            }
        }
    }

    /// Receives what is on a queue now (without deleting it), waiting up to `within`
    /// for at least `count` messages.
    pub async fn peek(&self, queue_url: &str, count: usize, within: Duration) -> Vec<aws_sdk_sqs::types::Message> {
        let deadline = std::time::Instant::now() + within;
        let sqs = sqs();
        let mut seen = Vec::new();
        while seen.len() < count && std::time::Instant::now() < deadline {
            let output = sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .visibility_timeout(30)
                .wait_time_seconds(1)
                .send()
                .await
                .expect("receive");
            seen.extend(output.messages.unwrap_or_default());
        }
        seen
    }
}

/// Each shard of `sources`' streams that has a record, with its last record's sequence number.
async fn stream_ends(sources: &[StreamSource]) -> Result<BTreeMap<String, String>, String> {
    let streams = streams();
    let mut ends = BTreeMap::new();
    for source in sources {
        let description = streams.describe_stream().stream_arn(&source.stream_arn).send().await;
        let description = description.map_err(|err| format!("{err:?}"))?.stream_description;
        for shard in description.and_then(|d| d.shards).unwrap_or_default() {
            let shard_id = shard.shard_id.unwrap_or_default();
            let iterator = streams
                .get_shard_iterator()
                .stream_arn(&source.stream_arn)
                .shard_id(&shard_id)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await;
            let mut iterator = iterator.map_err(|err| format!("{err:?}"))?.shard_iterator;
            while let Some(current) = iterator {
                let output = streams.get_records().shard_iterator(current).send().await;
                let output = output.map_err(|err| format!("{err:?}"))?;
                let records = output.records.unwrap_or_default();
                let Some(last) = records.last().and_then(|r| r.dynamodb.as_ref()?.sequence_number.clone()) else {
                    break;
                };
                ends.insert(shard_id.clone(), last);
                iterator = output.next_shard_iterator;
            }
        }
    }
    Ok(ends)
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        for pump in &self.pumps {
            pump.abort();
        }
        if let Some((_, checkpoints)) = &self.pumped {
            let _ = std::fs::remove_file(checkpoints);
        }
    }
}
