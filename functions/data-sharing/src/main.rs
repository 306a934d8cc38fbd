#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    career_core::runtime::run_api_function(
        |clients, settings| career_data_sharing::Deps::new(&clients.dynamodb, settings),
        career_data_sharing::handle,
    )
    .await
}
