#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    career_core::runtime::run_event_function(
        |clients, settings| career_fanout::Deps::new(&clients.dynamodb, &clients.sqs, settings),
        career_fanout::handle,
    )
    .await
}
