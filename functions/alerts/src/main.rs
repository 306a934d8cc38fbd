#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    career_core::aws::runtime::run_api_function(career_alerts::Deps::new, career_alerts::handle).await
}
