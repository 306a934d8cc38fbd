//! The local stack: DynamoDB Local and the SQS emulator on free ports, with the service's
//! tables and queues, and SDK clients pointed at them. `careerctl local` and the
//! integration tests start it the same way.

use std::path::Path;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
use career_core::config::Settings;

use crate::services::{Installed, LocalService};
use crate::tables::{create_queues, create_tables, QueueUrls};

pub const REGION: &str = "us-east-1";

pub struct LocalStack {
    pub dynamodb: LocalService,
    pub sqs: LocalService,
    pub queues: QueueUrls,
    pub settings: Settings,
    sdk: SdkConfig,
}

impl LocalStack {
    /// Starts both services (DynamoDB data under `data_dir`, or in memory), creates what is
    /// missing, and points `settings` at the delivery queue.
    pub async fn start(installed: &Installed, data_dir: Option<&Path>, mut settings: Settings) -> Result<Self, String> {
        let (dynamodb, sqs) = tokio::try_join!(installed.start_dynamodb(data_dir), installed.start_sqs())?;
        let sdk = SdkConfig::builder()
            .region(Region::new(REGION))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "local", "local", None, None, "local",
            )))
            .behavior_version(BehaviorVersion::latest())
            .build();
        let mut stack = LocalStack {
            dynamodb,
            sqs,
            queues: QueueUrls { delivery: String::new(), dead_letter: String::new() },
            settings: settings.clone(),
            sdk,
        };
        create_tables(&stack.dynamodb_client(), &settings.tables).await?;
        stack.queues = create_queues(&stack.sqs_client(), "career-", settings.max_delivery_attempts).await?;
        settings.delivery_queue_url = Some(stack.queues.delivery.clone());
        stack.settings = settings;
        Ok(stack)
    }

    pub fn dynamodb_client(&self) -> aws_sdk_dynamodb::Client {
        let config = aws_sdk_dynamodb::config::Builder::from(&self.sdk).endpoint_url(&self.dynamodb.endpoint).build();
        aws_sdk_dynamodb::Client::from_conf(config)
    }

    pub fn streams_client(&self) -> aws_sdk_dynamodbstreams::Client {
        let config =
            aws_sdk_dynamodbstreams::config::Builder::from(&self.sdk).endpoint_url(&self.dynamodb.endpoint).build();
        aws_sdk_dynamodbstreams::Client::from_conf(config)
    }

    pub fn sqs_client(&self) -> aws_sdk_sqs::Client {
        let config = aws_sdk_sqs::config::Builder::from(&self.sdk).endpoint_url(&self.sqs.endpoint).build();
        aws_sdk_sqs::Client::from_conf(config)
    }

    /// `export` lines that point `careerctl` and the AWS SDKs at this stack.
    pub fn env_file(&self, api_url: &str, demo_key: &str) -> String {
        let mut vars = vec![
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ACCESS_KEY_ID", "local".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "local".to_owned()),
            ("AWS_ENDPOINT_URL_DYNAMODB", self.dynamodb.endpoint.clone()),
            ("AWS_ENDPOINT_URL_SQS", self.sqs.endpoint.clone()),
            ("DELIVERY_QUEUE_URL", self.queues.delivery.clone()),
            ("DEAD_LETTER_QUEUE_URL", self.queues.dead_letter.clone()),
            ("CAREER_API_URL", api_url.to_owned()),
            ("CAREER_DEMO_KEY", demo_key.to_owned()),
        ];
        vars.extend(self.settings.tables.all().map(|(name, table)| (name, table.to_owned())));
        // So a function run under `cargo lambda watch` behaves as it does in the local stack.
        let settings = &self.settings;
        vars.extend([
            ("RATE_LIMIT_PER_MINUTE", settings.rate_limit_per_minute.to_string()),
            ("ALLOW_INSECURE_WEBHOOK_URLS", settings.allow_insecure_webhook_urls.to_string()),
            ("CURSOR_SIGNING_KEY", settings.cursor_signing_key.clone().unwrap_or_default()),
            ("DELIVERY_RETRY_BASE_SECONDS", settings.retry_base.as_secs_f64().to_string()),
            ("DELIVERY_MAX_ATTEMPTS", settings.max_delivery_attempts.to_string()),
            ("WEBHOOK_DISABLE_AFTER_SECONDS", settings.webhook_disable_after.as_secs().to_string()),
            ("METRICS_NAMESPACE", settings.metrics_namespace.clone()),
        ]);
        vars.iter().map(|(name, value)| format!("export {name}='{value}'\n")).collect()
    }
}
