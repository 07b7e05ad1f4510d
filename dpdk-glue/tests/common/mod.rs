//! Shared helpers of the DPDK integration tests: one EAL per test binary
//! (DPDK allows one per process), unique names, and a pump loop.
//!
//! These tests need root and libdpdk (22.11); they do not skip: in CI they
//! must run. Each test binary is its own process with its own EAL; ports
//! are added at run time with `Eal::probe_vdev`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dpdk_glue::{DpdkError, DpdkPort, Eal, Mempool, Port, DEFAULT_DATA_ROOM};
use roce_io::pump;
use roce_stack::verbs::Device;

/// EAL arguments for a test process: no hugepages, no PCI, no shared config,
/// a file prefix unique to the process, one lcore.
pub fn eal_args() -> Vec<String> {
    let log = std::env::var("DPDK_TEST_LOG_LEVEL").unwrap_or_else(|_| "*:error".to_string());
    [
        "--no-huge".to_string(),
        "-m".to_string(),
        "256".to_string(),
        "--no-pci".to_string(),
        "--no-shconf".to_string(),
        "--no-telemetry".to_string(),
        format!("--file-prefix=roce-test-{}", std::process::id()),
        "-l".to_string(),
        "0".to_string(),
        format!("--log-level={log}"),
    ]
    .to_vec()
}

static EAL: OnceLock<Result<Eal, String>> = OnceLock::new();

/// The test binary's EAL, initialised on first use.
///
/// # Panics
/// When `rte_eal_init` fails, with DPDK's reason (these tests need root).
pub fn eal() -> Eal {
    let r = EAL.get_or_init(|| Eal::init(&eal_args()).map_err(|e| e.to_string()));
    match r {
        Ok(e) => *e,
        Err(e) => panic!(
            "DPDK EAL init failed: {e}\n(the dpdk-glue tests need root and libdpdk 22.11; \
             uid is {})",
            current_uid()
        ),
    }
}

fn current_uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.to_string())
        })
        .unwrap_or_default()
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A number unique within the process.
pub fn seq() -> u32 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

/// A name unique on the machine: `prefix` + pid + a sequence number.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}x{}", std::process::id(), seq())
}

/// A fresh temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Create `/tmp/roce-dpdk-<pid>-<n>`.
    pub fn new() -> TempDir {
        let p = std::env::temp_dir().join(format!("roce-dpdk-{}-{}", std::process::id(), seq()));
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pump two devices over two ports until `done` holds; panics after a
/// generous wall-clock guard (a hang, not a timing assertion).
pub fn pump_until(
    dev: &mut [Device; 2],
    io: &mut [DpdkPort; 2],
    clock: &dpdk_glue::MonotonicClock,
    what: &str,
    mut done: impl FnMut(&mut [Device; 2]) -> bool,
) -> Result<(), DpdkError> {
    let guard = Instant::now();
    loop {
        if done(dev) {
            return Ok(());
        }
        for s in 0..2 {
            pump(&mut dev[s], &mut io[s], clock.now(), 32)?;
        }
        if guard.elapsed() > Duration::from_secs(60) {
            panic!(
                "{what}: not done after 60 s\nport stats: {:?} / {:?}\ncounters: {:?} / {:?}\nbackend: {:?} / {:?}",
                io[0].port().stats(),
                io[1].port().stats(),
                dev[0].counters(),
                dev[1].counters(),
                io[0].counters(),
                io[1].counters(),
            );
        }
    }
}

/// A memif server and client port in this process, on a socket of their
/// own in `dir`, each with its own pool (named after `tag`), both links up.
pub fn memif_ports(dir: &TempDir, tag: &str) -> [DpdkPort; 2] {
    let eal = eal();
    let sock = dir.0.join("memif.sock");
    let mut io = Vec::new();
    for role in ["server", "client"] {
        let devargs = format!(
            "{},role={role},id=0,socket={},socket-abstract=no",
            unique("net_memif"),
            sock.display()
        );
        let id = eal.probe_vdev(&devargs).expect("probe memif");
        let pool = Mempool::new(&unique(tag), 4095, 64, DEFAULT_DATA_ROOM).expect("pool");
        let port = Port::configure(id, 1, 1, &pool, 1500).expect("configure");
        io.push(DpdkPort::new(port).expect("start"));
    }
    for p in &io {
        p.port()
            .wait_link_up(Duration::from_secs(20))
            .expect("memif link up");
    }
    let [a, b]: [DpdkPort; 2] = io.try_into().expect("two ports");
    [a, b]
}
