//! The cold-start baseline of `make bench`: the smallest lambda_runtime function (it
//! echoes its event), built with the same release profile as the service's functions.

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(|event: LambdaEvent<Value>| async move { Ok::<Value, Error>(event.payload) })).await
}
