//! Per-key rate limit (contract section 6): a fixed one-minute window counted in DynamoDB,
//! so it holds across every function instance.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::auth::KeyHash;
use crate::store::rate_limits::RateLimitTable;
use crate::store::StoreError;

const WINDOW_SECONDS: u64 = 60;

/// What the `RateLimit-*` headers report after counting a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitStatus {
    pub limit: u32,
    pub remaining: u32,
    /// Seconds until the window resets.
    pub reset_seconds: u64,
    pub exceeded: bool,
}

impl RateLimitStatus {
    fn after(limit: u32, count: u64, now_seconds: u64) -> Self {
        RateLimitStatus {
            limit,
            remaining: u32::try_from(u64::from(limit).saturating_sub(count)).unwrap_or(0),
            reset_seconds: WINDOW_SECONDS - now_seconds % WINDOW_SECONDS,
            exceeded: count > u64::from(limit),
        }
    }
}

pub struct RateLimiter {
    table: RateLimitTable,
    limit_per_minute: u32,
}

impl RateLimiter {
    pub fn new(table: RateLimitTable, limit_per_minute: u32) -> Self {
        Self { table, limit_per_minute }
    }

    /// Counts one request of `key` in the current window.
    pub async fn count(&self, key: &KeyHash) -> Result<RateLimitStatus, StoreError> {
        let window = Window::now();
        let count = self.table.count(&window.bucket(key), window.expires_at()).await?;
        Ok(RateLimitStatus::after(self.limit_per_minute, count, window.now))
    }

    /// The status of `key` without counting a request (for answers that change nothing).
    pub async fn peek(&self, key: &KeyHash) -> Result<RateLimitStatus, StoreError> {
        let window = Window::now();
        let count = self.table.current(&window.bucket(key)).await?;
        Ok(RateLimitStatus::after(self.limit_per_minute, count, window.now))
    }
}

struct Window {
    now: u64,
    index: u64,
}

impl Window {
    fn now() -> Self {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        Window { now, index: now / WINDOW_SECONDS }
    }

    fn bucket(&self, key: &KeyHash) -> String {
        format!("{}#{}", key.as_str(), self.index)
    }

    /// Kept one window past its end, then removed by the table's TTL.
    fn expires_at(&self) -> u64 {
        (self.index + 2) * WINDOW_SECONDS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_down_and_flags_the_request_past_the_limit() {
        assert_eq!(
            RateLimitStatus::after(3, 1, 120),
            RateLimitStatus { limit: 3, remaining: 2, reset_seconds: 60, exceeded: false }
        );
        let last = RateLimitStatus::after(3, 3, 179);
        assert_eq!((last.remaining, last.reset_seconds, last.exceeded), (0, 1, false));
        let over = RateLimitStatus::after(3, 4, 150);
        assert_eq!((over.remaining, over.reset_seconds, over.exceeded), (0, 30, true));
    }
}
