//! One delivery turn as pure decisions (contract sections 5, 9 and 12): given what the
//! turn's claim on its record found, what to do before a send; given the receiver's answer,
//! what to write and what becomes of the message. The delivery function only executes these
//! plans, so the state machine is tested here, in milliseconds, without queues, tables or
//! receivers.
//!
//! A turn that may send first claims its record: one conditional write, which holds only
//! while the record is `pending`, due, of the message's generation and claimed by no other
//! turn, sets the record's lease ([`Lease`]). Until the lease ends, neither the sweep nor
//! another copy of the message takes the record, and the turn records its outcome under it,
//! so every attempt counts. The lease is an attribute of the record, not an index key. A
//! first attempt from the main lane needs no such write when it comes early enough: the
//! fan-out (or a ping) created the record with a claim its message carries ([`granted`]),
//! which holds while the record, read at the turn, is still as its creation left it
//! ([`created_claim`]).
//!
//! A manual retry or a recovery starts a new round whatever the record's claim: it moves the
//! generation on and leaves the claim to its holder. A turn in flight then still records its
//! attempt under its claim, and a copy of the old round that holds its record's creation
//! claim unused is dropped unsent ([`unused_claim`]); either gives the new round its claim at
//! once, in a generation of its own, so the copy the retry queued (which would wait for the
//! claim to end) is stale and the new round goes out within seconds.

use std::time::Duration;

use super::attempt::{Outcome, TIMEOUT};
use super::groups::Groups;
use super::log::{AttemptRecord, DeliveryStatus};
use super::retry::RetrySchedule;
use crate::clock::Timestamp;
use crate::delivery::lane::Lane;
use crate::delivery::DeliveryMessage;
use crate::events::EventKind;
use crate::ids::DeliveryId;
use crate::operational;
use crate::webhooks::{DisabledReason, Health, Subscription, WhileDisabled};

/// The longest wait a receiver's `Retry-After` can ask for (contract section 12).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// A message received this much before its record's next attempt is early (a hand-over's
/// delay stops at SQS's 15 minutes); it waits for the rest rather than being sent.
const EARLY_TOLERANCE: Duration = Duration::from_secs(1);
/// How much longer than the longest send a claim lasts: the time to open the secrets before
/// the send and to record after it, and any skew between the clocks of the instances that
/// compare it.
pub const LEASE_MARGIN: Duration = Duration::from_secs(20);
/// What a send that uses its whole timeout must still leave of its claim to record its outcome.
const RECORD_MARGIN: Duration = Duration::from_secs(10);
/// SQS's longest message delay. A wait up to this is a delay on a new message; a longer one
/// lives in the table (the record parked in the due index, which the sweep reads ahead), so
/// no message waits in flight for a retry (contract section 22).
pub const LONGEST_DELAY: Duration = Duration::from_secs(15 * 60);
/// The longest a received message stays in flight for a wait: one attempt's claim. A longer
/// wait is a new message's delay, or the record's.
pub const LONGEST_STAY: Duration = Duration::from_secs(TIMEOUT.as_secs() + LEASE_MARGIN.as_secs());

/// A turn's claim on its record: no other turn and no sweep takes the record before `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub until: Timestamp,
}

impl Lease {
    /// The claim a turn makes at `now`: long enough for a send of the whole timeout and its record.
    pub fn from(now: Timestamp) -> Self {
        Lease { until: now + TIMEOUT + LEASE_MARGIN }
    }

    /// Whether a send starting at `now` ends, even at its timeout, early enough to be recorded
    /// under this claim. A turn that got there late (its secrets were slow to open) sends
    /// nothing and lets the claim lapse, so no send ever outlives its claim.
    pub fn allows_send_at(&self, now: Timestamp) -> bool {
        now + TIMEOUT + RECORD_MARGIN <= self.until
    }
}

/// A first attempt's message for the main lane, made at `now` to carry the claim its record
/// is created with ([`granted`] reads it back at its turn).
pub fn created_claimed(message: DeliveryMessage, now: Timestamp) -> DeliveryMessage {
    DeliveryMessage { claimed_until: Some(Lease::from(now).until), ..message }
}

/// The claim a first attempt's message carries from the record's creation, which its turn at
/// `now` may hold without a write: only on the main lane (a FIFO queue gives a message to one
/// consumer at a time, where the retry lane may hand out a copy twice), and only while it
/// still leaves time for a send ([`Lease::allows_send_at`]); else the turn claims anew.
/// Whether it holds is the record's to say ([`created_claim`]).
pub fn granted(message: &DeliveryMessage, lane: Lane, now: Timestamp) -> Option<Lease> {
    let lease = Lease { until: message.claimed_until? };
    (lane == Lane::Main && lease.allows_send_at(now)).then_some(lease)
}

/// What the record, read at the turn, says of the creation claim `lease` of a message of
/// `generation`: held while the record is as its creation left it (that generation, pending,
/// under that claim). A manual retry or a recovery may have started a new round since the
/// message was queued; the copy is then stale, and nothing it could send would count.
pub fn created_claim(lease: Lease, generation: u32, record: Option<RecordState>) -> Claim {
    match record {
        None => Claim::Unwritten,
        Some(record) if !record.is_stale_for(generation) && record.lease_until == Some(lease.until) => {
            Claim::Held { record, lease }
        }
        Some(record) => Claim::Refused(record),
    }
}

/// The claim a stale copy still holds on its record, unused: the creation claim of a first
/// attempt whose record a manual retry or a recovery restarted while it was queued. The copy
/// is dropped unsent and gives the claim to the new round at once (the turn's `hand_on`),
/// which would otherwise wait for it to end.
pub fn unused_claim(message: &DeliveryMessage, claim: &Claim) -> Option<Lease> {
    let Claim::Refused(record) = claim else { return None };
    let until = message.claimed_until?;
    let superseded = record.generation > message.generation && record.status == DeliveryStatus::Pending;
    (superseded && record.lease_until == Some(until)).then_some(Lease { until })
}

/// Where a delivery's message waits for its turn (contract sections 12 and 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// On the main lane, in this group of its subscription's ([`super::groups::group_id`]).
    Group(u8),
    /// On the retry lane, received after this delay (SQS's longest is 15 minutes). A copy
    /// there carries no claim of its own: the retry lane may hand a message out twice.
    Delay(Duration),
}

impl Place {
    pub fn lane(self) -> Lane {
        match self {
            Place::Group(_) => Lane::Main,
            Place::Delay(_) => Lane::Retry,
        }
    }
}

/// A delivery about to be put on its way: its message, with the claim its record is made
/// with when it starts claimed, and its place.
#[derive(Clone, Debug, PartialEq)]
pub struct Posting {
    pub message: DeliveryMessage,
    pub place: Place,
}

/// Where a new round of a subscription in `health` waits for its first attempt: the retry
/// lane for a failing subscription (its first attempts would only leave the main lane at
/// their turn), else its group among the `groups` it spreads over.
fn first_place(health: &Health, delivery: &DeliveryId, groups: Groups) -> Place {
    match health.failing_since() {
        Some(_) => Place::Delay(Duration::ZERO),
        None => Place::Group(groups.index_of(delivery)),
    }
}

/// A new delivery (the fan-out's or a ping) as it is recorded and queued.
#[derive(Clone, Debug, PartialEq)]
pub struct NewDelivery {
    /// Its message, with the claim its record is created with when it starts claimed.
    pub message: DeliveryMessage,
    pub status: DeliveryStatus,
    /// Where its message goes; none for a `skipped` record.
    pub place: Option<Place>,
}

/// A new delivery to a subscription in `health` that does `while_disabled` and spreads over
/// `spread` groups ([`Groups::spread_of`]), made at `now`: a disabled subscription is sent
/// nothing (its record says `held` or `skipped`, as [`disabled`] says, and has no message); a
/// first attempt for the main lane starts claimed, so its turn writes no claim ([`granted`]);
/// the retry lane's copies claim for themselves.
pub fn new_delivery(
    message: DeliveryMessage,
    (health, while_disabled): (&Health, WhileDisabled),
    spread: Groups,
    now: Timestamp,
) -> NewDelivery {
    if !health.is_enabled() {
        let not_sent = NotSent { reason: disabled(message.event.kind(), while_disabled), attempts: 0 };
        return NewDelivery { message, status: not_sent.status(), place: None };
    }
    let place = first_place(health, &message.delivery_id, spread);
    let message = match place {
        Place::Group(_) => created_claimed(message, now),
        Place::Delay(_) => message,
    };
    NewDelivery { message, status: DeliveryStatus::Pending, place: Some(place) }
}

/// What becomes of a round that a manual retry, a recovery or a replay started.
#[derive(Clone, Debug, PartialEq)]
pub enum Restarted {
    /// Queued in this place.
    Post(Place),
    /// Not sent, its subscription being disabled: the record ends as its turn would (contract
    /// section 9), as [`NotSent`] says.
    NotSent(NotSent),
}

/// What becomes of the round a manual retry, a recovery or a replay started at `now`, of a
/// record that holds `attempts` and whose last claim ends at `lease_until`, to a subscription in
/// `health` that spreads over `spread` groups. A disabled subscription is sent nothing: the
/// record ends as its turn would find it. Else its message goes where a new delivery's would,
/// unless a turn may still hold the record (an attempt in flight, or a first attempt queued
/// with its creation claim): then the retry lane, where the copy waits for the claim without
/// holding up the subscription's other first attempts; mostly the holder hands the round on
/// before, and the copy finds itself stale. It starts unclaimed: the restart left the claim to
/// its holder.
pub fn restarted(
    message: &DeliveryMessage,
    (attempts, lease_until): (u32, Option<Timestamp>),
    (health, while_disabled, spread): (&Health, WhileDisabled, Groups),
    now: Timestamp,
) -> Restarted {
    if !health.is_enabled() {
        return Restarted::NotSent(NotSent { reason: disabled(message.event.kind(), while_disabled), attempts });
    }
    let place = match lease_until {
        Some(until) if until > now => Place::Delay(Duration::ZERO),
        _ => first_place(health, &message.delivery_id, spread),
    };
    Restarted::Post(place)
}

/// Where the round a turn hands on goes ([`put_back`]), unless its record is no longer
/// `pending`: an owner's cancel ended it while the turn held the claim (contract section 20),
/// and the turn's attempt, recorded, was its last.
pub fn handed_on(message: DeliveryMessage, status: DeliveryStatus) -> Option<Posting> {
    (status == DeliveryStatus::Pending).then(|| put_back(message))
}

/// The message of a round the delivery function hands on at once, or the sweep puts back:
/// the retry lane, due now.
pub fn put_back(message: DeliveryMessage) -> Posting {
    Posting { message, place: PUT_BACK }
}

/// Where a round goes that is put back: the retry lane, due now.
const PUT_BACK: Place = Place::Delay(Duration::ZERO);

/// What becomes of a held record the sweep releases from its subscription's marker (contract
/// section 20): posted as a round put back, since the marker does not know the subscription's
/// groups (its rate limit holds at the send).
pub fn released_by_sweep() -> Restarted {
    Restarted::Post(PUT_BACK)
}

/// The message of a parked record the sweep queues at `now` ahead of its next attempt at
/// `due`: the retry lane, delayed until then.
pub fn unparked(message: DeliveryMessage, due: Timestamp, now: Timestamp) -> Posting {
    Posting { message, place: Place::Delay(due.since(now).min(LONGEST_DELAY)) }
}

/// The latest next attempt a claim made at `now` accepts: a message received this little
/// before its record is due is sent.
pub fn due_by(now: Timestamp) -> Timestamp {
    now + EARLY_TOLERANCE
}

/// What the delivery record says of the delivery when its message comes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordState {
    /// The generation whose message may send; other copies are stale.
    pub generation: u32,
    pub status: DeliveryStatus,
    /// Every attempt recorded, in all rounds: whether the delivery was ever sent.
    pub attempts: u32,
    /// Attempts since the schedule last started (the fan-out, a manual retry or a recovery).
    pub round_attempts: u32,
    pub next_attempt_at: Option<Timestamp>,
    /// The end of the last claim on the record ([`Lease`]); a turn holds it until then.
    pub lease_until: Option<Timestamp>,
}

impl RecordState {
    /// A record no one wrote yet (a message queued before records came first, or before the
    /// deliveries table was replaced): generation zero, pending, no attempt. Compatibility:
    /// goes with [`Claim::Unwritten`].
    pub fn unwritten() -> Self {
        RecordState {
            generation: 0,
            status: DeliveryStatus::Pending,
            attempts: 0,
            round_attempts: 0,
            next_attempt_at: None,
            lease_until: None,
        }
    }

    /// Another generation owns the record, or it is settled.
    fn is_stale_for(&self, generation: u32) -> bool {
        self.generation != generation || self.status != DeliveryStatus::Pending
    }
}

/// What a turn's claim on its record came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Written: the turn holds the record under `lease`; `record` is the record as it now is.
    Held { record: RecordState, lease: Lease },
    /// Not written (another generation's, settled, held by another turn or not due yet): the
    /// record as read after.
    Refused(RecordState),
    /// No record: a message queued before records came first (2026-11-23) or before the
    /// deliveries table was last replaced (2026-11-26, docs/deploying.md). Nothing else can
    /// take it (the sweep finds only records), so its turn sends without a claim.
    /// Compatibility: goes after 2026-12-10, when SQS (14 days at most) holds no such message
    /// any more; a new table replacement would move the date.
    Unwritten,
}

impl Claim {
    /// The claim the turn holds, if it holds one.
    pub fn lease(&self) -> Option<Lease> {
        match self {
            Claim::Held { lease, .. } => Some(*lease),
            Claim::Refused(_) | Claim::Unwritten => None,
        }
    }
}

/// What the subscription says when the message comes; `None` in [`Found`] once deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubscriptionState {
    pub enabled: bool,
    /// The failure clock: the first failure since the last success (contract section 9).
    pub failing_since: Option<Timestamp>,
    /// Whether it still lists the delivery's kind (contract section 13: every delivery sent
    /// after a change uses the new kinds).
    pub receives: bool,
    /// What becomes of the delivery while it is disabled (contract section 20).
    pub while_disabled: WhileDisabled,
    /// Disabled for failing: a probe may go to it (contract section 20).
    pub probed: bool,
}

impl SubscriptionState {
    /// What the plan needs of a subscription, for a delivery of `kind`.
    pub fn of(subscription: &Subscription, kind: EventKind) -> Self {
        let health = &subscription.health;
        SubscriptionState {
            enabled: health.is_enabled(),
            failing_since: health.failing_since(),
            receives: subscription.receives(kind),
            while_disabled: subscription.while_disabled,
            probed: matches!(health, Health::Disabled { reason: DisabledReason::Failing, .. }),
        }
    }
}

impl AsRef<SubscriptionState> for SubscriptionState {
    fn as_ref(&self) -> &SubscriptionState {
        self
    }
}

/// What one received message found; `S` is the subscription as its turn read it, handed
/// back in the decision to send to it (what the plan reads of it is `S`'s
/// [`SubscriptionState`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<S = SubscriptionState> {
    pub lane: Lane,
    /// The generation the message carries.
    pub generation: u32,
    /// The kind of event the message carries.
    pub kind: EventKind,
    /// Whether it carries a probe (contract section 20).
    pub probe: bool,
    pub claim: Claim,
    pub subscription: Option<S>,
}

/// What to do before sending: a message's own step, or a place in its batch's hand-over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Before<S> {
    /// Taken by the message's turn alone.
    Step(Step<S>),
    /// First attempts to a failing subscription wait on the retry lane, not the main one
    /// (the claim is given up first, so the handed-over copy can take it at once); a batch's
    /// are moved together.
    HandOver,
}

/// A message's own step before sending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step<S> {
    /// Sign and send to `subscription`: attempt number `attempt` (1-based) of its round.
    Send { attempt: u32, subscription: S },
    /// Another generation owns the record, or it is settled: dropped unsent.
    Stale,
    /// The subscription is disabled or deleted, or no longer lists the kind: nothing is
    /// sent, and the record ends as [`NotSent`] says.
    NotSent(NotSent),
    /// Not to be attempted now (due later, or another turn holds its claim): back on its lane
    /// for this long, after which it finds the record as that turn left it.
    NotYet(Duration),
}

/// Why a delivery's turn sends nothing to its subscription.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SkipReason {
    #[error("the subscription is disabled")]
    Disabled,
    /// Disabled with `whileDisabled: hold` (contract section 20): kept until it is enabled.
    #[error("the subscription is disabled")]
    Held,
    #[error("the subscription was deleted")]
    Deleted,
    #[error("the subscription no longer lists {}", .0.as_str())]
    NotListed(EventKind),
}

/// How a delivery whose turn may not send ends (contract sections 9 and 20): `held`, its
/// attempts and last answer kept, when its subscription holds it; else `skipped` only when it
/// was never sent, as `skipped` promises; one attempted before ends `failed` (not
/// dead-lettered: no attempt ran out). Its text is the record's `lastError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotSent {
    pub reason: SkipReason,
    /// The attempts the record holds, in all rounds; its write holds only while they are so.
    pub attempts: u32,
}

impl NotSent {
    pub fn status(&self) -> DeliveryStatus {
        match (self.reason, self.attempts) {
            (SkipReason::Held, _) => DeliveryStatus::Held,
            (_, 0) => DeliveryStatus::Skipped,
            _ => DeliveryStatus::Failed,
        }
    }

    /// Why a delivery recorded as `status` by its creation (the fan-out's or a ping's) was not
    /// sent: its subscription was disabled ([`new_delivery`]); none for one on its way.
    pub fn at_creation(status: DeliveryStatus) -> Option<Self> {
        let reason = match status {
            DeliveryStatus::Skipped => SkipReason::Disabled,
            DeliveryStatus::Held => SkipReason::Held,
            _ => return None,
        };
        Some(NotSent { reason, attempts: 0 })
    }
}

/// Why a delivery of `kind` to a disabled subscription that does `while_disabled` is not sent
/// (contract section 20): held with `hold`, but for a ping, which is a check, not data; ended
/// with `skip`, as sections 9 and 13 say.
pub fn disabled(kind: EventKind, while_disabled: WhileDisabled) -> SkipReason {
    match (kind, while_disabled) {
        (EventKind::WebhookPing, _) | (_, WhileDisabled::Skip) => SkipReason::Disabled,
        (_, WhileDisabled::Hold) => SkipReason::Held,
    }
}

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.reason, self.attempts) {
            (SkipReason::Held, _) => write!(f, "held: {}", self.reason),
            (_, 0) => write!(f, "not sent: {}", self.reason),
            _ => write!(f, "not sent again: {}", self.reason),
        }
    }
}

crate::text::wire_names! {
    /// What the sweep does for a subscription from a marker's time on (contract section 20).
    pub enum SubscriptionTask: "subscription task" {
        /// It was enabled: each delivery it held is `pending` again, its schedule from its
        /// start, attempts kept.
        Release = "release",
        /// It was deleted: each delivery it held ends as [`HELD_DELETED`] says.
        End = "end",
        /// It is disabled for failing: a probe goes ([`ProbeSchedule`]).
        Probe = "probe",
    }
}

/// The longest interval between two probes of a subscription disabled for failing.
pub const LONGEST_PROBE_INTERVAL: Duration = Duration::from_secs(6 * 60 * 60);

/// When a subscription disabled for failing is probed (contract section 20): `after` its
/// disabling, then at doubling intervals capped at [`LONGEST_PROBE_INTERVAL`], until `lasting`
/// after it (`WEBHOOK_PROBE_AFTER_SECONDS`, `WEBHOOK_PROBE_FOR_SECONDS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSchedule {
    pub after: Duration,
    pub lasting: Duration,
}

impl ProbeSchedule {
    /// When the next probe goes, `made` probes having gone since `disabled_at`; none once
    /// probing has ended.
    pub fn next(&self, disabled_at: Timestamp, made: u32) -> Option<Timestamp> {
        let (mut at, mut interval) = (disabled_at + self.after, self.after);
        for _ in 0..made {
            interval = (interval * 2).min(LONGEST_PROBE_INTERVAL);
            at = at + interval;
            if at > disabled_at + self.lasting {
                return None;
            }
        }
        (at <= disabled_at + self.lasting).then_some(at)
    }

    /// Where the schedule of a subscription disabled at `disabled_at` stands at `now` when no
    /// probe was ever set for it (disabled by a version that did not probe): its first slot at
    /// or after `now`, and how many slots went before it, so that the probes after it keep the
    /// schedule's intervals; none once probing has ended.
    pub fn resumed(&self, disabled_at: Timestamp, now: Timestamp) -> Option<(Timestamp, u32)> {
        (0..).map_while(|made| self.next(disabled_at, made).map(|at| (at, made))).find(|(at, _)| *at >= now)
    }
}

/// A probe of a subscription disabled for failing, as it is recorded and queued (contract
/// section 20): `pending`, on the retry lane, due now, unclaimed (its subscription is
/// disabled, so the main lane would only hand it over).
pub fn probe(message: DeliveryMessage) -> NewDelivery {
    NewDelivery { message, status: DeliveryStatus::Pending, place: Some(Place::Delay(Duration::ZERO)) }
}

/// The plan after a probe got `outcome` at `now` (contract section 20): one attempt, never
/// retried, its record `succeeded` or `failed` and its message gone either way (no attempt ran
/// out: no dead letter); a 2xx enables its subscription again, anything else leaves it
/// disabled until the next probe. The failure clock is not the probe's to move.
pub fn after_probe(outcome: &Outcome, now: Timestamp) -> After {
    let (record, subscription) = match outcome.answer().map(|answer| answer.status) {
        Some(200..=299) => (AttemptRecord::succeeded(outcome, now), SubscriptionChange::Reenable),
        _ => (AttemptRecord::failed(outcome, None, now), SubscriptionChange::ProbeFailed),
    };
    After { record, subscription, message: MessageFate::Acknowledge }
}

/// How a held delivery ends when its subscription is deleted (contract section 20): `skipped`,
/// whatever it was sent before, as its subscription's end, not its own, stopped it.
pub const HELD_DELETED: NotSent = NotSent { reason: SkipReason::Deleted, attempts: 0 };

/// When the sweep settles the rest of a subscription's held deliveries, once an enable or a
/// delete at `now` settled its share of them: at once when `more` are left (more were held
/// than that share, or a write failed); else
/// once every turn that read the subscription before the change has ended (one claim's
/// length), so that a delivery such a turn held just after is settled too.
pub fn settle_rest_at(more: bool, now: Timestamp) -> Timestamp {
    match more {
        true => now,
        false => now + LONGEST_STAY,
    }
}

/// The settings the decisions follow.
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    pub schedule: RetrySchedule,
    /// How long a subscription may fail without a success before a last attempt disables it.
    pub disable_after: Duration,
    /// When a subscription disabled for failing is probed.
    pub probes: ProbeSchedule,
}

pub fn before_send<S: AsRef<SubscriptionState>>(found: Found<S>, now: Timestamp, policy: &Policy) -> Before<S> {
    let unwritten = RecordState::unwritten();
    let record = match &found.claim {
        Claim::Held { record, .. } => record,
        Claim::Unwritten => &unwritten,
        Claim::Refused(record) => return Before::Step(refused(found.generation, record, now)),
    };
    // A claim holds only for the message's pending generation; checked again, so that the
    // decision does not rest on how the store words its condition.
    if record.is_stale_for(found.generation) {
        return Before::Step(Step::Stale);
    }
    let not_sent = |reason| Before::Step(Step::NotSent(NotSent { reason, attempts: record.attempts }));
    let Some(subscription) = found.subscription else { return not_sent(SkipReason::Deleted) };
    let state = subscription.as_ref();
    if !state.enabled {
        // A probe is what may bring a subscription disabled for failing back (section 20).
        if found.probe && state.probed {
            return Before::Step(Step::Send { attempt: 1, subscription });
        }
        return not_sent(disabled(found.kind, state.while_disabled));
    }
    if !state.receives {
        return not_sent(SkipReason::NotListed(found.kind));
    }
    if found.lane == Lane::Main && state.failing_since.is_some() {
        return Before::HandOver;
    }
    // A lowered DELIVERY_MAX_ATTEMPTS makes a waiting delivery's next attempt its last.
    let attempt = (record.round_attempts + 1).min(policy.schedule.max_attempts);
    Before::Step(Step::Send { attempt, subscription })
}

/// Why a claim was refused, from the record as read after it.
fn refused<S>(generation: u32, record: &RecordState, now: Timestamp) -> Step<S> {
    if record.is_stale_for(generation) {
        return Step::Stale;
    }
    if let Some(until) = record.lease_until.filter(|until| *until > now) {
        return Step::NotYet(until.since(now));
    }
    match record.next_attempt_at {
        Some(due) if due > due_by(now) => Step::NotYet(due.since(now)),
        // It changed between the claim and the read (its claim just ended): look again soon.
        _ => Step::NotYet(EARLY_TOLERANCE),
    }
}

/// `Retry-After` (RFC 9110 section 10.2.3): delta-seconds, or an HTTP date (a date in the
/// past waits nothing). Anything else is ignored.
pub fn parse_retry_after(header: &str, now: Timestamp) -> Option<Duration> {
    let header = header.trim();
    if !header.is_empty() && header.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(header.parse().unwrap_or(u64::MAX)));
    }
    Some(Timestamp::parse_http_date(header)?.since(now))
}

/// What an attempt changes in its subscription; the item is written only when not `Unchanged`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscriptionChange {
    Unchanged,
    /// The first failure after a success starts the failure clock.
    StartFailing,
    /// The first success after a failure stops it.
    Recovered,
    /// Disabled, for this reason.
    Disable(DisabledReason),
    /// A probe got a 2xx: enabled again, as `POST …/enable` does, what it held released.
    Reenable,
    /// A probe failed: the next one is scheduled, if probing has not ended.
    ProbeFailed,
}

/// What becomes of the delivery once the attempt is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageFate {
    /// Deleted from its lane: the delivery is settled.
    Acknowledge,
    /// Tried again after the wait ([`exit_after`] says where it waits).
    RetryIn(Duration),
    /// Moved to the dead-letter queue: no attempt is left.
    DeadLetter,
}

/// What becomes of a received message at the end of its turn: the executor's only choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Deleted from its lane.
    Delete,
    /// Left on its lane, visible again after this wait (at most [`LONGEST_STAY`]).
    Stay(Duration),
    /// Copied to this place (unsent), then deleted from its lane.
    Move(Place),
    /// Moved to the dead-letter queue.
    DeadLetter,
}

/// Where a message that is not to be attempted for `wait` waits: in flight on its lane for at
/// most one attempt's claim, else as a new message's delay (a wait beyond SQS's longest delay
/// is taken in hops of it: only a copy queued before records were parked can wait so long).
pub fn waiting(wait: Duration) -> Exit {
    match wait {
        wait if wait <= LONGEST_STAY => Exit::Stay(wait),
        wait => Exit::Move(Place::Delay(wait.min(LONGEST_DELAY))),
    }
}

/// What becomes of a message whose attempt was recorded as planned, by its fate: a retry
/// waits on the retry lane as a new message's delay, never in flight (from either lane: a
/// failing receiver's retries must not fill a queue's in-flight quota, contract section 22),
/// and one longer than a message's delay in the table ([`AttemptRecord::parked`]: the message
/// goes, the sweep queues the record ahead of its time).
pub fn exit_after(fate: MessageFate) -> Exit {
    match fate {
        MessageFate::Acknowledge => Exit::Delete,
        MessageFate::DeadLetter => Exit::DeadLetter,
        MessageFate::RetryIn(wait) if wait > LONGEST_DELAY => Exit::Delete,
        MessageFate::RetryIn(wait) => Exit::Move(Place::Delay(wait)),
    }
}

/// What became of an attempt's write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// As the plan said.
    AsPlanned,
    /// Under the turn's claim, but a manual retry or a recovery started a new round during the
    /// send: the attempt counts, and the new round was handed on (the outbox's `hand_on`).
    HandedOn,
    /// Not at all: the turn's claim was gone (or, for a message without one, another
    /// generation owns the record).
    Not,
}

/// What becomes of a message once its attempt's write came to `recorded`: as planned, its
/// fate says; otherwise this copy's round is over (the new one is on its way, or the record
/// moved on during the send), and it goes.
pub fn exit_recorded(recorded: Recorded, fate: MessageFate) -> Exit {
    match recorded {
        Recorded::AsPlanned => exit_after(fate),
        Recorded::HandedOn | Recorded::Not => Exit::Delete,
    }
}

/// Why a turn about to send waits instead, and how long, as its subscription asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeldBack {
    /// Its `maxDeliveriesPerSecond` has no place for it now (section 18).
    OverRate(Duration),
    /// Its subscription fails and has its one send open ([`one_send_open`], section 22).
    BehindOpenSend(Duration),
}

/// What a turn about to send does, once it knows its claim and what its subscription asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtSend {
    Send,
    /// Waits, nothing sent and its attempt not spent, as `exit` says; the claim it wrote is
    /// given up first (`release`), so its next turn can claim at once.
    Wait {
        exit: Exit,
        release: Option<Lease>,
    },
}

/// Whether a turn at `now` that holds `lease` (none for a record not written yet) sends,
/// with `held_back`, what its subscription asks for instead (none when admitted). Too late to
/// send under the claim: it waits for the claim to end, so no send ever outlives its claim.
/// Held back: it waits, giving up a claim its turn wrote (one it holds from its record's
/// creation, `created_until`, it keeps: the message carries it back). A rate's wait is short
/// and its lane's groups bound how many wait at once, so it may wait in flight; a wait behind
/// a failing subscription's open send is a new message's delay, since any number of that
/// subscription's deliveries may wait so, and in flight they would fill the lane's quota.
pub fn at_send(
    lease: Option<Lease>,
    created_until: Option<Timestamp>,
    held_back: Option<HeldBack>,
    now: Timestamp,
) -> AtSend {
    if let Some(lease) = lease.filter(|lease| !lease.allows_send_at(now)) {
        return AtSend::Wait { exit: waiting(lease.until.since(now)), release: None };
    }
    let exit = match held_back {
        None => return AtSend::Send,
        Some(HeldBack::OverRate(wait)) => waiting(wait),
        Some(HeldBack::BehindOpenSend(wait)) => Exit::Move(Place::Delay(wait)),
    };
    AtSend::Wait { exit, release: lease.filter(|lease| Some(lease.until) != created_until) }
}

/// The one send a failing subscription may have open at a time (contract section 22): a
/// receiver that fails, slowly or at once, holds one of its lane's consumers, never all of
/// them, so every other subscription's retries and new deliveries go out beside it. A
/// subscription that is not failing needs none (section 18's groups pace it).
pub fn one_send_open(failing_since: Option<Timestamp>, lease: Option<Lease>, now: Timestamp) -> Option<Lease> {
    failing_since.map(|_| lease.unwrap_or_else(|| Lease::from(now)))
}

/// How long a delivery waits that found its failing subscription's one send open: as long as
/// that send may last, spread by `jitter` in `[0, 1)` over one more timeout, so the
/// deliveries turned back do not all come back together.
pub fn behind_open_send(jitter: f64) -> HeldBack {
    HeldBack::BehindOpenSend(TIMEOUT + RECORD_MARGIN + TIMEOUT.mul_f64(jitter.clamp(0.0, 1.0)))
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct After {
    pub record: AttemptRecord,
    pub subscription: SubscriptionChange,
    pub message: MessageFate,
}

/// The lastError of an attempt a 410 answered.
pub const GONE_ERROR: &str = "answered 410; subscription disabled";
/// The lastError of a delivery its owner cancelled while it waited (contract section 20); an
/// attempt in flight then, recorded after, shows its own.
pub const CANCELLED_ERROR: &str = "cancelled by its owner";

/// The plan after attempt number `attempt` of a delivery of `kind` got `outcome` at `now`.
/// `jitter` is a random number in `[0, 1)` for the schedule's wait. A 2xx is a success, a
/// `410 Gone` says the endpoint is gone for good, and only a 429's or a 503's `Retry-After`
/// is heeded.
///
/// A delivery of an operational event changes nothing but its own record (contract section
/// 15): its subscription's failure clock, recovery and disabling (a 410's too) follow the
/// other deliveries only, as its end raises no `webhook.delivery.exhausted`
/// ([`operational::reported`]). So no operational event comes of the delivery of another,
/// and subscriptions that report on each other cannot chain, failing or flapping.
pub fn after_send(
    attempt: u32,
    kind: EventKind,
    outcome: &Outcome,
    failing_since: Option<Timestamp>,
    now: Timestamp,
    policy: &Policy,
    jitter: f64,
) -> After {
    let answer = outcome.answer();
    let after = match answer.map(|answer| answer.status) {
        Some(200..=299) => After {
            record: AttemptRecord::succeeded(outcome, now),
            subscription: match failing_since {
                Some(_) => SubscriptionChange::Recovered,
                None => SubscriptionChange::Unchanged,
            },
            message: MessageFate::Acknowledge,
        },
        Some(410) => After {
            record: AttemptRecord { error: Some(GONE_ERROR.to_owned()), ..AttemptRecord::failed(outcome, None, now) },
            subscription: SubscriptionChange::Disable(DisabledReason::Gone),
            message: MessageFate::DeadLetter,
        },
        status => {
            let scheduled = policy.schedule.wait_after(attempt, jitter);
            let asked = match status {
                Some(429 | 503) => answer.and_then(|answer| answer.retry_after.as_deref()),
                _ => None,
            };
            let asked = asked.and_then(|header| parse_retry_after(header, now)).map(|wait| wait.min(MAX_RETRY_AFTER));
            let wait = scheduled.map(|wait| asked.map_or(wait, |asked| wait.max(asked)));
            let subscription = match failing_since {
                None => SubscriptionChange::StartFailing,
                Some(since) => {
                    let failing_for = now.since(since);
                    if wait.is_none() && failing_for > policy.disable_after {
                        SubscriptionChange::Disable(DisabledReason::Failing)
                    } else {
                        SubscriptionChange::Unchanged
                    }
                }
            };
            let next = wait.map(|wait| now + wait);
            let message = wait.map_or(MessageFate::DeadLetter, MessageFate::RetryIn);
            let parked = wait.is_some_and(|wait| wait > LONGEST_DELAY);
            After {
                record: AttemptRecord { parked, ..AttemptRecord::failed(outcome, next, now) },
                subscription,
                message,
            }
        }
    };
    if operational::reported(kind) {
        return after;
    }
    // A 410 disables nothing here, so its lastError is the answer's own.
    let record = AttemptRecord { error: outcome.error(), ..after.record };
    After { record, subscription: SubscriptionChange::Unchanged, ..after }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_unix_seconds(1_795_766_400_u64.checked_add_signed(seconds).unwrap())
    }

    fn policy() -> Policy {
        Policy {
            schedule: RetrySchedule { base: Duration::from_secs(30), max_attempts: 3 },
            disable_after: Duration::from_secs(100),
            probes: ProbeSchedule { after: Duration::from_secs(600), lasting: Duration::from_secs(7 * 24 * 3600) },
        }
    }

    fn held(record: RecordState) -> Claim {
        Claim::Held { record, lease: Lease::from(at(0)) }
    }

    fn found(lane: Lane, generation: u32, claim: Claim, subscription: Option<SubscriptionState>) -> Found {
        Found { lane, generation, kind: EventKind::ProfileUpdated, probe: false, claim, subscription }
    }

    fn pending(generation: u32, round_attempts: u32) -> RecordState {
        RecordState {
            generation,
            status: DeliveryStatus::Pending,
            attempts: round_attempts,
            round_attempts,
            next_attempt_at: Some(at(0)),
            lease_until: None,
        }
    }

    fn send(attempt: u32, subscription: Option<SubscriptionState>) -> Before<SubscriptionState> {
        Before::Step(Step::Send { attempt, subscription: subscription.unwrap() })
    }

    const HEALTHY: Option<SubscriptionState> = Some(SubscriptionState {
        enabled: true,
        failing_since: None,
        receives: true,
        while_disabled: WhileDisabled::Skip,
        probed: false,
    });

    #[test]
    fn before_a_send_the_claim_the_subscription_and_the_lane_decide() {
        let healthy = HEALTHY.unwrap();
        let failing = Some(SubscriptionState { failing_since: Some(at(-50)), ..healthy });
        let disabled = Some(SubscriptionState { enabled: false, ..healthy });
        let holding = Some(SubscriptionState { enabled: false, while_disabled: WhileDisabled::Hold, ..healthy });
        let unlisted = Some(SubscriptionState { receives: false, ..healthy });
        let settled = |status| Claim::Refused(RecordState { status, ..pending(2, 1) });
        let later = Claim::Refused(RecordState { next_attempt_at: Some(at(60)), ..pending(2, 1) });
        let leased = Claim::Refused(RecordState { lease_until: Some(at(25)), ..pending(2, 1) });
        let lapsed = Claim::Refused(RecordState { lease_until: Some(at(-1)), ..pending(2, 1) });
        let secs = Duration::from_secs;
        let not_sent = |reason, attempts| Before::Step(Step::NotSent(NotSent { reason, attempts }));
        let table = [
            (found(Lane::Main, 0, Claim::Unwritten, HEALTHY), send(1, HEALTHY), "no record yet"),
            (found(Lane::Main, 2, held(pending(2, 0)), HEALTHY), send(1, HEALTHY), "claimed"),
            (found(Lane::Retry, 2, held(pending(2, 1)), failing.clone()), send(2, failing.clone()), "a retry"),
            (found(Lane::Retry, 2, held(pending(2, 7)), HEALTHY), send(3, HEALTHY), "attempts lowered"),
            (
                found(Lane::Retry, 1, Claim::Refused(pending(2, 1)), HEALTHY),
                Before::Step(Step::Stale),
                "an older generation",
            ),
            (
                found(Lane::Retry, 3, Claim::Refused(pending(2, 1)), HEALTHY),
                Before::Step(Step::Stale),
                "a newer generation",
            ),
            (
                found(Lane::Retry, 2, settled(DeliveryStatus::Succeeded), HEALTHY),
                Before::Step(Step::Stale),
                "succeeded",
            ),
            (
                found(Lane::Retry, 2, settled(DeliveryStatus::Failed), HEALTHY),
                Before::Step(Step::Stale),
                "dead-lettered",
            ),
            (found(Lane::Retry, 2, settled(DeliveryStatus::Skipped), HEALTHY), Before::Step(Step::Stale), "skipped"),
            (found(Lane::Retry, 2, later, HEALTHY), Before::Step(Step::NotYet(secs(60))), "early"),
            (found(Lane::Retry, 2, leased, HEALTHY), Before::Step(Step::NotYet(secs(25))), "another turn holds it"),
            (
                found(Lane::Retry, 2, lapsed, HEALTHY),
                Before::Step(Step::NotYet(EARLY_TOLERANCE)),
                "changed since the claim",
            ),
            (found(Lane::Main, 2, held(pending(2, 0)), None), not_sent(SkipReason::Deleted, 0), "deleted"),
            (
                found(Lane::Main, 2, held(pending(2, 0)), disabled.clone()),
                not_sent(SkipReason::Disabled, 0),
                "disabled",
            ),
            (found(Lane::Retry, 2, held(pending(2, 1)), disabled), not_sent(SkipReason::Disabled, 1), "disabled, sent"),
            (found(Lane::Main, 2, held(pending(2, 0)), holding.clone()), not_sent(SkipReason::Held, 0), "held"),
            (found(Lane::Retry, 2, held(pending(2, 2)), holding), not_sent(SkipReason::Held, 2), "held, sent before"),
            (
                found(Lane::Retry, 2, held(pending(2, 1)), unlisted.clone()),
                not_sent(SkipReason::NotListed(EventKind::ProfileUpdated), 1),
                "kind no longer listed",
            ),
            (
                found(Lane::Main, 2, held(RecordState { attempts: 3, ..pending(2, 0) }), unlisted),
                not_sent(SkipReason::NotListed(EventKind::ProfileUpdated), 3),
                "retried by hand, kind no longer listed",
            ),
            (found(Lane::Main, 2, held(pending(2, 0)), failing), Before::HandOver, "failing, main lane"),
        ];
        for (found, expected, case) in table {
            assert_eq!(before_send(found, at(0), &policy()), expected, "{case}");
        }
    }

    fn first_attempt(generation: u32) -> DeliveryMessage {
        let subscription = "whk_01JDQ40A1B2C3D4E5F6G7H8J9K".parse().unwrap();
        let event = crate::events::Event::ping(&subscription);
        DeliveryMessage { generation, ..DeliveryMessage::new(&event, &"u1".parse().unwrap(), &subscription) }
    }

    #[test]
    fn a_first_attempt_from_the_main_lane_may_hold_the_claim_its_record_was_created_with() {
        let message = first_attempt(2);
        assert_eq!(granted(&message, Lane::Main, at(0)), None, "a message without one claims for itself");
        let message = created_claimed(message, at(0));
        let lease = Lease::from(at(0));
        assert_eq!(granted(&message, Lane::Main, at(3)), Some(lease));
        assert_eq!(granted(&message, Lane::Retry, at(3)), None, "the retry lane may hand out a copy twice");
        assert_eq!(granted(&message, Lane::Main, at(11)), None, "too late to send under it: claimed anew");
    }

    /// The record read at the turn says whether the creation claim holds, and which copies
    /// of an old round give their unused claim to the new one.
    #[test]
    fn the_record_says_whether_the_creation_claim_holds_and_a_stale_copy_gives_it_up() {
        let lease = Lease::from(at(0));
        let message = created_claimed(first_attempt(2), at(0));
        let created = RecordState { next_attempt_at: Some(at(0)), lease_until: Some(lease.until), ..pending(2, 0) };
        let restarted = RecordState { generation: 3, ..created.clone() };
        let settled = RecordState { status: DeliveryStatus::Skipped, lease_until: None, ..created.clone() };
        let reclaimed = RecordState { lease_until: Some(at(5)), ..created.clone() };
        let restarted_reclaimed = RecordState { generation: 3, ..reclaimed.clone() };
        let held = Claim::Held { record: created.clone(), lease };
        let table = [
            (Some(created.clone()), held.clone(), None, send(1, HEALTHY), "as created: sent"),
            (
                Some(restarted.clone()),
                Claim::Refused(restarted.clone()),
                Some(lease),
                Before::Step(Step::Stale),
                "retried",
            ),
            (Some(settled.clone()), Claim::Refused(settled.clone()), None, Before::Step(Step::Stale), "settled"),
            (
                Some(restarted_reclaimed.clone()),
                Claim::Refused(restarted_reclaimed.clone()),
                None,
                Before::Step(Step::Stale),
                "retried, its claim taken by another since: that turn hands over",
            ),
            (
                Some(reclaimed.clone()),
                Claim::Refused(reclaimed.clone()),
                None,
                Before::Step(Step::NotYet(Duration::from_secs(5))),
                "another turn holds it",
            ),
            (None, Claim::Unwritten, None, Before::Step(Step::Stale), "no record, though its generation had one"),
        ];
        for (record, claim, unused, before, case) in table {
            let found_claim = created_claim(lease, message.generation, record);
            assert_eq!(found_claim, claim, "{case}");
            assert_eq!(unused_claim(&message, &found_claim), unused, "{case}: unused claim");
            assert_eq!(before_send(found(Lane::Main, 2, found_claim, HEALTHY), at(0), &policy()), before, "{case}");
        }
        let unclaimed = DeliveryMessage { claimed_until: None, ..message };
        assert_eq!(unused_claim(&unclaimed, &Claim::Refused(restarted)), None, "a copy without a creation claim");
    }

    #[test]
    fn a_restarted_round_waits_for_a_claim_on_the_retry_lane() {
        let message = first_attempt(0);
        let spread = Groups::new(16).unwrap();
        let group = Place::Group(spread.index_of(&message.delivery_id));
        let failing = Health::Failing { since: at(-60) };
        let now = Place::Delay(Duration::ZERO);
        let table = [
            (None, Health::Active, group, "never claimed"),
            (Some(at(-1)), Health::Active, group, "its claim ended"),
            (Some(at(0)), Health::Active, group, "its claim ends now"),
            (Some(at(25)), Health::Active, now, "an attempt in flight, or a first attempt queued claimed"),
            (None, failing, now, "a failing subscription's rounds wait on the retry lane"),
        ];
        for (lease_until, health, place, case) in table {
            assert_eq!(
                restarted(&message, (2, lease_until), (&health, WhileDisabled::Hold, spread), at(0)),
                Restarted::Post(place),
                "{case}"
            );
        }
    }

    #[test]
    fn a_restarted_round_of_a_disabled_subscription_ends_as_its_turn_would() {
        let message = first_attempt(0);
        let spread = Groups::new(16).unwrap();
        for reason in [DisabledReason::Failing, DisabledReason::Gone, DisabledReason::Manual] {
            let disabled = Health::Disabled { at: at(-60), reason };
            // As its turn would ([`disabled`]): a ping (this message) is never held, so it is
            // skipped if never sent, else failed, with `hold` as with `skip`; data is held.
            for (while_disabled, attempts, lease_until, status) in [
                (WhileDisabled::Skip, 0, None, DeliveryStatus::Skipped),
                (WhileDisabled::Skip, 3, Some(at(25)), DeliveryStatus::Failed),
                (WhileDisabled::Hold, 0, None, DeliveryStatus::Skipped),
                (WhileDisabled::Hold, 3, Some(at(25)), DeliveryStatus::Failed),
            ] {
                let ended = restarted(&message, (attempts, lease_until), (&disabled, while_disabled, spread), at(0));
                let Restarted::NotSent(not_sent) = ended else { panic!("{ended:?}") };
                let case = format!("{reason:?}, {while_disabled:?}, {attempts} attempts");
                assert_eq!(not_sent.reason, super::disabled(message.event.kind(), while_disabled), "{case}");
                assert_eq!((not_sent.attempts, not_sent.status()), (attempts, status), "{case}");
            }
        }
    }

    #[test]
    fn a_round_handed_on_goes_on_only_while_pending() {
        let message = first_attempt(0);
        assert_eq!(handed_on(message.clone(), DeliveryStatus::Pending), Some(put_back(message.clone())));
        for status in DeliveryStatus::ALL.into_iter().filter(|status| *status != DeliveryStatus::Pending) {
            assert_eq!(handed_on(message.clone(), status), None, "{status}");
        }
    }

    #[test]
    fn a_new_delivery_is_placed_once_for_every_origin() {
        let message = first_attempt(0);
        let spread = Groups::new(16).unwrap();
        let hold = WhileDisabled::Hold;
        let new = new_delivery(message.clone(), (&Health::Active, hold), spread, at(0));
        assert_eq!(new.status, DeliveryStatus::Pending);
        assert_eq!(new.place, Some(Place::Group(spread.index_of(&message.delivery_id))));
        assert_eq!(new.message.claimed_until, Some(Lease::from(at(0)).until), "created claimed for the main lane");
        let failing = Health::Failing { since: at(-60) };
        assert_eq!(
            new_delivery(message.clone(), (&failing, hold), spread, at(0)),
            NewDelivery {
                message: message.clone(),
                status: DeliveryStatus::Pending,
                place: Some(Place::Delay(Duration::ZERO))
            },
            "a failing subscription's first attempt waits on the retry lane, unclaimed"
        );
        let disabled = Health::Disabled { at: at(-60), reason: DisabledReason::Manual };
        let skipped = NewDelivery { message: message.clone(), status: DeliveryStatus::Skipped, place: None };
        assert_eq!(new_delivery(message.clone(), (&disabled, WhileDisabled::Skip), spread, at(0)), skipped);
        assert_eq!(new_delivery(message.clone(), (&disabled, hold), spread, at(0)), skipped, "a ping is never held");
        let body = serde_json::json!({"id": crate::ids::EventId::generate(), "type": "profile.updated",
            "createdAt": "2026-11-27T08:00:00.000Z", "data": {"userId": "u1", "profileId": "prf_1"}});
        let update = DeliveryMessage { event: serde_json::from_value(body).unwrap(), ..message };
        assert_eq!(
            new_delivery(update.clone(), (&disabled, hold), spread, at(0)),
            NewDelivery { message: update, status: DeliveryStatus::Held, place: None },
            "held: recorded, with no message"
        );
    }

    #[test]
    fn a_claim_outlasts_a_whole_send_and_its_record() {
        let lease = Lease::from(at(0));
        assert_eq!(lease.until, at(0) + TIMEOUT + LEASE_MARGIN);
        assert!(lease.allows_send_at(at(0)));
        assert!(lease.allows_send_at(at(10)), "secrets slow to open still leave time to record");
        assert!(!lease.allows_send_at(at(11)), "a send this late could end after the claim");
    }

    #[test]
    fn only_a_failing_subscription_sends_one_at_a_time_under_its_turns_claim() {
        let lease = Lease::from(at(3));
        assert_eq!(one_send_open(None, Some(lease), at(5)), None);
        assert_eq!(one_send_open(Some(at(0)), Some(lease), at(5)), Some(lease));
        assert_eq!(one_send_open(Some(at(0)), None, at(5)), Some(Lease::from(at(5))));
        // Turned back for as long as the open send may last, spread over one more timeout.
        let send = TIMEOUT + RECORD_MARGIN;
        assert_eq!(behind_open_send(0.0), HeldBack::BehindOpenSend(send));
        assert_eq!(behind_open_send(0.5), HeldBack::BehindOpenSend(send + TIMEOUT / 2));
        assert_eq!(behind_open_send(7.0), HeldBack::BehindOpenSend(send + TIMEOUT));
    }

    #[test]
    fn a_delivery_never_sent_is_skipped_and_one_sent_before_ends_failed_saying_why() {
        let unlisted = SkipReason::NotListed(EventKind::AssessmentCompleted);
        let never = NotSent { reason: unlisted, attempts: 0 };
        assert_eq!(
            (never.status(), never.to_string().as_str()),
            (DeliveryStatus::Skipped, "not sent: the subscription no longer lists assessment.completed")
        );
        let sent = NotSent { reason: SkipReason::Disabled, attempts: 1 };
        assert_eq!(
            (sent.status(), sent.to_string().as_str()),
            (DeliveryStatus::Failed, "not sent again: the subscription is disabled")
        );
        for attempts in [0, 3] {
            let held = NotSent { reason: SkipReason::Held, attempts };
            assert_eq!(
                (held.status(), held.to_string().as_str()),
                (DeliveryStatus::Held, "held: the subscription is disabled"),
                "held whether sent before or not"
            );
        }
        let created = |status| NotSent::at_creation(status).map(|n| (n.status(), n.to_string()));
        assert_eq!(
            created(DeliveryStatus::Held),
            Some((DeliveryStatus::Held, "held: the subscription is disabled".into()))
        );
        assert_eq!(
            created(DeliveryStatus::Skipped),
            Some((DeliveryStatus::Skipped, "not sent: the subscription is disabled".into()))
        );
        assert_eq!(created(DeliveryStatus::Pending), None);
    }

    #[test]
    fn a_probe_goes_to_a_subscription_disabled_for_failing_only() {
        let probe = |subscription: Option<SubscriptionState>| {
            let found = Found {
                kind: EventKind::WebhookPing,
                probe: true,
                ..found(Lane::Retry, 2, held(pending(2, 0)), subscription)
            };
            before_send(found, at(0), &policy())
        };
        let failing = SubscriptionState { enabled: false, probed: true, ..HEALTHY.unwrap() };
        assert_eq!(probe(Some(failing.clone())), send(1, Some(failing)));
        let manual = SubscriptionState { enabled: false, ..HEALTHY.unwrap() };
        assert_eq!(
            probe(Some(manual)),
            Before::Step(Step::NotSent(NotSent { reason: SkipReason::Disabled, attempts: 0 }))
        );
        assert_eq!(probe(None), Before::Step(Step::NotSent(NotSent { reason: SkipReason::Deleted, attempts: 0 })));
        assert_eq!(probe(HEALTHY), send(1, HEALTHY), "an enabled subscription takes it as a ping");
    }

    #[test]
    fn a_schedule_resumed_later_takes_its_next_slot_and_none_once_probing_has_ended() {
        let schedule = ProbeSchedule { after: Duration::from_secs(600), lasting: Duration::from_secs(7 * 24 * 3600) };
        let disabled = at(0);
        assert_eq!(schedule.resumed(disabled, disabled), Some((at(600), 0)), "not yet probed: the first");
        assert_eq!(schedule.resumed(disabled, at(600)), Some((at(600), 0)));
        // 600, then 1,200 later (1,800), then 2,400 later (4,200).
        assert_eq!(schedule.resumed(disabled, at(601)), Some((at(1800), 1)));
        assert_eq!(schedule.resumed(disabled, at(2000)), Some((at(4200), 2)));
        assert_eq!(schedule.resumed(disabled, at(7 * 24 * 3600)), None, "probing has ended");
    }

    #[test]
    fn probes_double_from_the_first_up_to_six_hours_until_probing_ends() {
        let schedule = ProbeSchedule { after: Duration::from_secs(600), lasting: Duration::from_secs(7 * 24 * 3600) };
        let next = |made| schedule.next(at(0), made).map(|next| next.since(at(0)).as_secs());
        // 10 min, then +20, +40, +80, +160, +320 min, then +6 h each.
        assert_eq!((0..7).map(next).collect::<Vec<_>>(), [600, 1800, 4200, 9000, 18600, 37800, 59400].map(Some));
        assert_eq!(next(8), Some(59400 + 2 * 21600));
        assert_eq!(next(31), Some(59400 + 25 * 21600), "the last before seven days");
        assert_eq!(next(32), None, "seven days on: probing has ended");
        let short = ProbeSchedule { after: Duration::from_secs(1), lasting: Duration::from_secs(4) };
        assert_eq!((0..3).map(|made| short.next(at(0), made)).collect::<Vec<_>>(), [Some(at(1)), Some(at(3)), None]);
    }

    #[test]
    fn a_probe_is_one_attempt_and_its_answer_says_whether_the_subscription_comes_back() {
        let delivered = after_probe(&answered(204, None), at(0));
        assert_eq!(
            (delivered.record.status, delivered.subscription, delivered.message),
            (DeliveryStatus::Succeeded, SubscriptionChange::Reenable, MessageFate::Acknowledge)
        );
        for outcome in [answered(500, None), answered(410, None), answered(429, Some("5")), no_answer()] {
            let failed = after_probe(&outcome, at(0));
            assert_eq!(
                (failed.record.status, failed.record.next_attempt_at, failed.subscription, failed.message),
                (DeliveryStatus::Failed, None, SubscriptionChange::ProbeFailed, MessageFate::Acknowledge),
                "{outcome:?}"
            );
        }
        let queued = probe(first_attempt(0));
        assert_eq!((queued.status, queued.place), (DeliveryStatus::Pending, Some(Place::Delay(Duration::ZERO))));
    }

    #[test]
    fn held_deliveries_are_settled_once_the_change_can_no_longer_hold_one() {
        assert_eq!(settle_rest_at(true, at(0)), at(0), "more than the call's share: at once");
        assert_eq!(settle_rest_at(false, at(0)), at(0) + LONGEST_STAY, "after any turn that read it before");
        assert_eq!(
            (HELD_DELETED.status(), HELD_DELETED.to_string().as_str()),
            (DeliveryStatus::Skipped, "not sent: the subscription was deleted")
        );
    }

    #[test]
    fn a_disabled_subscription_holds_what_it_is_sent_unless_it_skips_or_it_is_a_ping() {
        let table = [
            (EventKind::ProfileUpdated, WhileDisabled::Hold, SkipReason::Held),
            (EventKind::AssessmentCompleted, WhileDisabled::Hold, SkipReason::Held),
            (EventKind::ProfileUpdated, WhileDisabled::Skip, SkipReason::Disabled),
            (EventKind::WebhookPing, WhileDisabled::Hold, SkipReason::Disabled),
            (EventKind::WebhookPing, WhileDisabled::Skip, SkipReason::Disabled),
        ];
        for (kind, while_disabled, reason) in table {
            assert_eq!(disabled(kind, while_disabled), reason, "{} {while_disabled}", kind.as_str());
        }
    }

    #[test]
    fn retry_after_is_delta_seconds_or_an_http_date() {
        let now = at(0);
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        let in_ninety = httpdate::fmt_http_date((now + Duration::from_secs(90)).into());
        assert_eq!(parse_retry_after(&in_ninety, now), Some(Duration::from_secs(90)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now), Some(Duration::ZERO), "past");
        for ignored in ["", "-3", "1.5", "soon", "3 s"] {
            assert_eq!(parse_retry_after(ignored, now), None, "{ignored:?}");
        }
    }

    /// An answer of `status`, with its `Retry-After` header if any.
    fn answered(status: u16, retry_after: Option<&str>) -> Outcome {
        use crate::delivery::attempt::Answer;
        let answer = Answer { status, body: String::new(), retry_after: retry_after.map(str::to_owned) };
        match status {
            200..=299 => Outcome::Delivered(answer),
            _ => Outcome::Rejected(answer),
        }
    }

    fn no_answer() -> Outcome {
        Outcome::NoAnswer(crate::delivery::attempt::SendFailure::TimedOut)
    }

    #[test]
    fn only_429_and_503_carry_their_retry_after() {
        use MessageFate::*;
        let secs = Duration::from_secs;
        // Jitter 0.5 gives the schedule's exact wait: 30 s after attempt 1.
        let fate =
            |outcome: Outcome| after_send(1, EventKind::ProfileUpdated, &outcome, None, at(0), &policy(), 0.5).message;
        assert_eq!(fate(answered(204, Some("300"))), Acknowledge);
        assert_eq!(fate(answered(410, Some("300"))), DeadLetter);
        assert_eq!(fate(answered(429, Some("300"))), RetryIn(secs(300)));
        assert_eq!(fate(answered(503, Some("300"))), RetryIn(secs(300)));
        assert_eq!(fate(answered(500, Some("300"))), RetryIn(secs(30)));
        assert_eq!(fate(answered(429, None)), RetryIn(secs(30)));
        assert_eq!(fate(no_answer()), RetryIn(secs(30)));
    }

    #[test]
    fn after_an_answer_the_record_the_subscription_and_the_message_follow_it() {
        let policy = policy();
        // Jitter 0.5 gives the schedule's exact wait: 30 s after attempt 1, 120 s after 2.
        let plan = |attempt, outcome: Outcome, failing_since: Option<i64>, now| {
            after_send(attempt, EventKind::ProfileUpdated, &outcome, failing_since.map(at), at(now), &policy, 0.5)
        };
        // What the record is left as: its status, its next attempt, and whether the generation moves on.
        let pending_until = |seconds: i64| (DeliveryStatus::Pending, Some(at(seconds)), false);
        let failed = (DeliveryStatus::Failed, None, false);
        let succeeded = (DeliveryStatus::Succeeded, None, true);
        let retry_after = |seconds: u32| answered(429, Some(&seconds.to_string()));
        let rejected = || answered(500, None);
        let delivered = || answered(204, None);
        let secs = Duration::from_secs;
        use MessageFate::*;
        use SubscriptionChange::*;
        let table = [
            ("success", plan(1, delivered(), None, 0), succeeded, Unchanged, Acknowledge),
            ("success stops the clock", plan(2, delivered(), Some(-10), 0), succeeded, Recovered, Acknowledge),
            ("first failure", plan(1, rejected(), None, 0), pending_until(30), StartFailing, RetryIn(secs(30))),
            ("no answer", plan(2, no_answer(), Some(-10), 0), pending_until(120), Unchanged, RetryIn(secs(120))),
            (
                "Retry-After longer",
                plan(1, retry_after(300), None, 0),
                pending_until(300),
                StartFailing,
                RetryIn(secs(300)),
            ),
            (
                "Retry-After shorter",
                plan(1, retry_after(3), None, 0),
                pending_until(30),
                StartFailing,
                RetryIn(secs(30)),
            ),
            (
                "Retry-After capped",
                plan(1, retry_after(99_999), None, 0),
                pending_until(3600),
                StartFailing,
                RetryIn(secs(3600)),
            ),
            ("Retry-After on the last", plan(3, retry_after(300), Some(-10), 0), failed, Unchanged, DeadLetter),
            ("last attempt", plan(3, rejected(), Some(-100), 0), failed, Unchanged, DeadLetter),
            (
                "last, failing too long",
                plan(3, rejected(), Some(-101), 0),
                failed,
                Disable(DisabledReason::Failing),
                DeadLetter,
            ),
            (
                "not last, failing long",
                plan(2, rejected(), Some(-500), 0),
                pending_until(120),
                Unchanged,
                RetryIn(secs(120)),
            ),
            ("410", plan(1, answered(410, None), None, 0), failed, Disable(DisabledReason::Gone), DeadLetter),
        ];
        for (case, after, record, subscription, message) in table {
            let written = (after.record.status, after.record.next_attempt_at, after.record.advance_generation);
            assert_eq!((written, after.subscription, after.message), (record, subscription, message), "{case}");
        }
        let gone = plan(1, answered(410, None), None, 0);
        assert_eq!(gone.record.error.as_deref(), Some(GONE_ERROR), "a 410's consequence, instead of its own error");
    }

    #[test]
    fn a_wait_longer_than_a_message_delay_parks_the_record_and_no_wait_stays_in_flight() {
        let policy = Policy { schedule: RetrySchedule { base: Duration::from_secs(30), max_attempts: 9 }, ..policy() };
        let after = |attempt| after_send(attempt, EventKind::ProfileUpdated, &no_answer(), None, at(0), &policy, 0.5);
        // The schedule's waits: 30 s, 2 min, 10 min, then 30 min and more.
        let parked: Vec<bool> = (1..=5).map(|attempt| after(attempt).record.parked).collect();
        assert_eq!(parked, [false, false, false, true, true]);
        let secs = Duration::from_secs;
        let table = [
            (MessageFate::Acknowledge, Exit::Delete, "delivered"),
            (MessageFate::DeadLetter, Exit::DeadLetter, "no attempt left"),
            (MessageFate::RetryIn(secs(30)), Exit::Move(Place::Delay(secs(30))), "a retry is a new message's delay"),
            (MessageFate::RetryIn(secs(600)), Exit::Move(Place::Delay(secs(600))), "a longer one too"),
            (MessageFate::RetryIn(LONGEST_DELAY), Exit::Move(Place::Delay(LONGEST_DELAY)), "at SQS's most"),
            (MessageFate::RetryIn(secs(1800)), Exit::Delete, "parked: the table holds the wait"),
        ];
        for (fate, exit, case) in table {
            assert_eq!(exit_after(fate), exit, "{case}");
        }
        assert_eq!(exit_recorded(Recorded::HandedOn, MessageFate::RetryIn(secs(30))), Exit::Delete);
        assert_eq!(exit_recorded(Recorded::Not, MessageFate::DeadLetter), Exit::Delete);
        assert_eq!(waiting(secs(20)), Exit::Stay(secs(20)), "a claim another turn holds");
        assert_eq!(waiting(secs(3600)), Exit::Move(Place::Delay(LONGEST_DELAY)), "an early copy waits in hops");
        assert_eq!(unparked(first_attempt(0), at(300), at(0)).place, Place::Delay(secs(300)));
        assert_eq!(unparked(first_attempt(0), at(-5), at(0)).place, Place::Delay(Duration::ZERO), "overdue: at once");
    }

    #[test]
    fn at_the_send_a_short_claim_or_the_rate_makes_it_wait_and_only_a_written_claim_is_given_up() {
        let written = Lease::from(at(0));
        let created = Lease::from(at(-5));
        let rate = Some(HeldBack::OverRate(Duration::from_millis(400)));
        let stay = Exit::Stay(Duration::from_millis(400));
        assert_eq!(at_send(Some(written), None, None, at(0)), AtSend::Send);
        assert_eq!(at_send(None, None, None, at(0)), AtSend::Send, "a record not written yet");
        assert_eq!(
            at_send(Some(written), None, rate, at(0)),
            AtSend::Wait { exit: stay, release: Some(written) },
            "over the rate: the claim its turn wrote is given up"
        );
        assert_eq!(
            at_send(Some(created), Some(created.until), rate, at(0)),
            AtSend::Wait { exit: stay, release: None },
            "the creation claim stays with the message"
        );
        let late = at(11);
        assert_eq!(
            at_send(Some(written), None, None, late),
            AtSend::Wait { exit: Exit::Stay(written.until.since(late)), release: None },
            "too late to send under the claim: it waits for the claim to end"
        );
        // Behind a failing subscription's open send: a new message's delay, never in flight.
        let behind = behind_open_send(0.5);
        let HeldBack::BehindOpenSend(wait) = behind else { panic!("{behind:?}") };
        assert_eq!(
            at_send(Some(written), None, Some(behind), at(0)),
            AtSend::Wait { exit: Exit::Move(Place::Delay(wait)), release: Some(written) }
        );
    }

    #[test]
    fn a_delivery_of_an_operational_event_changes_nothing_but_its_record() {
        let policy = policy();
        for kind in operational::KINDS {
            let plan = |attempt, outcome: &Outcome, failing_since: Option<i64>| {
                after_send(attempt, kind, outcome, failing_since.map(at), at(0), &policy, 0.5)
            };
            let (rejected, delivered, gone) = (answered(500, None), answered(204, None), answered(410, None));
            let cases = [
                (
                    plan(1, &rejected, None),
                    &rejected,
                    DeliveryStatus::Pending,
                    MessageFate::RetryIn(Duration::from_secs(30)),
                ),
                (plan(3, &rejected, Some(-101)), &rejected, DeliveryStatus::Failed, MessageFate::DeadLetter),
                (plan(2, &delivered, Some(-10)), &delivered, DeliveryStatus::Succeeded, MessageFate::Acknowledge),
                (plan(1, &gone, None), &gone, DeliveryStatus::Failed, MessageFate::DeadLetter),
            ];
            for (after, outcome, status, message) in cases {
                assert_eq!(after.subscription, SubscriptionChange::Unchanged, "{}: {after:?}", kind.as_str());
                // A 410 disables nothing, so its record says the answer's own error.
                assert_eq!(
                    (after.record.status, after.message, after.record.error),
                    (status, message, outcome.error())
                );
            }
        }
    }

    #[test]
    fn an_attempt_keeps_the_answer_and_writes_what_the_plan_says() {
        use crate::delivery::attempt::{Answer, SendFailure};
        let at: Timestamp = "2026-11-21T08:00:00.000Z".parse().unwrap();
        let rejected = Outcome::Rejected(Answer { status: 500, body: "oops".into(), retry_after: None });
        let pending = AttemptRecord::failed(&rejected, Some(at + Duration::from_secs(30)), at);
        assert_eq!(
            pending,
            AttemptRecord {
                at,
                status: DeliveryStatus::Pending,
                response: Some((500, "oops".into())),
                error: Some("answered 500".into()),
                next_attempt_at: Some("2026-11-21T08:00:30.000Z".parse().unwrap()),
                parked: false,
                advance_generation: false,
            }
        );
        let refused = Outcome::NoAnswer(SendFailure::ConnectionRefused);
        let failed = AttemptRecord::failed(&refused, None, at);
        assert_eq!((failed.status, failed.response, failed.next_attempt_at), (DeliveryStatus::Failed, None, None));
        assert_eq!(failed.error.as_deref(), Some("connection refused"));
        let gone = Outcome::Rejected(Answer { status: 410, body: String::new(), retry_after: None });
        let policy = policy();
        let after = after_send(1, EventKind::ProfileUpdated, &gone, None, at, &policy, 0.5);
        assert_eq!(after.record.error.as_deref(), Some("answered 410; subscription disabled"));
        assert_eq!(after.record.response, Some((410, String::new())));
        let delivered = Outcome::Delivered(Answer { status: 204, body: String::new(), retry_after: None });
        let succeeded = AttemptRecord::succeeded(&delivered, at);
        assert_eq!(
            (succeeded.status, succeeded.error, succeeded.next_attempt_at, succeeded.advance_generation),
            (DeliveryStatus::Succeeded, None, None, true)
        );
    }
}
