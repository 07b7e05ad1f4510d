//! IPv4 header (RFC 791), the option-less form RoCEv2 uses.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Identification        |Flags|      Fragment Offset    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Source Address                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Destination Address                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//! The ICRC masks TOS (DSCP, ECN), TTL and the header checksum (Annex
//! A17.4); the identification, flags and lengths are covered.

use core::net::Ipv4Addr;

use super::checksum;
use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Length of an option-less IPv4 header, bytes.
pub const HEADER_LEN: usize = field::DST_ADDR.end;
/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1FFF;

header_view!(
    /// An IPv4 header in a buffer: the first 20 bytes (options, if the IHL
    /// says there are any, are not modelled).
    "an IPv4 header",
    Error::Ipv4Truncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// Version (4).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length from the IHL, bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0F) * 4
    }
    /// The TOS byte: DSCP << 2 | ECN.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }
    /// DSCP (TOS >> 2).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }
    /// ECN (TOS & 3): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.tos() & 3
    }
    /// Total length, bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::IDENT)
    }
    /// The flags and fragment offset word.
    #[inline]
    pub fn flags_frag(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::FLG_OFF)
    }
    /// DF: don't fragment.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & FLAG_DF != 0
    }
    /// MF: more fragments.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_frag() & FLAG_MF != 0
    }
    /// Fragment offset, in 8-byte units.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        self.flags_frag() & FRAG_OFFSET
    }
    /// TTL.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    /// Protocol.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    /// Header checksum as in the buffer.
    #[inline]
    pub fn checksum(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }
    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(view::get::<4>(self.buffer.as_ref(), field::SRC_ADDR))
    }
    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(view::get::<4>(self.buffer.as_ref(), field::DST_ADDR))
    }
    /// Whether the header checksum of the 20-byte header is right.
    #[inline(always)]
    pub fn verify_checksum(&self) -> bool {
        //= RFC 791 §3.1
        //# The checksum field is the 16 bit one's complement of the one's
        //# complement sum of all 16 bit words in the header.
        checksum::verify(self.as_bytes())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the version.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0F) | v << 4;
    }
    /// Set the IHL from a header length in bytes (a multiple of 4).
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xF0) | ((len / 4) as u8 & 0x0F);
    }
    /// Set the TOS byte.
    #[inline]
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::TOS] = tos;
    }
    /// Set the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        view::set_u16(self.buffer.as_mut(), field::LENGTH, len);
    }
    /// Set the identification.
    #[inline]
    pub fn set_ident(&mut self, ident: u16) {
        view::set_u16(self.buffer.as_mut(), field::IDENT, ident);
    }
    /// Set the flags and fragment offset word.
    #[inline]
    pub fn set_flags_frag(&mut self, v: u16) {
        view::set_u16(self.buffer.as_mut(), field::FLG_OFF, v);
    }
    /// Set DF, clearing the other flags and the fragment offset.
    #[inline]
    pub fn set_unfragmented(&mut self, dont_frag: bool) {
        self.set_flags_frag(if dont_frag { FLAG_DF } else { 0 });
    }
    /// Set the TTL.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }
    /// Set the protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }
    /// Set the header checksum field.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        view::set_u16(self.buffer.as_mut(), field::CHECKSUM, c);
    }
    /// Set the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }
    /// Set the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }
    /// Compute and write the header checksum of the 20-byte header.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        //= RFC 791 §3.1
        //# For purposes of computing the checksum, the value of the checksum
        //# field is zero.
        let c = checksum::checksum(self.as_bytes());
        self.set_checksum(c);
    }
    /// Set the identification and update the header checksum incrementally
    /// ([`patch_ipv4_ident`]).
    #[inline]
    pub fn patch_ident(&mut self, ident: u16) {
        patch_ipv4_ident(self.buffer.as_mut(), ident);
    }
}

/// Set the identification of the IPv4 header `ip` (20 bytes) to `ident`,
/// updating its header checksum incrementally (RFC 1624 eqn. 3:
/// `HC' = ~(~HC + ~m + m')`, one's-complement sums) instead of summing the
/// header again. Nothing if `ip` is shorter than 12 bytes.
pub fn patch_ipv4_ident(ip: &mut [u8], ident: u16) {
    // The identification and the checksum lie in the first 12 bytes.
    if let Some(h) = ip.first_chunk_mut::<{ field::CHECKSUM.end }>() {
        let old = view::get_u16(h, field::IDENT);
        if old != ident {
            let c = checksum::update(view::get_u16(h, field::CHECKSUM), old, ident);
            view::set_u16(h, field::IDENT, ident);
            view::set_u16(h, field::CHECKSUM, c);
        }
    }
}

/// The RoCEv2 receive checks of the IPv4 header at the start of `l3` (the
/// bytes after the Ethernet header), in order. Returns the header length
/// and the total length.
///
/// Errors: [`Error::Ipv4Truncated`], [`Error::Ipv4BadVersion`],
/// [`Error::Ipv4BadIhl`], [`Error::Ipv4Options`], [`Error::Ipv4BadTotalLen`],
/// [`Error::Ipv4BadChecksum`], [`Error::Ipv4Fragment`], [`Error::NotRoce`]
/// (not UDP).
#[inline(always)]
pub(crate) fn check(l3: &[u8]) -> Result<(usize, usize), Error> {
    let Some(h) = l3.first_chunk::<HEADER_LEN>() else {
        return Err(Error::Ipv4Truncated);
    };
    let ip = Packet::new_unchecked(h);
    //= RFC 791 §3.1
    //# The Version field indicates the format of the internet header. This
    //# document describes version 4.
    if ip.version() != 4 {
        return Err(Error::Ipv4BadVersion);
    }
    //= RFC 791 §3.1
    //# Note that the minimum value for a correct header is 5.
    let ihl = ip.header_len();
    if ihl < HEADER_LEN {
        return Err(Error::Ipv4BadIhl);
    }
    if ihl > HEADER_LEN {
        // Options are refused by rule (see Error::Ipv4Options); an IHL past
        // the captured bytes is malformed (CASES R01 a, b).
        return Err(if ihl > l3.len() {
            Error::Ipv4BadIhl
        } else {
            Error::Ipv4Options
        });
    }
    //= RFC 791 §3.1
    //# Total Length is the length of the datagram, measured in octets,
    //# including internet header and data.
    let total = usize::from(ip.total_len());
    if total < ihl + super::udp::HEADER_LEN {
        return Err(Error::Ipv4BadTotalLen);
    }
    if !ip.verify_checksum() {
        return Err(Error::Ipv4BadChecksum);
    }
    //= RFC 791 §3.1
    //# Bit 2: (MF) 0 = Last Fragment, 1 = More Fragments.
    //# [...] The first fragment has offset zero.
    // RoCEv2 packets are never fragmented (CASES R01 e): only a datagram
    // that is both the first and the last fragment is taken.
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Err(Error::Ipv4Fragment);
    }
    if ip.protocol() != PROTOCOL_UDP {
        return Err(Error::NotRoce);
    }
    Ok((ihl, total))
}

/// IPv4 header fields of a received packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Info {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP (TOS >> 2).
    pub dscp: u8,
    /// ECN (TOS & 3): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub ecn: u8,
    /// TTL.
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// DF flag.
    pub dont_frag: bool,
    /// Total length, bytes.
    pub total_len: u16,
    /// Header checksum as received.
    pub checksum: u16,
}

impl Ipv4Info {
    /// The fields of `ip`.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(ip: &Packet<T>) -> Ipv4Info {
        Ipv4Info {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            ttl: ip.ttl(),
            ident: ip.ident(),
            dont_frag: ip.dont_frag(),
            total_len: ip.total_len(),
            checksum: ip.checksum(),
        }
    }
}

/// IPv4 header to write (IHL 5, protocol UDP; lengths and checksum computed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP, 0..=63.
    pub dscp: u8,
    /// ECN, 0..=3.
    pub ecn: u8,
    /// TTL.
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// DF flag (rxe sets it).
    pub dont_frag: bool,
}

impl From<Ipv4Info> for Ipv4Repr {
    fn from(i: Ipv4Info) -> Ipv4Repr {
        Ipv4Repr {
            src: i.src,
            dst: i.dst,
            dscp: i.dscp,
            ecn: i.ecn,
            ttl: i.ttl,
            ident: i.ident,
            dont_frag: i.dont_frag,
        }
    }
}

impl Ipv4Repr {
    /// The repr that rebuilds `ip` (for a header that passed the receive
    /// checks).
    pub fn parse<T: AsRef<[u8]>>(ip: &Packet<T>) -> Ipv4Repr {
        Ipv4Info::parse(ip).into()
    }

    /// Write the 20-byte header of a datagram carrying `payload_len` bytes
    /// of UDP, checksum included.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, ip: &mut Packet<T>, payload_len: u16) {
        ip.set_version(4);
        ip.set_header_len(HEADER_LEN);
        ip.set_tos((self.dscp & 0x3F) << 2 | (self.ecn & 3));
        ip.set_total_len(payload_len.wrapping_add(HEADER_LEN as u16));
        ip.set_ident(self.ident);
        ip.set_unfragmented(self.dont_frag);
        ip.set_ttl(self.ttl);
        ip.set_protocol(PROTOCOL_UDP);
        ip.set_src_addr(self.src);
        ip.set_dst_addr(self.dst);
        ip.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(192, 168, 1, 1),
            dst: Ipv4Addr::new(192, 168, 1, 2),
            dscp: 26,
            ecn: 2,
            ttl: 64,
            ident: 0x1234,
            dont_frag: true,
        }
    }

    /// The header of vector v1_rc_send_only_ipv4 in
    /// ../shared/reference/vectors.txt (total length 60, checksum 0xa4bf),
    /// and smoltcp's reading of it.
    #[test]
    fn emit_gives_vector_v1_header() {
        let mut b = [0xAAu8; 20];
        repr().emit(&mut Packet::new_unchecked(&mut b[..]), 40);
        assert_eq!(
            b,
            [
                0x45, 0x6a, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0xa4, 0xbf, 0xc0, 0xa8,
                0x01, 0x01, 0xc0, 0xa8, 0x01, 0x02,
            ]
        );
        let s = smoltcp::wire::Ipv4Packet::new_unchecked(&b[..]);
        assert!(s.verify_checksum());
        assert_eq!(
            (s.dscp(), s.ecn(), s.total_len(), s.ident()),
            (26, 2, 60, 0x1234)
        );
        assert!(s.dont_frag() && !s.more_frags());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), repr());
        assert_eq!(check(&b), Ok((20, 60)));
    }

    #[test]
    fn patch_ident_keeps_the_checksum_valid() {
        let mut b = [0u8; 20];
        repr().emit(&mut Packet::new_unchecked(&mut b[..]), 40);
        for ident in [0, 1, 0x1234, 0xFFFF, 0x8000] {
            let mut x = b;
            patch_ipv4_ident(&mut x, ident);
            let mut y = b;
            Packet::new_unchecked(&mut y[..]).patch_ident(ident);
            assert_eq!(x, y);
            let s = smoltcp::wire::Ipv4Packet::new_unchecked(&x[..]);
            assert!(s.verify_checksum() && s.ident() == ident, "{ident:#x}");
        }
        patch_ipv4_ident(&mut b[..11], 7);
    }

    #[test]
    fn checks_in_order() {
        let mut b = [0u8; 28];
        repr().emit(&mut Packet::new_unchecked(&mut b[..20]), 8);
        assert_eq!(check(&b[..19]), Err(Error::Ipv4Truncated));
        let cases: [(usize, u8, Error); 5] = [
            (0, 0x65, Error::Ipv4BadVersion),
            (0, 0x44, Error::Ipv4BadIhl),
            (0, 0x46, Error::Ipv4Options),
            (0, 0x48, Error::Ipv4BadIhl),
            (3, 27, Error::Ipv4BadTotalLen),
        ];
        for (at, v, e) in cases {
            let mut x = b;
            x[at] = v;
            assert_eq!(check(&x[..24]), Err(e), "byte {at} = {v:#x}");
        }
        let mut x = b;
        x[11] ^= 1;
        assert_eq!(check(&x), Err(Error::Ipv4BadChecksum));
        for (flags, e) in [
            (0x2000, Err(Error::Ipv4Fragment)),
            (0x0001, Err(Error::Ipv4Fragment)),
            (0x8000, Ok((20, 28))),
        ] {
            let mut x = b;
            let mut p = Packet::new_unchecked(&mut x[..20]);
            p.set_flags_frag(flags);
            p.fill_checksum();
            assert_eq!(check(&x), e, "flags {flags:#x}");
        }
        let mut x = b;
        let mut p = Packet::new_unchecked(&mut x[..20]);
        p.set_protocol(6);
        p.fill_checksum();
        assert_eq!(check(&x), Err(Error::NotRoce));
    }
}
