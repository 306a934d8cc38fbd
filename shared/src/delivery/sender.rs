//! Sends a signed delivery: 10-second timeout, no redirects, and (unless insecure URLs are
//! allowed) a resolver that refuses hosts resolving to private addresses and hands the
//! connection only the addresses it checked, so DNS rebinding cannot slip through.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::SignedDelivery;
use crate::netguard;

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How one attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Delivered(u16),
    /// Any other answer, a timeout, a refused address or a transport error.
    Failed(String),
}

#[derive(Clone)]
pub struct Sender {
    agent: ureq::Agent,
}

impl Sender {
    pub fn new(allow_insecure: bool) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout(TIMEOUT)
            .redirects(0)
            .resolver(GuardedResolver { allow_insecure })
            .build();
        Sender { agent }
    }

    /// Blocking: run it off the async executor.
    pub fn send(&self, url: &str, delivery: &SignedDelivery) -> Outcome {
        let request =
            delivery.headers.iter().fold(self.agent.post(url), |request, (name, value)| request.set(name, value));
        match request.send_bytes(&delivery.body) {
            Ok(response) if (200..300).contains(&response.status()) => Outcome::Delivered(response.status()),
            Ok(response) => Outcome::Failed(format!("answered {}", response.status())),
            Err(ureq::Error::Status(status, _)) => Outcome::Failed(format!("answered {status}")),
            Err(ureq::Error::Transport(transport)) => Outcome::Failed(failure_reason(&transport)),
        }
    }
}

/// A short sentence on what went wrong, without the URL: ureq's own message starts with the
/// whole URL, whose query string or user-info may hold a credential.
fn failure_reason(transport: &ureq::Transport) -> String {
    use std::error::Error as _;
    let io = transport.source().and_then(|source| source.downcast_ref::<io::Error>());
    match io.map(io::Error::kind) {
        Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => format!("timed out after {} s", TIMEOUT.as_secs()),
        Some(io::ErrorKind::ConnectionRefused) => "connection refused".to_owned(),
        // The guarded resolver's refusal names the host and the address, nothing more.
        Some(io::ErrorKind::PermissionDenied) => format!("refused: {}", io.expect("an I/O error")),
        _ => {
            let mut reason = transport.kind().to_string();
            // Only a URL that ureq cannot use is quoted in its message.
            let quotes_url = matches!(transport.kind(), ureq::ErrorKind::InvalidUrl | ureq::ErrorKind::UnknownScheme);
            if let Some(message) = transport.message().filter(|_| !quotes_url) {
                reason.push_str(": ");
                reason.push_str(message);
            }
            if let Some(source) = transport.source() {
                reason.push_str(&format!(": {source}"));
            }
            reason
        }
    }
}

struct GuardedResolver {
    allow_insecure: bool,
}

impl ureq::Resolver for GuardedResolver {
    fn resolve(&self, netloc: &str) -> io::Result<Vec<SocketAddr>> {
        let addresses: Vec<SocketAddr> = netloc.to_socket_addrs()?.collect();
        if !self.allow_insecure {
            check_addresses(netloc, &addresses)?;
        }
        Ok(addresses)
    }
}

/// Refuses a host if any of its addresses is private, loopback, link-local or reserved.
fn check_addresses(netloc: &str, addresses: &[SocketAddr]) -> io::Result<()> {
    match addresses.iter().find(|address| netguard::is_forbidden(address.ip())) {
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

    #[test]
    fn refuses_hosts_with_any_private_address() {
        let public: SocketAddr = "93.184.216.34:443".parse().unwrap();
        let metadata: SocketAddr = "169.254.169.254:80".parse().unwrap();
        assert!(check_addresses("example.com:443", &[public]).is_ok());
        let refused = check_addresses("evil.example:80", &[public, metadata]).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::PermissionDenied);
        assert!(refused.to_string().contains("169.254.169.254"));
    }

    /// A loopback port that refuses connections (bound, then closed).
    fn closed_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn failure_reasons_never_quote_the_query_string() {
        let delivery = SignedDelivery { body: b"{}".to_vec(), headers: Vec::new() };
        let refused = format!("http://127.0.0.1:{}/hook?token=s3cret", closed_port());
        let Outcome::Failed(reason) = Sender::new(true).send(&refused, &delivery) else { panic!("delivered") };
        assert_eq!(reason, "connection refused");
        let guarded = format!("http://localhost:{}/hook?token=s3cret", closed_port());
        let Outcome::Failed(reason) = Sender::new(false).send(&guarded, &delivery) else { panic!("delivered") };
        assert!(reason.starts_with("refused: localhost:") && reason.contains("non-public address"), "{reason}");
        assert!(!reason.contains("s3cret") && !reason.contains("token"), "{reason}");
    }

    #[test]
    fn a_receiver_that_never_answers_times_out_without_its_url_in_the_reason() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}/hook?token=s3cret", listener.local_addr().unwrap().port());
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_millis(200)).build();
        let Err(ureq::Error::Transport(transport)) = agent.post(&url).send_bytes(b"{}") else { panic!("answered") };
        assert!(transport.to_string().contains("s3cret"), "ureq's own message quotes the URL");
        assert_eq!(failure_reason(&transport), format!("timed out after {} s", TIMEOUT.as_secs()));
        drop(listener);
    }

    #[test]
    fn the_guard_applies_to_names_that_resolve_to_loopback() {
        let guarded = GuardedResolver { allow_insecure: false };
        assert!(ureq::Resolver::resolve(&guarded, "localhost:80").is_err());
        assert!(ureq::Resolver::resolve(&guarded, "127.0.0.1:80").is_err());
        let open = GuardedResolver { allow_insecure: true };
        assert!(!ureq::Resolver::resolve(&open, "127.0.0.1:80").unwrap().is_empty());
    }
}
