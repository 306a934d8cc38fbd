//! The service's six functions on a deployed stack, wired as the template wires them on AWS:
//! the API's three behind the gateway, the fan-out on its streams, the delivery function on
//! each lane and the sweep on its schedules. Each is one instance acting as its role, with the
//! environment the template gives it. `careerctl local` runs them, and so do the tests'
//! pipelines.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use career_core::aws::AwsClients;
use career_core::config::Settings;

use crate::deployment::Deployment;
use crate::event_sources::pumps::{run_queue_pump, run_stream_pump, run_sweeps};
use crate::event_sources::{QueueSource, StreamSource};
use crate::gateway::ApiFunctions;
use crate::template::function;

pub struct Functions {
    /// What the gateway serves.
    pub api: Arc<ApiFunctions>,
    fanout: (AwsClients, career_fanout::Deps),
    /// The fan-out's stream sources.
    pub streams: Vec<StreamSource>,
    deliver: (AwsClients, career_deliver::Deps),
    /// The delivery function's queue sources: the lanes.
    lanes: Vec<QueueSource>,
    sweep: career_sweep::Deps,
    /// The input of each of the sweep's schedules, and its timeout.
    sweep_schedules: Vec<serde_json::Value>,
    sweep_timeout: Duration,
}

impl Functions {
    /// The functions of `deployment` on `clients`, on a stack whose settings are `local`.
    pub fn new(deployment: &Deployment, clients: &AwsClients, local: &Settings) -> anyhow::Result<Self> {
        let instance = |function| deployment.instance(function, clients, local);
        let (fanout, fanout_settings) = instance(function::FANOUT)?;
        let (deliver, deliver_settings) = instance(function::DELIVER)?;
        let (sweep, sweep_settings) = instance(function::SWEEP)?;
        Ok(Functions {
            api: Arc::new(ApiFunctions::new(deployment, clients, local)?),
            fanout: (fanout.clone(), career_fanout::Deps::new(&fanout, &fanout_settings)?),
            streams: deployment.stream_sources(function::FANOUT)?,
            deliver: (deliver.clone(), career_deliver::Deps::new(&deliver, &deliver_settings)?),
            lanes: deployment.queue_sources(function::DELIVER)?,
            sweep: career_sweep::Deps::new(&sweep, &sweep_settings)?,
            sweep_schedules: deployment.template.schedule_inputs(function::SWEEP)?,
            sweep_timeout: deployment.template.function_timeout(function::SWEEP)?,
        })
    }

    /// The fan-out on its streams, each shard's place kept in `checkpoints` (if given),
    /// until the future is dropped.
    pub async fn pump_streams(&self, checkpoints: Option<PathBuf>) {
        let (clients, fanout) = &self.fanout;
        run_stream_pump(clients.clone(), self.streams.clone(), fanout, checkpoints).await
    }

    /// The delivery function on each lane until `stop` (called once a lane) resolves: each
    /// lane's pump then finishes the batches in hand.
    pub async fn pump_lanes<Stop: Future<Output = ()>>(&self, stop: impl Fn() -> Stop) {
        let (clients, deliver) = &self.deliver;
        let lanes = self.lanes.iter().map(|lane| run_queue_pump(clients.sqs().clone(), lane.clone(), deliver, stop()));
        futures_util::future::join_all(lanes).await;
    }

    /// The sweep on each of its schedules every `every` (on AWS, the template's rate), until
    /// `stop` resolves.
    pub async fn sweep_every(&self, every: Duration, stop: impl Future<Output = ()>) {
        run_sweeps(&self.sweep, self.sweep_schedules.clone(), every, self.sweep_timeout, stop).await
    }
}
