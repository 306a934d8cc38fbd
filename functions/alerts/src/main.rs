#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    career_core::api::run_on_lambda(career_alerts::Deps::new, career_alerts::handle).await
}
