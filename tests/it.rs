//! The integration tests, one binary: each module is one area (docs/contributing.md lists
//! them). They share one DynamoDB Local and one moto, started on first use, and link the AWS
//! SDK once. Tests that signal or pause a process, and the least-privilege report that reads
//! what the whole suite used, are binaries of their own (Cargo.toml's [[test]] entries).

#[path = "api_alerts.rs"]
mod api_alerts;
#[path = "api_common.rs"]
mod api_common;
#[path = "api_data_sharing.rs"]
mod api_data_sharing;
#[path = "api_deliveries.rs"]
mod api_deliveries;
#[path = "api_tools.rs"]
mod api_tools;
#[path = "api_webhooks.rs"]
mod api_webhooks;
#[path = "delivery_log.rs"]
mod delivery_log;
#[path = "delivery_log_layout.rs"]
mod delivery_log_layout;
#[path = "deploy_rehearsal.rs"]
mod deploy_rehearsal;
#[path = "destinations.rs"]
mod destinations;
#[path = "destinations_api.rs"]
mod destinations_api;
#[path = "docs.rs"]
mod docs;
#[path = "events.rs"]
mod events;
#[path = "lanes.rs"]
mod lanes;
#[path = "local_gateway.rs"]
mod local_gateway;
#[path = "openapi.rs"]
mod openapi;
#[path = "operational_events.rs"]
mod operational_events;
#[path = "portal.rs"]
mod portal;
#[path = "readme.rs"]
mod readme;
#[path = "receivers.rs"]
mod receivers;
#[path = "sample_events.rs"]
mod sample_events;
#[path = "self_healing.rs"]
mod self_healing;
#[path = "stream_replay.rs"]
mod stream_replay;
#[path = "trace_context.rs"]
mod trace_context;
#[path = "webhook_secrets.rs"]
mod webhook_secrets;
