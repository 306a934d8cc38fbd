//! An SDK interceptor that logs every request a client transmits (each attempt, so retries
//! count too), with the operation name taken from the `X-Amz-Target` header that DynamoDB,
//! SQS and KMS requests carry.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;

/// The log of round trips of the clients it is installed on.
#[derive(Clone, Debug, Default)]
pub struct Calls(Arc<Mutex<Vec<(Instant, String)>>>);

impl Calls {
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The operations transmitted since `mark` (a `len()` taken earlier).
    pub fn since(&self, mark: usize) -> Vec<String> {
        self.0.lock().unwrap()[mark..].iter().map(|(_, name)| name.clone()).collect()
    }

    /// When `operation` was first transmitted at or after `after`.
    pub fn first_after(&self, operation: &str, after: Instant) -> Option<Instant> {
        self.0.lock().unwrap().iter().find(|(at, name)| *at >= after && name == operation).map(|(at, _)| *at)
    }
}

impl Intercept for Calls {
    fn name(&self) -> &'static str {
        "CallLog"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context.request().headers().get("x-amz-target").unwrap_or("unknown");
        let operation = target.rsplit('.').next().unwrap_or(target).to_owned();
        self.0.lock().unwrap().push((Instant::now(), operation));
        Ok(())
    }
}
