//! `careerctl`: admin commands and the local stack. Every admin command prints one JSON
//! object on stdout, and on failure a message on stderr and a non-zero exit status.

use std::process::ExitCode;

use anyhow::Context;
use aws_config::BehaviorVersion;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use career_core::alerts::{Category, Severity};
use career_core::aws::runtime::{aws_timeouts, timeout_factor, TIMEOUT_FACTOR_VAR};
use career_core::aws::AwsClients;
use career_core::clock::Timestamp;
use career_core::config::{Settings, TableNames};
use career_core::credentials::Scopes;
use career_core::delivery::log::DeliveryStatus;
use career_core::store::sealing::Sealer;
use careerctl::admin::{self, Admin, NewAlert};
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
    /// Re-run the stream records that the fan-out gave up on.
    #[command(subcommand)]
    Streams(StreamsCommand),
    /// Maintain webhook subscriptions.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// The demo user's items that the sample events in events/ act on, and a receiver for
    /// their deliveries.
    #[command(subcommand)]
    Demo(DemoCommand),
    /// Print what was published to the operator topic (operational events) since the last
    /// call, and take it from the local stack's inbox: {"notifications": [{"messageId",
    /// "subject", "publishedAt", "message"}]}.
    Notifications {
        /// The queue subscribed to the topic (`make run` puts OPERATOR_INBOX_URL in .local/env).
        #[arg(long, env = "OPERATOR_INBOX_URL")]
        inbox_url: String,
    },
    /// Issue a link that signs a user in to the webhook portal: a key with read:webhooks and
    /// write:webhooks that expires; prints {"url": "<API URL>/portal#key=cak_…", "userId",
    /// "expiresAt"}. Anyone holding the link acts as the user until then.
    PortalLink(PortalLinkArgs),
    /// Run the whole local stack in the foreground (what `make run` does); Ctrl-C stops it.
    #[cfg(feature = "local")]
    Local(LocalArgs),
}

#[derive(clap::Args)]
struct PortalLinkArgs {
    /// The user the link signs in.
    #[arg(long)]
    user: String,
    /// How long the link works, in minutes (1 to 1440).
    #[arg(
        long,
        default_value_t = admin::PORTAL_LINK_DEFAULT_MINUTES,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(admin::PORTAL_LINK_MAX_MINUTES))
    )]
    minutes: u32,
    /// The API's base URL, which serves the portal at /portal (`make run` puts
    /// CAREER_API_URL in .local/env).
    #[arg(long, env = "CAREER_API_URL")]
    api_url: Option<String>,
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
        /// The key is refused from this many minutes from now on (1 to 525600, a year);
        /// without it the key does not expire. The output then adds "expiresAt".
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(admin::MAX_KEY_LIFETIME_MINUTES)))]
        expires_in_minutes: Option<u32>,
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
        #[arg(long, default_value = "career_health", value_parser = str::parse::<Category>)]
        category: Category,
        /// info, warning or critical.
        #[arg(long, default_value = "info", value_parser = str::parse::<Severity>)]
        severity: Severity,
    },
}

#[derive(Subcommand)]
enum ProfilesCommand {
    /// Change the user's profile (creating it on first use); prints {"userId", "profileId"}.
    Update {
        #[arg(long)]
        user: String,
        /// The W3C traceparent of the change, set on the profile item: the deliveries of its
        /// event continue that trace.
        #[arg(long)]
        traceparent: Option<String>,
    },
}

#[derive(Subcommand)]
enum AssessmentsCommand {
    /// Mark an assessment completed (a new one unless --assessment is given); prints
    /// {"userId", "assessmentId"}.
    Complete {
        #[arg(long)]
        user: String,
        /// The assessment's id: not empty, at most 256 bytes, no control characters.
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
        #[arg(long, value_parser = str::parse::<DeliveryStatus>)]
        status: Option<DeliveryStatus>,
        /// How many, 1-100.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100))]
        limit: u32,
        /// The delivery id after which to continue (a previous nextAfter).
        #[arg(long)]
        after: Option<String>,
    },
    /// Copy the delivery log of a deliveries table of the layout before it was keyed by
    /// delivery (restore the old table's backup into a table, then name it here) into the
    /// stack's deliveries table; a delivery with a record there already keeps it. Prints
    /// {"imported": n, "present": m}. README "Deploying" says when.
    Import {
        /// The table to copy from.
        #[arg(long)]
        from: String,
    },
    /// Move every message of the dead-letter queue back to the retry lane, where each starts
    /// the retry schedule again; a delivery that was retried or recovered since is dropped
    /// unsent. Prints {"moved": n, "dropped": m}. Use it once a receiver is back after a long
    /// outage (POST /api/v1/webhooks/recover does the same for one subscription and a window).
    Redrive {
        /// The dead-letter queue's URL.
        #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
        from: String,
        /// The retry lane's URL: a dead-lettered delivery starts its retries again there (the
        /// main lane, a FIFO queue, takes first attempts only).
        #[arg(long, env = "DELIVERY_RETRY_QUEUE_URL")]
        to: String,
    },
}

#[derive(Subcommand)]
enum StreamsCommand {
    /// Re-run, through the fan-out's code with your credentials, the stream records of every
    /// batch that the stream failures queue names, while the stream still holds them (24
    /// hours), and delete each message recovered. A record run again sends nothing twice: a
    /// delivery that has its record already is not queued again. Prints {"recovered": n,
    /// "records": m, "notRecovered": [{"messageId", "batch", "reason", "detail", "deleted"}]}
    /// (reason: trimmed or shardGone, lost for good; fanOutFailed, streamError,
    /// unknownStream or unreadable, kept for another run), and on stderr a progress line per
    /// message and the fan-out's own log lines. Needs the fan-out's variables (WEBHOOKS_TABLE,
    /// DELIVERIES_TABLE, DELIVERY_QUEUE_URL, DELIVERY_RETRY_QUEUE_URL, OPERATOR_TOPIC_ARN) and
    /// the tables of its streams (PROFILES_TABLE, ASSESSMENTS_TABLE).
    Replay {
        /// The stream failures queue's URL (the stack's StreamFailuresQueueUrl output).
        #[arg(long, env = "STREAM_FAILURES_QUEUE_URL")]
        from: String,
        /// Also delete the messages whose records the stream no longer holds (trimmed or
        /// shardGone), once you have what the output says about them.
        #[arg(long)]
        discard_lost: bool,
    },
}

#[derive(Subcommand)]
enum TablesCommand {
    /// Create every table that is missing; prints {"created": [...]}.
    Create,
}

#[derive(Subcommand)]
enum WebhooksCommand {
    /// Seal (encrypt under the data key that SECRETS_KMS_KEY_ID protects) every secret that
    /// subscriptions created before secrets were sealed keep in plain text; prints
    /// {"sealed": n}. The secrets themselves do not change. `careerctl local` runs it at start.
    SealSecrets,
    /// Arm the probes (contract section 20) of every subscription disabled for failing before
    /// this version probed them: each is probed at its schedule's next slot from now
    /// (WEBHOOK_PROBE_AFTER_SECONDS, WEBHOOK_PROBE_FOR_SECONDS), unless probing would have ended;
    /// prints {"armed": n, "ended": m}. One Scan of the webhooks table: run it once after the
    /// upgrade. `careerctl local` runs it at start.
    ArmProbes,
}

#[derive(Subcommand)]
enum DemoCommand {
    /// Put in place, for make run's demo user, exactly the alert, webhook subscription and
    /// failed delivery that the sample events in events/ name.
    ///
    /// The items are left as the samples expect them, so running it again undoes what the
    /// samples changed. Prints {"userId", "alertId", "subscriptionId", "url", "secret",
    /// "failedDeliveryId"}. The subscription is made anew, with a fresh secret shown only
    /// here: give it to `demo receiver` (WEBHOOK_SECRET). For the local stack only: it needs
    /// ALLOW_HTTP_WEBHOOK_URLS and WEBHOOK_ALLOWED_NETWORKS as it sets them (source .local/env).
    Seed {
        /// Where the subscription delivers: a URL on this machine (127.0.0.1 or [::1]).
        #[arg(long, default_value_t = careerctl::demo::default_receiver_url())]
        receiver_url: String,
    },
    /// Receive webhook deliveries on 127.0.0.1 until Ctrl-C, one JSON line each.
    #[cfg(feature = "local")]
    ///
    /// Prints {"deliveryId", "eventType", "verified", "body"} for each delivery and answers
    /// 204 when its X-Webhook-Signature verifies with the secret in WEBHOOK_SECRET (the one
    /// `demo seed` printed), 401 otherwise.
    Receiver {
        /// The port on 127.0.0.1.
        #[arg(long, default_value_t = careerctl::demo::RECEIVER_PORT)]
        port: u16,
    },
    /// Make a sample receiver in its own AWS account (111122223333) in the local stack's
    /// emulators, for a subscription with a `destination` (docs/receiving-webhooks.md,
    /// "Receiving in your own AWS account"): the queue NAME (with --eventbridge, also the bus
    /// NAME and a rule forwarding to the queue; with --eventbus, also the Custom Event Bus NAME) and, with --sender-role-arn and
    /// --external-id (the subscription's), the role NAME-sender that trusts the service.
    /// Prints {"destination", "queueUrl", "permissionsPolicy", "trustPolicy"}. Idempotent.
    #[cfg(feature = "local")]
    AwsReceiver {
        #[arg(long, default_value = "webhooks")]
        name: String,
        /// Deliver to an EventBridge bus rather than the queue.
        #[arg(long, conflicts_with = "eventbus")]
        eventbridge: bool,
        /// Deliver to a Custom Event Bus (eventsv2) NAME rather than the queue.
        #[arg(long)]
        eventbus: bool,
        /// The subscription's senderRoleArn.
        #[arg(long, requires = "external_id")]
        sender_role_arn: Option<String>,
        /// The subscription's externalId. Base64url, so it may start with `-`: taken as the
        /// value, never as an option.
        #[arg(long, requires = "sender_role_arn", allow_hyphen_values = true)]
        external_id: Option<String>,
    },
    /// Take up to 10 messages from the sample receiver's queue NAME; prints {"messages":
    /// [{"body", "attributes"}]}, the attributes being the webhook headers.
    #[cfg(feature = "local")]
    AwsMessages {
        #[arg(long, default_value = "webhooks")]
        name: String,
    },
}

#[cfg(feature = "local")]
#[derive(clap::Args)]
struct LocalArgs {
    /// Port of the local API.
    #[arg(long, env = "PORT", default_value_t = 3000)]
    port: u16,
    /// Where scripts/install-local-deps.sh installed DynamoDB Local and moto, and where
    /// the stack keeps its data and writes `env`.
    #[arg(long, env = "CAREER_LOCAL_DIR", default_value = ".local")]
    local_dir: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        #[cfg(feature = "local")]
        Command::Local(args) => match local_aws::stack::settings_from_env() {
            Ok(settings) => careerctl::local::run(args.port, &args.local_dir, settings).await,
            Err(message) => Err(message),
        },
        #[cfg(feature = "local")]
        Command::Demo(DemoCommand::Receiver { port }) => run_receiver(port).await,
        command => admin_command(command).await.and_then(careerctl::print_line),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // The error and its causes, each after the context it happened in.
            eprintln!("careerctl: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn admin_command(command: Command) -> anyhow::Result<serde_json::Value> {
    // The platform's roots, as aws-config's default client trusts, over rustls on ring.
    let https = aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https();
    // The local stack's `.local/env` widens the limits as for its functions (runtime.rs says why).
    let factor = std::env::var(TIMEOUT_FACTOR_VAR).ok().map(|text| timeout_factor(&text)).transpose()?.unwrap_or(1);
    let timeouts = aws_timeouts(factor);
    let sdk = aws_config::defaults(BehaviorVersion::latest()).http_client(https).timeout_config(timeouts).load().await;
    let clients = AwsClients::new(sdk);
    let admin = Admin::new(clients.dynamodb().clone(), TableNames::from_env());
    match command {
        Command::Keys(KeysCommand::Create { user, scopes, label, expires_in_minutes }) => {
            let scopes = Scopes::parse_list(&scopes).map_err(anyhow::Error::msg)?;
            json(admin.create_key(&user, scopes, label, expires_in_minutes.map(admin::minutes_from_now)).await)
        }
        Command::PortalLink(PortalLinkArgs { user, minutes, api_url }) => {
            let api_url = api_url.context(
                "the API URL is needed: pass --api-url or set CAREER_API_URL (source .local/env sets it for make run)",
            )?;
            json(admin.portal_link(&user, &api_url, minutes).await)
        }
        Command::Keys(KeysCommand::Revoke { key }) => json(admin.revoke_key(&key).await),
        Command::Alerts(AlertsCommand::Create { user, title, message, category, severity }) => {
            json(admin.create_alert(&user, NewAlert { title, message, category, severity }).await)
        }
        Command::Profiles(ProfilesCommand::Update { user, traceparent }) => {
            json(admin.update_profile_in_trace(&user, traceparent.as_deref()).await)
        }
        Command::Assessments(AssessmentsCommand::Complete { user, assessment }) => {
            json(admin.complete_assessment(&user, assessment).await)
        }
        Command::Deliveries(DeliveriesCommand::List { subscription, status, limit, after }) => {
            json(admin.list_deliveries(&subscription, status, limit, after.as_deref()).await)
        }
        Command::Deliveries(DeliveriesCommand::Import { from }) => json(admin.import_deliveries(&from).await),
        Command::Deliveries(DeliveriesCommand::Redrive { from, to }) => {
            json(admin.redrive(clients.sqs(), &from, &to).await)
        }
        Command::Tables(TablesCommand::Create) => json(admin.create_tables().await),
        Command::Streams(StreamsCommand::Replay { from, discard_lost }) => {
            // The fan-out's own log lines (what it fanned out, why a record failed) beside the
            // progress lines, off stdout, which holds the summary.
            career_core::telemetry::init_writing_to(std::io::stderr);
            let settings = operator_settings()?;
            let fanout = career_fanout::Deps::new(&clients, &settings)?;
            let template = career_template::Template::shipped();
            let fanout_function = career_template::function::FANOUT;
            let filters =
                career_template::filters::stream_filters_by_table(&template, &settings.tables, fanout_function)?;
            let streams = aws_sdk_dynamodbstreams::Client::new(clients.sdk());
            let mut progress = |line: String| eprintln!("careerctl: {line}");
            let filters = filters.into_iter().collect();
            json(
                careerctl::streams::replay(
                    clients.sqs(),
                    &streams,
                    &fanout,
                    &filters,
                    &from,
                    discard_lost,
                    &mut progress,
                )
                .await,
            )
        }
        Command::Notifications { inbox_url } => {
            let notifications = careerctl::notifications::take(clients.sqs(), &inbox_url).await?;
            Ok(serde_json::json!({ "notifications": notifications }))
        }
        Command::Webhooks(WebhooksCommand::SealSecrets) => {
            let (_, sealer) = sealing(&clients)?;
            json(admin.seal_plain_secrets(&sealer).await)
        }
        Command::Webhooks(WebhooksCommand::ArmProbes) => {
            let schedule = admin::probe_schedule(&operator_settings()?);
            json(admin.arm_probes(&schedule, Timestamp::now()).await)
        }
        Command::Demo(DemoCommand::Seed { receiver_url }) => {
            let (settings, sealer) = sealing(&clients)?;
            json(careerctl::demo::seed(clients.dynamodb(), &settings, &sealer, &receiver_url).await)
        }
        #[cfg(feature = "local")]
        Command::Demo(DemoCommand::AwsReceiver { name, eventbridge, eventbus, sender_role_arn, external_id }) => {
            use careerctl::aws_receiver::Kind;
            let kind = match (eventbridge, eventbus) {
                (true, _) => Kind::EventBridge,
                (_, true) => Kind::EventBus,
                _ => Kind::Queue,
            };
            careerctl::aws_receiver::set_up(&clients, &name, kind, sender_role_arn.zip(external_id)).await
        }
        #[cfg(feature = "local")]
        Command::Demo(DemoCommand::AwsMessages { name }) => careerctl::aws_receiver::messages(&clients, &name).await,
        #[cfg(feature = "local")]
        Command::Local(_) | Command::Demo(DemoCommand::Receiver { .. }) => unreachable!("handled in main"),
    }
}

/// The settings of the environment, with the local stack's table names where a variable is
/// unset, as [`TableNames::from_env`] has them.
fn operator_settings() -> anyhow::Result<Settings> {
    Ok(Settings { tables: TableNames::from_env(), ..Settings::from_env()? })
}

/// The settings of the environment, and the sealer of webhook secrets they name.
fn sealing(clients: &AwsClients) -> anyhow::Result<(Settings, Sealer)> {
    let settings = operator_settings()?;
    let sealer = Sealer::new(clients, &settings)?;
    Ok((settings, sealer))
}

/// `demo receiver`: one JSON line per delivery on stdout until Ctrl-C.
#[cfg(feature = "local")]
async fn run_receiver(port: u16) -> anyhow::Result<()> {
    let text = std::env::var("WEBHOOK_SECRET")
        .context("set WEBHOOK_SECRET to the subscription's secret (the \"secret\" that demo seed prints)")?;
    let secret = career_core::webhooks::WebhookSecret::parse(text.trim())
        .context("WEBHOOK_SECRET is not a webhook secret (whsec_…)")?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("cannot listen on 127.0.0.1:{port} (use --port)"))?;
    eprintln!("careerctl: receiving webhook deliveries on http://127.0.0.1:{port}/ (Ctrl-C stops)");
    let (failed, mut output_failure) = tokio::sync::mpsc::unbounded_channel();
    let report = move |received: careerctl::demo::receiver::Received| {
        let line = serde_json::to_string(&received).expect("a delivery serializes");
        if let Err(message) = careerctl::print_line(line) {
            let _ = failed.send(message);
        }
    };
    tokio::select! {
        served = careerctl::demo::receiver::receive(listener, secret, report) => served.context("receiving"),
        Some(message) = output_failure.recv() => Err(message),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// An admin command's result as the JSON object it prints (contract section 8).
fn json(result: anyhow::Result<impl serde::Serialize>) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::to_value(result?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from([&["careerctl"], args].concat()).map_err(|e| e.to_string())
    }

    #[test]
    fn portal_links_last_an_hour_by_default_and_a_day_at_most() {
        let api = ["--api-url", "http://127.0.0.1:3000"];
        let minutes = |extra: &[&str]| match parse(&[&["portal-link", "--user", "u1"], &api[..], extra].concat()) {
            Ok(Cli { command: Command::PortalLink(args) }) => Ok(args.minutes),
            Ok(_) => panic!("another command"),
            Err(message) => Err(message),
        };
        assert_eq!(minutes(&[]), Ok(60));
        assert_eq!(minutes(&["--minutes", "1"]), Ok(1));
        assert_eq!(minutes(&["--minutes", "1440"]), Ok(1440));
        for bad in ["--minutes=0", "--minutes=1441", "--minutes=-5", "--minutes=an hour", "--minutes="] {
            let refused = minutes(&[bad]).expect_err(bad);
            assert!(refused.contains("--minutes"), "{bad}: {refused}");
        }
    }

    #[test]
    #[cfg(feature = "local")]
    fn an_external_id_that_starts_with_a_hyphen_is_taken_as_the_value() {
        let external_id = |args: &[&str]| {
            let demo =
                [&["demo", "aws-receiver", "--sender-role-arn", "arn:aws:iam::123456789012:role/d"], args].concat();
            match parse(&demo) {
                Ok(Cli { command: Command::Demo(DemoCommand::AwsReceiver { external_id, .. }) }) => Ok(external_id),
                Ok(_) => panic!("another command"),
                Err(message) => Err(message),
            }
        };
        let id = "-Xk2vB7hN0p9mQ4rT1sW8yZ3aC6dE5fG0hJ2kL4mN6o";
        assert_eq!(external_id(&["--external-id", id]), Ok(Some(id.to_owned())));
        assert_eq!(external_id(&[&format!("--external-id={id}")]), Ok(Some(id.to_owned())));
        assert!(external_id(&[]).unwrap_err().contains("--external-id"), "it goes with --sender-role-arn");
    }

    #[test]
    fn a_key_expires_after_one_minute_to_a_year() {
        let create = |minutes: &str| {
            parse(&["keys", "create", "--user", "u1", "--scopes", "read:webhooks", "--expires-in-minutes", minutes])
        };
        assert!(create("1").is_ok());
        assert!(create("525600").is_ok());
        for bad in ["0", "525601", "soon", "1.5"] {
            let refused = create(bad).map(|_| ()).expect_err(bad);
            assert!(refused.contains("--expires-in-minutes"), "{bad}: {refused}");
        }
    }
}
