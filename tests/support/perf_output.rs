//! Reading `roce perf` output (`tests/perf_cli.rs`, the two-process tests
//! `tests/perf_processes*.rs`): perftest's table, the `Total:` line and
//! the loss line.
// Each test binary uses a part of it.
#![allow(dead_code)]

use std::process::Output;

/// stdout and stderr of a finished process, as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).to_string(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

/// The values of the row under the `#bytes` header.
pub fn row(t: &str) -> Vec<String> {
    let mut lines = t.lines();
    lines
        .by_ref()
        .find(|l| l.trim_start().starts_with("#bytes"))
        .unwrap_or_else(|| panic!("no table in {t}"));
    lines
        .next()
        .expect("result row")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// `Total: B bytes in N operations ...`: (B, N).
pub fn total(t: &str) -> (u64, u64) {
    let l = t
        .lines()
        .find_map(|l| l.trim().strip_prefix("Total: "))
        .unwrap_or_else(|| panic!("no Total line in {t}"));
    let w: Vec<&str> = l.split_whitespace().collect();
    (w[0].parse().expect("bytes"), w[3].parse().expect("ops"))
}

/// The two counts of ` Loss: P (seed S)   dropped frames: A client->server,
/// B server->client`.
pub fn dropped(text: &str) -> [u64; 2] {
    let l = text
        .lines()
        .find_map(|l| l.split_once("dropped frames: ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no loss line in {text}"));
    let n: Vec<u64> = l
        .split(',')
        .map(|p| p.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    [n[0], n[1]]
}
