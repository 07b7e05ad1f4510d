//! Starting `roce perf` processes and reading their output
//! (`tests/perf_cli.rs`, the two-process tests `tests/perf_processes*.rs`):
//! perftest's table, the `Total:` line and the loss line.
// Each test binary uses a part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};

/// `roce ARGS` of this build, stdout and stderr piped.
pub fn spawn_roce(args: &[String]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn roce")
}

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

/// Wait for the client, then the server (killed first when the client
/// failed: a client that never connected leaves it waiting); both exit 0
/// and verify, and each prints the table for `size` bytes x `iters`
/// iterations and a `Total` of `qps` QPs' worth. `server_stdout`: the
/// server's stdout when the caller took it to read the port (`None`: from
/// its output). Returns the (client, server) stdout and stderr texts.
pub fn finish_pair(
    op: &str,
    (size, iters, qps): (u64, u64, u64),
    client: Child,
    mut server: Child,
    server_stdout: Option<Box<dyn FnOnce() -> String>>,
) -> ((String, String), (String, String)) {
    let c = client.wait_with_output().expect("client");
    if !c.status.success() {
        let _ = server.kill();
    }
    let s = server.wait_with_output().expect("server");
    let (ct, ce) = text(&c);
    let (st, se) = text(&s);
    let st = server_stdout.map_or(st, |f| f());
    assert_eq!(
        c.status.code(),
        Some(0),
        "{op} client: {ct}\n{ce}\nserver: {st}\n{se}"
    );
    assert_eq!(
        s.status.code(),
        Some(0),
        "{op} server: {st}\n{se}\nclient: {ct}\n{ce}"
    );
    for (who, t) in [("client", &ct), ("server", &st)] {
        assert!(t.contains("data verified: OK"), "{op} {who}: {t}");
        assert!(t.contains(&format!("Side: {who}")), "{op} {who}: {t}");
        let r = row(t);
        assert_eq!(r[0], size.to_string(), "{op} {who}: #bytes");
        assert_eq!(r[1], iters.to_string(), "{op} {who}: #iterations");
        // -n is per QP (perftest): bytes = QPs x iterations x size.
        assert_eq!(
            total(t),
            (qps * iters * size, qps * iters),
            "{op} {who}: Total"
        );
    }
    ((ct, ce), (st, se))
}
