//! The outbox: the one place that records a delivery and puts its message on its way
//! (contract section 12: the record first, so a message lost on its way leaves a `pending`
//! record the sweep finds). Every origin of a delivery's round goes through it: the fan-out
//! and a ping (a new record), a manual retry, a recovery, a replay or an enable's release of
//! what its subscription held (a restarted one), the sweep (a lost one put back, or a held one
//! released) and the delivery function (a round handed on at once). Where each message goes,
//! and whether its record starts claimed, is the plan's to say
//! (`delivery::plan::{new_delivery, restarted, released_by_sweep, put_back, unparked,
//! handed_on}`); this file only writes and sends.

use futures_util::{StreamExt, TryStreamExt};

use crate::aws::queue::{DeliveryQueues, QueueError};
use crate::clock::Timestamp;
use crate::delivery::groups::Groups;
use crate::delivery::log::{AttemptRecord, DeliveryRecord, DeliveryStatus};
use crate::delivery::plan::{self, Lease, NewDelivery, Place, Posting, Restarted, SubscriptionTask};
use crate::delivery::DeliveryMessage;
use crate::events::Event;
use crate::ids::{SubscriptionId, UserId};
use crate::store::deliveries::{DeliveryTable, Overdue, StoredDelivery, TaskMarker};
use crate::store::StoreError;
use crate::trace::TraceContext;
use crate::webhooks::Subscription;

/// How many conditional writes of one call run at once.
const WRITES_AT_ONCE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("a stored delivery's body cannot be read: {0}")]
    Body(#[from] serde_json::Error),
}

#[derive(Clone)]
pub struct Outbox {
    deliveries: DeliveryTable,
    queues: DeliveryQueues,
}

impl Outbox {
    pub fn new(deliveries: DeliveryTable, queues: DeliveryQueues) -> Self {
        Self { deliveries, queues }
    }

    /// Records new deliveries, each only where it has no record yet (a stream record
    /// processed again changes nothing), then posts those it recorded. A delivery that had its
    /// record already is not posted again: its first message, or the sweep if that was lost,
    /// sends it, and only once.
    pub async fn create(&self, new: &[NewDelivery], now: Timestamp) -> Result<(), OutboxError> {
        let records: Vec<(&DeliveryMessage, DeliveryStatus)> = new.iter().map(|d| (&d.message, d.status)).collect();
        let recorded = self.deliveries.insert_new(&records, now).await?;
        let postings = (new.iter().zip(&recorded))
            .filter(|(_, recorded)| **recorded)
            .filter_map(|(d, _)| Some((&d.message, d.place?)));
        self.post(postings.collect()).await
    }

    /// Records one new delivery (a ping) and posts it when it is to be sent; its record as
    /// written (or as an attempt that got there first left it).
    pub async fn create_one(&self, new: &NewDelivery, now: Timestamp) -> Result<DeliveryRecord, OutboxError> {
        let record = self.deliveries.create(&new.message, new.status, now).await?;
        self.post(new.place.map(|place| (&new.message, place)).into_iter().collect()).await?;
        Ok(record)
    }

    /// Starts each delivery's schedule again in its next generation (a manual retry, a recovery
    /// or a replay, of a subscription in `health` spreading over `spread` groups; with
    /// `if_status`, one whose status changed since it was read is left out), then acts on each
    /// round it restarted as the plan says ([`plan::restarted`]), even when another write
    /// failed: posts it, or, its subscription being disabled, ends its record as its turn would
    /// (a second write, of the new generation). The records first: should a post or an end
    /// fail, the sweep finds them pending and overdue, and their turns post or end them. The
    /// rounds restarted (as the restart left them), and the first failure.
    pub async fn restart(
        &self,
        found: &[StoredDelivery],
        if_status: fn(&StoredDelivery) -> Option<DeliveryStatus>,
        (subscription, spread): (&Subscription, Groups),
        now: Timestamp,
    ) -> (Vec<StoredDelivery>, Option<OutboxError>) {
        let decide = |message: &DeliveryMessage, stored: &StoredDelivery| {
            let seen = (stored.record.attempts, stored.lease_until);
            plan::restarted(message, seen, (&subscription.health, subscription.while_disabled, spread), now)
        };
        self.restart_decided(found, if_status, now, decide).await
    }

    /// [`Self::restart`], each round posted or ended as `decide` says, oldest first.
    async fn restart_decided(
        &self,
        found: &[StoredDelivery],
        if_status: fn(&StoredDelivery) -> Option<DeliveryStatus>,
        now: Timestamp,
        decide: impl Fn(&DeliveryMessage, &StoredDelivery) -> Restarted,
    ) -> (Vec<StoredDelivery>, Option<OutboxError>) {
        // The futures are made first: a stream that maps with a closure over `self` is not
        // provably `Send`.
        let writes: Vec<_> =
            found.iter().map(|stored| self.deliveries.restart(stored, if_status(stored), now)).collect();
        let written: Vec<Result<Option<StoredDelivery>, StoreError>> =
            futures_util::stream::iter(writes).buffer_unordered(WRITES_AT_ONCE).collect().await;
        let (mut restarted, mut failure) = (Vec::new(), None);
        for result in written {
            match result {
                Ok(done) => restarted.extend(done),
                Err(err) => failure = failure.or(Some(err.into())),
            }
        }
        // The writes end in any order; the rounds go oldest first.
        restarted.sort_by(|a, b| a.record.id.cmp(&b.record.id));
        let (mut postings, mut ends) = (Vec::new(), Vec::new());
        for stored in &restarted {
            let message = match stored.message() {
                Ok(message) => message,
                Err(err) => {
                    failure = failure.or(Some(err.into()));
                    continue;
                }
            };
            match decide(&message, stored) {
                Restarted::Post(place) => postings.push(Posting { message, place }),
                Restarted::NotSent(not_sent) => ends.push((message, stored.record.body.as_bytes(), not_sent)),
            }
        }
        // A round that moved on since (a concurrent retry) is left to it.
        let ends: Vec<_> = (ends.iter())
            .map(|(message, body, not_sent)| self.deliveries.record_not_sent(message, body, now, *not_sent))
            .collect();
        let ended: Vec<Result<bool, StoreError>> =
            futures_util::stream::iter(ends).buffer_unordered(WRITES_AT_ONCE).collect().await;
        failure = failure.or(ended.into_iter().find_map(Result::err).map(OutboxError::from));
        if let Err(err) = self.post(postings.iter().map(|p| (&p.message, p.place)).collect()).await {
            failure = failure.or(Some(err));
        }
        (restarted, failure)
    }

    /// Releases what `subscription`, just enabled, held (contract section 20): the one function
    /// every enable path calls (POST enable, PATCH `enabled: true`, a probe's success). Each
    /// `held` record restarts `pending` ([`Self::restart`]: its schedule from its start, its
    /// attempts kept), in one conditional write that holds only while it is still `held`, so
    /// each is released once however many releases meet; at most `per_call`, oldest first,
    /// queued where the plan puts a restarted round of `subscription` (spreading over `spread`
    /// groups), so they go at its pace. The sweep releases the rest, and any a turn held as it
    /// read the subscription just before, from a marker ([`plan::settle_rest_at`]). How many
    /// this call released.
    pub async fn release(
        &self,
        subscription: &Subscription,
        spread: Groups,
        per_call: u32,
        now: Timestamp,
    ) -> Result<usize, OutboxError> {
        let (held, more) = self.held(&subscription.id, per_call).await?;
        let (released, failure) =
            self.restart(&held, |_| Some(DeliveryStatus::Held), (subscription, spread), now).await;
        // A write that failed leaves its record held: the sweep takes it from the marker, at once.
        let due = plan::settle_rest_at(more || failure.is_some(), now);
        self.deliveries.mark_task((&subscription.user_id, &subscription.id), SubscriptionTask::Release, due).await?;
        match failure {
            Some(err) => Err(err),
            None => Ok(released.len()),
        }
    }

    /// Ends what a deleted subscription held, as [`plan::HELD_DELETED`] says (contract section
    /// 20), each once (a conditional write), at most `per_call`; the sweep ends the rest from a
    /// marker, as [`Self::release`]'s. Nothing is queued. How many this call ended.
    pub async fn end_held(
        &self,
        (user_id, subscription_id): (&UserId, &SubscriptionId),
        per_call: u32,
        now: Timestamp,
    ) -> Result<usize, OutboxError> {
        let (held, more) = self.held(subscription_id, per_call).await?;
        let ended = self.end_each(&held, now).await?;
        let due = plan::settle_rest_at(more, now);
        self.deliveries.mark_task((user_id, subscription_id), SubscriptionTask::End, due).await?;
        Ok(ended)
    }

    /// Does, in a sweep's run at `now`, what `marker` says for its subscription: settles at
    /// most `per_call` of its held records (released on the retry lane, due now: the marker
    /// does not know the subscription's groups, and its rate limit holds at the send; or
    /// ended), or records and queues a probe of it ([`plan::probe`]). The marker goes once
    /// nothing it names is left. How many records it settled or created.
    pub async fn settle_marked(
        &self,
        marker: &TaskMarker,
        per_call: u32,
        now: Timestamp,
    ) -> Result<usize, OutboxError> {
        let (held, more) = match marker.fate {
            SubscriptionTask::Probe => (Vec::new(), false),
            SubscriptionTask::Release | SubscriptionTask::End => self.held(&marker.subscription_id, per_call).await?,
        };
        let settled = match marker.fate {
            SubscriptionTask::Probe => {
                let (user_id, id) = (&marker.user_id, &marker.subscription_id);
                let probe = DeliveryMessage::new(&Event::probe(id), user_id, id).traced(TraceContext::start());
                self.create_one(&plan::probe(probe), now).await?;
                1
            }
            SubscriptionTask::Release => {
                let decide = |_: &DeliveryMessage, _: &StoredDelivery| plan::released_by_sweep();
                let (released, failure) =
                    self.restart_decided(&held, |_| Some(DeliveryStatus::Held), now, decide).await;
                if let Some(err) = failure {
                    return Err(err);
                }
                released.len()
            }
            SubscriptionTask::End => self.end_each(&held, now).await?,
        };
        if !more {
            self.deliveries.remove_task_marker(marker).await?;
        }
        Ok(settled)
    }

    /// The subscription's held records, at most `per_call`, oldest first, and whether more are held.
    async fn held(
        &self,
        subscription_id: &SubscriptionId,
        per_call: u32,
    ) -> Result<(Vec<StoredDelivery>, bool), StoreError> {
        let mut held = self.deliveries.held(subscription_id, per_call).await?;
        let more = held.len() > per_call as usize;
        held.truncate(per_call as usize);
        Ok((held, more))
    }

    /// Ends each of `held` ([`DeliveryTable::end_held`]), a few at a time; how many it ended.
    async fn end_each(&self, held: &[StoredDelivery], now: Timestamp) -> Result<usize, StoreError> {
        let writes: Vec<_> = held.iter().map(|stored| self.deliveries.end_held(stored, now)).collect();
        let ended: Vec<bool> =
            futures_util::stream::iter(writes).buffer_unordered(WRITES_AT_ONCE).try_collect().await?;
        Ok(ended.into_iter().filter(|ended| *ended).count())
    }

    /// Puts back the overdue records the sweep takes as lost: each moved to its next
    /// generation (one conditional write, which holds only while it is still overdue at
    /// `cutoff` and unclaimed at `now`), then posted on the retry lane. How many it put back.
    pub async fn put_back(&self, lost: &[Overdue], cutoff: Timestamp, now: Timestamp) -> Result<usize, OutboxError> {
        let claims = lost.iter().map(|found| self.deliveries.claim_overdue(found, cutoff, now)).collect();
        // Claimed first: should the post fail, the records are due now and the next run but
        // one finds them again.
        self.post_taken(lost, claims, |message, _| plan::put_back(message)).await
    }

    /// Queues the parked records the sweep found due soon (contract section 22: a wait longer
    /// than a message's delay lives in the table): each taken out of its wait (one conditional
    /// write), then posted on the retry lane with the delay left until it is due. How many it
    /// queued. Taken out first: should the post fail, the records are overdue soon and the
    /// sweep puts them back as lost.
    pub async fn unpark(&self, parked: &[Overdue], now: Timestamp) -> Result<usize, OutboxError> {
        let writes = parked.iter().map(|found| self.deliveries.unpark(found)).collect();
        self.post_taken(parked, writes, |message, found| plan::unparked(message, found.next_attempt_at, now)).await
    }

    /// Runs `writes` (one per record of `found`, in its order, a few at a time), then posts
    /// each record a write took, where `posting` puts it. How many it posted.
    async fn post_taken<W>(
        &self,
        found: &[Overdue],
        writes: Vec<W>,
        posting: impl Fn(DeliveryMessage, &Overdue) -> Posting,
    ) -> Result<usize, OutboxError>
    where
        W: std::future::Future<Output = Result<Option<StoredDelivery>, StoreError>>,
    {
        let written: Vec<Result<Option<StoredDelivery>, StoreError>> =
            futures_util::stream::iter(writes).buffered(WRITES_AT_ONCE).collect().await;
        let mut postings = Vec::new();
        for (found, result) in found.iter().zip(written) {
            let Some(stored) = result? else { continue };
            match stored.message() {
                Ok(message) => postings.push(posting(message, found)),
                Err(err) => {
                    tracing::error!(delivery_id = %found.key.delivery_id, error = %err, "a record's body cannot be read");
                }
            }
        }
        self.post(postings.iter().map(|p| (&p.message, p.place)).collect()).await?;
        Ok(postings.len())
    }

    /// Gives a turn's claim to the round a manual retry, a recovery or a replay started while
    /// the turn held it (with the attempt the turn made under it, which then counts, if any),
    /// and posts that round at once rather than let the retry's own copy wait for the claim to
    /// end; when the owner cancelled the delivery meanwhile (contract section 20), the claim
    /// ends with the attempt recorded, and nothing is posted ([`plan::handed_on`]). `Ok(false)`
    /// when the turn no longer holds the claim. Should the post fail, the record is pending and
    /// overdue soon: the sweep puts it back.
    pub async fn hand_on(
        &self,
        message: &DeliveryMessage,
        lease: Lease,
        attempt: Option<&AttemptRecord>,
    ) -> Result<bool, StoreError> {
        let Some(round) = self.deliveries.hand_on(message, lease, attempt).await? else { return Ok(false) };
        let (generation, status) = (round.generation, round.record.status);
        let posted = match round.message() {
            Ok(message) => match plan::handed_on(message, status) {
                Some(posting) => {
                    tracing::info!(
                        to_generation = generation,
                        "a new round started while this turn held the claim; handed on at once"
                    );
                    self.post(vec![(&posting.message, posting.place)]).await
                }
                None => {
                    tracing::info!(%status, "the delivery ended while this turn held the claim; nothing more is sent");
                    Ok(())
                }
            },
            Err(err) => Err(err.into()),
        };
        if let Err(err) = posted {
            tracing::error!(error = %err, "queueing the new round failed; the sweep puts it back");
        }
        Ok(true)
    }

    /// Posts each message in its place; `Ok` when SQS took them all.
    async fn post(&self, postings: Vec<(&DeliveryMessage, Place)>) -> Result<(), OutboxError> {
        if postings.is_empty() {
            return Ok(());
        }
        Ok(self.queues.post_all(&postings).await?)
    }
}
