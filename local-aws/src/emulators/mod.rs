//! Starting DynamoDB Local and moto (the SQS and KMS emulator) as child processes on free ports, and
//! what the queues hold kept across a restart (queue_snapshot).

pub mod queue_snapshot;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio::process::{Child, ChildStdin, Command};

/// A local service process. It is stopped when this value is dropped, and also when the
/// process that started it dies (a watchdog ends it once our end of its stdin closes).
pub struct LocalService {
    pub endpoint: String,
    watchdog: Child,
    /// Our end of the pipe on the watchdog's stdin: the service runs while it is open. It is
    /// kept apart from `watchdog` because waiting for a child closes the child's stdin.
    _lifeline: Option<ChildStdin>,
}

impl LocalService {
    fn supervised(port: u16, mut watchdog: Child) -> Self {
        let lifeline = watchdog.stdin.take();
        LocalService { endpoint: format!("http://127.0.0.1:{port}"), watchdog, _lifeline: lifeline }
    }

    /// Stops the service and waits until its process has ended, so its port is free again.
    pub async fn stop(&mut self) {
        drop(self._lifeline.take());
        let _ = self.watchdog.wait().await;
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.endpoint.rsplit(':').next().and_then(|port| port.parse().ok()).expect("an endpoint ends in its port")
    }

    /// Waits until the service process ends (it is not meant to), and says how it ended.
    pub async fn ended(&mut self) -> String {
        match self.watchdog.wait().await {
            Ok(status) => status.to_string(),
            Err(err) => format!("cannot tell how: {err}"),
        }
    }

    /// The id of the service process itself (a child of its watchdog shell), for a test that
    /// pauses or kills it.
    pub fn process_id(&self) -> Option<u32> {
        let shell = self.watchdog.id()?;
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).ok()?;
        let is_shell = |pid: &u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sh");
        children.split_whitespace().filter_map(|pid| pid.parse().ok()).find(|pid| !is_shell(pid))
    }

    /// Every message of the emulated queue `queue_url`.
    pub async fn held_messages(&self, queue_url: &str) -> anyhow::Result<Vec<HeldMessage>> {
        let request = ureq::get(&self.messages_route()).query("queue", queue_url);
        let text = blocking(move || Ok(request.call()?.into_string()?)).await.context(EMULATOR_ROUTE)?;
        serde_json::from_str(&text).context(EMULATOR_ROUTE)
    }

    /// Puts `messages` on the emulated queue `queue_url`, each with its receive count and wait.
    pub async fn put_back(&self, queue_url: &str, messages: &[HeldMessage]) -> anyhow::Result<()> {
        let request = ureq::post(&self.messages_route()).query("queue", queue_url);
        let body = serde_json::to_string(messages).expect("messages serialize");
        blocking(move || Ok(request.send_string(&body).map(drop)?)).await.context(EMULATOR_ROUTE)
    }

    fn messages_route(&self) -> String {
        format!("{}/_careerctl/messages", self.endpoint)
    }
}

/// Where `scripts/install-local-deps.sh` put DynamoDB Local and moto.
#[derive(Clone, Debug)]
pub struct Installed {
    pub dir: PathBuf,
}

impl Installed {
    pub fn at(dir: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let installed = Installed { dir: dir.into() };
        for needed in [installed.dynamodb_jar(), installed.moto_server()] {
            if !needed.exists() {
                bail!("{} is missing: run scripts/install-local-deps.sh (make run and make test do)", needed.display());
            }
        }
        Ok(installed)
    }

    fn dynamodb_jar(&self) -> PathBuf {
        self.dir.join("dynamodb/DynamoDBLocal.jar")
    }

    fn moto_server(&self) -> PathBuf {
        self.dir.join("venv/bin/moto_server")
    }

    fn moto_python(&self) -> PathBuf {
        self.dir.join("venv/bin/python")
    }

    /// DynamoDB Local, in memory or persisted under `data_dir`.
    pub async fn start_dynamodb(&self, data_dir: Option<&Path>) -> anyhow::Result<LocalService> {
        self.start_dynamodb_on(free_port()?, data_dir).await
    }

    /// [`Installed::start_dynamodb`] on `port`.
    pub async fn start_dynamodb_on(&self, port: u16, data_dir: Option<&Path>) -> anyhow::Result<LocalService> {
        let lib = self.dir.join("dynamodb/DynamoDBLocal_lib");
        let mut args = vec![
            // The JVM's defaults are for a long-lived server that owns its machine: a second
            // JIT compiler (C2) and a concurrent collector, whose threads take the CPU the
            // service and its tests need. The emulator runs beside them on a laptop's few
            // cores, so it compiles with C1 only and collects on one thread (docs/contributing.md:
            // in `make test` it is the largest user of CPU).
            "-XX:TieredStopAtLevel=1".into(),
            "-XX:+UseSerialGC".into(),
            format!("-Djava.library.path={}", lib.display()),
            "-jar".into(),
            self.dynamodb_jar().display().to_string(),
        ];
        match data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                args.extend(["-dbPath".into(), dir.display().to_string()]);
            }
            None => args.push("-inMemory".into()),
        }
        args.extend(["-sharedDb", "-disableTelemetry", "-port"].map(String::from));
        args.push(port.to_string());
        let child = spawn_supervised("java", &args)?;
        wait_for_port(port, "DynamoDB Local").await?;
        Ok(LocalService::supervised(port, child))
    }

    /// moto, standing in for SQS and KMS, with the changes moto_server.py describes: its KMS
    /// key kept under `kms_state` across restarts (moto itself keeps everything in memory), a
    /// route to save and restore queued messages, and SQS's long poll on FIFO queues.
    pub async fn start_moto(&self, kms_state: Option<&Path>) -> anyhow::Result<LocalService> {
        let port = free_port()?;
        let mut args = ["-c", MOTO_SERVER, "-H", "127.0.0.1", "-p", &port.to_string()].map(String::from).to_vec();
        if let Some(dir) = kms_state {
            args.extend(["--kms-state".into(), dir.display().to_string()]);
        }
        let child = spawn_supervised(&self.moto_python().display().to_string(), &args)?;
        wait_for_port(port, "the SQS and KMS emulator").await?;
        Ok(LocalService::supervised(port, child))
    }
}

const MOTO_SERVER: &str = include_str!("moto_server.py");

/// A message as the SQS emulator holds it, in flight and delayed ones included.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldMessage {
    pub body: String,
    /// The message group, on a FIFO queue.
    pub group_id: Option<String>,
    pub receive_count: u32,
    /// How long until it can be received.
    pub wait_millis: u64,
}

/// SQS's quota of messages in flight, a standard queue's (about) and a FIFO queue's alike.
pub const SQS_IN_FLIGHT: u32 = 120_000;

/// Holds the queue `queue_url` of the SQS emulator at `sqs_endpoint` to `quota` messages in
/// flight, as SQS holds every queue to [`SQS_IN_FLIGHT`] (the scale model, contract section
/// 22): a receive takes at most what the quota leaves, and nothing while the queue holds that
/// many.
pub async fn set_in_flight_quota(sqs_endpoint: &str, queue_url: &str, quota: u32) -> anyhow::Result<()> {
    let route = format!("{sqs_endpoint}/_careerctl/in-flight-quota");
    let request = ureq::post(&route).query("queue", queue_url).query("quota", &quota.to_string());
    blocking(move || Ok(request.call().map(drop)?)).await.context(EMULATOR_ROUTE)
}

/// An entry a Custom Event Bus of the emulator holds (moto_server.py), as it was put.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldEvent {
    pub event_id: String,
    pub source: String,
    pub detail_type: String,
    pub detail: Option<String>,
    pub event_group_id: Option<String>,
    pub deduplication_id: Option<String>,
}

/// Every entry the Custom Event Bus `bus_arn` of the emulator at `endpoint` holds, in the order
/// it was put (a bus retains its events; the eventsv2 API has no call that lists them).
pub async fn held_events(endpoint: &str, bus_arn: &str) -> anyhow::Result<Vec<HeldEvent>> {
    let request = ureq::get(&format!("{endpoint}/_careerctl/event-bus")).query("arn", bus_arn);
    let text = blocking(move || Ok(request.call()?.into_string()?)).await.context("the emulator's event bus route")?;
    serde_json::from_str(&text).context("the emulator's event bus route")
}

/// The context of a failed call to the route that moto_server.py adds.
const EMULATOR_ROUTE: &str = "the SQS emulator's message route";

/// Runs a blocking ureq call off the async executor.
async fn blocking<T: Send + 'static>(call: impl FnOnce() -> anyhow::Result<T> + Send + 'static) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(call).await?
}

/// Runs `program` under a small shell watchdog that ends it when our end of the pipe on its
/// stdin closes, so no service outlives the tests or the local stack, however they end.
fn spawn_supervised(program: &str, args: &[String]) -> anyhow::Result<Child> {
    // Background jobs of a non-interactive shell read /dev/null, hence the explicit fd 3.
    // A Ctrl-C in the terminal signals the whole process group; the watchdog and its service
    // ignore it and end when careerctl drops them, after it has saved what they hold.
    const WATCHDOG: &str = r#"trap '' INT
exec 3<&0
"$@" </dev/null & child=$!
(cat <&3 >/dev/null; kill "$child" 2>/dev/null) &
wait "$child""#;
    Command::new("sh")
        .arg("-c")
        .arg(WATCHDOG)
        .arg("watchdog")
        .arg(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {program}"))
}

/// A loopback port nothing holds now, for a process started next to bind. It is taken below the
/// kernel's ephemeral range: a port from that range (what binding port 0 gives) is also what the
/// kernel hands the next outgoing connection, so on a busy machine one of the suite's many
/// connections could hold it by the time the child binds, and the child would fail to start.
pub fn free_port() -> anyhow::Result<u16> {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let lowest = ephemeral_start / 2;
    for _ in 0..256 {
        let [high, low] = career_core::random::random_bytes::<2>();
        let port = lowest + u16::from_be_bytes([high, low]) % (ephemeral_start - lowest);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port found between {lowest} and {ephemeral_start}")
}

pub async fn wait_for_port(port: u16, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{what} did not start listening on port {port} within 60 s")
}
