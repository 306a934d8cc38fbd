//! The DynamoDB tables: one small type per table (the webhooks table has three: its
//! subscriptions, the sealed secrets' data key, and operators' reads), items mapped with
//! serde_dynamo, every change a single conditional or atomic write built with `expression`;
//! and the secrets at rest (`sealing`: AES-GCM under the data key that KMS keeps).
//! Every user-owned item lives in its owner's partition, so no request and no delivery
//! scans; the one Scan is an operator's (`webhook_admin`).

pub mod alerts;
pub mod body;
mod conditional;
pub mod data_key;
pub mod deliveries;
mod expression;
pub mod health;
pub mod keys;
pub mod preferences;
pub mod profiles_assessments;
pub mod rate_limits;
pub mod sealing;
pub mod stream;
mod webhook_admin;
pub mod webhooks;

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;

use crate::clock::Timestamp;

pub use conditional::Backoff;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("DynamoDB: {}", DisplayErrorContext(.0))]
    Dynamo(Box<aws_sdk_dynamodb::Error>),
    #[error("item mapping: {0}")]
    Mapping(#[from] serde_dynamo::Error),
    #[error("gave up after repeated concurrent changes to the same item")]
    Contention,
}

impl<E, R> From<SdkError<E, R>> for StoreError
where
    aws_sdk_dynamodb::Error: From<SdkError<E, R>>,
{
    fn from(err: SdkError<E, R>) -> Self {
        StoreError::Dynamo(Box::new(err.into()))
    }
}

pub type Item = HashMap<String, AttributeValue>;

/// What one partition key of a table (or of an index) takes a second: beyond it DynamoDB
/// throttles the key's requests, however much the table as a whole may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionQuota {
    /// Write units: one per 1 KB written.
    pub write_units: u32,
    /// Read units: one per 4 KB read strongly consistent, half that eventually consistent.
    pub read_units: u32,
}

impl PartitionQuota {
    /// DynamoDB's own, on AWS.
    pub const DYNAMODB: PartitionQuota = PartitionQuota { write_units: 1_000, read_units: 3_000 };

    /// This quota divided by `divisor` (each at least one unit): a scale model's.
    pub fn scaled_down(self, divisor: u32) -> PartitionQuota {
        let divisor = divisor.max(1);
        PartitionQuota {
            write_units: (self.write_units / divisor).max(1),
            read_units: (self.read_units / divisor).max(1),
        }
    }
}

pub(crate) fn s(text: impl AsRef<str>) -> AttributeValue {
    AttributeValue::S(text.as_ref().to_owned())
}

/// A time as the service stores it: the contract's text, which sorts as time.
pub(crate) fn time(at: Timestamp) -> AttributeValue {
    AttributeValue::S(at.to_string())
}

pub(crate) fn n(number: impl ToString) -> AttributeValue {
    AttributeValue::N(number.to_string())
}

/// One page of a query that asked for `limit + 1` items: the first `limit`, and the id of
/// the last of them when the extra item shows that another page follows.
pub(crate) fn one_page<T, Id: Clone>(mut items: Vec<T>, limit: u32, id_of: impl Fn(&T) -> &Id) -> (Vec<T>, Option<Id>) {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let last_id_if_more = items.last().filter(|_| more).map(|last| id_of(last).clone());
    (items, last_id_if_more)
}
