//! Sends a signed delivery: 10-second timeout, no redirects, and a resolver that refuses
//! hosts resolving to private addresses the guard does not allow and hands the connection
//! only the addresses it checked, so DNS rebinding cannot slip through.

use std::io::{self, Read};
use std::net::{SocketAddr, ToSocketAddrs};

use crate::delivery::attempt::{response_excerpt, Answer, Outcome, SendFailure, MAX_RESPONSE_BODY_BYTES, TIMEOUT};
use crate::delivery::SignedDelivery;
use crate::webhooks::netguard;

#[derive(Clone)]
pub struct Sender {
    agent: ureq::Agent,
}

impl Sender {
    pub fn new(guard: netguard::Guard) -> Self {
        let agent = ureq::AgentBuilder::new().timeout(TIMEOUT).redirects(0).resolver(GuardedResolver { guard }).build();
        Sender { agent }
    }

    /// Blocking: run it off the async executor.
    pub fn send(&self, url: &str, delivery: &SignedDelivery) -> Outcome {
        let request =
            delivery.headers.iter().fold(self.agent.post(url), |request, (name, value)| request.set(name, value));
        match request.send_bytes(&delivery.body) {
            Ok(response) if (200..300).contains(&response.status()) => Outcome::Delivered(answer(response)),
            Ok(response) | Err(ureq::Error::Status(_, response)) => Outcome::Rejected(answer(response)),
            Err(ureq::Error::Transport(transport)) => Outcome::NoAnswer(reason(&transport)),
        }
    }
}

/// The status and the start of the body (what arrives of it within the timeout).
fn answer(response: ureq::Response) -> Answer {
    let status = response.status();
    let retry_after = response.header("Retry-After").map(str::to_owned);
    let mut body = Vec::new();
    let _ = response.into_reader().take(MAX_RESPONSE_BODY_BYTES as u64).read_to_end(&mut body);
    Answer { status, body: response_excerpt(&body), retry_after }
}

fn reason(transport: &ureq::Transport) -> SendFailure {
    let io_kind =
        std::error::Error::source(transport).and_then(|source| source.downcast_ref::<io::Error>()).map(io::Error::kind);
    match (transport.kind(), io_kind) {
        (_, Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)) => SendFailure::TimedOut,
        (ureq::ErrorKind::Dns, Some(io::ErrorKind::PermissionDenied)) => SendFailure::PrivateAddress,
        (ureq::ErrorKind::Dns, _) => SendFailure::UnknownHost,
        (_, Some(io::ErrorKind::ConnectionRefused)) => SendFailure::ConnectionRefused,
        (_, Some(io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted | io::ErrorKind::UnexpectedEof)) => {
            SendFailure::ConnectionClosed
        }
        (ureq::ErrorKind::BadStatus | ureq::ErrorKind::BadHeader, _) => SendFailure::InvalidResponse,
        (ureq::ErrorKind::ConnectionFailed, _) => SendFailure::ConnectionFailed,
        (ureq::ErrorKind::InvalidUrl | ureq::ErrorKind::UnknownScheme, _) => SendFailure::UnusableUrl,
        _ => SendFailure::Other,
    }
}

struct GuardedResolver {
    guard: netguard::Guard,
}

impl ureq::Resolver for GuardedResolver {
    fn resolve(&self, netloc: &str) -> io::Result<Vec<SocketAddr>> {
        let addresses: Vec<SocketAddr> = netloc.to_socket_addrs()?.collect();
        check_addresses(&self.guard, netloc, &addresses)?;
        Ok(addresses)
    }
}

/// Refuses a host if the guard refuses any of its addresses (private, loopback, link-local
/// or reserved, and not allowed).
fn check_addresses(guard: &netguard::Guard, netloc: &str, addresses: &[SocketAddr]) -> io::Result<()> {
    match addresses.iter().find(|address| guard.refuses(address.ip())) {
        Some(address) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{netloc} resolves to the non-public address {}", address.ip()),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::Duration;

    fn loopback() -> netguard::Guard {
        crate::webhooks::UrlPolicy::local_stack().guard
    }

    fn delivery() -> SignedDelivery {
        SignedDelivery { body: b"{}".to_vec(), headers: vec![("Content-Type", "application/json".into())] }
    }

    /// A loopback server that answers one request with `response`; its URL.
    fn answering(response: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(response);
        });
        url
    }

    #[test]
    fn an_answer_keeps_its_status_and_the_start_of_its_body() {
        let sender = Sender::new(loopback());
        let url = answering(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops");
        let outcome = sender.send(&url, &delivery());
        assert_eq!(outcome, Outcome::Rejected(Answer { status: 500, body: "oops".into(), retry_after: None }));
        assert_eq!(outcome.error().as_deref(), Some("answered 500"));

        let url = answering(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok");
        let outcome = sender.send(&url, &delivery());
        assert_eq!(outcome, Outcome::Delivered(Answer { status: 202, body: "ok".into(), retry_after: None }));
        assert_eq!(outcome.error(), None);

        let url = answering(b"HTTP/1.1 503 Unavailable\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n");
        let Outcome::Rejected(answer) = sender.send(&url, &delivery()) else { panic!("not rejected") };
        assert_eq!((answer.status, answer.retry_after.as_deref()), (503, Some("3")));

        let url = answering(b"HTTP/1.1 301 Moved\r\nLocation: http://127.0.0.1:9/\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(sender.send(&url, &delivery()).error().as_deref(), Some("answered 301"), "not followed");
    }

    #[test]
    fn no_answer_is_said_in_a_short_sentence() {
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let url = format!("http://{closed}/hook");
        assert_eq!(Sender::new(loopback()).send(&url, &delivery()), Outcome::NoAnswer(SendFailure::ConnectionRefused));
        assert_eq!(
            Sender::new(netguard::Guard::default()).send(&url, &delivery()),
            Outcome::NoAnswer(SendFailure::PrivateAddress)
        );
    }

    #[test]
    fn no_answer_never_quotes_the_url() {
        let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        for (guard, host) in [(loopback(), "127.0.0.1"), (netguard::Guard::default(), "localhost")] {
            let url = format!("http://{host}:{}/hook?token=s3cret", closed.port());
            let Outcome::NoAnswer(failure) = Sender::new(guard).send(&url, &delivery()) else { panic!("answered") };
            let reason = failure.to_string();
            assert!(!reason.contains("s3cret") && !reason.contains("token") && !reason.contains(host), "{reason}");
        }
    }

    #[test]
    fn a_receiver_that_never_answers_times_out_without_its_url_in_the_reason() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}/hook?token=s3cret", listener.local_addr().unwrap().port());
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_millis(200)).build();
        let Err(ureq::Error::Transport(transport)) = agent.post(&url).send_bytes(b"{}") else { panic!("answered") };
        assert!(transport.to_string().contains("s3cret"), "ureq's own message quotes the URL");
        assert_eq!(reason(&transport).to_string(), format!("timed out after {} s", TIMEOUT.as_secs()));
        drop(listener);
    }

    #[test]
    fn refuses_hosts_with_any_private_address() {
        let public: SocketAddr = "93.184.216.34:443".parse().unwrap();
        let metadata: SocketAddr = "169.254.169.254:80".parse().unwrap();
        let guard = loopback();
        assert!(check_addresses(&guard, "example.com:443", &[public]).is_ok());
        let refused = check_addresses(&guard, "evil.example:80", &[public, metadata]).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        assert!(refused.to_string().contains("169.254.169.254"));
    }

    #[test]
    fn the_guard_applies_to_names_that_resolve_to_loopback() {
        let guarded = GuardedResolver { guard: netguard::Guard::default() };
        assert!(ureq::Resolver::resolve(&guarded, "localhost:80").is_err());
        assert!(ureq::Resolver::resolve(&guarded, "127.0.0.1:80").is_err());
        let open = GuardedResolver { guard: loopback() };
        assert!(!ureq::Resolver::resolve(&open, "127.0.0.1:80").unwrap().is_empty());
        assert!(ureq::Resolver::resolve(&open, "10.0.0.1:80").is_err(), "loopback only");
    }
}
