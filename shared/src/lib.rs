//! Domain of the career alerts, data-sharing and webhooks service, one module per contract
//! concept, and its two adapter folders: `store` (the DynamoDB tables, their streams, the
//! secrets at rest under KMS) and `aws` (the Lambda runtime that starts the functions, the
//! API boundary, the queues, the senders, the operator's topic). Only those two import an
//! AWS, Lambda or HTTP crate (`scripts/import-circles.py` checks it).
//!
//! No module here knows a particular Lambda function: the functions (`functions/*`) wire
//! these modules together. The operators' side shares the same types and tables, so a
//! little surface here serves only `careerctl` and the tests: writing and revoking API keys,
//! the platform's own writes to profiles and assessments (`store::profiles_assessments`), the operators'
//! reads of the webhooks table (`store::webhook_admin`), and the test hooks
//! `aws::runtime::EXTRA_ROOT_CERT_VAR` (behind the `extra-root-cert` feature) and `telemetry::init_writing_to`. The admin commands live in
//! `careerctl/`; the local stack (the emulators, its gateway and pumps) in `local-aws/`.

pub mod alerts;
pub mod auth;
pub mod aws;
pub mod clock;
pub mod config;
pub mod credentials;
pub mod delivery;
pub mod events;
pub mod excerpt;
pub mod ids;
pub mod mac;
pub mod operational;
pub mod pagination;
pub mod preferences;
pub mod random;
pub mod ratelimit;
pub mod store;
pub mod telemetry;
mod text;
pub mod trace;
pub mod webhooks;
