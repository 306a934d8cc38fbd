//! Webhook receivers written in other languages, run as child processes on loopback with the
//! interpreters and packages that `scripts/install-local-deps.sh --receivers` installed under
//! `.local/`: Python with `standardwebhooks` from PyPI, Node.js with `standardwebhooks` (and
//! TypeScript) from npm; and Go with go-oidc, which it installed system-wide with apt (Debian
//! packages Go libraries under a GOPATH). Each prints one line per delivery; the test reads
//! those lines.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use local_aws::emulators::{free_port, wait_for_port};

use crate::eventually;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

fn local(path: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(".local").join(path);
    assert!(path.exists(), "{} is missing: run scripts/install-local-deps.sh --receivers", path.display());
    path
}

/// The Python of the receivers' venv.
pub fn python() -> PathBuf {
    local("receivers-venv/bin/python")
}

/// The TypeScript compiler.
pub fn tsc() -> PathBuf {
    local("receivers-node/node_modules/.bin/tsc")
}

/// The GOPATH of Debian's Go libraries, holding go-oidc.
pub fn gopath() -> &'static Path {
    let gopath = Path::new("/usr/share/gocode");
    let oidc = gopath.join("src/github.com/coreos/go-oidc");
    assert!(oidc.exists(), "{} is missing: run scripts/install-local-deps.sh --receivers", oidc.display());
    gopath
}

/// A fresh directory for a receiver's files, in which `node_modules` resolves to the installed
/// npm packages (as it would in a receiver's own project).
pub fn project_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("career-receiver-{}", crate::unique_user()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    std::os::unix::fs::symlink(local("receivers-node/node_modules"), dir.join("node_modules")).expect("a symlink");
    dir
}

/// A receiver process listening on `url`.
pub struct ScriptReceiver {
    pub url: String,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    _child: Child,
}

impl ScriptReceiver {
    /// A free loopback port for a receiver, and its URL, to subscribe before it starts.
    pub fn reserve() -> (u16, String) {
        let port = free_port().expect("a free port");
        (port, format!("http://127.0.0.1:{port}/hook"))
    }

    /// Runs `program args` in `dir` with `env` and `RECEIVER_PORT=port`, until it listens.
    pub async fn start(program: &Path, args: &[&Path], dir: &Path, port: u16, env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(program);
        command.args(args).current_dir(dir).env("RECEIVER_PORT", port.to_string()).envs(env.iter().copied());
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdout = collect(child.stdout.take().expect("piped stdout"));
        let stderr = collect(child.stderr.take().expect("piped stderr"));
        let receiver = ScriptReceiver { url: format!("http://127.0.0.1:{port}/hook"), stdout, stderr, _child: child };
        if let Err(err) = wait_for_port(port, "the receiver").await {
            panic!("{err}: {:?}", receiver.stderr.lock().unwrap());
        }
        receiver
    }

    /// Waits until the receiver printed at least `count` lines.
    pub async fn wait_for_lines(&self, count: usize) -> Vec<String> {
        eventually(format!("{count} lines of the receiver"), || async {
            let lines = self.stdout.lock().unwrap().clone();
            match lines.len() >= count {
                true => Ok(lines),
                false => Err((lines, self.stderr.lock().unwrap().clone())),
            }
        })
        .await
    }
}

fn collect(stream: impl AsyncRead + Unpin + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stream).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}
