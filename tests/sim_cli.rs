//! The `roce sim` binary: inputs that would need unbounded memory are
//! refused with one line on stderr and exit status 2 (never an abort), and
//! the leaf-spine scenarios run from the command line with their tables
//! (small fabrics, so the runs take a fraction of a second).

use std::path::Path;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .arg("sim")
        .args(args)
        .output()
        .expect("run roce sim")
}

fn refused(args: &[&str], needle: &str) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: one line: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}: nothing run");
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn inputs_that_imply_gigabytes_are_refused_before_allocating() {
    // These aborted allocating 6.5-69 GB before (issue 11 section 3).
    refused(&["incast", "--window", "100000"], "--window 100000");
    refused(&["incast", "--msg", "4294967295"], "--msg 4294967295");
    refused(&["incast", "-n", "250", "--window", "1000"], "MiB");
    refused(&["pfc-hol", "-n", "100", "--window", "4096"], "limit");
    // The leaf-spine scenarios bound their flows the same way.
    refused(
        &["alltoall", "--leaves", "16", "--hosts-per-leaf", "16"],
        "would need",
    );
    refused(
        &["allreduce", "--leaves", "4", "--memory-limit", "10"],
        "limit 10 MiB",
    );
    refused(&["allreduce", "--host-gbps", "300"], "--host-gbps 300");
    refused(&["allreduce", "--leaves", "0"], "--leaves");
    refused(&["allreduce", "--size", "2", "--leaves", "2"], "--size 2");
    refused(&["fct", "--load", "1.5"], "--load 1.5");
    refused(&["fct", "--flows", "0"], "--flows");
    refused(&["incast", "--compare"], "--compare");
}

#[test]
fn allreduce_runs_and_reports_against_the_ideal() {
    let o = run(&[
        "allreduce",
        "--leaves",
        "2",
        "--hosts-per-leaf",
        "2",
        "--spines",
        "1",
        "--host-gbps",
        "100",
        "--uplink-gbps",
        "100",
        "--size",
        "256KiB",
        "--mode",
        "none",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.starts_with("all-reduce of 256 KiB per host over 4 hosts [mode none]"),
        "{out}"
    );
    // tests/collective.rs works this run out by hand: 6 steps of
    // 14.39008 µs; ideal 6 x 5.34784 µs.
    assert!(
        out.contains("completion time [us]                     86.3 (ideal 32.1"),
        "{out}"
    );
    assert!(
        out.contains("steps / step time min-max [us]           6 / 14.39 - 14.39"),
        "{out}"
    );
    assert!(
        out.contains("all transfers completed, data verified   yes"),
        "{out}"
    );
    assert!(
        out.contains("cyclic buffer dependency                 none"),
        "{out}"
    );
    assert!(out.contains(" wall time "), "{out}");
    // Not a terminal: no progress on stderr.
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn compare_prints_every_mode_side_by_side() {
    let o = run(&[
        "alltoall",
        "--leaves",
        "2",
        "--hosts-per-leaf",
        "4",
        "--spines",
        "1",
        "--host-gbps",
        "100",
        "--uplink-gbps",
        "100",
        "--size",
        "2MiB",
        "--compare",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let head = out
        .lines()
        .find(|l| l.contains("dcqcn+pfc"))
        .expect("mode header");
    for m in ["none", "pfc", "dcqcn"] {
        assert!(head.contains(m), "{head}");
    }
    let verified = out
        .lines()
        .find(|l| l.trim_start().starts_with("delivered+verified"))
        .expect("delivered row");
    assert_eq!(verified.matches("yes").count(), 4, "{out}");
}

#[test]
fn fct_runs_with_slowdown_per_bucket() {
    let o = run(&[
        "fct",
        "--leaves",
        "2",
        "--hosts-per-leaf",
        "2",
        "--spines",
        "1",
        "--host-gbps",
        "100",
        "--flows",
        "60",
        "--dist",
        "hadoop",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("background flows (hadoop, load 0.50) over 4 hosts"),
        "{out}"
    );
    assert!(out.contains("60 flows finished of 60 started"), "{out}");
    assert!(out.contains(" all "), "{out}");
    assert!(
        out.contains("all flows completed, data verified       yes"),
        "{out}"
    );
}

#[test]
fn plots_of_the_leaf_spine_scenarios() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sim_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("ar.svg");
    let o = run(&[
        "allreduce",
        "--leaves",
        "2",
        "--hosts-per-leaf",
        "4",
        "--spines",
        "1",
        "--host-gbps",
        "100",
        "--uplink-gbps",
        "100",
        "--placement",
        "random",
        "--size",
        "1MiB",
        "--compare",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("no TrueType font") && std::env::var_os("ROCE_SKIP_PLOT_FONT").is_some() {
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{err}");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg"));
    assert!(s.contains("completion time of each step"));
    assert!(s.contains("dcqcn+pfc"));
    refused(&["allreduce", "--plot", "x.pdf"], "x.pdf");
}
