//! The service's adapters: everything that talks to AWS or to the network, apart from the
//! tables (`store`). The domain modules beside this folder import no AWS, Lambda or HTTP
//! crate (`scripts/import-circles.py` checks it); the functions wire the two together.
//!
//! - `runtime`: running a function on Lambda (cold start: settings, clients, logging);
//! - `api`: the HTTP boundary of the three API functions (API Gateway's requests);
//! - `queue`: the delivery lanes (SQS);
//! - `sender`: a delivery's HTTPS request (through the private-network guard);
//! - `aws_sender`: a delivery into the receiver's own AWS account (STS, then SQS, EventBridge or the Custom Event Bus);
//! - `identity_tokens`: the AWS-signed token an HTTP subscription may ask each attempt to carry (STS);
//! - `operator`: the operator's SNS topic;
//! - `outbox`: the one place a delivery is recorded and queued (every origin of a round);
//!
//! This file: the AWS clients of one instance: a function's, the local stack's or a test's. They come
//! from one SDK configuration (on Lambda, `runtime::sdk_config` of the environment), which
//! says each service's endpoint, and each client is built on first use and then shared, so
//! a function builds only the clients it uses, once per instance, and asks for them by name
//! rather than in an argument order. A clone shares the clients: a part that needs a client
//! only sometimes (the sealer's KMS, the webhooks function's queues) keeps a clone and asks
//! for the client when it first uses it, so init does not build it (BENCHMARKS.md section 1
//! gives what a client costs a cold start).

pub mod api;
pub mod aws_sender;
pub mod identity_tokens;
pub mod operator;
pub mod outbox;
pub mod queue;
pub mod runtime;
pub mod sender;

use std::sync::{Arc, OnceLock};

use aws_sdk_dynamodb::config::SharedCredentialsProvider;
use aws_types::SdkConfig;

#[derive(Clone)]
pub struct AwsClients {
    sdk: SdkConfig,
    dynamodb: Arc<OnceLock<aws_sdk_dynamodb::Client>>,
    sqs: Arc<OnceLock<aws_sdk_sqs::Client>>,
    kms: Arc<OnceLock<aws_sdk_kms::Client>>,
    sns: Arc<OnceLock<aws_sdk_sns::Client>>,
    sts: Arc<OnceLock<aws_sdk_sts::Client>>,
}

impl AwsClients {
    /// Builds nothing yet: each client is made from `sdk` when first asked for.
    pub fn new(sdk: SdkConfig) -> Self {
        Self {
            sdk,
            dynamodb: Arc::default(),
            sqs: Arc::default(),
            kms: Arc::default(),
            sns: Arc::default(),
            sts: Arc::default(),
        }
    }

    /// The configuration the clients are made from.
    pub fn sdk(&self) -> &SdkConfig {
        &self.sdk
    }

    pub fn dynamodb(&self) -> &aws_sdk_dynamodb::Client {
        self.dynamodb.get_or_init(|| aws_sdk_dynamodb::Client::new(&self.sdk))
    }

    pub fn sqs(&self) -> &aws_sdk_sqs::Client {
        self.sqs.get_or_init(|| aws_sdk_sqs::Client::new(&self.sdk))
    }

    pub fn kms(&self) -> &aws_sdk_kms::Client {
        self.kms.get_or_init(|| aws_sdk_kms::Client::new(&self.sdk))
    }

    pub fn sns(&self) -> &aws_sdk_sns::Client {
        self.sns.get_or_init(|| aws_sdk_sns::Client::new(&self.sdk))
    }

    /// STS's, which assumes the roles of destinations in receivers' accounts (contract
    /// section 17).
    pub fn sts(&self) -> &aws_sdk_sts::Client {
        self.sts.get_or_init(|| aws_sdk_sts::Client::new(&self.sdk))
    }

    /// The same clients, signing with `credentials`: those made already are made again on
    /// their own configuration (an interceptor stays), the others will be made with them.
    /// The local stack gives each function its role's keys this way.
    pub fn with_credentials(&self, credentials: SharedCredentialsProvider) -> Self {
        let mut clients = Self::new(self.sdk.to_builder().credentials_provider(credentials.clone()).build());
        if let Some(client) = self.dynamodb.get() {
            let config = client.config().to_builder().credentials_provider(credentials.clone());
            clients = clients.with_dynamodb(aws_sdk_dynamodb::Client::from_conf(config.build()));
        }
        if let Some(client) = self.sqs.get() {
            let config = client.config().to_builder().credentials_provider(credentials.clone());
            clients = clients.with_sqs(aws_sdk_sqs::Client::from_conf(config.build()));
        }
        if let Some(client) = self.kms.get() {
            let config = client.config().to_builder().credentials_provider(credentials.clone());
            clients = clients.with_kms(aws_sdk_kms::Client::from_conf(config.build()));
        }
        if let Some(client) = self.sns.get() {
            let config = client.config().to_builder().credentials_provider(credentials.clone());
            clients.sns = Arc::new(OnceLock::from(aws_sdk_sns::Client::from_conf(config.build())));
        }
        if let Some(client) = self.sts.get() {
            let config = client.config().to_builder().credentials_provider(credentials);
            clients.sts = Arc::new(OnceLock::from(aws_sdk_sts::Client::from_conf(config.build())));
        }
        clients
    }

    /// Uses `client` for DynamoDB instead of one made from the configuration (a client
    /// with an interceptor, say).
    pub fn with_dynamodb(mut self, client: aws_sdk_dynamodb::Client) -> Self {
        self.dynamodb = Arc::new(OnceLock::from(client));
        self
    }

    /// Uses `client` for SQS instead of one made from the configuration.
    pub fn with_sqs(mut self, client: aws_sdk_sqs::Client) -> Self {
        self.sqs = Arc::new(OnceLock::from(client));
        self
    }

    /// Uses `client` for KMS instead of one made from the configuration.
    pub fn with_kms(mut self, client: aws_sdk_kms::Client) -> Self {
        self.kms = Arc::new(OnceLock::from(client));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::config::{BehaviorVersion, Region};

    #[test]
    fn a_client_is_made_on_first_use_and_shared_after() {
        let sdk =
            SdkConfig::builder().behavior_version(BehaviorVersion::latest()).region(Region::new("eu-west-1")).build();
        let clients = AwsClients::new(sdk);
        assert!(clients.dynamodb.get().is_none() && clients.sqs.get().is_none() && clients.kms.get().is_none());
        let first = clients.sqs();
        assert!(std::ptr::eq(first, clients.sqs()));
        assert!(clients.dynamodb.get().is_none() && clients.kms.get().is_none());
        let clone = clients.clone();
        assert!(std::ptr::eq(first, clone.sqs()), "a clone shares the clients made");
        clone.kms();
        assert!(clients.kms.get().is_some(), "and those it makes");
    }
}
