//! A subscription's health as its owner reads it (contract section 20, "Health"): what one
//! delivery batch adds to a subscription's hour (counters and a latency histogram, so the
//! deliver function writes each subscription at most once a batch), and the figures of the
//! last 24 hours made from those hours, never from the log. Pure: the store keeps the hours
//! (`store::health`), the deliver function tallies, the API answers.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Timelike, Utc};
use serde::Serialize;

use crate::clock::Timestamp;
use crate::ids::SubscriptionId;
use crate::webhooks::{Health, Subscription};

/// The upper bounds, in milliseconds, of the latency histogram's buckets, log-spaced (each
/// about 1.4 times the one before, alternately ×1.5 and ×1.33), so a percentile read from
/// them is within that factor of the truth at any scale; a last, open bucket holds what is
/// slower than the last bound (a send gives up after 10 s).
pub const LATENCY_BOUNDS_MS: [u32; 27] = [
    2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192,
    12288, 16384,
];
/// How many buckets the histogram has: one per bound, and the open one.
pub const BUCKETS: usize = LATENCY_BOUNDS_MS.len() + 1;

/// How far back the figures reach.
pub const WINDOW: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a rate limit's refusal keeps `rateLimited` true.
pub const RATE_LIMITED_FOR: Duration = Duration::from_secs(60);

/// The bucket of a latency: the first whose bound it does not pass.
pub fn bucket_of(latency_ms: f64) -> usize {
    LATENCY_BOUNDS_MS.iter().position(|bound| latency_ms <= f64::from(*bound)).unwrap_or(BUCKETS - 1)
}

/// An hour of the figures: the UTC hour an item of them counts, written `2026-12-07T20`, so
/// hours sort as their text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hour(Timestamp);

impl Hour {
    /// The hour `at` falls in.
    pub fn of(at: Timestamp) -> Self {
        let at: DateTime<Utc> = at.into();
        let start = at.with_nanosecond(0).and_then(|t| t.with_second(0)).and_then(|t| t.with_minute(0));
        Hour(start.map_or(Timestamp::from(at), Timestamp::from))
    }

    /// When it starts.
    pub fn start(self) -> Timestamp {
        self.0
    }

    /// Its text as a key: the start's first 13 characters.
    pub fn key(self) -> String {
        self.0.to_string()[..13].to_owned()
    }

    /// The hour a key names.
    pub fn parse(key: &str) -> Option<Self> {
        Timestamp::parse(&format!("{key}:00:00.000Z")).map(Hour)
    }
}

/// What a delivery batch saw of one subscription: an attempt's outcome and how long it
/// took, or a rate limit's refusal (section 18) that kept one from starting.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Observation {
    Attempt { succeeded: bool, latency_ms: f64, at: Timestamp },
    RateLimited { at: Timestamp },
}

/// What a batch adds to one subscription's hour: one write of it (`store::health`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub attempts: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Attempts per latency bucket ([`LATENCY_BOUNDS_MS`]).
    pub latency: [u64; BUCKETS],
    pub last_success_at: Option<Timestamp>,
    pub last_failure_at: Option<Timestamp>,
    pub rate_limited_at: Option<Timestamp>,
}

impl Tally {
    fn add(&mut self, seen: Observation) {
        match seen {
            Observation::Attempt { succeeded, latency_ms, at } => {
                self.attempts += 1;
                self.latency[bucket_of(latency_ms)] += 1;
                let (count, last) = if succeeded {
                    (&mut self.succeeded, &mut self.last_success_at)
                } else {
                    (&mut self.failed, &mut self.last_failure_at)
                };
                *count += 1;
                *last = (*last).max(Some(at));
            }
            Observation::RateLimited { at } => self.rate_limited_at = self.rate_limited_at.max(Some(at)),
        }
    }
}

/// A batch's observations, one tally per subscription: each is one write, of the hour the
/// batch ends in (a batch that crosses an hour counts in the later one, so no subscription
/// takes two writes of one batch).
pub fn tally(seen: impl IntoIterator<Item = (SubscriptionId, Observation)>) -> BTreeMap<SubscriptionId, Tally> {
    let mut tallies: BTreeMap<SubscriptionId, Tally> = BTreeMap::new();
    for (subscription, seen) in seen {
        tallies.entry(subscription).or_default().add(seen);
    }
    tallies
}

/// One hour of figures as stored: the sum of its batches' tallies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HourFigures {
    pub hour: Hour,
    pub tally: Tally,
}

/// The last 24 hours' attempts and their latency (`null` percentiles with no attempt).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Last24h {
    pub attempts: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub p50_ms: Option<u32>,
    pub p95_ms: Option<u32>,
}

/// The figures of the hours that began in the 24 hours before `now`'s hour ended (the 24
/// hours up to now, and the part of the 25th hour back that overlaps them), summed.
pub fn last_24h(hours: &[HourFigures], now: Timestamp) -> Last24h {
    let oldest = Hour::of(now - WINDOW);
    let mut sum = Tally::default();
    for figures in hours.iter().filter(|figures| figures.hour >= oldest) {
        sum.attempts += figures.tally.attempts;
        sum.succeeded += figures.tally.succeeded;
        sum.failed += figures.tally.failed;
        for (total, count) in sum.latency.iter_mut().zip(figures.tally.latency) {
            *total += count;
        }
    }
    Last24h {
        attempts: sum.attempts,
        succeeded: sum.succeeded,
        failed: sum.failed,
        p50_ms: percentile(&sum.latency, 0.50),
        p95_ms: percentile(&sum.latency, 0.95),
    }
}

/// The `q` quantile of a histogram: the bucket that holds its rank, read linearly between
/// its bounds (the open bucket answers its lower bound, all that is known of it); `None`
/// for an empty one.
pub fn percentile(latency: &[u64; BUCKETS], q: f64) -> Option<u32> {
    let total: u64 = latency.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank of the quantile, from 1: the smallest count whose share reaches q.
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut below = 0;
    for (bucket, count) in latency.iter().enumerate() {
        if below + count >= rank {
            let lower = bucket.checked_sub(1).map_or(0, |previous| LATENCY_BOUNDS_MS[previous]);
            let Some(upper) = LATENCY_BOUNDS_MS.get(bucket) else { return Some(lower) };
            let share = (rank - below) as f64 / *count as f64;
            return Some(lower + (f64::from(upper - lower) * share).round() as u32);
        }
        below += count;
    }
    None
}

crate::text::wire_names! {
    /// A subscription's state as its health shows it.
    pub enum State: "state" {
        /// Enabled, and its failure clock does not run.
        Healthy = "healthy",
        /// Enabled, failing since its first failure after its last success (section 9).
        Failing = "failing",
        /// Disabled (section 9), for any reason.
        Disabled = "disabled",
        /// Enabled, and nothing attempted yet (within the figures' retention).
        New = "new",
    }
}

/// What the health figures know beside the subscription: its hours (newest first or not),
/// how many of its deliveries are held and pending, and when its next probe goes (none
/// while it is not probed).
pub struct Known<'a> {
    pub hours: &'a [HourFigures],
    pub held: u64,
    pub pending: u64,
    pub next_probe_at: Option<Timestamp>,
}

/// `GET /api/v1/webhooks/health` (contract section 20): the subscription's state, since
/// when, its last success and failure, its next probe, the last 24 hours, what waits, and
/// whether its rate limit refused an attempt in the last minute.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    pub subscription_id: SubscriptionId,
    pub state: State,
    pub since: Timestamp,
    pub last_success_at: Option<Timestamp>,
    pub last_failure_at: Option<Timestamp>,
    pub next_probe_at: Option<Timestamp>,
    pub last24h: Last24h,
    pub held: u64,
    pub pending: u64,
    pub rate_limited: bool,
}

impl HealthReport {
    /// The report of `subscription` at `now` from what is `known` of it.
    pub fn of(subscription: &Subscription, known: &Known<'_>, now: Timestamp) -> Self {
        let latest = |of: fn(&Tally) -> Option<Timestamp>| known.hours.iter().filter_map(|h| of(&h.tally)).max();
        let (last_success_at, last_failure_at) = (latest(|t| t.last_success_at), latest(|t| t.last_failure_at));
        let attempted = known.hours.iter().any(|figures| figures.tally.attempts > 0);
        let (state, since) = match subscription.health {
            Health::Disabled { at, .. } => (State::Disabled, at),
            Health::Failing { since } => (State::Failing, since),
            Health::Active if attempted => {
                (State::Healthy, subscription.recovered_at.unwrap_or(subscription.created_at))
            }
            Health::Active => (State::New, subscription.created_at),
        };
        let refused_lately = latest(|t| t.rate_limited_at).is_some_and(|at| now.since(at) <= RATE_LIMITED_FOR);
        HealthReport {
            subscription_id: subscription.id.clone(),
            state,
            since,
            last_success_at,
            last_failure_at,
            next_probe_at: known.next_probe_at,
            last24h: last_24h(known.hours, now),
            held: known.held,
            pending: known.pending,
            rate_limited: subscription.max_deliveries_per_second.is_some() && refused_lately,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn histogram(counts: &[(f64, u64)]) -> [u64; BUCKETS] {
        let mut latency = [0; BUCKETS];
        for (ms, count) in counts {
            latency[bucket_of(*ms)] += count;
        }
        latency
    }

    #[test]
    fn the_bounds_rise_and_each_latency_has_its_bucket() {
        assert!(LATENCY_BOUNDS_MS.windows(2).all(|pair| pair[0] < pair[1]));
        for (ms, bucket) in [(0.0, 0), (2.0, 0), (2.1, 1), (250.0, 14), (256.0, 14), (300.0, 15), (16384.0, 26)] {
            assert_eq!(bucket_of(ms), bucket, "{ms} ms");
        }
        assert_eq!(bucket_of(30_000.0), BUCKETS - 1, "the open bucket");
    }

    #[test]
    fn percentiles_read_the_rank_between_the_buckets_bounds() {
        let empty = [0; BUCKETS];
        assert_eq!(percentile(&empty, 0.5), None);
        // 100 attempts in (256, 384]: the median halfway through it, p95 near its top.
        let one_bucket = histogram(&[(300.0, 100)]);
        assert_eq!(percentile(&one_bucket, 0.50), Some(320));
        assert_eq!(percentile(&one_bucket, 0.95), Some(378));
        // 90 fast, 10 slow: the median among the fast, p95 among the slow.
        let split = histogram(&[(5.0, 90), (1000.0, 10)]);
        assert!((4..=6).contains(&percentile(&split, 0.50).unwrap()), "{:?}", percentile(&split, 0.50));
        assert!((768..=1024).contains(&percentile(&split, 0.95).unwrap()), "{:?}", percentile(&split, 0.95));
        // One attempt: both percentiles are its bucket's read.
        let one = histogram(&[(40.0, 1)]);
        assert_eq!(percentile(&one, 0.5), percentile(&one, 0.95));
        // Slower than the last bound: its lower bound, all that is known.
        assert_eq!(percentile(&histogram(&[(20_000.0, 3)]), 0.95), Some(16384));
    }

    #[test]
    fn a_batch_is_one_tally_per_subscription() {
        let (a, b) = (SubscriptionId::generate(), SubscriptionId::generate());
        let (t1, t2) = (at("2026-12-07T20:00:01.000Z"), at("2026-12-07T20:00:02.000Z"));
        let seen = [
            (a.clone(), Observation::Attempt { succeeded: true, latency_ms: 10.0, at: t2 }),
            (b.clone(), Observation::Attempt { succeeded: false, latency_ms: 5000.0, at: t1 }),
            (a.clone(), Observation::Attempt { succeeded: true, latency_ms: 11.0, at: t1 }),
            (a.clone(), Observation::Attempt { succeeded: false, latency_ms: 300.0, at: t1 }),
            (b.clone(), Observation::RateLimited { at: t2 }),
            (b.clone(), Observation::RateLimited { at: t1 }),
        ];
        let tallies = tally(seen);
        assert_eq!(tallies.len(), 2, "one write each");
        let of_a = &tallies[&a];
        assert_eq!((of_a.attempts, of_a.succeeded, of_a.failed), (3, 2, 1));
        assert_eq!((of_a.last_success_at, of_a.last_failure_at, of_a.rate_limited_at), (Some(t2), Some(t1), None));
        assert_eq!(of_a.latency[bucket_of(10.0)], 2);
        assert_eq!(of_a.latency.iter().sum::<u64>(), 3);
        let of_b = &tallies[&b];
        assert_eq!((of_b.attempts, of_b.failed, of_b.rate_limited_at), (1, 1, Some(t2)));
        assert!(tally([]).is_empty(), "a batch that saw nothing writes nothing");
    }

    #[test]
    fn hours_are_keys_that_sort_as_time() {
        let hour = Hour::of(at("2026-12-07T20:59:59.999Z"));
        assert_eq!(hour.key(), "2026-12-07T20");
        assert_eq!(hour.start(), at("2026-12-07T20:00:00.000Z"));
        assert_eq!(Hour::parse("2026-12-07T20"), Some(hour));
        assert_eq!(Hour::parse("2026-12-07"), None);
        assert!(Hour::of(at("2026-12-07T09:00:00.000Z")).key() < hour.key());
    }

    #[test]
    fn the_last_24_hours_sum_the_hours_within_them() {
        let now = at("2026-12-08T20:30:00.000Z");
        let hour = |text: &str, attempts: u64, latency_ms: f64| HourFigures {
            hour: Hour::of(at(text)),
            tally: Tally {
                attempts,
                succeeded: attempts,
                latency: histogram(&[(latency_ms, attempts)]),
                ..Tally::default()
            },
        };
        let hours = [
            hour("2026-12-08T20:10:00.000Z", 10, 100.0),
            hour("2026-12-07T20:10:00.000Z", 5, 100.0),
            hour("2026-12-07T19:10:00.000Z", 1000, 9000.0),
        ];
        let figures = last_24h(&hours, now);
        assert_eq!((figures.attempts, figures.succeeded, figures.failed), (15, 15, 0), "the 25th hour back is out");
        assert!((96..=128).contains(&figures.p95_ms.unwrap()), "{figures:?}");
        assert_eq!(last_24h(&[], now), Last24h::default());
    }

    fn subscription(health: Health) -> Subscription {
        use crate::events::EventKind;
        use crate::webhooks::{SealedSecrets, Target};
        Subscription {
            health,
            recovered_at: None,
            ..Subscription::new(
                "u1".parse().unwrap(),
                SubscriptionId::generate(),
                Target::Url("https://hooks.example.com/".into()),
                vec![EventKind::ProfileUpdated],
                SealedSecrets("c2VhbGVk".into()),
                None,
            )
        }
    }

    #[test]
    fn the_state_and_since_come_from_the_subscription_and_whether_anything_was_attempted() {
        let now = at("2026-12-08T20:30:00.000Z");
        let (since, disabled_at) = (at("2026-12-08T18:00:00.000Z"), at("2026-12-08T19:00:00.000Z"));
        let attempted = [HourFigures {
            hour: Hour::of(now),
            tally: Tally {
                attempts: 1,
                failed: 1,
                last_failure_at: Some(now),
                latency: histogram(&[(5.0, 1)]),
                ..Tally::default()
            },
        }];
        let known = |hours| Known { hours, held: 0, pending: 0, next_probe_at: None };
        let new = subscription(Health::Active);
        let report = HealthReport::of(&new, &known(&[]), now);
        assert_eq!((report.state, report.since, report.last_failure_at), (State::New, new.created_at, None));
        assert_eq!(report.last24h.p50_ms, None);
        let report = HealthReport::of(&new, &known(&attempted), now);
        assert_eq!((report.state, report.since, report.last_failure_at), (State::Healthy, new.created_at, Some(now)));
        let recovered = Subscription { recovered_at: Some(since), ..new.clone() };
        assert_eq!(HealthReport::of(&recovered, &known(&attempted), now).since, since);
        let failing = subscription(Health::Failing { since });
        assert_eq!(HealthReport::of(&failing, &known(&attempted), now).state, State::Failing);
        assert_eq!(HealthReport::of(&failing, &known(&attempted), now).since, since);
        let reason = crate::webhooks::DisabledReason::Manual;
        let disabled = subscription(Health::Disabled { at: disabled_at, reason });
        let report = HealthReport::of(&disabled, &known(&[]), now);
        assert_eq!((report.state, report.since), (State::Disabled, disabled_at), "disabled before any attempt");
    }

    #[test]
    fn rate_limited_is_a_refusal_in_the_last_minute_of_a_subscription_with_a_limit() {
        let now = at("2026-12-08T20:30:00.000Z");
        let refused = |at: Timestamp| {
            [HourFigures { hour: Hour::of(at), tally: Tally { rate_limited_at: Some(at), ..Tally::default() } }]
        };
        let limited = Subscription {
            max_deliveries_per_second: crate::webhooks::DeliveryRate::parse(&serde_json::json!(5)).unwrap(),
            ..subscription(Health::Active)
        };
        let known = |hours| Known { hours, held: 2, pending: 3, next_probe_at: None };
        let lately = refused(now - Duration::from_secs(59));
        let report = HealthReport::of(&limited, &known(&lately), now);
        assert!(report.rate_limited);
        assert_eq!((report.held, report.pending, report.state), (2, 3, State::New), "a refusal is no attempt");
        let long_ago = refused(now - Duration::from_secs(61));
        assert!(!HealthReport::of(&limited, &known(&long_ago), now).rate_limited);
        let unlimited = subscription(Health::Active);
        assert!(!HealthReport::of(&unlimited, &known(&lately), now).rate_limited, "no limit, nothing refused");
    }
}
