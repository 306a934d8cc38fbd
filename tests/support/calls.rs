//! An interceptor that logs every request an SDK client transmits (each attempt, so retries
//! count) and every answer it receives, with the operation name taken from the
//! `X-Amz-Target` header both SDKs send. The benchmarks count round trips with it; the
//! tests check which calls overlap.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// The request of this operation was transmitted.
    Sent(String),
    /// An answer arrived.
    Answered,
}

/// The log of the clients it is installed on, and each transmitted request's operation and
/// body (JSON, for DynamoDB and SQS), for a test that counts the requests naming one item.
#[derive(Clone, Debug, Default)]
pub struct Calls(Arc<Mutex<Vec<(Instant, Call)>>>, Arc<Mutex<Vec<(String, String)>>>);

impl Calls {
    /// A mark for [`Calls::since`] and [`Calls::log_since`].
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The operations transmitted since `mark`.
    pub fn since(&self, mark: usize) -> Vec<String> {
        self.log_since(mark)
            .into_iter()
            .filter_map(|call| match call {
                Call::Sent(name) => Some(name),
                Call::Answered => None,
            })
            .collect()
    }

    /// Transmissions and answers since `mark`, in order.
    pub fn log_since(&self, mark: usize) -> Vec<Call> {
        self.0.lock().unwrap()[mark..].iter().map(|(_, call)| call.clone()).collect()
    }

    /// How many requests of `operation` were transmitted with `text` in their body.
    pub fn sent_with(&self, operation: &str, text: &str) -> usize {
        self.1.lock().unwrap().iter().filter(|(name, body)| name == operation && body.contains(text)).count()
    }

    /// When `operation` was first transmitted at or after `after`.
    pub fn first_after(&self, operation: &str, after: Instant) -> Option<Instant> {
        let log = self.0.lock().unwrap();
        log.iter().find(|(at, call)| *at >= after && *call == Call::Sent(operation.to_owned())).map(|(at, _)| *at)
    }

    /// How long the requests since `mark` waited for their answers, for a client that sends
    /// one at a time: each transmission to the answer after it.
    pub fn waited_since(&self, mark: usize) -> Duration {
        let log = self.0.lock().unwrap();
        let mut sent = None;
        let mut waited = Duration::ZERO;
        for (at, call) in &log[mark..] {
            match call {
                Call::Sent(_) => sent = Some(*at),
                Call::Answered => waited += sent.take().map_or(Duration::ZERO, |from| at.duration_since(from)),
            }
        }
        waited
    }

    fn push(&self, call: Call) {
        self.0.lock().unwrap().push((Instant::now(), call));
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
        let body = context.request().body().bytes().map(String::from_utf8_lossy).unwrap_or_default();
        self.1.lock().unwrap().push((operation.clone(), body.into_owned()));
        self.push(Call::Sent(operation));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        _context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.push(Call::Answered);
        Ok(())
    }
}
