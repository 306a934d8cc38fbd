//! What one delivery attempt saw (contract sections 5 and 9): the receiver's answer, or why
//! there was none. A leaf of `delivery`, so the sender (which produces it) and the log (which
//! records it) depend on it and not on each other.

use std::time::Duration;

use super::aws_destination::DestinationFailure;

/// Success is a 2xx within this long (contract section 5).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How one attempt ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Delivered(Answer),
    /// Any other answer (redirects are not followed, so they land here too).
    Rejected(Answer),
    /// No HTTP answer, and why.
    NoAnswer(SendFailure),
    /// An AWS call of the attempt failed: a destination in the receiver's AWS account
    /// (contract section 17) did not take the message, or no identity token could be had for
    /// an HTTP receiver (section 21, nothing sent). Which call, and why.
    NotTaken(DestinationFailure),
}

/// Why an attempt got no HTTP answer. Its text, the record's `lastError`, is a short
/// sentence for a receiver's developer: no URL (whose query may hold a credential) and no
/// internals of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendFailure {
    #[error("timed out after {} s", TIMEOUT.as_secs())]
    TimedOut,
    #[error("refused: resolves to a private address")]
    PrivateAddress,
    #[error("the host name does not resolve")]
    UnknownHost,
    #[error("connection refused")]
    ConnectionRefused,
    #[error("the connection closed before an answer")]
    ConnectionClosed,
    #[error("answered with an invalid HTTP response")]
    InvalidResponse,
    #[error("could not connect")]
    ConnectionFailed,
    #[error("the URL cannot be used")]
    UnusableUrl,
    #[error("the connection failed")]
    Other,
    /// The blocking task that sends could not run to its end (a panic or a shutdown).
    #[error("the sending task failed")]
    TaskFailed,
}

/// The receiver's answer: its status, the start of its body and its `Retry-After`.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// At most the first 1024 bytes, as text.
    pub body: String,
    /// The `Retry-After` header as sent, read by the delivery plan.
    pub retry_after: Option<String>,
}

impl Outcome {
    pub fn answer(&self) -> Option<&Answer> {
        match self {
            Outcome::Delivered(answer) | Outcome::Rejected(answer) => Some(answer),
            Outcome::NoAnswer(_) | Outcome::NotTaken(_) => None,
        }
    }

    /// What went wrong, in a short sentence; `None` after a success.
    pub fn error(&self) -> Option<String> {
        match self {
            Outcome::Delivered(_) => None,
            Outcome::Rejected(answer) => Some(format!("answered {}", answer.status)),
            Outcome::NoAnswer(failure) => Some(failure.to_string()),
            Outcome::NotTaken(failure) => Some(failure.to_string()),
        }
    }
}

/// How much of a receiver's answer a record keeps.
pub const MAX_RESPONSE_BODY_BYTES: usize = 1024;

/// What a record keeps of a receiver's answer: at most its first 1024 bytes, as text.
pub fn response_excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(MAX_RESPONSE_BODY_BYTES)]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_excerpt_is_the_first_1024_bytes_as_text() {
        assert_eq!(response_excerpt(b"oops"), "oops");
        assert_eq!(response_excerpt(&[b'a'; 3000]).len(), 1024);
        assert_eq!(response_excerpt(b"bad \xff byte"), "bad \u{fffd} byte");
        // A character cut at the limit becomes a replacement character.
        let mut cut = vec![b'a'; 1023];
        cut.extend_from_slice("é".as_bytes());
        assert!(response_excerpt(&cut).ends_with('\u{fffd}'));
    }
}
