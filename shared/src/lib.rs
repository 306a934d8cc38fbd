//! Domain of the career alerts, data-sharing and webhooks service.
//!
//! Nothing here knows about a particular Lambda function, the local stack or the CLI:
//! the functions wire these modules together, one module per contract section.

pub mod alerts;
pub mod api;
pub mod auth;
pub mod aws;
pub mod clock;
pub mod config;
pub mod credentials;
pub mod delivery;
pub mod event_catalog;
pub mod events;
pub mod excerpt;
pub mod ids;
pub mod netguard;
pub mod pagination;
pub mod preferences;
pub mod queue;
pub mod ratelimit;
pub mod rotation;
pub mod runtime;
pub mod sealing;
pub mod secrets;
pub mod signing;
pub mod store;
pub mod telemetry;
mod text;
pub mod webhooks;
