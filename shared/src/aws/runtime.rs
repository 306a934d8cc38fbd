//! Running the functions on Lambda: logging, settings, the AWS clients and a function's
//! dependencies are set up once per cold start, then every event goes to its handler.
//! This is the only module that starts a Lambda runtime.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use lambda_http::lambda_runtime::{self, LambdaEvent};
use lambda_http::{Body, Request, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider, SharedHttpClient};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};
use aws_types::SdkConfig;

use crate::aws::AwsClients;
use crate::config::{ConfigError, Settings};

/// Test hook: the path of a PEM file whose certificate the functions trust besides AWS's
/// roots, so a benchmark can put a TLS terminator with a certificate of its own in front of
/// DynamoDB Local. Only a build with the `extra-root-cert` feature (the tests' and the
/// benchmarks') reads it: the deployed binaries (`make build`) trust AWS's roots alone,
/// whatever their environment says.
#[cfg(feature = "extra-root-cert")]
pub const EXTRA_ROOT_CERT_VAR: &str = "TEST_EXTRA_ROOT_CERT_FILE";

/// Local-stack hook: how many times AWS's time limits the functions' AWS calls are given
/// (a whole number, at least 1). The local stack sets it (`local_aws::stack::TIMEOUT_FACTOR`):
/// its emulators share a developer's two cores with compilers, where DynamoDB Local's JVM
/// can stall for seconds, and a test that is not about these limits must not fail on them.
/// Unset (the default, and on AWS: the template never sets it), the factor is 1.
pub const TIMEOUT_FACTOR_VAR: &str = "LOCAL_TIMEOUT_FACTOR";

/// Setup shared by both kinds of function. The dependencies live as long as the process,
/// like the Lambda execution environment, hence the leak.
/// `build` (the function's `Deps::new`) asks the handle for the clients its function uses,
/// and only those are created; creating one makes no network call.
async fn cold_start<D: 'static>(
    build: fn(&AwsClients, &Settings) -> Result<D, ConfigError>,
) -> Result<&'static D, lambda_runtime::Error> {
    crate::telemetry::init();
    let settings = Settings::from_env()?;
    let clients = AwsClients::new(sdk_config(std::env::vars())?);
    Ok(Box::leak(Box::new(build(&clients, &settings)?)))
}

/// The SDK configuration that Lambda's environment describes, built by hand: the region,
/// the role's credentials and any `AWS_ENDPOINT_URL`/`AWS_ENDPOINT_URL_<SERVICE>` come
/// from `environment`. `aws_config`'s loader would also look for profile files and run
/// its provider chains, which Lambda never needs and every cold start paid for.
pub fn sdk_config(environment: impl IntoIterator<Item = (String, String)>) -> Result<SdkConfig, ConfigError> {
    let environment: HashMap<String, String> = environment.into_iter().collect();
    let var = |name: &str| environment.get(name).filter(|value| !value.is_empty()).cloned();
    #[cfg(feature = "extra-root-cert")]
    let extra_root = match var(EXTRA_ROOT_CERT_VAR) {
        Some(path) => Some(std::fs::read(&path).map_err(|e| ConfigError::new(EXTRA_ROOT_CERT_VAR, e.to_string()))?),
        None => None,
    };
    #[cfg(not(feature = "extra-root-cert"))]
    let extra_root = None;
    let factor = match var(TIMEOUT_FACTOR_VAR) {
        Some(text) => timeout_factor(&text)?,
        None => 1,
    };
    let mut builder = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .http_client(aws_https_client(extra_root)?)
        .timeout_config(aws_timeouts(factor))
        .region(var("AWS_REGION").map(Region::new));
    let (Some(id), Some(secret)) = (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) else {
        return Err(ConfigError::new("AWS_ACCESS_KEY_ID", "and AWS_SECRET_ACCESS_KEY must be set (Lambda sets both)"));
    };
    builder.set_endpoint_url(var(GLOBAL_ENDPOINT_VAR));
    let credentials = Credentials::new(id, secret, var("AWS_SESSION_TOKEN"), None, "environment");
    builder = builder.credentials_provider(SharedCredentialsProvider::new(credentials));
    let endpoints = ServiceEndpoints(
        environment
            .into_iter()
            .filter(|(name, value)| name.starts_with(GLOBAL_ENDPOINT_VAR) && !value.is_empty())
            .collect(),
    );
    Ok(builder.service_config(endpoints).build())
}

const GLOBAL_ENDPOINT_VAR: &str = "AWS_ENDPOINT_URL";

/// The service-specific endpoints of the environment (`AWS_ENDPOINT_URL_DYNAMODB`, …),
/// named as the SDK's own environment loader names them: the service id in capitals,
/// spaces as underscores.
#[derive(Debug)]
struct ServiceEndpoints(HashMap<String, String>);

impl LoadServiceConfig for ServiceEndpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        let name = format!("{}_{}", key.env(), key.service_id().to_uppercase().replace(' ', "_"));
        self.0.get(&name).cloned()
    }
}

/// Time limits of every AWS call, here, in the local stack and in the tests, `factor` times
/// AWS's ([`TIMEOUT_FACTOR_VAR`]; 1 on AWS). A hung dependency then costs a request at most
/// [`AWS_OPERATION_TIMEOUT`] and a 500, well inside the API functions' 10 s Lambda timeout; a
/// slow attempt is retried within that budget.
pub fn aws_timeouts(factor: u32) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(1) * factor)
        .operation_attempt_timeout(Duration::from_secs(2) * factor)
        .operation_timeout(AWS_OPERATION_TIMEOUT * factor)
        .build()
}

/// [`TIMEOUT_FACTOR_VAR`]'s value: a whole number from 1 (AWS's limits) to 100.
pub fn timeout_factor(text: &str) -> Result<u32, ConfigError> {
    text.trim()
        .parse()
        .ok()
        .filter(|factor| (1..=100).contains(factor))
        .ok_or_else(|| ConfigError::new(TIMEOUT_FACTOR_VAR, format!("{text:?} is not a whole number from 1 to 100")))
}

/// The longest one AWS call (all its attempts) may take.
pub const AWS_OPERATION_TIMEOUT: Duration = Duration::from_secs(4);

/// The roots that AWS service endpoints chain to (Amazon Trust Services).
const AWS_ROOT_CERTIFICATES: &[u8] = include_bytes!("amazon-trust-services-roots.pem");

/// The SDK's HTTPS client trusting only the roots AWS endpoints use (plus the test hook's
/// certificate when it is set). The default client reads and parses the platform's whole
/// certificate store at every cold start. rustls runs on ring, whose random bytes come
/// from the kernel at each use: nothing to seed in the first request (docs/deploying.md,
/// "TLS and randomness").
fn aws_https_client(extra_root: Option<Vec<u8>>) -> Result<SharedHttpClient, ConfigError> {
    let mut trust = TrustStore::empty().with_pem_certificate(AWS_ROOT_CERTIFICATES);
    if let Some(pem) = extra_root {
        trust = trust.with_pem_certificate(pem);
    }
    let context = TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .map_err(|e| ConfigError::new("TEST_EXTRA_ROOT_CERT_FILE", e.to_string()))?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .tls_context(context)
        .build_https())
}

/// Runs an API (lambda_http) function.
pub async fn run_api_function<D, Fut>(
    build: fn(&AwsClients, &Settings) -> Result<D, ConfigError>,
    handle: fn(&'static D, Request) -> Fut,
) -> Result<(), lambda_runtime::Error>
where
    D: Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send,
{
    let deps = cold_start(build).await?;
    lambda_http::run(lambda_http::service_fn(move |request: Request| {
        let response = handle(deps, request);
        async move { Ok::<_, std::convert::Infallible>(response.await) }
    }))
    .await
}

/// An event handler's answer as Lambda takes it. A batch response is a successful invocation
/// (the items that failed are listed in it); a `Result`'s `Err` is a failed invocation, which
/// Lambda counts in the function's `Errors` metric and retries or passes on as the event
/// source says.
pub trait Invocation: Send {
    type Payload: Serialize + Send;
    fn into_invocation(self) -> Result<Self::Payload, lambda_runtime::Error>;
}

impl Invocation for aws_lambda_events::streams::DynamoDbEventResponse {
    type Payload = Self;
    fn into_invocation(self) -> Result<Self, lambda_runtime::Error> {
        Ok(self)
    }
}

impl Invocation for aws_lambda_events::sqs::SqsBatchResponse {
    type Payload = Self;
    fn into_invocation(self) -> Result<Self, lambda_runtime::Error> {
        Ok(self)
    }
}

impl<T: Serialize + Send, E: std::error::Error + Send + Sync + 'static> Invocation for Result<T, E> {
    type Payload = T;
    fn into_invocation(self) -> Result<T, lambda_runtime::Error> {
        self.map_err(Into::into)
    }
}

/// Runs an event (lambda_runtime) function: a stream or queue consumer, or a scheduled one.
pub async fn run_event_function<D, E, Fut>(
    build: fn(&AwsClients, &Settings) -> Result<D, ConfigError>,
    handle: fn(&'static D, E) -> Fut,
) -> Result<(), lambda_runtime::Error>
where
    D: Sync + 'static,
    E: DeserializeOwned + Send + 'static,
    Fut: Future + Send,
    Fut::Output: Invocation,
{
    let deps = cold_start(build).await?;
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<E>| {
        let response = handle(deps, event.payload);
        async move { response.await.into_invocation() }
    }))
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_error_is_a_failed_invocation_and_a_batch_answer_a_successful_one() {
        let failed: Result<(), std::io::Error> = Err(std::io::Error::other("the table is gone"));
        assert_eq!(failed.into_invocation().unwrap_err().to_string(), "the table is gone");
        assert!(Ok::<_, std::io::Error>(3).into_invocation().is_ok());
        let batch = aws_lambda_events::sqs::SqsBatchResponse::default();
        assert!(batch.into_invocation().is_ok());
    }

    fn lambda_environment(extra: &[(&str, &str)]) -> Vec<(String, String)> {
        [("AWS_REGION", "eu-west-1"), ("AWS_ACCESS_KEY_ID", "ASIAEXAMPLE"), ("AWS_SECRET_ACCESS_KEY", "secret")]
            .iter()
            .chain(extra)
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    fn endpoint_of(sdk: &SdkConfig, service_id: &str) -> Option<String> {
        let key = ServiceConfigKey::builder()
            .service_id(service_id)
            .env(GLOBAL_ENDPOINT_VAR)
            .profile("endpoint_url")
            .build()
            .expect("a complete key");
        sdk.service_config()?.load_config(key)
    }

    #[test]
    fn region_credentials_and_service_endpoints_come_from_the_environment() {
        let sdk = sdk_config(lambda_environment(&[
            ("AWS_ENDPOINT_URL_DYNAMODB", "https://127.0.0.1:8443"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:9324"),
        ]))
        .expect("a configuration");
        assert_eq!(sdk.region().map(|r| r.as_ref()), Some("eu-west-1"));
        assert!(sdk.credentials_provider().is_some());
        assert_eq!(sdk.endpoint_url(), None);
        assert_eq!(endpoint_of(&sdk, "DynamoDB").as_deref(), Some("https://127.0.0.1:8443"));
        assert_eq!(endpoint_of(&sdk, "SQS").as_deref(), Some("http://127.0.0.1:9324"));
        assert_eq!(endpoint_of(&sdk, "DynamoDB Streams"), None);

        let global = sdk_config(lambda_environment(&[("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")])).unwrap();
        assert_eq!(global.endpoint_url(), Some("http://127.0.0.1:4566"));
        assert_eq!(endpoint_of(&global, "DynamoDB"), None);
    }

    #[test]
    fn credentials_must_be_in_the_environment() {
        let missing = sdk_config([("AWS_REGION".to_owned(), "eu-west-1".to_owned())]).unwrap_err();
        assert!(missing.to_string().contains("AWS_ACCESS_KEY_ID"), "{missing}");
    }

    #[cfg(feature = "extra-root-cert")]
    #[test]
    fn the_extra_root_must_be_readable() {
        let unreadable = sdk_config(lambda_environment(&[(EXTRA_ROOT_CERT_VAR, "/nonexistent/root.pem")])).unwrap_err();
        assert!(unreadable.to_string().contains(EXTRA_ROOT_CERT_VAR), "{unreadable}");
    }

    #[test]
    fn the_local_stacks_factor_widens_every_time_limit_and_aws_gets_its_own() {
        let limits = |sdk: SdkConfig| {
            let config = sdk.timeout_config().expect("time limits").clone();
            (config.connect_timeout(), config.operation_attempt_timeout(), config.operation_timeout())
        };
        let secs = |n| Some(Duration::from_secs(n));
        assert_eq!(limits(sdk_config(lambda_environment(&[])).unwrap()), (secs(1), secs(2), secs(4)));
        let widened = sdk_config(lambda_environment(&[(TIMEOUT_FACTOR_VAR, "5")])).unwrap();
        assert_eq!(limits(widened), (secs(5), secs(10), secs(20)));
        for bad in ["0", "-1", "1.5", "101", "x"] {
            let refused = sdk_config(lambda_environment(&[(TIMEOUT_FACTOR_VAR, bad)])).unwrap_err();
            assert!(refused.to_string().contains(TIMEOUT_FACTOR_VAR), "{bad}: {refused}");
        }
    }

    /// Without the feature (the deployed binaries), the variable is not even read.
    #[cfg(not(feature = "extra-root-cert"))]
    #[test]
    fn without_the_feature_the_extra_root_is_ignored() {
        assert!(sdk_config(lambda_environment(&[("TEST_EXTRA_ROOT_CERT_FILE", "/nonexistent/root.pem")])).is_ok());
    }
}
