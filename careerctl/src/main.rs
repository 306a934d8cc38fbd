//! `careerctl`: admin commands and the local stack. Every admin command prints one JSON
//! object on stdout, and on failure a message on stderr and a non-zero exit status.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use aws_config::BehaviorVersion;
use career_core::alerts::{Category, Severity};
use career_core::auth::Scopes;
use career_core::config::{Settings, TableNames};
use career_core::delivery::log::DeliveryStatus;
use careerctl::admin::{self, Admin, NewAlert};
use careerctl::gateway::{self, ApiFunctions};
use careerctl::pumps;
use careerctl::services::Installed;
use careerctl::stack::LocalStack;
use clap::{Parser, Subcommand};

/// Admin CLI and local stack of the career alerts, data-sharing and webhooks service.
///
/// Uses the standard AWS configuration chain (AWS_REGION, credentials, AWS_ENDPOINT_URL,
/// AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS) and the table names of the functions'
/// environment variables (KEYS_TABLE, ALERTS_TABLE, ...), so the same commands work against
/// the local stack (`source .local/env`) and a real AWS account.
#[derive(Parser)]
#[command(name = "careerctl", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Issue and revoke API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Create alerts, as the platform's other systems do.
    #[command(subcommand)]
    Alerts(AlertsCommand),
    /// Change profiles, which emits `profile.updated` events.
    #[command(subcommand)]
    Profiles(ProfilesCommand),
    /// Complete assessments, which emits `assessment.completed` events.
    #[command(subcommand)]
    Assessments(AssessmentsCommand),
    /// Read a subscription's delivery log; move dead-lettered deliveries back to be sent.
    #[command(subcommand)]
    Deliveries(DeliveriesCommand),
    /// Create the service's DynamoDB tables (those that do not exist yet).
    #[command(subcommand)]
    Tables(TablesCommand),
    /// Run the whole local stack in the foreground (what `make run` does); Ctrl-C stops it.
    Local(LocalArgs),
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Issue a key for a user; prints {"key", "userId", "scopes"}. The key is shown only here.
    Create {
        /// The user the key acts for.
        #[arg(long)]
        user: String,
        /// Comma-separated scopes: read:alerts, write:alerts, read:data_sharing,
        /// write:data_sharing, read:webhooks, write:webhooks.
        #[arg(long)]
        scopes: String,
        /// A note for people, stored with the key.
        #[arg(long)]
        label: Option<String>,
    },
    /// Revoke a key; prints {"revoked": true}. Running functions stop accepting it within 60 s.
    Revoke {
        #[arg(long)]
        key: String,
    },
}

#[derive(Subcommand)]
enum AlertsCommand {
    /// Create an unread alert for a user; prints the alert object.
    Create {
        #[arg(long)]
        user: String,
        #[arg(long)]
        title: String,
        #[arg(long, default_value = "")]
        message: String,
        /// career_health or risk_signal.
        #[arg(long, default_value = "career_health", value_parser = Category::parse)]
        category: Category,
        /// info, warning or critical.
        #[arg(long, default_value = "info", value_parser = Severity::parse)]
        severity: Severity,
    },
}

#[derive(Subcommand)]
enum ProfilesCommand {
    /// Change the user's profile (creating it on first use); prints {"userId", "profileId"}.
    Update {
        #[arg(long)]
        user: String,
    },
}

#[derive(Subcommand)]
enum AssessmentsCommand {
    /// Mark an assessment completed (a new one unless --assessment is given); prints
    /// {"userId", "assessmentId"}.
    Complete {
        #[arg(long)]
        user: String,
        #[arg(long)]
        assessment: Option<String>,
    },
}

#[derive(Subcommand)]
enum DeliveriesCommand {
    /// A subscription's deliveries, newest first; prints {"userId", "subscriptionId",
    /// "deliveries": [...], "nextAfter"} (pass nextAfter as --after for the next page).
    List {
        #[arg(long)]
        subscription: String,
        /// Only deliveries in this state.
        #[arg(long, value_parser = parse_status)]
        status: Option<DeliveryStatus>,
        /// How many, 1-100.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
        /// The delivery id after which to continue (a previous nextAfter).
        #[arg(long)]
        after: Option<String>,
    },
    /// Move every message of the dead-letter queue back to the delivery queue, where each
    /// starts the retry schedule again; prints {"moved": n}. Use it once a receiver is back
    /// after a long outage.
    Redrive {
        /// The dead-letter queue's URL.
        #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
        from: String,
        /// The delivery queue's URL.
        #[arg(long, env = "DELIVERY_QUEUE_URL")]
        to: String,
    },
}

fn parse_status(text: &str) -> Result<DeliveryStatus, String> {
    DeliveryStatus::parse(text).ok_or_else(|| format!("unknown status '{text}' (pending, succeeded, failed, skipped)"))
}

#[derive(Subcommand)]
enum TablesCommand {
    /// Create every table that is missing; prints {"created": [...]}.
    Create,
}

#[derive(clap::Args)]
struct LocalArgs {
    /// Port of the local API.
    #[arg(long, env = "PORT", default_value_t = 3000)]
    port: u16,
    /// Where scripts/install-local-deps.sh installed DynamoDB Local and moto, and where
    /// the stack keeps its data and writes `env`.
    #[arg(long, env = "CAREER_LOCAL_DIR", default_value = ".local")]
    local_dir: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Local(args) => run_local(args).await,
        command => admin_command(command).await.map(|json| println!("{json}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("careerctl: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn admin_command(command: Command) -> Result<serde_json::Value, String> {
    let sdk = aws_config::load_defaults(BehaviorVersion::latest()).await;
    let admin = Admin::new(aws_sdk_dynamodb::Client::new(&sdk), TableNames::from_env());
    match command {
        Command::Keys(KeysCommand::Create { user, scopes, label }) => {
            admin.create_key(&user, Scopes::parse_list(&scopes)?, label).await
        }
        Command::Keys(KeysCommand::Revoke { key }) => admin.revoke_key(&key).await,
        Command::Alerts(AlertsCommand::Create { user, title, message, category, severity }) => {
            admin.create_alert(&user, NewAlert { title, message, category, severity }).await
        }
        Command::Profiles(ProfilesCommand::Update { user }) => admin.update_profile(&user).await,
        Command::Assessments(AssessmentsCommand::Complete { user, assessment }) => {
            admin.complete_assessment(&user, assessment).await
        }
        Command::Deliveries(DeliveriesCommand::List { subscription, status, limit, after }) => {
            admin.list_deliveries(&subscription, status, limit, after.as_deref()).await
        }
        Command::Deliveries(DeliveriesCommand::Redrive { from, to }) => {
            admin::redrive(&aws_sdk_sqs::Client::new(&sdk), &from, &to).await
        }
        Command::Tables(TablesCommand::Create) => admin.create_tables().await,
        Command::Local(_) => unreachable!("handled in main"),
    }
}

/// The local stack's settings: the environment, with the local defaults of contract
/// section 8 where a variable is not set.
fn local_settings() -> Result<Settings, String> {
    let mut settings = Settings::from_env().map_err(|e| e.to_string())?;
    let unset = |name: &str| std::env::var_os(name).is_none();
    if unset("ALLOW_INSECURE_WEBHOOK_URLS") {
        settings.allow_insecure_webhook_urls = true;
    }
    if unset("DELIVERY_RETRY_BASE_SECONDS") {
        settings.retry_base = std::time::Duration::from_secs(1);
    }
    if settings.cursor_signing_key.is_none() {
        settings.cursor_signing_key = Some(career_core::secrets::random_token("cursor_"));
    }
    Ok(settings)
}

async fn run_local(args: LocalArgs) -> Result<(), String> {
    let installed = Installed::at(&args.local_dir)?;
    let settings = local_settings()?;
    eprintln!("==> starting DynamoDB Local and the SQS emulator");
    let data_dir = args.local_dir.join("data/dynamodb");
    let stack = LocalStack::start(&installed, Some(&data_dir), settings).await?;
    let dynamodb = stack.dynamodb_client();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e} (set PORT to use another port)", args.port))?;
    let sqs = stack.sqs_client();
    let functions = Arc::new(ApiFunctions::new(&dynamodb, &sqs, &stack.settings).map_err(|e| e.to_string())?);
    let fanout = career_fanout::Deps::new(&dynamodb, &sqs, &stack.settings).map_err(|e| e.to_string())?;
    let deliver = career_deliver::Deps::new(&dynamodb, &sqs, &stack.settings).map_err(|e| e.to_string())?;
    let stream_tables = vec![stack.settings.tables.profiles.clone(), stack.settings.tables.assessments.clone()];
    let checkpoints = args.local_dir.join("data/stream-checkpoints.json");
    let admin = Admin::new(dynamodb.clone(), stack.settings.tables.clone());
    let demo = admin.create_key("demo-user", Scopes::all(), Some("make run demo key".into())).await?;
    let demo_key = demo["key"].as_str().unwrap_or_default().to_owned();
    let api_url = format!("http://127.0.0.1:{}", args.port);
    let env_path = args.local_dir.join("env");
    std::fs::write(&env_path, stack.env_file(&api_url, &demo_key))
        .map_err(|e| format!("writing {}: {e}", env_path.display()))?;

    println!("Career service is up at {api_url}");
    println!("  DynamoDB Local  {}", stack.dynamodb.endpoint);
    println!("  SQS emulator    {}", stack.sqs.endpoint);
    println!("  Demo API key (user demo-user, all six scopes):\n    {demo_key}");
    println!("  Try:  curl -H \"Authorization: Bearer {demo_key}\" {api_url}/api/v1/alerts");
    println!("  For careerctl and the AWS CLI:  source {}", env_path.display());
    println!(
        "  Events: careerctl profiles update --user demo-user   (deliveries retry after about 1 s, 4 s, 20 s, ...)"
    );
    println!("Press Ctrl-C to stop. Request and delivery logs follow as JSON lines.");
    career_core::telemetry::init();

    let outcome = tokio::select! {
        served = gateway::serve(listener, functions) => served.map_err(|e| format!("serving the API: {e}")),
        () = pumps::run_stream_pump(dynamodb.clone(), stack.streams_client(), stream_tables, &fanout, Some(checkpoints)) => Ok(()),
        () = pumps::run_queue_pump(sqs, stack.queues.delivery.clone(), &deliver) => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    let _ = std::fs::remove_file(&env_path);
    eprintln!("==> stopping the local stack");
    drop(stack);
    outcome
}
