//! ICMPv6: IPv6 Neighbor Discovery (RFC 4861 §4.3, §4.4, §7) and echo
//! (RFC 4443 §4.1, §4.2).

use core::net::{IpAddr, Ipv6Addr};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpProtocol, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr, RawHardwareAddress,
    ETHERNET_HEADER_LEN,
};

use super::{frame_len, Neighbors, ECHO_HOP_LIMIT, NDISC_HOP_LIMIT};
use crate::time::Instant;

impl Neighbors {
    pub(super) fn handle_icmpv6(&mut self, now: Instant, src_mac: [u8; 6], payload: &[u8]) {
        let caps = ChecksumCapabilities::default();
        let Ok(ip) = Ipv6Packet::new_checked(payload) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(ip_repr) = Ipv6Repr::parse(&ip) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let (src, dst) = (ip_repr.src_addr, ip_repr.dst_addr);
        let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(repr) = Icmpv6Repr::parse(&src, &dst, &icmp, &caps) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let mac = self.cfg.mac;
        match repr {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } if self.cfg.ipv6.contains(&dst) => {
                self.counters.echo_requests_rx += 1;
                let reply = Icmpv6Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                let queued = self.queue_frame(|buf| {
                    emit_icmpv6(buf, mac, src_mac, dst, src, ECHO_HOP_LIMIT, &reply)
                });
                if queued {
                    self.counters.echo_replies_tx += 1;
                }
            }
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr,
                lladdr,
            }) => {
                // RFC 4861 §7.1.1: hop limit 255, target not multicast; from
                // the unspecified address (DAD) only to a solicited-node
                // group and without a link-layer option.
                let dad = src.is_unspecified();
                if ip_repr.hop_limit != NDISC_HOP_LIMIT
                    || target_addr.is_multicast()
                    || (dad && (lladdr.is_some() || !is_solicited_node(dst)))
                {
                    self.counters.rx_ignored += 1;
                    return;
                }
                if !self.cfg.ipv6.contains(&target_addr) {
                    self.counters.rx_ignored += 1;
                    return;
                }
                self.counters.ns_rx += 1;
                let peer_mac = lladdr.and_then(eth_of).unwrap_or(src_mac);
                if peer_mac == mac {
                    self.counters.rx_ignored += 1;
                    return;
                }
                if self.is_ours(IpAddr::V6(src)) {
                    self.counters.addr_conflicts += 1;
                    return;
                }
                // §7.2.3: a solicitation with a source address creates or
                // updates the sender's entry and is answered to it; a DAD
                // probe is answered to all nodes, without the S flag.
                let (flags, to_ip, to_mac) = if dad {
                    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                    (NdiscNeighborFlags::OVERRIDE, all, ipv6_multicast_mac(all))
                } else {
                    self.learn(now, IpAddr::V6(src), peer_mac, true);
                    (
                        NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                        src,
                        peer_mac,
                    )
                };
                let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                    flags,
                    target_addr,
                    lladdr: Some(RawHardwareAddress::from(EthernetAddress(mac))),
                });
                let queued = self.queue_frame(|buf| {
                    emit_icmpv6(buf, mac, to_mac, target_addr, to_ip, NDISC_HOP_LIMIT, &na)
                });
                if queued {
                    self.counters.na_tx += 1;
                }
            }
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                target_addr,
                lladdr,
                ..
            }) => {
                // RFC 4861 §7.1.2 validity, §7.2.5: update an entry we have;
                // an advertisement for an unknown target is discarded.
                if ip_repr.hop_limit != NDISC_HOP_LIMIT || target_addr.is_multicast() {
                    self.counters.rx_ignored += 1;
                    return;
                }
                self.counters.na_rx += 1;
                let peer_mac = lladdr.and_then(eth_of).unwrap_or(src_mac);
                if self.is_ours(IpAddr::V6(target_addr)) {
                    if peer_mac != mac {
                        self.counters.addr_conflicts += 1;
                    }
                    return;
                }
                self.learn(now, IpAddr::V6(target_addr), peer_mac, false);
            }
            _ => self.counters.rx_ignored += 1,
        }
    }
}

/// The MAC of an Ethernet link-layer address option.
pub(super) fn eth_of(hw: RawHardwareAddress) -> Option<[u8; 6]> {
    hw.as_bytes().try_into().ok()
}

/// The solicited-node multicast group of `a`: `ff02::1:ffXX:XXXX` with the
/// low 24 bits of `a` (RFC 4291 §2.7.1).
pub(super) fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// Whether `a` is a solicited-node multicast group (RFC 4291 §2.7.1).
pub(super) fn is_solicited_node(a: Ipv6Addr) -> bool {
    a.octets()
        .starts_with(&[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff])
}

/// The Ethernet group address of IPv6 multicast group `a`: 33:33 and its low
/// 32 bits (RFC 2464 §7).
pub(super) fn ipv6_multicast_mac(a: Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Write an Ethernet + IPv6 + ICMPv6 frame into `buf`; returns its length
/// (padded to 60 bytes), or `None` when `buf` is too small.
pub(super) fn emit_icmpv6(
    buf: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    repr: &Icmpv6Repr<'_>,
) -> Option<usize> {
    let caps = ChecksumCapabilities::default();
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: repr.buffer_len(),
        hop_limit,
    };
    let ip_len = ip.buffer_len() + repr.buffer_len();
    let n = frame_len(ETHERNET_HEADER_LEN + ip_len);
    let out = buf.get_mut(..n)?;
    out.fill(0);
    let mut f = EthernetFrame::new_checked(out).ok()?;
    EthernetRepr {
        src_addr: EthernetAddress(src_mac),
        dst_addr: EthernetAddress(dst_mac),
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut f);
    let l3 = f.payload_mut().get_mut(..ip_len)?;
    let mut ipp = Ipv6Packet::new_unchecked(l3);
    ip.emit(&mut ipp);
    // Unchecked: the length is the repr's own, and `check_len` reads the
    // (not yet written) message type.
    let mut icmp = Icmpv6Packet::new_unchecked(ipp.payload_mut());
    repr.emit(&src, &dst, &mut icmp, &caps);
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;

    fn icmpv6_frame(
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        repr: &Icmpv6Repr<'_>,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; 2048];
        let n = emit_icmpv6(&mut buf, src_mac, dst_mac, src, dst, hop, repr).expect("emit");
        buf.truncate(n);
        buf
    }

    #[test]
    fn solicited_node_group_and_mac() {
        // RFC 4291 §2.7.1: ff02::1:ff plus the low 24 bits; RFC 2464 §7:
        // 33:33 plus the low 32 bits.
        let g = solicited_node(PEER_IP6);
        assert_eq!(g, "ff02::1:ff12:3456".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ipv6_multicast_mac(g), [0x33, 0x33, 0xff, 0x12, 0x34, 0x56]);
        assert!(is_solicited_node(g));
        assert!(!is_solicited_node(PEER_IP6));
    }

    #[test]
    fn neighbour_solicitation_is_answered_and_learned() {
        let mut n = neigh();
        let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: IP6,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(PEER))),
        });
        let g = solicited_node(IP6);
        let f = icmpv6_frame(PEER, ipv6_multicast_mac(g), PEER_IP6, g, 255, &ns);
        assert!(n.handle_frame(Instant::ZERO, &f));
        let r = poll(&mut n, Instant::ZERO).expect("advertisement");
        let (er, ir, icmp) = parse6(&r);
        assert_eq!((er.src_addr.0, er.dst_addr.0), (OURS, PEER));
        assert_eq!(
            (ir.src_addr, ir.dst_addr, ir.hop_limit),
            (IP6, PEER_IP6, 255)
        );
        assert_eq!(
            icmp,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                target_addr: IP6,
                lladdr: Some(RawHardwareAddress::from(EthernetAddress(OURS))),
            })
        );
        assert_eq!(n.lookup(Instant::ZERO, IpAddr::V6(PEER_IP6)), Some(PEER));
        // Hop limit other than 255: invalid (RFC 4861 §7.1.1), ignored.
        let f = icmpv6_frame(PEER, ipv6_multicast_mac(g), PEER_IP6, g, 64, &ns);
        assert!(n.handle_frame(Instant::ZERO, &f));
        assert_eq!(poll(&mut n, Instant::ZERO), None);
    }

    #[test]
    fn neighbour_resolution_by_solicitation() {
        let mut n = neigh();
        let target = IpAddr::V6(PEER_IP6);
        n.request(Instant::ZERO, target);
        let s = poll(&mut n, Instant::ZERO).expect("solicitation");
        let (er, ir, icmp) = parse6(&s);
        let g = solicited_node(PEER_IP6);
        assert_eq!(
            (er.src_addr.0, er.dst_addr.0),
            (OURS, [0x33, 0x33, 0xff, 0x12, 0x34, 0x56])
        );
        assert_eq!((ir.src_addr, ir.dst_addr, ir.hop_limit), (IP6, g, 255));
        assert_eq!(
            icmp,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: PEER_IP6,
                lladdr: Some(RawHardwareAddress::from(EthernetAddress(OURS))),
            })
        );
        let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
            target_addr: PEER_IP6,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(PEER))),
        });
        assert!(n.handle_frame(
            Instant::ZERO,
            &icmpv6_frame(PEER, OURS, PEER_IP6, IP6, 255, &na)
        ));
        assert_eq!(n.lookup(Instant::ZERO, target), Some(PEER));
        // An unsolicited advertisement for an unknown target is not learned
        // (RFC 4861 §7.2.5).
        let other = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x77);
        let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::OVERRIDE,
            target_addr: other,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(PEER))),
        });
        assert!(n.handle_frame(
            Instant::ZERO,
            &icmpv6_frame(PEER, OURS, other, IP6, 255, &na)
        ));
        assert_eq!(
            n.status(Instant::ZERO, IpAddr::V6(other)),
            Resolution::Unknown
        );
    }

    #[test]
    fn icmpv6_echo_request_is_answered() {
        let mut n = neigh();
        let data = [0x5a; 100];
        let req = Icmpv6Repr::EchoRequest {
            ident: 9,
            seq_no: 1,
            data: &data,
        };
        assert!(n.handle_frame(
            Instant::ZERO,
            &icmpv6_frame(PEER, OURS, PEER_IP6, IP6, 64, &req)
        ));
        let r = poll(&mut n, Instant::ZERO).expect("echo reply");
        let (er, ir, icmp) = parse6(&r);
        assert_eq!((er.src_addr.0, er.dst_addr.0), (OURS, PEER));
        assert_eq!((ir.src_addr, ir.dst_addr), (IP6, PEER_IP6));
        assert_eq!(
            icmp,
            Icmpv6Repr::EchoReply {
                ident: 9,
                seq_no: 1,
                data: &data
            }
        );
    }
}
