//! Webhook receivers on loopback: one that records what it gets and answers from a script,
//! and one that never answers.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use lambda_http::http::{HeaderMap, Response, StatusCode};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use crate::eventually_within;

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the request arrived.
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

pub struct Receiver {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    /// Requests accepted and not yet answered (or given up by the sender), now and at most.
    open_requests: Arc<OpenRequests>,
    /// Whether answers go out (see [`Receiver::holding`]).
    open: tokio::sync::watch::Sender<bool>,
}

impl Receiver {
    /// Answers the n-th request with `statuses[n]` (the last one repeats), after `delay`.
    pub async fn start(statuses: &[u16], delay: Duration) -> Self {
        Self::answering(statuses, "", delay).await
    }

    /// Like `start`, every answer carrying the body `answer`.
    pub async fn answering(statuses: &[u16], answer: &'static str, delay: Duration) -> Self {
        Self::scripted(statuses, answer, &[], delay).await
    }

    /// Like `answering`, every answer also carrying `headers` (a `Retry-After`, say).
    pub async fn scripted(
        statuses: &[u16],
        answer: &'static str,
        headers: &'static [(&'static str, &'static str)],
        delay: Duration,
    ) -> Self {
        Self::serve(statuses, answer, headers, delay, true, Counted::EveryRequest).await
    }

    /// Answers each delivery's n-th attempt (its n-th request with that `webhook-id`) with
    /// `statuses[n]` (the last one repeats), after `delay`: `[500, 200]` fails every first
    /// attempt once, however the deliveries' attempts interleave.
    pub async fn per_delivery(statuses: &[u16], delay: Duration) -> Self {
        Self::serve(statuses, "", &[], delay, true, Counted::EachDelivery).await
    }

    /// Like `start` without a delay, but answering nothing until [`Receiver::open`]: the
    /// deliveries it takes stay in flight for as long as the test needs, however slow the
    /// machine.
    pub async fn holding(statuses: &[u16]) -> Self {
        Self::serve(statuses, "", &[], Duration::ZERO, false, Counted::EveryRequest).await
    }

    /// Answers the requests held so far, and every later one at once.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    async fn serve(
        statuses: &[u16],
        answer: &'static str,
        headers: &'static [(&'static str, &'static str)],
        delay: Duration,
        open: bool,
        counted: Counted,
    ) -> Self {
        let (open, opened) = tokio::sync::watch::channel(open);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().unwrap().port());
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let statuses: Arc<Vec<u16>> = Arc::new(statuses.to_vec());
        let open_requests: Arc<OpenRequests> = Arc::default();
        let (log, gauge) = (received.clone(), open_requests.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, gauge, statuses, opened) = (log.clone(), gauge.clone(), statuses.clone(), opened.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                        let (log, statuses, mut opened) = (log.clone(), statuses.clone(), opened.clone());
                        let pending = OpenRequest::of(&gauge);
                        async move {
                            let _pending = pending;
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let at = Instant::now();
                            let n = {
                                let mut log = log.lock().unwrap();
                                log.push(Received { headers: parts.headers, body, at });
                                match counted {
                                    Counted::EveryRequest => log.len(),
                                    Counted::EachDelivery => {
                                        let id = log[log.len() - 1].header("webhook-id").to_owned();
                                        log.iter().filter(|r| r.header("webhook-id") == id).count()
                                    }
                                }
                            };
                            let _ = opened.wait_for(|open| *open).await;
                            tokio::time::sleep(delay).await;
                            let status = statuses.get(n - 1).or(statuses.last()).copied().unwrap_or(200);
                            let mut response = Response::new(Full::new(Bytes::from_static(answer.as_bytes())));
                            *response.status_mut() = StatusCode::from_u16(status).unwrap();
                            for (name, value) in headers {
                                response.headers_mut().insert(*name, value.parse().unwrap());
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { url, received, open_requests, open }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The most requests this receiver had open at one moment: accepted and neither answered
    /// yet nor given up by the sender. What a sender had in flight at once, counted where it
    /// is true however slowly the machine runs (unlike arrivals within some span of time).
    pub fn most_open(&self) -> usize {
        self.open_requests.most.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` requests arrived (panics after `within`).
    pub async fn wait_for(&self, count: usize, within: Duration) -> Vec<Received> {
        eventually_within(within, format!("{count} requests at {}", self.url), || async {
            let received = self.received();
            if received.len() >= count {
                Ok(received)
            } else {
                Err(format!("{} arrived", received.len()))
            }
        })
        .await
    }
}

/// Which requests a receiver's script counts: its answer to a request is the script's entry at
/// that count.
#[derive(Clone, Copy)]
enum Counted {
    EveryRequest,
    /// Those of the same delivery (`webhook-id`).
    EachDelivery,
}

/// A receiver's count of its open requests.
#[derive(Default)]
struct OpenRequests {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// One open request: counted from its arrival until it is answered or dropped (the sender
/// closed the connection first).
struct OpenRequest(Arc<OpenRequests>);

impl OpenRequest {
    fn of(gauge: &Arc<OpenRequests>) -> Self {
        let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.most.fetch_max(now, Ordering::SeqCst);
        OpenRequest(gauge.clone())
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A receiver that hangs: it takes each connection, reads what is sent and never answers,
/// until the sender gives up and closes the connection.
pub struct HangingReceiver {
    pub url: String,
    taken: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

impl HangingReceiver {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().unwrap().port());
        let (taken, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (counted, ended) = (taken.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let ended = ended.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
                    ended.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        HangingReceiver { url, taken, closed }
    }

    /// Connections taken so far (each one an attempt that never got an answer).
    pub fn taken(&self) -> usize {
        self.taken.load(Ordering::SeqCst)
    }

    /// Connections the sender has closed, giving up on its attempt.
    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` connections were taken (panics after `within`).
    pub async fn wait_for(&self, count: usize, within: Duration) {
        eventually_within(within, format!("{count} connections at {}", self.url), || async {
            match self.taken() {
                taken if taken >= count => Ok(()),
                taken => Err(format!("{taken} taken")),
            }
        })
        .await
    }
}
