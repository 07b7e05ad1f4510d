//! Running Debian's RDMA programs under the library: the library's path,
//! free ports, and a server/client pair of processes on 127.0.0.1 and
//! 127.0.0.2 over the UDP backend, each bounded in time and killed on
//! failure.

// Each test binary uses a part of the helpers.
#![allow(dead_code, unused_imports)]

pub mod capture;

// The independent ICRC reference of the main crate's tests.
#[path = "../../../tests/common/icrc_ref.rs"]
pub mod icrc_ref;

#[path = "../../../tests/support/ports.rs"]
mod ports;

// The reference files of ../shared, one module for every test tree.
#[path = "../../../stack/tests/common/shared.rs"]
mod shared;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use shared::reference_vectors;

/// `libroce_ibverbs.so` of this build (cargo builds the cdylib with the
/// tests: `target/<profile>/deps/`, uplifted to `target/<profile>/`).
pub fn lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    for dir in [
        deps.clone(),
        deps.parent().expect("profile dir").to_path_buf(),
    ] {
        let p = dir.join("libroce_ibverbs.so");
        if p.exists() {
            return p;
        }
    }
    panic!("libroce_ibverbs.so not found beside {}", exe.display());
}

/// The Debian program `name` (from perftest or ibverbs-utils, installed by
/// `scripts/test.sh`).
pub fn program(name: &str) -> PathBuf {
    let p = PathBuf::from("/usr/bin").join(name);
    assert!(
        p.exists(),
        "{} missing: run scripts/test.sh --deps-only (installs perftest and ibverbs-utils)",
        p.display()
    );
    p
}

/// A TCP port free now on 127.0.0.1, below the ephemeral range.
pub fn free_tcp_port() -> u16 {
    ports::free_port()
}

/// A UDP port free now on both 127.0.0.1 and 127.0.0.2, below the
/// ephemeral range.
pub fn free_udp_port() -> u16 {
    ports::free_port()
}

/// Whether a TCP socket listens on `port` (from /proc/net/tcp and tcp6:
/// state 0A), without connecting to it (the servers accept one
/// connection only).
pub fn listening(port: u16) -> bool {
    listening_in("/proc/net", port)
}

/// [`listening`] in the network namespace of process `pid` (its
/// /proc/PID/net: a program run with `ip netns exec`).
pub fn listening_of(pid: u32, port: u16) -> bool {
    listening_in(&format!("/proc/{pid}/net"), port)
}

fn listening_in(dir: &str, port: u16) -> bool {
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("{dir}/{f}")).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3
                    && cols[3] == "0A"
                    && cols[1]
                        .rsplit(':')
                        .next()
                        .and_then(|p| u16::from_str_radix(p, 16).ok())
                        == Some(port)
            })
        })
    })
}

/// A finished process: exit code (`None`: killed at the deadline) and
/// everything it printed.
#[derive(Debug)]
pub struct Done {
    pub code: Option<i32>,
    pub out: String,
}

impl Done {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

fn spawn(prog: &str, args: &[String], env: &[(String, String)]) -> Child {
    spawn_in(&[], prog, args, env)
}

/// Spawn `prog args` under `wrap` (a command prefix such as `ip netns exec
/// NS`, which execs the program in place: the child's PID is the
/// program's), with the library preloaded and `env` added.
fn spawn_in(wrap: &[String], prog: &str, args: &[String], env: &[(String, String)]) -> Child {
    let mut c = match wrap.split_first() {
        None => Command::new(program(prog)),
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(program(prog));
            c
        }
    };
    c.args(args)
        .env("LD_PRELOAD", lib())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap_or_else(|e| panic!("spawn {prog}: {e}"))
}

/// Wait for `c` until `deadline`, killing it then; collect its output.
fn finish(mut c: Child, deadline: Instant) -> Done {
    let code = loop {
        match c.try_wait() {
            Ok(Some(s)) => break s.code(),
            Ok(None) if Instant::now() >= deadline => {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let mut out = String::new();
    if let Some(mut s) = c.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = c.stderr.take() {
        let _ = s.read_to_string(&mut out);
    }
    Done { code, out }
}

/// Run one program alone (LD_PRELOAD, the UDP backend on 127.0.0.1).
pub fn run_one(prog: &str, args: &[&str], timeout: Duration) -> Done {
    run_one_env(prog, args, &[("ROCE_LOCAL_IP", "127.0.0.1")], timeout)
}

/// Run one program alone with `env` added.
pub fn run_one_env(prog: &str, args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Done {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let c = spawn(prog, &args, &env);
    finish(c, Instant::now() + timeout)
}

/// The outcome of a server/client run.
#[derive(Debug)]
pub struct PairRun {
    pub server: Done,
    pub client: Done,
    pub udp_port: u16,
}

impl PairRun {
    /// Panic with both outputs unless both exited 0.
    pub fn assert_ok(&self, what: &str) {
        assert!(
            self.server.ok() && self.client.ok(),
            "{what}: server {:?}, client {:?}\n--- server:\n{}\n--- client:\n{}",
            self.server.code,
            self.client.code,
            self.server.out,
            self.client.out
        );
    }
}

/// Run `prog args` as a server on 127.0.0.1 and `prog args 127.0.0.1` as
/// its client on 127.0.0.2, with a fresh TCP port (`-p`) and a fresh UDP
/// port for the backend, both killed after `timeout`. `extra_env` goes to
/// both.
pub fn run_pair(
    prog: &str,
    args: &[&str],
    timeout: Duration,
    extra_env: &[(&str, &str)],
) -> PairRun {
    run_pair_at(prog, args, timeout, extra_env, ["127.0.0.1", "127.0.0.2"])
}

/// [`run_pair`] with the server and client at `ips` (loopback addresses).
/// A run whose server or client found its port taken (another test drew
/// the same number, [`ports`]) is run again with fresh ports, up to three
/// times.
pub fn run_pair_at(
    prog: &str,
    args: &[&str],
    timeout: Duration,
    extra_env: &[(&str, &str)],
    ips: [&str; 2],
) -> PairRun {
    let mut tries = 0;
    loop {
        let run = run_pair_once(prog, args, timeout, extra_env, ips);
        tries += 1;
        let raced = !(run.server.ok() && run.client.ok())
            && (ports::lost_port_race(&run.server.out) || ports::lost_port_race(&run.client.out));
        if !raced || tries == 3 {
            return run;
        }
    }
}

fn run_pair_once(
    prog: &str,
    args: &[&str],
    timeout: Duration,
    extra_env: &[(&str, &str)],
    ips: [&str; 2],
) -> PairRun {
    let udp = free_udp_port();
    let env = |ip: &str| {
        let mut e = vec![
            ("ROCE_LOCAL_IP".to_string(), ip.to_string()),
            ("ROCE_UDP_PORT".to_string(), udp.to_string()),
        ];
        e.extend(
            extra_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        e
    };
    let place = Place {
        wrap: Vec::new(),
        env: [env(ips[0]), env(ips[1])],
        server_addr: ips[0].to_string(),
    };
    let mut r = run_pair_in(&place, prog, args, timeout, || {});
    r.udp_port = udp;
    r
}

/// Where a server/client pair runs: under a command prefix (`ip netns exec
/// NS`, or nothing), with the environment of each side (server first:
/// `ROCE_BACKEND`, `ROCE_LOCAL_IP`, ...), the client naming the server's
/// side channel at `server_addr`.
#[derive(Debug, Clone)]
pub struct Place {
    pub wrap: Vec<String>,
    pub env: [Vec<(String, String)>; 2],
    pub server_addr: String,
}

/// Run `prog args -p PORT` as a server and `prog args -p PORT ADDR` as its
/// client at `place`, with a fresh TCP port, both killed after `timeout`.
/// `ready` runs once the server listens (in its namespace), before the
/// client starts.
pub fn run_pair_in(
    place: &Place,
    prog: &str,
    args: &[&str],
    timeout: Duration,
    ready: impl FnOnce(),
) -> PairRun {
    let tcp = free_tcp_port();
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    a.push("-p".into());
    a.push(tcp.to_string());
    let deadline = Instant::now() + timeout;
    let server = spawn_in(&place.wrap, prog, &a, &place.env[0]);
    let pid = server.id();
    while !listening_of(pid, tcp) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    ready();
    let mut ca = a.clone();
    ca.push(place.server_addr.clone());
    let client = spawn_in(&place.wrap, prog, &ca, &place.env[1]);
    let client = finish(client, deadline);
    let server = finish(
        server,
        deadline.max(Instant::now() + Duration::from_secs(2)),
    );
    PairRun {
        server,
        client,
        udp_port: 0,
    }
}

/// The numbers of the perftest result row that starts with `bytes`.
pub fn perftest_row(out: &str, bytes: u64) -> Option<Vec<f64>> {
    out.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.first() == Some(&bytes.to_string().as_str()))
            .then(|| f.iter().filter_map(|x| x.parse::<f64>().ok()).collect())
    })
}
