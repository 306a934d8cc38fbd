//! The integration tests, one binary: each module is one area (docs/contributing.md lists
//! them). They share one DynamoDB Local and one moto, started on first use, and link the AWS
//! SDK once. Tests that signal or pause a process, and the least-privilege report that reads
//! what the whole suite used, are binaries of their own (the files of tests/ beside it/).

mod api_alerts;
mod api_common;
mod api_data_sharing;
mod api_deliveries;
mod api_tools;
mod api_webhooks;
mod delivery_cost;
mod delivery_log;
mod delivery_log_layout;
mod delivery_metrics;
mod deploy_rehearsal;
mod destinations;
mod destinations_api;
mod docs;
mod events;
mod identity_tokens;
mod lanes;
mod lifecycle_health;
mod lifecycle_hold;
mod lifecycle_probe;
mod lifecycle_replay;
mod local_gateway;
mod openapi;
mod operational_events;
mod portal;
mod readme;
mod receivers;
mod sample_events;
mod self_healing;
mod stream_replay;
mod trace_context;
mod webhook_secrets;
