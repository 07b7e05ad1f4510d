//! A network namespace of a test's own, and a capture of its loopback, for
//! the tests that look at what the `udp` backend puts on the wire
//! (`tests/udp_wire.rs`, `tests/udp_captures.rs`, which include this file
//! with `#[path]`). Needs root; `ROCE_SKIP_ROOT_TESTS=1` skips.
//!
//! [`own_netns`] runs the calling test again, alone, in a child process
//! made by `unshare --net` (util-linux): a namespace with nothing but
//! `lo`, which disappears with the process, so the test may bind port 4791,
//! add addresses to `lo` and capture everything on it without touching the
//! host or the other tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[path = "root.rs"]
mod root;
pub use root::sh;

/// The variable that tells the child it runs in its namespace.
const CHILD: &str = "ROCE_UDP_NETNS_CHILD";

/// Hang guard for starting and stopping the capture.
const LIMIT: Duration = Duration::from_secs(30);

/// Run the test named `test` (its path in the test binary) in a network
/// namespace of its own. Returns `true` in that child, where the test's
/// body then runs (`lo` is up); `false` in the parent, after the child
/// passed (it panics with the child's output otherwise), or when
/// `ROCE_SKIP_ROOT_TESTS=1`.
///
/// # Panics
/// When not root, without `unshare`, `ip` or `tshark`, or when the child
/// fails.
pub fn own_netns(test: &str) -> bool {
    if std::env::var(CHILD).as_deref() == Ok(test) {
        sh(&["ip", "link", "set", "lo", "up"]);
        return true;
    }
    let tools = [
        ("unshare", "--version", "util-linux"),
        ("ip", "-V", "iproute2"),
        ("tshark", "-v", "tshark"),
    ];
    if !root::may_run(
        test,
        "captures on loopback in a network namespace of its own",
        &tools,
    ) {
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("unshare")
        .arg("--net")
        .arg("--")
        .arg(&exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, test)
        .output()
        .expect("run unshare");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{test} in its namespace: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    eprint!("{stderr}");
    false
}

/// Port of the marker datagrams that tell when the capture has caught up
/// (discard, RFC 863; nothing listens on it).
const MARKER_PORT: u16 = 9;

/// tshark capturing on `lo` into a pcap file.
pub struct Capture {
    /// The pcap file (classic, microsecond, Ethernet: `lo`'s link type).
    pub path: PathBuf,
    child: Option<Child>,
    printed: mpsc::Receiver<String>,
    marker: UdpSocket,
    markers: usize,
}

impl Capture {
    /// Start tshark on `lo` with capture filter `filter` (marker datagrams
    /// to 127.0.0.1:9 are let through too), and wait until it sees them.
    pub fn start(tag: &str, filter: &str) -> Capture {
        let path = std::env::temp_dir().join(format!("roce-udp-{}-{tag}.pcap", std::process::id()));
        let f = format!("({filter}) or (udp dst port {MARKER_PORT})");
        let mut child = Command::new("tshark")
            .args(["-n", "-i", "lo", "-f", &f, "-F", "pcap", "-w"])
            .arg(&path)
            .args([
                "-P",
                "-l",
                "-T",
                "fields",
                "-e",
                "udp.dstport",
                "-e",
                "udp.length",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tshark");
        let stdout = child.stdout.take().expect("tshark stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let marker = UdpSocket::bind("127.0.0.1:0").expect("marker socket");
        let mut c = Capture {
            path,
            child: Some(child),
            printed: rx,
            marker,
            markers: 0,
        };
        c.sync();
        c
    }

    /// Send marker datagrams until tshark prints one: everything sent
    /// before this call returns is in the file.
    pub fn sync(&mut self) {
        self.markers += 1;
        let payload = vec![0x55u8; 16 + self.markers];
        let want = format!("{MARKER_PORT}\t{}", 8 + payload.len());
        let to: SocketAddr = ([127, 0, 0, 1], MARKER_PORT).into();
        let start = Instant::now();
        loop {
            let _ = self.marker.send_to(&payload, to);
            let wait = Instant::now();
            while wait.elapsed() < Duration::from_millis(200) {
                match self.printed.recv_timeout(Duration::from_millis(50)) {
                    Ok(line) if line.trim() == want => return,
                    Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => panic!("tshark exited"),
                }
            }
            assert!(
                start.elapsed() < LIMIT,
                "tshark never printed marker {want}"
            );
        }
    }

    /// Sync, stop tshark (SIGINT, so it flushes the file) and return the
    /// captured frames, markers left out. The file stays until the
    /// capture is dropped.
    pub fn stop(&mut self) -> Vec<Vec<u8>> {
        self.sync();
        self.kill();
        let frames = crate::common::read_pcap(&self.path);
        frames
            .into_iter()
            .filter(|f| {
                // IPv4 + UDP to the marker port.
                !(f.len() >= 38
                    && f[12..14] == [0x08, 0x00]
                    && f[23] == 17
                    && f[36..38] == MARKER_PORT.to_be_bytes())
            })
            .collect()
    }

    fn kill(&mut self) {
        if let Some(c) = self.child.take() {
            root::interrupt(c, LIMIT);
        }
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.kill();
        if std::env::var_os("ROCE_UDP_KEEP_PCAP").is_some() {
            eprintln!("capture kept: {}", self.path.display());
        } else {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
