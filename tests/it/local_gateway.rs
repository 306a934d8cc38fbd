//! The local gateway (local-aws/src/gateway/) as a client on a socket sees it: its own
//! answers to bodies it cannot pass on, and connections that go idle.

use std::sync::Arc;
use std::time::Duration;

use career_service::{clients_at, settings_without_kms_or_queues, DEADLINE};
use local_aws::gateway::{self, ApiFunctions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Short, so the tests need not wait the real 30 s.
const IDLE: Duration = Duration::from_millis(500);

/// A gateway on a free loopback port. Nothing here reaches a function's storage or KMS, so
/// its DynamoDB, KMS and SQS clients point at a port where nothing listens.
async fn gateway() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let unreachable = "http://127.0.0.1:9";
    let settings = settings_without_kms_or_queues(unreachable);
    let functions =
        ApiFunctions::new(&career_service::deployment(&settings), &clients_at(unreachable, unreachable), &settings)
            .unwrap();
    tokio::spawn(gateway::serve(listener, Arc::new(functions), IDLE));
    address
}

/// Everything the server sends until it closes the connection.
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let read = tokio::time::timeout(DEADLINE, stream.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the connection is still open; received so far: {:?}", String::from_utf8_lossy(&received));
    String::from_utf8_lossy(&received).into_owned()
}

const CHUNKED_PUT: &str = "PUT /api/v1/data-sharing HTTP/1.1\r\nHost: local\r\nContent-Type: application/json\r\n\
                           Transfer-Encoding: chunked\r\n\r\n";

#[tokio::test]
async fn a_malformed_chunked_body_is_a_bad_request() {
    let address = gateway().await;
    for broken in ["zz\r\n{}\r\n0\r\n\r\n", "2\r\n{}XX0\r\n\r\n", "fffffffffffffffffff\r\n"] {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        stream.write_all(format!("{CHUNKED_PUT}{broken}").as_bytes()).await.unwrap();
        let answer = read_until_closed(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 400 "), "{broken:?}: {answer}");
        assert!(answer.ends_with(r#"{"message":"Bad Request"}"#), "{answer}");
    }
}

#[tokio::test]
async fn a_body_over_10_mib_is_still_too_large() {
    let address = gateway().await;
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let size = 10 * 1024 * 1024 + 1;
    let head = format!("PUT /api/v1/data-sharing HTTP/1.1\r\nHost: local\r\nContent-Length: {size}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    // The gateway may answer and close before it has read everything.
    let _ = stream.write_all(&vec![b'x'; size]).await;
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
}

#[tokio::test]
async fn connections_that_send_nothing_are_closed() {
    let address = gateway().await;
    let mut silent = TcpStream::connect(&address).await.unwrap();
    assert_eq!(read_until_closed(&mut silent).await, "");

    let mut half_a_head = TcpStream::connect(&address).await.unwrap();
    half_a_head.write_all(b"GET /api/v1/alerts HTTP/1.1\r\nHost: lo").await.unwrap();
    read_until_closed(&mut half_a_head).await;

    // Kept alive after an answer, then idle.
    let mut kept = TcpStream::connect(&address).await.unwrap();
    kept.write_all(b"GET /nowhere HTTP/1.1\r\nHost: local\r\n\r\n").await.unwrap();
    let answer = read_until_closed(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_timed_out() {
    let address = gateway().await;
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let head = "PUT /api/v1/data-sharing HTTP/1.1\r\nHost: local\r\nContent-Length: 100\r\n\r\n{\"shareProfileData\"";
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
}
