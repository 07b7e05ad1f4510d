//! Header building for the packets a device sends: one cache per QP and one
//! IPv4 identification counter per device.
//!
//! Every packet of a connected QP goes to the same address vector from the
//! same UDP source port, so its Ethernet, IP and UDP headers are the same
//! but for the lengths and the IPv4 identification (and header checksum).
//! The QP's [`HeaderCache`] keeps:
//!
//! - the flow: the reprs [`build`] made from the address vector and source
//!   port (`modify_qp` drops the whole cache when either changes, and RESET
//!   does);
//! - for the requester and for the responder, the header bytes of the last
//!   packet they built. A packet of the same frame length reuses its
//!   Ethernet, IP and UDP bytes: they are copied, the identification is set
//!   and the IPv4 header checksum updated incrementally (RFC 1624 eqn. 3),
//!   and the BTH and extension headers are written. A request of the same
//!   shape as the last (opcode, payload length and SE; RoCEv2 over IPv4
//!   with a zero UDP checksum and at most a RETH) reuses the BTH and RETH
//!   bytes as well and patches AckReq, the PSN and the RETH: the
//!   requester's fast path ([`HeaderCache::emit_request_fast`]).
//!
//! The bytes are always those [`PacketRepr::emit_headers`] writes for the
//! same packet (debug builds check the fast path against it, frame by
//! frame).
//!
//! The IPv4 identification is one counter per device ([`IpIdent`]), one step
//! per IPv4 packet sent (QP packets and CNPs), taken when the packet's
//! headers are written.

use core::net::IpAddr;

use super::av::AddressVector;
use super::config::DeviceConfig;
use crate::icrc::{self, IcrcForm};
use crate::wire::ext::RethRepr;
use crate::wire::{
    bth, ipv4, patch_ipv4_ident, reth, udp, BthRepr, EthRepr, ExtHeader, ExtHeaders, HdrMask,
    Ipv4Repr, Ipv6Repr, NetRepr, Opcode, PacketRepr, UdpChecksum, UdpRepr, VlanTag,
    ETH_MIN_FRAME_LEN, ICRC_LEN, ROCEV2_UDP_PORT,
};

/// The IPv4 identification counter of a device: every IPv4 packet it sends
/// takes the next value. RoCEv2 packets are sent with DF set and never
/// fragmented (RFC 6864 §4.1: the field then only needs to differ between
/// packets close in time, as a per-device counter does).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IpIdent(u16);

impl IpIdent {
    /// The identification of the next IPv4 packet.
    #[inline(always)]
    pub fn next(&mut self) -> u16 {
        self.0 = self.0.wrapping_add(1);
        self.0
    }
}

/// Ethernet + network + UDP headers for a packet to `av` from UDP source port
/// `sport`; the IPv4 identification is the next of `ident`. DSCP and PCP:
/// the address vector's when non-zero, else the configured data class; ECN:
/// the configured codepoint ([`crate::cc::CcConfig`]). `None` when the
/// address vector's source GID index is not in the table or the two GIDs
/// are of different IP versions.
pub(crate) fn build(
    cfg: &DeviceConfig,
    ident: &mut IpIdent,
    av: &AddressVector,
    sport: u16,
) -> Option<(EthRepr, NetRepr, UdpRepr)> {
    let (eth, mut net, udp) = flow_reprs(cfg, av, sport)?;
    if let NetRepr::Ipv4(r) = &mut net {
        r.ident = ident.next();
    }
    Some((eth, net, udp))
}

/// [`build`] without taking an identification (it is left 0).
fn flow_reprs(
    cfg: &DeviceConfig,
    av: &AddressVector,
    sport: u16,
) -> Option<(EthRepr, NetRepr, UdpRepr)> {
    let sgid = *cfg.gids.get(av.sgid_index as usize)?;
    let cc = &cfg.cc;
    let dscp = match av.traffic_class >> 2 {
        0 => cc.data_dscp & 0x3F,
        d => d,
    };
    let ecn = cc.data_ecn.bits();
    let eth = EthRepr {
        dst: av.dmac,
        src: cfg.mac,
        vlan: av.vlan.map(|t| VlanTag {
            pcp: if t.pcp == 0 {
                cc.data_802p_prio & 7
            } else {
                t.pcp
            },
            ..t
        }),
    };
    let hop_limit = if av.hop_limit == 0 { 64 } else { av.hop_limit };
    let net = match (sgid.to_ip(), av.dgid.to_ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => NetRepr::Ipv4(Ipv4Repr {
            src,
            dst,
            dscp,
            ecn,
            ttl: hop_limit,
            ident: 0,
            dont_frag: true,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => NetRepr::Ipv6(Ipv6Repr {
            src,
            dst,
            dscp,
            ecn,
            flow_label: av.flow_label,
            hop_limit,
        }),
        _ => return None,
    };
    let udp = UdpRepr {
        src_port: sport,
        dst_port: ROCEV2_UDP_PORT,
        checksum: UdpChecksum::Default,
    };
    Some((eth, net, udp))
}

/// Whose packets a template holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// The requester's (requests).
    Req = 0,
    /// The responder's (ACKs, READ responses, ATOMIC ACKNOWLEDGEs).
    Resp = 1,
}

/// The reprs of a QP's packets and what they were built from.
#[derive(Debug, Clone, Copy)]
struct Flow {
    /// What it was built from (debug builds check it is still the QP's).
    #[cfg(debug_assertions)]
    av: AddressVector,
    sport: u16,
    eth: EthRepr,
    net: NetRepr,
    udp: UdpRepr,
}

/// Largest header a template holds: Ethernet + 802.1Q, IPv6, UDP, BTH and
/// the largest extension headers of a connected QP's packet (AtomicETH).
const TEMPLATE_MAX: usize = 18 + 40 + 8 + bth::HEADER_LEN + 28;

/// Largest header of the requester's fast path: Ethernet + 802.1Q, IPv4,
/// UDP, BTH, RETH.
const FAST_HDR_MAX: usize = 18 + 20 + 8 + bth::HEADER_LEN + 16;

/// The header bytes of the last packet one engine of a QP built.
#[derive(Debug, Clone, Copy)]
struct Template {
    bytes: [u8; TEMPLATE_MAX],
    /// Bytes of Ethernet through UDP; 0 = empty.
    l4: u8,
    /// Bytes in use: where the payload started.
    hdr: u8,
    /// The frame length (before the Ethernet minimum) they were built for,
    /// which fixes the IP and UDP length fields.
    end: u32,
    /// The request the whole header is for, when the fast path can reuse
    /// it.
    shape: Option<Shape>,
}

impl Default for Template {
    fn default() -> Self {
        Template {
            bytes: [0; TEMPLATE_MAX],
            l4: 0,
            hdr: 0,
            end: 0,
            shape: None,
        }
    }
}

/// What the fast path keys a kept request header on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    opcode: u8,
    len: u32,
    solicited: bool,
}

/// The header cache of one QP (see the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct HeaderCache {
    flow: Option<Flow>,
    tmpl: [Template; 2],
}

/// Offset of the network header behind `eth`.
#[inline(always)]
fn l3_of(eth: &EthRepr) -> usize {
    if eth.vlan.is_some() {
        18
    } else {
        14
    }
}

impl HeaderCache {
    /// Forget everything (the address vector or the destination QPN
    /// changed, or the QP was reset).
    pub fn clear(&mut self) {
        self.flow = None;
        for t in &mut self.tmpl {
            t.l4 = 0;
            t.shape = None;
        }
    }

    /// Write the headers of one packet of this QP to `av` from UDP source
    /// port `sport` (the QP's own: `modify_qp` clears the cache whenever
    /// they change) into `buf`, for a payload of `len` bytes; the IPv4
    /// identification is the next of `ident`. Returns where the payload goes
    /// and the packet's repr (for `PacketRepr::finalize`). Inlined: returned
    /// through memory, the repr would cost the caller a store-forwarding
    /// stall per packet.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn emit(
        &mut self,
        dir: Dir,
        cfg: &DeviceConfig,
        ident: &mut IpIdent,
        av: &AddressVector,
        sport: u16,
        bth: BthRepr,
        ext: ExtHeaders,
        len: usize,
        buf: &mut [u8],
    ) -> Option<(usize, PacketRepr)> {
        let f = match &self.flow {
            Some(f) if f.sport == sport => {
                #[cfg(debug_assertions)]
                debug_assert!(f.av == *av);
                f
            }
            _ => {
                let (eth, net, udp) = flow_reprs(cfg, av, sport)?;
                self.clear();
                self.flow.insert(Flow {
                    #[cfg(debug_assertions)]
                    av: *av,
                    sport,
                    eth,
                    net,
                    udp,
                })
            }
        };
        let mut net = f.net;
        if let NetRepr::Ipv4(r) = &mut net {
            r.ident = ident.next();
        }
        let repr = PacketRepr {
            eth: f.eth,
            net,
            udp: f.udp,
            bth,
            ext,
        };
        let t = &mut self.tmpl[dir as usize];
        let (off, reused) = t.write(&repr, len, buf)?;
        if dir == Dir::Req {
            t.keep_request(&repr, len, buf, off, reused);
        }
        Some((off, repr))
    }

    /// The requester's fast path: when the last request header kept has
    /// this packet's shape (`op`, `len`, `solicited`, and a RETH exactly
    /// when `reth` is given), write it into `buf` by copying it and patching
    /// the IPv4 identification (the next of `ident`) and header checksum
    /// (RFC 1624 eqn. 3), AckReq, the PSN and the RETH. Returns where the
    /// payload goes; `None` (nothing written, no identification taken):
    /// use [`HeaderCache::emit`].
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn emit_request_fast(
        &self,
        ident: &mut IpIdent,
        sport: u16,
        op: Opcode,
        len: u32,
        solicited: bool,
        ack_req: bool,
        psn: u32,
        reth: Option<&RethRepr>,
        buf: &mut [u8],
    ) -> Option<usize> {
        let f = self.flow.as_ref()?;
        let t = &self.tmpl[Dir::Req as usize];
        let s = t.shape?;
        if f.sport != sport || s.opcode != op.0 || s.len != len || s.solicited != solicited {
            return None;
        }
        let n = usize::from(t.hdr);
        let ip = l3_of(&f.eth);
        let bth_off = ip + ipv4::HEADER_LEN + udp::HEADER_LEN;
        let reth_len = if reth.is_some() { reth::HEADER_LEN } else { 0 };
        if n != bth_off + bth::HEADER_LEN + reth_len {
            return None;
        }
        let out = buf.get_mut(..n)?;
        out.copy_from_slice(t.bytes.get(..n)?);
        patch_ipv4_ident(out.get_mut(ip..ip + ipv4::HEADER_LEN)?, ident.next());
        let (b, r) = out.get_mut(bth_off..)?.split_at_mut(bth::HEADER_LEN);
        let mut b = bth::Packet::new_unchecked(b);
        b.set_ack_req(ack_req);
        b.set_psn(psn);
        if let Some(repr) = reth {
            repr.emit(&mut reth::Packet::new_checked(r).ok()?);
        }
        Some(n)
    }

    /// After the fast path's payload: pad bytes, ICRC and zeros up to the
    /// Ethernet minimum (what `PacketRepr::finalize` writes when the UDP
    /// checksum is zero). Returns the frame length.
    #[inline(always)]
    pub fn finalize_fast(&self, off: usize, len: usize, buf: &mut [u8]) -> Option<usize> {
        let l3 = l3_of(&self.flow.as_ref()?.eth);
        let pad = len.wrapping_neg() & 3;
        let icrc = off + len + pad;
        let end = icrc + ICRC_LEN;
        let frame_len = end.max(ETH_MIN_FRAME_LEN);
        let buf = buf.get_mut(..frame_len)?;
        // (Most frames have neither pad nor Ethernet padding: no fill call.)
        if pad > 0 {
            buf.get_mut(off + len..icrc)?.fill(0);
        }
        let crc = icrc::compute(IcrcForm::Ipv4, buf.get(l3..icrc)?).ok()?;
        buf.get_mut(icrc..end)?.copy_from_slice(&crc.to_le_bytes());
        if frame_len > end {
            buf.get_mut(end..)?.fill(0);
        }
        Some(frame_len)
    }

    /// Debug builds: the fast path's frame `buf[..frame_len]` (payload at
    /// `off`) equals what the full builder (`PacketRepr::emit`, checked
    /// against the reference vectors) writes for the same packet.
    ///
    /// Called only on a frame this cache just built (`finalize_fast`
    /// returned `Some(frame_len)` for this `buf`): the flow cache exists and
    /// `off + len <= frame_len <= buf.len()`, so the slicing cannot fail and
    /// a panic here is a failed cross-check of our own transmit path, never
    /// a reaction to received bytes.
    #[cfg(debug_assertions)]
    pub fn check_fast_frame(
        &self,
        bth: BthRepr,
        ext: ExtHeaders,
        buf: &[u8],
        off: usize,
        len: usize,
        frame_len: usize,
    ) {
        let Some(f) = self.flow.as_ref() else {
            panic!("fast path without a header cache");
        };
        let l3 = l3_of(&f.eth);
        let mut net = f.net;
        if let NetRepr::Ipv4(r) = &mut net {
            r.ident = u16::from_be_bytes([buf[l3 + 4], buf[l3 + 5]]);
        }
        let repr = PacketRepr {
            eth: f.eth,
            net,
            udp: f.udp,
            bth,
            ext,
        };
        let payload = &buf[off..off + len];
        // On the stack: steady traffic allocates nothing (tests/no_alloc.rs).
        let mut want = [0u8; 10 * 1024];
        if repr.frame_len(len) > want.len() {
            return;
        }
        let n = repr.emit(&mut want, payload).expect("full builder");
        assert_eq!(n, frame_len, "fast path frame length");
        assert_eq!(&buf[..frame_len], &want[..n], "fast path frame bytes");
    }
}

impl Template {
    /// Write the headers of `repr` for a `len`-byte payload into `buf`:
    /// Ethernet through UDP copied from the template when it was built for
    /// a frame of the same length (identification and checksum patched),
    /// else by the full builder (and kept whole). Returns the payload offset
    /// and whether the template was reused.
    #[inline(always)]
    fn write(&mut self, repr: &PacketRepr, len: usize, buf: &mut [u8]) -> Option<(usize, bool)> {
        let info = repr.bth.opcode.info();
        let hdr = repr.header_len();
        let pad = len.wrapping_neg() & 3;
        let end = hdr + len + pad + ICRC_LEN;
        let ext_len = info.hdr_len as usize;
        let l4 = hdr - bth::HEADER_LEN - ext_len;
        let l3 = l3_of(&repr.eth);
        let hit = usize::from(self.l4) == l4
            && self.end as usize == end
            && !matches!(repr.net, NetRepr::Grh(_))
            && repr.ext.mask() == info.hdrs
            && buf.len() >= end.max(ETH_MIN_FRAME_LEN);
        if !hit {
            let off = repr.emit_headers(buf, len).ok()?;
            if off <= TEMPLATE_MAX {
                self.bytes[..off].copy_from_slice(buf.get(..off)?);
                self.l4 = l4 as u8;
                self.hdr = off as u8;
                self.end = end as u32;
                self.shape = None;
            }
            return Some((off, false));
        }
        let out = buf.get_mut(..hdr)?;
        out[..l4].copy_from_slice(self.bytes.get(..l4)?);
        if let NetRepr::Ipv4(r) = &repr.net {
            patch_ipv4_ident(out.get_mut(l3..l3 + ipv4::HEADER_LEN)?, r.ident);
        }
        let (b, ext) = out.get_mut(l4..)?.split_at_mut(bth::HEADER_LEN);
        BthRepr {
            pad_count: pad as u8,
            ..repr.bth
        }
        .emit(&mut bth::Packet::new_unchecked(b));
        repr.ext.emit(info.hdrs, ext).ok()?;
        Some((hdr, true))
    }

    /// Keep the request header just written into `buf[..off]` whole, for
    /// the fast path, when the packet has the shape it handles: RoCEv2 over
    /// IPv4, a zero UDP checksum, at most a RETH. `copy`: the template holds
    /// only its Ethernet through UDP bytes yet (a miss already kept them
    /// all).
    #[inline(always)]
    fn keep_request(&mut self, repr: &PacketRepr, len: usize, buf: &[u8], off: usize, copy: bool) {
        let ipv4 = matches!(repr.net, NetRepr::Ipv4(_));
        let zero_csum = matches!(repr.udp.checksum, UdpChecksum::Default | UdpChecksum::Zero);
        let only_reth = repr.ext.mask().0 & !HdrMask::EMPTY.with(ExtHeader::Reth).0 == 0;
        if !(ipv4 && zero_csum && only_reth && off <= FAST_HDR_MAX) {
            self.shape = None;
            return;
        }
        if copy {
            let Some(hdr) = buf.get(..off) else {
                self.shape = None;
                return;
            };
            self.bytes[..off].copy_from_slice(hdr);
            self.hdr = off as u8;
        }
        self.shape = Some(Shape {
            opcode: repr.bth.opcode.0,
            len: len as u32,
            solicited: repr.bth.solicited,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::av::Gid;
    use crate::wire::ext::{AethRepr, RethRepr};
    use core::net::{Ipv4Addr, Ipv6Addr};

    /// Every header the cache writes, template reused or not, equals what
    /// the full builder (`PacketRepr::emit_headers`, checked against the
    /// reference vectors in tests/vectors.rs) writes for the same packet
    /// with the same identification: over IPv4 and IPv6, tagged and not,
    /// for lengths and opcodes that alternate and repeat.
    #[test]
    fn cached_headers_equal_the_full_builder() {
        let v4 = (
            Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1)),
            Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 2)),
        );
        let v6 = (
            Gid::from_ipv6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
            Gid::from_ipv6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
        );
        let tag = VlanTag {
            pcp: 0,
            dei: false,
            vid: 7,
        };
        for ((sgid, dgid), vlan) in [(v4, None), (v4, Some(tag)), (v6, None), (v6, Some(tag))] {
            let cfg = DeviceConfig {
                gids: vec![sgid],
                ..DeviceConfig::default()
            };
            let av = AddressVector {
                dgid,
                dmac: [0x02, 0, 0, 0, 0, 2],
                vlan,
                ..AddressVector::default()
            };
            let mut cache = HeaderCache::default();
            let mut ident = IpIdent::default();
            let reth = ExtHeaders {
                reth: Some(RethRepr {
                    va: 0x1000,
                    rkey: 0x1234,
                    dma_len: 4096,
                }),
                ..ExtHeaders::default()
            };
            let aeth = |msn| ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: 0x1F,
                    msn,
                }),
                ..ExtHeaders::default()
            };
            let none = ExtHeaders::default();
            let packets = [
                (Dir::Req, Opcode::RC_RDMA_WRITE_FIRST, reth, 1024),
                (Dir::Req, Opcode::RC_RDMA_WRITE_MIDDLE, none, 1024),
                (Dir::Req, Opcode::RC_RDMA_WRITE_MIDDLE, none, 1024),
                (Dir::Resp, Opcode::RC_ACKNOWLEDGE, aeth(1), 0),
                (Dir::Req, Opcode::RC_RDMA_WRITE_LAST, none, 1024),
                (Dir::Resp, Opcode::RC_ACKNOWLEDGE, aeth(2), 0),
                (Dir::Req, Opcode::RC_SEND_ONLY, none, 61),
                (Dir::Req, Opcode::RC_SEND_ONLY, none, 61),
                (Dir::Req, Opcode::RC_SEND_ONLY, none, 62),
                (Dir::Resp, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, none, 1024),
                (Dir::Resp, Opcode::RC_RDMA_READ_RESPONSE_LAST, aeth(3), 1024),
            ];
            for (i, (dir, op, ext, len)) in packets.into_iter().enumerate() {
                let mut bth = BthRepr::new(op, 0x12, 100 + i as u32);
                bth.ack_req = i % 2 == 0;
                let mut got = [0u8; 2048];
                let (off, repr) = cache
                    .emit(dir, &cfg, &mut ident, &av, 0xC012, bth, ext, len, &mut got)
                    .expect("headers");
                let mut want = [0u8; 2048];
                let n = repr.emit_headers(&mut want, len).expect("full builder");
                assert_eq!(off, n, "packet {i}");
                assert_eq!(got[..off], want[..n], "packet {i}");
                if let NetRepr::Ipv4(r) = repr.net {
                    assert_eq!(r.ident, i as u16 + 1, "one identification per packet");
                }
            }
        }
    }
}
