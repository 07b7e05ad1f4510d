//! `roce replay`: the binary plays one QP of a capture and writes what it
//! sends; the capture is the oracle.
//!
//! For each case the test runs `roce replay CAPTURE --qp QPN --out OUT`,
//! then reads both files itself: every frame of OUT must parse strictly
//! (ICRC verified), be addressed from the played QP's host to its peer, and
//! the responses and requests in it must equal those the capture has from
//! that QP: READ responses and ATOMIC ACKNOWLEDGEs one for one in order
//! (opcode, PSN, AETH syndrome class, MSN, payload, original value), each
//! captured ACK by one of ours with its PSN, class and MSN, and requests one
//! for one (opcode, PSN, RETH, AtomicETH, ImmDt, IETH, DETH Q_Key,
//! payload). Where the capture was made by rxe (AETH credit 0x1F, what we
//! send) and in our fixtures, the AETH syndrome byte must be equal too.
//!
//! Cases: the fixtures of `pcap-fixtures/pcaps` whose traffic is
//! self-consistent, both ends of each, and the public captures of
//! `../shared/captures` that `tests/interop_captures.rs` replays (read in
//! place, never copied).

mod common;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Output};

use common::roce;

use roce::capture::{AethClass, Capture, Pkt};
use roce_stack::wire::opcode::OpKind;

fn tmp(name: &str) -> PathBuf {
    common::tmp("replay_cli", name)
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("pcap-fixtures/pcaps")
        .join(format!("{name}.pcap"))
}

fn shared_capture(name: &str) -> PathBuf {
    common::shared_dir()
        .join("captures")
        .join(format!("{name}.pcap"))
}

/// One replay case: the capture, the QPN played and its host, the peer's
/// QPN; what the capture shows the QP sent (the counts are read from the
/// capture by the test, and must not be zero where given as `true`).
struct Case {
    what: String,
    capture: PathBuf,
    qpn: u32,
    ip: IpAddr,
    peer_qpn: u32,
    /// The AETH syndrome byte is compared exactly (captures whose sender
    /// uses credit 0x1F, like us).
    exact_syndrome: bool,
}

fn case(
    what: &str,
    capture: PathBuf,
    qpn: u32,
    ip: &str,
    peer_qpn: u32,
    exact_syndrome: bool,
) -> Case {
    Case {
        what: what.to_string(),
        capture,
        qpn,
        ip: ip.parse().expect("ip"),
        peer_qpn,
        exact_syndrome,
    }
}

fn run_case(c: &Case) -> (usize, usize) {
    let out_path = tmp(&format!(
        "{}-{:x}.pcap",
        c.what.replace([' ', '/'], "_"),
        c.qpn
    ));
    let qp = format!("{:#x}", c.qpn);
    let ip = c.ip.to_string();
    let out: Output = roce()
        .arg("replay")
        .arg(&c.capture)
        .args(["--qp", &qp, "--ip", &ip, "--out"])
        .arg(&out_path)
        .output()
        .expect("run roce replay");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}: stdout {text}\nstderr {err}",
        c.what
    );
    assert!(
        text.contains("result: every captured response and request matched"),
        "{}: {text}",
        c.what
    );

    let captured = Capture::load(&c.capture)
        .unwrap_or_else(|e| panic!("{e}"))
        .pkts;
    // The peer: the source of the requests to the QP at its IP.
    let to_qp: Vec<&Pkt> = captured
        .iter()
        .filter(|p| p.dst == c.ip && p.bth.dest_qp == c.qpn)
        .collect();
    assert!(!to_qp.is_empty(), "{}: nothing to the QP", c.what);
    let peer_ip = to_qp[0].src;
    let from_qp: Vec<&Pkt> = captured
        .iter()
        .filter(|p| p.src == c.ip && p.dst == peer_ip && p.bth.dest_qp == c.peer_qpn)
        .collect();
    let out_cap = Capture::load(&out_path).unwrap_or_else(|e| panic!("{e}"));
    let parsed: Vec<usize> = out_cap.pkts.iter().map(|p| p.idx).collect();
    assert_eq!(
        parsed,
        (0..out_cap.frames.len()).collect::<Vec<_>>(),
        "{}: every frame of ours parses strictly (ICRC)",
        c.what
    );
    let ours = out_cap.pkts;
    for o in &ours {
        let ctx = format!("{}: our frame {}", c.what, o.number());
        assert_eq!((o.src, o.dst), (c.ip, peer_ip), "{ctx}: addresses");
        assert_eq!(o.bth.dest_qp, c.peer_qpn, "{ctx}: destination QPN");
        assert_eq!(o.dst_mac, to_qp[0].src_mac, "{ctx}: destination MAC");
        assert_eq!(o.src_mac, to_qp[0].dst_mac, "{ctx}: source MAC");
    }

    // Responses.
    let cap_resp: Vec<&Pkt> = from_qp
        .iter()
        .copied()
        .filter(|p| !p.is_request())
        .collect();
    let our_resp: Vec<&Pkt> = ours.iter().filter(|p| !p.is_request()).collect();
    let cap_data: Vec<&&Pkt> = cap_resp
        .iter()
        .filter(|p| p.kind() != OpKind::Ack)
        .collect();
    let our_data: Vec<&&Pkt> = our_resp
        .iter()
        .filter(|p| p.kind() != OpKind::Ack)
        .collect();
    assert_eq!(
        our_data.len(),
        cap_data.len(),
        "{}: READ responses / atomic ACKs",
        c.what
    );
    let check = |o: &Pkt, t: &Pkt| {
        let ctx = format!("{}: capture frame {} PSN {}", c.what, t.number(), t.bth.psn);
        assert_eq!(o.bth.opcode, t.bth.opcode, "{ctx}: opcode");
        assert_eq!(o.bth.psn, t.bth.psn, "{ctx}: PSN");
        match (o.ext.aeth, t.ext.aeth) {
            (Some(a), Some(b)) => {
                assert_eq!(
                    AethClass::of(a.syndrome),
                    AethClass::of(b.syndrome),
                    "{ctx}: AETH class"
                );
                if c.exact_syndrome {
                    assert_eq!(a.syndrome, b.syndrome, "{ctx}: AETH syndrome");
                }
                assert_eq!(a.msn, b.msn, "{ctx}: MSN");
            }
            (a, b) => assert_eq!(a.is_some(), b.is_some(), "{ctx}: AETH"),
        }
        assert_eq!(o.ext.atomic_ack_eth, t.ext.atomic_ack_eth, "{ctx}: orig");
        assert!(o.payload == t.payload, "{ctx}: payload");
    };
    for (o, t) in our_data.iter().zip(&cap_data) {
        check(o, t);
    }
    let mut used = BTreeSet::new();
    let mut acks = 0;
    for t in cap_resp.iter().filter(|p| p.kind() == OpKind::Ack) {
        let (k, o) = our_resp
            .iter()
            .enumerate()
            .find(|(k, o)| o.kind() == OpKind::Ack && o.bth.psn == t.bth.psn && !used.contains(k))
            .unwrap_or_else(|| panic!("{}: no ACK of ours for frame {}", c.what, t.number()));
        used.insert(k);
        check(o, t);
        acks += 1;
    }
    // Requests (first copy of each PSN).
    let mut seen = BTreeSet::new();
    let cap_req: Vec<&Pkt> = from_qp
        .iter()
        .copied()
        .filter(|p| p.is_request() && seen.insert(p.bth.psn))
        .collect();
    let our_req: Vec<&Pkt> = ours.iter().filter(|p| p.is_request()).collect();
    assert_eq!(our_req.len(), cap_req.len(), "{}: requests", c.what);
    for (o, t) in our_req.iter().zip(&cap_req) {
        let ctx = format!("{}: request frame {} PSN {}", c.what, t.number(), t.bth.psn);
        assert_eq!(o.bth.opcode, t.bth.opcode, "{ctx}: opcode");
        assert_eq!(o.bth.psn, t.bth.psn, "{ctx}: PSN");
        assert_eq!(o.ext.reth, t.ext.reth, "{ctx}: RETH");
        assert_eq!(o.ext.atomic_eth, t.ext.atomic_eth, "{ctx}: AtomicETH");
        assert_eq!(o.ext.immdt, t.ext.immdt, "{ctx}: ImmDt");
        assert_eq!(o.ext.ieth, t.ext.ieth, "{ctx}: IETH");
        assert_eq!(
            o.ext.deth.map(|d| d.qkey),
            t.ext.deth.map(|d| d.qkey),
            "{ctx}: Q_Key"
        );
        assert!(o.payload == t.payload, "{ctx}: payload");
    }
    eprintln!(
        "{}: QP {:#x}: {} of our frames; {} READ/atomic responses, {} ACKs, {} requests matched",
        c.what,
        c.qpn,
        ours.len(),
        cap_data.len(),
        acks,
        cap_req.len()
    );
    (cap_data.len() + acks, cap_req.len())
}

#[test]
fn replay_fixtures_answer_as_captured() {
    let f = fixture;
    let cases = [
        case("rc_send", f("rc_send"), 0x12, "192.0.2.2", 0x11, true),
        case("rc_write", f("rc_write"), 0x12, "192.0.2.2", 0x11, true),
        case("rc_read", f("rc_read"), 0x12, "192.0.2.2", 0x11, true),
        case("rc_atomic", f("rc_atomic"), 0x12, "192.0.2.2", 0x11, true),
        case(
            "rc_mix responder",
            f("rc_mix"),
            0x12,
            "192.0.2.2",
            0x11,
            true,
        ),
        case(
            "rc_mix requester",
            f("rc_mix"),
            0x11,
            "192.0.2.1",
            0x12,
            true,
        ),
        case("uc_send", f("uc_send"), 0x22, "192.0.2.2", 0, true),
        case(
            "ud_send receiver",
            f("ud_send"),
            0x77,
            "192.0.2.2",
            0xabc,
            true,
        ),
        case(
            "ud_send sender",
            f("ud_send"),
            0xabc,
            "192.0.2.1",
            0x77,
            true,
        ),
    ];
    let mut responses = 0;
    let mut requests = 0;
    for c in &cases {
        let (a, b) = run_case(c);
        responses += a;
        requests += b;
    }
    // rc_send 6 ACKs, rc_write 5, rc_read 4 responses + 4... counted above;
    // the totals only guard against a silently empty comparison.
    assert!(responses >= 20, "{responses}");
    assert!(requests >= 6, "{requests}");
}

#[test]
fn replay_public_captures_answer_as_captured() {
    let s = shared_capture;
    let cases = [
        case(
            "pingpong_rc a",
            s("linlinw5__pingpong_rc"),
            0x20,
            "10.1.16.61",
            0x21,
            true,
        ),
        case(
            "pingpong_rc b",
            s("linlinw5__pingpong_rc"),
            0x21,
            "10.1.16.62",
            0x20,
            true,
        ),
        case(
            "pingpong_uc",
            s("linlinw5__pingpong_uc"),
            0x21,
            "10.1.16.61",
            0x22,
            true,
        ),
        case(
            "pingpong_ud",
            s("linlinw5__pingpong_ud"),
            0x23,
            "10.1.16.62",
            0x22,
            true,
        ),
        case(
            "rdma_write_bw resp",
            s("linlinw5__rdma_write_bw"),
            0x1b,
            "10.1.16.61",
            0x1d,
            true,
        ),
        case(
            "rdma_write_bw req",
            s("linlinw5__rdma_write_bw"),
            0x1d,
            "10.1.16.62",
            0x1b,
            true,
        ),
        case(
            "rdma_write_lat",
            s("linlinw5__rdma_write_lat"),
            0x24,
            "10.1.16.61",
            0x25,
            true,
        ),
        case(
            "rdma_read_bw resp",
            s("linlinw5__rdma_read_bw"),
            0x1c,
            "10.1.16.61",
            0x1e,
            true,
        ),
        case(
            "rdma_read_bw req",
            s("linlinw5__rdma_read_bw"),
            0x1e,
            "10.1.16.62",
            0x1c,
            true,
        ),
        case(
            "rdma_read_lat",
            s("linlinw5__rdma_read_lat"),
            0x27,
            "10.1.16.61",
            0x28,
            true,
        ),
        case(
            "rdma_send_bw",
            s("linlinw5__rdma_send_bw"),
            0x23,
            "10.1.16.61",
            0x24,
            true,
        ),
        case(
            "rdma_atomic_bw resp",
            s("linlinw5__rdma_atomic_bw"),
            0x28,
            "10.1.16.61",
            0x29,
            true,
        ),
        case(
            "rdma_atomic_bw req",
            s("linlinw5__rdma_atomic_bw"),
            0x29,
            "10.1.16.62",
            0x28,
            true,
        ),
        // ConnectX: real AETH credit counts, compared by class.
        case(
            "ib_send_bw_over_roce",
            s("magnate3__doc__ib_send_bw_over_roce"),
            0x18b,
            "10.10.10.27",
            0x18b,
            false,
        ),
        case(
            "rdma1 a",
            s("phdddddd__rdma1"),
            0xa0,
            "192.168.1.3",
            0xcf,
            false,
        ),
        case(
            "rdma1 b",
            s("phdddddd__rdma1"),
            0xcf,
            "192.168.1.2",
            0xa0,
            false,
        ),
    ];
    // Answer only, without re-sending the QP's own requests.
    let (resp, req) = {
        let out_path = tmp("answer-only.pcap");
        let out = roce()
            .arg("replay")
            .arg(s("linlinw5__pingpong_rc"))
            .args(["--qp", "0x20", "--no-requests", "--json", "--out"])
            .arg(&out_path)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        (v["matched_responses"].clone(), v["posted"].clone())
    };
    // pingpong_rc: 5 SENDs to QP 0x20, each ACKed (MANIFEST: RC_ACK×10 in
    // both directions).
    assert_eq!(resp, 5);
    assert_eq!(req, 0);
    let mut total = 0;
    for c in &cases {
        let (a, b) = run_case(c);
        total += a + b;
    }
    assert!(total >= 2000, "{total}");
}

#[test]
fn replay_refuses_an_ambiguous_or_missing_qp() {
    let out = roce()
        .arg("replay")
        .arg(fixture("rc_mix"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--qp") && err.contains("0x11") && err.contains("0x12"),
        "{err}"
    );
    let out = roce()
        .arg("replay")
        .arg(fixture("rc_mix"))
        .args(["--qp", "0x99"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = roce()
        .arg("replay")
        .arg(tmp("no-such-file.pcap"))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn replay_output_decodes_with_tshark() {
    if Command::new("tshark").arg("-v").output().is_err() {
        eprintln!("tshark not installed: skipped");
        return;
    }
    let out_path = tmp("tshark.pcap");
    let st = roce()
        .arg("replay")
        .arg(fixture("rc_read"))
        .arg("--out")
        .arg(&out_path)
        .output()
        .expect("run");
    assert_eq!(st.status.code(), Some(0));
    let t = Command::new("tshark")
        .arg("-r")
        .arg(&out_path)
        .args([
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
            "-e",
            "infiniband.bth.psn",
        ])
        .output()
        .expect("tshark");
    assert!(t.status.success(), "{t:?}");
    let lines: Vec<String> = String::from_utf8_lossy(&t.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    // rc_read: 4 READs answered by 10 response packets (PSN 12288..=12297;
    // opcodes 13/14/15/16 = FIRST/MIDDLE/LAST/ONLY).
    let psns: Vec<u32> = lines
        .iter()
        .map(|l| l.split('\t').nth(1).expect("psn").parse().expect("num"))
        .collect();
    assert_eq!(psns, (12288..=12297).collect::<Vec<u32>>());
    assert!(lines.iter().all(|l| {
        let op: u32 = l.split('\t').next().expect("op").parse().expect("num");
        (13..=16).contains(&op)
    }));
}

/// Exit status `code`, one line on stderr, no panic.
fn one_line(out: &Output, code: i32, what: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(code), "{what}: {err}");
    assert_eq!(err.lines().count(), 1, "{what}: {err:?}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    err
}

#[test]
fn replay_with_nothing_to_compare_is_not_a_success() {
    // A --peer-ip that matches nothing: no frame fed.
    let out = roce()
        .arg("replay")
        .arg(fixture("rc_send"))
        .args(["--peer-ip", "203.0.113.9"])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("fed 0 frames"), "{text}");
    assert!(text.contains("result: nothing compared"), "{text}");
    assert!(!text.contains("every captured response"), "{text}");
    // The requester of rc_send without its requests: the ACKs to it are
    // fed, but the capture has nothing of it to compare with.
    let out = roce()
        .arg("replay")
        .arg(fixture("rc_send"))
        .args(["--qp", "0x11", "--no-requests", "--json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["fed"].as_u64().expect("fed") > 0, "{v}");
    assert_eq!(v["compared"], 0, "{v}");
    assert_eq!(v["nothing_compared"], true, "{v}");
    assert_eq!(v["ok"], false, "{v}");
}

#[test]
fn replay_says_qp1_of_an_rdma_cm_capture_is_not_replayable() {
    // QP1 is the GSI: RDMA CM's connection management MADs (UD SENDs to QP
    // 1, Q_Key 0x80010000) go there, not to a QP of the verbs.
    let out = roce()
        .arg("replay")
        .arg(shared_capture("linlinw5__rdma_cm"))
        .args(["--qp", "1"])
        .output()
        .expect("run");
    let err = one_line(&out, 2, "--qp 1");
    assert!(err.contains("QP1") && err.contains("CM"), "{err}");
    assert!(!err.contains("KeyInUse"), "{err}");
}

#[test]
fn replay_refuses_devices_and_checks_the_magic_first() {
    let err = one_line(
        &roce().args(["replay", "/dev/zero"]).output().expect("run"),
        2,
        "/dev/zero",
    );
    assert!(err.contains("is a character device"), "{err}");
    // A file of zeros: refused on its magic number (64 GiB, sparse: reading
    // it whole would exhaust memory).
    let p = tmp("zeros.pcap");
    let f = std::fs::File::create(&p).expect("create");
    f.set_len(64 << 30).expect("sparse");
    drop(f);
    let out = roce().arg("replay").arg(&p).output().expect("run");
    let _ = std::fs::remove_file(&p);
    let err = one_line(&out, 2, "zeros");
    assert!(err.contains("magic number 0x00000000"), "{err}");
}
