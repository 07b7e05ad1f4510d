//! IPv6 header (RFC 8200 §3). Extension headers are not followed: a RoCEv2
//! packet's next header is UDP.
//!
//! ```text
//! +-------+---------------+---------------------------------------+
//! |Version| Traffic Class |              Flow Label               |
//! +-------+---------------+-------+---------------+---------------+
//! |         Payload Length        |  Next Header  |   Hop Limit   |
//! +-------------------------------+---------------+---------------+
//! |                  Source Address (16 bytes)                    |
//! |               Destination Address (16 bytes)                  |
//! +---------------------------------------------------------------+
//! ```
//! The ICRC masks the traffic class, flow label and hop limit (Annex
//! A17.4).

use core::net::Ipv6Addr;

use super::ipv4::PROTOCOL_UDP;
use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// Length of the IPv6 header, bytes.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

header_view!(
    /// An IPv6 header in a buffer (40 bytes).
    "an IPv6 header",
    Error::Ipv6Truncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn word0(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// Version (6).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class: DSCP << 2 | ECN.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// DSCP (traffic class >> 2).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }
    /// ECN (traffic class & 3).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 3
    }
    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xF_FFFF
    }
    /// Payload length, bytes.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Next header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(view::get::<16>(self.buffer.as_ref(), field::SRC_ADDR))
    }
    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(view::get::<16>(self.buffer.as_ref(), field::DST_ADDR))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word0(&mut self, mask: u32, v: u32) {
        let w = (self.word0() & !mask) | (v & mask);
        view::set_u32(self.buffer.as_mut(), field::VER_TC_FLOW, w);
    }
    /// Set the version.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        self.set_word0(0xF000_0000, u32::from(v) << 28);
    }
    /// Set the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        self.set_word0(0x0FF0_0000, u32::from(tc) << 20);
    }
    /// Set the flow label (20 bits).
    #[inline]
    pub fn set_flow_label(&mut self, fl: u32) {
        self.set_word0(0x000F_FFFF, fl);
    }
    /// Set the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        view::set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }
    /// Set the next header.
    #[inline]
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = nh;
    }
    /// Set the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, hl: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hl;
    }
    /// Set the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }
}

/// The RoCEv2 receive checks of the IPv6 header at the start of `l3`.
/// Returns the end of the IP datagram within `l3` (40 + payload length).
///
/// Errors: [`Error::Ipv6Truncated`], [`Error::Ipv6BadVersion`],
/// [`Error::NotRoce`] (next header not UDP).
pub(crate) fn check(l3: &[u8]) -> Result<usize, Error> {
    let Some(h) = l3.first_chunk::<HEADER_LEN>() else {
        return Err(Error::Ipv6Truncated);
    };
    let ip = Packet::new_unchecked(h);
    //= RFC 8200 §3
    //# Version 4-bit Internet Protocol version number = 6.
    if ip.version() != 6 {
        return Err(Error::Ipv6BadVersion);
    }
    //= RFC 8200 §3
    //# Next Header 8-bit selector. Identifies the type of header
    //# immediately following the IPv6 header.
    if ip.next_header() != PROTOCOL_UDP {
        return Err(Error::NotRoce);
    }
    //= RFC 8200 §3
    //# Payload Length 16-bit unsigned integer. Length of the IPv6
    //# payload, i.e., the rest of the packet following this IPv6 header, in
    //# octets.
    Ok(HEADER_LEN + usize::from(ip.payload_len()))
}

/// IPv6 header fields of a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Info {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// DSCP (traffic class >> 2).
    pub dscp: u8,
    /// ECN (traffic class & 3).
    pub ecn: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Payload length, bytes.
    pub payload_len: u16,
}

impl Ipv6Info {
    /// The fields of `ip`.
    pub fn parse<T: AsRef<[u8]>>(ip: &Packet<T>) -> Ipv6Info {
        Ipv6Info {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            flow_label: ip.flow_label(),
            hop_limit: ip.hop_limit(),
            payload_len: ip.payload_len(),
        }
    }
}

/// IPv6 header to write (next header UDP; payload length computed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// DSCP, 0..=63.
    pub dscp: u8,
    /// ECN, 0..=3.
    pub ecn: u8,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

impl From<Ipv6Info> for Ipv6Repr {
    fn from(i: Ipv6Info) -> Ipv6Repr {
        Ipv6Repr {
            src: i.src,
            dst: i.dst,
            dscp: i.dscp,
            ecn: i.ecn,
            flow_label: i.flow_label,
            hop_limit: i.hop_limit,
        }
    }
}

impl Ipv6Repr {
    /// The repr that rebuilds `ip`.
    pub fn parse<T: AsRef<[u8]>>(ip: &Packet<T>) -> Ipv6Repr {
        Ipv6Info::parse(ip).into()
    }

    /// Write the 40-byte header of a packet carrying `payload_len` bytes of
    /// UDP.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, ip: &mut Packet<T>, payload_len: u16) {
        ip.set_version(6);
        ip.set_traffic_class((self.dscp & 0x3F) << 2 | (self.ecn & 3));
        ip.set_flow_label(self.flow_label & 0xF_FFFF);
        ip.set_payload_len(payload_len);
        ip.set_next_header(PROTOCOL_UDP);
        ip.set_hop_limit(self.hop_limit);
        ip.set_src_addr(self.src);
        ip.set_dst_addr(self.dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written over junk, read back by smoltcp (an independent view).
    #[test]
    fn emit_read_by_smoltcp() {
        let r = Ipv6Repr {
            src: "fe80::1".parse().unwrap(),
            dst: "fe80::2".parse().unwrap(),
            dscp: 26,
            ecn: 2,
            flow_label: 0x12345,
            hop_limit: 64,
        };
        let mut b = [0xFFu8; 40];
        r.emit(&mut Packet::new_unchecked(&mut b[..]), 33);
        // Vector v2 of ../shared/reference/vectors.txt: traffic class 0x6a,
        // flow label 0x12345.
        assert_eq!(&b[..8], &[0x66, 0xa1, 0x23, 0x45, 0, 33, 17, 64]);
        let s = smoltcp::wire::Ipv6Packet::new_unchecked(&b[..]);
        assert_eq!(
            (s.traffic_class(), s.flow_label(), s.payload_len()),
            (0x6a, 0x12345, 33)
        );
        assert_eq!((s.src_addr(), s.dst_addr()), (r.src, r.dst));
        assert_eq!(Ipv6Repr::parse(&Packet::new_checked(&b[..]).unwrap()), r);
        assert_eq!(check(&b), Ok(73));
        b[6] = 6;
        assert_eq!(check(&b), Err(Error::NotRoce));
        b[0] = 0x46;
        assert_eq!(check(&b), Err(Error::Ipv6BadVersion));
        assert_eq!(check(&b[..39]), Err(Error::Ipv6Truncated));
    }
}
