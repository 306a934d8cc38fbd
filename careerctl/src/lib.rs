//! `careerctl`: the operator's commands (keys, alerts, profiles, assessments, the demo, the
//! notifications, stream replay) and `careerctl local`, which starts the local stack through
//! the `local-aws` crate (the emulation of AWS) and serves the API on it.
//!
//! Errors here are for people: `anyhow` errors with the context of what was being done,
//! printed with their causes on one line (`{:#}`, as `main` does).

pub mod admin;
pub mod aws_receiver;
pub mod demo;
pub mod local;
pub mod notifications;
pub mod streams;

use std::io::Write;

use anyhow::Context;

/// Writes `text` and a newline on stdout. A stdout that cannot be written (a reader that went
/// away, a full disk) is an error the caller reports, where `println!` would panic.
pub fn print_line(text: impl std::fmt::Display) -> anyhow::Result<()> {
    writeln!(std::io::stdout().lock(), "{text}").context("writing to stdout")
}
