#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    career_core::runtime::run_api_function(
        |sdk, settings| {
            career_webhooks::Deps::new(
                &aws_sdk_dynamodb::Client::new(sdk),
                &aws_sdk_kms::Client::new(sdk),
                &aws_sdk_sqs::Client::new(sdk),
                settings,
            )
        },
        career_webhooks::handle,
    )
    .await
}
