//! `careerctl`: the admin commands (keys, alerts, profiles, assessments) and the local stack
//! (DynamoDB Local, moto for SQS and KMS, the gateway and the event pumps). Whatever the local
//! stack does differently from Lambda lives here; the functions' code is the same.
//!
//! Errors here are for people: `anyhow` errors with the context of what was being done,
//! printed with their causes on one line (`{:#}`, as `main` does).

pub mod admin;
pub mod demo;
#[cfg(test)]
mod deploy_checks;
pub mod deployment;
pub mod event_sources;
pub mod gateway;
pub mod iam;
pub mod local;
pub mod notifications;
pub mod pumps;
pub mod queue_snapshot;
pub mod resources;
pub mod services;
pub mod stack;
pub mod streams;
pub mod template;

use std::io::Write;

use anyhow::Context;

/// Writes `text` and a newline on stdout. A stdout that cannot be written (a reader that went
/// away, a full disk) is an error the caller reports, where `println!` would panic.
pub fn print_line(text: impl std::fmt::Display) -> anyhow::Result<()> {
    writeln!(std::io::stdout().lock(), "{text}").context("writing to stdout")
}
