#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    career_core::aws::runtime::run_event_function(career_deliver::Deps::new, career_deliver::handle).await
}
