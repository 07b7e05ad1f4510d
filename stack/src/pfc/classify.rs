//! Priority classification: which of the eight priorities (and so which PFC
//! class and ingress queue) a frame belongs to.
//!
//! Switches and NICs classify by the 802.1Q PCP ("trust PCP") or by the IP DSCP
//! ("trust DSCP") (ROCEV2-DIGEST §7 "Priority mapping"). The default DSCP map is
//! `priority = DSCP >> 3`, as in the DCB code of two vendor drivers read for the
//! digest (zxdh, yk3): RoCE data on DSCP 26 (AF31) -> priority 3, CNPs on DSCP 48
//! -> priority 6 (the mlx5 defaults). The lossless priority must match on the
//! NIC and the switch.

use smoltcp::wire::{Ipv4Packet, Ipv6Packet};

use crate::wire::{L2Info, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1};

/// Which header field decides the priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Trust {
    /// The 802.1Q tag's PCP; untagged frames get [`PrioMap::default_prio`].
    Pcp,
    /// The IPv4/IPv6 DSCP (or a RoCEv1 GRH's traffic class >> 2) through
    /// [`PrioMap::dscp`]; non-IP frames get [`PrioMap::default_prio`], tagged or
    /// not.
    #[default]
    Dscp,
}

/// A priority classifier: the trust mode and the DSCP -> priority table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrioMap {
    /// PCP or DSCP.
    pub trust: Trust,
    /// DSCP (0..=63) -> priority (0..=7). Default `DSCP >> 3`.
    pub dscp: [u8; 64],
    /// Priority of frames the trusted field is absent from (0..=7; default 0).
    pub default_prio: u8,
}

impl Default for PrioMap {
    fn default() -> Self {
        PrioMap::trust_dscp()
    }
}

impl PrioMap {
    /// Trust DSCP with the default map `DSCP >> 3`.
    pub fn trust_dscp() -> PrioMap {
        let mut dscp = [0u8; 64];
        for (d, p) in dscp.iter_mut().enumerate() {
            *p = (d >> 3) as u8;
        }
        PrioMap {
            trust: Trust::Dscp,
            dscp,
            default_prio: 0,
        }
    }

    /// Trust PCP (the DSCP table keeps its default, unused).
    pub fn trust_pcp() -> PrioMap {
        PrioMap {
            trust: Trust::Pcp,
            ..PrioMap::trust_dscp()
        }
    }

    /// Map `dscp` (low 6 bits used) to `prio` (low 3 bits used).
    pub fn set_dscp(&mut self, dscp: u8, prio: u8) {
        self.dscp[(dscp & 0x3F) as usize] = prio & 7;
    }

    /// The priority of `dscp` (low 6 bits used).
    pub fn dscp_to_prio(&self, dscp: u8) -> u8 {
        self.dscp[(dscp & 0x3F) as usize] & 7
    }

    /// The priority (0..=7) of a whole Ethernet frame. Never panics; frames too
    /// short for the trusted field get [`PrioMap::default_prio`].
    pub fn classify(&self, frame: &[u8]) -> u8 {
        let fallback = self.default_prio & 7;
        let Ok(l2) = L2Info::parse(frame) else {
            return fallback;
        };
        match self.trust {
            Trust::Pcp => l2.vlan.map_or(fallback, |v| v.pcp & 7),
            Trust::Dscp => {
                let l3 = frame.get(l2.header_len()..).unwrap_or(&[]);
                dscp_of(l2.ethertype, l3).map_or(fallback, |d| self.dscp_to_prio(d))
            }
        }
    }
}

/// The DSCP of a frame: IPv4 DSCP, IPv6 traffic class >> 2, or a RoCEv1 GRH's
/// traffic class >> 2 (the GRH has the IPv6 layout, IBTA §8.3). `None` for
/// other EtherTypes, a wrong IP version, or too few bytes.
pub fn frame_dscp(frame: &[u8]) -> Option<u8> {
    let l2 = L2Info::parse(frame).ok()?;
    dscp_of(l2.ethertype, frame.get(l2.header_len()..)?)
}

fn dscp_of(ethertype: u16, l3: &[u8]) -> Option<u8> {
    let version = l3.first()? >> 4;
    match ethertype {
        // Lengths are checked here, so smoltcp's accessors cannot panic.
        ETHERTYPE_IPV4 if version == 4 && l3.len() >= 20 => {
            Some(Ipv4Packet::new_unchecked(l3).dscp())
        }
        ETHERTYPE_IPV6 | ETHERTYPE_ROCEV1 if version == 6 && l3.len() >= 40 => {
            Some(Ipv6Packet::new_unchecked(l3).traffic_class() >> 2)
        }
        _ => None,
    }
}
