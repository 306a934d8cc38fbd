#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    career_core::aws::runtime::run_event_function(career_fanout::Deps::new, career_fanout::handle).await
}
