//! `roce perf --server` / `--client` between two processes over the `dpdk`
//! backend: each process runs its own EAL (`--no-huge -m 128 --no-pci
//! --no-shconf`, a file prefix of its own) with one `net_memif` port, the
//! server's `role=server` and the client's `role=client` on one socket
//! (unique per run), and the two exchange their QP parameters over the TCP
//! side channel on 127.0.0.1 (a unique port). Both exit 0, both print
//! perftest's table with the message size and the iteration count asked
//! for, the trailer's byte count is iterations × size, and the data is
//! verified (by the server for WRITE, by the client for READ). A memif
//! port carries frames of at most 1518 bytes, so both run `--mtu 1024`.
//!
//! Needs a build with `--features dpdk` (libdpdk-dev 22.11, libclang-dev)
//! and root (the EAL); skipped when `ROCE_SKIP_ROOT_TESTS=1`.
#![cfg(feature = "dpdk")]

#[path = "support/memif.rs"]
mod memif;
#[path = "support/perf_output.rs"]
mod perf_output;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/root.rs"]
mod root;

use std::process::Command;

use memif::MemifPair;
use perf_output::{finish_pair, spawn_roce as spawn, text};

/// The client's and the server's device addresses (distinct: each is the
/// other's GID in the address vector).
const CLIENT_IP: &str = "10.77.0.1";
const SERVER_IP: &str = "10.77.0.2";
const CLIENT_MAC: &str = "02:00:0a:4d:00:01";
const SERVER_MAC: &str = "02:00:0a:4d:00:02";

fn skip() -> bool {
    !root::may_run("tests/perf_processes_dpdk.rs", "runs DPDK's EAL", &[])
}

/// The pairs of this file run one at a time: each process busy-polls its
/// lcore, and two pairs at once would share CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run `roce perf OP` as a memif server and a memif client, the server's
/// EAL on lcore 0 and the client's on lcore 1 (as the README says); check
/// both outputs; return (client stdout, server stdout).
fn run_pair(op: &str, size: u64, iters: u64) -> (String, String) {
    let (c, s, ce, se) = run_pair_on(op, size, iters, [0, 1]);
    // Each on its own CPU: no warning about a shared one.
    for e in [&ce, &se] {
        assert!(!e.contains("busy-polls"), "{e}");
    }
    (c, s)
}

/// [`run_pair`] with the server's and the client's lcores; returns both
/// stdouts and both stderrs (client first).
fn run_pair_on(
    op: &str,
    size: u64,
    iters: u64,
    lcores: [u32; 2],
) -> (String, String, String, String) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let tcp = ports::free_port();
    let guard = MemifPair::new("pp");
    let args = |side: usize, ip: &str, mac: &str, lcore: u32| -> Vec<String> {
        let mut v: Vec<String> = [
            "perf",
            op,
            "--backend",
            "dpdk",
            "--port",
            &tcp.to_string(),
            "--local-ip",
            ip,
            "--mac",
            mac,
            "-n",
            &iters.to_string(),
            "-s",
            &size.to_string(),
            // A memif port carries frames of at most 1518 bytes.
            "--mtu",
            "1024",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if side == 0 {
            v.push("--server".into());
        } else {
            v.extend(["--client".to_string(), "127.0.0.1".to_string()]);
        }
        v.push("--".into());
        v.extend(guard.eal_args(side, None, lcore));
        v
    };
    let server = spawn(&args(0, SERVER_IP, SERVER_MAC, lcores[0]));
    // The client retries the side channel while the server starts; the
    // server's memif socket exists before it listens.
    let client = spawn(&args(1, CLIENT_IP, CLIENT_MAC, lcores[1]));
    let ((ct, ce), (st, se)) = finish_pair(op, (size, iters, 1), client, server, None);
    drop(guard);
    (ct, st, ce, se)
}

#[test]
fn write_between_processes_over_dpdk_memif() {
    if skip() {
        return;
    }
    let (c, s) = run_pair("write", 4096, 200);
    assert!(c.contains("RDMA_Write BW Test"), "{c}");
    assert!(c.contains("dpdk 10.77.0.1"), "{c}");
    assert!(s.contains("server MR equals the client's pattern"), "{s}");
}

#[test]
fn read_between_processes_over_dpdk_memif() {
    if skip() {
        return;
    }
    let (c, _) = run_pair("read", 3000, 100);
    assert!(c.contains("RDMA_Read BW Test"), "{c}");
    assert!(c.contains("client MR equals the server's pattern"), "{c}");
}

/// Both processes' EALs on lcore 0 (what the README's recipe said before):
/// the two polling threads time-share CPU 0, and the one that starts second
/// says so on stderr.
#[test]
fn two_processes_polling_one_cpu_are_warned_about() {
    if skip() {
        return;
    }
    let (_, _, ce, se) = run_pair_on("write", 4096, 200, [0, 0]);
    let warned: Vec<&String> = [&ce, &se]
        .into_iter()
        .filter(|e| e.contains("pinned to CPU 0, which another roce process"))
        .collect();
    assert_eq!(warned.len(), 1, "client: {ce}\nserver: {se}");
    assert!(warned[0].contains("-l 0 and -l 1"), "{}", warned[0]);
}

/// A memif port carries at most 1518-byte frames (DPDK's memif driver
/// reports `max_rx_pktlen` 1518): a server left at the default 4096-byte
/// path MTU (which needs a 9000-byte port MTU) fails at once and says
/// what to pass, instead of waiting for a client.
#[test]
fn memif_server_with_a_jumbo_mtu_says_to_lower_it() {
    if skip() {
        return;
    }
    let guard = MemifPair::new("pp");
    let o = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["perf", "write", "--server", "--backend", "dpdk"])
        .args(["--local-ip", SERVER_IP, "--port", "1", "--"])
        .args(guard.eal_args(0, None, 0))
        .output()
        .expect("run roce");
    drop(guard);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(err.contains("port MTU 9000"), "{err}");
    assert!(err.contains("--mtu 1024 or less"), "{err}");
}
