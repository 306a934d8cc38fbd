//! `/api/v1/webhooks`: list (GET), create (POST), update (PATCH) and delete (DELETE)
//! webhook subscriptions; below it secret rotation (contract section 10), the delivery log,
//! manual retries, pings and re-enabling (section 9), recovery after an outage (section 12),
//! the event catalog (section 13), the public keys of asymmetric signing (section 16), replay
//! across subscriptions, cancelling what waits and a subscription's health (section 20). Each
//! path is a resource below; an operation is one line there and one arm in `handle`. It also
//! serves the portal's page and files (section 14, `portal`), which need no key.

pub mod portal;

use std::time::Duration;

use career_core::aws::api::{ApiError, Call, Front, Reply, Resource};
use career_core::aws::outbox::Outbox;
use career_core::aws::queue::DeliveryQueues;
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table};
use career_core::credentials::Scope;
use career_core::delivery::cancel::CancelBefore;
use career_core::delivery::groups::Groups;
use career_core::delivery::log::DeliveryStatus;
use career_core::delivery::plan::{self, NotSent};
use career_core::delivery::recovery::{RecoverWindow, MAX_PER_CALL};
use career_core::delivery::replay::{self, ReplayRequest};
use career_core::delivery::DeliveryMessage;
use career_core::events::catalog::event_types;
use career_core::events::Event;
use career_core::ids::{DeliveryId, SubscriptionId};
use career_core::pagination::{page_size, CursorKey};
use career_core::store::deliveries::{DeliveryTable, StoredDelivery};
use career_core::store::health::HealthTable;
use career_core::store::sealing::Sealer;
use career_core::store::webhooks::{Created, NewDestination, NewSecrets, Replaced, Replacing, WebhookTable};
use career_core::store::{Backoff, StoreError};
use career_core::trace::TraceContext;
use career_core::webhooks::destination::{AwsDestination, Destination, DestinationPolicy, InvalidDestination, RoleArn};
use career_core::webhooks::health::{HealthReport, Known};
use career_core::webhooks::identity_token::{IdentityToken, InvalidIdentityToken};
use career_core::webhooks::rotation::{GracePeriod, RotatedSubscription, SigningSecrets};
use career_core::webhooks::UrlPolicy;
use career_core::webhooks::{
    asymmetric_signing, trace_context, CreatedSubscription, DeliveryRate, EnabledSubscription, EventKinds,
    Subscription, SubscriptionChanges, SubscriptionObject, Target, WebhookSecret, WebhookUrl, WhileDisabled,
    MAX_SUBSCRIPTIONS_PER_USER,
};
use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};
use serde_json::{json, Value};

/// How long a rotation, a change of asymmetric signing or a manual retry's skip that met a
/// concurrent change of its item goes on reading it again, after jittered pauses: a time
/// within the function's 10 s, with room for the last try, rather than a count of tries (on a
/// loaded machine thirty rotations of one subscription at once need more tries each, and
/// every try that meets a change met another's success).
const CONTENDED_BUDGET: Duration = Duration::from_secs(7);

pub struct Deps {
    front: Front,
    webhooks: WebhookTable,
    deliveries: DeliveryTable,
    /// The subscriptions' health figures, beside their logs (contract section 20).
    health: HealthTable,
    outbox: Outbox,
    cursors: CursorKey,
    sealer: Sealer,
    url_policy: UrlPolicy,
    /// The delivery function's role, shown with every AWS destination (contract section 17).
    sender_role: Option<RoleArn>,
    /// The most groups of the main lane a subscription spreads over (a ping goes to its own).
    groups: Groups,
    /// How many held deliveries an enable releases, or a delete ends, itself (section 20).
    release_per_call: u32,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        let [webhooks, deliveries] = settings.tables.require([Table::Webhooks, Table::Deliveries])?;
        Ok(Self {
            front: Front::new(clients.dynamodb(), settings)?,
            webhooks: WebhookTable::new(clients.dynamodb().clone(), webhooks),
            deliveries: DeliveryTable::new(clients.dynamodb().clone(), deliveries),
            health: HealthTable::new(clients.dynamodb().clone(), deliveries),
            outbox: Outbox::new(
                DeliveryTable::new(clients.dynamodb().clone(), deliveries),
                DeliveryQueues::new(clients, settings)?,
            ),
            cursors: CursorKey::new(settings.require_cursor_key()?),
            sealer: Sealer::new(clients, settings)?,
            url_policy: settings.webhook_urls.clone(),
            sender_role: settings.sender_role_arn.clone(),
            groups: settings.delivery_groups,
            release_per_call: settings.release_per_call,
        })
    }

    fn destinations(&self) -> DestinationPolicy<'_> {
        DestinationPolicy { sender_role: self.sender_role.as_ref(), urls: &self.url_policy }
    }

    fn public(&self, subscription: &Subscription) -> SubscriptionObject {
        subscription.public(self.sender_role.as_ref())
    }
}

#[derive(Clone, Copy)]
pub enum Operation {
    List,
    Create,
    Update,
    Delete,
    RotateSecret,
    ListDeliveries,
    RetryDelivery,
    Ping,
    Enable,
    Recover,
    Replay,
    Cancel,
    EventTypes,
    SigningKeys,
    Health,
}

pub const RESOURCES: [Resource<Operation>; 12] = [
    Resource {
        path: "/api/v1/webhooks",
        operations: &[
            (Method::GET, Scope::ReadWebhooks, Operation::List),
            (Method::POST, Scope::WriteWebhooks, Operation::Create),
            (Method::PATCH, Scope::WriteWebhooks, Operation::Update),
            (Method::DELETE, Scope::WriteWebhooks, Operation::Delete),
        ],
    },
    Resource {
        path: "/api/v1/webhooks/rotate-secret",
        operations: &[(Method::POST, Scope::WriteWebhooks, Operation::RotateSecret)],
    },
    Resource {
        path: "/api/v1/webhooks/deliveries",
        operations: &[(Method::GET, Scope::ReadWebhooks, Operation::ListDeliveries)],
    },
    Resource {
        path: "/api/v1/webhooks/deliveries/retry",
        operations: &[(Method::POST, Scope::WriteWebhooks, Operation::RetryDelivery)],
    },
    Resource {
        path: "/api/v1/webhooks/deliveries/cancel",
        operations: &[(Method::POST, Scope::WriteWebhooks, Operation::Cancel)],
    },
    Resource { path: "/api/v1/webhooks/ping", operations: &[(Method::POST, Scope::WriteWebhooks, Operation::Ping)] },
    Resource {
        path: "/api/v1/webhooks/enable",
        operations: &[(Method::POST, Scope::WriteWebhooks, Operation::Enable)],
    },
    Resource {
        path: "/api/v1/webhooks/recover",
        operations: &[(Method::POST, Scope::WriteWebhooks, Operation::Recover)],
    },
    Resource {
        path: "/api/v1/webhooks/replay",
        operations: &[(Method::POST, Scope::WriteWebhooks, Operation::Replay)],
    },
    Resource {
        path: "/api/v1/webhooks/event-types",
        operations: &[(Method::GET, Scope::ReadWebhooks, Operation::EventTypes)],
    },
    Resource {
        path: "/api/v1/webhooks/signing-keys",
        operations: &[(Method::GET, Scope::ReadWebhooks, Operation::SigningKeys)],
    },
    Resource { path: "/api/v1/webhooks/health", operations: &[(Method::GET, Scope::ReadWebhooks, Operation::Health)] },
];

pub async fn handle(deps: &Deps, request: Request) -> Response<Body> {
    if portal::serves(request.uri().path()) {
        return portal::answer(&request);
    }
    deps.front
        .serve(&RESOURCES, request, |operation, call| async move {
            match operation {
                Operation::List => list(deps, call).await,
                Operation::Create => create(deps, call).await,
                Operation::Update => update(deps, call).await,
                Operation::Delete => delete(deps, call).await,
                Operation::RotateSecret => rotate_secret(deps, call).await,
                Operation::ListDeliveries => list_deliveries(deps, call).await,
                Operation::RetryDelivery => retry_delivery(deps, call).await,
                Operation::Ping => ping(deps, call).await,
                Operation::Enable => enable(deps, call).await,
                Operation::Recover => recover(deps, call).await,
                Operation::Replay => replay(deps, call).await,
                Operation::Cancel => cancel(deps, call).await,
                Operation::EventTypes => Reply::ok(json!({"eventTypes": event_types()})),
                Operation::SigningKeys => signing_keys(deps, call).await,
                Operation::Health => health(deps, call).await,
            }
        })
        .await
}

async fn list(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let stored = deps.webhooks.list(call.user_id()).await?;
    let webhooks: Vec<_> = stored.iter().map(|subscription| deps.public(subscription)).collect();
    Reply::ok(json!({"webhooks": webhooks}))
}

async fn create(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let body = call.json_object()?;
    let present = |name: &str| body.get(name).filter(|value| !value.is_null());
    let (url, destination, events) = (present("url"), present("destination"), present("events"));
    let Some(events) = events.filter(|_| url.is_some() || destination.is_some()) else {
        return Err(ApiError::WebhookMissingRequiredFields);
    };
    // Exactly one of `url` and `destination` (contract section 17).
    let target = match (url, destination) {
        (Some(url), None) => (&WebhookUrl::parse(url, &deps.url_policy).map_err(ApiError::WebhookInvalidUrl)?).into(),
        (None, Some(destination)) => {
            let destination = Destination::parse(destination, &deps.destinations());
            Target::Aws(AwsDestination::new(destination.map_err(ApiError::WebhookInvalidDestination)?))
        }
        _ => return Err(ApiError::WebhookInvalidDestination(InvalidDestination::WithUrl)),
    };
    let events = EventKinds::parse(events).map_err(ApiError::WebhookInvalidEvents)?;
    let asymmetric = asymmetric_signing(body.get("asymmetricSigning"))?;
    let trace_context = trace_context(body.get("traceContext"))?;
    let rate = body.get("maxDeliveriesPerSecond").map(DeliveryRate::parse).transpose()?.flatten();
    let while_disabled = body.get("whileDisabled").map(WhileDisabled::of).transpose()?.unwrap_or_default();
    let identity_token = body.get("identityToken").map(IdentityToken::parse).transpose()?.flatten();
    if identity_token.is_some() && target.aws().is_some() {
        return Err(InvalidIdentityToken::OnDestination.into());
    }
    let (user_id, subscription_id) = (call.user_id().clone(), SubscriptionId::generate());
    let secrets = SigningSecrets::new(WebhookSecret::generate(), asymmetric);
    let sealed = deps.sealer.seal(&user_id, &subscription_id, &secrets).await?;
    let kinds = events.kinds().to_vec();
    let stored = Subscription {
        trace_context,
        max_deliveries_per_second: rate,
        while_disabled,
        identity_token,
        ..Subscription::new(user_id, subscription_id, target, kinds, sealed, secrets.public_keys())
    };
    match deps.webhooks.insert(&stored, MAX_SUBSCRIPTIONS_PER_USER).await? {
        Created::Yes => {
            Reply::created(CreatedSubscription { subscription: deps.public(&stored), secret: secrets.current })
        }
        Created::LimitReached => Err(ApiError::WebhookLimitExceeded),
    }
}

/// Contract section 13: a new URL, new kinds, a pause or a resume, in one conditional write
/// (no read first, so a concurrent change cannot make it fail: the last one applied wins).
/// Turning asymmetric signing on or off (section 16) changes the sealed secrets too, and a
/// change of destination (section 17) is checked against the stored one, so those writes
/// read first and hold only while what they read is unchanged, as a rotation does.
async fn update(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let changes = SubscriptionChanges::parse(&call.json_object()?, &deps.url_policy)?;
    let (user_id, typed) = (call.user_id(), subscription_id(id)?);
    let not_found = || ApiError::WebhookNotFound(id.to_owned());
    let target_change = || ApiError::WebhookInvalidDestination(InvalidDestination::TargetChange);
    let token_on = matches!(changes.identity_token, Some(Some(_)));
    let token_on_destination = || ApiError::from(InvalidIdentityToken::OnDestination);
    if changes.asymmetric_signing.is_none() && changes.destination.is_none() {
        if let Some(updated) =
            deps.webhooks.update(user_id, &typed, &changes, Replacing::default(), Timestamp::now()).await?
        {
            return updated_reply(deps, &changes, &updated).await;
        }
        // Neither a new URL nor an identity token is written to a destination's subscription:
        // say so (the token is checked first, as it is read first), or that there is none.
        let stored = deps.webhooks.get(user_id, &typed).await?.ok_or_else(not_found)?;
        return Err(match stored.target.aws() {
            Some(_) if token_on => token_on_destination(),
            Some(_) => target_change(),
            None => not_found(),
        });
    }
    let mut backoff = Backoff::within(CONTENDED_BUDGET);
    loop {
        let stored = deps.webhooks.get(user_id, &typed).await?.ok_or_else(not_found)?;
        if token_on && stored.target.aws().is_some() {
            return Err(token_on_destination());
        }
        let destination = match (&changes.destination, &stored.target) {
            (None, Target::Aws(_)) if changes.url.is_some() => return Err(target_change()),
            (None, _) => None,
            (Some(change), Target::Aws(aws)) => {
                let new = aws.changed(change, &deps.destinations()).map_err(ApiError::WebhookInvalidDestination)?;
                Some((aws, new))
            }
            (Some(_), Target::Url(_)) => return Err(target_change()),
        };
        let destination = destination.as_ref().map(|(expected, new)| NewDestination { expected, new });
        // Already as asked: the secrets stay, and the write is an update like any other.
        let replacement = match changes.asymmetric_signing {
            Some(on) if stored.public_keys.is_some() != on => {
                let secrets = deps.sealer.open(&stored).await?.with_asymmetric_signing(on);
                Some((deps.sealer.seal(user_id, &typed, &secrets).await?, secrets.public_keys()))
            }
            _ => None,
        };
        let new = replacement.as_ref().map(|(sealed, public_keys)| NewSecrets {
            expected: &stored.secrets,
            sealed,
            public_keys: public_keys.as_ref(),
        });
        let replacing = Replacing { secrets: new.as_ref(), destination: destination.as_ref() };
        // `None`: the secrets or the destination changed since they were read (or the
        // subscription is gone).
        if let Some(updated) = deps.webhooks.update(user_id, &typed, &changes, replacing, Timestamp::now()).await? {
            return updated_reply(deps, &changes, &updated).await;
        }
        if !backoff.pause().await {
            return Err(StoreError::Contention.into());
        }
    }
}

/// A PATCH's answer: the subscription and, when the change enabled it, what that released
/// (section 20, as `POST …/enable` answers).
async fn updated_reply(deps: &Deps, changes: &SubscriptionChanges, updated: &Subscription) -> Result<Reply, ApiError> {
    match changes.enabled {
        Some(true) => Reply::ok(EnabledSubscription {
            subscription: deps.public(updated),
            released: release(deps, updated).await?,
        }),
        Some(false) | None => Reply::ok(deps.public(updated)),
    }
}

/// Releases what the subscription, just enabled, held (the outbox's release, which every enable
/// path calls); how many this call released.
async fn release(deps: &Deps, subscription: &Subscription) -> Result<usize, ApiError> {
    let spread = Groups::spread_of(subscription, deps.groups);
    Ok(deps.outbox.release(subscription, spread, deps.release_per_call, Timestamp::now()).await?)
}

/// Deletes the subscription, then ends what it held (section 20). The deletion stands should
/// the ending fail: the sweep's marker, or else the log's TTL, ends what is left.
async fn delete(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let typed = subscription_id(id)?;
    if !deps.webhooks.delete(call.user_id(), &typed).await? {
        return Err(ApiError::WebhookNotFound(id.to_owned()));
    }
    if let Err(err) = deps.outbox.end_held((call.user_id(), &typed), deps.release_per_call, Timestamp::now()).await {
        tracing::error!(subscription_id = %typed, error = %err, "ending the deleted subscription's held deliveries failed");
    }
    Reply::ok(json!({"id": id, "deleted": Value::Bool(true)}))
}

/// Contract section 10: a new secret (and, with asymmetric signing on, a new key pair, section
/// 16), the current one kept for the grace period, stored in one conditional write. A
/// concurrent rotation that got there first makes this one read again and rotate what it
/// wrote (contract section 12: the last applied wins, no 500).
async fn rotate_secret(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let body = call.optional_json_object()?;
    let grace = GracePeriod::parse(body.as_ref().and_then(|body| body.get("gracePeriodSeconds")))
        .map_err(ApiError::WebhookInvalidGracePeriod)?;
    let next = WebhookSecret::generate();
    let mut backoff = Backoff::within(CONTENDED_BUDGET);
    loop {
        let stored = own_subscription(deps, &call, id).await?;
        let rotated = deps.sealer.open(&stored).await?.rotated(next.clone(), Timestamp::now(), grace);
        let sealed = deps.sealer.seal(&stored.user_id, &stored.id, &rotated).await?;
        let public_keys = rotated.public_keys();
        let new = NewSecrets { expected: &stored.secrets, sealed: &sealed, public_keys: public_keys.as_ref() };
        if let Replaced::Yes(updated) = deps.webhooks.replace_secrets(&stored.user_id, &stored.id, &new).await? {
            return Reply::ok(RotatedSubscription {
                subscription: deps.public(&updated),
                secret: next.into(),
                previous_secret_expires_at: rotated.previous.map(|previous| previous.expires_at),
            });
        }
        if !backoff.pause().await {
            return Err(StoreError::Contention.into());
        }
    }
}

/// Contract section 16: the public keys a receiver pins, the current one first.
async fn signing_keys(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let subscription = own_subscription(deps, &call, id).await?;
    let keys = subscription.public_keys.ok_or(ApiError::WebhookAsymmetricSigningOff)?;
    Reply::ok(json!({"keys": keys.listed_at(Timestamp::now())}))
}

/// Contract section 20: the subscription's state and figures, from its own item, its newest
/// hours of health figures (one `Query`) and the status index's counts of its held and
/// pending deliveries (each a `COUNT` query of what it holds), read together; never its log.
async fn health(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let subscription = own_subscription(deps, &call, id).await?;
    let (hours, held, pending) = tokio::try_join!(
        deps.health.recent(&subscription.id),
        deps.deliveries.count_indexed(&subscription.id, DeliveryStatus::Held),
        deps.deliveries.count_indexed(&subscription.id, DeliveryStatus::Pending),
    )?;
    let next_probe_at = subscription.next_probe().and_then(|next| next.0);
    let known = Known { hours: &hours, held, pending, next_probe_at };
    Reply::ok(HealthReport::of(&subscription, &known, Timestamp::now()))
}

/// The `id` query parameter of an operation on one subscription.
fn subscription_query(call: &Call) -> Result<&str, ApiError> {
    call.query("id").ok_or(ApiError::WebhookMissingSubscriptionId)
}

/// `id` as a subscription id; one of another shape is as missing as one that never was.
fn subscription_id(id: &str) -> Result<SubscriptionId, ApiError> {
    SubscriptionId::parse(id).ok_or_else(|| ApiError::WebhookNotFound(id.to_owned()))
}

/// The caller's subscription `id`; another user's is as missing as one that never was.
async fn own_subscription(deps: &Deps, call: &Call, id: &str) -> Result<Subscription, ApiError> {
    let typed = subscription_id(id)?;
    deps.webhooks.get(call.user_id(), &typed).await?.ok_or_else(|| ApiError::WebhookNotFound(id.to_owned()))
}

async fn list_deliveries(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let user_id = call.user_id();
    let id = subscription_query(&call)?;
    let status = match call.query("status") {
        Some(text) => Some(DeliveryStatus::parse(text).ok_or(ApiError::WebhookInvalidStatus)?),
        None => None,
    };
    let limit = page_size(call.query("limit"));
    // The cursor continues only this subscription's list with this filter.
    let list = format!("deliveries/{id}/{}", status.map_or("all", DeliveryStatus::as_str));
    let after = match call.query("cursor") {
        Some(cursor) => {
            Some(deps.cursors.open(user_id, &list, cursor, DeliveryId::parse).map_err(|_| ApiError::InvalidCursor)?)
        }
        None => None,
    };
    let subscription = own_subscription(deps, &call, id).await?;
    let page = deps.deliveries.list(&subscription.id, status, limit, after.as_ref()).await?;
    let next_cursor = page.last_id_if_more.map(|last| deps.cursors.seal(user_id, &list, &last));
    Reply::ok(json!({"deliveries": page.deliveries, "nextCursor": next_cursor}))
}

/// Sends the delivery again, the same id and body signed anew, then on the normal schedule.
/// Concurrent retries of one delivery all apply (each starts a new generation; the last
/// one's message is the one sent), so none answers 500.
async fn retry_delivery(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let user_id = call.user_id();
    let id = call.query("id").ok_or(ApiError::WebhookMissingDeliveryId)?;
    let not_found = || ApiError::WebhookDeliveryNotFound(id.to_owned());
    let delivery_id = DeliveryId::parse(id).ok_or_else(not_found)?;
    let mut backoff = Backoff::within(CONTENDED_BUDGET);
    loop {
        // The id alone does not say which of the user's logs holds it; a delivery of a deleted
        // subscription is in none of them, and cannot be retried.
        let subscriptions = deps.webhooks.list(user_id).await?;
        let ids: Vec<SubscriptionId> = subscriptions.iter().map(|s| s.id.clone()).collect();
        let stored = deps.deliveries.find(user_id, &ids, &delivery_id).await?.ok_or_else(not_found)?;
        let subscription =
            subscriptions.iter().find(|s| s.id == stored.record.subscription_id).ok_or_else(not_found)?;
        if subscription.health.is_enabled() {
            let restarted = restart(deps, subscription, std::slice::from_ref(&stored), |_| None).await?.pop();
            // Only a record that expired since it was read is not restarted.
            return Reply::accepted(restarted.ok_or_else(not_found)?.record);
        }
        let message = stored.message().map_err(|e| ApiError::Internal(Box::new(e)))?;
        let body = stored.record.body.as_bytes();
        // As the retry's turn would find it: `held` (contract 20), else `skipped` if never sent,
        // else `failed` (contract 9).
        let reason = plan::disabled(stored.record.event_type, subscription.while_disabled);
        let not_sent = NotSent { reason, attempts: stored.record.attempts };
        if deps.deliveries.record_not_sent(&message, body, Timestamp::now(), not_sent).await? {
            let record = deps.deliveries.get(&subscription.id, &delivery_id).await?.ok_or_else(not_found)?.record;
            return Reply::accepted(record);
        }
        // Its generation moved on since it was read (a concurrent retry or attempt).
        if !backoff.pause().await {
            return Err(StoreError::Contention.into());
        }
    }
}

/// Starts each delivery's schedule again in its next generation and queues the rounds it
/// restarted (the outbox: on the main lane, or on the retry lane where a turn may still hold
/// the record, contract section 12). With `if_status`, one whose status changed since it was
/// read (a concurrent retry) is left out.
async fn restart(
    deps: &Deps,
    subscription: &Subscription,
    found: &[StoredDelivery],
    if_status: fn(&StoredDelivery) -> Option<DeliveryStatus>,
) -> Result<Vec<StoredDelivery>, ApiError> {
    let spread = Groups::spread_of(subscription, deps.groups);
    let (restarted, failure) = deps.outbox.restart(found, if_status, (subscription, spread), Timestamp::now()).await;
    match failure {
        Some(err) => Err(err.into()),
        None => Ok(restarted),
    }
}

/// Sends a `webhook.ping` to one subscription through the queue, like any event: its
/// record first, then its message. The ping continues the request's trace, if it has one
/// (contract section 19).
async fn ping(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let subscription = own_subscription(deps, &call, id).await?;
    let id = &subscription.id;
    let now = Timestamp::now();
    let trace = TraceContext::of_request(call.request.headers()).unwrap_or_else(TraceContext::start);
    let message = DeliveryMessage::new(&Event::ping(id), call.user_id(), id).traced(trace);
    // Recorded and queued as the fan-out's deliveries are.
    let spread = Groups::spread_of(&subscription, deps.groups);
    let new = plan::new_delivery(message, (&subscription.health, subscription.while_disabled), spread, now);
    let record = deps.outbox.create_one(&new, now).await?;
    Reply::accepted(record)
}

/// Contract section 12: sends the subscription's failed and skipped deliveries of a time
/// window again, at most [`MAX_PER_CALL`] a call, oldest first.
async fn recover(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let body = call.json_object()?;
    let window = RecoverWindow::parse(&body, Timestamp::now()).map_err(ApiError::WebhookInvalidRecoverWindow)?;
    let subscription = own_subscription(deps, &call, id).await?;
    if !subscription.health.is_enabled() {
        return Err(ApiError::WebhookSubscriptionDisabled);
    }
    let statuses = [DeliveryStatus::Failed, DeliveryStatus::Skipped];
    let window = (window.since, window.until);
    let mut found = deps.deliveries.matching(&subscription.id, &statuses, None, window, MAX_PER_CALL).await?;
    let more = found.len() > MAX_PER_CALL as usize;
    found.truncate(MAX_PER_CALL as usize);
    // One that changed since it was read (a manual retry got there) is not counted.
    let recovering = restart(deps, &subscription, &found, |stored| Some(stored.record.status)).await?.len();
    Reply::accepted(json!({"recovering": recovering, "more": more}))
}

/// Contract section 20: sends the matching deliveries of the caller's matching subscriptions
/// again, as a recovery does, at most [`MAX_PER_CALL`] a call, oldest first; with `dryRun`,
/// only counts what a real call would take, through the same selection.
async fn replay(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let body = call.json_object()?;
    let request = ReplayRequest::parse(&body, Timestamp::now()).map_err(ApiError::WebhookInvalidReplay)?;
    let mut subscriptions = deps.webhooks.list(call.user_id()).await?;
    if let Some(ids) = &request.subscription_ids {
        // Every one named must be the caller's, or nothing is replayed.
        if let Some(missing) = ids.iter().find(|id| !subscriptions.iter().any(|s| s.id.as_str() == id.as_str())) {
            return Err(ApiError::WebhookNotFound(missing.clone()));
        }
        subscriptions.retain(|s| ids.iter().any(|id| s.id.as_str() == id.as_str()));
    }
    let window = (request.window.since, request.window.until);
    let reads = subscriptions.iter().map(|subscription| {
        let kinds = request.kinds.as_deref();
        deps.deliveries.matching(&subscription.id, &request.statuses, kinds, window, MAX_PER_CALL)
    });
    let found = futures_util::future::try_join_all(reads).await?.into_iter().flatten().collect();
    let taken = replay::oldest(found, |stored: &StoredDelivery| &stored.record.id);
    let mut by_subscription = serde_json::Map::new();
    let mut total = 0;
    for subscription in &subscriptions {
        let of_it: Vec<StoredDelivery> =
            taken.deliveries.iter().filter(|d| d.record.subscription_id == subscription.id).cloned().collect();
        let count = if request.dry_run {
            of_it.len()
        } else {
            // One that changed since it was read (a manual retry got there) is not counted.
            restart(deps, subscription, &of_it, |stored| Some(stored.record.status)).await?.len()
        };
        total += count;
        by_subscription.insert(subscription.id.to_string(), json!(count));
    }
    if request.dry_run {
        Reply::ok(json!({"matching": total, "more": taken.more, "bySubscription": by_subscription}))
    } else {
        Reply::accepted(json!({"replaying": total, "more": taken.more, "bySubscription": by_subscription}))
    }
}

/// Contract section 20: every `pending` or `held` delivery of the subscription created before
/// the body's `createdBefore` (default now) ends `cancelled`, at most [`MAX_PER_CALL`] a call.
async fn cancel(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let body = call.optional_json_object()?;
    let now = Timestamp::now();
    let before = CancelBefore::parse(body.as_ref(), now).map_err(ApiError::WebhookInvalidCancel)?;
    let subscription = own_subscription(deps, &call, id).await?;
    let mut waiting = deps.deliveries.waiting(&subscription.id, before.0, MAX_PER_CALL).await?;
    let more = waiting.len() > MAX_PER_CALL as usize;
    waiting.truncate(MAX_PER_CALL as usize);
    // One that stopped waiting since it was read (its attempt settled it) is not counted.
    let cancelling = deps.deliveries.cancel(&waiting, now).await?;
    Reply::accepted(json!({"cancelling": cancelling, "more": more}))
}

/// Contract sections 9 and 20: enabled, and what it held released.
async fn enable(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = subscription_query(&call)?;
    let enabled = deps.webhooks.enable(call.user_id(), &subscription_id(id)?).await?;
    let enabled = enabled.ok_or_else(|| ApiError::WebhookNotFound(id.to_owned()))?;
    let released = release(deps, &enabled).await?;
    Reply::ok(EnabledSubscription { subscription: deps.public(&enabled), released })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_is_one_resource_and_each_method_one_operation() {
        let mut paths: Vec<&str> = RESOURCES.iter().map(|resource| resource.path).collect();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), RESOURCES.len(), "a path is listed twice");
        for resource in &RESOURCES {
            let mut methods: Vec<&str> = resource.operations.iter().map(|(method, _, _)| method.as_str()).collect();
            methods.sort_unstable();
            methods.dedup();
            assert_eq!(methods.len(), resource.operations.len(), "{}: a method is listed twice", resource.path);
        }
    }

    #[test]
    fn a_subscription_id_of_another_shape_is_not_found() {
        let generated = SubscriptionId::generate();
        assert_eq!(subscription_id(generated.as_str()).ok(), Some(generated));
        for id in ["whk_nonsense", "alr_01M8BDWP008BW9FC8PBW4Q3DY4", "", "whk_01M8DWVHC0HA1MTS2ZMV8KRM9"] {
            match subscription_id(id) {
                Err(ApiError::WebhookNotFound(echoed)) => assert_eq!(echoed, id),
                other => panic!("{id:?}: {:?}", other.map(|id| id.to_string())),
            }
        }
    }
}
