//! Debian's RDMA programs, unmodified, under the library over the DPDK
//! backend (`ROCE_BACKEND=dpdk`): each process runs its own EAL
//! (`ROCE_DPDK_ARGS`: `--no-huge -m 128 --no-pci --no-shconf`, a file
//! prefix of its own, the server on lcore 0 and the client on lcore 1) with
//! one `net_memif` port, the server's `role=server` and the client's
//! `role=client` on one socket (unique per run), each with its own MAC. The
//! stacks (10.77.0.2 and 10.77.0.1) resolve each other by ARP over the
//! memif wire; the programs' TCP side channel runs on 127.0.0.1. A memif
//! port carries frames of at most 1518 bytes: the backend's default path
//! MTU, 1024, fits.
//!
//! The oracle is each program's own checks and printout: its exit status
//! and the amounts it reports moving.
//!
//! Needs a build with `--features dpdk` (libdpdk-dev 22.11) and root (the
//! EAL); skipped when `ROCE_SKIP_ROOT_TESTS=1`.
#![cfg(feature = "dpdk")]

mod common;
#[path = "../../tests/support/memif.rs"]
mod memif;
#[path = "../../tests/support/root.rs"]
mod root;

use std::time::Duration;

use common::{perftest_row, run_pair_in, PairRun, Place};
use memif::MemifPair;

const T: Duration = Duration::from_secs(90);

fn may_run() -> bool {
    root::may_run("ibverbs/tests/dpdk.rs", "runs DPDK's EAL", &[])
}

/// The pairs of this file run one at a time: the progress threads poll
/// their ports, and two pairs at once would share the CPUs.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run `prog args` as a memif server and a memif client; both must exit 0.
fn run(prog: &str, args: &[&str]) -> PairRun {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let guard = MemifPair::new("vb");
    let side = |i: usize, ip: &str, mac: &str, lcore: u32| {
        let eal = guard.eal_args(i, Some(mac), lcore).join(" ");
        vec![
            ("ROCE_BACKEND".to_string(), "dpdk".to_string()),
            ("ROCE_LOCAL_IP".to_string(), ip.to_string()),
            ("ROCE_DPDK_ARGS".to_string(), eal),
        ]
    };
    let place = Place {
        wrap: Vec::new(),
        env: [
            side(0, "10.77.0.2", "02:00:0a:4d:00:02", 0),
            side(1, "10.77.0.1", "02:00:0a:4d:00:01", 1),
        ],
        server_addr: "127.0.0.1".into(),
    };
    // The programs open the device (the EAL, and the server's memif
    // socket) before they listen: the client starts once the server does.
    let r = run_pair_in(&place, prog, args, T, || {
        assert!(guard.socket.exists(), "the memif server made no socket");
    });
    drop(guard);
    r.assert_ok(&format!("{prog} {args:?} over dpdk memif"));
    r
}

#[test]
fn ib_write_bw_over_dpdk_memif() {
    if !may_run() {
        return;
    }
    let r = run("ib_write_bw", &["-F", "-n", "2000", "--report_gbits"]);
    // #bytes #iterations BW-peak BW-average MsgRate.
    let row = perftest_row(&r.client.out, 65536)
        .unwrap_or_else(|| panic!("no 65536-byte row:\n{}", r.client.out));
    assert_eq!(row[1], 2000.0, "{row:?}");
    assert!(row[3] > 0.0, "zero average bandwidth {row:?}");
    assert!(
        r.client.out.contains("RDMA_Write BW Test"),
        "{}",
        r.client.out
    );
}

#[test]
fn more_programs_over_dpdk_memif() {
    if !may_run() {
        return;
    }
    let r = run("ib_read_bw", &["-F", "-n", "500"]);
    let row = perftest_row(&r.client.out, 65536).expect("a 65536-byte row");
    assert_eq!(row[1], 500.0, "{row:?}");
    let r = run("ib_write_lat", &["-F", "-n", "500"]);
    // #bytes #iterations t_min t_max t_typical ...
    let row = perftest_row(&r.client.out, 2).expect("a 2-byte row");
    assert!(row[2] > 0.0 && row[2] <= row[4], "{row:?}");
    // 4000 bytes = 4 packets at PMTU 1024.
    let r = run(
        "ibv_rc_pingpong",
        &["-g", "0", "-s", "4000", "-n", "200", "-m", "1024"],
    );
    for d in [&r.server, &r.client] {
        assert!(d.out.contains("1600000 bytes in "), "{}", d.out);
        assert!(d.out.contains("200 iters in "), "{}", d.out);
    }
}
