//! The retry schedule: about 30 s, 2 min, 10 min, 30 min, 1 h, 3 h, 6 h, 12 h with a base of
//! 30 s, each wait jittered by ±20 %, capped under SQS's 12-hour visibility limit.

use std::time::Duration;

/// Multiples of the base for the waits after attempts 1, 2, 3, …; later attempts reuse the last.
const MULTIPLES: [u32; 8] = [1, 4, 20, 60, 120, 360, 720, 1440];
/// SQS refuses a visibility change that keeps a message in flight for more than 12 hours
/// since it was received.
pub const SQS_MAX_IN_FLIGHT: Duration = Duration::from_secs(12 * 60 * 60);

/// The longest wait: the deliver function sets it up to its timeout (120 s) after the receive,
/// so the cap keeps a margin of 15 minutes under [`SQS_MAX_IN_FLIGHT`], however long the batch
/// took. A refused change would cost the delivery one of its receives.
pub const MAX_WAIT: Duration = Duration::from_secs(SQS_MAX_IN_FLIGHT.as_secs() - 15 * 60);

#[derive(Clone, Copy, Debug)]
pub struct RetrySchedule {
    pub base: Duration,
    /// Attempts in all (the first and the retries) before the dead-letter queue.
    pub max_attempts: u32,
}

impl RetrySchedule {
    /// What to do after attempt number `attempt` (1-based) failed: wait this long, or `None`
    /// when it was the last attempt. `jitter` is a random number in `[0, 1)`.
    pub fn wait_after(&self, attempt: u32, jitter: f64) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let index = (attempt.max(1) as usize - 1).min(MULTIPLES.len() - 1);
        let factor = 0.8 + 0.4 * jitter.clamp(0.0, 1.0);
        let wait = self.base.mul_f64(f64::from(MULTIPLES[index]) * factor);
        Some(wait.min(MAX_WAIT))
    }
}

/// A random number in `[0, 1)` for the jitter.
pub fn jitter() -> f64 {
    let bytes: [u8; 8] = crate::random::random_bytes();
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_contract_schedule_with_the_default_base() {
        let schedule = RetrySchedule { base: Duration::from_secs(30), max_attempts: 9 };
        let waits: Vec<u64> = (1..9).map(|a| schedule.wait_after(a, 0.5).unwrap().as_secs()).collect();
        assert_eq!(waits, [30, 120, 600, 1800, 3600, 10800, 21600, MAX_WAIT.as_secs()]);
        assert_eq!(schedule.wait_after(9, 0.5), None, "the ninth attempt is the last");
    }

    #[test]
    fn jitter_stays_within_twenty_percent_and_the_sqs_cap() {
        let schedule = RetrySchedule { base: Duration::from_secs(30), max_attempts: 20 };
        assert_eq!(schedule.wait_after(1, 0.0), Some(Duration::from_secs(24)));
        assert_eq!(schedule.wait_after(1, 1.0), Some(Duration::from_secs(36)));
        assert_eq!(schedule.wait_after(15, 1.0), Some(MAX_WAIT));
        assert_eq!(schedule.wait_after(8, 1.0), Some(MAX_WAIT), "the last wait, jittered up, is capped");
        for _ in 0..100 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j));
        }
    }
}
