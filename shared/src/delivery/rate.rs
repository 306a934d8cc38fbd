//! A subscription's `maxDeliveriesPerSecond` (contract section 18): at most that many
//! attempts start in any one-second window, across every instance of the delivery function.
//! Each attempt is counted just before its send in the subscription's bucket of the rate-limit
//! table, on the same sliding window as the API keys' limit (`ratelimit`); a delivery over the
//! limit, or whose count answered too late to start within the window, is not sent and goes
//! back to its lane to wait, its attempt not spent.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::ids::SubscriptionId;
use crate::ratelimit::SlidingWindow;
use crate::store::rate_limits::RateLimitTable;
use crate::store::StoreError;
use crate::webhooks::DeliveryRate;

/// How long after its count starts an admitted attempt may still start. A count's answer
/// that comes later is not used (the attempt waits, its place in the window spent): a
/// one-second span of starts then holds only attempts counted within one `WINDOW`.
const MARGIN: Duration = Duration::from_millis(100);
/// The window each limit is counted over: the contract's second and the margin, so no second
/// of attempt starts, however late each count's answer came within the margin, holds more
/// than the limit.
pub const WINDOW: Duration = Duration::from_secs(1).saturating_add(MARGIN);
/// The shortest wait of a delivery over the limit: SQS counts visibility in whole seconds,
/// and a wait of none would hand the message straight back.
const SHORTEST_WAIT: Duration = Duration::from_secs(1);

/// What the limit says of one more attempt now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Admitted,
    /// Over the limit: back on its lane for this long.
    Wait(Duration),
}

pub struct DeliveryLimiter {
    window: SlidingWindow,
    /// Subscriptions refused on this instance: until when they certainly stay refused, and how
    /// many of their deliveries this instance sent back to wait since.
    refused: Mutex<HashMap<SubscriptionId, (Instant, u32)>>,
}

impl DeliveryLimiter {
    pub fn new(table: RateLimitTable) -> Self {
        Self { window: SlidingWindow::new(table, WINDOW), refused: Mutex::default() }
    }

    /// Counts one attempt to `subscription` if it is within `rate`. A subscription refused
    /// on this instance is answered from memory until its window frees a place.
    pub async fn admit(&self, subscription: &SubscriptionId, rate: DeliveryRate) -> Result<Admission, StoreError> {
        if let Some(wait) = self.still_refused(subscription, rate) {
            return Ok(Admission::Wait(wait));
        }
        let asked = Instant::now();
        let status = self.window.count(&bucket(subscription), rate.per_second()).await?;
        if !status.exceeded {
            if asked.elapsed() > MARGIN {
                tracing::info!("the rate limit's count answered too late to start the attempt within its window");
                return Ok(Admission::Wait(SHORTEST_WAIT));
            }
            return Ok(Admission::Admitted);
        }
        let reset = Duration::from_secs(status.reset_seconds);
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        refused.retain(|_, (until, _)| *until > now);
        refused.insert(subscription.clone(), (now + reset, 1));
        Ok(Admission::Wait(wait(reset, 0, rate)))
    }

    fn still_refused(&self, subscription: &SubscriptionId, rate: DeliveryRate) -> Option<Duration> {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        let (until, waiting) = refused.get_mut(subscription)?;
        let reset = until.checked_duration_since(Instant::now())?;
        let ahead = *waiting;
        *waiting += 1;
        Some(wait(reset, ahead, rate))
    }
}

/// The rate-limit table's bucket of a subscription's deliveries (API keys' buckets are hex
/// hashes, so the two never meet).
fn bucket(subscription: &SubscriptionId) -> String {
    format!("deliveries#{}", subscription.as_str())
}

/// How long a delivery over the limit waits: until the window frees a place (`reset`), and a
/// second more for each `rate` deliveries this instance already sent back to wait before it,
/// so that a batch's worth does not all come back at once to be refused again.
pub fn wait(reset: Duration, ahead: u32, rate: DeliveryRate) -> Duration {
    reset.max(SHORTEST_WAIT) + Duration::from_secs(u64::from(ahead / rate.per_second()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_over_the_limit_wait_their_turn_in_whole_seconds() {
        let rate = |n: u64| DeliveryRate::parse(&serde_json::json!(n)).unwrap().unwrap();
        let s = Duration::from_secs;
        let cases = [
            (s(0), 0, rate(2), s(1), "the window frees at once: still a second, SQS's least"),
            (s(1), 0, rate(2), s(1), "the first sent back"),
            (s(1), 1, rate(2), s(1), "the second: the same second"),
            (s(1), 2, rate(2), s(2), "the third: a second later"),
            (s(1), 7, rate(2), s(4), "the eighth of a batch"),
            (s(2), 9, rate(1), s(11), "one a second"),
            (s(1), 9, rate(100), s(1), "a high limit"),
        ];
        for (reset, ahead, rate, expected, case) in cases {
            assert_eq!(wait(reset, ahead, rate), expected, "{case}");
        }
    }

    #[test]
    fn a_subscriptions_bucket_is_not_an_api_keys() {
        let subscription: SubscriptionId = "whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap();
        assert_eq!(bucket(&subscription), "deliveries#whk_01JDQ40A1B2C3D4E5F6G7H8J9K");
    }
}
