//! Every frame of one run of each kind of program, captured on the
//! loopback interface by `dumpcap` (needs root) while the pair runs over
//! the UDP backend on RoCEv2's port 4791 (at 127.0.0.11 and 127.0.0.12,
//! addresses of this test alone), and checked by two things we did not
//! write (`common/capture.rs`): tshark must decode every frame as
//! InfiniBand over UDP, and the ICRC in the frame must equal the tests'
//! CRC-32 reference.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::capture::{self, Capture, ROCE_PORT};

/// The pair's addresses.
const SERVER: &str = "127.0.0.11";
const CLIENT: &str = "127.0.0.12";
/// The runs: program, arguments (the pair adds -p and the address), and
/// for the pingpongs the frame count the run must put on the wire (the
/// programs' path MTU is 1024): RC 20 round trips of 5000 bytes = 5 data
/// packets + 1 ACK per message each way; UC the same without ACKs; UD one
/// packet per message; RC -e 4096 bytes = 4 + 1.
const RUNS: &[(&str, &[&str], Option<usize>)] = &[
    (
        "ibv_rc_pingpong",
        &["-g", "0", "-s", "5000", "-n", "20"],
        Some(240),
    ),
    (
        "ibv_uc_pingpong",
        &["-g", "0", "-s", "5000", "-n", "20"],
        Some(200),
    ),
    (
        "ibv_ud_pingpong",
        &["-g", "0", "-s", "1024", "-n", "20"],
        Some(40),
    ),
    (
        "ibv_srq_pingpong",
        &["-g", "0", "-s", "2000", "-n", "10", "-q", "4"],
        None,
    ),
    ("ibv_rc_pingpong", &["-g", "0", "-e", "-n", "20"], Some(200)),
    ("ib_write_bw", &["-F", "-n", "50", "-s", "10000"], None),
    ("ib_read_bw", &["-F", "-n", "50", "-s", "10000"], None),
    ("ib_send_bw", &["-F", "-n", "50", "-s", "10000"], None),
    ("ib_atomic_bw", &["-F", "-n", "50"], None),
    ("ib_write_lat", &["-F", "-n", "50"], None),
    ("ib_send_lat", &["-F", "-n", "50"], None),
];

fn require_root() {
    let uid = Command::new("id").arg("-u").output().expect("id -u");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "capturing on lo needs root (dumpcap)"
    );
}

/// Whether `frame` is a probe datagram (IPv4/UDP to port `probe`).
fn is_probe(frame: &[u8], probe: u16) -> bool {
    frame.len() >= 14 + 20 + 8
        && frame[12..14] == [0x08, 0x00]
        && frame[14 + 9] == 17
        && frame[14 + 20 + 2..14 + 20 + 4] == probe.to_be_bytes()
}

struct Captured {
    what: String,
    file: PathBuf,
    port: u16,
    frames: Vec<Vec<u8>>,
}

/// Run every kind once with its frames captured.
fn capture_all(dir: &Path) -> Vec<Captured> {
    require_root();
    // One capture at a time: the tests of this file share the loopback.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = Vec::new();
    for (i, (prog, args, expect)) in RUNS.iter().enumerate() {
        let port = ROCE_PORT;
        let probe = common::free_udp_port();
        let file = dir.join(format!("{i}-{prog}.pcap"));
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("probe socket");
        let cap = Capture::start(
            &[],
            "lo",
            &format!("(udp port {port} and host {SERVER}) or udp port {probe}"),
            &file,
            || {
                let _ = sock.send_to(b"probe", ("127.0.0.1", probe));
            },
        );
        let r = common::run_pair_at(
            prog,
            args,
            Duration::from_secs(60),
            // One datagram per frame: dumpcap on `lo` sees a GSO send as one
            // unsegmented buffer. The segments GSO puts on a wire are
            // checked by tests/udp_wire.rs (lo's segmentation offload off).
            &[("ROCE_UDP_PORT", &port.to_string()), ("ROCE_UDP_GSO", "0")],
            [SERVER, CLIENT],
        );
        // dumpcap reads the kernel's buffer behind the traffic: give it a
        // second to catch up before stopping it.
        std::thread::sleep(Duration::from_millis(1000));
        let n = cap.stop();
        r.assert_ok(prog);
        let all = capture::read_pcap(&file);
        assert_eq!(
            all.len(),
            n,
            "{prog}: frames in the file vs dumpcap's count"
        );
        let frames: Vec<Vec<u8>> = all.into_iter().filter(|f| !is_probe(f, probe)).collect();
        if let Some(e) = expect {
            assert_eq!(frames.len(), *e, "{prog} {args:?}: frames on the wire");
        }
        out.push(Captured {
            what: format!("{prog} {}", args.join(" ")),
            file,
            port,
            frames,
        });
    }
    out
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("roce-ibverbs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn tshark_decodes_every_captured_frame_as_rocev2() {
    capture::tshark();
    let dir = tmpdir("cap-tshark");
    for c in capture_all(&dir) {
        assert!(!c.frames.is_empty(), "{}: nothing captured", c.what);
        let n = capture::tshark_decodes_all(&c.file, c.port, c.frames.len(), &c.what);
        eprintln!("{}: {n} frames decoded as RoCEv2", c.what);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_captured_icrc_matches_the_reference() {
    let dir = tmpdir("cap-icrc");
    for c in capture_all(&dir) {
        assert!(!c.frames.is_empty(), "{}: nothing captured", c.what);
        capture::assert_icrcs(&c.frames, c.port, &c.what);
        eprintln!("{}: {} ICRCs verified", c.what, c.frames.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The reference itself, on the public vector v1 of ROCEV2-DIGEST.md §4
/// (RC SEND_ONLY, IPv4, 16-byte payload, PSN 0x100, QP 0x12: ICRC bytes
/// `64 90 03 e4`), read from the shared reference vectors.
#[test]
fn the_reference_reproduces_vector_v1() {
    let (_, frame) = common::reference_vectors()
        .into_iter()
        .find(|(n, _)| n.starts_with("v1_rc_send_only_ipv4"))
        .expect("vector v1 in vectors.txt");
    let (stored, reference) = capture::icrc_of(&frame, 4791).expect("v1 is RoCEv2 over IPv4");
    assert_eq!(stored, [0x64, 0x90, 0x03, 0xe4]);
    assert_eq!(reference, stored);
}
