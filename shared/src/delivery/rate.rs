//! A subscription's `maxDeliveriesPerSecond` (contract section 18): at most that many
//! attempts start in any one-second window, across every instance of the delivery function.
//! Each attempt is counted just before its send in one of the subscription's counters in the
//! rate-limit table, on the same sliding window as the API keys' limit (`ratelimit`), for a
//! start a little ahead ([`LEAD`]): the count is stamped with that start and the attempt waits
//! for it, so the count's latency is a short delay of the attempt rather than a wider window
//! (which would leave part of the limit unused). A delivery over the limit waits for the
//! place the window frees next, within its turn when that is soon ([`over_limit`]), else back
//! on its lane; its attempt is not spent either way.
//!
//! One item takes at most its partition's write units a second (contract section 22), and a
//! limit may be 10,000, so a limit is split over [`Counters`]: items that each admit their
//! share of it, the shares adding up to the limit. An attempt is counted on one counter drawn
//! at random among those this instance does not know to be full, so the counts spread evenly
//! over the items, and a second counter is tried when the first is full.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clock::Timestamp;
use crate::delivery::plan::{HeldBack, Lease};
use crate::ids::SubscriptionId;
use crate::ratelimit::SlidingWindow;
use crate::store::rate_limits::RateLimitTable;
use crate::store::{PartitionQuota, StoreError};
use crate::webhooks::DeliveryRate;

/// How long after its count is asked an admitted attempt starts: the count is stamped with
/// that start, and the attempt waits for it when the answer comes sooner. An answer that
/// comes later is not used: its place is taken back and the attempt counted again.
pub const LEAD: Duration = Duration::from_millis(200);
/// How late after its stamp an admitted attempt may still start (waking from its wait, and
/// signing); one that would start later is not sent: its place is taken back and it is
/// counted again.
pub const PRECISION: Duration = Duration::from_millis(30);
/// The window each limit is counted over: the contract's second and the precision, so no
/// second of attempt starts holds attempts stamped further apart than one window.
pub const WINDOW: Duration = Duration::from_secs(1).saturating_add(PRECISION);
/// Slots of the window: a window's count takes in its oldest slot whole, so the counted span
/// is one window and up to one slot more, and finer slots leave less of the limit unused.
/// Sixteen keep an item's counters (about one window of them) well within one write unit.
const SLOTS: u64 = 16;
/// The shortest wait of a delivery over the limit on its lane: SQS counts visibility in
/// whole seconds, and a wait of none would hand the message straight back.
const SHORTEST_WAIT: Duration = Duration::from_secs(1);
/// How far waits after a failed count spread beyond [`SHORTEST_WAIT`]: a throttled counter
/// is free again within a second, and the deliveries it turned back should not all come back
/// in the same second.
const SPREAD_AFTER_FAILURE: Duration = Duration::from_secs(2);
/// The longest a turn waits within itself, all told, for places its subscription's limit
/// frees: a batch's worth of one subscription's deliveries at a limit of at least a batch a
/// second (its groups' pacing, contract section 18) is admitted within it, and a wait there
/// holds nothing its message would not hold anyway (its group is in flight with it).
pub const LONGEST_WAIT_IN_TURN: Duration = Duration::from_secs(2);
/// Counters tried for one attempt: a second one when the first is full, so a counter that
/// filled first does not hold back attempts that another has room for.
const TRIES: usize = 2;

/// What the limit says of one more attempt now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Counted, and its start come: the attempt starts now.
    Admitted,
    /// Over the limit: a place frees in this long (to the millisecond; where it waits is
    /// [`over_limit`]'s to say).
    Wait(Duration),
}

/// What becomes of a count answered at `answered` for a start at `stamp`: a wait until the
/// stamp (none when it is come), or `None` when the answer came too late to start then.
pub fn until_start(stamp: Timestamp, answered: Timestamp) -> Option<Duration> {
    (answered <= stamp).then(|| stamp.since(answered))
}

/// Whether an attempt stamped `stamp` may still start at `now`.
pub fn starts_in_time(stamp: Timestamp, now: Timestamp) -> bool {
    now <= stamp + PRECISION
}

/// A limit's counters: as many items as keep each one's writes within half its partition's
/// write units (the other half is for the refused counts it takes back, two writes each, and
/// for removing old counters), their shares of the limit adding up to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    limit: u32,
    count: u32,
}

impl Counters {
    pub fn of(rate: DeliveryRate, quota: PartitionQuota) -> Self {
        let share = (quota.write_units / 2).max(1);
        let limit = rate.per_second();
        Counters { limit, count: limit.div_ceil(share).max(1) }
    }

    pub fn count(self) -> u32 {
        self.count
    }

    /// What `counter` admits in one window: the limit split evenly, the first counters
    /// taking one more each when it does not divide.
    pub fn share(self, counter: u32) -> u32 {
        self.limit / self.count + u32::from(counter < self.limit % self.count)
    }
}

/// What this instance knows of one subscription's full counters.
#[derive(Debug)]
struct Refused {
    counters: Counters,
    /// Per counter: until when it certainly stays full.
    until: Vec<Option<Instant>>,
    /// Deliveries this instance sent back to wait since every counter was full.
    waiting: u32,
}

impl Refused {
    fn new(counters: Counters) -> Self {
        Refused { counters, until: vec![None; counters.count as usize], waiting: 0 }
    }

    /// The counters not known to be full at `now`.
    fn open(&self, now: Instant) -> Vec<u32> {
        (0..self.counters.count).filter(|c| self.until[*c as usize].is_none_or(|until| until <= now)).collect()
    }

    fn refuse(&mut self, counter: u32, until: Instant) {
        self.until[counter as usize] = Some(until);
    }

    /// When every counter is full at `now`: how long until the first frees a place.
    fn all_full_for(&self, now: Instant) -> Option<Duration> {
        let soonest = self.until.iter().map(|until| until.map(|u| u.saturating_duration_since(now)));
        soonest.collect::<Option<Vec<Duration>>>()?.into_iter().min().filter(|wait| !wait.is_zero())
    }

    fn lapsed(&self, now: Instant) -> bool {
        self.until.iter().all(|until| until.is_none_or(|u| u <= now))
    }
}

/// The counter an attempt is counted on: one of the `open` ones, by a random `draw`.
pub fn pick(open: &[u32], draw: u64) -> Option<u32> {
    let len = u64::try_from(open.len()).ok().filter(|len| *len > 0)?;
    open.get(usize::try_from(draw % len).ok()?).copied()
}

pub struct DeliveryLimiter {
    window: SlidingWindow,
    /// Where a failing subscription's one open send is held (contract section 22).
    table: RateLimitTable,
    quota: PartitionQuota,
    /// Subscriptions with counters refused on this instance.
    refused: Mutex<HashMap<SubscriptionId, Refused>>,
}

impl DeliveryLimiter {
    /// Counters in `table`, each kept within `quota`'s writes.
    pub fn new(table: RateLimitTable, quota: PartitionQuota) -> Self {
        Self { window: SlidingWindow::new(table.clone(), WINDOW, SLOTS), table, quota, refused: Mutex::default() }
    }

    /// Opens `subscription`'s one send until `until`, unless another is open (a failing
    /// subscription sends one at a time, `plan::one_send_open`): whether it opened.
    pub async fn open_send(
        &self,
        subscription: &SubscriptionId,
        until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        self.table.open_send(&open_send_bucket(subscription), until, now).await
    }

    /// Closes the send opened until `until`, once it ended.
    pub async fn close_send(&self, subscription: &SubscriptionId, until: Timestamp) -> Result<(), StoreError> {
        self.table.close_send(&open_send_bucket(subscription), until).await
    }

    /// Counts one attempt to `subscription` if it is within `rate`, for a start [`LEAD`]
    /// ahead, and returns once that start is come. A subscription whose counters were all
    /// refused on this instance is answered from memory until one of them frees a place.
    pub async fn admit(&self, subscription: &SubscriptionId, rate: DeliveryRate) -> Result<Admission, StoreError> {
        let counters = Counters::of(rate, self.quota);
        let mut open = match self.known(subscription, rate, counters) {
            Known::AllFull(wait) => return Ok(Admission::Wait(wait)),
            Known::Open(open) => open,
        };
        for _ in 0..TRIES {
            let Some(counter) = pick(&open, u64::from_le_bytes(crate::random::random_bytes())) else { break };
            let stamp = Timestamp::now() + LEAD;
            let counted = self.window.count_at(&bucket(subscription, counter), counters.share(counter), stamp).await?;
            if !counted.status.exceeded {
                if starts_at(stamp).await {
                    return Ok(Admission::Admitted);
                }
                // Not started: its place is given back, and it is counted again at once.
                self.window.take_back(&bucket(subscription, counter), stamp).await;
                return Ok(Admission::Wait(Duration::ZERO));
            }
            // A place frees `frees_in` after the stamp: for a count asked that much later.
            self.remember(subscription, counters, counter, counted.frees_in);
            open.retain(|c| *c != counter);
        }
        // Counters not known to be full may still have room: counted again at once.
        let reset = self.soonest_free(subscription).unwrap_or(Duration::ZERO);
        Ok(Admission::Wait(wait(reset, 0, rate)))
    }

    fn known(&self, subscription: &SubscriptionId, rate: DeliveryRate, counters: Counters) -> Known {
        let now = Instant::now();
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let Some(known) = refused.get_mut(subscription).filter(|known| known.counters == counters) else {
            return Known::Open((0..counters.count).collect());
        };
        match known.all_full_for(now) {
            Some(reset) => {
                let ahead = known.waiting;
                known.waiting += 1;
                Known::AllFull(wait(reset, ahead, rate))
            }
            None => Known::Open(known.open(now)),
        }
    }

    fn remember(&self, subscription: &SubscriptionId, counters: Counters, counter: u32, reset: Duration) {
        let now = Instant::now();
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.retain(|_, known| !known.lapsed(now));
        let known = refused.entry(subscription.clone()).or_insert_with(|| Refused::new(counters));
        if known.counters != counters {
            *known = Refused::new(counters);
        }
        known.refuse(counter, now + reset);
        // The first delivery sent back once every counter is full.
        known.waiting = u32::from(known.all_full_for(now).is_some());
    }

    fn soonest_free(&self, subscription: &SubscriptionId) -> Option<Duration> {
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.get(subscription)?.all_full_for(Instant::now())
    }
}

/// Waits for an admitted attempt's `stamp`: whether it is come in time to start.
async fn starts_at(stamp: Timestamp) -> bool {
    let Some(until) = until_start(stamp, Timestamp::now()) else {
        tracing::info!("the rate limit's count answered after the attempt's start; it is counted again");
        return false;
    };
    tokio::time::sleep(until).await;
    let in_time = starts_in_time(stamp, Timestamp::now());
    if !in_time {
        tracing::info!("the attempt woke too late for its start in the rate limit's window; it is counted again");
    }
    in_time
}

/// What this instance knows of a subscription's counters before counting.
enum Known {
    /// Every counter full: the delivery waits this long, with no count.
    AllFull(Duration),
    /// The counters that may have room.
    Open(Vec<u32>),
}

/// The rate-limit table's bucket of a subscription's deliveries, on its `counter` (API keys'
/// buckets are hex hashes, so the two never meet). The first counter keeps the bucket of a
/// subscription's single counter from before the split.
fn bucket(subscription: &SubscriptionId, counter: u32) -> String {
    match counter {
        0 => format!("deliveries#{}", subscription.as_str()),
        n => format!("deliveries#{}#{n}", subscription.as_str()),
    }
}

/// The rate-limit table's bucket of a subscription's one open send while it fails.
fn open_send_bucket(subscription: &SubscriptionId) -> String {
    format!("sending#{}", subscription.as_str())
}

/// How long a delivery over the limit waits: until the window frees a place (`reset`), and
/// one limit's interval (a second over `rate`) more for each delivery this instance already
/// sent back to wait before it, so that the deliveries waiting come back at the limit's pace
/// rather than all at once, to be refused again.
pub fn wait(reset: Duration, ahead: u32, rate: DeliveryRate) -> Duration {
    reset + Duration::from_secs(1) * ahead / rate.per_second()
}

/// Where a delivery over the limit waits for the place that frees in `wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverLimit {
    /// In its turn, which then counts it again.
    InTurn(Duration),
    /// Back on its lane, unsent.
    OnLane(HeldBack),
}

/// Where a delivery over the limit waits for the place that frees in `wait`, its turn at
/// `now` having waited `waited` for the limit already: in the turn while all its waits stay
/// within [`LONGEST_WAIT_IN_TURN`] and its claim (`lease`, none for a record not written yet)
/// still allows a send after the wait and the count's lead; else on its lane, in whole
/// seconds ([`on_lane`]).
pub fn over_limit(wait: Duration, waited: Duration, lease: Option<Lease>, now: Timestamp) -> OverLimit {
    match waited + wait <= LONGEST_WAIT_IN_TURN && lease.is_none_or(|lease| lease.allows_send_at(now + wait + LEAD)) {
        true => OverLimit::InTurn(wait),
        false => OverLimit::OnLane(HeldBack::OverRate(on_lane(wait))),
    }
}

/// A wait of `wait` on the lane: in whole seconds (SQS's visibility), at least one.
pub fn on_lane(wait: Duration) -> Duration {
    Duration::from_secs(wait.as_millis().div_ceil(1000) as u64).max(SHORTEST_WAIT)
}

/// How long a delivery waits when its count failed (the counter throttled, or no answer in
/// time): a second or a few, by `jitter` in `[0, 1)`, never the retry schedule's base, since
/// the attempt was not made.
pub fn wait_after_failed_count(jitter: f64) -> Duration {
    SHORTEST_WAIT + SPREAD_AFTER_FAILURE.mul_f64(jitter.clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_over_the_limit_come_back_at_the_limits_pace() {
        let rate = |n: u64| DeliveryRate::parse(&serde_json::json!(n)).unwrap().unwrap();
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        let cases = [
            (s(0), 0, rate(2), s(0), "the window frees at once"),
            (ms(300), 0, rate(2), ms(300), "the first sent back: when a place frees"),
            (ms(300), 1, rate(2), ms(800), "the second: one interval of the limit later"),
            (ms(300), 7, rate(2), ms(3800), "the eighth of a batch"),
            (s(2), 9, rate(1), s(11), "one a second"),
            (ms(40), 9, rate(25), ms(400), "a batch at 25 a second"),
            (ms(1), 3, rate(3), ms(1001), "an interval that does not divide a second"),
        ];
        for (reset, ahead, rate, expected, case) in cases {
            assert_eq!(wait(reset, ahead, rate), expected, "{case}");
        }
    }

    #[test]
    fn a_wait_on_the_lane_is_in_whole_seconds_at_least_one() {
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        for (wait, expected) in [(s(0), s(1)), (ms(300), s(1)), (s(1), s(1)), (ms(1001), s(2)), (ms(3800), s(4))] {
            assert_eq!(on_lane(wait), expected, "{wait:?}");
        }
    }

    #[test]
    fn a_delivery_over_the_limit_waits_in_its_turn_for_a_place_soon_else_on_its_lane() {
        let at = |ms: u64| Timestamp::from_unix_millis(1_800_000_000_000 + ms);
        let (s, ms) = (Duration::from_secs, Duration::from_millis);
        let lease = Some(Lease::from(at(0)));
        let on_lane = |secs| OverLimit::OnLane(HeldBack::OverRate(s(secs)));
        let cases = [
            (ms(300), s(0), lease, at(0), OverLimit::InTurn(ms(300)), "a place soon"),
            (s(0), s(0), lease, at(0), OverLimit::InTurn(s(0)), "a count too late: counted again at once"),
            (ms(300), s(0), None, at(0), OverLimit::InTurn(ms(300)), "a record not written yet"),
            (ms(999), ms(1001), lease, at(0), OverLimit::InTurn(ms(999)), "the turn's waits add up to the most"),
            (ms(999), ms(1002), lease, at(0), on_lane(1), "past the most a turn waits"),
            (ms(1500), s(0), lease, at(0), OverLimit::InTurn(ms(1500)), "a place a second and a half away"),
            (ms(3800), s(0), lease, at(0), on_lane(4), "too far away, in whole seconds"),
            (ms(300), s(0), lease, at(9_700), on_lane(1), "the claim would not allow the send after it"),
            (ms(300), s(0), lease, at(10_000) - ms(300) - LEAD, OverLimit::InTurn(ms(300)), "the claim just allows it"),
        ];
        for (wait, waited, lease, now, expected, case) in cases {
            assert_eq!(over_limit(wait, waited, lease, now), expected, "{case}");
        }
    }

    #[test]
    fn an_admitted_attempt_starts_at_its_stamp_or_not_at_all() {
        let at = |ms: u64| Timestamp::from_unix_millis(1_800_000_000_000 + ms);
        let ms = Duration::from_millis;
        assert_eq!(until_start(at(100), at(20)), Some(ms(80)), "an answer in time waits for its start");
        assert_eq!(until_start(at(100), at(100)), Some(ms(0)), "an answer at the start starts");
        assert_eq!(until_start(at(100), at(101)), None, "an answer after the start is too late");
        assert!(starts_in_time(at(100), at(100)));
        assert!(starts_in_time(at(100), at(100) + PRECISION));
        assert!(!starts_in_time(at(100), at(101) + PRECISION), "woken too late");
    }

    #[test]
    fn a_subscriptions_buckets_are_not_an_api_keys_and_the_first_is_the_single_counters() {
        let subscription: SubscriptionId = "whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap();
        assert_eq!(bucket(&subscription, 0), "deliveries#whk_01JDQ40A1B2C3D4E5F6G7H8J9K");
        assert_eq!(bucket(&subscription, 7), "deliveries#whk_01JDQ40A1B2C3D4E5F6G7H8J9K#7");
        // The one open send's bucket is none of the counters'.
        assert_eq!(open_send_bucket(&subscription), "sending#whk_01JDQ40A1B2C3D4E5F6G7H8J9K");
    }

    fn rate(n: u64) -> DeliveryRate {
        DeliveryRate::parse(&serde_json::json!(n)).unwrap().unwrap()
    }

    #[test]
    fn a_limit_is_split_over_counters_whose_shares_add_up_to_it_each_within_half_an_items_writes() {
        let model = PartitionQuota::DYNAMODB.scaled_down(100);
        let cases = [
            (1, PartitionQuota::DYNAMODB, 1),
            (500, PartitionQuota::DYNAMODB, 1),
            (501, PartitionQuota::DYNAMODB, 2),
            (1_000, PartitionQuota::DYNAMODB, 2),
            (10_000, PartitionQuota::DYNAMODB, 20),
            (9_999, PartitionQuota::DYNAMODB, 20),
            (50, model, 10),
            (7, model, 2),
        ];
        for (limit, quota, count) in cases {
            let counters = Counters::of(rate(limit), quota);
            assert_eq!(counters.count(), count, "{limit} at {quota:?}");
            let shares: Vec<u32> = (0..count).map(|c| counters.share(c)).collect();
            assert_eq!(shares.iter().sum::<u32>(), limit as u32, "{limit}: {shares:?}");
            assert!(shares.iter().all(|s| *s >= 1 && *s <= quota.write_units / 2), "{limit}: {shares:?}");
            let (least, most) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(most - least <= 1, "evenly: {shares:?}");
        }
    }

    #[test]
    fn an_attempt_is_counted_on_an_open_counter_drawn_at_random() {
        assert_eq!(pick(&[], 5), None);
        assert_eq!(pick(&[3], u64::MAX), Some(3));
        let open = [0, 2, 5];
        let picked: Vec<u32> = (0..6).map(|draw| pick(&open, draw).unwrap()).collect();
        assert_eq!(picked, [0, 2, 5, 0, 2, 5], "every open counter, none other");
    }

    #[test]
    fn a_subscription_is_answered_from_memory_only_once_every_counter_is_known_full() {
        let counters = Counters::of(rate(50), PartitionQuota::DYNAMODB.scaled_down(100));
        let now = Instant::now();
        let s = Duration::from_secs;
        let mut refused = Refused::new(counters);
        assert_eq!(refused.open(now).len(), 10);
        for counter in 0..9 {
            refused.refuse(counter, now + s(1) + Duration::from_millis(u64::from(counter)));
        }
        assert_eq!(refused.open(now), [9], "one counter may have room");
        assert_eq!(refused.all_full_for(now), None);
        refused.refuse(9, now + s(2));
        assert_eq!(refused.all_full_for(now), Some(s(1)), "until the first frees a place");
        assert!(refused.open(now).is_empty());
        assert_eq!(refused.open(now + s(1)), [0], "the first to free is open again");
        assert_eq!(refused.all_full_for(now + s(1)), None);
        assert!(!refused.lapsed(now + s(1)) && refused.lapsed(now + s(2)));
    }

    #[test]
    fn a_failed_count_waits_a_second_or_a_few_never_the_retry_base() {
        assert_eq!(wait_after_failed_count(0.0), Duration::from_secs(1));
        assert_eq!(wait_after_failed_count(0.5), Duration::from_secs(2));
        assert!(wait_after_failed_count(0.999_999) < Duration::from_secs(3));
        assert_eq!(wait_after_failed_count(7.0), Duration::from_secs(3), "jitter beyond its range is clamped");
    }
}
