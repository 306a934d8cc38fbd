//! Per-key rate limit (contract section 6), and the per-subscription delivery limit (section
//! 18, `delivery::rate`): a sliding window counted in DynamoDB, so it holds across every
//! function instance and at every point in time, not only per calendar minute or second.
//!
//! The window is cut into slots ([`SLOTS`] for an API key's). A request is counted in its slot
//! with one atomic write that returns every slot's count, and it is accepted when the requests
//! of the window's slots before the current one and the current one, its own included, are
//! within the limit. Those slots cover at least the whole window (at most one slot more), so
//! no span of one window ever holds more accepted requests than the limit. A refused request is taken back out of the
//! count, so refusals do not use up the budget; a refused key is then answered from memory
//! until its reset, without a DynamoDB call.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clock::Timestamp;
use crate::credentials::KeyHash;
use crate::store::rate_limits::{RateLimitTable, SlotCounts};
use crate::store::StoreError;

/// Slots per window of an API key's limit: 12 slots of 5 s for the one-minute window.
pub const SLOTS: u64 = 12;

/// What the `RateLimit-*` headers report after counting a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitStatus {
    pub limit: u32,
    pub remaining: u32,
    /// Seconds until `remaining` next goes up, because the oldest counted requests leave
    /// the window (0 when nothing is counted). On a refusal: when a request would be accepted.
    pub reset_seconds: u64,
    pub exceeded: bool,
}

impl RateLimitStatus {
    /// The status with `counted` requests in the window (a refused request not among them).
    fn of(limit: u32, counted: &SlotCounts, window: &Window, exceeded: bool) -> Self {
        let total: u64 = counted.values().sum();
        RateLimitStatus {
            limit,
            remaining: u32::try_from(u64::from(limit).saturating_sub(total)).unwrap_or(0),
            reset_seconds: reset_ms(limit, counted, window).div_ceil(1000),
            exceeded,
        }
    }

    fn refused_until(limit: u32, until: Instant) -> Self {
        let wait = until.saturating_duration_since(Instant::now());
        RateLimitStatus { limit, remaining: 0, reset_seconds: wait.as_millis().div_ceil(1000) as u64, exceeded: true }
    }
}

/// Milliseconds from `window`'s now until the count of `counted` next goes down (or, when
/// over `limit`, down to it): when the slot whose leaving gets it there leaves; 0 with
/// nothing counted.
fn reset_ms(limit: u32, counted: &SlotCounts, window: &Window) -> u64 {
    let total: u64 = counted.values().sum();
    let target = total.min(u64::from(limit));
    let mut left = total;
    counted
        .iter()
        .find_map(|(slot, requests)| {
            left -= requests;
            (left < target).then(|| window.leaves_at_ms(*slot).saturating_sub(window.now_ms))
        })
        .unwrap_or(0)
}

/// One use counted ([`SlidingWindow::count_at`]): its status, and how long after the time
/// it was counted at a place frees (to the millisecond, where the status says whole seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub status: RateLimitStatus,
    pub frees_in: Duration,
}

/// A sliding window over the rate-limit table's buckets: each bucket (an item) counts its
/// own uses, against a limit its caller gives.
#[derive(Clone)]
pub struct SlidingWindow {
    table: RateLimitTable,
    slot_ms: u64,
    slots: u64,
}

impl SlidingWindow {
    /// A window of `window` cut into `slots` slots, each long enough that the slots together
    /// cover the whole window.
    pub fn new(table: RateLimitTable, window: Duration, slots: u64) -> Self {
        let slots = slots.max(1);
        Self { table, slot_ms: slot_ms(window, slots), slots }
    }

    /// Counts one use of `bucket` now: accepted within `limit`, otherwise refused and not counted.
    pub async fn count(&self, bucket: &str, limit: u32) -> Result<RateLimitStatus, StoreError> {
        Ok(self.count_at(bucket, limit, Timestamp::now()).await?.status)
    }

    /// Counts one use of `bucket` in the slot of `at` (a use that starts then, which may be a
    /// little ahead of now): accepted within `limit` of the window that ends at `at`,
    /// otherwise refused and not counted.
    pub async fn count_at(&self, bucket: &str, limit: u32, at: Timestamp) -> Result<Counted, StoreError> {
        let window = Window::at(at.unix_millis(), self.slot_ms, self.slots);
        let slots = self.table.count(bucket, window.slot, window.expired(), window.expires_at()).await?;
        // Counters older than the write could remove are left from before an idle spell.
        let leftovers: Vec<u64> = slots.keys().copied().filter(|slot| *slot < *window.expired().start()).collect();
        if !leftovers.is_empty() {
            if let Err(err) = self.table.drop_slots(bucket, &leftovers).await {
                tracing::warn!(error = %err, "rate limit: dropping expired counters failed");
            }
        }
        let mut counted = window.counted(slots);
        let total: u64 = counted.values().sum();
        if total <= u64::from(limit) {
            let status = RateLimitStatus::of(limit, &counted, &window, false);
            return Ok(Counted { status, frees_in: Duration::ZERO });
        }
        self.take_back(bucket, at).await;
        if let Some(own) = counted.get_mut(&window.slot) {
            *own = own.saturating_sub(1);
        }
        let frees_in = Duration::from_millis(reset_ms(limit, &counted, &window));
        Ok(Counted { status: RateLimitStatus::of(limit, &counted, &window, true), frees_in })
    }

    /// Takes back one use of `bucket` counted at `at` that was not made: refused, or not
    /// started in time ([`crate::delivery::rate`]).
    pub async fn take_back(&self, bucket: &str, at: Timestamp) {
        let slot = Window::at(at.unix_millis(), self.slot_ms, self.slots).slot;
        if let Err(err) = self.table.uncount(bucket, slot).await {
            // The count stays one too high until its slot leaves the window: stricter, not looser.
            tracing::warn!(error = %err, "rate limit: taking back a use not made failed");
        }
    }

    /// The status of `bucket` without counting a use.
    pub async fn peek(&self, bucket: &str, limit: u32) -> Result<RateLimitStatus, StoreError> {
        let window = Window::at(Timestamp::now().unix_millis(), self.slot_ms, self.slots);
        let counted = window.counted(self.table.current(bucket).await?);
        Ok(RateLimitStatus::of(limit, &counted, &window, false))
    }
}

pub struct RateLimiter {
    window: SlidingWindow,
    limit: u32,
    /// Keys refused on this instance, and until when they certainly stay refused.
    refused: Mutex<HashMap<KeyHash, Instant>>,
}

impl RateLimiter {
    /// `limit` requests per `window` (one minute in the service; tests and benchmarks shorten it).
    pub fn new(table: RateLimitTable, limit: u32, window: Duration) -> Self {
        Self { window: SlidingWindow::new(table, window, SLOTS), limit, refused: Mutex::default() }
    }

    /// Counts one request of `key`: accepted within the limit, otherwise refused and not counted.
    pub async fn count(&self, key: &KeyHash) -> Result<RateLimitStatus, StoreError> {
        if let Some(status) = self.still_refused(key) {
            return Ok(status);
        }
        let status = self.window.count(key.as_str(), self.limit).await?;
        if status.exceeded {
            self.remember_refusal(key, Duration::from_secs(status.reset_seconds));
        }
        Ok(status)
    }

    /// The status of `key` without counting a request (for answers that change nothing).
    pub async fn peek(&self, key: &KeyHash) -> Result<RateLimitStatus, StoreError> {
        if let Some(status) = self.still_refused(key) {
            return Ok(status);
        }
        self.window.peek(key.as_str(), self.limit).await
    }

    /// Whether this instance already knows that `key` is refused now (so counting it
    /// answers from memory, and a read for it would be dropped).
    pub fn known_refused(&self, key: &KeyHash) -> bool {
        self.still_refused(key).is_some()
    }

    fn still_refused(&self, key: &KeyHash) -> Option<RateLimitStatus> {
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let until = *refused.get(key)?;
        let status = RateLimitStatus::refused_until(self.limit, until);
        (status.reset_seconds > 0).then_some(status)
    }

    fn remember_refusal(&self, key: &KeyHash, wait: Duration) {
        let now = Instant::now();
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.retain(|_, until| *until > now);
        refused.insert(key.clone(), now + wait);
    }
}

/// How long each of `slots` slots of `window` lasts, in whole milliseconds: rounded up, so
/// that the slots together cover the whole window.
fn slot_ms(window: Duration, slots: u64) -> u64 {
    (window.as_millis() as u64).div_ceil(slots).max(1)
}

/// The slots of the window that ends now.
struct Window {
    now_ms: u64,
    slot_ms: u64,
    /// Slots a window covers.
    slots: u64,
    /// The current slot's index.
    slot: u64,
}

impl Window {
    fn at(now_ms: u64, slot_ms: u64, slots: u64) -> Self {
        Window { now_ms, slot_ms, slots, slot: now_ms / slot_ms }
    }

    /// The counts that apply now: the window's slots before the current one and the current
    /// one (and any later one, written by an instance whose clock runs slightly ahead).
    fn counted(&self, mut slots: SlotCounts) -> SlotCounts {
        slots.split_off(&self.slot.saturating_sub(self.slots))
    }

    /// The slots that left the window during the last window: each count removes them, so
    /// a key in steady use keeps at most about two windows of counters.
    fn expired(&self) -> RangeInclusive<u64> {
        self.slot.saturating_sub(2 * self.slots + 1)..=self.slot.saturating_sub(self.slots + 1)
    }

    /// When `slot`'s requests stop counting.
    fn leaves_at_ms(&self, slot: u64) -> u64 {
        (slot + self.slots + 1) * self.slot_ms
    }

    /// Unix seconds after which nothing counted now applies any more (the item's TTL).
    fn expires_at(&self) -> u64 {
        self.leaves_at_ms(self.slot).div_ceil(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT_MS: u64 = 5000;

    fn counts(pairs: &[(u64, u64)]) -> SlotCounts {
        pairs.iter().copied().collect()
    }

    #[test]
    fn the_window_counts_the_last_slots_and_the_current_one() {
        let window = Window::at(100 * SLOT_MS + 1200, SLOT_MS, SLOTS);
        assert_eq!(window.slot, 100);
        let slots = counts(&[(87, 5), (88, 1), (99, 2), (100, 3), (101, 1)]);
        assert_eq!(window.counted(slots), counts(&[(88, 1), (99, 2), (100, 3), (101, 1)]));
        assert_eq!(window.expired(), 75..=87);
        // The oldest counted slot started 61.2 s ago: at least a whole minute is counted.
        assert!(window.now_ms - 88 * SLOT_MS >= 60_000);
        assert_eq!(window.expires_at(), (113 * SLOT_MS).div_ceil(1000));
    }

    #[test]
    fn the_slots_of_a_window_cover_all_of_it() {
        let ms = Duration::from_millis;
        assert_eq!(slot_ms(Duration::from_secs(60), SLOTS), 5000);
        // Rounded down, 12 slots of 91 ms would cover 1,092 ms of a 1,100 ms window.
        assert_eq!(slot_ms(ms(1100), 12), 92);
        for (window, slots) in [(ms(1030), 12), (ms(1030), 16), (ms(999), 7), (ms(5), 12)] {
            assert!(slot_ms(window, slots) * slots >= window.as_millis() as u64, "{window:?} in {slots}");
        }
    }

    #[test]
    fn remaining_and_reset_follow_the_oldest_counted_requests() {
        let window = Window::at(100 * SLOT_MS + 1200, SLOT_MS, SLOTS);
        let status = RateLimitStatus::of(10, &counts(&[(90, 2), (95, 0), (99, 3), (100, 1)]), &window, false);
        // Slot 90 leaves at slot 103 begins: 3 × 5 s − 1.2 s = 13.8 s → 14.
        assert_eq!(status, RateLimitStatus { limit: 10, remaining: 4, reset_seconds: 14, exceeded: false });
        let fresh = RateLimitStatus::of(10, &SlotCounts::new(), &window, false);
        assert_eq!((fresh.remaining, fresh.reset_seconds), (10, 0));
    }

    #[test]
    fn a_refusal_resets_when_enough_requests_have_left_for_one_more() {
        let window = Window::at(100 * SLOT_MS, SLOT_MS, SLOTS);
        // 6 counted with a limit of 5: slots 90 (1) and 92 (1) must both leave.
        let status = RateLimitStatus::of(5, &counts(&[(90, 1), (92, 1), (100, 4)]), &window, true);
        assert_eq!(status, RateLimitStatus { limit: 5, remaining: 0, reset_seconds: 25, exceeded: true });
        // To the millisecond: slot 92 leaves as slot 105 begins.
        assert_eq!(reset_ms(5, &counts(&[(90, 1), (92, 1), (100, 4)]), &window), 5 * SLOT_MS);
    }
}
