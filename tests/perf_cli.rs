//! The `roce perf` binary: every operation in BW and latency mode prints its
//! table and verifies its data, with and without loss; `--pcap` writes a
//! capture that `roce decode` reads; bad arguments are one line and exit 2.
//!
//! Oracles: the packet counts in the captures follow from the IBTA
//! segmentation rules alone (IBTA 1.7 §9.7.2, ROCEV2-DIGEST §5
//! "Segmentation"): a message of L bytes at path MTU P is `ceil(L / P)` packets
//! (FIRST, MIDDLE..., LAST), an RDMA READ is one request and `ceil(L / P)`
//! responses, an atomic one request and one ATOMIC ACKNOWLEDGE. The opcode names
//! are the IBTA's (Table 38). A capture taken over the `udp` backend is
//! checked with the independent ICRC reference (`tests/common/icrc_ref.rs`,
//! the `crc` crate) and read by tshark. No test asserts a time or a rate.

mod common;
#[path = "support/perf_output.rs"]
mod perf_output;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Output;

use common::roce;
use perf_output::{dropped, row as result_row};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    roce().args(args).output().expect("run roce")
}

fn tmp(name: &str) -> PathBuf {
    common::tmp("perf_cli", name)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Exit 0, a clean stderr, and the data verified.
fn assert_verified(out: &Output, what: &str) -> String {
    let text = stdout(out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: stderr {err}\nstdout {text}"
    );
    assert!(err.is_empty(), "{what}: stderr {err:?}");
    assert!(text.contains("data verified: OK"), "{what}: {text}");
    text
}

const BW_HEADER: [&str; 5] = [
    "#bytes",
    "#iterations",
    "BW peak[Gb/sec]",
    "BW average[Gb/sec]",
    "MsgRate[Mpps]",
];

const LAT_HEADER: [&str; 9] = [
    "#bytes",
    "#iterations",
    "t_min[usec]",
    "t_max[usec]",
    "t_typical[usec]",
    "t_avg[usec]",
    "t_stdev[usec]",
    "99% percentile[usec]",
    "99.9% percentile[usec]",
];

const OPS: [(&str, &str); 4] = [
    ("write", "RDMA_Write"),
    ("read", "RDMA_Read"),
    ("send", "Send"),
    ("atomic", "Atomic FETCH_AND_ADD"),
];

/// `-s 8K` for everything but atomics (always 8 bytes).
fn size_args(op: &str) -> Vec<&'static str> {
    if op == "atomic" {
        vec![]
    } else {
        vec!["-s", "8K"]
    }
}

fn expected_bytes(op: &str, default: &str) -> String {
    if op == "atomic" {
        "8".into()
    } else {
        default.into()
    }
}

#[test]
fn bw_each_op_prints_the_table_and_verifies() {
    for (op, title) in OPS {
        let mut args = vec!["perf", op, "-n", "200"];
        args.extend(size_args(op));
        let text = assert_verified(&run(&args), op);
        assert!(text.contains(&format!("{title} BW Test")), "{op}: {text}");
        for h in BW_HEADER {
            assert!(text.contains(h), "{op}: no {h:?} in {text}");
        }
        let row = result_row(&text);
        assert_eq!(row.len(), 5, "{op}: {row:?}");
        assert_eq!(row[0], expected_bytes(op, "8192"), "{op}");
        assert_eq!(row[1], "200", "{op}");
        for v in &row[2..] {
            let x: f64 = v.parse().expect("a number");
            assert!(x.is_finite() && x >= 0.0, "{op}: {row:?}");
        }
        assert!(text.contains("QPs: 1"), "{op}: {text}");
        assert!(text.contains("MTU: 4096"), "{op}: {text}");
        assert!(text.contains("TX depth: 128"), "{op}: {text}");
    }
}

#[test]
fn lat_each_op_prints_the_table_and_verifies() {
    for (op, title) in OPS {
        let text = assert_verified(&run(&["perf", op, "--lat", "-n", "100"]), op);
        assert!(
            text.contains(&format!("{title} Latency Test")),
            "{op}: {text}"
        );
        for h in LAT_HEADER {
            assert!(text.contains(h), "{op}: no {h:?} in {text}");
        }
        let row = result_row(&text);
        assert_eq!(row.len(), 9, "{op}: {row:?}");
        // perftest's latency default size is 2 bytes.
        assert_eq!(row[0], expected_bytes(op, "2"), "{op}");
        assert_eq!(row[1], "100", "{op}");
        let v: Vec<f64> = row[2..]
            .iter()
            .map(|s| s.parse().expect("number"))
            .collect();
        let (min, max, typ, p99, p999) = (v[0], v[1], v[2], v[5], v[6]);
        assert!(min <= typ && typ <= max, "{op}: {row:?}");
        assert!(min <= p99 && p99 <= p999 && p999 <= max, "{op}: {row:?}");
        assert!(text.contains("TX depth: 1"), "{op}: {text}");
    }
}

#[test]
fn one_percent_loss_still_verifies() {
    for (op, _) in OPS {
        let mut args = vec!["perf", op, "-n", "200", "--loss", "0.01", "--seed", "1"];
        args.extend(size_args(op));
        let text = assert_verified(&run(&args), op);
        assert!(text.contains("Loss: 0.01 (seed 1)"), "{op}: {text}");
        assert_eq!(result_row(&text)[1], "200", "{op}");
    }
}

#[test]
fn lossy_latency_run_verifies() {
    let text = assert_verified(
        &run(&[
            "perf", "send", "--lat", "-n", "100", "-s", "4K", "--loss", "0.02", "--seed", "3",
        ]),
        "send --lat --loss",
    );
    assert_eq!(result_row(&text)[..2], ["4096", "100"]);
}

fn stats_json(path: &Path) -> Value {
    let out = run(&["decode", "--stats", "--json", path.to_str().expect("utf-8")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "decode: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn opcode_counts(stats: &Value) -> HashMap<String, u64> {
    stats["opcodes"]
        .as_object()
        .expect("opcodes")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("count")))
        .collect()
}

/// Operation, opcode counts expected, whether RC_ACKNOWLEDGEs are expected.
type Expect = (&'static str, &'static [(&'static str, u64)], bool);

#[test]
fn pcap_is_decodable_with_good_icrcs_and_the_right_opcodes() {
    // 200 messages of 8192 bytes at PMTU 4096: two packets each.
    let expect: [Expect; 4] = [
        (
            "write",
            &[("RC_RDMA_WRITE_FIRST", 200), ("RC_RDMA_WRITE_LAST", 200)],
            true,
        ),
        (
            "read",
            &[
                ("RC_RDMA_READ_REQUEST", 200),
                ("RC_RDMA_READ_RESPONSE_FIRST", 200),
                ("RC_RDMA_READ_RESPONSE_LAST", 200),
            ],
            false,
        ),
        (
            "send",
            &[("RC_SEND_FIRST", 200), ("RC_SEND_LAST", 200)],
            true,
        ),
        (
            "atomic",
            &[("RC_FETCH_ADD", 200), ("RC_ATOMIC_ACKNOWLEDGE", 200)],
            false,
        ),
    ];
    for (op, counts, acked) in expect {
        let path = tmp(&format!("{op}.pcap"));
        let _ = std::fs::remove_file(&path);
        let mut args = vec![
            "perf",
            op,
            "-n",
            "200",
            "--pcap",
            path.to_str().expect("utf-8"),
        ];
        args.extend(size_args(op));
        let text = assert_verified(&run(&args), op);
        assert!(text.contains("frames written to"), "{op}: {text}");
        let s = stats_json(&path);
        let frames = s["frames"].as_u64().expect("frames");
        assert!(frames > 0, "{op}");
        assert_eq!(s["kinds"]["roce"].as_u64(), Some(frames), "{op}: {s}");
        assert_eq!(s["icrc"]["ok"].as_u64(), Some(frames), "{op}: {s}");
        assert_eq!(s["icrc"]["bad"].as_u64(), Some(0), "{op}: {s}");
        assert_eq!(s["icrc"]["truncated"].as_u64(), Some(0), "{op}: {s}");
        let mut ops = opcode_counts(&s);
        for (name, n) in counts {
            assert_eq!(ops.remove(*name), Some(*n), "{op}: {name} in {s}");
        }
        // SEND/WRITE are acknowledged by (possibly coalesced) ACKs; READ and
        // atomics by their responses.
        let acks = ops.remove("RC_ACKNOWLEDGE").unwrap_or(0);
        if acked {
            assert!(acks >= 1, "{op}: no RC_ACKNOWLEDGE in {s}");
        } else {
            assert_eq!(acks, 0, "{op}: {s}");
        }
        assert!(ops.is_empty(), "{op}: unexpected opcodes {ops:?}");
        assert!(
            text.contains(&format!(" pcap: {frames} frames written to")),
            "{op}: {text}"
        );
    }
}

#[test]
fn qps_share_the_work_round_robin() {
    // 3 QPs x 100 WRITEs of 4096 bytes at PMTU 1024: 4 packets per message.
    let path = tmp("write_q3.pcap");
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("utf-8");
    let text = assert_verified(
        &run(&[
            "perf", "write", "-q", "3", "--mtu", "1024", "-n", "100", "-s", "4K", "--pcap", p,
        ]),
        "write -q 3",
    );
    assert!(
        text.contains("QPs: 3") && text.contains("MTU: 1024"),
        "{text}"
    );
    assert_eq!(result_row(&text)[..2], ["4096", "100"]);
    let ops = opcode_counts(&stats_json(&path));
    assert_eq!(ops.get("RC_RDMA_WRITE_FIRST"), Some(&300));
    assert_eq!(ops.get("RC_RDMA_WRITE_MIDDLE"), Some(&600));
    assert_eq!(ops.get("RC_RDMA_WRITE_LAST"), Some(&300));
    // Every QP got its 100 messages.
    let out = run(&["decode", "--json", p]);
    assert_eq!(out.status.code(), Some(0));
    let mut per_qp: HashMap<u64, u64> = HashMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).expect("JSON line");
        if v["opcode_name"] == "RC_RDMA_WRITE_FIRST" {
            *per_qp
                .entry(v["dest_qp"].as_u64().expect("dest_qp"))
                .or_default() += 1;
        }
    }
    assert_eq!(per_qp.len(), 3, "{per_qp:?}");
    assert!(per_qp.values().all(|&n| n == 100), "{per_qp:?}");
}

#[test]
fn duration_mode_and_small_mtu() {
    let text = assert_verified(
        &run(&["perf", "send", "-D", "0.2", "-s", "1K", "--mtu", "256"]),
        "send -D",
    );
    let row = result_row(&text);
    assert_eq!(row[0], "1024");
    assert!(row[1].parse::<u64>().expect("iterations") > 0, "{row:?}");
    // A -D run's peak is its best whole second; under a second, the average.
    assert_eq!(row[2], row[3], "{row:?}");
    assert!(row[3].parse::<f64>().expect("average") > 0.0, "{row:?}");
    let text = assert_verified(&run(&["perf", "read", "-n", "50", "-s", "0"]), "read -s 0");
    assert_eq!(result_row(&text)[..2], ["0", "50"]);
}

/// Exit status 2, exactly one line on stderr, nothing on stdout.
fn assert_usage_error(args: &[&str]) -> String {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
    assert!(err.starts_with("roce perf: "), "{args:?}: {err:?}");
    assert!(out.stdout.is_empty(), "{args:?}: {:?}", stdout(&out));
    err
}

#[test]
fn bad_arguments_are_one_line_and_exit_2() {
    let e = assert_usage_error(&["perf", "atomic", "-s", "0"]);
    assert!(e.contains("8 bytes"), "{e}");
    for mtu in ["1000", "8192", "128", "0"] {
        let e = assert_usage_error(&["perf", "write", "--mtu", mtu]);
        assert!(e.contains("MTU"), "{e}");
    }
    for loss in ["1", "1.5", "-0.1", "nan"] {
        let e = assert_usage_error(&["perf", "write", "--loss", loss]);
        assert!(e.contains("loss"), "{e}");
    }
    let e = assert_usage_error(&["perf", "frobnicate"]);
    assert!(e.contains("frobnicate"), "{e}");
    assert_usage_error(&["perf"]);
    assert_usage_error(&["perf", "write", "-s", "12Q"]);
    assert_usage_error(&["perf", "write", "-n", "0"]);
    assert_usage_error(&["perf", "write", "-q", "0"]);
    assert_usage_error(&["perf", "write", "--tx-depth", "0"]);
    assert_usage_error(&["perf", "write", "-n", "5", "-D", "1"]);
    assert_usage_error(&["perf", "write", "--no-such-flag"]);
    let dir = tmp("no-such-dir").join("x.pcap");
    assert_usage_error(&["perf", "write", "--pcap", dir.to_str().expect("utf-8")]);
}

#[test]
fn a_stalled_run_fails_with_one_line() {
    // Half the frames lost and no ACK timer (--qp-timeout 0): a lost tail is
    // never resent, so the run stops making progress (or, first, runs out of
    // sequence-NAK retries).
    let out = run(&[
        "perf",
        "write",
        "-n",
        "200",
        "-s",
        "8K",
        "--loss",
        "0.5",
        "--qp-timeout",
        "0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.starts_with("roce perf: run failed: "), "{err:?}");
    assert!(!stdout(&out).contains("data verified"));
}

#[test]
fn help_lists_the_options() {
    let out = run(&["perf", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = stdout(&out);
    for opt in [
        "--lat",
        "--size",
        "--iters",
        "--duration",
        "--qps",
        "--mtu",
        "--tx-depth",
        "--loss",
        "--seed",
        "--pcap",
    ] {
        assert!(help.contains(opt), "--help lacks {opt}");
    }
}

#[test]
fn queue_sizes_beyond_the_memory_bound_are_refused_before_allocating() {
    // 4096 QPs x 16384 WQEs per side: the rings, WQE slots and CQ entries
    // alone are tens of GB (the old code aborted allocating 5 GB for the
    // CQ). One line, exit 2, no allocation failure.
    let e = assert_usage_error(&["perf", "write", "-q", "4096", "-t", "16384", "-s", "2"]);
    assert!(
        e.contains("MiB of memory") && e.contains("4096 QPs x 16384 WQEs"),
        "{e}"
    );
    assert!(!e.contains("memory allocation"), "{e}");
    // Within the bound, the same QP count runs.
    assert_verified(
        &run(&[
            "perf", "write", "-q", "64", "-t", "16", "-s", "2", "-n", "20",
        ]),
        "-q 64 -t 16",
    );
}

#[test]
fn qp_timeout_and_mtu_messages_say_what_is_accepted() {
    // perftest's -u is the IBTA's 5-bit local ACK timeout (0..=31); roce perf
    // accepts 0..=20 and says so, also for values that do not fit a byte.
    for v in ["21", "31", "256", "99999"] {
        let e = assert_usage_error(&["perf", "write", "-u", v]);
        assert!(e.contains("0..=20"), "{v}: {e}");
        assert!(!e.contains("0..=255"), "{v}: {e}");
    }
    assert_verified(&run(&["perf", "write", "-u", "20", "-n", "10"]), "-u 20");
    // The path MTU is one of the five IBTA values (`enum ibv_mtu`), not a
    // range.
    for v in ["300", "1500", "9000"] {
        let e = assert_usage_error(&["perf", "write", "-m", v]);
        assert!(e.contains("256, 512, 1024, 2048 or 4096"), "{v}: {e}");
    }
}

#[test]
fn a_run_of_more_operations_than_are_stamped_counts_them() {
    // 2^20 + some operations: the per-operation stamps stop at 2^20 (16 MiB);
    // the run reports its peak from counts and says so.
    let text = assert_verified(
        &run(&["perf", "write", "-s", "2", "-n", "1100000", "-t", "512"]),
        "-n 1100000",
    );
    assert_eq!(result_row(&text)[..2], ["2", "1100000"]);
    assert!(
        text.contains("a run of more than 1048576 operations counts completions"),
        "{text}"
    );
    // Below the limit, no note.
    let text = assert_verified(&run(&["perf", "write", "-s", "2", "-n", "1000"]), "-n 1000");
    assert!(!text.contains("counts completions"), "{text}");
}

/// The `N` of ` pcap: N frames written to ...`.
fn pcap_frames(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("pcap: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no pcap line in {text}"))
}

/// `--loss` and `--pcap` work on the `udp` backend, not only on `mem`: the
/// run verifies, the client's lost frames are counted, and the capture
/// holds every frame the wire delivered once: as many as the run reports,
/// each with an ICRC the independent reference verifies, and (as tshark
/// reads them) every one of the 200 messages' WRITE FIRST PSNs.
#[test]
fn loss_and_pcap_work_on_the_udp_backend() {
    let path = tmp("udp-loss.pcap");
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("utf-8");
    let text = assert_verified(
        &run(&[
            "perf",
            "write",
            "--backend",
            "udp",
            "-n",
            "200",
            "-s",
            "8K",
            "--loss",
            "0.05",
            "--seed",
            "5",
            "--pcap",
            p,
        ]),
        "udp --loss --pcap",
    );
    assert!(text.contains("Loss: 0.05 (seed 5)"), "{text}");
    assert!(dropped(&text)[0] > 0, "{text}");
    let frames = common::read_pcap(&path);
    assert_eq!(frames.len() as u64, pcap_frames(&text), "{text}");
    for (i, f) in frames.iter().enumerate() {
        let loc = common::icrc_ref::locate(f)
            .unwrap_or_else(|| panic!("frame {}: not RoCEv2 to 4791", i + 1));
        assert_eq!(
            common::icrc_ref::reference_icrc(loc.form, loc.covered).to_le_bytes(),
            loc.wire,
            "frame {}: ICRC",
            i + 1
        );
    }
    let Some(bin) = common::tshark() else { return };
    let rows = common::tshark_fields(
        &bin,
        &path,
        &[],
        &["infiniband.bth.opcode", "infiniband.bth.psn"],
    );
    assert_eq!(rows.len(), frames.len(), "tshark's frames");
    // RC RDMA WRITE FIRST is opcode 6 (IBTA 1.7 Table 38).
    let first_psns: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.get("infiniband.bth.opcode").map(String::as_str) == Some("6"))
        .filter_map(|r| r.get("infiniband.bth.psn").map(String::as_str))
        .collect();
    assert_eq!(first_psns.len(), 200, "WRITE FIRST PSNs in the capture");
}
