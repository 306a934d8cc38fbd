//! The batch's moves off the main lane, unsent, each kind in one `SendMessageBatch` and one
//! `DeleteMessageBatch`: a failing subscription's first attempts to the retry lane, and the
//! deliveries whose subscription now spreads over other message groups than theirs to their
//! own group (contract section 18). Each result carries its message's id.

use career_core::aws::queue::Lane;
use career_core::delivery::groups::{self, Groups};
use career_core::delivery::plan::{self, Lease, Place, Step};
use career_core::delivery::DeliveryMessage;
use tracing::Instrument;

use crate::exit::{self, Disposition};
use crate::turn::{Seen, Turn};
use crate::{Deps, Received};

/// The group a main-lane message about to be sent moves to instead, with its turn's claim:
/// when its subscription's groups now give it another one ([`groups::regroup`]).
pub(crate) fn regroup_of(deps: &Deps, received: &Received<'_>, turn: &Turn) -> Option<(u8, Option<Lease>)> {
    let Turn::Decided { step: Step::Send { subscription: Seen { subscription, .. }, .. }, lease } = turn else {
        return None;
    };
    let group =
        groups::regroup(received.group?, &received.delivery.delivery_id, Groups::spread_of(subscription, deps.groups))?;
    Some((group, *lease))
}

/// The batch's main-lane deliveries whose subscription now spreads over other groups, each
/// moved to its own group unsent, the copies carrying the claims their turns hold (the main
/// lane hands each to one consumer at a time, and the original is not sent).
pub(crate) async fn regroup_together<'a>(
    deps: &Deps,
    regrouped: Vec<(&'a Received<'a>, u8, Option<Lease>)>,
) -> Vec<(&'a str, Disposition)> {
    let moves = regrouped.into_iter().map(|(received, group, lease)| {
        received
            .span
            .in_scope(|| tracing::info!(group, "moving the delivery to its subscription's message group, unsent"));
        let copy = DeliveryMessage { claimed_until: lease.map(|lease| lease.until), ..received.delivery.clone() };
        (received, copy, Place::Group(group))
    });
    leave_main_lane(deps, moves.collect()).await
}

/// The batch's deliveries to failing subscriptions, each with its turn's claim, moved to the
/// retry lane together: their claims given up (kept, a claim would only make the moved copy
/// wait for it to end), then moved.
pub(crate) async fn hand_over_together<'a>(
    deps: &Deps,
    handed_over: Vec<(&'a Received<'a>, Option<Lease>)>,
) -> Vec<(&'a str, Disposition)> {
    let releases = handed_over.iter().map(|(received, lease)| {
        async move {
            tracing::info!("subscription failing; delivery handed to the retry lane");
            if let Some(lease) = lease {
                if let Err(err) = deps.deliveries.release(&received.delivery, *lease).await {
                    tracing::warn!(error = %err, "giving up the claim failed; the handed-over copy waits for it");
                }
            }
        }
        .instrument(received.span.clone())
    });
    futures_util::future::join_all(releases).await;
    let moves = handed_over.into_iter().map(|(received, _)| {
        let posting = plan::put_back(received.delivery.clone());
        (received, posting.message, posting.place)
    });
    leave_main_lane(deps, moves.collect()).await
}

/// Moves received main-lane messages (each as `copy`, to its place) in one post, then each
/// one taken leaves the main lane (one `DeleteMessageBatch`, when its batch holds others),
/// each one refused stays, to be tried again after the retry base.
async fn leave_main_lane<'a>(
    deps: &Deps,
    moves: Vec<(&'a Received<'a>, DeliveryMessage, Place)>,
) -> Vec<(&'a str, Disposition)> {
    if moves.is_empty() {
        return Vec::new();
    }
    let postings: Vec<(&DeliveryMessage, Place)> = moves.iter().map(|(_, copy, place)| (copy, *place)).collect();
    let refused = deps.queues.post(&postings).await;
    let mut settled = Vec::new();
    let mut moved = Vec::new();
    for (position, (received, _, place)) in moves.iter().enumerate() {
        match refused.iter().find(|(refused, _)| *refused == position) {
            Some((_, reason)) => {
                let span = received.span.clone();
                span.in_scope(|| tracing::error!(error = %reason, "{}", exit::moved_to(*place)));
                let stays = exit::stay(deps, &received.exiting(), deps.policy.schedule.base).instrument(span).await;
                settled.push((received.id, stays));
            }
            None => {
                moved.push(received.receipt.handle);
                settled.push((received.id, Disposition::Acknowledged));
            }
        }
    }
    // Should the early delete fail, the messages are still not reported, so the event source
    // mapping (or the local pump) deletes them with their batch.
    if moves.first().is_some_and(|(first, _, _)| first.receipt.early) && !moved.is_empty() {
        if let Err(err) = deps.queues.delete_all(Lane::Main, &moved).await {
            tracing::warn!(error = %err, "deleting the moved messages early failed; they go with their batch");
        }
    }
    settled
}
