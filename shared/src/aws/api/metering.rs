//! How an authenticated request meets its key's rate limit (contract section 6): whether
//! it is counted, whether the count comes before the operation or alongside it, when it
//! is refused, and the headers that report the limit. [`Metering::of`] decides; [`Meter`]
//! carries the decision out.

use std::future::Future;

use lambda_http::http::header::HeaderName;
use lambda_http::http::Method;

use super::{ApiError, Reply};
use crate::credentials::{KeyHash, Scope};
use crate::ratelimit::{RateLimitStatus, RateLimiter};

/// How one authenticated request is metered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Metering {
    /// The key lacks the operation's scope: refused (403) before the rate limit, and not
    /// counted, since a refused request changes nothing, the count included. The limit is
    /// only read, for the headers.
    PeekAndForbid(Scope),
    /// A read: counted while the operation runs (one round trip instead of two), since a
    /// read changes nothing; over the limit, the 429 drops what was read.
    CountAlongside,
    /// Counted first, and the operation runs only within the limit: a write, since a
    /// refused write must change nothing; or a read of a key this instance already knows
    /// to be refused, which is answered from memory rather than read for.
    CountFirst,
}

impl Metering {
    /// The metering of a request for `method` whose key lacks `missing_scope` (if any) and
    /// is, or is not, `known_refused` on this instance.
    pub(super) fn of(method: &Method, missing_scope: Option<Scope>, known_refused: bool) -> Self {
        match missing_scope {
            Some(scope) => Metering::PeekAndForbid(scope),
            None if *method == Method::GET && !known_refused => Metering::CountAlongside,
            None => Metering::CountFirst,
        }
    }
}

/// The rate limiter, used as [`Metering`] says.
pub(super) struct Meter {
    limiter: RateLimiter,
}

impl Meter {
    pub(super) fn new(limiter: RateLimiter) -> Self {
        Self { limiter }
    }

    /// Answers a request of `key` with `run` (which starts the operation), metered as
    /// [`Metering::of`] says; `status` gets the limit's status for the headers once known.
    pub(super) async fn answer<Fut>(
        &self,
        key: &KeyHash,
        method: &Method,
        missing_scope: Option<Scope>,
        run: impl FnOnce() -> Fut,
        status: &mut Option<RateLimitStatus>,
    ) -> Result<Reply, ApiError>
    where
        Fut: Future<Output = Result<Reply, ApiError>>,
    {
        match Metering::of(method, missing_scope, self.limiter.known_refused(key)) {
            Metering::PeekAndForbid(scope) => {
                *status = Some(self.limiter.peek(key).await?);
                Err(ApiError::Forbidden(scope))
            }
            Metering::CountAlongside => {
                let (counted, outcome) = tokio::join!(self.limiter.count(key), run());
                within_limit(*status.insert(counted?))?;
                outcome
            }
            Metering::CountFirst => {
                within_limit(*status.insert(self.limiter.count(key).await?))?;
                run().await
            }
        }
    }
}

/// The refusal of a counted request that is over the limit.
fn within_limit(status: RateLimitStatus) -> Result<(), ApiError> {
    if status.exceeded {
        return Err(ApiError::RateLimited { retry_after: status.reset_seconds });
    }
    Ok(())
}

/// The `RateLimit-*` headers of every answer to a known key.
pub(super) fn headers(status: &RateLimitStatus) -> [(HeaderName, String); 3] {
    [
        (HeaderName::from_static("ratelimit-limit"), status.limit.to_string()),
        (HeaderName::from_static("ratelimit-remaining"), status.remaining.to_string()),
        (HeaderName::from_static("ratelimit-reset"), status.reset_seconds.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_then_the_method_then_what_this_instance_knows_decide() {
        use Metering::*;
        let cases = [
            // Out of scope: never counted, whatever the method or the key's state.
            (Method::GET, Some(Scope::ReadAlerts), false, PeekAndForbid(Scope::ReadAlerts)),
            (Method::GET, Some(Scope::ReadAlerts), true, PeekAndForbid(Scope::ReadAlerts)),
            (Method::POST, Some(Scope::WriteWebhooks), false, PeekAndForbid(Scope::WriteWebhooks)),
            (Method::DELETE, Some(Scope::WriteWebhooks), true, PeekAndForbid(Scope::WriteWebhooks)),
            // A read is counted alongside, unless the key is already known to be refused.
            (Method::GET, None, false, CountAlongside),
            (Method::GET, None, true, CountFirst),
            // Anything else may change something: counted first.
            (Method::POST, None, false, CountFirst),
            (Method::PUT, None, false, CountFirst),
            (Method::PATCH, None, false, CountFirst),
            (Method::DELETE, None, false, CountFirst),
            (Method::HEAD, None, false, CountFirst),
            (Method::PATCH, None, true, CountFirst),
        ];
        for (method, missing_scope, known_refused, expected) in cases {
            assert_eq!(
                Metering::of(&method, missing_scope, known_refused),
                expected,
                "{method} missing {missing_scope:?}, known refused: {known_refused}"
            );
        }
    }

    #[test]
    fn a_count_over_the_limit_is_refused_with_its_reset_as_retry_after() {
        let status =
            |remaining, reset_seconds, exceeded| RateLimitStatus { limit: 5, remaining, reset_seconds, exceeded };
        let cases = [
            (status(4, 60, false), None),
            (status(0, 12, false), None),
            (status(0, 12, true), Some(12)),
            (status(0, 0, true), Some(0)),
        ];
        for (counted, refused) in cases {
            let outcome = within_limit(counted).map_err(|err| match err {
                ApiError::RateLimited { retry_after } => retry_after,
                other => panic!("{other:?}"),
            });
            assert_eq!(outcome.err(), refused, "{counted:?}");
        }
    }

    #[test]
    fn the_headers_report_limit_remaining_and_reset() {
        let status = RateLimitStatus { limit: 600, remaining: 598, reset_seconds: 55, exceeded: false };
        let headers = headers(&status).map(|(name, value)| (name.to_string(), value));
        let expected = [("ratelimit-limit", "600"), ("ratelimit-remaining", "598"), ("ratelimit-reset", "55")];
        assert_eq!(headers, expected.map(|(name, value)| (name.to_owned(), value.to_owned())));
    }
}
