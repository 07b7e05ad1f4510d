//! The library's configuration: environment variables read once, when the
//! program first lists the devices.
//!
//! | Variable | Meaning | Default |
//! |---|---|---|
//! | `ROCE_BACKEND` | `udp`, `tap` or `dpdk` | `udp` |
//! | `ROCE_LOCAL_IP` | the device's address: GID 0, and the UDP socket's | `127.0.0.1` |
//! | `ROCE_UDP_PORT` | UDP port of the socket, and of peers (`udp`) | `4791` |
//! | `ROCE_UDP_GSO` | `1`: send bursts of one QP as one UDP GSO send (`udp`; segment i carries IPv4 identification i, which its ICRC covers); `0`: one datagram per frame, identification 0 | `1` |
//! | `ROCE_DEV_NAME` | the device name programs see | `roce0` |
//! | `ROCE_MTU` | the port's active and max MTU: 256 ... 4096 | `4096` (`udp`), `1024` otherwise |
//! | `ROCE_IFNAME` | the TAP interface (`tap`) | `roce0` |
//! | `ROCE_DPDK_ARGS` | EAL arguments, split on whitespace (`dpdk`) | none |
//! | `ROCE_LOG` | a `tracing` filter (`info`, `roce_ibverbs=debug`), logged to stderr | `warn` |

use std::net::IpAddr;

use roce_stack::verbs::Mtu;

/// Which backend moves the frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// A kernel UDP socket (unprivileged).
    Udp,
    /// A TAP interface (root).
    Tap,
    /// A DPDK port (root, a build with `--features dpdk`).
    Dpdk,
}

/// The configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `ROCE_BACKEND`.
    pub backend: BackendKind,
    /// `ROCE_LOCAL_IP`.
    pub local_ip: IpAddr,
    /// `ROCE_UDP_PORT`.
    pub udp_port: u16,
    /// `ROCE_UDP_GSO`.
    pub udp_gso: bool,
    /// `ROCE_DEV_NAME` (at most 63 bytes).
    pub dev_name: String,
    /// `ROCE_MTU`.
    pub mtu: Mtu,
    /// `ROCE_IFNAME`.
    pub ifname: String,
    /// `ROCE_DPDK_ARGS`.
    pub dpdk_args: Vec<String>,
    /// `ROCE_LOG`.
    pub log: Option<String>,
}

impl Config {
    /// The configuration from a variable lookup (`std::env::var` in the
    /// library; a map in tests).
    ///
    /// # Errors
    /// One line naming the variable and the value refused.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let backend = match get("ROCE_BACKEND").as_deref().map(str::trim) {
            None | Some("") | Some("udp") => BackendKind::Udp,
            Some("tap") => BackendKind::Tap,
            Some("dpdk") => BackendKind::Dpdk,
            Some(o) => return Err(format!("ROCE_BACKEND={o}: expected udp, tap or dpdk")),
        };
        let local_ip = match get("ROCE_LOCAL_IP") {
            None => IpAddr::from([127, 0, 0, 1]),
            Some(s) => s
                .trim()
                .parse::<IpAddr>()
                .ok()
                .filter(|a| !a.is_unspecified() && !a.is_multicast())
                .ok_or_else(|| {
                    format!("ROCE_LOCAL_IP={s}: expected a unicast IPv4 or IPv6 address")
                })?,
        };
        let udp_port = match get("ROCE_UDP_PORT") {
            None => roce_stack::wire::ROCEV2_UDP_PORT,
            Some(s) => s
                .trim()
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("ROCE_UDP_PORT={s}: expected a port 1-65535"))?,
        };
        let udp_gso = match get("ROCE_UDP_GSO").as_deref().map(str::trim) {
            None | Some("") | Some("1") => true,
            Some("0") => false,
            Some(o) => return Err(format!("ROCE_UDP_GSO={o}: expected 0 or 1")),
        };
        let dev_name = match get("ROCE_DEV_NAME") {
            None => "roce0".to_string(),
            Some(s) if !s.is_empty() && s.len() < 64 && s.bytes().all(|b| b.is_ascii_graphic()) => {
                s
            }
            Some(s) => {
                return Err(format!(
                    "ROCE_DEV_NAME={s}: expected 1-63 printable ASCII characters"
                ))
            }
        };
        let default_mtu = if backend == BackendKind::Udp {
            Mtu::Mtu4096
        } else {
            Mtu::Mtu1024
        };
        let mtu = match get("ROCE_MTU") {
            None => default_mtu,
            Some(s) => s
                .trim()
                .parse::<usize>()
                .ok()
                .and_then(Mtu::from_bytes)
                .ok_or_else(|| format!("ROCE_MTU={s}: expected 256, 512, 1024, 2048 or 4096"))?,
        };
        let ifname = match get("ROCE_IFNAME") {
            None => "roce0".to_string(),
            Some(s) if !s.is_empty() && s.len() < 16 => s,
            Some(s) => return Err(format!("ROCE_IFNAME={s}: expected 1-15 characters")),
        };
        let dpdk_args = get("ROCE_DPDK_ARGS")
            .map(|s| s.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
        Ok(Config {
            backend,
            local_ip,
            udp_port,
            udp_gso,
            dev_name,
            mtu,
            ifname,
            dpdk_args,
            log: get("ROCE_LOG"),
        })
    }

    /// The configuration from the process environment.
    ///
    /// # Errors
    /// As [`Config::from_lookup`].
    pub fn from_env() -> Result<Config, String> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// The Ethernet MTU the device is given: the smallest of 1500 and 9000
    /// whose RoCEv2 packets hold `mtu` bytes of payload (rxe: active MTU =
    /// netdev MTU − 80).
    pub fn netdev_mtu(&self) -> usize {
        if self.mtu.bytes() + 80 <= 1500 {
            1500
        } else {
            9000
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.backend, BackendKind::Udp);
        assert_eq!(c.local_ip, IpAddr::from([127, 0, 0, 1]));
        assert_eq!(c.udp_port, 4791);
        assert!(c.udp_gso);
        assert!(!cfg(&[("ROCE_UDP_GSO", "0")]).unwrap().udp_gso);
        assert_eq!(c.dev_name, "roce0");
        assert_eq!(c.mtu, Mtu::Mtu4096);
        assert_eq!(c.netdev_mtu(), 9000);
        assert_eq!(cfg(&[("ROCE_BACKEND", "tap")]).unwrap().mtu, Mtu::Mtu1024);
    }

    #[test]
    fn refuses_bad_values_with_the_variable_named() {
        for (k, v) in [
            ("ROCE_BACKEND", "rxe"),
            ("ROCE_LOCAL_IP", "0.0.0.0"),
            ("ROCE_LOCAL_IP", "host"),
            ("ROCE_UDP_PORT", "0"),
            ("ROCE_UDP_PORT", "70000"),
            ("ROCE_UDP_GSO", "yes"),
            ("ROCE_MTU", "1500"),
            ("ROCE_DEV_NAME", ""),
            ("ROCE_IFNAME", "a-very-long-interface-name"),
        ] {
            let e = cfg(&[(k, v)]).unwrap_err();
            assert!(e.starts_with(&format!("{k}={v}:")), "{e}");
        }
        let c = cfg(&[("ROCE_MTU", "1024"), ("ROCE_LOCAL_IP", "127.0.0.2")]).unwrap();
        assert_eq!((c.mtu, c.netdev_mtu()), (Mtu::Mtu1024, 1500));
        assert_eq!(c.local_ip, IpAddr::from([127, 0, 0, 2]));
    }
}
