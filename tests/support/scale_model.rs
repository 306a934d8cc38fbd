//! The scale model's runs (contract section 22) that both a test and the bench drive: the
//! test asserts what must hold, the bench reports how close to its target it came.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use career_core::aws::queue::DeliveryQueues;
use career_core::clock::Timestamp;
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::DeliveryMessage;
use career_core::events::Event;
use career_core::store::deliveries::DeliveryTable;
use career_core::store::webhooks::WebhookTable;
use career_core::store::PartitionQuota;
use lambda_http::http::Method;
use local_aws::event_sources::pumps::run_queue_pump;
use local_aws::template::function;
use local_aws::throttling::{Modelled, ThrottlingLayer};
use serde_json::json;

use crate::pipeline::Pipeline;
use crate::receiver::{Received, Receiver};
use crate::{
    acting_as, clients, clients_at, dynamodb, eventually, function_settings, in_first_group, queue_sources, services,
    typed, unique_user, DEADLINE,
};

/// The layer in front of the tests' DynamoDB Local, throttling `modelled` at `quota`.
pub async fn layer(quota: PartitionQuota, modelled: Modelled) -> ThrottlingLayer {
    ThrottlingLayer::start(&services().dynamodb_endpoint, dynamodb(), quota, modelled).await.expect("the layer")
}

/// A subscription's `maxDeliveriesPerSecond` past one item's write quota, as the scale model
/// runs it: DynamoDB's per-key quota divided by `divisor`, the rate-limit table's keys held
/// to it, two instances of the delivery function on each lane through the layer, and
/// `deliveries` queued at once on the main lane behind a first one.
pub struct RateLimitRun {
    pub limit: usize,
    pub deliveries: usize,
    pub divisor: u32,
    /// The retry schedule's base: a failed count that waited it would show as a gap so long.
    pub retry_base: Duration,
}

/// What a [`RateLimitRun`] delivered: every arrival of the queued deliveries, in order.
pub struct RateLimited {
    pub arrivals: Vec<Received>,
}

impl RateLimitRun {
    /// Runs it; the first delivery (which makes the receiver's pace known) is not among the
    /// arrivals returned.
    pub async fn run(&self) -> RateLimited {
        let quota = PartitionQuota::DYNAMODB.scaled_down(self.divisor);
        let pipeline = Pipeline::with_settings(false, |s| {
            s.partition_quota = quota;
            s.retry_base = self.retry_base;
        })
        .await;
        // The counters' table only: the model's other keys (a subscription's log shards, say)
        // would throttle the deliveries first, and this is a run of the counters.
        let layer = layer(quota, Modelled::Only(vec![pipeline.settings().tables.rate_limits.clone()])).await;
        let settings = pipeline.settings().clone();
        let mut pumps = Vec::new();
        for lane in queue_sources(function::DELIVER, &settings).into_iter().flat_map(|lane| [lane.clone(), lane]) {
            let through = clients_at(&layer.endpoint, &services().sqs_endpoint);
            let deliver = career_deliver::Deps::new(
                &acting_as(function::DELIVER, &settings, &through),
                &function_settings(function::DELIVER, &settings),
            )
            .expect("delivery settings");
            let sqs = acting_as(function::DELIVER, &settings, &clients()).sqs().clone();
            pumps.push(tokio::spawn(async move { run_queue_pump(sqs, lane, &deliver, std::future::pending()).await }));
        }

        let receiver = Receiver::start(&[200], Duration::ZERO).await;
        let user = unique_user();
        let (subscription, _) = pipeline.subscribe(&user, &receiver.url, &["profile.updated"]).await;
        let key = pipeline.api.key(&user, "write:webhooks").await;
        let path = format!("/api/v1/webhooks?id={subscription}");
        let body = json!({"maxDeliveriesPerSecond": self.limit}).to_string();
        pipeline.api.send_json(Method::PATCH, &path, &key, &body).await.assert_status(200);

        let (user_id, subscription_id) = (typed(&user), typed(&subscription));
        let queue = |count: usize| {
            let messages: Vec<DeliveryMessage> = (0..count)
                .map(|_| DeliveryMessage::new(&Event::ping(&subscription_id), &user_id, &subscription_id))
                .collect();
            let settings = &settings;
            async move {
                // As the fan-out does: the records first, then the messages on the main lane.
                let table = DeliveryTable::new(dynamodb(), &settings.tables.deliveries);
                let pending: Vec<_> = messages.iter().map(|message| (message, DeliveryStatus::Pending)).collect();
                for chunk in pending.chunks(25) {
                    table.insert_new(chunk, Timestamp::now()).await.unwrap();
                }
                let queues = DeliveryQueues::new(&clients(), settings).unwrap();
                for chunk in messages.chunks(100) {
                    queues.post_all(&in_first_group(chunk)).await.unwrap();
                }
            }
        };
        // One delivery first, so that the receiver's pace is known and the subscription spreads
        // over the groups its limit gives it.
        queue(1).await;
        receiver.wait_for(1, DEADLINE).await;
        let webhooks = WebhookTable::new(dynamodb(), &settings.tables.webhooks);
        eventually("the receiver's pace recorded", || async {
            let fast_since = webhooks.get(&user_id, &subscription_id).await.unwrap().unwrap().fast_since;
            fast_since.ok_or("not fast yet")
        })
        .await;

        queue(self.deliveries).await;
        let mut arrivals = receiver.wait_for(self.deliveries + 1, DEADLINE).await;
        for pump in pumps {
            pump.abort();
        }
        arrivals.remove(0);
        RateLimited { arrivals }
    }
}

impl RateLimited {
    /// How many distinct deliveries arrived (each has its `webhook-id`).
    pub fn distinct(&self) -> usize {
        self.arrivals.iter().map(|r| r.header("webhook-id")).collect::<HashSet<_>>().len()
    }

    /// Attempts started in each second, by the second each was signed in (its
    /// `webhook-timestamp`), as tests/it/lanes.rs counts them.
    pub fn per_second(&self) -> BTreeMap<u64, usize> {
        let mut seconds = BTreeMap::new();
        for r in &self.arrivals {
            *seconds.entry(r.header("webhook-timestamp").parse::<u64>().expect("a timestamp")).or_default() += 1;
        }
        seconds
    }

    /// The most attempts started in one second.
    pub fn most_in_a_second(&self) -> usize {
        self.per_second().values().max().copied().unwrap_or(0)
    }

    /// The longest time between two arrivals in a row.
    pub fn longest_gap(&self) -> Duration {
        self.arrivals.windows(2).map(|pair| pair[1].at.saturating_duration_since(pair[0].at)).max().unwrap_or_default()
    }

    /// Deliveries a second from the first arrival to the last: the intervals between them
    /// over the time they took.
    pub fn rate(&self) -> f64 {
        let (Some(first), Some(last)) = (self.arrivals.first(), self.arrivals.last()) else { return 0.0 };
        let took = last.at.saturating_duration_since(first.at).as_secs_f64();
        if took == 0.0 {
            return 0.0;
        }
        (self.arrivals.len() - 1) as f64 / took
    }
}
