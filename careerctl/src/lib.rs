//! `careerctl`: the operator's commands (keys, alerts, profiles, assessments, the demo, the
//! notifications, stream replay) and `careerctl local`, which starts the local stack through
//! the `local-aws` crate (the emulation of AWS) and serves the API on it. The local stack, and
//! the demo's receivers that live in it, come with the `local` feature (on by default); an
//! operator's build against AWS turns it off (`--no-default-features`) and links no emulator.
//!
//! Errors here are for people: `anyhow` errors with the context of what was being done,
//! printed with their causes on one line (`{:#}`, as `main` does).

pub mod admin;
#[cfg(feature = "local")]
pub mod aws_receiver;
pub mod demo;
#[cfg(feature = "local")]
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
