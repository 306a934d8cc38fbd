#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    career_core::aws::runtime::run_api_function(career_data_sharing::Deps::new, career_data_sharing::handle).await
}
