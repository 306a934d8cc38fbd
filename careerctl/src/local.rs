//! `careerctl local` (what `make run` runs): the whole stack in the foreground until Ctrl-C.
//! DynamoDB Local keeps its data under `<local dir>/data/`, and what the delivery queues
//! hold is saved there on Ctrl-C, or when DynamoDB Local dies while the SQS emulator lives,
//! and put back on the next start (queue_snapshot). The sweep runs every
//! [`SWEEP_EVERY`], as the schedule runs it on AWS.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use career_core::config::{SecretSetting, Settings};
use career_core::sealing::Sealer;
use tokio::sync::watch;

use crate::admin::Admin;
use crate::gateway::{self, ApiFunctions};
use crate::pumps::{self, BATCHES_PER_QUEUE};
use crate::queue_snapshot::QueueSnapshot;
use crate::services::Installed;
use crate::stack::LocalStack;

/// How often the local stack runs the sweep function (contract section 12).
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The local stack's settings: the environment, with the local defaults of contract
/// section 8 where a variable is not set.
pub fn settings_from_env() -> Result<Settings, String> {
    let mut settings = Settings::from_env().map_err(|e| e.to_string())?;
    let unset = |name: &str| std::env::var_os(name).is_none();
    if unset("ALLOW_INSECURE_WEBHOOK_URLS") {
        settings.allow_insecure_webhook_urls = true;
    }
    if unset("DELIVERY_RETRY_BASE_SECONDS") {
        settings.retry_base = Duration::from_secs(1);
    }
    if settings.cursor_signing_key.is_none() {
        settings.cursor_signing_key = Some(SecretSetting::new(career_core::secrets::random_token("cursor_")));
    }
    Ok(settings)
}

/// Runs the stack with the API on `127.0.0.1:port`, the tools installed under `local_dir`
/// and its data there, until Ctrl-C (SIGINT).
pub async fn run(port: u16, local_dir: &Path, settings: Settings) -> Result<(), String> {
    let installed = Installed::at(local_dir)?;
    eprintln!("==> starting DynamoDB Local and moto (SQS and KMS)");
    let data_dir = local_dir.join("data");
    let mut stack = LocalStack::start(&installed, Some(&data_dir), settings).await?;
    let snapshot_path = data_dir.join("queued-deliveries.json");
    if let Some(saved) = QueueSnapshot::read(&snapshot_path)? {
        saved.restore(&stack.sqs, &stack.queues).await?;
        std::fs::remove_file(&snapshot_path).map_err(|e| format!("removing {}: {e}", snapshot_path.display()))?;
        crate::print_line(format_args!(
            "Restored {} queued deliveries from the last run ({}).",
            saved.len(),
            saved.counts()
        ))?;
    }
    let clients = stack.clients();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e} (set PORT to use another port)"))?;
    let functions = Arc::new(ApiFunctions::new(&clients, &stack.settings).map_err(|e| e.to_string())?);
    let fanout = career_fanout::Deps::new(&clients, &stack.settings).map_err(|e| e.to_string())?;
    let deliver = career_deliver::Deps::new(&clients, &stack.settings).map_err(|e| e.to_string())?;
    let sweep = career_sweep::Deps::new(&clients, &stack.settings).map_err(|e| e.to_string())?;
    let stream_tables = vec![stack.settings.tables.profiles.clone(), stack.settings.tables.assessments.clone()];
    let checkpoints = data_dir.join("stream-checkpoints.json");
    let admin = Admin::new(clients.dynamodb().clone(), stack.settings.tables.clone());
    // Local data from before secrets were sealed: seal it before anything is served.
    let sealer = Sealer::new(clients.kms(), clients.dynamodb(), &stack.settings).map_err(|e| e.to_string())?;
    let sealed = admin.seal_plain_secrets(&sealer).await?;
    if sealed.sealed != 0 {
        eprintln!("==> sealed the plain-text secrets of {} webhook subscriptions", sealed.sealed);
    }
    let demo = crate::demo::demo_key(&admin).await?;
    let demo_key = demo.key;
    let api_url = format!("http://127.0.0.1:{port}");
    let env_path = local_dir.join("env");
    std::fs::write(&env_path, stack.env_file(&api_url, &demo_key))
        .map_err(|e| format!("writing {}: {e}", env_path.display()))?;

    crate::print_line(format_args!(
        "Career service is up at {api_url}\n  \
         DynamoDB Local  {}\n  \
         SQS and KMS     {}\n  \
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
    ))?;
    career_core::telemetry::init();

    // The delivery pumps stop receiving on Ctrl-C and finish the batches in hand (at most
    // one send timeout), so that nothing is in flight when the queues are saved.
    let (stop, stopping) = watch::channel(false);
    let stop_signal = || {
        let mut stopping = stopping.clone();
        async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        }
    };
    let (streams, lanes) = (stack.streams_client(), stack.queues.clone());
    let front = async {
        let outcome = tokio::select! {
            served = gateway::serve(listener, functions, gateway::IDLE_TIMEOUT) => served.map_err(|e| format!("serving the API: {e}")),
            () = pumps::run_stream_pump(clients.dynamodb().clone(), streams, stream_tables, &fanout, Some(checkpoints)) => Ok(()),
            ended = stack.service_ended() => Err(format!("{ended}; stopping the local stack")),
            _ = tokio::signal::ctrl_c() => Ok(()),
        };
        eprintln!("==> stopping the local stack (deliveries in progress finish first)");
        let _ = stop.send(true);
        outcome
    };
    let delivering = async {
        let lane = |url: &str| {
            pumps::run_queue_pump(clients.sqs().clone(), url.to_owned(), &deliver, BATCHES_PER_QUEUE, stop_signal())
        };
        tokio::join!(lane(&lanes.delivery), lane(&lanes.retry), pumps::run_sweeps(&sweep, SWEEP_EVERY, stop_signal()))
    };
    let (outcome, _) = tokio::join!(front, delivering);
    let _ = std::fs::remove_file(&env_path);
    let saved = save_queues(&stack, &snapshot_path).await;
    drop(stack);
    match (outcome, saved) {
        (Ok(()), saved) => saved,
        // A service died: what the survivor held is saved if it was the SQS emulator.
        (Err(ended), Ok(())) => Err(ended),
        (Err(ended), Err(unsaved)) => Err(format!(
            "{ended}; the delivery queues could not be saved ({unsaved}): the deliveries they held are \
             put back by the sweep after the next start, and dead-lettered ones can be recovered \
             (POST /api/v1/webhooks/recover)"
        )),
    }
}

/// Writes what the delivery queues hold to `path`, to be put back on the next start, and
/// says how many it saved.
async fn save_queues(stack: &LocalStack, path: &Path) -> Result<(), String> {
    let snapshot = QueueSnapshot::take(&stack.sqs, &stack.queues).await?;
    if snapshot.is_empty() {
        eprintln!("==> the delivery queues were empty: nothing to save");
        return Ok(());
    }
    snapshot.write(path)?;
    eprintln!("==> saved {} queued deliveries ({}) to {}", snapshot.len(), snapshot.counts(), path.display());
    Ok(())
}
