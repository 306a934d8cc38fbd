//! Starting DynamoDB Local and moto (the SQS and KMS emulator) as child processes on free ports.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// A local service process. It is stopped when this value is dropped, and also when the
/// process that started it dies (a watchdog ends it once our end of its stdin closes).
pub struct LocalService {
    pub endpoint: String,
    watchdog: Child,
}

impl LocalService {
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
}

/// Where `scripts/install-local-deps.sh` put DynamoDB Local and moto.
#[derive(Clone, Debug)]
pub struct Installed {
    pub dir: PathBuf,
}

impl Installed {
    pub fn at(dir: impl Into<PathBuf>) -> Result<Self, String> {
        let installed = Installed { dir: dir.into() };
        for needed in [installed.dynamodb_jar(), installed.moto_server()] {
            if !needed.exists() {
                return Err(format!(
                    "{} is missing: run scripts/install-local-deps.sh (make run and make test do)",
                    needed.display()
                ));
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
    pub async fn start_dynamodb(&self, data_dir: Option<&Path>) -> Result<LocalService, String> {
        let port = free_port()?;
        let lib = self.dir.join("dynamodb/DynamoDBLocal_lib");
        let mut args = vec![
            format!("-Djava.library.path={}", lib.display()),
            "-jar".into(),
            self.dynamodb_jar().display().to_string(),
        ];
        match data_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
                args.extend(["-dbPath".into(), dir.display().to_string()]);
            }
            None => args.push("-inMemory".into()),
        }
        args.extend(["-sharedDb", "-disableTelemetry", "-port"].map(String::from));
        args.push(port.to_string());
        let child = spawn_supervised("java", &args)?;
        wait_for_port(port, "DynamoDB Local").await?;
        Ok(LocalService { endpoint: format!("http://127.0.0.1:{port}"), watchdog: child })
    }

    /// The moto server, standing in for SQS and KMS. With `kms_state`, its KMS key is kept
    /// there across restarts (moto itself keeps everything in memory).
    pub async fn start_moto(&self, kms_state: Option<&Path>) -> Result<LocalService, String> {
        const KEPT_KMS_KEY: &str = include_str!("moto_kms_state.py");
        let port = free_port()?;
        let listen = ["-H".into(), "127.0.0.1".into(), "-p".into(), port.to_string()];
        let child = match kms_state {
            None => spawn_supervised(&self.moto_server().display().to_string(), &listen)?,
            Some(dir) => {
                let args =
                    [vec!["-c".into(), KEPT_KMS_KEY.into(), dir.display().to_string()], listen.to_vec()].concat();
                spawn_supervised(&self.moto_python().display().to_string(), &args)?
            }
        };
        wait_for_port(port, "the SQS and KMS emulator").await?;
        Ok(LocalService { endpoint: format!("http://127.0.0.1:{port}"), watchdog: child })
    }
}

/// Runs `program` under a small shell watchdog that ends it when our end of the pipe on its
/// stdin closes, so no service outlives the tests or the local stack, however they end.
fn spawn_supervised(program: &str, args: &[String]) -> Result<Child, String> {
    // Background jobs of a non-interactive shell read /dev/null, hence the explicit fd 3.
    const WATCHDOG: &str = r#"exec 3<&0
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
        .map_err(|e| format!("starting {program}: {e}"))
}

pub fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    listener.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

pub async fn wait_for_port(port: u16, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("{what} did not start listening on port {port} within 60 s"))
}
