//! Property tests of the wire layer:
//!
//! - build -> parse is the identity (and parse -> rebuild gives the same bytes)
//!   for random headers, every supported opcode with random extension headers,
//!   payloads of 0..=4096 bytes, IPv4 / IPv6 / RoCEv1, with and without VLAN;
//! - random bytes (and mutated valid frames) never make `classify`,
//!   `RocePacket::parse`, `parse_with` or `MacControl::parse` panic;
//! - flipping any single bit of an ICRC-covered, unmasked byte makes strict
//!   parsing fail; flipping a masked bit keeps the ICRC valid;
//! - cutting a frame short never yields an ICRC.
//!
//! Cases per property: 256 by default (the suite stays well under a minute in
//! debug builds); set `PROPTEST_CASES` to run more.

#[path = "common/arb.rs"]
mod arb;
mod common;

use arb::{arb_net, cases};
use proptest::prelude::*;
use roce_stack::wire::bth::BthRepr;
use roce_stack::wire::ext::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, FethRepr, RdethRepr, RethRepr, XrcethRepr,
};
use roce_stack::wire::grh::GrhRepr;
use roce_stack::wire::pfc::MacControl;
use roce_stack::wire::{
    classify, Error, EthRepr, ExtHeader, ExtHeaders, Frame, GrhPacket, IcrcStatus, NetInfo,
    NetRepr, Opcode, PacketRepr, ParseMode, RocePacket, UdpChecksum, UdpRepr, VlanTag,
};

const MASK_24: u32 = 0x00FF_FFFF;

// ---------------------------------------------------------------------------
// Strategies.
// ---------------------------------------------------------------------------

fn arb_mac() -> impl Strategy<Value = [u8; 6]> {
    any::<[u8; 6]>()
}

fn arb_vlan() -> impl Strategy<Value = Option<VlanTag>> {
    prop::option::of(
        (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    )
}

fn arb_udp() -> impl Strategy<Value = UdpRepr> {
    (
        any::<u16>(),
        prop_oneof![
            Just(UdpChecksum::Default),
            Just(UdpChecksum::Zero),
            Just(UdpChecksum::Compute),
            any::<u16>().prop_map(UdpChecksum::Value),
        ],
    )
        .prop_map(|(src_port, checksum)| UdpRepr {
            src_port,
            dst_port: 4791,
            checksum,
        })
}

fn supported() -> Vec<Opcode> {
    Opcode::all_supported().collect()
}

/// A BTH for `op` with every other field random (TVer 0: anything else is
/// dropped by design).
fn arb_bth(op: Opcode) -> impl Strategy<Value = BthRepr> {
    (
        any::<[bool; 5]>(),
        any::<u16>(),
        0u8..64,
        0u32..=MASK_24,
        0u8..128,
        0u32..=MASK_24,
    )
        .prop_map(move |(f, pkey, resv6a, dest_qp, resv7, psn)| BthRepr {
            opcode: op,
            solicited: f[0],
            migreq: f[1],
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: f[2],
            becn: f[3],
            resv6a,
            dest_qp,
            ack_req: f[4],
            resv7,
            psn,
        })
}

/// Random values for every extension header; `for_opcode` keeps the ones the
/// opcode carries.
#[derive(Debug, Clone)]
struct ExtValues {
    w: [u64; 12],
    b: [u8; 4],
    cnp: [u8; 16],
}

fn arb_ext_values() -> impl Strategy<Value = ExtValues> {
    (any::<[u64; 12]>(), any::<[u8; 4]>(), any::<[u8; 16]>()).prop_map(|(w, b, cnp)| ExtValues {
        w,
        b,
        cnp,
    })
}

impl ExtValues {
    fn for_opcode(&self, op: Opcode) -> ExtHeaders {
        let w = &self.w;
        let mut e = ExtHeaders::default();
        for h in op.info().hdrs.iter() {
            match h {
                ExtHeader::Rdeth => {
                    e.rdeth = Some(RdethRepr {
                        rsvd: self.b[0],
                        ee_context: w[0] as u32 & MASK_24,
                    })
                }
                ExtHeader::Deth => {
                    e.deth = Some(DethRepr {
                        qkey: w[1] as u32,
                        rsvd: self.b[1],
                        src_qp: (w[1] >> 32) as u32 & MASK_24,
                    })
                }
                ExtHeader::Xrceth => {
                    e.xrceth = Some(XrcethRepr {
                        rsvd: self.b[2],
                        xrc_srq: w[2] as u32 & MASK_24,
                    })
                }
                ExtHeader::Feth => e.feth = Some(FethRepr { raw: w[3] as u32 }),
                ExtHeader::Reth => {
                    e.reth = Some(RethRepr {
                        va: w[4],
                        rkey: w[5] as u32,
                        dma_len: (w[5] >> 32) as u32,
                    })
                }
                ExtHeader::AtomicEth => {
                    e.atomic_eth = Some(AtomicEthRepr {
                        va: w[6],
                        rkey: w[7] as u32,
                        swap_add: w[8],
                        compare: w[9],
                    })
                }
                ExtHeader::Aeth => {
                    e.aeth = Some(AethRepr {
                        syndrome: self.b[3],
                        msn: w[10] as u32 & MASK_24,
                    })
                }
                ExtHeader::AtomicAckEth => {
                    e.atomic_ack_eth = Some(AtomicAckEthRepr { orig: w[11] })
                }
                ExtHeader::ImmDt => e.immdt = Some((w[10] >> 32) as u32),
                ExtHeader::Ieth => e.ieth = Some((w[7] >> 32) as u32),
                ExtHeader::CnpPad => e.cnp_pad = Some(self.cnp),
            }
        }
        e
    }
}

/// A whole packet description plus its payload.
fn arb_packet(
    net: impl Strategy<Value = NetRepr>,
    max_payload: usize,
) -> impl Strategy<Value = (PacketRepr, Vec<u8>)> {
    (
        prop::sample::select(supported()),
        net,
        arb_mac(),
        arb_mac(),
        arb_vlan(),
        arb_udp(),
        arb_ext_values(),
        prop::collection::vec(any::<u8>(), 0..=max_payload),
    )
        .prop_flat_map(|(op, net, dst, src, vlan, udp, ext, payload)| {
            arb_bth(op).prop_map(move |bth| {
                (
                    PacketRepr {
                        eth: EthRepr { dst, src, vlan },
                        net,
                        udp,
                        bth,
                        ext: ext.for_opcode(op),
                    },
                    payload.clone(),
                )
            })
        })
}

fn l2_len(r: &PacketRepr) -> usize {
    if r.eth.vlan.is_some() {
        18
    } else {
        14
    }
}

/// Offsets (from the IP header / GRH) and bit masks of the ICRC-masked fields.
fn masked_bits(net: &NetRepr) -> Vec<(usize, u8)> {
    match net {
        // TOS (DSCP + ECN), TTL, header checksum, UDP checksum, BTH byte 4.
        NetRepr::Ipv4(_) => vec![
            (1, 0xFF),
            (8, 0xFF),
            (10, 0xFF),
            (11, 0xFF),
            (26, 0xFF),
            (27, 0xFF),
            (32, 0xFF),
        ],
        // Traffic class, flow label, hop limit, UDP checksum, BTH byte 4.
        NetRepr::Ipv6(_) => vec![
            (0, 0x0F),
            (1, 0xFF),
            (2, 0xFF),
            (3, 0xFF),
            (7, 0xFF),
            (46, 0xFF),
            (47, 0xFF),
            (52, 0xFF),
        ],
        NetRepr::Grh(_) => vec![
            (0, 0x0F),
            (1, 0xFF),
            (2, 0xFF),
            (3, 0xFF),
            (7, 0xFF),
            (44, 0xFF),
        ],
    }
}

// ---------------------------------------------------------------------------
// Properties.
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    /// build -> parse is the identity; parse -> build gives the same bytes.
    #[test]
    fn build_parse_identity((r, payload) in arb_packet(arb_net(), 4096)) {
        let frame = common::emit(&r, &payload);
        let p = RocePacket::parse(&frame).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let pad = (4 - payload.len() % 4) % 4;

        prop_assert_eq!(p.l2().dst, r.eth.dst);
        prop_assert_eq!(p.l2().src, r.eth.src);
        prop_assert_eq!(p.l2().vlan, r.eth.vlan);
        prop_assert_eq!(p.bth(), BthRepr { pad_count: pad as u8, ..r.bth });
        prop_assert_eq!(p.pad() as usize, pad);
        prop_assert_eq!(p.ext().to_headers(), r.ext);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(p.declared_payload_len(), payload.len());
        let transport_len = 12 + r.bth.opcode.info().hdr_len as usize + payload.len() + pad + 4;
        match (p.net(), r.net) {
            (NetInfo::Ipv4(i), NetRepr::Ipv4(w)) => {
                prop_assert_eq!(
                    (i.src, i.dst, i.dscp, i.ecn, i.ttl, i.ident, i.dont_frag),
                    (w.src, w.dst, w.dscp, w.ecn, w.ttl, w.ident, w.dont_frag)
                );
                prop_assert_eq!(i.total_len as usize, 20 + 8 + transport_len);
            }
            (NetInfo::Ipv6(i), NetRepr::Ipv6(w)) => {
                prop_assert_eq!(
                    (i.src, i.dst, i.dscp, i.ecn, i.flow_label, i.hop_limit),
                    (w.src, w.dst, w.dscp, w.ecn, w.flow_label, w.hop_limit)
                );
                prop_assert_eq!(i.payload_len as usize, 8 + transport_len);
            }
            (NetInfo::Grh(g), NetRepr::Grh(w)) => {
                prop_assert_eq!(g, GrhRepr { payload_len: transport_len as u16, ..w });
            }
            (got, want) => prop_assert!(false, "{:?} from {:?}", got, want),
        }
        match r.net {
            NetRepr::Grh(_) => prop_assert_eq!(p.udp(), None),
            _ => {
                let u = p.udp().unwrap();
                prop_assert_eq!((u.src_port, u.dst_port), (r.udp.src_port, 4791));
                prop_assert_eq!(u.len as usize, 8 + transport_len);
                match (r.udp.checksum, r.net) {
                    (UdpChecksum::Zero, _) | (UdpChecksum::Default, NetRepr::Ipv4(_)) => {
                        prop_assert_eq!(u.checksum, 0)
                    }
                    (UdpChecksum::Value(v), _) => prop_assert_eq!(u.checksum, v),
                    _ => prop_assert_ne!(u.checksum, 0),
                }
            }
        }
        // Rebuilding from the parsed fields gives the same bytes.
        let again = common::emit(&PacketRepr::from_packet(&p), p.payload());
        prop_assert_eq!(again, frame);
    }

    /// Random bytes never panic any parser.
    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = classify(&bytes);
        let _ = RocePacket::parse(&bytes);
        let _ = RocePacket::parse_with(&bytes, ParseMode::Lenient).map(|p| {
            (p.icrc_status(), p.computed_icrc(), p.declared_payload_len())
        });
        let _ = MacControl::parse(&bytes);
        let _ = GrhPacket::new_checked(&bytes[..]).and_then(|g| GrhRepr::parse(&g));
    }

    /// Random bytes behind a plausible Ethernet header (so the parsers get past
    /// the EtherType) never panic either.
    #[test]
    fn random_bytes_after_ethertype_never_panic(
        ethertype in prop::sample::select(vec![0x0800u16, 0x86DD, 0x8915, 0x8808, 0x0806, 0x8100]),
        inner in prop::sample::select(vec![0x0800u16, 0x86DD, 0x8915, 0x8808]),
        ip_like in any::<bool>(),
        mut body in prop::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut f = vec![0x01, 0x80, 0xC2, 0, 0, 1, 2, 0, 0, 0, 0, 1];
        f.extend_from_slice(&ethertype.to_be_bytes());
        if ethertype == 0x8100 {
            f.extend_from_slice(&[0x60, 0x64]);
            f.extend_from_slice(&inner.to_be_bytes());
        }
        if ip_like && body.len() >= 48 {
            // Make the IP/UDP checks pass more often: version, UDP, port 4791.
            body[0] = if ethertype == 0x86DD || inner == 0x86DD { 0x60 } else { 0x45 };
            body[6] = 17;
            body[9] = 17;
            body[22] = 0x12;
            body[23] = 0xB7;
            body[42] = 0x12;
            body[43] = 0xB7;
        }
        f.extend(body);
        let _ = classify(&f);
        let _ = RocePacket::parse(&f);
        if let Ok(p) = RocePacket::parse_with(&f, ParseMode::Lenient) {
            let _ = (p.icrc_status(), p.computed_icrc(), p.declared_payload_len());
        }
        let _ = MacControl::parse(&f);
    }

    /// Valid frames with random bytes overwritten and a random cut never panic,
    /// and strict parsing accepts only frames whose ICRC matches.
    #[test]
    fn mutated_frames_never_panic(
        (r, payload) in arb_packet(arb_net(), 64),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut frame = common::emit(&r, &payload);
        for (i, v) in edits {
            let i = i.index(frame.len());
            frame[i] = v;
        }
        let len = cut.index(frame.len() + 1);
        let f = &frame[..len];
        let _ = classify(f);
        if let Ok(p) = RocePacket::parse(f) {
            prop_assert_eq!(p.icrc_status(), IcrcStatus::Ok);
        }
        if let Ok(p) = RocePacket::parse_with(f, ParseMode::Lenient) {
            let _ = (p.icrc_status(), p.computed_icrc(), p.declared_payload_len());
        }
    }

    /// Flipping any single bit the ICRC covers and does not mask makes strict
    /// parsing fail; flipping a masked bit keeps the packet valid.
    #[test]
    fn single_bit_flips((r, payload) in arb_packet(arb_net(), 48)) {
        let frame = common::emit(&r, &payload);
        let l2 = l2_len(&r);
        let original = RocePacket::parse(&frame).unwrap();
        let end = l2 + original.icrc_region().len() + 4; // through the ICRC
        let masked = masked_bits(&r.net);
        let is_ipv4 = matches!(r.net, NetRepr::Ipv4(_));
        for at in l2..end {
            let off = at - l2;
            let mask = masked.iter().find(|(o, _)| *o == off).map_or(0, |(_, m)| *m);
            for bit in 0..8 {
                let b = 1u8 << bit;
                let mut f = frame.clone();
                f[at] ^= b;
                let ipv4_csum = is_ipv4 && (off == 10 || off == 11);
                if is_ipv4 && off < 20 && !ipv4_csum {
                    // Keep the IPv4 header checksum valid, so only the ICRC
                    // (or a length/version check) can catch the flip.
                    common::fix_ipv4_checksum(&mut f[l2..]);
                }
                let res = RocePacket::parse(&f);
                if ipv4_csum {
                    prop_assert_eq!(res.err(), Some(Error::Ipv4BadChecksum));
                } else if mask & b != 0 {
                    let p = res.map_err(|e| {
                        TestCaseError::fail(format!("masked flip at {off} bit {bit}: {e:?}"))
                    })?;
                    prop_assert_eq!(p.icrc(), original.icrc());
                    prop_assert_eq!(p.bth().psn, original.bth().psn);
                    prop_assert_eq!(p.payload(), original.payload());
                    prop_assert_eq!(p.ext(), original.ext());
                } else {
                    prop_assert!(res.is_err(), "unmasked flip at {} bit {} accepted", off, bit);
                }
            }
        }
    }

    /// A frame cut short anywhere is never accepted and never shows an ICRC.
    #[test]
    fn truncated_frames_never_show_an_icrc(
        (r, payload) in arb_packet(arb_net(), 600),
        cut in any::<prop::sample::Index>(),
    ) {
        let frame = common::emit(&r, &payload);
        let p = RocePacket::parse(&frame).unwrap();
        // The packet proper ends at the ICRC; anything after is Ethernet padding.
        let end = l2_len(&r) + p.icrc_region().len() + 4;
        let len = cut.index(end);
        let f = &frame[..len];
        prop_assert!(RocePacket::parse(f).is_err());
        if let Ok(q) = RocePacket::parse_with(f, ParseMode::Lenient) {
            prop_assert_eq!(q.icrc(), None);
            prop_assert_eq!(q.icrc_status(), IcrcStatus::Truncated);
        }
        match classify(f) {
            Frame::Roce(q) => prop_assert_eq!(q.icrc(), None),
            Frame::BadRoce(..) | Frame::Other(_) => {}
            other => prop_assert!(false, "{:?}", other),
        }
    }

    /// Appending bytes after the packet (FCS, padding) changes nothing.
    #[test]
    fn trailing_bytes_ignored(
        (r, payload) in arb_packet(arb_net(), 256),
        trailer in prop::collection::vec(any::<u8>(), 1..32),
    ) {
        let frame = common::emit(&r, &payload);
        let mut longer = frame.clone();
        longer.extend_from_slice(&trailer);
        let p = RocePacket::parse(&frame).unwrap();
        let q = RocePacket::parse(&longer).unwrap();
        prop_assert_eq!(p, q);
    }
}
