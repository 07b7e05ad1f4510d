//! A `net_memif` pair between two processes, each running an EAL of its own
//! (`--no-huge -m 128 --no-pci --no-shconf --no-telemetry`, a file prefix
//! of its own), the server's port `role=server` and the client's
//! `role=client` on one socket: names unique per run, each side's EAL
//! arguments, and the clean-up. Included with `#[path]` by
//! `perf_processes_dpdk.rs` and `ibverbs/tests/dpdk.rs`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A name no other run (or test of this run) uses: pid and a counter.
pub fn unique(what: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{what}{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The memif socket and the two EAL file prefixes (server first) of one
/// pair; dropping it removes the socket and the EALs' runtime directories.
pub struct MemifPair {
    /// The memif control socket (a path, not abstract).
    pub socket: PathBuf,
    /// The EAL `--file-prefix` of the server and of the client.
    pub prefixes: [String; 2],
}

impl MemifPair {
    /// Socket `$TMPDIR/roce-{tag}-memif<unique>.sock`, prefixes
    /// `r{tag}d-s<unique>` and `r{tag}d-c<unique>`.
    pub fn new(tag: &str) -> MemifPair {
        MemifPair {
            socket: std::env::temp_dir()
                .join(format!("{}.sock", unique(&format!("roce-{tag}-memif")))),
            prefixes: [unique(&format!("r{tag}d-s")), unique(&format!("r{tag}d-c"))],
        }
    }

    /// The EAL arguments of side `side` (0: the server, 1: the client), its
    /// EAL on lcore `lcore`, its memif port with MAC `mac` if given (else
    /// the driver's).
    pub fn eal_args(&self, side: usize, mac: Option<&str>, lcore: u32) -> Vec<String> {
        let role = ["server", "client"][side];
        let mut vdev = format!(
            "--vdev=net_memif0,role={role},id=0,socket={},socket-abstract=no",
            self.socket.display()
        );
        if let Some(mac) = mac {
            vdev.push_str(&format!(",mac={mac}"));
        }
        let mut v = vec![vdev];
        v.extend(
            [
                "--no-huge",
                "-m",
                "128",
                "--no-pci",
                "--no-shconf",
                "--no-telemetry",
            ]
            .map(String::from),
        );
        v.extend(["-l".to_string(), lcore.to_string()]);
        v.push("--log-level=*:error".into());
        v.extend(["--file-prefix".to_string(), self.prefixes[side].clone()]);
        v
    }
}

impl Drop for MemifPair {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        for p in &self.prefixes {
            let _ = std::fs::remove_dir_all(format!("/var/run/dpdk/{p}"));
        }
    }
}
