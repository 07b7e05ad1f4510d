//! Helpers shared by the integration tests.
// Each test binary uses a part of the helpers.
#![allow(dead_code, unused_imports)]

pub mod icrc_ref;
// The reference files of ../shared, one module for every test tree.
#[path = "../../stack/tests/common/shared.rs"]
mod shared;

use std::path::PathBuf;

pub use roce_stack::testing::unhex;
pub use shared::{public_vectors, reference_vectors, shared_dir};

/// The `roce` binary of this build.
pub fn roce() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// `name` in a scratch directory of test `test` (created), under cargo's
/// per-target temporary directory.
pub fn tmp(test: &str, name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(test);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir.join(name)
}

/// Every frame of the capture at `path` (pcap or pcapng), in file order,
/// read by the project's capture reader (`roce_io::pcap::read_timed`).
///
/// # Panics
/// If the file cannot be read or is not a capture.
pub fn read_pcap(path: &std::path::Path) -> Vec<Vec<u8>> {
    read_pcap_timed(path).into_iter().map(|f| f.data).collect()
}

/// [`read_pcap`] with each frame's capture time.
///
/// # Panics
/// As [`read_pcap`].
pub fn read_pcap_timed(path: &std::path::Path) -> Vec<roce_io::pcap::TimedFrame> {
    roce_io::pcap::read_timed(path).unwrap_or_else(|e| panic!("{e}"))
}

/// The tshark binary (`$TSHARK` or `tshark`), or `None` when
/// `ROCE_SKIP_TSHARK=1`.
///
/// # Panics
/// If tshark cannot be run and the skip variable is not set (scripts/test.sh
/// installs it).
pub fn tshark() -> Option<String> {
    if std::env::var("ROCE_SKIP_TSHARK").as_deref() == Ok("1") {
        eprintln!("ROCE_SKIP_TSHARK=1: skipping the tshark cross-check");
        return None;
    }
    let bin = std::env::var("TSHARK").unwrap_or_else(|_| "tshark".to_string());
    match std::process::Command::new(&bin).arg("-v").output() {
        Ok(o) if o.status.success() => Some(bin),
        Ok(o) => panic!(
            "`{bin} -v` failed ({}): the tshark cross-check needs tshark (Debian/Ubuntu: \
             `apt-get install tshark`); set ROCE_SKIP_TSHARK=1 to skip it",
            o.status
        ),
        Err(e) => panic!(
            "cannot run `{bin}`: {e}. The tshark cross-check needs tshark (Debian/Ubuntu: \
             `apt-get install tshark`); set ROCE_SKIP_TSHARK=1 to skip it"
        ),
    }
}

/// `tshark -n -r file ARGS -T fields -e F...` (all occurrences, `|`
/// separated): per frame, field -> value, with empty fields left out.
pub fn tshark_fields(
    bin: &str,
    file: &std::path::Path,
    args: &[&str],
    fields: &[&'static str],
) -> Vec<std::collections::HashMap<&'static str, String>> {
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("-n").arg("-r").arg(file).args(args).args([
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark on {}: {}\n{}",
        file.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("tshark output is UTF-8")
        .lines()
        .map(|line| {
            let vals: Vec<&str> = line.split('|').collect();
            assert_eq!(vals.len(), fields.len(), "tshark line {line:?}");
            fields
                .iter()
                .zip(vals)
                .filter(|(_, v)| !v.trim().is_empty())
                .map(|(f, v)| (*f, v.trim().to_string()))
                .collect()
        })
        .collect()
}
