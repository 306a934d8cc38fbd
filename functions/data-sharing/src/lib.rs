//! `/api/v1/data-sharing`: read (GET) and update (PUT) the user's data-sharing preferences.

use career_core::aws::api::{ApiError, Call, Front, Reply, Resource};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{ConfigError, Settings, Table};
use career_core::credentials::Scope;
use career_core::preferences::PreferenceUpdate;
use career_core::store::preferences::PreferenceTable;
use lambda_http::http::Method;
use lambda_http::{Body, Request, Response};

pub struct Deps {
    front: Front,
    preferences: PreferenceTable,
}

impl Deps {
    pub fn new(clients: &AwsClients, settings: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            front: Front::new(clients.dynamodb(), settings)?,
            preferences: PreferenceTable::new(
                clients.dynamodb().clone(),
                settings.tables.require([Table::Preferences])?[0],
            ),
        })
    }
}

#[derive(Clone, Copy)]
pub enum Operation {
    Get,
    Update,
}

pub const RESOURCE: Resource<Operation> = Resource {
    path: "/api/v1/data-sharing",
    operations: &[
        (Method::GET, Scope::ReadDataSharing, Operation::Get),
        (Method::PUT, Scope::WriteDataSharing, Operation::Update),
    ],
};

pub async fn handle(deps: &Deps, request: Request) -> Response<Body> {
    deps.front
        .serve(&[RESOURCE], request, |operation, call| async move {
            match operation {
                Operation::Get => Reply::ok(deps.preferences.get(call.user_id()).await?),
                Operation::Update => update(deps, call).await,
            }
        })
        .await
}

async fn update(deps: &Deps, call: Call) -> Result<Reply, ApiError> {
    let update = PreferenceUpdate::parse(&call.json_body()?)?;
    Reply::ok(deps.preferences.update(call.user_id(), &update, Timestamp::now()).await?)
}
