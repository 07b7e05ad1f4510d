//! Busy-polling loops that share a CPU: two `roce perf` processes whose
//! polling threads are pinned to the same CPU (DPDK's `-l` names the
//! lcore the EAL pins a process's threads to) time-share it, and every
//! message waits for the scheduler's slice: a 4 KiB WRITE over `net_memif`
//! ran at 0.79 Gbit/s that way, against 25.4 Gbit/s on two CPUs.
//!
//! A polling thread pinned to exactly one CPU claims it with an advisory
//! lock on a file per CPU (`/run/lock/roce-busy-poll-cpuN.lock`, or in the
//! temporary directory), holding its PID; a second claimant finds the lock
//! held and warns. The lock goes with the process (flock(2)), so a crashed
//! run leaves nothing stale. A thread allowed on several CPUs claims
//! nothing: the scheduler can keep two of them apart.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The CPUs the calling thread may run on (`Cpus_allowed_list` of
/// `/proc/thread-self/status`, proc(5)); `None` if unreadable.
pub(crate) fn allowed_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim())
}

/// A kernel CPU list (`0-3,8,10-11`, cpuset(7) "List format").
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (a, b): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
            None => {
                let a = part.parse().ok()?;
                (a, a)
            }
        };
        if b < a || b - a > 4096 {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

/// A held claim on a CPU (released when dropped or when the process ends).
#[derive(Debug)]
pub(crate) struct CpuClaim {
    _file: File,
}

/// Another process's claim on `cpu`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shared {
    pub(crate) cpu: usize,
    /// The PID it wrote, if readable.
    pub(crate) pid: Option<u32>,
}

/// Where the lock files live: `/run/lock` when it is there, else the
/// temporary directory.
fn lock_dir() -> PathBuf {
    let run = Path::new("/run/lock");
    if run.is_dir() {
        run.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Claim `cpu` in `dir`: `Ok(Some(claim))` taken, `Err(shared)` when
/// another process holds it, `Ok(None)` when locking is not possible here
/// (no writable directory: nothing is said).
pub(crate) fn claim(dir: &Path, cpu: usize) -> Result<Option<CpuClaim>, Shared> {
    let path = dir.join(format!("roce-busy-poll-cpu{cpu}.lock"));
    let Ok(mut f) = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    else {
        return Ok(None);
    };
    match roce_io::sys::try_lock_exclusive(&f) {
        Ok(true) => {
            let _ = f.set_len(0);
            let _ = f.rewind();
            let _ = write!(f, "{}", std::process::id());
            let _ = f.flush();
            Ok(Some(CpuClaim { _file: f }))
        }
        Ok(false) => {
            let mut s = String::new();
            let _ = f.read_to_string(&mut s);
            Err(Shared {
                cpu,
                pid: s.trim().parse().ok(),
            })
        }
        Err(_) => Ok(None),
    }
}

/// For a busy-polling loop about to start on the calling thread: claim its
/// CPU if it is pinned to one, and warn on stderr if another `roce`
/// process polls the same CPU. Keep the claim for the run.
pub(crate) fn check_busy_poll(side: &str) -> Option<CpuClaim> {
    let cpus = allowed_cpus()?;
    let &[cpu] = cpus.as_slice() else {
        return None;
    };
    match claim(&lock_dir(), cpu) {
        Ok(c) => c,
        Err(s) => {
            let who = s.pid.map_or("another roce process".to_string(), |p| {
                format!("another roce process (pid {p})")
            });
            let _ = writeln!(
                std::io::stderr(),
                "roce perf: warning: the {side}'s polling thread is pinned to CPU {cpu}, which \
                 {who} also busy-polls: the two time-share it and run at a fraction of their \
                 speed; give each process its own CPU (EAL -l, e.g. -l 0 and -l 1)"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert!(allowed_cpus().is_some_and(|c| !c.is_empty()));
    }

    #[test]
    fn a_second_claim_on_a_cpu_sees_the_first() {
        // flock(2) locks belong to open file descriptions: two opens in one
        // process conflict as two processes would.
        let dir = std::env::temp_dir().join(format!("roce-cpu-claim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = claim(&dir, 7).unwrap();
        assert!(first.is_some());
        assert_eq!(
            claim(&dir, 7).unwrap_err(),
            Shared {
                cpu: 7,
                pid: Some(std::process::id())
            }
        );
        // Another CPU is free; and once the first claim ends, so is CPU 7.
        assert!(claim(&dir, 8).unwrap().is_some());
        drop(first);
        assert!(claim(&dir, 7).unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
