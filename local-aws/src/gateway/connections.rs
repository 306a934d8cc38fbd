//! An HTTP/1 server loop on a listener, for the local gateway and the stack's other loopback
//! servers (the identity token issuer's documents): a leaf, so each can use it.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioIo, TokioTimer};
use lambda_http::http;
use tokio::net::TcpListener;

/// Answers each HTTP/1 request on `listener` with `respond`, each connection on a task of
/// its own, until the task is dropped. With an `idle_timeout`, a connection that sends no
/// request for that long is closed.
pub async fn serve_connections<Respond, Answered>(
    listener: TcpListener,
    idle_timeout: Option<Duration>,
    respond: Respond,
) -> std::io::Result<()>
where
    Respond: Fn(http::Request<Incoming>) -> Answered + Clone + Send + Sync + 'static,
    Answered: std::future::Future<Output = Result<http::Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    loop {
        let (stream, _) = listener.accept().await?;
        let service = hyper::service::service_fn(respond.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            // The header read timeout runs from the moment hyper waits for a request's first
            // byte, so it also ends connections that are idle before or between requests.
            if let Some(timeout) = idle_timeout {
                builder.timer(TokioTimer::new()).header_read_timeout(timeout);
            }
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}
