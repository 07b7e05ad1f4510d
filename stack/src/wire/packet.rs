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
//! The UDP checksum is never checked: the ICRC protects the packet, and virtual
//! devices deliver partial checksums (CASES R37 a, b).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use smoltcp::wire::{IpProtocol, Ipv6Packet};

use super::bth::{self, Bth, BthRepr};
use super::ext::ExtHeaders;
use super::grh::{self, GrhRepr};
use super::opcode::HdrMask;
use super::{arp, pfc, Error, ICRC_LEN, ROCEV2_UDP_PORT};
use super::{
    ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MAC_CONTROL, ETHERTYPE_ROCEV1,
    ETHERTYPE_VLAN,
};
use crate::icrc::{self, IcrcForm};

/// An IEEE 802.1Q tag (PCP = the PFC priority when the port trusts PCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    /// Decode a TCI.
    pub fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0FFF,
        }
    }
    /// Encode as a TCI.
    pub fn tci(&self) -> u16 {
        (self.pcp as u16 & 7) << 13 | (self.dei as u16) << 12 | (self.vid & 0x0FFF)
    }
}

/// Ethernet fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct L2Info {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// EtherType after the tag.
    pub ethertype: u16,
}

impl L2Info {
    /// Length of the Ethernet header including the tag, bytes.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            18
        } else {
            14
        }
    }

    /// Parse the Ethernet header (and one 802.1Q tag) of `frame`.
    ///
    /// Errors: [`Error::EthTruncated`], [`Error::VlanTruncated`].
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<L2Info, Error> {
        // Fixed-size views, destructured: no bounds checks and no smoltcp
        // accessor calls on the receive hot path.
        let Some(eth) = frame.first_chunk::<14>() else {
            return Err(Error::EthTruncated);
        };
        let [d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5, t0, t1] = *eth;
        let mut ethertype = u16::from_be_bytes([t0, t1]);
        let mut vlan = None;
        if ethertype == ETHERTYPE_VLAN {
            let Some(&[_, _, _, _, _, _, _, _, _, _, _, _, _, _, c0, c1, e0, e1]) =
                frame.first_chunk::<18>()
            else {
                return Err(Error::VlanTruncated);
            };
            vlan = Some(VlanTag::from_tci(u16::from_be_bytes([c0, c1])));
            ethertype = u16::from_be_bytes([e0, e1]);
        }
        Ok(L2Info {
            dst: [d0, d1, d2, d3, d4, d5],
            src: [s0, s1, s2, s3, s4, s5],
            vlan,
            ethertype,
        })
    }
}

/// IPv4 header fields.
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

/// IPv6 header fields.
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

/// UDP header fields.
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

/// A parsed RoCE (v2 or v1) packet, borrowing the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// Ethernet fields.
    pub l2: L2Info,
    /// IPv4, IPv6 or GRH fields.
    pub net: NetInfo,
    /// UDP fields (RoCEv2 only).
    pub udp: Option<UdpInfo>,
    /// BTH fields.
    pub bth: BthRepr,
    /// Extension headers, as the opcode table says.
    pub ext: ExtHeaders,
    /// Payload, without pad bytes. In a truncated frame: what was captured.
    pub payload: &'a [u8],
    /// Pad bytes (BTH PadCnt).
    pub pad: u8,
    /// The 4 ICRC bytes as on the wire, if captured.
    pub icrc: Option<[u8; 4]>,
    /// IP header (or GRH) start .. ICRC start: what the ICRC covers.
    region: &'a [u8],
}

impl<'a> RocePacket<'a> {
    /// Parse and verify a frame for the receive path ([`ParseMode::Strict`]):
    /// the ICRC is checked, and a mismatch is [`Error::IcrcMismatch`].
    pub fn parse(frame: &'a [u8]) -> Result<RocePacket<'a>, Error> {
        Self::parse_impl(frame, ParseMode::Strict, true)
    }

    /// Parse a frame without checking the ICRC (see [`RocePacket::icrc_status`]).
    pub fn parse_with(frame: &'a [u8], mode: ParseMode) -> Result<RocePacket<'a>, Error> {
        Self::parse_impl(frame, mode, false)
    }

    /// The parser behind [`RocePacket::parse`] (`verify`: check the ICRC, map a
    /// mismatch to [`Error::IcrcMismatch`]) and [`RocePacket::parse_with`].
    ///
    /// Checking the ICRC before the packet is assembled, rather than on a parsed
    /// copy, lets the 312-byte result be built once in the caller's slot.
    #[inline(always)]
    fn parse_impl(frame: &'a [u8], mode: ParseMode, verify: bool) -> Result<RocePacket<'a>, Error> {
        let l2 = L2Info::parse(frame)?;
        let l3 = frame.get(l2.header_len()..).unwrap_or(&[]);
        let lenient = mode == ParseMode::Lenient;
        // Each arm yields the network info, the UDP info, the offset of the BTH
        // within l3, the end of the transport payload within l3 (from the UDP or
        // GRH length field) and the end of the IP datagram (from the IP length
        // field; the same as the former for RoCEv1).
        let (net, udp, bth_off, declared_end, ip_end) = match l2.ethertype {
            ETHERTYPE_IPV4 => {
                let (ip, udp, bth_off, end, ip_end) = parse_ipv4(l3)?;
                (NetInfo::Ipv4(ip), Some(udp), bth_off, end, ip_end)
            }
            ETHERTYPE_IPV6 => parse_ipv6(l3)?,
            ETHERTYPE_ROCEV1 => {
                let g = GrhRepr::parse(l3)?;
                let end = grh::HEADER_LEN + g.payload_len as usize;
                (NetInfo::Grh(g), None, grh::HEADER_LEN, end, end)
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
        let bth_view = match Bth::ref_from(tp) {
            Ok(b) => b,
            Err(_) if truncated => return Err(Error::Truncated),
            Err(e) => return Err(e),
        };
        let bth = BthRepr::parse(bth_view);
        if bth.tver != 0 {
            return Err(Error::BadTver);
        }
        let info = bth.opcode.info();
        if !info.supported && !lenient {
            return Err(Error::UnsupportedOpcode(bth.opcode.0));
        }
        let after_bth = tp.get(bth::HEADER_LEN..).unwrap_or(&[]);
        let icrc_len = if truncated { 0 } else { ICRC_LEN };
        if after_bth.len() < info.hdr_len as usize + icrc_len {
            return Err(if truncated {
                Error::Truncated
            } else if after_bth.len() < icrc_len {
                Error::BthTruncated
            } else {
                Error::ExtTruncated
            });
        }
        // Most data packets (SEND/WRITE FIRST/MIDDLE/LAST) carry no extension
        // header: skip the table walk.
        let (ext, ext_len) = if info.hdrs == HdrMask::EMPTY {
            (ExtHeaders::default(), 0)
        } else {
            ExtHeaders::parse(info.hdrs, after_bth)?
        };
        let body = after_bth.get(ext_len..).unwrap_or(&[]);
        let pad = bth.pad_count;
        let (payload, icrc, region_end) = if truncated {
            (body, None, end)
        } else {
            let split = body.len() - ICRC_LEN;
            let (with_pad, icrc) = body.split_at(split);
            let icrc: [u8; 4] = icrc.try_into().map_err(|_| Error::BthTruncated)?;
            let data_len = with_pad
                .len()
                .checked_sub(pad as usize)
                .ok_or(Error::PadTooLarge)?;
            (
                with_pad.get(..data_len).unwrap_or(&[]),
                Some(icrc),
                end - ICRC_LEN,
            )
        };
        let region = l3.get(..region_end).unwrap_or(&[]);
        if verify {
            // As `icrc_status`: a region too short for the masked headers (not
            // reachable in strict mode) reads as truncated.
            match (icrc, icrc::compute(net.icrc_form(), region)) {
                (Some(wire), Ok(expected)) if expected == u32::from_le_bytes(wire) => {}
                (Some(_), Ok(_)) => return Err(Error::IcrcMismatch),
                _ => return Err(Error::Truncated),
            }
        }
        Ok(RocePacket {
            l2,
            net,
            udp,
            bth,
            ext,
            payload,
            pad,
            icrc,
            region,
        })
    }

    /// Check the ICRC.
    pub fn icrc_status(&self) -> IcrcStatus {
        let Some(wire) = self.icrc else {
            return IcrcStatus::Truncated;
        };
        match icrc::compute(self.net.icrc_form(), self.region) {
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
        self.icrc?;
        icrc::compute(self.net.icrc_form(), self.region).ok()
    }

    /// The bytes the ICRC covers: IP header (or GRH) through the pad bytes.
    pub fn icrc_region(&self) -> &'a [u8] {
        self.region
    }

    /// The payload length in bytes as declared by the length fields (equal to
    /// `payload.len()` unless the frame is truncated).
    pub fn declared_payload_len(&self) -> usize {
        let hdr = self.net.icrc_form().net_len()
            + bth::HEADER_LEN
            + self.bth.opcode.info().hdr_len as usize;
        let total = match self.net {
            NetInfo::Ipv4(_) | NetInfo::Ipv6(_) => {
                self.udp.map_or(0, |u| u.len as usize) + self.net_header_len()
            }
            NetInfo::Grh(g) => g.payload_len as usize + grh::HEADER_LEN,
        };
        total.saturating_sub(hdr + ICRC_LEN + self.pad as usize)
    }

    fn net_header_len(&self) -> usize {
        match self.net {
            NetInfo::Ipv4(_) => 20,
            NetInfo::Ipv6(_) | NetInfo::Grh(_) => 40,
        }
    }
}

/// Network info, UDP info, BTH offset, UDP datagram end, IP datagram end (the
/// offsets within the bytes after the Ethernet header).
type NetParse = (NetInfo, Option<UdpInfo>, usize, usize, usize);

/// IPv4 header (RFC 791), read from a fixed 20-byte view: the accessors and
/// the checksum are inlined into the receive hot path.
#[inline(always)]
fn parse_ipv4(l3: &[u8]) -> Result<(Ipv4Info, UdpInfo, usize, usize, usize), Error> {
    let Some(h) = l3.first_chunk::<20>() else {
        return Err(Error::Ipv4Truncated);
    };
    let [ver_ihl, tos, tl0, tl1, id0, id1, fl0, fl1, ttl, proto, ck0, ck1, s0, s1, s2, s3, d0, d1, d2, d3] =
        *h;
    if ver_ihl >> 4 != 4 {
        return Err(Error::Ipv4BadVersion);
    }
    let ihl = (ver_ihl & 0x0F) as usize * 4;
    if ihl < 20 {
        return Err(Error::Ipv4BadIhl);
    }
    if ihl > 20 {
        return Err(if ihl > l3.len() {
            Error::Ipv4BadIhl
        } else {
            Error::Ipv4Options
        });
    }
    let total_len = u16::from_be_bytes([tl0, tl1]);
    let total = total_len as usize;
    if total < ihl + 8 {
        return Err(Error::Ipv4BadTotalLen);
    }
    if !ipv4_checksum_ok(h) {
        return Err(Error::Ipv4BadChecksum);
    }
    // Flags (3 bits: reserved, DF, MF) and fragment offset (13 bits).
    let flags = u16::from_be_bytes([fl0, fl1]);
    if flags & 0x2000 != 0 || flags & 0x1FFF != 0 {
        return Err(Error::Ipv4Fragment);
    }
    if proto != u8::from(IpProtocol::Udp) {
        return Err(Error::NotRoce);
    }
    let info = Ipv4Info {
        src: Ipv4Addr::new(s0, s1, s2, s3),
        dst: Ipv4Addr::new(d0, d1, d2, d3),
        dscp: tos >> 2,
        ecn: tos & 3,
        ttl,
        ident: u16::from_be_bytes([id0, id1]),
        dont_frag: flags & 0x4000 != 0,
        total_len,
        checksum: u16::from_be_bytes([ck0, ck1]),
    };
    let (udp, end) = parse_udp(l3, ihl, total)?;
    Ok((info, udp, ihl + 8, end, total))
}

/// Whether the RFC 1071 one's-complement sum of an option-less IPv4 header,
/// checksum field included, is all ones (RFC 791 header checksum).
#[inline(always)]
fn ipv4_checksum_ok(h: &[u8; 20]) -> bool {
    let mut sum = 0u32;
    for w in h.chunks_exact(2) {
        if let [a, b] = *w {
            sum += u32::from(u16::from_be_bytes([a, b]));
        }
    }
    // Ten 16-bit words: at most two carry folds.
    sum = (sum >> 16) + (sum & 0xFFFF);
    sum = (sum >> 16) + (sum & 0xFFFF);
    sum == 0xFFFF
}

fn parse_ipv6(l3: &[u8]) -> Result<NetParse, Error> {
    if l3.len() < 40 {
        return Err(Error::Ipv6Truncated);
    }
    let ip = Ipv6Packet::new_unchecked(l3);
    if ip.version() != 6 {
        return Err(Error::Ipv6BadVersion);
    }
    if ip.next_header() != IpProtocol::Udp {
        return Err(Error::NotRoce);
    }
    let tc = ip.traffic_class();
    let info = Ipv6Info {
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        dscp: tc >> 2,
        ecn: tc & 3,
        flow_label: ip.flow_label(),
        hop_limit: ip.hop_limit(),
        payload_len: ip.payload_len(),
    };
    let ip_end = 40 + ip.payload_len() as usize;
    let (udp, end) = parse_udp(l3, 40, ip_end)?;
    Ok((NetInfo::Ipv6(info), Some(udp), 48, end, ip_end))
}

/// UDP header at `l3[off..]`, inside an IP datagram of `ip_end` bytes. Returns
/// the UDP info and the end of the UDP datagram within `l3` (may exceed
/// `l3.len()` when truncated).
#[inline(always)]
fn parse_udp(l3: &[u8], off: usize, ip_end: usize) -> Result<(UdpInfo, usize), Error> {
    let hdr = match l3.get(off..).and_then(|h| h.first_chunk::<8>()) {
        Some(h) => h,
        None if ip_end > l3.len() => return Err(Error::Truncated),
        None => return Err(Error::UdpTruncated),
    };
    let [sp0, sp1, dp0, dp1, l0, l1, c0, c1] = *hdr;
    let dst_port = u16::from_be_bytes([dp0, dp1]);
    if dst_port != ROCEV2_UDP_PORT {
        return Err(Error::NotRoce);
    }
    let udp_len = u16::from_be_bytes([l0, l1]);
    let len = udp_len as usize;
    if len < 8 || off + len > ip_end {
        return Err(Error::UdpBadLen);
    }
    Ok((
        UdpInfo {
            src_port: u16::from_be_bytes([sp0, sp1]),
            dst_port,
            len: udp_len,
            checksum: u16::from_be_bytes([c0, c1]),
        },
        off + len,
    ))
}

/// What a frame is, for tools that look at every frame (`roce decode`).
// `Roce` is much larger than the other variants; boxing it would allocate per
// frame and make `Frame` non-`Copy`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Frame<'a> {
    /// A RoCE packet (parsed leniently; check [`RocePacket::icrc_status`]).
    Roce(RocePacket<'a>),
    /// Looked like RoCE (RoCEv1 EtherType, or IP/UDP to port 4791) but is
    /// malformed.
    BadRoce(L2Info, Error),
    /// An 802.1Qbb PFC frame.
    Pfc(L2Info, pfc::PfcRepr),
    /// An 802.3x PAUSE frame.
    Pause(L2Info, pfc::PauseRepr),
    /// A MAC control frame that is neither (or is malformed).
    BadMacControl(L2Info, Error),
    /// ARP.
    Arp(L2Info, arp::ArpRepr),
    /// Anything else (including IP traffic that is not RoCE).
    Other(Option<L2Info>),
}

/// Classify and parse any Ethernet frame, leniently. Never panics.
pub fn classify(frame: &[u8]) -> Frame<'_> {
    let Ok(l2) = L2Info::parse(frame) else {
        return Frame::Other(None);
    };
    let l3 = frame.get(l2.header_len()..).unwrap_or(&[]);
    match l2.ethertype {
        ETHERTYPE_MAC_CONTROL => match pfc::MacControl::parse(frame) {
            Ok(pfc::MacControl::Pfc(p)) => Frame::Pfc(l2, p),
            Ok(pfc::MacControl::Pause(p)) => Frame::Pause(l2, p),
            Err(e) => Frame::BadMacControl(l2, e),
        },
        ETHERTYPE_ARP => match arp::ArpRepr::parse(l3) {
            Ok(a) => Frame::Arp(l2, a),
            Err(_) => Frame::Other(Some(l2)),
        },
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 | ETHERTYPE_ROCEV1 => {
            match RocePacket::parse_with(frame, ParseMode::Lenient) {
                Ok(p) => Frame::Roce(p),
                Err(Error::NotRoce) => Frame::Other(Some(l2)),
                Err(e) if looks_like_roce(&l2, l3) => Frame::BadRoce(l2, e),
                Err(_) => Frame::Other(Some(l2)),
            }
        }
        _ => Frame::Other(Some(l2)),
    }
}

/// RoCEv1 EtherType, or an IP header naming UDP whose destination port reads
/// 4791 at the position the IHL gives.
fn looks_like_roce(l2: &L2Info, l3: &[u8]) -> bool {
    let port_at = |off: usize| {
        l3.get(off + 2..off + 4)
            .is_some_and(|p| u16::from_be_bytes([p[0], p[1]]) == ROCEV2_UDP_PORT)
    };
    match l2.ethertype {
        ETHERTYPE_ROCEV1 => true,
        ETHERTYPE_IPV4 => {
            let ihl = l3.first().map_or(0, |b| (b & 0x0F) as usize * 4);
            l3.get(9) == Some(&17) && port_at(ihl.max(20))
        }
        ETHERTYPE_IPV6 => l3.get(6) == Some(&17) && port_at(40),
        _ => false,
    }
}
