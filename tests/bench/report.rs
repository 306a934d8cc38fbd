//! BENCHMARKS.md: a summary table of every target, each section's figures and method,
//! the targets not met with their distance and cause, and the machine.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// One target (or one reported figure without a target: `met` is `None`).
pub struct Row {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

impl Row {
    pub fn new(
        what: impl Into<String>,
        target: impl Into<String>,
        measured: impl Into<String>,
        met: Option<bool>,
    ) -> Self {
        Row { what: what.into(), target: target.into(), measured: measured.into(), met }
    }
}

pub struct Section {
    pub number: u8,
    pub title: &'static str,
    pub rows: Vec<Row>,
    /// Markdown: figures, method and reading.
    pub body: String,
    /// Why the unmet targets of this section are not met (shown only if one is not).
    pub unmet_notes: Vec<String>,
}

impl Section {
    /// A section with nothing in it yet, to [`Section::add`] its parts to.
    pub fn empty(number: u8, title: &'static str) -> Self {
        Section { number, title, rows: Vec::new(), body: String::new(), unmet_notes: Vec::new() }
    }

    /// Appends `part`'s rows, figures and notes (a part of a section measured on its own).
    pub fn add(&mut self, part: Section) {
        self.rows.extend(part.rows);
        self.body.push_str(&part.body);
        self.unmet_notes.extend(part.unmet_notes);
    }

    pub fn failed(number: u8, title: &'static str, error: &str) -> Self {
        Section {
            number,
            title,
            rows: vec![Row::new(title, "runs", format!("failed: {}", first_line(error)), Some(false))],
            body: format!("The section failed before it produced figures:\n\n```\n{error}\n```\n"),
            unmet_notes: vec!["The section failed; the error above says where.".into()],
        }
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > 120 {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line.to_owned()
    }
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "**not met**",
        None => "—",
    }
}

/// The load averages (1, 5 and 15 minutes) from /proc/loadavg.
pub fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

pub fn render(sections: &[Section], root: &Path, took: Duration, load_at_start: &str) -> String {
    let mut md = String::new();
    let unmet: usize = sections.iter().flat_map(|s| &s.rows).filter(|r| r.met == Some(false)).count();
    let targets: usize = sections.iter().flat_map(|s| &s.rows).filter(|r| r.met.is_some()).count();
    md.push_str("# Benchmarks\n\n");
    md.push_str(
        "Figures and ratios measured in one run of `make bench` on the local stack (DynamoDB Local and the moto \
         SQS emulator on loopback). They compare the service with a baseline measured in the same run; absolute \
         times depend on the machine below and are not what AWS would show. Nothing here is a timed assertion.\n\n",
    );
    let _ = writeln!(md, "Reproduce with:\n\n```sh\nmake bench\n```\n");
    let _ = writeln!(
        md,
        "(`scripts/install-local-deps.sh --bench`, `cargo build --release --features career-core/extra-root-cert -p <each function> -p hello-lambda`, then `cargo bench --bench service`, \
         which writes this file.) This run took {:.0} s after the build; {} of {} targets met.\n",
        took.as_secs_f64(),
        targets - unmet,
        targets
    );
    let load_at_end = load_average();
    let busiest = [load_at_start, load_at_end.as_str()]
        .iter()
        .filter_map(|load| load.split_whitespace().next()?.parse::<f64>().ok())
        .fold(0.0f64, f64::max);
    if busiest >= 1.0 {
        let _ = writeln!(
            md,
            "**These figures come from a loaded machine**: the load average (1, 5, 15 min) was {load_at_start} \
             when the run started and {load_at_end} when it ended, on {} CPUs shared with other work. Ratios \
             within one run still compare like with like, but absolute times, and the cold-request figures \
             under a CPU quota most of all, are longer and noisier than on a quiet machine.\n",
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        );
    }
    md.push_str("## Summary\n\n| # | What | Target | Measured | |\n|---|---|---|---|---|\n");
    for section in sections {
        for row in &section.rows {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} |",
                section.number,
                row.what,
                row.target,
                row.measured,
                verdict(row.met)
            );
        }
    }
    md.push('\n');
    if unmet > 0 {
        md.push_str("## Targets not met\n\n");
        for section in sections.iter().filter(|s| s.rows.iter().any(|r| r.met == Some(false))) {
            let _ = writeln!(md, "### {}. {}\n", section.number, section.title);
            for row in section.rows.iter().filter(|r| r.met == Some(false)) {
                let _ = writeln!(md, "- {}: target {}, measured {}.", row.what, row.target, row.measured);
            }
            md.push('\n');
            for note in &section.unmet_notes {
                let _ = writeln!(md, "{note}\n");
            }
        }
    }
    for section in sections {
        let _ = writeln!(md, "## {}. {}\n\n{}", section.number, section.title, section.body.trim_end());
        md.push('\n');
    }
    md.push_str("## Machine\n\n");
    for (name, value) in machine(root, load_at_start, &load_at_end) {
        let _ = writeln!(md, "- {name}: {value}");
    }
    md
}

fn machine(root: &Path, load_at_start: &str, load_at_end: &str) -> Vec<(&'static str, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|line| line.strip_prefix("model name").and_then(|rest| rest.split_once(':')).map(|(_, m)| m.trim()))
        .unwrap_or("unknown")
        .to_owned();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<f64>().ok())
        .map(|kib| format!("{:.1} GiB", kib / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let run = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let commit = run("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = run("git", &["status", "--porcelain"]).is_some_and(|s| !s.is_empty());
    let stamp = |path: &str| {
        std::fs::read_to_string(root.join(path)).map(|s| s.trim().to_owned()).unwrap_or_else(|_| "unknown".into())
    };
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    vec![
        ("Date (UTC)", career_core::clock::Timestamp::now().to_string()),
        ("Load average (1, 5, 15 min) at start / end", format!("{load_at_start} / {load_at_end}")),
        ("nproc", std::thread::available_parallelism().map(|n| n.get().to_string()).unwrap_or_default()),
        ("CPU model name", model),
        ("Memory", memory),
        ("Kernel", std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned()),
        ("rustc", run(&rustc, &["--version"]).unwrap_or_else(|| "unknown".into())),
        ("Commit", if dirty { format!("{commit} (with uncommitted changes)") } else { commit }),
        ("DynamoDB Local", stamp(".local/dynamodb/.stamp")),
        ("SQS emulator", stamp(".local/venv/.stamp")),
        ("Command", "`make bench`".into()),
    ]
}
