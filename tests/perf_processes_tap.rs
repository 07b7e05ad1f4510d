//! `roce perf --server` / `--client` between two processes over the `tap`
//! backend, each process on a TAP interface of its own, the two TAPs ports
//! of one Linux bridge (needs root).
//!
//! Each test makes a network namespace `roce{pid}{tag}` with bridge `rbr0`
//! (`tests/support/netns.rs`), creates two persistent TAP interfaces
//! (`rtap{pid}{tag}a`, `…b`) in it with `ip tuntap add`, enslaves both to
//! the bridge and brings them up; then it runs `roce perf OP --server` and
//! `roce perf OP --client 127.0.0.1` in that namespace (`ip netns exec`),
//! each attaching to its TAP with `--ifname` (the backend attaches to an
//! existing interface of that name). So the bridge is complete before
//! either stack sends a frame. The side channel runs on the namespace's
//! loopback; the stacks are 10.77.0.2 (server) and 10.77.0.1 (client),
//! each with its own MAC; the kernel only forwards their frames.
//! Everything is removed by a guard's `Drop`, on panic too.
//!
//! Both exit 0, both print perftest's table with the message size and the
//! iteration count asked for, the trailer's byte count is iterations ×
//! size, and the data is verified (by the server for WRITE, by the client
//! for READ).
//!
//! Needs root (or `CAP_NET_ADMIN` + `CAP_SYS_ADMIN`), `/dev/net/tun` and
//! `ip` (iproute2). Without them the tests fail and say what is missing,
//! unless `ROCE_SKIP_ROOT_TESTS=1`.

#[path = "support/netns.rs"]
mod netns;

#[path = "support/perf_output.rs"]
mod perf_output;

use std::net::TcpListener;
use std::process::{Child, Stdio};

use perf_output::finish_pair;

use netns::TapWire as Wire;

const CLIENT_IP: &str = "10.77.0.1";
const SERVER_IP: &str = "10.77.0.2";
const CLIENT_MAC: &str = "02:00:0a:4d:00:01";
const SERVER_MAC: &str = "02:00:0a:4d:00:02";

fn spawn(w: &Wire, args: &[String]) -> Child {
    let args: Vec<&str> = std::iter::once(env!("CARGO_BIN_EXE_roce"))
        .chain(args.iter().map(String::as_str))
        .collect();
    w.n.exec(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roce")
}

/// Run `roce perf OP` as server (TAP `…b`) and client (TAP `…a`) in the
/// namespace; check both outputs; return (client stdout, server stdout).
fn run_pair(w: &Wire, op: &str, size: u64, iters: u64) -> (String, String) {
    // Any port: the namespace's loopback is its own.
    let tcp = TcpListener::bind("127.0.0.1:0")
        .expect("tcp")
        .local_addr()
        .unwrap()
        .port();
    let args = |ifname: &str, ip: &str, mac: &str| -> Vec<String> {
        [
            "perf",
            op,
            "--backend",
            "tap",
            "--ifname",
            ifname,
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
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let mut sa = args(&w.n.taps[1], SERVER_IP, SERVER_MAC);
    sa.push("--server".into());
    let server = spawn(w, &sa);
    let mut ca = args(&w.n.taps[0], CLIENT_IP, CLIENT_MAC);
    ca.extend(["--client".to_string(), "127.0.0.1".to_string()]);
    // The client retries the side channel while the server starts.
    let client = spawn(w, &ca);
    let ((ct, _), (st, _)) = finish_pair(op, (size, iters, 1), client, server, None);
    (ct, st)
}

#[test]
fn write_between_processes_over_tap_and_a_bridge() {
    if !netns::preconditions("tests/perf_processes_tap.rs", &[]) {
        return;
    }
    let w = Wire::new("pw");
    let (c, s) = run_pair(&w, "write", 4096, 200);
    assert!(c.contains("RDMA_Write BW Test"), "{c}");
    assert!(c.contains("tap 10.77.0.1"), "{c}");
    assert!(s.contains("server MR equals the client's pattern"), "{s}");
}

#[test]
fn read_between_processes_over_tap_and_a_bridge() {
    if !netns::preconditions("tests/perf_processes_tap.rs", &[]) {
        return;
    }
    let w = Wire::new("pr");
    let (c, _) = run_pair(&w, "read", 3000, 100);
    assert!(c.contains("RDMA_Read BW Test"), "{c}");
    assert!(c.contains("client MR equals the server's pattern"), "{c}");
}
