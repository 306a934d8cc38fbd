//! Running the functions on Lambda: logging, settings, the AWS clients and a function's
//! dependencies are set up once per cold start, then every event goes to its handler.
//! This is the only module that starts a Lambda runtime.

use std::future::Future;
use std::time::Duration;

use lambda_http::lambda_runtime::{self, LambdaEvent};
use lambda_http::{Body, Request, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

use aws_config::environment::EnvironmentVariableCredentialsProvider;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::SharedHttpClient;
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};

use crate::config::{ConfigError, Settings};

/// Setup shared by both kinds of function. The dependencies live as long as the process,
/// like the Lambda execution environment, hence the leak.
/// `build` creates only the clients its function uses; creating one makes no network call.
async fn cold_start<D: 'static>(
    build: fn(&SdkConfig, &Settings) -> Result<D, ConfigError>,
) -> Result<&'static D, lambda_runtime::Error> {
    crate::telemetry::init();
    let settings = Settings::from_env()?;
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).http_client(aws_https_client()?).timeout_config(aws_timeouts());
    // Lambda puts the region and the role's credentials in the environment; naming them
    // spares every cold start the default provider chains (profile files, IMDS, ECS).
    if let Ok(region) = std::env::var("AWS_REGION") {
        loader = loader.region(Region::new(region));
    }
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_some() {
        loader = loader.credentials_provider(EnvironmentVariableCredentialsProvider::new());
    }
    let sdk = loader.load().await;
    Ok(Box::leak(Box::new(build(&sdk, &settings)?)))
}

/// Time limits of every AWS call, here, in the local stack and in the tests. A hung
/// dependency then costs a request at most [`AWS_OPERATION_TIMEOUT`] and a 500, well inside
/// the API functions' 10 s Lambda timeout; a slow attempt is retried within that budget.
pub fn aws_timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(1))
        .operation_attempt_timeout(Duration::from_secs(2))
        .operation_timeout(AWS_OPERATION_TIMEOUT)
        .build()
}

/// The longest one AWS call (all its attempts) may take.
pub const AWS_OPERATION_TIMEOUT: Duration = Duration::from_secs(4);

/// The roots that AWS service endpoints chain to (Amazon Trust Services).
const AWS_ROOT_CERTIFICATES: &[u8] = include_bytes!("amazon-trust-services-roots.pem");

/// The SDK's HTTPS client trusting only the roots AWS endpoints use. The default client
/// reads and parses the platform's whole certificate store at every cold start, which was
/// most of the functions' start-up time (BENCHMARKS.md, cold start).
fn aws_https_client() -> Result<SharedHttpClient, lambda_runtime::Error> {
    let trust = TrustStore::empty().with_pem_certificate(AWS_ROOT_CERTIFICATES);
    let context = TlsContext::builder().with_trust_store(trust).build()?;
    Ok(aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
        .tls_context(context)
        .build_https())
}

/// Runs an API (lambda_http) function.
pub async fn run_api_function<D, Fut>(
    build: fn(&SdkConfig, &Settings) -> Result<D, ConfigError>,
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

/// Runs an event (lambda_runtime) function: a stream or queue consumer.
pub async fn run_event_function<D, E, R, Fut>(
    build: fn(&SdkConfig, &Settings) -> Result<D, ConfigError>,
    handle: fn(&'static D, E) -> Fut,
) -> Result<(), lambda_runtime::Error>
where
    D: Sync + 'static,
    E: DeserializeOwned + Send + 'static,
    R: Serialize + Send,
    Fut: Future<Output = R> + Send,
{
    let deps = cold_start(build).await?;
    lambda_runtime::run(lambda_runtime::service_fn(move |event: LambdaEvent<E>| {
        let response = handle(deps, event.payload);
        async move { Ok::<_, std::convert::Infallible>(response.await) }
    }))
    .await
}
