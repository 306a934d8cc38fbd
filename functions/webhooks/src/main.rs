#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    career_core::api::run_on_lambda(career_webhooks::Deps::new, career_webhooks::handle).await
}
