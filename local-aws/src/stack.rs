//! The local stack: DynamoDB Local and moto (SQS, KMS and SNS; and STS, IAM and EventBridge
//! for receivers' own accounts) on free ports, with the service's
//! tables, queues and KMS key, and the SDK configuration that points clients at them. `careerctl local` and the
//! integration tests start it the same way.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use aws_config::timeout::TimeoutConfig;
use aws_config::SdkConfig;
use career_core::aws::AwsClients;
use career_core::config::{SecretSetting, Settings, TableNames};
use career_core::store::PartitionQuota;

use crate::deployment::Deployment;
use crate::emulators::{set_in_flight_quota, Installed, LocalService, SQS_IN_FLIGHT};
use crate::resources::QueueUrls;
use crate::template::{Template, REGION};
use crate::throttling::{Modelled, ThrottlingLayer};

/// The local stack's settings: the environment, with the local defaults of contract
/// section 8 (and the local stack's table names) where a variable is not set.
pub fn settings_from_env() -> anyhow::Result<Settings> {
    let mut settings = Settings::from_env()?;
    // The stack's own tables: a function's settings come from the template's variables.
    settings.tables = TableNames::from_env();
    let unset = |name: &str| std::env::var_os(name).is_none();
    if unset("ALLOW_HTTP_WEBHOOK_URLS") && unset("WEBHOOK_ALLOWED_NETWORKS") {
        settings.webhook_urls = career_core::webhooks::UrlPolicy::local_stack();
    }
    if unset("DELIVERY_RETRY_BASE_SECONDS") {
        settings.retry_base = Duration::from_secs(1);
    }
    if let Some(divisor) = std::env::var_os(SCALE_MODEL_VAR) {
        settings.partition_quota = scale_model(&divisor.to_string_lossy())?;
    }
    if settings.cursor_signing_key.is_none() {
        settings.cursor_signing_key = Some(SecretSetting::new(career_core::random::random_token("cursor_")));
    }
    Ok(settings)
}

/// Runs the local stack as a scale model (contract section 22) when set: AWS's quotas that
/// bind the design divided by its value (10: a partition key takes 100 write units a second,
/// not DynamoDB's 1,000; a lane 12,000 messages in flight, not SQS's 120,000), enforced by a
/// layer in front of DynamoDB Local ([`ThrottlingLayer`]) and by the SQS emulator.
/// Unset, the stack enforces none (DynamoDB Local has no quota).
pub const SCALE_MODEL_VAR: &str = "LOCAL_SCALE_MODEL";

/// The partition quota of the scale model [`SCALE_MODEL_VAR`] asks for.
fn scale_model(divisor: &str) -> anyhow::Result<PartitionQuota> {
    let divisor = divisor.trim().parse::<u32>().ok().filter(|d| *d >= 2);
    let divisor =
        divisor.with_context(|| format!("{SCALE_MODEL_VAR} is a whole number from 2: AWS's quotas divided by it"))?;
    Ok(PartitionQuota::DYNAMODB.scaled_down(divisor))
}

/// The local stack's name: its tables are `career-…` (config.rs's default names).
pub const STACK_NAME: &str = "career";

/// How many times AWS's its time limits the local stack gives the functions: their AWS calls'
/// (`career_core::aws::runtime::TIMEOUT_FACTOR_VAR`, which the stack sets for them) and their own
/// (Lambda's timeout of each function, and API Gateway's: [`local_time_limit`]). The stack's
/// emulators share a developer's machine with compilers, where DynamoDB Local's JVM stalls for
/// seconds at a time; scaling every limit by one factor keeps their order, so what reaches a
/// limit first on AWS still does here. The tests of those limits run with AWS's own.
pub const TIMEOUT_FACTOR: u32 = 5;

/// The local stack's counterpart of a time limit that AWS sets at `aws`.
pub fn local_time_limit(aws: Duration) -> Duration {
    aws * TIMEOUT_FACTOR
}

pub struct LocalStack {
    pub dynamodb: LocalService,
    /// The scale model's layer in front of `dynamodb`, which the stack's clients then call.
    pub throttling: Option<ThrottlingLayer>,
    /// moto: the SQS emulator, and KMS and SNS on the same endpoint.
    pub sqs: LocalService,
    pub queues: QueueUrls,
    /// The settings of the stack (what its parameters and the local defaults make them); each
    /// function reads its own from the environment the template gives it
    /// ([`Deployment::settings_of`]).
    pub settings: Settings,
    pub deployment: Deployment,
    sdk: SdkConfig,
}

impl LocalStack {
    /// Starts both services (their data under `data_dir`, or in memory), makes what the
    /// shipped template declares and is missing, and points `settings` at the delivery lanes
    /// and the KMS key.
    pub async fn start(installed: &Installed, data_dir: Option<&Path>, settings: Settings) -> anyhow::Result<Self> {
        Self::start_from(&Template::shipped(), installed, data_dir, settings).await
    }

    /// [`LocalStack::start`] from `template` (a changed copy, in a test).
    pub async fn start_from(
        template: &Template,
        installed: &Installed,
        data_dir: Option<&Path>,
        mut settings: Settings,
    ) -> anyhow::Result<Self> {
        let (dynamodb_dir, kms_dir) = (data_dir.map(|d| d.join("dynamodb")), data_dir.map(|d| d.join("kms")));
        let (dynamodb, sqs) = tokio::try_join!(
            installed.start_dynamodb(dynamodb_dir.as_deref()),
            installed.start_moto(kms_dir.as_deref())
        )?;
        // AWS's own quota is far above what one machine reaches: only a scale model's has a layer.
        let throttling = match settings.partition_quota {
            PartitionQuota::DYNAMODB => None,
            quota => {
                let tables = AwsClients::new(sdk_config(&dynamodb.endpoint, &sqs.endpoint)?).dynamodb().clone();
                Some(ThrottlingLayer::start(&dynamodb.endpoint, tables, quota, Modelled::Every).await?)
            }
        };
        let dynamodb_endpoint = throttling.as_ref().map_or(&dynamodb.endpoint, |layer| &layer.endpoint);
        let sdk = sdk_config(dynamodb_endpoint, &sqs.endpoint)?;
        // Services that just started can take a while to answer their first calls (the JVM
        // warming up, a data file being opened), longer than a request may wait.
        let setup = AwsClients::new(sdk.to_builder().timeout_config(startup_timeouts()).build());
        let deployment = Deployment::create(template, &setup, STACK_NAME, &mut settings).await?;
        let queues = deployment.queues()?;
        // The scale model holds the lanes to SQS's in-flight quota, scaled as the partitions' is.
        if throttling.is_some() {
            let quota = SQS_IN_FLIGHT * settings.partition_quota.write_units / PartitionQuota::DYNAMODB.write_units;
            for lane in [&queues.delivery, &queues.retry] {
                set_in_flight_quota(&sqs.endpoint, lane, quota.max(1)).await?;
            }
        }
        Ok(LocalStack { dynamodb, throttling, sqs, queues, settings, deployment, sdk })
    }

    /// Replaces DynamoDB Local with a new one in memory on the same port, and makes the
    /// template's tables again: a clean slate for a benchmark's next part. DynamoDB Local
    /// finds a stream's oldest record by walking every stream's records in sequence order (its
    /// records table has no index by stream), so each write to a table made after many
    /// others' writes costs more, and deleting the tables does not remove their records.
    pub async fn restart_dynamodb(&mut self, installed: &Installed) -> anyhow::Result<()> {
        let port = self.dynamodb.port();
        self.dynamodb.stop().await;
        self.dynamodb = installed.start_dynamodb_on(port, None).await?;
        let setup = AwsClients::new(self.sdk.to_builder().timeout_config(startup_timeouts()).build());
        self.deployment = Deployment::create(&Template::shipped(), &setup, STACK_NAME, &mut self.settings).await?;
        Ok(())
    }

    /// Waits until DynamoDB Local or the SQS emulator ends, and says which and how: the stack
    /// cannot work without either, so whoever runs it stops rather than answer 500s.
    pub async fn service_ended(&mut self) -> String {
        tokio::select! {
            how = self.dynamodb.ended() => format!("DynamoDB Local ended unexpectedly ({how})"),
            how = self.sqs.ended() => format!("the SQS emulator ended unexpectedly ({how})"),
        }
    }

    /// The AWS clients of one function instance (or of a command) on this stack.
    pub fn clients(&self) -> AwsClients {
        AwsClients::new(self.sdk.clone())
    }

    /// `export` lines that point `careerctl` and the AWS SDKs at this stack.
    pub fn env_file(&self, api_url: &str, demo_key: &str) -> String {
        let dynamodb = self.throttling.as_ref().map_or(&self.dynamodb.endpoint, |layer| &layer.endpoint);
        let mut vars = aws_environment(dynamodb, &self.sqs.endpoint);
        vars.extend([("CAREER_API_URL", api_url.to_owned()), ("CAREER_DEMO_KEY", demo_key.to_owned())]);
        // So a function run under `cargo lambda watch` behaves as it does in the local stack
        // (the settings hold the stack's lanes and KMS key).
        vars.extend(self.settings.to_env());
        // What `careerctl streams replay` reads.
        vars.push(("STREAM_FAILURES_QUEUE_URL", self.queues.stream_failures.clone()));
        // Where `careerctl notifications` reads what the operator topic was sent.
        vars.extend(self.deployment.operator_inbox().ok().map(|url| ("OPERATOR_INBOX_URL", url)));
        let mut lines: String = vars.iter().map(|(name, value)| format!("export {name}='{value}'\n")).collect();
        // `careerctl` on the PATH: the binary that runs this stack.
        if let Some(dir) = std::env::current_exe().ok().as_deref().and_then(std::path::Path::parent) {
            lines.push_str(&format!("export PATH='{}':\"$PATH\"\n", dir.display()));
        }
        lines
    }
}

/// The AWS part of the environment of a stack whose DynamoDB Local listens at `dynamodb` and
/// moto (SQS, KMS and SNS) at `moto`: the region, the credentials, each service's endpoint and
/// the local stack's wider time limits.
fn aws_environment(dynamodb: &str, moto: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_REGION", REGION.to_owned()),
        ("AWS_ACCESS_KEY_ID", "local".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "local".to_owned()),
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.to_owned()),
        ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", dynamodb.to_owned()),
        ("AWS_ENDPOINT_URL_SQS", moto.to_owned()),
        ("AWS_ENDPOINT_URL_KMS", moto.to_owned()),
        ("AWS_ENDPOINT_URL_SNS", moto.to_owned()),
        // A receiver's own account (contract section 17): its role, queue and bus.
        ("AWS_ENDPOINT_URL_STS", moto.to_owned()),
        ("AWS_ENDPOINT_URL_IAM", moto.to_owned()),
        ("AWS_ENDPOINT_URL_EVENTBRIDGE", moto.to_owned()),
        // The Custom Event Bus (eventsv2), which moto_server.py emulates.
        ("AWS_ENDPOINT_URL_EVENTBRIDGEV2", moto.to_owned()),
        (career_core::aws::runtime::TIMEOUT_FACTOR_VAR, TIMEOUT_FACTOR.to_string()),
    ]
}

/// The SDK configuration of clients on such a stack, built from that environment by the
/// functions' own code, as on Lambda (with the functions' time limits, [`TIMEOUT_FACTOR`] times
/// AWS's).
/// Calls signed with a function role's keys are evaluated against that role (crate::iam).
pub fn sdk_config(dynamodb: &str, moto: &str) -> anyhow::Result<SdkConfig> {
    let environment = aws_environment(dynamodb, moto).into_iter().map(|(name, value)| (name.to_owned(), value));
    let sdk =
        career_core::aws::runtime::sdk_config(environment).context("configuring the local stack's AWS clients")?;
    let http = sdk.http_client().context("the functions' SDK configuration has an HTTP client")?;
    Ok(sdk.to_builder().http_client(crate::iam::enforcing(http)).build())
}

/// Time limits for creating the tables and queues on freshly started services.
fn startup_timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .operation_attempt_timeout(Duration::from_secs(30))
        .operation_timeout(Duration::from_secs(60))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_model_divides_dynamodbs_partition_quota() {
        assert_eq!(scale_model("10").unwrap(), PartitionQuota { write_units: 100, read_units: 300 });
        assert_eq!(scale_model("5000").unwrap(), PartitionQuota { write_units: 1, read_units: 1 }, "at least a unit");
        for bad in ["1", "0", "-2", "ten", ""] {
            assert!(scale_model(bad).is_err(), "{bad:?}");
        }
    }
}
