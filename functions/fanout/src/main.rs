use career_core::config::{aws_sdk_config, Settings};
use lambda_runtime::{service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    career_core::telemetry::init();
    let settings = Settings::from_env()?;
    let sdk = aws_sdk_config().await;
    let deps =
        &career_fanout::Deps::new(&aws_sdk_dynamodb::Client::new(&sdk), &aws_sdk_sqs::Client::new(&sdk), &settings)?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<_>| async move {
        Ok::<_, std::convert::Infallible>(career_fanout::handle(deps, event.payload).await)
    }))
    .await
}
