//! Building whole RoCE frames in a caller-supplied buffer.
//!
//! [`PacketRepr::emit`] writes Ethernet (+ 802.1Q), IPv4/IPv6 (or a RoCEv1 GRH),
//! UDP, BTH, extension headers, payload, pad bytes and the ICRC, filling in every
//! length, the IPv4 header checksum and the UDP checksum policy. For zero-copy
//! senders the same work is split in two: [`PacketRepr::emit_headers`] writes the
//! headers and returns where the payload goes, the caller writes the payload in
//! place, and [`PacketRepr::finalize`] adds pad, ICRC and checksums.
//!
//! Lengths (CASES R04 d): UDP length = 8 + 12 + extension headers + payload +
//! pad + 4; IPv4 total length = 20 + UDP length; IPv6 payload length = UDP length;
//! GRH PayLen = BTH .. ICRC. Frames shorter than 60 bytes are zero-padded to 60;
//! the padding is never counted in a length field.
//!
//! UDP checksum policy ([`UdpChecksum`]): over IPv4 the default is 0 ("no
//! checksum", RFC 768), what rxe and ConnectX send; the ICRC protects the
//! packet. Over IPv6 a zero UDP checksum is only legal under RFC 6935/6936
//! (tunnel endpoints that opt in), and plain IPv6 receivers and Wireshark reject
//! it, so the IPv6 default computes the full checksum (RFC 8200 §8.1). Both
//! defaults can be overridden, e.g. `Zero` to match rxe on IPv6.

use core::net::{Ipv4Addr, Ipv6Addr};

use smoltcp::wire::{IpAddress, IpProtocol, Ipv4Packet, Ipv6Packet, UdpPacket};

use super::bth::{self, BthRepr};
use super::ext::ExtHeaders;
use super::grh::{self, GrhRepr};
use super::packet::{NetInfo, RocePacket, VlanTag};
use super::{
    Error, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1, ETHERTYPE_VLAN, ETH_MIN_FRAME_LEN,
    ICRC_LEN, ROCEV2_UDP_PORT,
};
use crate::icrc::{self, IcrcForm};

/// Ethernet header to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthRepr {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// Optional 802.1Q tag (outside the ICRC).
    pub vlan: Option<VlanTag>,
}

impl EthRepr {
    fn len(&self) -> usize {
        if self.vlan.is_some() {
            18
        } else {
            14
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

/// Network header to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetRepr {
    /// RoCEv2 over IPv4.
    Ipv4(Ipv4Repr),
    /// RoCEv2 over IPv6.
    Ipv6(Ipv6Repr),
    /// RoCEv1: a GRH (its `payload_len` is computed; `next_header` is written as
    /// given, normally 0x1B).
    Grh(GrhRepr),
}

impl NetRepr {
    fn form(&self) -> IcrcForm {
        match self {
            NetRepr::Ipv4(_) => IcrcForm::Ipv4,
            NetRepr::Ipv6(_) => IcrcForm::Ipv6,
            NetRepr::Grh(_) => IcrcForm::Grh,
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

/// Everything needed to write one RoCE frame except the payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketRepr {
    /// Ethernet header.
    pub eth: EthRepr,
    /// IPv4, IPv6 or GRH.
    pub net: NetRepr,
    /// UDP header (ignored for RoCEv1).
    pub udp: UdpRepr,
    /// BTH (its PadCnt is overwritten from the payload length).
    pub bth: BthRepr,
    /// Extension headers; must be exactly those the opcode table lists.
    pub ext: ExtHeaders,
}

/// Offsets of one frame being built.
#[derive(Debug, Clone, Copy)]
struct Layout {
    l3: usize,
    payload: usize,
    pad: usize,
    icrc: usize,
    end: usize,
}

/// The Ethernet, IP and UDP header bytes of the last frame built through
/// [`PacketRepr::emit_headers_cached`], and what they were built from.
#[derive(Debug, Clone, Copy)]
pub struct HeaderTemplate {
    /// Up to 18 (Ethernet + 802.1Q) + 40 (IPv6) + 8 (UDP) bytes.
    bytes: [u8; 66],
    /// Bytes in use; 0 = empty.
    len: usize,
    /// Frame length (before the 60-byte minimum) they were built for.
    end: usize,
    key: TemplateKey,
}

impl Default for HeaderTemplate {
    fn default() -> Self {
        HeaderTemplate {
            bytes: [0; 66],
            len: 0,
            end: 0,
            key: TemplateKey::default(),
        }
    }
}

/// The reprs a template's bytes come from (the IPv4 identification aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct TemplateKey {
    eth: EthRepr,
    net: Option<NetRepr>,
    udp: UdpRepr,
}

impl TemplateKey {
    fn of(r: &PacketRepr) -> TemplateKey {
        TemplateKey {
            eth: r.eth,
            net: Some(r.net),
            udp: r.udp,
        }
    }

    /// Whether `r` has the same Ethernet, network and UDP headers, but for
    /// the IPv4 identification (field by field: this runs per packet).
    fn matches(&self, r: &PacketRepr) -> bool {
        let net = match (&self.net, &r.net) {
            (Some(NetRepr::Ipv4(a)), NetRepr::Ipv4(b)) => {
                a.src == b.src
                    && a.dst == b.dst
                    && a.dscp == b.dscp
                    && a.ecn == b.ecn
                    && a.ttl == b.ttl
                    && a.dont_frag == b.dont_frag
            }
            (Some(a @ NetRepr::Ipv6(_)), b @ NetRepr::Ipv6(_)) => a == b,
            _ => false,
        };
        net && self.eth == r.eth && self.udp == r.udp
    }
}

/// Set the identification of the IPv4 header `ip` (20 bytes) to `ident`,
/// updating its header checksum incrementally (RFC 1624 eqn. 3:
/// `HC' = ~(~HC + ~m + m')`, one's-complement sums) instead of summing the
/// header again. Nothing if `ip` is shorter than 12 bytes.
pub fn patch_ipv4_ident(ip: &mut [u8], ident: u16) {
    let Some(h) = ip.first_chunk_mut::<12>() else {
        return;
    };
    let old = u16::from_be_bytes([h[4], h[5]]);
    if old == ident {
        return;
    }
    let hc = u16::from_be_bytes([h[10], h[11]]);
    let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(ident);
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    [h[4], h[5]] = ident.to_be_bytes();
    [h[10], h[11]] = (!(sum as u16)).to_be_bytes();
}

impl PacketRepr {
    /// The repr that rebuilds `p` byte for byte (with its UDP checksum as a
    /// literal value), given its payload.
    pub fn from_packet(p: &RocePacket<'_>) -> PacketRepr {
        let net = match p.net() {
            NetInfo::Ipv4(i) => NetRepr::Ipv4(Ipv4Repr {
                src: i.src,
                dst: i.dst,
                dscp: i.dscp,
                ecn: i.ecn,
                ttl: i.ttl,
                ident: i.ident,
                dont_frag: i.dont_frag,
            }),
            NetInfo::Ipv6(i) => NetRepr::Ipv6(Ipv6Repr {
                src: i.src,
                dst: i.dst,
                dscp: i.dscp,
                ecn: i.ecn,
                flow_label: i.flow_label,
                hop_limit: i.hop_limit,
            }),
            NetInfo::Grh(g) => NetRepr::Grh(g),
        };
        let udp = p.udp().map_or(UdpRepr::default(), |u| UdpRepr {
            src_port: u.src_port,
            dst_port: u.dst_port,
            checksum: UdpChecksum::Value(u.checksum),
        });
        PacketRepr {
            eth: EthRepr {
                dst: p.l2().dst,
                src: p.l2().src,
                vlan: p.l2().vlan,
            },
            net,
            udp,
            bth: p.bth(),
            ext: p.ext().to_headers(),
        }
    }

    /// Length of everything before the payload, bytes.
    pub fn header_len(&self) -> usize {
        self.eth.len()
            + self.net.form().net_len()
            + bth::HEADER_LEN
            + self.bth.opcode.info().hdr_len as usize
    }

    /// Length of the frame for a payload of `payload_len` bytes, including pad,
    /// ICRC and padding to the 60-byte Ethernet minimum (no FCS).
    pub fn frame_len(&self, payload_len: usize) -> usize {
        self.layout(payload_len).end.max(ETH_MIN_FRAME_LEN)
    }

    fn layout(&self, payload_len: usize) -> Layout {
        let l3 = self.eth.len();
        let payload = self.header_len();
        // Saturating: a nonsense `payload_len` gives an `end` beyond any 16-bit
        // length field (rejected by `emit_headers`), never an overflow.
        let pad = payload.saturating_add(payload_len);
        let icrc = pad.saturating_add(payload_len.wrapping_neg() & 3);
        Layout {
            l3,
            payload,
            pad,
            icrc,
            end: icrc.saturating_add(ICRC_LEN),
        }
    }

    /// Write the whole frame with `payload` into `buf`. Returns the frame length.
    ///
    /// Errors: [`Error::BufferTooSmall`], [`Error::ExtHeaderMismatch`],
    /// [`Error::BadPayloadLen`].
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, Error> {
        let off = self.emit_headers(buf, payload.len())?;
        buf.get_mut(off..off + payload.len())
            .ok_or(Error::BufferTooSmall)?
            .copy_from_slice(payload);
        self.finalize(buf, payload.len())
    }

    /// Write every header for a payload of `payload_len` bytes. Returns the offset
    /// at which the caller writes the payload before calling
    /// [`PacketRepr::finalize`].
    pub fn emit_headers(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, Error> {
        let (lay, form) = self.check(buf.len(), payload_len)?;
        self.emit_l2_l4(buf, &lay, form)?;
        self.emit_transport(buf, &lay, form, payload_len)
    }

    /// [`PacketRepr::emit_headers`] that copies the Ethernet, IP and UDP
    /// headers from `tmpl` when it holds those of a frame of the same length
    /// built from the same Ethernet, network (but for the IPv4
    /// identification) and UDP reprs, and otherwise builds them and keeps
    /// them in `tmpl`. On a hit only the IPv4 identification and header
    /// checksum change, the checksum updated incrementally (RFC 1624 eqn. 3);
    /// the bytes are those `emit_headers` writes. A sender keeps one
    /// template per flow (an RC QP sends every packet to one address).
    pub fn emit_headers_cached(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        tmpl: &mut HeaderTemplate,
    ) -> Result<usize, Error> {
        let (lay, form) = self.check(buf.len(), payload_len)?;
        let n = lay.l3 + form.net_len() + if form == IcrcForm::Grh { 0 } else { 8 };
        if form != IcrcForm::Grh && tmpl.len == n && tmpl.end == lay.end && tmpl.key.matches(self) {
            let src = tmpl.bytes.get(..n).ok_or(Error::BufferTooSmall)?;
            let dst = buf.get_mut(..n).ok_or(Error::BufferTooSmall)?;
            dst.copy_from_slice(src);
            if let (NetRepr::Ipv4(r), Some(ip)) = (&self.net, dst.get_mut(lay.l3..lay.l3 + 20)) {
                patch_ipv4_ident(ip, r.ident);
            }
        } else {
            self.emit_l2_l4(buf, &lay, form)?;
            if let Some(b) = buf.get(..n) {
                if n <= tmpl.bytes.len() {
                    tmpl.bytes[..n].copy_from_slice(b);
                    tmpl.len = n;
                    tmpl.end = lay.end;
                    tmpl.key = TemplateKey::of(self);
                }
            }
        }
        self.emit_transport(buf, &lay, form, payload_len)
    }

    /// The checks every emit makes, and the frame's layout.
    fn check(&self, buf_len: usize, payload_len: usize) -> Result<(Layout, IcrcForm), Error> {
        let info = self.bth.opcode.info();
        if info.supported && self.ext.mask() != info.hdrs
            || !info.supported && self.ext.mask().0 != 0
        {
            return Err(Error::ExtHeaderMismatch);
        }
        let lay = self.layout(payload_len);
        let max_l3 = lay.end - lay.l3;
        if max_l3 > u16::MAX as usize {
            return Err(Error::BadPayloadLen);
        }
        if buf_len < lay.end.max(ETH_MIN_FRAME_LEN) {
            return Err(Error::BufferTooSmall);
        }
        Ok((lay, self.net.form()))
    }

    /// Ethernet (+ 802.1Q), IPv4/IPv6/GRH and UDP headers.
    fn emit_l2_l4(&self, buf: &mut [u8], lay: &Layout, form: IcrcForm) -> Result<(), Error> {
        // UDP length (UDP header .. ICRC); the GRH computes its PayLen below.
        let (l3_hdr, udp_len) = match form {
            IcrcForm::Ipv4 => (20, lay.end - lay.l3 - 20),
            IcrcForm::Ipv6 => (40, lay.end - lay.l3 - 40),
            IcrcForm::Grh => (40, 0),
        };
        if buf.len() < lay.l3 + l3_hdr + 8 {
            return Err(Error::BufferTooSmall);
        }
        // Ethernet.
        let (eth, rest) = buf.split_at_mut(lay.l3);
        eth[0..6].copy_from_slice(&self.eth.dst);
        eth[6..12].copy_from_slice(&self.eth.src);
        let ethertype = match form {
            IcrcForm::Ipv4 => ETHERTYPE_IPV4,
            IcrcForm::Ipv6 => ETHERTYPE_IPV6,
            IcrcForm::Grh => ETHERTYPE_ROCEV1,
        };
        if let Some(tag) = self.eth.vlan {
            eth[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            eth[14..16].copy_from_slice(&tag.tci().to_be_bytes());
            eth[16..18].copy_from_slice(&ethertype.to_be_bytes());
        } else {
            eth[12..14].copy_from_slice(&ethertype.to_be_bytes());
        }

        // Network header.
        match &self.net {
            NetRepr::Ipv4(r) => {
                let mut ip = Ipv4Packet::new_unchecked(&mut rest[..20]);
                ip.set_version(4);
                ip.set_header_len(20);
                ip.set_dscp(r.dscp & 0x3F);
                ip.set_ecn(r.ecn & 3);
                ip.set_total_len((20 + udp_len) as u16);
                ip.set_ident(r.ident);
                ip.clear_flags();
                ip.set_dont_frag(r.dont_frag);
                ip.set_frag_offset(0);
                ip.set_hop_limit(r.ttl);
                ip.set_next_header(IpProtocol::Udp);
                ip.set_src_addr(r.src);
                ip.set_dst_addr(r.dst);
                ip.fill_checksum();
            }
            NetRepr::Ipv6(r) => {
                let mut ip = Ipv6Packet::new_unchecked(&mut rest[..40]);
                ip.set_version(6);
                ip.set_traffic_class((r.dscp & 0x3F) << 2 | (r.ecn & 3));
                ip.set_flow_label(r.flow_label & 0xF_FFFF);
                ip.set_payload_len(udp_len as u16);
                ip.set_next_header(IpProtocol::Udp);
                ip.set_hop_limit(r.hop_limit);
                ip.set_src_addr(r.src);
                ip.set_dst_addr(r.dst);
            }
            NetRepr::Grh(g) => {
                let g = GrhRepr {
                    payload_len: (lay.end - lay.l3 - grh::HEADER_LEN) as u16,
                    ..*g
                };
                let out: &mut [u8; 40] = (&mut rest[..40])
                    .try_into()
                    .map_err(|_| Error::BufferTooSmall)?;
                g.emit(out);
            }
        }
        // UDP (checksum filled in by finalize).
        if form != IcrcForm::Grh {
            let hdr = rest
                .get_mut(l3_hdr..l3_hdr + 8)
                .ok_or(Error::BufferTooSmall)?;
            let mut udp = UdpPacket::new_unchecked(hdr);
            udp.set_src_port(self.udp.src_port);
            udp.set_dst_port(self.udp.dst_port);
            udp.set_len(udp_len as u16);
            udp.set_checksum(0);
        }
        Ok(())
    }

    /// BTH (PadCnt from the payload length) and extension headers; returns
    /// the payload offset.
    fn emit_transport(
        &self,
        buf: &mut [u8],
        lay: &Layout,
        form: IcrcForm,
        payload_len: usize,
    ) -> Result<usize, Error> {
        let rest = buf.get_mut(lay.l3..).ok_or(Error::BufferTooSmall)?;
        // BTH with PadCnt from the payload length.
        let bth_off = form.net_len();
        let bth = BthRepr {
            pad_count: (payload_len.wrapping_neg() & 3) as u8,
            ..self.bth
        };
        let out: &mut [u8; 12] = rest
            .get_mut(bth_off..bth_off + 12)
            .and_then(|b| b.try_into().ok())
            .ok_or(Error::BufferTooSmall)?;
        bth.emit(out);
        let ext = rest
            .get_mut(bth_off + 12..lay.payload - lay.l3)
            .ok_or(Error::BufferTooSmall)?;
        self.ext.emit(self.bth.opcode.info().hdrs, ext)?;
        Ok(lay.payload)
    }

    /// After the payload is in place: write the pad bytes, the ICRC, the UDP
    /// checksum, and zero padding up to 60 bytes. Returns the frame length.
    pub fn finalize(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, Error> {
        let lay = self.layout(payload_len);
        let frame_len = lay.end.max(ETH_MIN_FRAME_LEN);
        let buf = buf.get_mut(..frame_len).ok_or(Error::BufferTooSmall)?;
        buf[lay.pad..lay.icrc].fill(0);
        let form = self.net.form();
        let crc = icrc::compute(form, &buf[lay.l3..lay.icrc])?;
        buf[lay.icrc..lay.end].copy_from_slice(&crc.to_le_bytes());
        buf[lay.end..].fill(0);
        if form != IcrcForm::Grh {
            let l3_hdr = if form == IcrcForm::Ipv4 { 20 } else { 40 };
            let policy = match (self.udp.checksum, &self.net) {
                (UdpChecksum::Default, NetRepr::Ipv4(_)) => UdpChecksum::Zero,
                (UdpChecksum::Default, _) => UdpChecksum::Compute,
                (p, _) => p,
            };
            let mut udp = UdpPacket::new_unchecked(&mut buf[lay.l3 + l3_hdr..lay.end]);
            match policy {
                UdpChecksum::Zero | UdpChecksum::Default => udp.set_checksum(0),
                UdpChecksum::Value(v) => udp.set_checksum(v),
                UdpChecksum::Compute => {
                    let (src, dst) = match &self.net {
                        NetRepr::Ipv4(r) => (IpAddress::Ipv4(r.src), IpAddress::Ipv4(r.dst)),
                        NetRepr::Ipv6(r) => (IpAddress::Ipv6(r.src), IpAddress::Ipv6(r.dst)),
                        NetRepr::Grh(_) => return Ok(frame_len),
                    };
                    udp.fill_checksum(&src, &dst);
                }
            }
        }
        Ok(frame_len)
    }
}
