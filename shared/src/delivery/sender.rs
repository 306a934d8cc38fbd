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
            Err(ureq::Error::Transport(transport)) => Outcome::Failed(transport.to_string()),
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

    #[test]
    fn the_guard_applies_to_names_that_resolve_to_loopback() {
        let guarded = GuardedResolver { allow_insecure: false };
        assert!(ureq::Resolver::resolve(&guarded, "localhost:80").is_err());
        assert!(ureq::Resolver::resolve(&guarded, "127.0.0.1:80").is_err());
        let open = GuardedResolver { allow_insecure: true };
        assert!(!ureq::Resolver::resolve(&open, "127.0.0.1:80").unwrap().is_empty());
    }
}
