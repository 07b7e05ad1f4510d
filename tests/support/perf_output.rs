//! Reading `roce perf` output in the two-process tests
//! (`tests/perf_processes*.rs`): perftest's table and the `Total:` line.

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
