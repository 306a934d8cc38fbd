//! The README's "Trying the operations", pasted as a reader would: its shell block runs top to
//! bottom against `careerctl local`, and every `call` answers the status its step promises.
//! Two changes only: the demo receiver's port 4000, taken on this machine by other tests,
//! becomes a free one, and the receiver's lines go to a file so that the output holds only the
//! answers.

use std::path::Path;
use std::time::Duration;

use career_service::local_run::{run_local, LocalDir, Running};
use local_aws::emulators::free_port;

const README: &str = include_str!("../../README.md");

/// The shell block of "Trying the operations".
fn block() -> &'static str {
    let section = &README[README.find("## Trying the operations").expect("the README's section")..];
    let start = section.find("```sh\n").expect("its shell block") + "```sh\n".len();
    &section[start..start + section[start..].find("```").expect("closed")]
}

/// The status each `call` of the block promises, in order: its step's (`# N. …: 200`).
fn promised(block: &str) -> Vec<u16> {
    let mut promised = Vec::new();
    let mut status = None;
    for line in block.lines() {
        if let Some(step) = line.strip_prefix("# ").filter(|l| l.starts_with(|c: char| c.is_ascii_digit())) {
            status = step.rsplit(": ").find_map(|part| part.get(..3)?.parse::<u16>().ok());
        } else if line.starts_with("call ") {
            promised.push(status.unwrap_or_else(|| panic!("a call in a step that promises no status: {line}")));
        }
    }
    promised
}

#[test]
fn every_call_of_the_block_has_a_step_that_promises_a_status() {
    let promised = promised(block());
    assert!(promised.len() >= 15, "{promised:?}");
    assert!(promised.iter().all(|status| [200, 201, 202].contains(status)), "{promised:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_readmes_operations_answer_what_each_step_promises() {
    let local_dir = LocalDir::create();
    let settings = local_aws::stack::settings_from_env().expect("the local defaults");
    let stack = tokio::spawn(run_local(local_dir.path.clone(), settings));
    Running::wait_for(&local_dir.path).await;

    let port = free_port().unwrap();
    let script = block()
        .replace("127.0.0.1:4000", &format!("127.0.0.1:{port}"))
        .replace("careerctl demo receiver &", &format!("careerctl demo receiver --port {port} > receiver.log &"));
    // Where a reader runs it: a checkout whose .local is the stack's, with careerctl built.
    let work = tempdir();
    std::os::unix::fs::symlink(&local_dir.path, work.join(".local")).unwrap();
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/debug");
    let path = format!("{}:{}", built.display(), std::env::var("PATH").unwrap_or_default());
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new("bash").arg("-c").arg(&script).current_dir(&work).env("PATH", path).output(),
    )
    .await
    .expect("the block ran within two minutes")
    .expect("bash runs");
    stack.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The receiver's own lines (a refused bind shows here), beside the block's.
    let receiver = std::fs::read_to_string(work.join("receiver.log")).unwrap_or_default();
    let stderr = format!("{}\nreceiver.log:\n{receiver}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the block failed:\n{stdout}\n{stderr}");
    let answered: Vec<u16> =
        stdout.lines().filter(|line| line.len() == 3).filter_map(|line| line.parse().ok()).collect();
    assert_eq!(answered, promised(block()), "each call's status, in order:\n{stdout}\n{stderr}");
    let _ = std::fs::remove_dir_all(&work);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("career-readme-{}", career_service::unique_user()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
