//! Capturing a run's frames with `dumpcap` (needs root) and checking them
//! with two things we did not write: tshark must decode every RoCEv2 frame
//! as InfiniBand over UDP (its `infiniband` BTH fields), and the ICRC in
//! the frame must equal the tests' independent CRC-32 reference
//! (`tests/common/icrc_ref.rs`: the `crc` crate's catalogue CRC-32 over the
//! pseudo-packet of ROCEV2-DIGEST.md §4; stored least-significant byte
//! first). Used by `capture.rs` (the UDP backend, on lo) and `tap.rs` (a
//! TAP port in a namespace).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::icrc_ref::{reference_icrc, Form};

/// RoCEv2's UDP port (tshark decodes it without being told).
pub const ROCE_PORT: u16 = 4791;

/// A running dumpcap and the lines it prints on stderr.
pub struct Capture {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Capture {
    /// Start dumpcap on `iface` with capture filter `filter` (a 64 MiB
    /// kernel buffer), under the command prefix `wrap` (`ip netns exec
    /// NS`, or nothing), writing classic pcap to `out`; returns once it has
    /// captured a frame, calling `probe` every 100 ms to make one (dumpcap
    /// says "Capturing on" before its filter is attached). The probe's
    /// frames must be told apart by the caller.
    pub fn start(
        wrap: &[String],
        iface: &str,
        filter: &str,
        out: &Path,
        mut probe: impl FnMut(),
    ) -> Capture {
        let mut cmd = match wrap.split_first() {
            None => Command::new("dumpcap"),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg("dumpcap");
                c
            }
        };
        let mut child = cmd
            .args(["-B", "64", "-P", "-i", iface, "-f", filter])
            .arg("-w")
            .arg(out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("dumpcap (tshark's package)");
        let err = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // Lines end in \n, progress counts ("Packets: N") in \r.
            use std::io::Read;
            let mut r = err;
            let mut cur = Vec::new();
            let mut b = [0u8; 256];
            while let Ok(n) = r.read(&mut b) {
                if n == 0 {
                    break;
                }
                for &c in &b[..n] {
                    if c == b'\n' || c == b'\r' {
                        if !cur.is_empty()
                            && tx.send(String::from_utf8_lossy(&cur).into_owned()).is_err()
                        {
                            return;
                        }
                        cur.clear();
                    } else {
                        cur.push(c);
                    }
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            probe();
            match lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.starts_with("Packets: ") && l != "Packets: 0" => break,
                Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(_) => panic!("dumpcap exited"),
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("dumpcap did not start capturing");
            }
        }
        Capture { child, lines }
    }

    /// Stop the capture (SIGINT to our own child, by PID, so dumpcap
    /// flushes) and return how many packets it captured; panics if the
    /// kernel or dumpcap dropped any.
    pub fn stop(mut self) -> usize {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut captured = None;
        let mut dropped_line = None;
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) => {
                    if let Some(n) = l.strip_prefix("Packets captured: ") {
                        captured = n.trim().parse().ok();
                    }
                    if l.starts_with("Packets received/dropped") {
                        dropped_line = Some(l);
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(_) => {}
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let d = dropped_line.expect("dumpcap's drop report");
        // "...: R/D (pcap:0/dumpcap:0/flushed:0/ps_ifdrop:0) ..."
        let rd = d
            .rsplit_once("': ")
            .and_then(|(_, x)| x.split_whitespace().next())
            .unwrap_or("");
        assert!(
            rd.ends_with("/0") && d.contains("pcap:0/dumpcap:0"),
            "capture dropped frames: {d}"
        );
        captured.expect("dumpcap's packet count")
    }
}

/// Whether `frame` is IPv4/UDP to or from `port`.
pub fn is_udp_port(frame: &[u8], port: u16) -> bool {
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    frame.len() >= 14 + 20 + 8
        && frame[12..14] == [0x08, 0x00]
        && frame[14] == 0x45
        && frame[14 + 9] == 17
        && (be16(frame, 14 + 20) == port || be16(frame, 14 + 22) == port)
}

/// One captured frame's ICRC check: (stored, reference), or `None` if the
/// frame is not IPv4/UDP to or from `port`.
pub fn icrc_of(frame: &[u8], port: u16) -> Option<([u8; 4], [u8; 4])> {
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]) as usize;
    if frame.len() < 14 + 20 + 8 + 12 + 4 || be16(frame, 12) != 0x0800 {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl != 20 || ip[9] != 17 {
        return None;
    }
    let total = be16(ip, 2);
    if total > ip.len() || total < 20 + 8 + 12 + 4 {
        return None;
    }
    let udp = &ip[20..];
    if be16(udp, 0) != usize::from(port) && be16(udp, 2) != usize::from(port) {
        return None;
    }
    let reference = reference_icrc(Form::V2Ipv4, &ip[..total - 4]).to_le_bytes();
    let stored: [u8; 4] = ip[total - 4..total].try_into().ok()?;
    Some((stored, reference))
}

/// Every frame of a classic pcap file.
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    roce_io::pcap::read_timed(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|f| f.data)
        .collect()
}

/// tshark, which must be installed (scripts/test.sh installs it).
pub fn tshark() -> &'static str {
    let ok = Command::new("tshark")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "tshark missing: run scripts/test.sh --deps-only");
    "tshark"
}

/// tshark's reading of `file`'s UDP `port` frames: asserts it decodes
/// `expected` frames, each with an InfiniBand BTH opcode, destination QP
/// and PSN. Returns the number.
pub fn tshark_decodes_all(file: &Path, port: u16, expected: usize, what: &str) -> usize {
    let out = Command::new(tshark())
        .arg("-n")
        .arg("-r")
        .arg(file)
        .arg("-Y")
        .arg(format!("udp.port=={port}"))
        .args(["-T", "fields", "-E", "separator=|"])
        .args(["-e", "frame.number", "-e", "infiniband.bth.opcode"])
        .args(["-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn"])
        .output()
        .expect("tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), expected, "{what}: tshark frame count");
    for l in &lines {
        let f: Vec<&str> = l.split('|').collect();
        assert!(
            f.len() == 4 && f[1..].iter().all(|x| !x.is_empty()),
            "{what}: frame not decoded as InfiniBand: {l:?}"
        );
    }
    lines.len()
}

/// Assert that every frame's ICRC equals the reference; a wrong one that
/// equals the ICRC over IPv4 identification 0 is named as the UDP
/// backend's known wire defect.
pub fn assert_icrcs(frames: &[Vec<u8>], port: u16, what: &str) {
    let mut bad = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let (stored, reference) =
            icrc_of(f, port).unwrap_or_else(|| panic!("{what}: frame {} is not RoCEv2/UDP", i + 1));
        if stored != reference {
            let mut z = f.clone();
            z[14 + 4] = 0;
            z[14 + 5] = 0;
            let over_zero = icrc_of(&z, port).is_some_and(|(_, r)| r == stored);
            bad.push(format!(
                "frame {}: stored {stored:02x?}, reference {reference:02x?}{}",
                i + 1,
                if over_zero {
                    " (= the ICRC over IP identification 0: the UDP backend's wire defect)"
                } else {
                    ""
                }
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {} ICRCs wrong:\n{}",
        bad.len(),
        frames.len(),
        bad.join("\n")
    );
}
