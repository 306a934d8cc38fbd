//! `/api/v1/webhooks`: list (GET), create (POST) and delete (DELETE) webhook subscriptions.

use career_core::api::{ApiError, Call, Front, Reply, Resource};
use career_core::auth::Scope;
use career_core::config::{ConfigError, Settings};
use career_core::store::webhooks::{Created, StoredSubscription, WebhookTable};
use career_core::webhooks::{new_secret, CreatedSubscription, EventKinds, WebhookUrl, MAX_SUBSCRIPTIONS_PER_USER};
use career_core::{clock, ids};
use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};
use serde_json::{json, Value};

pub struct Deps {
    front: Front,
    webhooks: WebhookTable,
    allow_insecure_urls: bool,
}

impl Deps {
    pub fn new(dynamodb: &aws_sdk_dynamodb::Client, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            front: Front::new(dynamodb, settings),
            webhooks: WebhookTable::new(dynamodb.clone(), &settings.tables.webhooks),
            allow_insecure_urls: settings.allow_insecure_webhook_urls,
        })
    }
}

#[derive(Clone, Copy)]
pub enum Operation {
    List,
    Create,
    Delete,
}

pub const RESOURCE: Resource<Operation> = Resource {
    path: "/api/v1/webhooks",
    operations: &[
        (Method::GET, Scope::ReadWebhooks, Operation::List),
        (Method::POST, Scope::WriteWebhooks, Operation::Create),
        (Method::DELETE, Scope::WriteWebhooks, Operation::Delete),
    ],
};

pub async fn handle(deps: &Deps, request: Request) -> Response<Body> {
    deps.front
        .serve(&RESOURCE, request, |operation, call| async move {
            match operation {
                Operation::List => list(deps, call).await,
                Operation::Create => create(deps, call).await,
                Operation::Delete => delete(deps, call).await,
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
    let stored = StoredSubscription {
        user_id: call.user_id().to_owned(),
        subscription_id: ids::new_id(ids::SUBSCRIPTION),
        url: url.as_str().to_owned(),
        events: events.kinds().to_vec(),
        secret: new_secret(),
        created_at: clock::rfc3339(clock::now()),
    };
    match deps.webhooks.insert(&stored, MAX_SUBSCRIPTIONS_PER_USER).await? {
        Created::Yes => Reply::created(CreatedSubscription { subscription: stored.public(), secret: stored.secret }),
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
