//! `careerctl`: the admin commands (keys, alerts, profiles, assessments) and the local stack
//! (DynamoDB Local, moto for SQS and KMS, the gateway and the event pumps). Whatever the local
//! stack does differently from Lambda lives here; the functions' code is the same.

pub mod admin;
pub mod gateway;
pub mod local;
pub mod pumps;
pub mod queue_snapshot;
pub mod sdk_error;
pub mod services;
pub mod stack;
pub mod tables;
