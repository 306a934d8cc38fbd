#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    career_core::runtime::run_event_function(
        |sdk, settings| {
            career_sweep::Deps::new(&aws_sdk_dynamodb::Client::new(sdk), &aws_sdk_sqs::Client::new(sdk), settings)
        },
        career_sweep::handle,
    )
    .await
}
