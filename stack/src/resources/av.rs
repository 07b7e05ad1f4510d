//! Addressing for RoCEv2: GIDs, address vectors, UDP source-port entropy.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::VlanTag;

/// A 128-bit GID: an IPv6 address, or for IPv4 the IPv4-mapped form
/// `::ffff:a.b.c.d` (RoCEv2 Annex A17.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IPv4-mapped GID of `a`.
    pub fn from_ipv4(a: Ipv4Addr) -> Gid {
        Gid(a.to_ipv6_mapped().octets())
    }
    /// The GID of an IPv6 address.
    pub fn from_ipv6(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
    /// The GID of an IP address.
    pub fn from_ip(a: IpAddr) -> Gid {
        match a {
            IpAddr::V4(a) => Gid::from_ipv4(a),
            IpAddr::V6(a) => Gid::from_ipv6(a),
        }
    }
    /// The IPv4 address if this GID is IPv4-mapped.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
    /// The address RoCEv2 puts in the IP header.
    pub fn to_ip(&self) -> IpAddr {
        match self.to_ipv4() {
            Some(a) => IpAddr::V4(a),
            None => IpAddr::V6(Ipv6Addr::from(self.0)),
        }
    }
}

/// Where a connected QP (or a UD work request) sends: `struct ibv_ah_attr` with
/// its GRH, plus the next-hop MAC that the kernel would resolve for rdma-core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AddressVector {
    /// Destination GID.
    pub dgid: Gid,
    /// Index of the source GID in the device's GID table.
    pub sgid_index: u8,
    /// Next-hop MAC.
    pub dmac: [u8; 6],
    /// IPv6 flow label (20 bits); 0 = derive from the QPNs.
    pub flow_label: u32,
    /// TTL / hop limit.
    pub hop_limit: u8,
    /// Traffic class: DSCP << 2 | ECN.
    pub traffic_class: u8,
    /// UDP source port; `None` derives it from the flow label (CASES R25 c).
    pub udp_sport: Option<u16>,
    /// 802.1Q tag, if the path is tagged.
    pub vlan: Option<VlanTag>,
}

/// The kernel's `rdma_calc_flow_label(lqpn, rqpn)`: a 20-bit label symmetric in
/// the two QPNs (ROCEV2-DIGEST §1).
pub fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// The kernel's `rdma_flow_label_to_udp_sport(fl)` (rdma-core
/// `ibv_flow_label_to_udp_sport`): `0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))`.
pub fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let fl_low = fl & 0x3FFF;
    let fl_high = (fl & 0xF_C000) >> 14;
    (0xC000 | ((fl_low ^ fl_high) & 0x3FFF)) as u16
}

/// UDP source port of a connected QP: the AV's explicit port, else one derived
/// from its flow label, else from the QPN pair (`rdma_get_udp_sport`).
pub fn udp_sport(av: &AddressVector, lqpn: u32, rqpn: u32) -> u16 {
    if let Some(p) = av.udp_sport {
        return p;
    }
    let fl = if av.flow_label != 0 {
        av.flow_label
    } else {
        calc_flow_label(lqpn, rqpn)
    };
    flow_label_to_udp_sport(fl)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r25_udp_sport_kernel_convention() {
        // CASES R25 (a) and ROCEV2-DIGEST §1 computed examples.
        assert_eq!(calc_flow_label(0x11, 0x12), 0x132);
        assert_eq!(flow_label_to_udp_sport(0x132), 0xC132);
        assert_eq!(flow_label_to_udp_sport(calc_flow_label(0x12, 0x11)), 0xC132);
        assert_eq!(flow_label_to_udp_sport(calc_flow_label(0x1, 0xD2)), 0xC0D2);
        assert_eq!(calc_flow_label(0xFF_FFFF, 0xFF_FFFE), 0xFFF2D);
        assert_eq!(flow_label_to_udp_sport(0xFFF2D), 0xFF12);
        assert_eq!(flow_label_to_udp_sport(0x12345), 0xE341);
    }
}
