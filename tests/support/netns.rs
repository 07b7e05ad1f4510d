//! A network namespace with a bridge and two TAP ports, for the tests and
//! benches that need the kernel between two stacks (`tests/tap_netns.rs`,
//! `benches/tap.rs`, and with [`TapWire`] `tests/perf_processes_tap.rs` and
//! `ibverbs/tests/tap.rs`, which include this file with `#[path]`). Needs
//! root.
//! Everything is removed by [`Netns`]'s `Drop`, on panic too.
//!
//! `ROCE_TAP_KEEP_PCAP=1` keeps the capture file (its path is printed);
//! `ROCE_TAP_DEBUG=1` prints tshark's messages.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant as WallClock};

use roce_io::tap::TapIo;

#[path = "root.rs"]
mod root;
pub use root::sh;

/// Hang guard for starting and stopping the capture.
const LIMIT: Duration = Duration::from_secs(30);

/// Whether the root-only tests may run (see [`root::may_run`]; `ip` is
/// always needed, and `/dev/net/tun`). `who` names the caller in the
/// messages.
pub fn preconditions(who: &str, tools: &[(&str, &str, &str)]) -> bool {
    let tools: Vec<(&str, &str, &str)> = [("ip", "-V", "iproute2")]
        .into_iter()
        .chain(tools.iter().copied())
        .collect();
    if !root::may_run(
        who,
        "creates TAP interfaces, a network namespace and a bridge",
        &tools,
    ) {
        return false;
    }
    assert!(
        Path::new("/dev/net/tun").exists(),
        "{who}: /dev/net/tun is missing (modprobe tun); set ROCE_SKIP_ROOT_TESTS=1 to skip"
    );
    true
}

/// The namespace, bridge, capture and TAP names of one test; `Drop`
/// removes them.
pub struct Netns {
    /// The namespace's name.
    pub ns: String,
    /// The TAP interfaces' names.
    pub taps: Vec<String>,
    /// Where [`Netns::start_capture`] writes.
    pub pcap: PathBuf,
    capture: Option<Child>,
    /// The frames tshark printed (their source MACs).
    printed: Option<mpsc::Receiver<String>>,
    markers: u8,
}

pub const BRIDGE: &str = "rbr0";

impl Netns {
    /// A namespace `roce{pid}{tag}` with bridge `rbr0` (10.99.0.254/24,
    /// fd99::fe/64, no STP, no multicast snooping) up in it.
    pub fn new(tag: &str) -> Netns {
        let pid = std::process::id();
        let n = Netns {
            ns: format!("roce{pid}{tag}"),
            taps: vec![format!("rtap{pid}{tag}a"), format!("rtap{pid}{tag}b")],
            pcap: std::env::temp_dir().join(format!("roce-tap-{pid}{tag}.pcap")),
            capture: None,
            printed: None,
            markers: 0,
        };
        let _ = Command::new("ip").args(["netns", "del", &n.ns]).output();
        sh(&["ip", "netns", "add", &n.ns]);
        let ns = n.ns.as_str();
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        sh(&[
            "ip",
            "-n",
            ns,
            "link",
            "add",
            BRIDGE,
            "type",
            "bridge",
            "stp_state",
            "0",
            "mcast_snooping",
            "0",
        ]);
        sh(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            "10.99.0.254/24",
            "dev",
            BRIDGE,
        ]);
        sh(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            "fd99::fe/64",
            "dev",
            BRIDGE,
            "nodad",
        ]);
        sh(&["ip", "-n", ns, "link", "set", BRIDGE, "up"]);
        n
    }

    /// Open TAP `i` here (MTU `mtu`, up), then move it into the namespace,
    /// enslave it to the bridge and bring it up there (a move takes an
    /// interface down; the open descriptor keeps working).
    pub fn tap(&self, i: usize, mtu: usize) -> TapIo {
        let name = &self.taps[i];
        let io = TapIo::open(name, mtu).unwrap_or_else(|e| panic!("TapIo::open({name}): {e}"));
        assert_eq!(io.name(), name);
        self.enslave(name);
        io
    }

    /// Move interface `name` (open in this process) into the namespace,
    /// make it a port of the bridge and bring it up there.
    pub fn enslave(&self, name: &str) {
        sh(&["ip", "link", "set", name, "netns", &self.ns]);
        sh(&["ip", "-n", &self.ns, "link", "set", name, "master", BRIDGE]);
        sh(&["ip", "-n", &self.ns, "link", "set", name, "up"]);
    }

    /// The bridge's MAC address, as the kernel reports it (sysfs).
    pub fn bridge_mac(&self) -> [u8; 6] {
        let out = self
            .exec(&["cat", &format!("/sys/class/net/{BRIDGE}/address")])
            .output()
            .expect("read the bridge's address");
        let text = String::from_utf8_lossy(&out.stdout);
        let bytes: Vec<u8> = text
            .trim()
            .split(':')
            .map(|b| u8::from_str_radix(b, 16).expect("hex"))
            .collect();
        bytes.try_into().expect("6 bytes")
    }

    /// Raise the bridge's MTU (it follows its ports' minimum otherwise).
    pub fn bridge_mtu(&self, mtu: usize) {
        sh(&[
            "ip",
            "-n",
            &self.ns,
            "link",
            "set",
            BRIDGE,
            "mtu",
            &mtu.to_string(),
        ]);
    }

    /// `ip netns exec <ns> args…`.
    pub fn exec(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).args(args);
        c
    }

    /// Start tshark on interface `iface` of the namespace, writing a pcap
    /// and printing each frame's source MAC as it writes it (`-P -l`).
    /// Call [`Netns::sync_capture`] before relying on it: tshark reports
    /// "Capturing on" before the kernel delivers packets to it.
    ///
    /// To see the stacks' traffic, capture on a bridge *port* (a TAP):
    /// packet sockets on the bridge device itself see only the frames the
    /// bridge's own IP stack sends and receives, not the frames it forwards
    /// from port to port.
    pub fn start_capture(&mut self, iface: &str) {
        let mut child = self
            .exec(&[
                "tshark",
                "-i",
                iface,
                "-F",
                "pcap",
                "-w",
                self.pcap.to_str().unwrap(),
                "-P",
                "-l",
                "-T",
                "fields",
                "-e",
                "eth.src",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tshark");
        let stdout = child.stdout.take().expect("tshark stdout");
        let stderr = child.stderr.take().expect("tshark stderr");
        self.capture = Some(child);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if std::env::var_os("ROCE_TAP_DEBUG").is_some() {
                    eprintln!("tshark: {line}");
                }
            }
        });
        self.printed = Some(rx);
    }

    /// Put marker frames on the captured interface with `inject` (one
    /// Ethernet frame per call, written into the TAP) until tshark prints
    /// one: everything injected before this call returns is in the file.
    /// The marker is a broadcast of the IEEE 802 local experimental
    /// EtherType 0x88B5 from 02:00:00:99:ff:NN, which the stacks ignore.
    pub fn sync_capture(&mut self, mut inject: impl FnMut(&[u8])) {
        self.markers += 1;
        let src = [0x02, 0, 0, 0x99, 0xff, self.markers];
        let want = format!("02:00:00:99:ff:{:02x}", self.markers);
        let mut frame = vec![0u8; 60];
        frame[..6].fill(0xff);
        frame[6..12].copy_from_slice(&src);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        frame[14..30].copy_from_slice(b"roce-tap-marker!");
        let rx = self.printed.as_ref().expect("start_capture first");
        let start = WallClock::now();
        loop {
            inject(&frame);
            let wait = WallClock::now();
            while wait.elapsed() < Duration::from_millis(200) {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(line) if line.trim() == want => return,
                    Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        panic!("tshark exited (ROCE_TAP_DEBUG=1 shows its messages)")
                    }
                }
            }
            assert!(
                start.elapsed() < LIMIT,
                "tshark never printed marker {want} (ROCE_TAP_DEBUG=1 shows its messages)"
            );
        }
    }

    /// Stop tshark (SIGINT, so it flushes the file) and wait for it.
    pub fn stop_capture(&mut self) {
        if let Some(c) = self.capture.take() {
            root::interrupt(c, LIMIT);
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.stop_capture();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        for t in &self.taps {
            let _ = Command::new("ip").args(["link", "del", t]).output();
        }
        if std::env::var_os("ROCE_TAP_KEEP_PCAP").is_some() {
            eprintln!("capture kept: {}", self.pcap.display());
        } else {
            let _ = std::fs::remove_file(&self.pcap);
        }
    }
}

/// A [`Netns`] whose two TAP ports are persistent devices made inside the
/// namespace (`ip tuntap add … mode tap`), ports of the bridge and up, for
/// programs run in the namespace that open them by name. `Drop` deletes the
/// TAPs, then (the [`Netns`]'s own) the namespace with its bridge.
pub struct TapWire {
    /// The namespace; `n.taps` names the two TAPs.
    pub n: Netns,
}

impl TapWire {
    /// [`Netns::new`]`(tag)` with its two TAPs made and enslaved.
    pub fn new(tag: &str) -> TapWire {
        let w = TapWire { n: Netns::new(tag) };
        let ns = w.n.ns.as_str();
        for t in &w.n.taps {
            sh(&["ip", "-n", ns, "tuntap", "add", "dev", t, "mode", "tap"]);
            sh(&["ip", "-n", ns, "link", "set", t, "master", BRIDGE]);
            sh(&["ip", "-n", ns, "link", "set", t, "up"]);
        }
        w
    }
}

impl Drop for TapWire {
    fn drop(&mut self) {
        for t in &self.n.taps {
            let _ = Command::new("ip")
                .args(["-n", &self.n.ns, "link", "del", t])
                .output();
        }
    }
}
