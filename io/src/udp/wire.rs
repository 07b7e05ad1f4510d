//! What datagram and raw mode put on the wire and rebuild from it: the
//! Ethernet/IP/UDP headers synthesised around a received datagram
//! ([`synthesize`]), the identification found from the ICRC
//! ([`recover_ident`]), and the rewrite of a device frame to what the kernel
//! sends ([`inspect`] + [`finish`]). Pure functions over byte slices; the
//! rules are in the parent module's docs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use roce_stack::icrc::{self, IcrcForm};
use roce_stack::wire::{
    ipv4, EthRepr, EthernetFrame, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, L2Info, UdpChecksum,
    UdpPacket, UdpRepr, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ICRC_LEN, ROCEV2_UDP_PORT,
};

use super::{ETH_LEN, IPV4_LEN, IPV6_LEN, MIN_ROCE, UDP_LEN};
use crate::open::mac_for_ip;

/// Bytes of Ethernet + IP + UDP header in front of a datagram's payload.
pub(super) fn header_len(v6: bool) -> usize {
    ETH_LEN + if v6 { IPV6_LEN } else { IPV4_LEN } + UDP_LEN
}

/// Write the Ethernet, IP and UDP headers in front of the UDP payload that
/// sits at `buf[header_len..]` (`buf` ends with the payload). IPv4 gets
/// identification `ident` with DF ([`recover_ident`] may change them).
/// Returns the frame length, or `None` when the address families differ.
pub(super) fn synthesize(
    buf: &mut [u8],
    from: SocketAddr,
    local: IpAddr,
    mac: [u8; 6],
    (tos, ttl): (u8, u8),
    ident: u16,
) -> Option<usize> {
    let len = buf.len();
    let (eth, rest) = buf.split_at_mut(ETH_LEN);
    let (dscp, ecn) = (tos >> 2, tos & 3);
    let (ethertype, ip_len) = match (from.ip(), local) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            let (ip, datagram) = rest.split_at_mut(IPV4_LEN);
            let ip_repr = Ipv4Repr {
                src,
                dst,
                dscp,
                ecn,
                ttl,
                ident,
                dont_frag: true,
            };
            ip_repr.emit(&mut Ipv4Packet::new_unchecked(ip), datagram.len() as u16);
            (ETHERTYPE_IPV4, IPV4_LEN)
        }
        (IpAddr::V6(src), IpAddr::V6(dst)) => {
            let (ip, datagram) = rest.split_at_mut(IPV6_LEN);
            let ip_repr = Ipv6Repr {
                src,
                dst,
                dscp,
                ecn,
                flow_label: 0,
                hop_limit: ttl,
            };
            ip_repr.emit(&mut Ipv6Packet::new_unchecked(ip), datagram.len() as u16);
            (ETHERTYPE_IPV6, IPV6_LEN)
        }
        _ => return None,
    };
    let eth_repr = EthRepr {
        dst: mac,
        src: mac_for_ip(from.ip()),
        vlan: None,
    };
    eth_repr.emit(&mut EthernetFrame::new_unchecked(eth), ethertype);
    let udp_repr = UdpRepr {
        src_port: from.port(),
        dst_port: ROCEV2_UDP_PORT,
        checksum: UdpChecksum::Zero,
    };
    let datagram = &mut rest[ip_len..];
    let payload_len = (datagram.len() - UDP_LEN) as u16;
    udp_repr.emit(&mut UdpPacket::new_unchecked(datagram), payload_len);
    Some(len)
}

/// In a frame [`synthesize`]d over IPv4 (an expected identification with
/// DF, fragment offset 0), put the identification and DF bit with which its
/// ICRC verifies ([`icrc::recover_ipv4_ident`]) and fix the header
/// checksum. With `any` false, only identification 0 with DF is accepted
/// besides the expected one (a one-bit guess, not a recovery).
/// `Some(true)`: they differ from the frame's and were written;
/// `Some(false)`: the frame's verify; `None`: nothing (accepted) does, and
/// the frame is left as it was.
pub(super) fn recover_ident(frame: &mut [u8], any: bool) -> Option<bool> {
    let ip = frame.get_mut(ETH_LEN..)?;
    let icrc_at = ip.len().checked_sub(ICRC_LEN)?;
    let wire: [u8; 4] = ip.get(icrc_at..)?.try_into().ok()?;
    let (ident, df) = icrc::recover_ipv4_ident(ip.get(..icrc_at)?, wire).ok()??;
    let mut h = Ipv4Packet::new_checked(ip).ok()?;
    let flags = if df { 0x4000 } else { 0 };
    if h.ident() == ident && h.flags_frag() == flags {
        return Some(false);
    }
    if !any && (ident, df) != (0, true) {
        return None;
    }
    h.set_ident(ident);
    h.set_unfragmented(df);
    h.fill_checksum();
    Some(true)
}

/// Raw mode: the IPv4 packet of `n` bytes at `buf[ETH_LEN..]` (as a raw
/// socket returns it: real header) becomes an Ethernet frame: destination
/// `mac`, source [`mac_for_ip`] of the sender. Returns the frame length, or
/// `None` unless it is an option-less, unfragmented IPv4 + UDP packet of
/// consistent length to `local:port` (`n` may exceed the buffer: a
/// truncated packet). A packet to a port other than 4791 gets 4791, as a
/// datagram-mode backend rebuilds it (module docs).
pub(super) fn frame_raw(
    buf: &mut [u8],
    n: usize,
    local: Ipv4Addr,
    port: u16,
    mac: [u8; 6],
) -> Option<usize> {
    let frame = buf.get_mut(..ETH_LEN + n)?;
    let (eth, packet) = frame.split_at_mut(ETH_LEN);
    if n < IPV4_LEN + UDP_LEN {
        return None;
    }
    let (ip, datagram) = packet.split_at_mut(IPV4_LEN);
    let ip = Ipv4Packet::new_unchecked(&*ip);
    let mut udp = UdpPacket::new_unchecked(datagram);
    if !is_plain_udp(&ip)
        || usize::from(ip.total_len()) != n
        || ip.dst_addr() != local
        || udp.dst_port() != port
        || usize::from(udp.len()) != n - IPV4_LEN
    {
        return None;
    }
    udp.set_dst_port(ROCEV2_UDP_PORT);
    let eth_repr = EthRepr {
        dst: mac,
        src: mac_for_ip(IpAddr::V4(ip.src_addr())),
        vlan: None,
    };
    eth_repr.emit(&mut EthernetFrame::new_unchecked(eth), ETHERTYPE_IPV4);
    Some(ETH_LEN + n)
}

/// An IPv4 header without options, not a fragment, carrying UDP.
fn is_plain_udp<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> bool {
    ip.version() == 4
        && ip.header_len() == IPV4_LEN
        && ip.protocol() == ipv4::PROTOCOL_UDP
        && !ip.more_frags()
        && ip.frag_offset() == 0
}

/// Raw mode: where a frame's IPv4 packet is (start, end of the UDP
/// datagram) and its destination, if it is option-less IPv4 + UDP with
/// consistent lengths.
pub(super) fn locate_ipv4(frame: &[u8]) -> Option<(usize, usize, Ipv4Addr)> {
    let l2 = L2Info::parse(frame).ok()?;
    if l2.ethertype != ETHERTYPE_IPV4 {
        return None;
    }
    let l3 = l2.header_len();
    let (ip, datagram) = frame.get(l3..l3 + IPV4_LEN + UDP_LEN)?.split_at(IPV4_LEN);
    let ip = Ipv4Packet::new_unchecked(ip);
    let udp = UdpPacket::new_unchecked(datagram);
    if ip.version() != 4 || ip.header_len() != IPV4_LEN || ip.protocol() != ipv4::PROTOCOL_UDP {
        return None;
    }
    let total = usize::from(ip.total_len());
    let udp_len = usize::from(udp.len());
    if total != IPV4_LEN + udp_len || udp_len < UDP_LEN + MIN_ROCE || l3 + total > frame.len() {
        return None;
    }
    Some((l3, l3 + total, ip.dst_addr()))
}

/// What [`inspect`] found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct WireInfo {
    pub(super) v6: bool,
    pub(super) dst: IpAddr,
    pub(super) tos: u8,
    pub(super) ttl: u8,
    /// Where the IP header starts, and its length.
    l3: usize,
    ihl: usize,
    /// The UDP payload's range in the frame (it ends with the ICRC).
    pub(super) payload: (usize, usize),
}

impl WireInfo {
    /// The UDP payload's length, bytes.
    pub(super) fn payload_len(&self) -> usize {
        self.payload.1 - self.payload.0
    }
}

/// Find the headers of a RoCEv2 frame the socket will send: `None` if it
/// is not IPv4 (no options) or IPv6 + UDP with consistent lengths and a
/// UDP payload of at least a BTH and an ICRC.
pub(super) fn inspect(frame: &[u8]) -> Option<WireInfo> {
    let l2 = L2Info::parse(frame).ok()?;
    let l3 = l2.header_len();
    let ip = frame.get(l3..)?;
    let (v6, ihl, dst, tos, ttl) = match l2.ethertype {
        ETHERTYPE_IPV4 => {
            let h = Ipv4Packet::new_checked(ip).ok()?;
            if h.version() != 4 || h.header_len() != IPV4_LEN || h.protocol() != ipv4::PROTOCOL_UDP
            {
                return None;
            }
            (false, IPV4_LEN, IpAddr::V4(h.dst_addr()), h.tos(), h.ttl())
        }
        ETHERTYPE_IPV6 => {
            let h = Ipv6Packet::new_checked(ip).ok()?;
            if h.version() != 6 || h.next_header() != ipv4::PROTOCOL_UDP {
                return None;
            }
            let dst = IpAddr::V6(h.dst_addr());
            (true, IPV6_LEN, dst, h.traffic_class(), h.hop_limit())
        }
        _ => return None,
    };
    let udp_len = usize::from(UdpPacket::new_checked(ip.get(ihl..)?).ok()?.len());
    if udp_len < UDP_LEN + MIN_ROCE || ihl + udp_len > ip.len() {
        return None;
    }
    Some(WireInfo {
        v6,
        dst,
        tos,
        ttl,
        l3,
        ihl,
        payload: (l3 + ihl + UDP_LEN, l3 + ihl + udp_len),
    })
}

/// Rewrite the frame [`inspect`] described to what the socket puts on the
/// wire: UDP source port `sport`, destination port 4791, IPv4
/// identification `ident` with DF, and recompute its ICRC over that.
pub(super) fn finish(frame: &mut [u8], w: &WireInfo, sport: u16, ident: u16) -> Option<()> {
    let ip = frame.get_mut(w.l3..w.payload.1)?;
    let form = if w.v6 {
        IcrcForm::Ipv6
    } else {
        let mut h = Ipv4Packet::new_unchecked(&mut *ip);
        h.set_ident(ident);
        h.set_unfragmented(true);
        IcrcForm::Ipv4
    };
    let mut udp = UdpPacket::new_unchecked(ip.get_mut(w.ihl..)?);
    udp.set_src_port(sport);
    udp.set_dst_port(ROCEV2_UDP_PORT);
    let end = ip.len();
    let crc = icrc::compute(form, ip.get(..end - ICRC_LEN)?).ok()?;
    ip.get_mut(end - ICRC_LEN..)?
        .copy_from_slice(&crc.to_le_bytes());
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_stack::wire::{checksum, IcrcStatus, ParseMode, RocePacket};

    /// A rebuilt IPv4 frame gets the identification and DF its ICRC was
    /// computed with (here by the `crc` crate, an independent CRC-32), and
    /// a valid header checksum.
    #[test]
    fn recover_ident_rewrites_identification_df_and_checksum() {
        let payload = [
            0x04u8, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 1, 0, b'h', b'i', 0, 0,
        ];
        let mut frame = vec![0u8; header_len(false) + payload.len() + ICRC_LEN];
        frame[header_len(false)..header_len(false) + payload.len()].copy_from_slice(&payload);
        let from: SocketAddr = "10.0.0.1:49152".parse().unwrap();
        let n = synthesize(
            &mut frame,
            from,
            "10.0.0.2".parse().unwrap(),
            [2; 6],
            (0, 64),
            0,
        )
        .unwrap();
        // The sender's header: identification 0x1234, DF.
        let mut pseudo = vec![0xFFu8; 8];
        pseudo.extend_from_slice(&frame[ETH_LEN..n - ICRC_LEN]);
        pseudo[8 + 4..8 + 6].copy_from_slice(&[0x12, 0x34]);
        for i in [1, 8, 10, 11, 26, 27, 28 + 4] {
            pseudo[8 + i] = 0xFF;
        }
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&pseudo);
        frame[n - ICRC_LEN..n].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(recover_ident(&mut frame[..n], true), Some(true));
        assert_eq!(&frame[ETH_LEN + 4..ETH_LEN + 8], &[0x12, 0x34, 0x40, 0]);
        assert!(checksum::verify(&frame[ETH_LEN..ETH_LEN + IPV4_LEN]));
        let p = RocePacket::parse(&frame[..n]).expect("the ICRC verifies");
        assert_eq!(p.icrc_status(), IcrcStatus::Ok);
        // Once right, nothing to recover; a corrupted ICRC byte has no
        // solution here.
        assert_eq!(recover_ident(&mut frame[..n], true), Some(false));
        frame[n - 1] ^= 0x80;
        assert_eq!(recover_ident(&mut frame[..n], true), None);
    }

    /// Raw mode keeps only option-less unfragmented IPv4 + UDP to its
    /// address and port, and puts 4791 in a frame sent to another port.
    #[test]
    fn raw_frames_are_checked_and_get_port_4791() {
        let mut buf = vec![0u8; 200];
        let n = 20 + 8 + 16;
        let ip = &mut buf[ETH_LEN..];
        ip[..20].copy_from_slice(&[
            0x45, 0, 0, n as u8, 0xab, 0xcd, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        ip[20..28].copy_from_slice(&[0xc0, 0x00, 0x30, 0x39, 0, 24, 0, 0]);
        let local = Ipv4Addr::new(10, 0, 0, 2);
        let mut b = buf.clone();
        assert_eq!(
            frame_raw(&mut b, n, local, 12345, [2; 6]),
            Some(ETH_LEN + n)
        );
        assert_eq!(&b[ETH_LEN + 20..ETH_LEN + 24], &[0xc0, 0, 0x12, 0xb7]);
        assert_eq!(&b[6..14], &[2, 0, 10, 0, 0, 1, 0x08, 0x00]);
        assert_eq!(&b[ETH_LEN + 4..ETH_LEN + 6], &[0xab, 0xcd], "kept");
        for (at, v) in [
            (0, 0x46u8),
            (9, 6),
            (7, 1),
            (6, 0x60),
            (19, 3),
            (23, 0x3a),
            (25, 25),
        ] {
            let mut b = buf.clone();
            b[ETH_LEN + at] = v;
            assert_eq!(
                frame_raw(&mut b, n, local, 12345, [2; 6]),
                None,
                "byte {at}"
            );
        }
        let mut b = buf.clone();
        assert_eq!(
            frame_raw(&mut b, 300, local, 12345, [2; 6]),
            None,
            "truncated"
        );
        assert_eq!(frame_raw(&mut b, n - 1, local, 12345, [2; 6]), None);
    }

    #[test]
    fn rewrite_then_synthesize_round_trips_with_a_valid_icrc() {
        use roce_stack::testing::Pair;
        use roce_stack::wire::{BthRepr, ExtHeaders, Opcode};
        let p = Pair::new(1500, Default::default(), 1);
        let bth = BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode::RC_SEND_ONLY, 0x12, 0x100)
        };
        let mut frame = p.frame(0, bth, ExtHeaders::default(), b"hello, world!");
        let w = inspect(&frame).unwrap();
        finish(&mut frame, &w, 40000, 0).unwrap();
        assert!(!w.v6);
        let payload = frame[w.payload.0..w.payload.1].to_vec();
        let mut buf = vec![0u8; header_len(false) + payload.len()];
        buf[header_len(false)..].copy_from_slice(&payload);
        let from: SocketAddr = "10.0.0.1:40000".parse().unwrap();
        let n = synthesize(
            &mut buf,
            from,
            "10.0.0.2".parse().unwrap(),
            [2; 6],
            (3, 9),
            0,
        )
        .unwrap();
        let pkt = RocePacket::parse_with(&buf[..n], ParseMode::Lenient).unwrap();
        assert_eq!(pkt.icrc_status(), IcrcStatus::Ok);
        assert_eq!(pkt.net().ecn(), 3);
        assert_eq!(pkt.udp().unwrap().src_port, 40000);
        assert_eq!(pkt.payload(), b"hello, world!");
        RocePacket::parse(&buf[..n]).unwrap();
    }
}
