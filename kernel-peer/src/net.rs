//! A network namespace of the test's own with a bridge, TAP ports, and
//! random loss of RoCEv2 frames on the bridge.

use std::process::Command;

use crate::sh;

/// The bridge's name inside the namespace.
pub const BRIDGE: &str = "br0";

/// A namespace `rkp{pid}{tag}` with bridge `br0` at `{prefix}.254/24`;
/// `Drop` deletes its TAPs and the namespace.
pub struct Net {
    /// The namespace's name.
    pub ns: String,
    /// The first three octets of the subnet (`10.77.0`).
    pub prefix: String,
    tag: String,
    taps: std::sync::Mutex<Vec<String>>,
}

/// What the loss rules counted: RoCEv2 frames that reached a bridge hook,
/// and those dropped there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossCounts {
    /// Frames to UDP port 4791 that crossed the bridge (each once).
    pub seen: u64,
    /// Of those, frames dropped.
    pub dropped: u64,
}

impl Net {
    /// Make the namespace (unique per process and `tag`: at most 4
    /// characters), its loopback and the bridge, up.
    ///
    /// # Errors
    /// The failing `ip` command.
    pub fn new(tag: &str) -> Result<Net, String> {
        assert!(tag.len() <= 4, "tag {tag:?}: at most 4 characters");
        let ns = format!("rkp{}{tag}", std::process::id());
        let n = Net {
            ns,
            prefix: "10.77.0".into(),
            tag: tag.into(),
            taps: Default::default(),
        };
        let _ = Command::new("ip").args(["netns", "del", &n.ns]).output();
        sh(&["ip", "netns", "add", &n.ns])?;
        let ns = n.ns.as_str();
        sh(&["ip", "-n", ns, "link", "set", "lo", "up"])?;
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
        ])?;
        sh(&[
            "ip",
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}.254/24", n.prefix),
            "dev",
            BRIDGE,
        ])?;
        sh(&["ip", "-n", ns, "link", "set", BRIDGE, "up"])?;
        // No IPv6 chatter (router and neighbour solicitations) on the wire.
        let _ = sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
        ]);
        let _ = sh(&[
            "ip",
            "netns",
            "exec",
            ns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        Ok(n)
    }

    /// The bridge's own address (the host side of the UDP backend).
    pub fn bridge_ip(&self) -> String {
        format!("{}.254", self.prefix)
    }

    /// Address `.{n}` of the subnet.
    pub fn ip(&self, n: u8) -> String {
        format!("{}.{n}", self.prefix)
    }

    /// A persistent TAP `rkp{pid}{tag}{suffix}` (suffix of at most 2
    /// characters) made in the namespace, a port of the bridge, up.
    ///
    /// # Errors
    /// The failing `ip` command.
    pub fn add_tap(&self, suffix: &str) -> Result<String, String> {
        let name = format!("rkp{}{}{suffix}", std::process::id(), self.tag);
        assert!(name.len() <= 15, "{name}: longer than IFNAMSIZ");
        let ns = self.ns.as_str();
        sh(&["ip", "-n", ns, "tuntap", "add", "dev", &name, "mode", "tap"])?;
        self.taps.lock().unwrap().push(name.clone());
        sh(&["ip", "-n", ns, "link", "set", &name, "master", BRIDGE])?;
        sh(&["ip", "-n", ns, "link", "set", &name, "up"])?;
        Ok(name)
    }

    /// `ip netns exec NS args…`.
    pub fn exec(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).args(args);
        c
    }

    /// The command prefix that runs a program in the namespace.
    pub fn wrap(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.ns]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// Drop each RoCEv2 frame (IPv4/UDP to port 4791) with probability
    /// `per_million` / 10^6 where it crosses the bridge: forwarded from
    /// port to port, sent by the namespace's own IP stack into the bridge,
    /// or delivered from the bridge to it. Each frame crosses exactly one
    /// of those hooks, after the capture point of its sender's port (a
    /// packet socket on the ingress port, or on the bridge for the
    /// namespace's own sends). 0 removes the rules; the counters restart.
    ///
    /// # Errors
    /// nft's message.
    pub fn set_loss(&self, per_million: u32) -> Result<(), String> {
        let _ = self
            .exec(&["nft", "delete", "table", "bridge", "rkploss"])
            .output();
        if per_million == 0 {
            return Ok(());
        }
        let mut rules = String::from("table bridge rkploss {\n");
        for (chain, hook) in [
            ("lossfwd", "forward"),
            ("lossin", "input"),
            ("lossout", "output"),
        ] {
            rules.push_str(&format!(
                "  chain {chain} {{\n    type filter hook {hook} priority 0; policy accept;\n    \
                 ether type ip udp dport 4791 counter\n    \
                 ether type ip udp dport 4791 numgen random mod 1000000 < {per_million} counter drop\n  }}\n"
            ));
        }
        rules.push_str("}\n");
        let mut c = self.exec(&["nft", "-f", "-"]);
        c.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().map_err(|e| format!("nft: {e}"))?;
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(rules.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "nft: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    /// Frames interface `iface` of the namespace dropped on transmit
    /// (`tx_dropped`): for a guest's TAP, frames towards the guest that
    /// QEMU did not take in time (the TAP's queue was full), a loss besides
    /// the one [`Net::set_loss`] adds.
    pub fn tx_dropped(&self, iface: &str) -> u64 {
        self.exec(&[
            "cat",
            &format!("/sys/class/net/{iface}/statistics/tx_dropped"),
        ])
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
    }

    /// The loss rules' counters since [`Net::set_loss`] (zero without
    /// rules).
    pub fn loss_counts(&self) -> LossCounts {
        let out = self
            .exec(&["nft", "list", "table", "bridge", "rkploss"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mut c = LossCounts::default();
        for l in out.lines() {
            let Some(i) = l.find("counter packets ") else {
                continue;
            };
            let n: u64 = l[i + 16..]
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
            if l.contains("drop") {
                c.dropped += n;
            } else {
                c.seen += n;
            }
        }
        c
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for t in self.taps.lock().unwrap().iter() {
            let _ = Command::new("ip")
                .args(["-n", &self.ns, "link", "del", t])
                .output();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}
