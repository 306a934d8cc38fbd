//! A stand-in for the Lambda runtime API on loopback, and the function processes that poll
//! it: each release binary runs as Lambda runs it (its environment, `GET .../invocation/next`
//! for work, `POST .../response` with the result), so cold start, invocations and memory
//! are measured on the real binaries. The API also reads the process's CPU time at its
//! first request for work and at every response, while the process waits for the answer.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use career_core::config::Settings;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Notify};

const NEXT: &str = "/2018-06-01/runtime/invocation/next";
const INVOCATION: &str = "/2018-06-01/runtime/invocation/";
const INIT_ERROR: &str = "/2018-06-01/runtime/init/error";

/// What a function answered to one invocation.
pub struct Reply {
    pub ok: bool,
    pub body: Bytes,
    at: Instant,
    /// The process's CPU time when the response arrived.
    pub cpu: Option<Duration>,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

struct Shared {
    first_poll: OnceLock<Instant>,
    /// The process's CPU time at its first request for work: init.
    init_cpu: OnceLock<Option<Duration>>,
    /// The process polling this API, once spawned.
    pid: OnceLock<u32>,
    polled: Notify,
    events: tokio::sync::Mutex<mpsc::UnboundedReceiver<(String, Bytes)>>,
    replies: Mutex<HashMap<String, oneshot::Sender<Reply>>>,
    init_error: Mutex<Option<String>>,
    function_arn: String,
}

pub struct RuntimeApi {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    events: mpsc::UnboundedSender<(String, Bytes)>,
    invocations: AtomicU64,
    server: tokio::task::JoinHandle<()>,
}

impl RuntimeApi {
    pub async fn start(function_name: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let (events, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            first_poll: OnceLock::new(),
            init_cpu: OnceLock::new(),
            pid: OnceLock::new(),
            polled: Notify::new(),
            events: tokio::sync::Mutex::new(receiver),
            replies: Mutex::default(),
            init_error: Mutex::default(),
            function_arn: format!("arn:aws:lambda:us-east-1:123456789012:function:{function_name}"),
        });
        let serving = shared.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let shared = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(answer(&shared, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        RuntimeApi { addr, shared, events, invocations: AtomicU64::new(0), server }
    }

    /// Hands `event` to the function and waits for its answer; the time is from handing
    /// it over to the arrival of the response.
    pub async fn invoke(&self, event: &serde_json::Value) -> Result<(Duration, Reply), String> {
        let body = Bytes::from(serde_json::to_vec(event).expect("events serialize"));
        let id = format!("bench-{:08}", self.invocations.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.shared.replies.lock().unwrap().insert(id.clone(), tx);
        let started = Instant::now();
        self.events.send((id, body)).map_err(|_| "the runtime API stopped".to_owned())?;
        let reply = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .map_err(|_| "no answer within 30 s".to_owned())?
            .map_err(|_| "the invocation was dropped".to_owned())?;
        Ok((reply.at - started, reply))
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn answer(shared: &Shared, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let arrived = Instant::now();
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    if method == Method::GET && path == NEXT {
        if shared.first_poll.set(arrived).is_ok() {
            let _ = shared.init_cpu.set(shared.cpu_time());
            shared.polled.notify_one();
        }
        let next = shared.events.lock().await.recv().await;
        let Some((id, body)) = next else { return status(StatusCode::GONE) };
        let deadline = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() + 300_000;
        return Response::builder()
            .header("content-type", "application/json")
            .header("lambda-runtime-aws-request-id", &id)
            .header("lambda-runtime-deadline-ms", deadline.to_string())
            .header("lambda-runtime-invoked-function-arn", &shared.function_arn)
            .header(
                "lambda-runtime-trace-id",
                "Root=1-6b093881-2abc561925abd89bd67e4d92;Parent=53995c3f42cd8ad8;Sampled=0",
            )
            .body(Full::new(body))
            .expect("a valid response");
    }
    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if method == Method::POST && path == INIT_ERROR {
        *shared.init_error.lock().unwrap() = Some(String::from_utf8_lossy(&body).into_owned());
        shared.polled.notify_one();
        return status(StatusCode::ACCEPTED);
    }
    if let (&Method::POST, Some((id, kind))) = (&method, path.strip_prefix(INVOCATION).and_then(|r| r.split_once('/')))
    {
        let reply = Reply { ok: kind == "response", body, at: Instant::now(), cpu: shared.cpu_time() };
        if let Some(waiting) = shared.replies.lock().unwrap().remove(id) {
            let _ = waiting.send(reply);
        }
        return status(StatusCode::ACCEPTED);
    }
    status(StatusCode::NOT_FOUND)
}

impl Shared {
    fn cpu_time(&self) -> Option<Duration> {
        cpu_time(*self.pid.get()?)
    }
}

/// The CPU time `pid` has used so far: the sum over its threads of the first field of
/// `/proc/<pid>/task/<tid>/schedstat` (nanoseconds on the CPU; `/proc/<pid>/schedstat`
/// alone counts only the main thread). A thread that has exited is not counted; the
/// functions' runtime threads live as long as the process.
fn cpu_time(pid: u32) -> Option<Duration> {
    let nanoseconds = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|schedstat| schedstat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Some(Duration::from_nanos(nanoseconds))
}

fn status(status: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(b"{\"status\":\"OK\"}")));
    *response.status_mut() = status;
    response
}

/// The environment Lambda gives a function (the runtime API address is added at spawn),
/// plus the service's settings, pointed at the given endpoints.
pub fn lambda_env(function: &str, settings: &Settings, dynamodb: &str, sqs: &str) -> Vec<(String, String)> {
    [
        ("AWS_LAMBDA_FUNCTION_NAME", function.to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/27/[$LATEST]0123456789abcdef0123456789abcdef".to_owned()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{function}")),
        ("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_DEFAULT_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "ASIABENCHBENCHBENCH0".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "bench-secret-access-key".to_owned()),
        ("AWS_SESSION_TOKEN", "bench-session-token".to_owned()),
        ("AWS_ENDPOINT_URL_DYNAMODB", dynamodb.to_owned()),
        ("AWS_ENDPOINT_URL_SQS", sqs.to_owned()),
        // moto serves KMS on the SQS emulator's endpoint.
        ("AWS_ENDPOINT_URL_KMS", sqs.to_owned()),
        ("LAMBDA_TASK_ROOT", "/var/task".to_owned()),
        ("LAMBDA_RUNTIME_DIR", "/var/runtime".to_owned()),
        ("TZ", ":UTC".to_owned()),
        ("LANG", "en_US.UTF-8".to_owned()),
        ("PATH", "/usr/local/bin:/usr/bin:/bin".to_owned()),
    ]
    .into_iter()
    .chain(settings.to_env())
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// A function's release binary running against its own stand-in runtime API. Killed when
/// dropped.
pub struct LambdaProcess {
    pub api: RuntimeApi,
    child: Child,
    spawned_at: Instant,
    stderr: PathBuf,
}

impl LambdaProcess {
    /// Starts `binary` with exactly `env` (nothing inherited) and the runtime API address.
    pub async fn spawn(binary: &Path, function: &str, env: &[(String, String)]) -> Result<Self, String> {
        Self::start(Command::new(binary), function, env).await
    }

    /// Starts `command` (a program and its arguments, perhaps confined to a CPU group) as
    /// [`LambdaProcess::spawn`] starts a binary.
    pub async fn start(mut command: Command, function: &str, env: &[(String, String)]) -> Result<Self, String> {
        let api = RuntimeApi::start(function).await;
        let stderr = std::env::temp_dir().join(format!("career-bench-{}-{function}.stderr", std::process::id()));
        let stderr_file = std::fs::File::create(&stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
        command
            .env_clear()
            .envs(env.iter().map(|(name, value)| (name, value)))
            .env("AWS_LAMBDA_RUNTIME_API", api.addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr_file);
        let spawned_at = Instant::now();
        let child = command.spawn().map_err(|e| format!("starting {:?}: {e}", command.get_program()))?;
        let _ = api.shared.pid.set(child.id());
        Ok(LambdaProcess { api, child, spawned_at, stderr })
    }

    /// Time from spawn to the function's first request for work.
    pub async fn first_poll(&mut self, within: Duration) -> Result<Duration, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(at) = self.api.shared.first_poll.get() {
                return Ok(*at - self.spawned_at);
            }
            if let Some(error) = self.api.shared.init_error.lock().unwrap().clone() {
                return Err(format!("init error: {error}; stderr: {}", self.stderr_tail()));
            }
            if let Ok(Some(exit)) = self.child.try_wait() {
                return Err(format!("exited with {exit} before polling; stderr: {}", self.stderr_tail()));
            }
            let left = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
            if left.is_zero() {
                return Err(format!("no request for work within {within:?}; stderr: {}", self.stderr_tail()));
            }
            let _ = tokio::time::timeout(left, self.api.shared.polled.notified()).await;
        }
    }

    /// The first invocation of a process just started: hands `event` over at once (it waits
    /// for the function's first request for work, as on Lambda) and returns the time from
    /// spawn to the complete response, and the part of it before the first request for
    /// work (init).
    pub async fn cold_invoke(&self, event: &serde_json::Value) -> Result<(Duration, Duration, Reply), String> {
        let (_, reply) = self.api.invoke(event).await?;
        let init = self.api.shared.first_poll.get().map_or(Duration::ZERO, |at| *at - self.spawned_at);
        Ok((reply.at - self.spawned_at, init, reply))
    }

    /// The CPU time the process used until its first request for work (`None` if it polled
    /// before its id was known, or /proc could not be read).
    pub fn init_cpu(&self) -> Option<Duration> {
        self.api.shared.init_cpu.get().copied().flatten()
    }

    /// `VmHWM` (peak resident set) and `VmRSS` from /proc, in KiB.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse().ok())
        };
        Some((field("VmHWM:")?, field("VmRSS:")?))
    }

    /// Page faults (minor and major) so far, from `/proc/<pid>/stat`.
    pub fn page_faults(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the parenthesised command name: state is field 3, minflt 10, majflt 12.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(fields.get(7)?.parse::<u64>().ok()? + fields.get(9)?.parse::<u64>().ok()?)
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let tail: String = text.chars().rev().take(600).collect::<Vec<_>>().into_iter().rev().collect();
        if tail.trim().is_empty() {
            "(empty)".into()
        } else {
            tail.trim().to_owned()
        }
    }
}

impl Drop for LambdaProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stderr);
    }
}
