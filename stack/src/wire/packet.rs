//! Whole-frame parsing: Ethernet (+ one 802.1Q tag) / IPv4 | IPv6 / UDP 4791 /
//! BTH / extension headers / payload / pad / ICRC, and RoCEv1 (GRH instead of
//! IP/UDP).
//!
//! Lengths come from the IP, UDP and GRH length fields, never from the frame
//! length: trailing bytes (Ethernet padding, an FCS) are ignored (CASES R04), and
//! a frame whose length fields run past the captured bytes is
//! [`Error::Truncated`] (strict) or parsed as far as it goes with
//! [`IcrcStatus::Truncated`] (lenient, for tools).
//!
//! Rules, in order (each failure is a distinct [`Error`] and drop counter):
//! IPv4 version 4, IHL >= 5 and within the bytes, no options (see
//! [`Error::Ipv4Options`]), total length >= 28, header checksum valid, not a
//! fragment, protocol UDP; IPv6 version 6, next header UDP (extension headers
//! are not followed); UDP destination port 4791 (any source port, 0 included:
//! CASES R25 b), UDP length >= 8 and within the IP payload; BTH TVer 0; the
//! opcode's extension headers and the ICRC present; PadCnt within the payload.
//! Each header's checks live in its module ([`ipv4`], [`ipv6`], [`udp`],
//! [`grh`], [`bth`]), with their spec citations; this module composes them.
//! The UDP checksum is never checked: the ICRC protects the packet, and virtual
//! devices deliver partial checksums (CASES R37 a, b).

use core::net::IpAddr;

use super::bth::{self, BthRepr};
use super::ethernet::{self, EthernetFrame};
use super::ext::ExtView;
use super::grh::{self, GrhRepr};
use super::opcode::Opcode;
use super::{ipv4, ipv6, udp};
use super::{Error, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1, ICRC_LEN, ROCEV2_UDP_PORT};
use crate::icrc::{self, IcrcForm};

#[doc(no_inline)]
pub use super::ethernet::{L2Info, VlanTag};
#[doc(no_inline)]
pub use super::ipv4::Ipv4Info;
#[doc(no_inline)]
pub use super::ipv6::Ipv6Info;
#[doc(no_inline)]
pub use super::udp::UdpInfo;

/// The network header of a RoCE packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetInfo {
    /// RoCEv2 over IPv4.
    Ipv4(Ipv4Info),
    /// RoCEv2 over IPv6.
    Ipv6(Ipv6Info),
    /// RoCEv1: a GRH.
    Grh(GrhRepr),
}

impl NetInfo {
    /// Source address (the SGID for RoCEv1).
    pub fn src(&self) -> IpAddr {
        match self {
            NetInfo::Ipv4(i) => i.src.into(),
            NetInfo::Ipv6(i) => i.src.into(),
            NetInfo::Grh(g) => g.sgid.into(),
        }
    }
    /// Destination address (the DGID for RoCEv1).
    pub fn dst(&self) -> IpAddr {
        match self {
            NetInfo::Ipv4(i) => i.dst.into(),
            NetInfo::Ipv6(i) => i.dst.into(),
            NetInfo::Grh(g) => g.dgid.into(),
        }
    }
    /// DSCP.
    pub fn dscp(&self) -> u8 {
        match self {
            NetInfo::Ipv4(i) => i.dscp,
            NetInfo::Ipv6(i) => i.dscp,
            NetInfo::Grh(g) => g.traffic_class >> 2,
        }
    }
    /// ECN codepoint.
    pub fn ecn(&self) -> u8 {
        match self {
            NetInfo::Ipv4(i) => i.ecn,
            NetInfo::Ipv6(i) => i.ecn,
            NetInfo::Grh(g) => g.traffic_class & 3,
        }
    }
    /// TTL or hop limit.
    pub fn ttl(&self) -> u8 {
        match self {
            NetInfo::Ipv4(i) => i.ttl,
            NetInfo::Ipv6(i) => i.hop_limit,
            NetInfo::Grh(g) => g.hop_limit,
        }
    }
    /// The ICRC form of this header.
    pub fn icrc_form(&self) -> IcrcForm {
        match self {
            NetInfo::Ipv4(_) => IcrcForm::Ipv4,
            NetInfo::Ipv6(_) => IcrcForm::Ipv6,
            NetInfo::Grh(_) => IcrcForm::Grh,
        }
    }
}

/// Result of checking a packet's ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcStatus {
    /// The ICRC matches.
    Ok,
    /// The ICRC does not match.
    Bad {
        /// The value computed over the packet.
        expected: u32,
        /// The value found on the wire (read least-significant byte first).
        found: u32,
    },
    /// The frame ends before the ICRC.
    Truncated,
}

impl IcrcStatus {
    /// `ok`, `bad` or `truncated`.
    pub fn as_str(&self) -> &'static str {
        match self {
            IcrcStatus::Ok => "ok",
            IcrcStatus::Bad { .. } => "bad",
            IcrcStatus::Truncated => "truncated",
        }
    }
}

/// How forgiving the parser is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParseMode {
    /// The receive path: truncated frames, unsupported opcodes and ICRC mismatches
    /// are errors.
    Strict,
    /// Tools (`roce decode`): a frame cut short after its transport headers
    /// parses with [`IcrcStatus::Truncated`]; unsupported opcodes parse with no
    /// extension headers; the ICRC is not checked until asked.
    Lenient,
}

/// A parsed RoCE (v2 or v1) packet: a validated view of the frame.
///
/// Parsing checks every length, the IPv4 header checksum and the BTH,
/// records offsets and keeps a copy of the 12 BTH bytes (so BTH accessors
/// never go back to the frame); the accessors decode their fields on
/// demand (zero-copy, nothing allocated), so the receive path pays only for
/// the fields it reads.
#[derive(Clone, Copy)]
pub struct RocePacket<'a> {
    frame: &'a [u8],
    /// The BTH, copied out of the frame and checked once, when the frame
    /// was parsed; the accessors read this copy.
    bth: bth::Packet<[u8; bth::HEADER_LEN]>,
    // Offsets are below 2^17 (16-bit length fields after an 18-byte
    // Ethernet header): `u32` keeps the view small.
    /// Offset of the IP header or GRH.
    l3: u32,
    /// Offset of the BTH.
    bth_off: u32,
    /// Offset and length of the payload (without pad bytes).
    payload: u32,
    payload_len: u32,
    /// Offset of the ICRC (the end of the covered region), or of the end of
    /// the captured bytes when the frame is truncated.
    region_end: u32,
    form: IcrcForm,
    /// Whether the ICRC is in the frame.
    has_icrc: bool,
}

/// Two packets are equal when every decoded field is (the frames may differ in
/// bytes the packet does not cover, such as Ethernet padding).
impl PartialEq for RocePacket<'_> {
    fn eq(&self, o: &Self) -> bool {
        self.l2() == o.l2()
            && self.net() == o.net()
            && self.udp() == o.udp()
            && self.bth() == o.bth()
            && self.ext().to_headers() == o.ext().to_headers()
            && self.payload() == o.payload()
            && self.icrc() == o.icrc()
    }
}

impl Eq for RocePacket<'_> {}

impl core::fmt::Debug for RocePacket<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RocePacket")
            .field("l2", &self.l2())
            .field("net", &self.net())
            .field("udp", &self.udp())
            .field("bth", &self.bth())
            .field("ext", &self.ext())
            .field("payload_len", &self.payload_len)
            .field("pad", &self.pad())
            .field("icrc", &self.icrc())
            .finish()
    }
}

/// An Ethernet header of zeros, for the impossible case of a view over fewer
/// than 14 bytes.
const L2_NONE: L2Info = L2Info {
    dst: [0; 6],
    src: [0; 6],
    vlan: None,
    ethertype: 0,
};

/// An offset of the view as an index.
#[inline(always)]
fn u(x: u32) -> usize {
    x as usize
}

impl<'a> RocePacket<'a> {
    /// Parse and verify a frame for the receive path ([`ParseMode::Strict`]):
    /// the ICRC is checked, and a mismatch is [`Error::IcrcMismatch`].
    pub fn parse(frame: &'a [u8]) -> Result<RocePacket<'a>, Error> {
        // Two copies of the check: in the first the ICRC form is a constant.
        match Self::parse_fast(frame) {
            Some(p) => p.verified(),
            None => Self::parse_impl(frame, false)?.verified(),
        }
    }

    /// `self` if its ICRC is present and matches, else [`Error::Truncated`] or
    /// [`Error::IcrcMismatch`].
    #[inline(always)]
    fn verified(self) -> Result<RocePacket<'a>, Error> {
        let Some(wire) = self.icrc() else {
            return Err(Error::Truncated);
        };
        //= RoCEv2 Annex A17.4, as ROCEV2-DIGEST §4 states it
        //# Standard CRC-32 [...] over a pseudo packet; the ICRC field itself
        //# and the FCS are excluded.
        // A mismatch is a silent, counted drop (CASES R06).
        if icrc::compute(self.form, self.icrc_region())? == u32::from_le_bytes(wire) {
            Ok(self)
        } else {
            Err(Error::IcrcMismatch)
        }
    }

    /// Parse a frame without checking the ICRC (see [`RocePacket::icrc_status`]).
    pub fn parse_with(frame: &'a [u8], mode: ParseMode) -> Result<RocePacket<'a>, Error> {
        if mode == ParseMode::Strict {
            if let Some(p) = Self::parse_fast(frame) {
                return Ok(p);
            }
        }
        Self::parse_impl(frame, mode == ParseMode::Lenient)
    }

    /// The strict checks of [`RocePacket::parse_impl`] for the common frame
    /// only: no VLAN tag, an option-less IPv4 header, and the whole IP
    /// datagram captured. Returns the same packet as `parse_impl(frame,
    /// false)` when it returns one; `None` for anything else, including every
    /// frame `parse_impl` rejects (it then runs, and names the error).
    ///
    /// The checks are the same (those of [`ipv4`], [`udp`] and
    /// [`BthRepr::parse`], a supported opcode, its extension headers, the
    /// ICRC and PadCnt within the UDP payload), but read from fixed-size
    /// views at fixed offsets, with no VLAN, IHL, truncation or mode cases
    /// and no choice of error: about a third fewer instructions than
    /// `parse_impl`.
    #[inline(always)]
    fn parse_fast(frame: &'a [u8]) -> Option<RocePacket<'a>> {
        const L3: usize = ethernet::HEADER_LEN;
        const IP: usize = ipv4::HEADER_LEN;
        const UDP: usize = udp::HEADER_LEN;
        let (eth, l3) = frame.split_first_chunk::<L3>()?;
        let (ip, rest) = l3.split_first_chunk::<IP>()?;
        let (udp_h, rest) = rest.split_first_chunk::<UDP>()?;
        let bth_h = rest.first_chunk::<{ bth::HEADER_LEN }>()?;
        let eth = EthernetFrame::new_unchecked(eth);
        let ip = ipv4::Packet::new_unchecked(ip);
        let udp_p = udp::Packet::new_unchecked(udp_h);
        let total = usize::from(ip.total_len());
        let udp_len = usize::from(udp_p.len());
        let odd = (eth.outer_ethertype() != ETHERTYPE_IPV4)
            | (ip.version() != 4)
            | (ip.header_len() != IP)
            | (ip.more_frags())
            | (ip.frag_offset() != 0)
            | (ip.protocol() != ipv4::PROTOCOL_UDP)
            | (udp_p.dst_port() != ROCEV2_UDP_PORT)
            // The UDP datagram holds at least a BTH and ends inside the IP
            // datagram, which ends inside the frame (so `total` >= 28).
            | (udp_len < UDP + bth::HEADER_LEN)
            | (IP + udp_len > total)
            | (total > l3.len());
        if odd || !ip.verify_checksum() {
            return None;
        }
        let bth = bth::Packet::new_unchecked(*bth_h);
        bth::check(&bth).ok()?;
        let info = bth.opcode().info();
        if !info.supported {
            return None;
        }
        let hdr_len = usize::from(info.hdr_len);
        // UDP payload after the BTH: extension headers, payload, pad, ICRC.
        let with_pad = (udp_len - UDP - bth::HEADER_LEN).checked_sub(hdr_len + ICRC_LEN)?;
        let payload_len = with_pad.checked_sub(usize::from(bth.pad_count()))?;
        let bth_off = L3 + IP + UDP;
        Some(RocePacket {
            frame,
            l3: L3 as u32,
            form: IcrcForm::Ipv4,
            bth_off: bth_off as u32,
            bth,
            payload: (bth_off + bth::HEADER_LEN + hdr_len) as u32,
            payload_len: payload_len as u32,
            region_end: (L3 + IP + udp_len - ICRC_LEN) as u32,
            has_icrc: true,
        })
    }

    /// The validation behind every parse: lengths, IPv4 checksum, BTH, opcode,
    /// extension headers, pad. Decodes the BTH and records offsets.
    #[inline(always)]
    fn parse_impl(frame: &'a [u8], lenient: bool) -> Result<RocePacket<'a>, Error> {
        let eth = EthernetFrame::new_checked(frame)?;
        let l3_off = eth.header_len();
        let l3 = frame.get(l3_off..).unwrap_or(&[]);
        // Each arm yields the ICRC form, the offset of the BTH within l3, the
        // end of the transport payload within l3 (from the UDP or GRH length
        // field) and the end of the IP datagram (from the IP length field; the
        // same as the former for RoCEv1).
        let (form, bth_off, declared_end, ip_end) = match eth.ethertype() {
            ETHERTYPE_IPV4 => {
                let (ihl, total) = ipv4::check(l3)?;
                let end = udp::check(l3, ihl, total)?;
                (IcrcForm::Ipv4, ihl + udp::HEADER_LEN, end, total)
            }
            ETHERTYPE_IPV6 => {
                let ip_end = ipv6::check(l3)?;
                let end = udp::check(l3, ipv6::HEADER_LEN, ip_end)?;
                let bth_off = ipv6::HEADER_LEN + udp::HEADER_LEN;
                (IcrcForm::Ipv6, bth_off, end, ip_end)
            }
            ETHERTYPE_ROCEV1 => {
                let end = grh::check(l3)?;
                (IcrcForm::Grh, grh::HEADER_LEN, end, end)
            }
            _ => return Err(Error::NotRoce),
        };
        let truncated = declared_end > l3.len();
        // Strict: an IP length running past the captured bytes is a drop even
        // when the UDP datagram it claims to hold fits (CASES R01 d).
        if (truncated || ip_end > l3.len()) && !lenient {
            return Err(Error::Truncated);
        }
        let end = declared_end.min(l3.len());
        let tp = l3.get(bth_off..end).unwrap_or(&[]);
        let Some(bth_h) = tp.first_chunk::<{ bth::HEADER_LEN }>() else {
            return Err(if truncated {
                Error::Truncated
            } else {
                Error::BthTruncated
            });
        };
        let bth = bth::Packet::new_unchecked(*bth_h);
        bth::check(&bth)?;
        let info = bth.opcode().info();
        if !info.supported && !lenient {
            return Err(Error::UnsupportedOpcode(bth.opcode().0));
        }
        let hdr_len = usize::from(info.hdr_len);
        //= IBTA 1.7 §9.3 and Annex A17, as ROCEV2-DIGEST §1 states it
        //# Eth(14) [+802.1Q(4)] | IPv4(20)/IPv6(40) | UDP(8) | BTH(12) | ext
        //# hdrs | payload | pad(0-3) | ICRC(4) | FCS(4)
        let after_bth = tp.len() - bth::HEADER_LEN;
        let icrc_len = if truncated { 0 } else { ICRC_LEN };
        if after_bth < hdr_len + icrc_len {
            return Err(if truncated {
                Error::Truncated
            } else if after_bth < icrc_len {
                Error::BthTruncated
            } else {
                Error::ExtTruncated
            });
        }
        let body = after_bth - hdr_len;
        let payload = l3_off + bth_off + bth::HEADER_LEN + hdr_len;
        let (payload_len, region_end) = if truncated {
            (body, l3_off + end)
        } else {
            //= IBTA 1.7 §9.2, as ROCEV2-DIGEST §3 states it
            //# receiver payload = UDP payload − headers − pad − 4
            let with_pad = body - ICRC_LEN;
            let len = with_pad
                .checked_sub(usize::from(bth.pad_count()))
                .ok_or(Error::PadTooLarge)?;
            (len, l3_off + end - ICRC_LEN)
        };
        Ok(RocePacket {
            frame,
            l3: l3_off as u32,
            form,
            bth_off: (l3_off + bth_off) as u32,
            bth,
            payload: payload as u32,
            payload_len: payload_len as u32,
            region_end: region_end as u32,
            has_icrc: !truncated,
        })
    }

    /// Ethernet fields.
    pub fn l2(&self) -> L2Info {
        L2Info::parse(self.frame).unwrap_or(L2_NONE)
    }

    /// The bytes from the IP header or GRH on.
    fn l3_bytes(&self) -> &'a [u8] {
        self.frame.get(u(self.l3)..).unwrap_or(&[])
    }

    /// IPv4, IPv6 or GRH fields.
    pub fn net(&self) -> NetInfo {
        let l3 = self.l3_bytes();
        let v6 = || {
            let h = l3.first_chunk::<{ ipv6::HEADER_LEN }>();
            let h = h.unwrap_or(&[0; ipv6::HEADER_LEN]);
            NetInfo::Ipv6(Ipv6Info::parse(&ipv6::Packet::new_unchecked(h)))
        };
        match self.form {
            IcrcForm::Ipv4 => {
                let h = l3.first_chunk::<{ ipv4::HEADER_LEN }>();
                let h = h.unwrap_or(&[0; ipv4::HEADER_LEN]);
                NetInfo::Ipv4(Ipv4Info::parse(&ipv4::Packet::new_unchecked(h)))
            }
            IcrcForm::Ipv6 => v6(),
            IcrcForm::Grh => grh::Packet::new_checked(l3)
                .and_then(|g| GrhRepr::parse(&g))
                .map(NetInfo::Grh)
                .unwrap_or_else(|_| {
                    NetInfo::Ipv6(Ipv6Info::parse(&ipv6::Packet::new_unchecked(
                        &[0; ipv6::HEADER_LEN],
                    )))
                }),
        }
    }

    /// UDP fields (RoCEv2 only).
    pub fn udp(&self) -> Option<UdpInfo> {
        let off = match self.form {
            IcrcForm::Ipv4 => u(self.l3) + ipv4::HEADER_LEN,
            IcrcForm::Ipv6 => u(self.l3) + ipv6::HEADER_LEN,
            IcrcForm::Grh => return None,
        };
        let h = self
            .frame
            .get(off..)?
            .first_chunk::<{ udp::HEADER_LEN }>()?;
        Some(UdpInfo::parse(&udp::Packet::new_unchecked(h)))
    }

    /// The BTH (a copy of its 12 bytes, taken when the frame was parsed).
    #[inline]
    pub fn bth_view(&self) -> bth::Packet<[u8; bth::HEADER_LEN]> {
        self.bth
    }

    /// Offset of the BTH in the frame, bytes.
    pub fn bth_offset(&self) -> usize {
        u(self.bth_off)
    }

    /// BTH fields.
    #[inline]
    pub fn bth(&self) -> BthRepr {
        BthRepr::decode(&self.bth)
    }

    /// The opcode.
    #[inline]
    pub fn opcode(&self) -> Opcode {
        self.bth.opcode()
    }

    /// Extension headers, as the opcode table says (decoded on access).
    pub fn ext(&self) -> ExtView<'a> {
        let info = self.opcode().info();
        let b = self
            .frame
            .get(u(self.bth_off) + bth::HEADER_LEN..u(self.payload))
            .unwrap_or(&[]);
        ExtView::new(info.hdrs, b).unwrap_or_default()
    }

    /// Payload, without pad bytes. In a truncated frame: what was captured.
    pub fn payload(&self) -> &'a [u8] {
        self.frame
            .get(u(self.payload)..u(self.payload) + u(self.payload_len))
            .unwrap_or(&[])
    }

    /// Pad bytes (BTH PadCnt).
    #[inline]
    pub fn pad(&self) -> u8 {
        self.bth.pad_count()
    }
    /// The 4 ICRC bytes as on the wire, if captured.
    pub fn icrc(&self) -> Option<[u8; 4]> {
        if !self.has_icrc {
            return None;
        }
        self.frame
            .get(u(self.region_end)..)
            .and_then(|b| b.first_chunk::<4>())
            .copied()
    }

    /// The ICRC form (IPv4, IPv6 or GRH).
    pub fn icrc_form(&self) -> IcrcForm {
        self.form
    }

    /// Check the ICRC.
    pub fn icrc_status(&self) -> IcrcStatus {
        let Some(wire) = self.icrc() else {
            return IcrcStatus::Truncated;
        };
        match icrc::compute(self.form, self.icrc_region()) {
            Ok(expected) => {
                let found = u32::from_le_bytes(wire);
                if expected == found {
                    IcrcStatus::Ok
                } else {
                    IcrcStatus::Bad { expected, found }
                }
            }
            Err(_) => IcrcStatus::Truncated,
        }
    }

    /// The ICRC value the packet should carry (computed), if the frame holds
    /// the whole packet.
    pub fn computed_icrc(&self) -> Option<u32> {
        self.icrc()?;
        icrc::compute(self.form, self.icrc_region()).ok()
    }

    /// The bytes the ICRC covers: IP header (or GRH) through the pad bytes.
    pub fn icrc_region(&self) -> &'a [u8] {
        self.frame
            .get(u(self.l3)..u(self.region_end))
            .unwrap_or(&[])
    }

    /// The payload length in bytes as declared by the length fields (equal to
    /// `payload().len()` unless the frame is truncated).
    pub fn declared_payload_len(&self) -> usize {
        let hdr = self.form.net_len() + bth::HEADER_LEN + usize::from(self.opcode().info().hdr_len);
        let total = match self.form {
            IcrcForm::Ipv4 => self.udp().map_or(0, |u| usize::from(u.len)) + ipv4::HEADER_LEN,
            IcrcForm::Ipv6 => self.udp().map_or(0, |u| usize::from(u.len)) + ipv6::HEADER_LEN,
            IcrcForm::Grh => {
                let g = grh::Packet::new_checked(self.l3_bytes());
                g.map_or(0, |g| usize::from(g.payload_len())) + grh::HEADER_LEN
            }
        };
        total.saturating_sub(hdr + ICRC_LEN + self.pad() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every field of the view (the derived `PartialEq` compares decoded
    /// fields only).
    #[allow(clippy::type_complexity)]
    fn raw(
        p: &RocePacket<'_>,
    ) -> (
        usize,
        IcrcForm,
        usize,
        BthRepr,
        usize,
        usize,
        usize,
        bool,
        usize,
    ) {
        (
            p.l3 as usize,
            p.form,
            p.bth_off as usize,
            p.bth(),
            p.payload as usize,
            p.payload_len as usize,
            p.region_end as usize,
            p.has_icrc,
            p.frame.len(),
        )
    }

    /// A valid RoCEv2/IPv4 frame from the builder: RC SEND_ONLY or (with
    /// `write`) RC RDMA WRITE_MIDDLE, `len` payload bytes, PadCnt from the
    /// builder.
    fn frame(write: bool, len: usize) -> Result<Vec<u8>, Error> {
        use crate::wire::{EthRepr, ExtHeaders, Ipv4Repr, NetRepr, PacketRepr, UdpRepr};
        use core::net::Ipv4Addr;
        let opcode = if write {
            Opcode::RC_RDMA_WRITE_MIDDLE
        } else {
            Opcode::RC_SEND_ONLY
        };
        let repr = PacketRepr {
            eth: EthRepr {
                dst: [0x02, 0, 0, 0, 0, 0x02],
                src: [0x02, 0, 0, 0, 0, 0x01],
                vlan: None,
            },
            net: NetRepr::Ipv4(Ipv4Repr {
                src: Ipv4Addr::new(192, 168, 1, 1),
                dst: Ipv4Addr::new(192, 168, 1, 2),
                dscp: 26,
                ecn: 2,
                ttl: 64,
                ident: 0x1234,
                dont_frag: true,
            }),
            udp: UdpRepr::default(),
            bth: BthRepr::new(opcode, 0x12, 0x1_0000),
            ext: ExtHeaders::default(),
        };
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut f = vec![0u8; repr.frame_len(len)];
        let n = repr.emit(&mut f, &payload)?;
        f.truncate(n);
        Ok(f)
    }

    #[test]
    fn fast_path_takes_the_builders_frames() -> Result<(), Error> {
        for write in [false, true] {
            for len in [0, 1, 3, 64, 4096] {
                let f = frame(write, len)?;
                let full = RocePacket::parse_impl(&f, false)?;
                let fast = RocePacket::parse_fast(&f).map(|p| raw(&p));
                assert_eq!(fast, Some(raw(&full)), "write {write} len {len}");
                assert_eq!(full.payload().len(), len);
                assert_eq!(RocePacket::parse(&f).map(|p| raw(&p)), Ok(raw(&full)));
            }
        }
        Ok(())
    }

    proptest! {
        /// The strict fast path returns exactly what the full checks return,
        /// or nothing: over builder frames with up to four bytes changed (the
        /// IPv4 header checksum re-filled or not), cut short or extended.
        #[test]
        fn fast_path_agrees_with_full_parse(
            write in any::<bool>(),
            len in 0usize..300,
            edits in proptest::collection::vec((0usize..80, any::<u8>()), 0..4),
            fix_checksum in any::<bool>(),
            resize in -60isize..8,
        ) {
            let mut f = frame(write, len).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            for (i, v) in edits {
                if let Some(b) = f.get_mut(i) {
                    *b = v;
                }
            }
            if fix_checksum && f.len() >= 34 {
                // RFC 1071 over the 20 bytes whatever the IHL says.
                f[24] = 0;
                f[25] = 0;
                let mut sum: u32 = f[14..34]
                    .chunks_exact(2)
                    .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                    .sum();
                while sum > 0xFFFF {
                    sum = (sum >> 16) + (sum & 0xFFFF);
                }
                f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            }
            let new_len = (f.len() as isize + resize).max(0) as usize;
            f.resize(new_len, 0xA5);
            let full = RocePacket::parse_impl(&f, false);
            match RocePacket::parse_fast(&f) {
                Some(fast) => prop_assert_eq!(Ok(raw(&fast)), full.map(|p| raw(&p))),
                // Not taken: then the full checks reject the frame, or it is
                // not untagged IPv4 (every valid untagged IPv4 frame is taken).
                None => prop_assert!(full.is_err() || f[12..14] != [0x08, 0x00]),
            }
            // Strict parse_with and parse agree with the full checks either way.
            prop_assert_eq!(
                RocePacket::parse_with(&f, ParseMode::Strict).map(|p| raw(&p)),
                full.map(|p| raw(&p))
            );
        }
    }
}
