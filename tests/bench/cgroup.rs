//! CPU cgroups that give a process the CPU share Lambda gives a memory size: MB / 1769 of
//! one vCPU (a full vCPU at 1769 MB), enforced by the CFS bandwidth controller with a
//! 20 ms period, the throttling interval observed on Lambda. cgroup v1
//! (`/sys/fs/cgroup/cpu`) or v2 (`cpu.max` under `/sys/fs/cgroup`); one fresh group per
//! spawn, so no process starts with quota another one used up.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The memory size at which a Lambda function has one full vCPU.
pub const FULL_VCPU_MB: u32 = 1769;
pub const PERIOD_US: u64 = 20_000;

#[derive(Clone, Copy, Debug)]
pub enum Hierarchy {
    V1,
    V2,
}

/// Where CPU groups can be made, or why they cannot.
#[derive(Clone, Debug)]
pub struct CpuGroups {
    root: PathBuf,
    hierarchy: Hierarchy,
}

impl CpuGroups {
    /// Finds a writable CPU controller: a probe group is made and removed again.
    pub fn find() -> Result<Self, String> {
        let candidates = [
            (PathBuf::from("/sys/fs/cgroup/cpu"), Hierarchy::V1, "cpu.cfs_quota_us"),
            (PathBuf::from("/sys/fs/cgroup"), Hierarchy::V2, "cgroup.subtree_control"),
        ];
        let mut problems = Vec::new();
        for (root, hierarchy, marker) in candidates {
            if !root.join(marker).exists() {
                problems.push(format!("{} has no {marker}", root.display()));
                continue;
            }
            if let Hierarchy::V2 = hierarchy {
                let controllers = std::fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
                if !controllers.split_whitespace().any(|c| c == "cpu")
                    && std::fs::write(root.join("cgroup.subtree_control"), "+cpu").is_err()
                {
                    problems.push(format!("{}: the cpu controller cannot be enabled", root.display()));
                    continue;
                }
            }
            let groups = CpuGroups { root, hierarchy };
            match groups.create(128) {
                Ok(probe) => {
                    drop(probe);
                    return Ok(groups);
                }
                Err(e) => problems.push(e),
            }
        }
        Err(problems.join("; "))
    }

    pub fn describe(&self) -> String {
        match self.hierarchy {
            Hierarchy::V1 => format!("cgroup v1, {} (cpu.cfs_period_us, cpu.cfs_quota_us)", self.root.display()),
            Hierarchy::V2 => format!("cgroup v2, {} (cpu.max)", self.root.display()),
        }
    }

    /// A new group with the CPU share of `memory_mb`.
    pub fn create(&self, memory_mb: u32) -> Result<CpuGroup, String> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("career-bench-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = self.root.join(name);
        std::fs::create_dir(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        let group = CpuGroup { path };
        let quota = quota_us(memory_mb);
        let write = |file: &str, value: String| {
            std::fs::write(group.path.join(file), &value)
                .map_err(|e| format!("writing {value} to {}: {e}", group.path.join(file).display()))
        };
        match self.hierarchy {
            Hierarchy::V1 => {
                write("cpu.cfs_period_us", PERIOD_US.to_string())?;
                write("cpu.cfs_quota_us", quota.to_string())?;
            }
            Hierarchy::V2 => write("cpu.max", format!("{quota} {PERIOD_US}"))?,
        }
        Ok(group)
    }
}

/// CPU time per period for `memory_mb`.
pub fn quota_us(memory_mb: u32) -> u64 {
    PERIOD_US * u64::from(memory_mb) / u64::from(FULL_VCPU_MB)
}

/// One CPU group; removed when dropped (after its process has ended).
pub struct CpuGroup {
    path: PathBuf,
}

impl CpuGroup {
    /// Makes `command`'s process join this group between fork and exec, so it runs under
    /// the quota from its first instruction.
    pub fn confine(&self, command: &mut Command) {
        let procs = CString::new(self.path.join("cgroup.procs").into_os_string().into_encoded_bytes())
            .expect("a path without NUL");
        // SAFETY: between fork and exec only async-signal-safe calls are made (getpid,
        // open, write, close) on memory prepared before the fork; nothing allocates.
        #[allow(unsafe_code, reason = "the only unsafe of the workspace: std's pre_exec hook, and libc")]
        unsafe {
            command.pre_exec(move || {
                let mut digits = [0u8; 20];
                let mut pid = libc::getpid() as u64;
                let mut start = digits.len();
                loop {
                    start -= 1;
                    digits[start] = b'0' + (pid % 10) as u8;
                    pid /= 10;
                    if pid == 0 {
                        break;
                    }
                }
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let len = digits.len() - start;
                let written = libc::write(fd, digits[start..].as_ptr().cast(), len);
                libc::close(fd);
                if written != len as isize {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    /// Periods in which the group was throttled so far (`nr_throttled` of `cpu.stat`).
    pub fn throttled_periods(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(self.path.join("cpu.stat")).ok()?;
        stat.lines().find_map(|line| line.strip_prefix("nr_throttled ")).and_then(|n| n.trim().parse().ok())
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // A group can be removed once its processes have ended; the kernel needs a moment
        // to notice a process that was just reaped.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
