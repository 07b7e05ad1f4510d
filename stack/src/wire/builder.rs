//! Building whole RoCE frames in a caller-supplied buffer.
//!
//! [`PacketRepr::emit`] writes Ethernet (+ 802.1Q), IPv4/IPv6 (or a RoCEv1 GRH),
//! UDP, BTH, extension headers, payload, pad bytes and the ICRC, filling in every
//! length, the IPv4 header checksum and the UDP checksum policy. For zero-copy
//! senders the same work is split in two: [`PacketRepr::emit_headers`] writes the
//! headers and returns where the payload goes, the caller writes the payload in
//! place, and [`PacketRepr::finalize`] adds pad, ICRC and checksums. Each header
//! is written by its own `Repr` ([`EthRepr`], [`Ipv4Repr`], [`Ipv6Repr`],
//! [`GrhRepr`], [`UdpRepr`], [`BthRepr`], [`ExtHeaders`]).
//!
//! Lengths (CASES R04 d): UDP length = 8 + 12 + extension headers + payload +
//! pad + 4; IPv4 total length = 20 + UDP length; IPv6 payload length = UDP length;
//! GRH PayLen = BTH .. ICRC. Frames shorter than 60 bytes are zero-padded to 60;
//! the padding is never counted in a length field.
//!
//! The UDP checksum follows [`UdpChecksum`]: 0 over IPv4, computed over IPv6
//! (see [`udp`] for why); both defaults can be overridden, e.g.
//! `Zero` to match rxe on IPv6.

use core::net::IpAddr;

use super::bth::{self, BthRepr};
use super::ethernet::EthernetFrame;
use super::ext::ExtHeaders;
use super::grh::{self, GrhRepr};
use super::packet::{NetInfo, RocePacket};
use super::{ipv4, ipv6, udp};
use super::{Error, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_ROCEV1, ETH_MIN_FRAME_LEN, ICRC_LEN};
use crate::icrc::{self, IcrcForm};

#[doc(no_inline)]
pub use super::ethernet::EthRepr;
#[doc(no_inline)]
pub use super::ipv4::{patch_ipv4_ident, Ipv4Repr};
#[doc(no_inline)]
pub use super::ipv6::Ipv6Repr;
#[doc(no_inline)]
pub use super::udp::{UdpChecksum, UdpRepr};

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

    /// The EtherType that announces this header.
    pub fn ethertype(&self) -> u16 {
        match self {
            NetRepr::Ipv4(_) => ETHERTYPE_IPV4,
            NetRepr::Ipv6(_) => ETHERTYPE_IPV6,
            NetRepr::Grh(_) => ETHERTYPE_ROCEV1,
        }
    }

    /// Source and destination address of an IP header (`None` for a GRH).
    pub fn ip_addrs(&self) -> Option<(IpAddr, IpAddr)> {
        match self {
            NetRepr::Ipv4(r) => Some((r.src.into(), r.dst.into())),
            NetRepr::Ipv6(r) => Some((r.src.into(), r.dst.into())),
            NetRepr::Grh(_) => None,
        }
    }

    /// The UDP checksum policy in effect over this header
    /// ([`UdpChecksum::resolve`]).
    pub fn udp_checksum(&self, policy: UdpChecksum) -> UdpChecksum {
        policy.resolve(matches!(self, NetRepr::Ipv6(_)))
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

impl PacketRepr {
    /// The repr that rebuilds `p` byte for byte (with its UDP checksum as a
    /// literal value), given its payload.
    pub fn from_packet(p: &RocePacket<'_>) -> PacketRepr {
        let net = match p.net() {
            NetInfo::Ipv4(i) => NetRepr::Ipv4(i.into()),
            NetInfo::Ipv6(i) => NetRepr::Ipv6(i.into()),
            NetInfo::Grh(g) => NetRepr::Grh(g),
        };
        let udp = p.udp().map_or(UdpRepr::default(), UdpRepr::from);
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
        self.eth.header_len()
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
        let l3 = self.eth.header_len();
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
            IcrcForm::Ipv4 => (ipv4::HEADER_LEN, lay.end - lay.l3 - ipv4::HEADER_LEN),
            IcrcForm::Ipv6 => (ipv6::HEADER_LEN, lay.end - lay.l3 - ipv6::HEADER_LEN),
            IcrcForm::Grh => (grh::HEADER_LEN, 0),
        };
        if buf.len() < lay.l3 + l3_hdr + udp::HEADER_LEN {
            return Err(Error::BufferTooSmall);
        }
        let (eth, rest) = buf.split_at_mut(lay.l3);
        self.eth
            .emit(&mut EthernetFrame::new_unchecked(eth), self.net.ethertype());
        let (net, rest) = rest.split_at_mut(l3_hdr);
        match &self.net {
            NetRepr::Ipv4(r) => r.emit(&mut ipv4::Packet::new_unchecked(net), udp_len as u16),
            NetRepr::Ipv6(r) => r.emit(&mut ipv6::Packet::new_unchecked(net), udp_len as u16),
            NetRepr::Grh(g) => {
                let g = GrhRepr {
                    payload_len: (lay.end - lay.l3 - grh::HEADER_LEN) as u16,
                    ..*g
                };
                g.emit(&mut grh::Packet::new_unchecked(net));
            }
        }
        // UDP (checksum filled in by finalize).
        if form != IcrcForm::Grh {
            let hdr = rest
                .get_mut(..udp::HEADER_LEN)
                .ok_or(Error::BufferTooSmall)?;
            let payload_len = (udp_len - udp::HEADER_LEN) as u16;
            self.udp
                .emit(&mut udp::Packet::new_unchecked(hdr), payload_len);
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
        let bth_off = form.net_len();
        //= IBTA 1.7 §9.2, as ROCEV2-DIGEST §3 states it
        //# `pad = (-payload_len) & 3`, written to BTH.PadCnt; pad bytes are
        //# zero and inside the ICRC
        let bth = BthRepr {
            pad_count: (payload_len.wrapping_neg() & 3) as u8,
            ..self.bth
        };
        let out = rest
            .get_mut(bth_off..bth_off + bth::HEADER_LEN)
            .ok_or(Error::BufferTooSmall)?;
        bth.emit(&mut bth::Packet::new_unchecked(out));
        let ext = rest
            .get_mut(bth_off + bth::HEADER_LEN..lay.payload - lay.l3)
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
        if let Some((src, dst)) = self.net.ip_addrs() {
            let l3_hdr = form.net_len() - udp::HEADER_LEN;
            let mut udp = udp::Packet::new_unchecked(&mut buf[lay.l3 + l3_hdr..lay.end]);
            match self.net.udp_checksum(self.udp.checksum) {
                UdpChecksum::Zero | UdpChecksum::Default => udp.set_checksum(0),
                UdpChecksum::Value(v) => udp.set_checksum(v),
                UdpChecksum::Compute => udp.fill_checksum(src, dst),
            }
        }
        Ok(frame_len)
    }
}
