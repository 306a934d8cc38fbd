//! How many of the main lane's message groups a subscription's first attempts spread over
//! (contract section 18), as pure decisions.
//!
//! The main lane is a FIFO queue, and SQS hands out no message of a group while another of
//! that group is in flight, so a subscription's throughput there is one batch turn per group
//! at a time. A subscription whose receiver has answered fast (a 2xx within [`FAST_ANSWER`])
//! and that is neither failing nor disabled spreads its deliveries over every group the
//! setting allows (`whk_…#0` … `whk_…#n-1`, the group from the delivery id); any other keeps
//! one group, as every subscription had before: a new one until its receiver has shown it
//! answers fast, and one whose receiver answered slowly (from [`SLOW_ANSWER`]), hangs or fails.
//! So a slow, hanging or failing receiver holds at most one batch of the main lane, as
//! before, once its first slow answer or failure is recorded. The deliveries already queued
//! follow the subscription's current number of groups: a turn that finds its message in
//! another group than the one it would now get moves it there unsent ([`regroup`]).
//!
//! A message is still handed to one consumer at a time, whatever its group, so a first
//! attempt's claim from its creation (`plan::granted`) stays its own.

use std::time::Duration;

pub use crate::delivery::group_count::{group_id, index_in, Groups};

use crate::clock::Timestamp;
use crate::delivery::attempt::Outcome;
use crate::ids::DeliveryId;
use crate::webhooks::{DeliveryRate, Health, Subscription};

/// A 2xx answered within this time is fast: it lets the subscription spread over every group.
pub const FAST_ANSWER: Duration = Duration::from_secs(2);
/// A 2xx answered this late or later is slow: the subscription goes back to one group. An
/// answer between the two changes nothing, so a receiver near one threshold does not make
/// every delivery write its subscription.
pub const SLOW_ANSWER: Duration = Duration::from_secs(3);

/// How long a receiver that stopped answering fast is taken as slow, whatever it answers:
/// one that alternates fast and slow answers keeps one group, rather than spreading again at
/// every fast answer and holding a batch in each group at its next slow one.
pub const SLOW_MEMORY: Duration = Duration::from_secs(10 * 60);

/// The deliveries a second of a limit that one group is allowed for: a batch's worth.
const PER_GROUP: u32 = 10;

impl Groups {
    /// The groups a subscription's new first attempts spread over: all of `most` while it is
    /// active (no failure clock running, not disabled or paused) and its receiver answers fast
    /// (`fast_since`), else one. A rate limit (contract section 18) takes at most one group per
    /// [`PER_GROUP`] deliveries a second of it: more would only hand out deliveries to wait.
    pub fn of(health: &Health, fast_since: Option<Timestamp>, rate: Option<DeliveryRate>, most: Groups) -> Groups {
        match (health, fast_since) {
            (Health::Active, Some(_)) => match rate {
                Some(rate) => {
                    let needed = rate.per_second().div_ceil(PER_GROUP);
                    Groups::new(u8::try_from(needed).unwrap_or(u8::MAX).min(most.get())).unwrap_or(Groups::ONE)
                }
                None => most,
            },
            _ => Groups::ONE,
        }
    }
}

impl Groups {
    /// The groups `subscription`'s new first attempts spread over now, of at most `most`.
    pub fn spread_of(subscription: &Subscription, most: Groups) -> Groups {
        Groups::of(&subscription.health, subscription.fast_since, subscription.max_deliveries_per_second, most)
    }
}

/// The group a main-lane message in group `current` moves to, when the subscription's
/// groups now give its delivery another one; `None` when it is where it belongs.
pub fn regroup(current: u8, delivery: &DeliveryId, groups: Groups) -> Option<u8> {
    let index = groups.index_of(delivery);
    (index != current).then_some(index)
}

/// When a send to a subscription that spreads (`fast`) says its receiver is slow while it is
/// still open: at the slow mark, so the deliveries queued in its other groups stop spreading
/// within one answer's slow mark, not after the send's whole timeout. `None` for a subscription
/// that keeps one group already.
pub fn slow_mark(fast: bool) -> Option<Duration> {
    fast.then_some(SLOW_ANSWER)
}

/// What an answer changes in what the subscription's receiver is known for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    Unchanged,
    /// It answered fast: `fastSince` is set (it spreads over every group while active).
    Fast,
    /// It answered slowly: `fastSince` is removed (one group).
    Slow,
}

/// The change after an attempt that got `outcome` in `took`, at `now`, to a subscription
/// whose receiver was known as fast (`fast`) or not, and last slow at `slow_at`. Only a 2xx
/// tells its pace: a failure starts the failure clock, which keeps the subscription on one
/// group (and its deliveries on the retry lane) until a success, whose pace decides again. A
/// receiver slow within [`SLOW_MEMORY`] is not taken as fast again yet.
pub fn pace_after(outcome: &Outcome, took: Duration, fast: bool, slow_at: Option<Timestamp>, now: Timestamp) -> Pace {
    let delivered = matches!(outcome.answer().map(|answer| answer.status), Some(200..=299));
    let slow_lately = slow_at.is_some_and(|at| now.since(at) < SLOW_MEMORY);
    match delivered {
        true if took < FAST_ANSWER && !fast && !slow_lately => Pace::Fast,
        true if took >= SLOW_ANSWER && fast => Pace::Slow,
        _ => Pace::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SubscriptionId;
    use crate::webhooks::DisabledReason;

    fn at(seconds: u64) -> Timestamp {
        Timestamp::from_unix_millis(1_800_000_000_000 + seconds * 1000)
    }

    #[test]
    fn only_an_active_subscription_whose_receiver_answers_fast_spreads() {
        let most = Groups::new(16).unwrap();
        let rate = |n: u64| DeliveryRate::parse(&serde_json::json!(n)).unwrap();
        let paused = Health::Disabled { at: at(1), reason: DisabledReason::Manual };
        let gone = Health::Disabled { at: at(1), reason: DisabledReason::Gone };
        let cases = [
            (Health::Active, Some(at(0)), None, most, "active, fast"),
            (Health::Active, None, None, Groups::ONE, "active, not known fast (new, or slow)"),
            (Health::Failing { since: at(1) }, Some(at(0)), None, Groups::ONE, "failing"),
            (Health::Failing { since: at(1) }, None, None, Groups::ONE, "failing, slow"),
            (paused, Some(at(0)), None, Groups::ONE, "paused"),
            (gone, Some(at(0)), None, Groups::ONE, "disabled"),
            (Health::Active, Some(at(0)), rate(2), Groups::ONE, "limited to 2 a second"),
            (Health::Active, Some(at(0)), rate(10), Groups::ONE, "limited to a batch a second"),
            (Health::Active, Some(at(0)), rate(11), Groups::new(2).unwrap(), "limited to just over a batch"),
            (Health::Active, Some(at(0)), rate(100), Groups::new(10).unwrap(), "limited to 100"),
            (Health::Active, Some(at(0)), rate(10_000), most, "limited above what the setting allows"),
            (Health::Active, None, rate(100), Groups::ONE, "limited, not known fast"),
        ];
        for (health, fast_since, rate, expected, case) in cases {
            assert_eq!(Groups::of(&health, fast_since, rate, most), expected, "{case}");
        }
        assert_eq!(Groups::of(&Health::Active, Some(at(0)), None, Groups::ONE), Groups::ONE, "a setting of one");
    }

    #[test]
    fn the_setting_is_between_one_and_the_maximum() {
        assert_eq!(Groups::new(0), None);
        assert_eq!(Groups::new(1), Some(Groups::ONE));
        assert_eq!(Groups::new(Groups::MAX).map(Groups::get), Some(Groups::MAX));
        assert_eq!(Groups::new(Groups::MAX + 1), None);
    }

    #[test]
    fn deliveries_spread_over_every_group_and_keep_theirs() {
        let groups = Groups::new(8).unwrap();
        let ids: Vec<DeliveryId> = (0..400).map(|_| DeliveryId::generate()).collect();
        let mut per_group = [0usize; 8];
        for id in &ids {
            let index = groups.index_of(id);
            assert_eq!(groups.index_of(id), index, "the same delivery, the same group");
            per_group[usize::from(index)] += 1;
        }
        // 50 expected per group; 20 is far outside chance for a uniform spread.
        assert!(per_group.iter().all(|n| *n >= 20), "{per_group:?}");
        assert!(ids.iter().all(|id| Groups::ONE.index_of(id) == 0));
    }

    #[test]
    fn group_ids_name_the_subscription_and_the_index() {
        let subscription: SubscriptionId = "whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap();
        let id = group_id(&subscription, 7);
        assert_eq!(id, "whk_01JDQ40A1B2C3D4E5F6G7H8J9K#7");
        let cases = [(id.as_str(), 7), ("whk_01JDQ40A1B2C3D4E5F6G7H8J9K", 0), ("whk_1#x", 0), ("whk_1#0", 0)];
        for (group, index) in cases {
            assert_eq!(index_in(group), index, "{group}");
        }
    }

    #[test]
    fn a_message_moves_only_when_its_group_is_not_the_one_it_would_get() {
        let groups = Groups::new(4).unwrap();
        let id = DeliveryId::generate();
        let own = groups.index_of(&id);
        let cases = [
            (own, groups, None, "in its group"),
            ((own + 1) % 4, groups, Some(own), "widened: spread out"),
            (0, Groups::ONE, None, "narrow, in group 0"),
            (3, Groups::ONE, Some(0), "narrowed: back to group 0"),
        ];
        for (current, groups, expected, case) in cases {
            assert_eq!(regroup(current, &id, groups), expected, "{case}");
        }
    }

    #[test]
    fn only_a_2xx_tells_the_pace_with_a_band_between_fast_and_slow() {
        let ms = Duration::from_millis;
        use crate::delivery::attempt::{Answer, SendFailure};
        let answer = |status| Answer { status, body: String::new(), retry_after: None };
        let delivered = || Outcome::Delivered(answer(204));
        let rejected = || Outcome::Rejected(answer(500));
        let cases = [
            (delivered(), ms(50), false, Pace::Fast, "fast, first time"),
            (delivered(), ms(1999), false, Pace::Fast, "just within"),
            (delivered(), ms(50), true, Pace::Unchanged, "fast, known fast"),
            (delivered(), ms(2500), false, Pace::Unchanged, "in the band, not fast"),
            (delivered(), ms(2500), true, Pace::Unchanged, "in the band, fast"),
            (delivered(), ms(3000), true, Pace::Slow, "slow"),
            (delivered(), ms(9500), false, Pace::Unchanged, "slow, known not fast"),
            (rejected(), ms(50), false, Pace::Unchanged, "a quick 500: the failure clock's"),
            (rejected(), ms(50), true, Pace::Unchanged, "a quick 500, fast"),
            (
                Outcome::NoAnswer(SendFailure::TimedOut),
                ms(10_000),
                true,
                Pace::Unchanged,
                "hanging: the failure clock's",
            ),
            (Outcome::Rejected(answer(410)), ms(50), true, Pace::Unchanged, "gone: disabled"),
        ];
        for (outcome, took, fast, expected, case) in cases {
            assert_eq!(pace_after(&outcome, took, fast, None, at(0)), expected, "{case}");
        }
    }

    #[test]
    fn a_receiver_that_alternates_fast_and_slow_answers_counts_as_slow() {
        use crate::delivery::attempt::Answer;
        let delivered = Outcome::Delivered(Answer { status: 204, body: String::new(), retry_after: None });
        let (fast_answer, slow_answer) = (Duration::from_millis(50), Duration::from_millis(9500));
        assert_eq!(pace_after(&delivered, fast_answer, false, None, at(0)), Pace::Fast, "it spreads");
        assert_eq!(pace_after(&delivered, slow_answer, true, None, at(1)), Pace::Slow, "its next answer is slow");
        let slow_at = Some(at(1));
        assert_eq!(pace_after(&delivered, fast_answer, false, slow_at, at(2)), Pace::Unchanged, "not fast again yet");
        let later = at(1) + SLOW_MEMORY;
        assert_eq!(pace_after(&delivered, fast_answer, false, slow_at, later), Pace::Fast, "fast again after a while");
        assert_eq!(slow_mark(true), Some(SLOW_ANSWER), "a send to a spread subscription says so at the slow mark");
        assert_eq!(slow_mark(false), None, "one group already");
    }
}
