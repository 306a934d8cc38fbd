#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    career_core::api::run_on_lambda(career_data_sharing::Deps::new, career_data_sharing::handle).await
}
