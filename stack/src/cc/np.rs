//! The DCQCN notification point (NP): turns CE-marked packets into CNPs.
//!
//! On a CE-marked RoCEv2 packet for a QP, the NP queues one CNP (RoCEv2 Annex
//! A17.9.3; [`crate::wire::cnp`]) to the packet's source, addressed to the
//! sender's QP: for RC/UC the local QP's `dest_qp_num`, for UD the packet's
//! DETH source QP. A flow is (local QPN, remote QPN); each flow gets at most
//! one CNP per `min_time_between_cnps` (measured from the CE packet that
//! triggered the previous CNP), and never a second while one is still queued.
//!
//! State is bounded and allocated up front: a flow table of at most
//! `np_max_flows` entries (std `HashMap` with its keyed SipHash, because a
//! peer chooses the UD source QPNs that become keys) and a queue of pending
//! CNPs (one per flow at most). When the table is full, flows whose last CNP
//! is older than the interval (they no longer limit anything) are evicted; if
//! none is, the CNP is not sent and `np_cnp_dropped` counts it.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use core::time::Duration;

use super::CcConfig;
use crate::time::Instant;
use crate::wire::{
    cnp, EthRepr, Ipv4Repr, Ipv6Repr, NetRepr, PacketRepr, UdpChecksum, UdpRepr, VlanTag,
    ROCEV2_UDP_PORT,
};

/// A flow: (local QPN, remote QPN).
pub(crate) type FlowKey = (u32, u32);

#[derive(Debug, Clone, Copy)]
struct Flow {
    last_cnp: Instant,
    pending: bool,
}

/// A CNP waiting for `poll_transmit`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingCnp {
    pub key: FlowKey,
    pub repr: PacketRepr,
}

/// What the NP decided for one CE-marked packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Queue a CNP (the flow is marked pending).
    Send,
    /// A CNP for the flow is still queued, or the last one is too recent.
    Limited,
    /// The flow table is full of flows still inside their interval.
    TableFull,
}

/// The notification point of one device.
#[derive(Debug)]
pub(crate) struct NotificationPoint {
    flows: HashMap<FlowKey, Flow>,
    pending: VecDeque<PendingCnp>,
    max_flows: usize,
}

impl NotificationPoint {
    /// An NP tracking at most `max_flows` flows (storage reserved now).
    pub fn new(max_flows: usize) -> NotificationPoint {
        let max_flows = max_flows.max(1);
        NotificationPoint {
            flows: HashMap::with_capacity(max_flows),
            pending: VecDeque::with_capacity(max_flows),
            max_flows,
        }
    }

    /// Whether a CNP is queued.
    #[inline]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Decide for a CE-marked packet of flow `key` at `now`.
    pub fn admit(&mut self, now: Instant, key: FlowKey, interval: Duration) -> Admit {
        if let Some(f) = self.flows.get_mut(&key) {
            if f.pending || now < f.last_cnp + interval {
                return Admit::Limited;
            }
            f.last_cnp = now;
            f.pending = true;
            return Admit::Send;
        }
        if self.flows.len() >= self.max_flows {
            self.flows
                .retain(|_, f| f.pending || now < f.last_cnp + interval);
            if self.flows.len() >= self.max_flows {
                return Admit::TableFull;
            }
        }
        self.flows.insert(
            key,
            Flow {
                last_cnp: now,
                pending: true,
            },
        );
        Admit::Send
    }

    /// Queue the CNP of an admitted flow.
    pub fn push(&mut self, key: FlowKey, repr: PacketRepr) {
        self.pending.push_back(PendingCnp { key, repr });
    }

    /// A CNP could not be built after [`NotificationPoint::admit`] said
    /// `Send`: clear the flow's pending mark.
    pub fn cancel(&mut self, key: FlowKey) {
        if let Some(f) = self.flows.get_mut(&key) {
            f.pending = false;
        }
    }

    /// The next CNP to send (its flow stops being pending).
    pub fn pop(&mut self) -> Option<PendingCnp> {
        let c = self.pending.pop_front()?;
        self.cancel(c.key);
        Some(c)
    }

    /// Forget every flow and queued CNP of local QP `qpn` (destroy, RESET).
    pub fn purge_qp(&mut self, qpn: u32) {
        self.flows.retain(|k, _| k.0 != qpn);
        self.pending.retain(|c| c.key.0 != qpn);
    }
}

/// Where a CNP goes: the L2 and L3 addressing of the congested flow's sender,
/// seen from the NP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CnpPath {
    /// Our MAC.
    pub src_mac: [u8; 6],
    /// Next-hop MAC towards the sender.
    pub dst_mac: [u8; 6],
    /// 802.1Q tag of the path (its PCP is replaced by `cnp_802p_prio`).
    pub vlan: Option<VlanTag>,
    /// Our address (the CE packet's destination).
    pub src_ip: IpAddr,
    /// The sender's address (the CE packet's source).
    pub dst_ip: IpAddr,
    /// TTL / hop limit.
    pub ttl: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
}

/// The CNP to `dest_qp` along `path` (RoCEv2 Annex A17.9.3: BTH opcode 0x81,
/// BECN 1, P_Key 0xFFFF, PSN 0, 16 reserved zero bytes; DSCP, ECN, PCP and
/// UDP source port from `cfg`). The IPv4 identification is filled in when it
/// is sent. `None` if the two addresses are of different IP versions.
pub(crate) fn cnp_repr(cfg: &CcConfig, path: &CnpPath, dest_qp: u32) -> Option<PacketRepr> {
    let dscp = cfg.cnp_dscp & 0x3F;
    let ecn = cfg.cnp_ecn.bits();
    let net = match (path.src_ip, path.dst_ip) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => NetRepr::Ipv4(Ipv4Repr {
            src,
            dst,
            dscp,
            ecn,
            ttl: path.ttl,
            ident: 0,
            dont_frag: true,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => NetRepr::Ipv6(Ipv6Repr {
            src,
            dst,
            dscp,
            ecn,
            flow_label: path.flow_label & 0xF_FFFF,
            hop_limit: path.ttl,
        }),
        _ => return None,
    };
    Some(PacketRepr {
        eth: EthRepr {
            dst: path.dst_mac,
            src: path.src_mac,
            vlan: path.vlan.map(|t| VlanTag {
                pcp: cfg.cnp_802p_prio & 7,
                ..t
            }),
        },
        net,
        udp: UdpRepr {
            src_port: cfg.cnp_udp_sport,
            dst_port: ROCEV2_UDP_PORT,
            checksum: UdpChecksum::Default,
        },
        bth: cnp::bth(dest_qp),
        ext: cnp::ext(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const US4: Duration = Duration::from_micros(4);

    #[test]
    fn one_cnp_per_flow_per_interval() {
        let mut np = NotificationPoint::new(4);
        let k = (0x11, 0x22);
        assert_eq!(np.admit(Instant::ZERO, k, US4), Admit::Send);
        // Still queued: no second one.
        assert_eq!(np.admit(Instant::from_nanos(500), k, US4), Admit::Limited);
        np.cancel(k);
        // Sent; 1 µs after the CE packet that triggered it: limited.
        assert_eq!(np.admit(Instant::from_micros(1), k, US4), Admit::Limited);
        // 4 µs after: allowed again.
        assert_eq!(np.admit(Instant::from_micros(4), k, US4), Admit::Send);
        // Another flow is independent.
        assert_eq!(
            np.admit(Instant::from_micros(4), (0x11, 0x23), US4),
            Admit::Send
        );
    }

    #[test]
    fn full_table_evicts_stale_flows_only() {
        let mut np = NotificationPoint::new(2);
        assert_eq!(np.admit(Instant::ZERO, (1, 1), US4), Admit::Send);
        assert_eq!(np.admit(Instant::ZERO, (1, 2), US4), Admit::Send);
        // Both pending: a third flow does not fit.
        assert_eq!(np.admit(Instant::ZERO, (1, 3), US4), Admit::TableFull);
        // Both sent.
        np.cancel((1, 1));
        np.cancel((1, 2));
        // Not pending but within 4 µs: still no room.
        assert_eq!(
            np.admit(Instant::from_micros(3), (1, 3), US4),
            Admit::TableFull
        );
        // Stale at 4 µs: evicted.
        assert_eq!(np.admit(Instant::from_micros(4), (1, 3), US4), Admit::Send);
    }
}
