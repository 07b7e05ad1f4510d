//! Debian's RDMA programs, unmodified, under the library over the TAP
//! backend (`ROCE_BACKEND=tap`): each test makes a network namespace
//! `roce{pid}{tag}` with a bridge (`tests/support/netns.rs`: 10.99.0.254/24)
//! and two persistent TAP interfaces `rtap{pid}{tag}a` / `…b` enslaved to
//! it, and runs each program's server (10.99.0.2 on TAP a) and client
//! (10.99.0.1 on TAP b) in that namespace (`ip netns exec`), each attaching
//! to its TAP with `ROCE_IFNAME`. The stacks resolve each other's MACs by
//! ARP through the kernel's bridge; the programs' TCP side channel runs on
//! the namespace's loopback. Everything is removed by the guards' `Drop`,
//! on panic too.
//!
//! The oracle is each program's own checks and printout (exit status, the
//! amounts it reports), as in `programs.rs`; and for the pingpongs, every
//! frame on TAP a captured by `dumpcap` and checked by tshark and the ICRC
//! reference (`common/capture.rs`).
//!
//! Needs root, `/dev/net/tun`, `ip` (iproute2), `ping` and dumpcap/tshark;
//! without them the tests fail and say what is missing, unless
//! `ROCE_SKIP_ROOT_TESTS=1`.

mod common;
#[path = "../../tests/support/netns.rs"]
mod netns;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::capture::{self, Capture, ROCE_PORT};
use common::{perftest_row, run_pair_in, PairRun, Place};
use netns::TapWire as Wire;

const T: Duration = Duration::from_secs(60);
const SERVER_IP: &str = "10.99.0.2";
const CLIENT_IP: &str = "10.99.0.1";

/// Whether the tests may run (root, tun, ip, ping, dumpcap).
fn may_run() -> bool {
    netns::preconditions(
        "ibverbs/tests/tap.rs",
        &[("ping", "-V", "iputils-ping"), ("dumpcap", "-v", "tshark")],
    )
}

impl Wire {
    /// The server on TAP a, the client on TAP b, both in the namespace.
    fn place(&self) -> Place {
        let side = |ifname: &str, ip: &str| {
            vec![
                ("ROCE_BACKEND".to_string(), "tap".to_string()),
                ("ROCE_IFNAME".to_string(), ifname.to_string()),
                ("ROCE_LOCAL_IP".to_string(), ip.to_string()),
            ]
        };
        Place {
            wrap: ["ip", "netns", "exec", &self.n.ns]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            env: [
                side(&self.n.taps[0], SERVER_IP),
                side(&self.n.taps[1], CLIENT_IP),
            ],
            server_addr: "127.0.0.1".into(),
        }
    }

    fn run(&self, prog: &str, args: &[&str]) -> PairRun {
        let r = run_pair_in(&self.place(), prog, args, T, || {});
        r.assert_ok(&format!("{prog} {args:?} over tap"));
        r
    }
}

/// A pingpong's "N bytes in S seconds" and "I iters" lines, both sides.
fn pingpong_ok(w: &Wire, prog: &str, args: &[&str], bytes: u64, iters: u64) {
    let r = w.run(prog, args);
    for (side, d) in [("server", &r.server), ("client", &r.client)] {
        for want in [
            format!("{bytes} bytes in "),
            format!("{iters} iters in "),
            "GID ::ffff:10.99.0.".to_string(),
        ] {
            assert!(
                d.out.contains(&want),
                "{prog} {side}: expected {want:?}:\n{}",
                d.out
            );
        }
    }
}

#[test]
fn pingpongs_over_tap() {
    if !may_run() {
        return;
    }
    let w = Wire::new("vp");
    // PMTU 1024 (the TAP backend's default): 10 packets per message.
    pingpong_ok(
        &w,
        "ibv_rc_pingpong",
        &["-g", "0", "-s", "10000", "-n", "300"],
        2 * 10000 * 300,
        300,
    );
    pingpong_ok(
        &w,
        "ibv_rc_pingpong",
        &["-g", "0", "-e", "-n", "200"],
        2 * 4096 * 200,
        200,
    );
    pingpong_ok(
        &w,
        "ibv_uc_pingpong",
        &["-g", "0", "-s", "6000", "-n", "300"],
        2 * 6000 * 300,
        300,
    );
    // UD: one packet per message, at most the PMTU.
    pingpong_ok(
        &w,
        "ibv_ud_pingpong",
        &["-g", "0", "-s", "1024", "-n", "300"],
        2 * 1024 * 300,
        300,
    );
    pingpong_ok(
        &w,
        "ibv_srq_pingpong",
        &["-g", "0", "-s", "3000", "-n", "200"],
        2 * 3000 * 200,
        200,
    );
}

/// A perftest run over the TAP pair: both sides exit 0 and the client
/// prints a result row for `bytes`.
fn perftest_ok(w: &Wire, prog: &str, args: &[&str], bytes: u64) -> Vec<f64> {
    let mut a = vec!["-F"];
    a.extend_from_slice(args);
    let r = w.run(prog, &a);
    let row = perftest_row(&r.client.out, bytes)
        .unwrap_or_else(|| panic!("{prog} {args:?}: no {bytes}-byte row:\n{}", r.client.out));
    assert!(row.len() >= 3, "{row:?}");
    row
}

#[test]
fn perftest_bw_over_tap() {
    if !may_run() {
        return;
    }
    let w = Wire::new("vb");
    for (prog, bytes) in [
        ("ib_write_bw", 65536),
        ("ib_read_bw", 65536),
        ("ib_send_bw", 65536),
        ("ib_atomic_bw", 8),
    ] {
        // #bytes #iterations BW-peak BW-average MsgRate.
        let row = perftest_ok(&w, prog, &["-n", "1000"], bytes);
        assert_eq!(row[1], 1000.0, "{prog}: {row:?}");
        assert!(row[3] > 0.0, "{prog}: zero average bandwidth {row:?}");
    }
    for prog in ["ib_write_bw", "ib_read_bw", "ib_send_bw"] {
        perftest_ok(&w, prog, &["-q", "4", "-n", "300", "--report_gbits"], 65536);
    }
    let row = perftest_ok(&w, "ib_write_bw", &["-D", "2", "--report_gbits"], 65536);
    assert!(row[row.len() - 2] > 0.0, "{row:?}");
    // -a: every power of two from 2 bytes to 8 MiB.
    let r = w.run("ib_write_bw", &["-F", "-a", "-n", "10", "--report_gbits"]);
    for b in [2u64, 1024, 4096, 65536, 8 << 20] {
        assert!(
            perftest_row(&r.client.out, b).is_some(),
            "{b}:\n{}",
            r.client.out
        );
    }
}

#[test]
fn perftest_latency_over_tap() {
    if !may_run() {
        return;
    }
    let w = Wire::new("vl");
    for (prog, bytes) in [
        ("ib_write_lat", 2),
        ("ib_read_lat", 2),
        ("ib_send_lat", 2),
        ("ib_atomic_lat", 8),
    ] {
        // #bytes #iterations t_min t_max t_typical t_avg ...
        let row = perftest_ok(&w, prog, &["-n", "500"], bytes);
        assert_eq!(row[1], 500.0, "{prog}: {row:?}");
        assert!(row[2] > 0.0 && row[2] <= row[4], "{prog}: {row:?}");
    }
}

/// The pingpongs with every frame on the server's TAP captured: program,
/// arguments, and the RoCEv2 frames the run puts on the wire (PMTU 1024):
/// RC 20 round trips of 5000 bytes = 5 data packets + 1 ACK per message
/// each way; UC the same without ACKs; UD one packet per message.
const CAPTURED: &[(&str, &[&str], usize)] = &[
    (
        "ibv_rc_pingpong",
        &["-g", "0", "-s", "5000", "-n", "20"],
        240,
    ),
    (
        "ibv_uc_pingpong",
        &["-g", "0", "-s", "5000", "-n", "20"],
        200,
    ),
    (
        "ibv_ud_pingpong",
        &["-g", "0", "-s", "1024", "-n", "20"],
        40,
    ),
];

#[test]
fn every_frame_over_tap_decodes_and_its_icrc_verifies() {
    if !may_run() {
        return;
    }
    capture::tshark();
    let w = Wire::new("vc");
    let place = w.place();
    let dir = std::env::temp_dir().join(format!("roce-ibverbs-tap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (prog, args, expect)) in CAPTURED.iter().enumerate() {
        let file: PathBuf = dir.join(format!("{i}-{prog}.pcap"));
        let mut cap = None;
        // The pingpongs open their TAP before they listen: once the server
        // listens, TAP a is up and the bridge forwards to it. The probe: a
        // broadcast ping from the namespace's bridge address (no ARP).
        let r = run_pair_in(&place, prog, args, T, || {
            cap = Some(Capture::start(
                &place.wrap,
                &w.n.taps[0],
                &format!("udp port {ROCE_PORT} or icmp"),
                &file,
                || {
                    let _ =
                        w.n.exec(&["ping", "-b", "-c", "1", "-W", "1", "10.99.0.255"])
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status();
                },
            ));
        });
        std::thread::sleep(Duration::from_millis(500));
        let n = cap.expect("the capture started").stop();
        r.assert_ok(prog);
        let all = capture::read_pcap(&file);
        assert_eq!(
            all.len(),
            n,
            "{prog}: frames in the file vs dumpcap's count"
        );
        let frames: Vec<Vec<u8>> = all
            .into_iter()
            .filter(|f| capture::is_udp_port(f, ROCE_PORT))
            .collect();
        let what = format!("{prog} {} over tap", args.join(" "));
        assert_eq!(frames.len(), *expect, "{what}: RoCEv2 frames on the wire");
        let d = capture::tshark_decodes_all(&file, ROCE_PORT, frames.len(), &what);
        capture::assert_icrcs(&frames, ROCE_PORT, &what);
        eprintln!("{what}: {d} frames decoded as RoCEv2, their ICRCs verified");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
