//! dumpcap on an interface of the namespace, with a snap length (frames
//! of large runs are kept to their headers).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running dumpcap and the lines it prints on stderr.
pub struct Capture {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Capture {
    /// Start dumpcap on `iface` under `wrap` (`ip netns exec NS`) with
    /// capture filter `filter`, snap length `snaplen` (0: whole frames), a
    /// 64 MiB buffer, writing classic pcap to `out`; return once it has
    /// captured a frame, calling `probe` every 100 ms to make one.
    ///
    /// # Errors
    /// dumpcap missing, exited, or captured nothing within 20 s.
    pub fn start(
        wrap: &[String],
        iface: &str,
        filter: &str,
        snaplen: u32,
        out: &Path,
        mut probe: impl FnMut(),
    ) -> Result<Capture, String> {
        let mut cmd = match wrap.split_first() {
            None => Command::new("dumpcap"),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg("dumpcap");
                c
            }
        };
        if snaplen > 0 {
            cmd.args(["-s", &snaplen.to_string()]);
        }
        let mut child = cmd
            .args(["-q", "-B", "64", "-P", "-i", iface, "-f", filter])
            .arg("-w")
            .arg(out)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("dumpcap (tshark's package): {e}"))?;
        let err = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
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
        let start = Instant::now();
        let deadline = start + Duration::from_secs(20);
        let mut capturing = false;
        // -q prints no counts: wait until the file holds a record; an
        // interface without carrier (a TAP whose program has not opened it
        // yet) has none to give: there dumpcap's "Capturing on" and 3 s
        // suffice, as nothing crosses it before its program starts.
        let mut early = Vec::new();
        loop {
            probe();
            std::thread::sleep(Duration::from_millis(100));
            for l in lines.try_iter() {
                capturing |= l.starts_with("Capturing on");
                early.push(l);
            }
            if std::fs::metadata(out).is_ok_and(|m| m.len() > 24) {
                break;
            }
            if capturing && start.elapsed() > Duration::from_secs(3) {
                break;
            }
            if let Ok(Some(s)) = child.try_wait() {
                return Err(format!("dumpcap exited ({s}): {}", early.join(" / ")));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "dumpcap on {iface} captured nothing in 20 s: {}",
                    early.join(" / ")
                ));
            }
        }
        Ok(Capture { child, lines })
    }

    /// Stop it (SIGINT to our own child, by PID, so dumpcap flushes).
    /// `Err` if the kernel or dumpcap dropped frames.
    ///
    /// # Errors
    /// dumpcap's drop report when it is not all zeros.
    pub fn stop(mut self) -> Result<(), String> {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut dropped_line = None;
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) => {
                    if l.starts_with("Packets received/dropped") {
                        dropped_line = Some(l);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(_) => {}
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        match dropped_line {
            Some(d) if d.contains("pcap:0/dumpcap:0") => Ok(()),
            Some(d) => Err(format!("capture dropped frames: {d}")),
            None => Ok(()),
        }
    }
}
