//! `/api/v1/alerts`: list alerts (GET) and set or clear their read and dismissed flags (PATCH).

use career_core::alerts::{query_flag, AlertAction, ListFilter};
use career_core::aws::api::{ApiError, Call, Front, Reply, Resource};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table};
use career_core::credentials::Scope;
use career_core::ids::AlertId;
use career_core::pagination::{page_size, CursorKey};
use career_core::store::alerts::AlertTable;
use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};
use serde_json::{json, Value};

pub struct Deps {
    front: Front,
    alerts: AlertTable,
    cursors: CursorKey,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            front: Front::new(clients.dynamodb(), settings)?,
            alerts: AlertTable::new(clients.dynamodb().clone(), settings.tables.require([Table::Alerts])?[0]),
            cursors: CursorKey::new(settings.require_cursor_key()?),
        })
    }
}

#[derive(Clone, Copy)]
pub enum Operation {
    List,
    Mark,
}

pub const RESOURCE: Resource<Operation> = Resource {
    path: "/api/v1/alerts",
    operations: &[
        (Method::GET, Scope::ReadAlerts, Operation::List),
        (Method::PATCH, Scope::WriteAlerts, Operation::Mark),
    ],
};

pub async fn handle(deps: &Deps, request: Request) -> Response<Body> {
    deps.front
        .serve(&[RESOURCE], request, |operation, call| async move {
            match operation {
                Operation::List => list(deps, call).await,
                Operation::Mark => mark(deps, call).await,
            }
        })
        .await
}

async fn list(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let user_id = call.user_id();
    let filter = ListFilter::new(query_flag(call.query("includeRead")), query_flag(call.query("includeDismissed")));
    let limit = page_size(call.query("limit"));
    let after = match call.query("cursor") {
        Some(cursor) => Some(
            deps.cursors.open(user_id, filter.name(), cursor, AlertId::parse).map_err(|_| ApiError::InvalidCursor)?,
        ),
        None => None,
    };
    let page = deps.alerts.list(user_id, filter, limit, after.as_ref()).await?;
    let next_cursor = page.last_id_if_more.map(|id| deps.cursors.seal(user_id, filter.name(), &id));
    Reply::ok(json!({"alerts": page.alerts, "nextCursor": next_cursor}))
}

async fn mark(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let id = call.query("id").ok_or(ApiError::AlertMissingId)?;
    let body = call.json_object()?;
    let action =
        AlertAction::from_json(body.get("action").unwrap_or(&Value::Null)).map_err(|_| ApiError::AlertInvalidAction)?;
    let not_found = || ApiError::AlertNotFound(id.to_owned());
    let id = AlertId::parse(id).ok_or_else(not_found)?;
    let alert = deps.alerts.apply(call.user_id(), &id, action, Timestamp::now()).await?.ok_or_else(not_found)?;
    Reply::ok(alert)
}
