//! What the root-only tests share (included with `#[path]` by
//! `support/netns.rs`, `support/udp_ns.rs` and `perf_processes_dpdk.rs`):
//! the check that they may run, running a command, and stopping a child
//! that must flush (tshark).
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether a root-only test may run: `false` (skip, with a message) when
/// `ROCE_SKIP_ROOT_TESTS=1`; panics, saying what is missing, when not root
/// or without one of `tools` (`(binary, its version flag, Debian
/// package)`). `who` names the caller, `what` says why it needs root.
pub fn may_run(who: &str, what: &str, tools: &[(&str, &str, &str)]) -> bool {
    if std::env::var("ROCE_SKIP_ROOT_TESTS").as_deref() == Ok("1") {
        eprintln!("ROCE_SKIP_ROOT_TESTS=1: skipping {who}");
        return false;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    assert_eq!(
        euid, "0",
        "{who} {what}: run it as root (CI does), or set ROCE_SKIP_ROOT_TESTS=1 to skip it"
    );
    for (tool, flag, pkg) in tools {
        let ok = Command::new(tool)
            .arg(flag)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "{who}: `{tool} {flag}` failed: it is needed (Debian: apt-get install {pkg}, or \
             scripts/test.sh --deps-only); set ROCE_SKIP_ROOT_TESTS=1 to skip"
        );
    }
    true
}

/// Run a command; panic with its output if it fails.
pub fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stop `child` with SIGINT (so that tshark flushes its file) and wait for
/// it, killing it after `limit`.
pub fn interrupt(mut child: Child, limit: Duration) {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let start = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
