//! `careerctl local` (what `make run` runs): the whole stack in the foreground until Ctrl-C.
//! DynamoDB Local keeps its data under `<local dir>/data/`, and what the delivery queues
//! hold is saved there on Ctrl-C, or when DynamoDB Local dies while the SQS emulator lives,
//! and put back on the next start (queue_snapshot). The sweep runs every
//! [`SWEEP_EVERY`], as the schedule runs it on AWS.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context};
use career_core::clock::Timestamp;
use career_core::config::Settings;
use career_core::store::sealing::Sealer;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::Admin;
use local_aws::emulators::queue_snapshot::QueueSnapshot;
use local_aws::emulators::Installed;
use local_aws::functions::Functions;
use local_aws::gateway;
use local_aws::stack::LocalStack;

/// How often the local stack runs the sweep function (contract section 12).
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// Runs the stack with the API on `127.0.0.1:port`, the tools installed under `local_dir`
/// and its data there, until Ctrl-C (SIGINT).
pub async fn run(port: u16, local_dir: &Path, settings: Settings) -> anyhow::Result<()> {
    let installed = Installed::at(local_dir)?;
    eprintln!("==> starting DynamoDB Local and moto (SQS, KMS and SNS)");
    let data_dir = local_dir.join("data");
    let mut stack = LocalStack::start(&installed, Some(&data_dir), settings).await?;
    let snapshot_path = data_dir.join("queued-deliveries.json");
    restore_queues(&stack, &snapshot_path).await?;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{port} (set PORT to use another port)"))?;
    let functions = Functions::new(&stack.deployment, &stack.clients(), &stack.settings)?;
    let demo_key = prepare_data(&stack).await?;
    let api_url = format!("http://127.0.0.1:{port}");
    let env_path = local_dir.join("env");
    std::fs::write(&env_path, stack.env_file(&api_url, &demo_key))
        .with_context(|| format!("writing {}", env_path.display()))?;
    print_welcome(&stack, &api_url, &demo_key, &env_path)?;
    career_core::telemetry::init();

    let outcome = serve(&mut stack, listener, &functions, data_dir.join("stream-checkpoints.json")).await;
    let _ = std::fs::remove_file(&env_path);
    let saved = save_queues(&stack, &snapshot_path).await;
    drop(stack);
    match (outcome, saved) {
        (Ok(()), saved) => saved,
        // A service died: what the survivor held is saved if it was the SQS emulator.
        (Err(ended), Ok(())) => Err(ended),
        (Err(ended), Err(unsaved)) => Err(anyhow!(
            "{ended:#}; the delivery queues could not be saved ({unsaved:#}): the deliveries they held are \
             put back by the sweep after the next start, and dead-lettered ones can be recovered \
             (POST /api/v1/webhooks/recover)"
        )),
    }
}

/// Puts back what the delivery queues held when the last run stopped, if it saved them.
async fn restore_queues(stack: &LocalStack, snapshot_path: &Path) -> anyhow::Result<()> {
    let Some(saved) = QueueSnapshot::read(snapshot_path)? else { return Ok(()) };
    saved.restore(&stack.sqs, &stack.queues).await?;
    std::fs::remove_file(snapshot_path).with_context(|| format!("removing {}", snapshot_path.display()))?;
    crate::print_line(format_args!(
        "Restored {} queued deliveries from the last run ({}).",
        saved.len(),
        saved.counts()
    ))
}

/// Seals the secrets of local data from before secrets were sealed and arms the probes of
/// subscriptions disabled for failing before probes (before anything is served), and issues
/// the demo key.
async fn prepare_data(stack: &LocalStack) -> anyhow::Result<String> {
    let (clients, settings) = (&stack.clients(), &stack.settings);
    let admin = Admin::new(clients.dynamodb().clone(), settings.tables.clone());
    let sealer = Sealer::new(clients, settings)?;
    let sealed = admin.seal_plain_secrets(&sealer).await?;
    if sealed.sealed != 0 {
        eprintln!("==> sealed the plain-text secrets of {} webhook subscriptions", sealed.sealed);
    }
    let armed = admin.arm_probes(&crate::admin::probe_schedule(settings), Timestamp::now()).await?;
    if armed.armed != 0 {
        eprintln!("==> armed the probes of {} subscriptions disabled for failing before probes", armed.armed);
    }
    Ok(crate::demo::demo_key(&admin).await?.key)
}

/// Says where everything is, and what to try first.
fn print_welcome(stack: &LocalStack, api_url: &str, demo_key: &str, env_path: &Path) -> anyhow::Result<()> {
    crate::print_line(format_args!(
        "Career service is up at {api_url}\n  \
         DynamoDB Local  {}\n  \
         SQS, KMS, SNS   {}\n  \
         Demo API key (user {user}, all six scopes):\n    {demo_key}\n  \
         Try:  curl -H \"Authorization: Bearer {demo_key}\" {api_url}/api/v1/alerts\n  \
         Webhooks portal (signed in with the demo key):  {api_url}/portal#key={demo_key}\n  \
         For careerctl and the AWS CLI:  source {}\n  \
         Events: careerctl profiles update --user {user}   (deliveries retry after about 1 s, 4 s, 20 s, ...)\n\
         Press Ctrl-C to stop. Request and delivery logs follow as JSON lines.",
        stack.dynamodb.endpoint,
        stack.sqs.endpoint,
        env_path.display(),
        user = crate::demo::USER,
    ))
}

/// Serves the API, pumps the streams and the delivery lanes and runs the sweep, until Ctrl-C
/// or until a service ends (an error). The delivery pumps then stop receiving and finish the
/// batches in hand (at most one send timeout), so that nothing is in flight when the queues
/// are saved.
async fn serve(
    stack: &mut LocalStack,
    listener: TcpListener,
    functions: &Functions,
    checkpoints: PathBuf,
) -> anyhow::Result<()> {
    let (stop, stopping) = watch::channel(false);
    let stop_signal = || {
        let mut stopping = stopping.clone();
        async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        }
    };
    let front = async {
        let outcome = tokio::select! {
            served = gateway::serve(listener, functions.api.clone(), gateway::IDLE_TIMEOUT) => served.context("serving the API"),
            () = functions.pump_streams(Some(checkpoints)) => Ok(()),
            ended = stack.service_ended() => Err(anyhow!("{ended}; stopping the local stack")),
            _ = tokio::signal::ctrl_c() => Ok(()),
        };
        eprintln!("==> stopping the local stack (deliveries in progress finish first)");
        let _ = stop.send(true);
        outcome
    };
    let delivering =
        async { tokio::join!(functions.pump_lanes(stop_signal), functions.sweep_every(SWEEP_EVERY, stop_signal())) };
    tokio::join!(front, delivering).0
}

/// Writes what the delivery queues hold to `path`, to be put back on the next start, and
/// says how many it saved.
async fn save_queues(stack: &LocalStack, path: &Path) -> anyhow::Result<()> {
    let snapshot = QueueSnapshot::take(&stack.sqs, &stack.queues).await?;
    if snapshot.is_empty() {
        eprintln!("==> the delivery queues were empty: nothing to save");
        return Ok(());
    }
    snapshot.write(path)?;
    eprintln!("==> saved {} queued deliveries ({}) to {}", snapshot.len(), snapshot.counts(), path.display());
    Ok(())
}
