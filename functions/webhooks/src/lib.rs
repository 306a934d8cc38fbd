//! `/api/v1/webhooks`: list (GET), create (POST) and delete (DELETE) webhook subscriptions,
//! and `/api/v1/webhooks/rotate-secret` (POST). Each path is a resource below; an operation
//! is one line there and one arm in `handle`.

use career_core::api::{ApiError, Call, Front, Reply, Resource};
use career_core::config::{ConfigError, Settings};
use career_core::credentials::Scope;
use career_core::rotation::{GracePeriod, RotatedSubscription, SigningSecrets};
use career_core::sealing::Sealer;
use career_core::store::webhooks::{Created, Replaced, StoredSecrets, StoredSubscription, WebhookTable};
use career_core::store::StoreError;
use career_core::webhooks::{CreatedSubscription, EventKinds, WebhookSecret, WebhookUrl, MAX_SUBSCRIPTIONS_PER_USER};
use career_core::{clock, ids};
use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};
use serde_json::{json, Value};

/// How often a rotation that met a concurrent one is tried again before giving up.
const ROTATION_ATTEMPTS: usize = 5;

pub struct Deps {
    front: Front,
    webhooks: WebhookTable,
    sealer: Sealer,
    allow_insecure_urls: bool,
}

impl Deps {
    pub fn new(
        dynamodb: &aws_sdk_dynamodb::Client,
        kms: &aws_sdk_kms::Client,
        settings: &Settings,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            front: Front::new(dynamodb, settings),
            webhooks: WebhookTable::new(dynamodb.clone(), &settings.tables.webhooks),
            sealer: Sealer::new(kms, dynamodb, settings)?,
            allow_insecure_urls: settings.allow_insecure_webhook_urls,
        })
    }
}

#[derive(Clone, Copy)]
pub enum Operation {
    List,
    Create,
    Delete,
    RotateSecret,
}

pub const RESOURCES: [Resource<Operation>; 2] = [
    Resource {
        path: "/api/v1/webhooks",
        operations: &[
            (Method::GET, Scope::ReadWebhooks, Operation::List),
            (Method::POST, Scope::WriteWebhooks, Operation::Create),
            (Method::DELETE, Scope::WriteWebhooks, Operation::Delete),
        ],
    },
    Resource {
        path: "/api/v1/webhooks/rotate-secret",
        operations: &[(Method::POST, Scope::WriteWebhooks, Operation::RotateSecret)],
    },
];

/// True for the paths this function serves (API Gateway sends it `/api/v1/webhooks` and
/// everything below).
pub fn serves(path: &str) -> bool {
    let root = RESOURCES[0].path;
    path.strip_prefix(root).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

pub async fn handle(deps: &Deps, request: Request) -> Response<Body> {
    deps.front
        .serve(&RESOURCES, request, |operation, call| async move {
            match operation {
                Operation::List => list(deps, call).await,
                Operation::Create => create(deps, call).await,
                Operation::Delete => delete(deps, call).await,
                Operation::RotateSecret => rotate_secret(deps, call).await,
            }
        })
        .await
}

async fn list(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let stored = deps.webhooks.list(call.user_id()).await?;
    let webhooks: Vec<_> = stored.iter().map(StoredSubscription::public).collect();
    Reply::ok(json!({"webhooks": webhooks}))
}

async fn create(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let body = call.json_object()?;
    let present = |name: &str| body.get(name).filter(|value| !value.is_null());
    let (Some(url), Some(events)) = (present("url"), present("events")) else {
        return Err(ApiError::WebhookMissingRequiredFields);
    };
    let url = WebhookUrl::parse(url, deps.allow_insecure_urls).map_err(ApiError::WebhookInvalidUrl)?;
    let events = EventKinds::parse(events).map_err(ApiError::WebhookInvalidEvents)?;
    let (user_id, subscription_id) = (call.user_id().to_owned(), ids::new_id(ids::SUBSCRIPTION));
    let secret = WebhookSecret::generate();
    let sealed = deps.sealer.seal(&user_id, &subscription_id, &SigningSecrets::new(secret.clone())).await?;
    let stored = StoredSubscription {
        user_id,
        subscription_id,
        url: url.as_str().to_owned(),
        events: events.kinds().to_vec(),
        secrets: StoredSecrets::Sealed { sealed_secrets: sealed },
        created_at: clock::rfc3339(clock::now()),
        failing_since: None,
    };
    match deps.webhooks.insert(&stored, MAX_SUBSCRIPTIONS_PER_USER).await? {
        Created::Yes => Reply::created(CreatedSubscription { subscription: stored.public(), secret }),
        Created::LimitReached => Err(ApiError::WebhookLimitExceeded),
    }
}

async fn delete(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = call.query("id").ok_or(ApiError::WebhookMissingSubscriptionId)?;
    if !deps.webhooks.delete(call.user_id(), id).await? {
        return Err(ApiError::WebhookNotFound(id.to_owned()));
    }
    Reply::ok(json!({"id": id, "deleted": Value::Bool(true)}))
}

/// Contract section 10: a new secret, the current one kept for the grace period, stored in
/// one conditional write (tried again if a concurrent rotation got there first).
async fn rotate_secret(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = call.query("id").ok_or(ApiError::WebhookMissingSubscriptionId)?;
    let body = call.optional_json_object()?;
    let grace = GracePeriod::parse(body.as_ref().and_then(|body| body.get("gracePeriodSeconds")))
        .map_err(ApiError::WebhookInvalidGracePeriod)?;
    let not_found = || ApiError::WebhookNotFound(id.to_owned());
    if !ids::has_shape(id, ids::SUBSCRIPTION) {
        return Err(not_found());
    }
    let next = WebhookSecret::generate();
    for _ in 0..ROTATION_ATTEMPTS {
        let stored = deps.webhooks.get(call.user_id(), id).await?.ok_or_else(not_found)?;
        let now = clock::now_millis() / 1000;
        let rotated = deps.sealer.open(&stored).await?.rotated(next.clone(), now, grace);
        let sealed = deps.sealer.seal(&stored.user_id, &stored.subscription_id, &rotated).await?;
        if let Replaced::Yes(updated) = deps.webhooks.replace_secrets(&stored, &sealed).await? {
            let expires_at = rotated.previous.map(|previous| clock::rfc3339_from_millis(previous.expires_at * 1000));
            return Reply::ok(RotatedSubscription {
                subscription: updated.public(),
                secret: next.into(),
                previous_secret_expires_at: expires_at,
            });
        }
    }
    Err(StoreError::Contention.into())
}
