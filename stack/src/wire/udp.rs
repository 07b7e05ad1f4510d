//! UDP header (RFC 768) and the RoCEv2 UDP checksum policy.
//!
//! ```text
//! +----------------+----------------+
//! |  Source Port   |   Dest Port    |
//! +----------------+----------------+
//! |     Length     |    Checksum    |
//! +----------------+----------------+
//! ```
//! The destination port of RoCEv2 is 4791 ([`ROCEV2_UDP_PORT`]); the source
//! port is flow entropy. The ICRC masks the checksum (Annex A17.4).
//!
//! Checksum policy ([`UdpChecksum`]): over IPv4 the default is 0 ("no
//! checksum", RFC 768), what rxe and ConnectX send; the ICRC protects the
//! packet. Over IPv6 a zero UDP checksum is only legal under RFC 6935/6936
//! (tunnel endpoints that opt in), and plain IPv6 receivers and Wireshark
//! reject it, so the IPv6 default computes the full checksum (RFC 8200
//! §8.1). Receivers never check it (CASES R37 a, b).

use core::net::IpAddr;

use super::checksum::Checksum;
use super::ipv4::PROTOCOL_UDP;
use super::view::{self, header_view, Field};
use super::{Error, ROCEV2_UDP_PORT};

mod field {
    use super::Field;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of the UDP header, bytes.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

header_view!(
    /// A UDP header in a buffer (8 bytes; the buffer may go on with the
    /// datagram's payload).
    "a UDP header",
    Error::UdpTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length: header and payload, bytes.
    #[inline]
    #[allow(clippy::len_without_is_empty)] // a field, not a container
    pub fn len(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Checksum as in the buffer.
    #[inline]
    pub fn checksum(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the source port.
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        view::set_u16(self.buffer.as_mut(), field::SRC_PORT, p);
    }
    /// Set the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        view::set_u16(self.buffer.as_mut(), field::DST_PORT, p);
    }
    /// Set the length.
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        view::set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }
    /// Set the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        view::set_u16(self.buffer.as_mut(), field::CHECKSUM, c);
    }
    /// Compute and write the checksum over the pseudo header of `src` and
    /// `dst` and the datagram (the buffer must hold [`Packet::len`] bytes).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) {
        self.set_checksum(0);
        let len = self.len();
        let mut sum = pseudo_header(src, dst, u32::from(len));
        sum.add(&self.buffer.as_ref()[..usize::from(len)]);
        self.set_checksum(transmitted(sum.finish()));
    }
}

/// The one's-complement sum of the pseudo header of a UDP datagram of
/// `udp_len` bytes from `src` to `dst` (RFC 768; RFC 8200 §8.1 for IPv6),
/// to which the datagram is added.
pub fn pseudo_header(src: IpAddr, dst: IpAddr, udp_len: u32) -> Checksum {
    let mut sum = Checksum::new();
    for a in [src, dst] {
        match a {
            IpAddr::V4(a) => sum.add(&a.octets()),
            IpAddr::V6(a) => sum.add(&a.octets()),
        }
    }
    // Protocol and length: the same one's-complement sum for the IPv4
    // (zero, protocol, 16-bit length) and IPv6 (32-bit length, zeros,
    // next header) layouts.
    sum.add(&[0, PROTOCOL_UDP]);
    sum.add(&udp_len.to_be_bytes());
    sum
}

/// A computed checksum as it goes on the wire.
pub fn transmitted(c: u16) -> u16 {
    //= RFC 768
    //# If the computed checksum is zero, it is transmitted as all ones
    //# (the equivalent in one's complement arithmetic).
    if c == 0 {
        0xFFFF
    } else {
        c
    }
}

/// The RoCEv2 receive checks of the UDP header at `l3[off..]`, inside an
/// IP datagram ending at `ip_end` within `l3`. Returns the end of the UDP
/// datagram within `l3` (which may exceed `l3.len()` when truncated).
///
/// Errors: [`Error::Truncated`] (the header is cut off and the IP length
/// says it should be there), [`Error::UdpTruncated`], [`Error::NotRoce`]
/// (another port), [`Error::UdpBadLen`].
#[inline(always)]
pub(crate) fn check(l3: &[u8], off: usize, ip_end: usize) -> Result<usize, Error> {
    let hdr = match l3.get(off..).and_then(|h| h.first_chunk::<HEADER_LEN>()) {
        Some(h) => h,
        None if ip_end > l3.len() => return Err(Error::Truncated),
        None => return Err(Error::UdpTruncated),
    };
    let udp = Packet::new_unchecked(hdr);
    //= RoCEv2 Annex A17.2, as ROCEV2-DIGEST §1 states it (table row)
    //# UDP, dst port: 4791
    // Any source port, 0 included (CASES R25 b).
    if udp.dst_port() != ROCEV2_UDP_PORT {
        return Err(Error::NotRoce);
    }
    //= RFC 768
    //# Length is the length in octets of this user datagram including
    //# this header and the data. (This means the minimum value of the
    //# length is eight.)
    let len = usize::from(udp.len());
    if len < HEADER_LEN || off + len > ip_end {
        return Err(Error::UdpBadLen);
    }
    Ok(off + len)
}

/// UDP header fields of a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpInfo {
    /// Source port (flow entropy; any value accepted).
    pub src_port: u16,
    /// Destination port (4791).
    pub dst_port: u16,
    /// Length, bytes (header + BTH .. ICRC).
    pub len: u16,
    /// Checksum as received (not verified).
    pub checksum: u16,
}

impl UdpInfo {
    /// The fields of `udp`.
    pub fn parse<T: AsRef<[u8]>>(udp: &Packet<T>) -> UdpInfo {
        UdpInfo {
            src_port: udp.src_port(),
            dst_port: udp.dst_port(),
            len: udp.len(),
            checksum: udp.checksum(),
        }
    }
}

/// What to put in the UDP checksum field (see the module docs for the policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UdpChecksum {
    /// Zero over IPv4, computed over IPv6.
    #[default]
    Default,
    /// Always 0 (what rxe sends over both IP versions).
    Zero,
    /// Always the full RFC 768 checksum.
    Compute,
    /// This exact value (replaying or rebuilding a captured frame).
    Value(u16),
}

impl UdpChecksum {
    /// The policy in effect over IPv6 (`ipv6`) or IPv4: `Default` becomes
    /// `Compute` or `Zero`, the others stay.
    #[inline]
    pub fn resolve(self, ipv6: bool) -> UdpChecksum {
        match self {
            //= RFC 8200 §8.1
            //# Unlike IPv4, the default behavior when UDP packets are
            //# originated by an IPv6 node is that the UDP checksum is not
            //# optional.
            UdpChecksum::Default if ipv6 => UdpChecksum::Compute,
            //= RFC 768
            //# An all zero transmitted checksum value means that the
            //# transmitter generated no checksum
            UdpChecksum::Default => UdpChecksum::Zero,
            p => p,
        }
    }
}

/// UDP header to write (length computed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port (flow entropy; keep it constant per QP).
    pub src_port: u16,
    /// Destination port, normally [`ROCEV2_UDP_PORT`].
    pub dst_port: u16,
    /// Checksum policy.
    pub checksum: UdpChecksum,
}

impl Default for UdpRepr {
    fn default() -> Self {
        UdpRepr {
            src_port: 0xC000,
            dst_port: ROCEV2_UDP_PORT,
            checksum: UdpChecksum::Default,
        }
    }
}

impl From<UdpInfo> for UdpRepr {
    /// The repr that rebuilds the header, its checksum as a literal value.
    fn from(u: UdpInfo) -> UdpRepr {
        UdpRepr {
            src_port: u.src_port,
            dst_port: u.dst_port,
            checksum: UdpChecksum::Value(u.checksum),
        }
    }
}

impl UdpRepr {
    /// Write the header of a datagram of `payload_len` bytes after it, with
    /// the checksum field 0 (filled in when the datagram is complete:
    /// [`Packet::fill_checksum`], or the value of [`UdpChecksum::Value`]).
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, udp: &mut Packet<T>, payload_len: u16) {
        udp.set_src_port(self.src_port);
        udp.set_dst_port(self.dst_port);
        udp.set_len(payload_len.wrapping_add(HEADER_LEN as u16));
        udp.set_checksum(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emit_and_checksum_read_by_smoltcp() {
        use smoltcp::wire::{IpAddress, UdpPacket};
        let r = UdpRepr {
            src_port: 0xC132,
            ..UdpRepr::default()
        };
        let mut b = [0xAAu8; 8 + 13];
        r.emit(&mut Packet::new_unchecked(&mut b[..]), 13);
        assert_eq!(&b[..8], &[0xC1, 0x32, 0x12, 0xB7, 0, 21, 0, 0]);
        let (src, dst) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum(src, dst);
        let s = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(s.verify_checksum(&IpAddress::from(src), &IpAddress::from(dst)));
        let (src, dst) = ("fe80::1".parse().unwrap(), "fe80::2".parse().unwrap());
        Packet::new_unchecked(&mut b[..]).fill_checksum(src, dst);
        let s = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(s.verify_checksum(&IpAddress::from(src), &IpAddress::from(dst)));
        assert_eq!(UdpChecksum::Default.resolve(true), UdpChecksum::Compute);
        assert_eq!(UdpChecksum::Default.resolve(false), UdpChecksum::Zero);
        assert_eq!(UdpChecksum::Value(7).resolve(true), UdpChecksum::Value(7));
    }

    #[test]
    fn receive_checks() {
        let l3 = [0, 0, 0x12, 0xB7, 0, 16, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(check(&l3, 0, 16), Ok(16));
        assert_eq!(check(&l3, 0, 15), Err(Error::UdpBadLen));
        assert_eq!(check(&l3, 9, 16), Err(Error::UdpTruncated));
        assert_eq!(check(&l3, 9, 20), Err(Error::Truncated));
        let mut x = l3;
        x[5] = 7;
        assert_eq!(check(&x, 0, 16), Err(Error::UdpBadLen));
        x[3] = 0xB8;
        assert_eq!(check(&x, 0, 16), Err(Error::NotRoce));
    }
}
