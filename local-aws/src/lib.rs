//! `local-aws`: the emulation of AWS the local stack runs the functions on. It reads
//! template.yaml (template, the career-template crate), creates what it declares (resources), evaluates the functions'
//! IAM roles on every call (iam), throttles each partition key of DynamoDB past its quota
//! when it runs as a scale model (throttling), plays Lambda's event source mappings (event_sources and
//! their pumps) and the HTTP API (gateway), on which it runs the functions (functions), and starts DynamoDB Local and moto (emulators), where a receiver's own AWS account lives
//! beside the deployment's (receiver).
//! It emulates only what AWS does: whatever the local stack does differently from Lambda
//! lives here; the functions' code is the same. `careerctl local` starts it through
//! [`stack::LocalStack`], and so do the integration tests.
//!
//! Errors here are for people: `anyhow` errors with the context of what was being done.

#[cfg(test)]
mod deploy_checks;
pub mod deployment;
pub mod emulators;
pub mod event_sources;
pub mod functions;
pub mod gateway;
pub mod iam;
pub mod identity_token;
pub mod receiver;
pub mod resources;
pub mod stack;
/// template.yaml as the stack reads it: its own crate, which careerctl shares without the emulator.
pub use career_template as template;
pub mod throttling;
