//! What a conditional write came to: applied, or refused because its condition did not hold
//! (told apart here only), the retries of writes that met a transaction in progress, and the
//! backoff between the tries of a write that met a concurrent change.
//!
//! DynamoDB words a refused condition two ways: a single write fails with the exception
//! `ConditionalCheckFailedException`; a transaction is cancelled with one reason per item,
//! `ConditionalCheckFailed` for an item whose condition did not hold.

use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::TransactWriteItem;
use aws_sdk_dynamodb::Client;
use tokio::time::Instant;

use super::StoreError;

/// The error code of a single write whose condition did not hold.
const CONDITION_FAILED: &str = "ConditionalCheckFailedException";
/// The cancellation reason of a transaction's item whose condition did not hold.
const ITEM_CONDITION_FAILED: &str = "ConditionalCheckFailed";
/// How often a write cancelled by a conflict with a concurrent transaction is tried again.
const CONFLICT_RETRIES: u32 = 5;
/// The ceiling of the first pause of a [`Backoff`], in milliseconds; it doubles with each.
const FIRST_CEILING_MS: u64 = 20;
/// How many times the ceiling doubles at most.
const MAX_DOUBLINGS: u32 = 6;

/// Jittered exponential backoff between the tries of a write that met a concurrent change of
/// the same item. Each pause is drawn at random from the upper half of a ceiling that
/// doubles, so writers that met once spread out rather than meet again.
pub struct Backoff {
    pauses: u32,
    limit: u32,
    /// When the last pause must have ended, if a time bounds them rather than `limit`.
    deadline: Option<Instant>,
}

impl Backoff {
    /// At most `limit` pauses.
    pub fn new(limit: u32) -> Self {
        Backoff { pauses: 0, limit, deadline: None }
    }

    /// As many pauses as end within `budget` from now. For writers of one item that each
    /// read it again after meeting a change: each such meeting was another writer's success,
    /// so they make progress, and how many tries the last one needs depends on how many meet
    /// and how slow each try is on a loaded machine, not on a count.
    pub fn within(budget: Duration) -> Self {
        Backoff { pauses: 0, limit: u32::MAX, deadline: Some(Instant::now() + budget) }
    }

    /// Pauses before the next try; `false`, at once, when no try is left.
    pub async fn pause(&mut self) -> bool {
        if self.pauses >= self.limit {
            return false;
        }
        let ceiling = FIRST_CEILING_MS << self.pauses.min(MAX_DOUBLINGS);
        let random = u64::from(u16::from_le_bytes(crate::random::random_bytes::<2>()));
        let pause = Duration::from_millis(ceiling / 2 + random % (ceiling / 2 + 1));
        if self.deadline.is_some_and(|deadline| Instant::now() + pause > deadline) {
            return false;
        }
        self.pauses += 1;
        tokio::time::sleep(pause).await;
        true
    }
}

/// The output of a conditional write, or `None` when its condition did not hold.
pub(crate) fn held<T, E, R>(result: Result<T, SdkError<E, R>>) -> Result<Option<T>, StoreError>
where
    E: ProvideErrorMetadata,
    aws_sdk_dynamodb::Error: From<SdkError<E, R>>,
{
    match result {
        Ok(output) => Ok(Some(output)),
        Err(err) if err.as_service_error().and_then(|e| e.code()) == Some(CONDITION_FAILED) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// Whether a conditional write was applied: `false` when its condition did not hold.
pub(crate) fn applied<T, E, R>(result: Result<T, SdkError<E, R>>) -> Result<bool, StoreError>
where
    E: ProvideErrorMetadata,
    aws_sdk_dynamodb::Error: From<SdkError<E, R>>,
{
    held(result).map(|output| output.is_some())
}

/// How a transaction ended, when it did not fail.
pub(crate) enum Transacted {
    Done,
    FirstConditionFailed,
}

/// Runs the transaction. Concurrent transactions on one item (a user's subscription counter)
/// make DynamoDB cancel one of them with the reason `TransactionConflict`; such a
/// cancellation applied nothing, so it is retried (a few times, with a short jittered
/// backoff) instead of becoming a 500.
pub(crate) async fn transact(client: &Client, items: Vec<TransactWriteItem>) -> Result<Transacted, StoreError> {
    let mut backoff = Backoff::new(CONFLICT_RETRIES);
    loop {
        let result = client.transact_write_items().set_transact_items(Some(items.clone())).send().await;
        match result {
            Ok(_) => return Ok(Transacted::Done),
            Err(err) if first_condition_failed(&err) => return Ok(Transacted::FirstConditionFailed),
            Err(err) if conflicted(&err) && backoff.pause().await => {}
            Err(err) => return Err(err.into()),
        }
    }
}

/// Sends a single-item update. DynamoDB refuses one that meets a transaction in progress on
/// the item with `TransactionConflictException`; such a refusal applied nothing, so it is
/// tried again, as a cancelled transaction is.
pub(crate) async fn send_update(
    update: UpdateItemFluentBuilder,
) -> Result<UpdateItemOutput, SdkError<UpdateItemError, HttpResponse>> {
    let mut backoff = Backoff::new(CONFLICT_RETRIES);
    loop {
        match update.clone().send().await {
            Err(err)
                if err.as_service_error().and_then(|e| e.code()) == Some("TransactionConflictException")
                    && backoff.pause().await => {}
            result => return result,
        }
    }
}

/// The cancellation reasons' codes of a cancelled transaction, in the order of its items.
fn cancellation_codes<R>(err: &SdkError<TransactWriteItemsError, R>) -> Vec<Option<&str>> {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => {
            cancelled.cancellation_reasons().iter().map(|reason| reason.code()).collect()
        }
        _ => Vec::new(),
    }
}

/// True when a transaction was cancelled because it met another transaction on an item.
fn conflicted<R>(err: &SdkError<TransactWriteItemsError, R>) -> bool {
    cancellation_codes(err).contains(&Some("TransactionConflict"))
}

/// True when a transaction was cancelled because its first item's condition did not hold.
fn first_condition_failed<R>(err: &SdkError<TransactWriteItemsError, R>) -> bool {
    cancellation_codes(err).first() == Some(&Some(ITEM_CONDITION_FAILED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_backoff_within_a_budget_pauses_while_its_pauses_end_within_it() {
        let budget = Duration::from_secs(1);
        let start = Instant::now();
        let mut backoff = Backoff::within(budget);
        let mut pauses = 0;
        while backoff.pause().await {
            pauses += 1;
        }
        // The first four pauses take at most 20 + 40 + 80 + 160 ms: a budget of a second
        // holds them, and no pause starts that would end past it (a starved machine may
        // wake a sleep late, hence the slack).
        assert!(pauses >= 4, "{pauses} pauses");
        assert!(start.elapsed() < budget + Duration::from_millis(500), "{:?}", start.elapsed());
        // A count still bounds the other kind.
        let mut counted = Backoff::new(2);
        assert!(counted.pause().await && counted.pause().await && !counted.pause().await);
    }
}
