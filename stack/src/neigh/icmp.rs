//! ICMPv4 echo (RFC 792, RFC 1122 §3.2.2.6): answer echo requests for our
//! IPv4 addresses, so `ping` works against the stack.

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv4Packet, Icmpv4Repr,
    IpProtocol, Ipv4Packet, Ipv4Repr, ETHERNET_HEADER_LEN,
};

use super::{frame_len, Neighbors, ECHO_HOP_LIMIT};

impl Neighbors {
    pub(super) fn handle_icmpv4(&mut self, src_mac: [u8; 6], payload: &[u8]) {
        let caps = ChecksumCapabilities::default();
        let Ok(ip) = Ipv4Packet::new_checked(payload) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(ip_repr) = Ipv4Repr::parse(&ip, &caps) else {
            self.counters.rx_malformed += 1;
            return;
        };
        if !self.cfg.ipv4.contains(&ip_repr.dst_addr) {
            self.counters.rx_ignored += 1;
            return;
        }
        let Ok(icmp) = Icmpv4Packet::new_checked(ip.payload()) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(repr) = Icmpv4Repr::parse(&icmp, &caps) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        } = repr
        else {
            self.counters.rx_ignored += 1;
            return;
        };
        self.counters.echo_requests_rx += 1;
        let reply = Icmpv4Repr::EchoReply {
            ident,
            seq_no,
            data,
        };
        let ip_reply = Ipv4Repr {
            src_addr: ip_repr.dst_addr,
            dst_addr: ip_repr.src_addr,
            next_header: IpProtocol::Icmp,
            payload_len: reply.buffer_len(),
            hop_limit: ECHO_HOP_LIMIT,
        };
        let mac = self.cfg.mac;
        let queued = self.queue_frame(|buf| {
            let ip_len = ip_reply.buffer_len() + reply.buffer_len();
            let n = frame_len(ETHERNET_HEADER_LEN + ip_len);
            let out = buf.get_mut(..n)?;
            out.fill(0);
            let mut f = EthernetFrame::new_checked(out).ok()?;
            EthernetRepr {
                src_addr: EthernetAddress(mac),
                dst_addr: EthernetAddress(src_mac),
                ethertype: EthernetProtocol::Ipv4,
            }
            .emit(&mut f);
            let l3 = f.payload_mut().get_mut(..ip_len)?;
            let mut ipp = Ipv4Packet::new_unchecked(l3);
            ip_reply.emit(&mut ipp, &caps);
            let mut icmp = Icmpv4Packet::new_unchecked(ipp.payload_mut());
            reply.emit(&mut icmp, &caps);
            Some(n)
        });
        if queued {
            self.counters.echo_replies_tx += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;

    /// An ICMPv4 echo request frame, built with smoltcp.
    fn echo4(dst_mac: [u8; 6], dst: Ipv4Addr, data: &[u8]) -> Vec<u8> {
        let caps = ChecksumCapabilities::default();
        let icmp = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 7,
            data,
        };
        let ip = Ipv4Repr {
            src_addr: PEER_IP,
            dst_addr: dst,
            next_header: IpProtocol::Icmp,
            payload_len: icmp.buffer_len(),
            hop_limit: 64,
        };
        let mut f = vec![0u8; 14 + 20 + icmp.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src_addr: EthernetAddress(PEER),
            dst_addr: EthernetAddress(dst_mac),
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut eth);
        let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
        ip.emit(&mut ipp, &caps);
        icmp.emit(&mut Icmpv4Packet::new_unchecked(ipp.payload_mut()), &caps);
        f
    }

    #[test]
    fn icmpv4_echo_request_is_answered() {
        let mut n = neigh();
        let data: Vec<u8> = (0..56u8).collect();
        assert!(n.handle_frame(Instant::ZERO, &echo4(OURS, IP, &data)));
        let r = poll(&mut n, Instant::ZERO).expect("echo reply");
        let eth = EthernetFrame::new_checked(&r[..]).expect("eth");
        assert_eq!(eth.dst_addr().0, PEER);
        assert_eq!(eth.src_addr().0, OURS);
        let ip = Ipv4Packet::new_checked(eth.payload()).expect("ip");
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (IP, PEER_IP));
        let icmp = Icmpv4Packet::new_checked(ip.payload()).expect("icmp");
        assert!(icmp.verify_checksum());
        assert_eq!(
            Icmpv4Repr::parse(&icmp, &ChecksumCapabilities::default()),
            Ok(Icmpv4Repr::EchoReply {
                ident: 0x1234,
                seq_no: 7,
                data: &data
            })
        );
        assert_eq!(n.counters().echo_replies_tx, 1);
    }

    #[test]
    fn icmpv4_not_for_us_or_corrupt_is_consumed_silently() {
        let mut n = neigh();
        assert!(n.handle_frame(
            Instant::ZERO,
            &echo4(OURS, Ipv4Addr::new(10, 0, 0, 5), b"x")
        ));
        assert!(n.handle_frame(Instant::ZERO, &echo4(PEER, IP, b"x")));
        let mut bad = echo4(OURS, IP, b"abcd");
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(n.handle_frame(Instant::ZERO, &bad));
        assert_eq!(poll(&mut n, Instant::ZERO), None);
        assert_eq!(n.counters().rx_ignored, 2);
        assert_eq!(n.counters().rx_malformed, 1);
    }
}
