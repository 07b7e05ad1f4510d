//! Congestion control through the `Device`: ECN marking of sent packets, the
//! notification point (CNPs for CE-marked packets, their rate limit and
//! bytes), the reaction point fed by received CNPs, and the pacer spacing a
//! rate-limited QP's frames (ROCEV2-DIGEST §6; CASES R29, R30).
//!
//! Oracles: the CNP layout of RoCEv2 Annex A17.9.3 as ROCEV2-DIGEST §6
//! restates it, the ConnectX-4 Lx CNP published in public-vectors.md (A1),
//! and the DCQCN equations worked by hand in the comments.

mod common;

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;

use common::{post_recv, post_write, setup, unhex};
use roce_stack::cc::{CcConfig, Ecn};
use roce_stack::testing::{connect, modify_to_rts, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, Mtu, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType,
    SendWr, WrOpcode,
};
use roce_stack::wire::ext::DethRepr;
use roce_stack::wire::{
    cnp, BthRepr, EthRepr, ExtHeaders, Ipv4Repr, NetInfo, NetRepr, Opcode, PacketRepr, RocePacket,
    UdpChecksum, UdpRepr, VlanTag, ROCEV2_UDP_PORT,
};

/// Set the ECN field of an IPv4 frame to CE (11) and recompute the header
/// checksum (RFC 791 / RFC 1071). The ICRC masks the TOS byte and the
/// checksum (RoCEv2 Annex A17.4), so it stays valid.
fn mark_ce(frame: &mut [u8]) {
    let l3 = if frame[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    };
    assert_eq!(frame[l3] >> 4, 4, "IPv4 frame");
    frame[l3 + 1] |= 0b11;
    frame[l3 + 10] = 0;
    frame[l3 + 11] = 0;
    let mut sum: u32 = frame[l3..l3 + 20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    frame[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// Every frame `dev` has to send at `now`.
fn drain(dev: &mut Device, now: Instant) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 16384];
    let mut out = Vec::new();
    while let Some(n) = dev.poll_transmit(now, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// The CNPs among `frames` (strictly parsed: the ICRC verifies).
fn cnps(frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    frames
        .iter()
        .filter(|f| RocePacket::parse(f).expect("valid RoCE frame").opcode() == Opcode::CNP)
        .cloned()
        .collect()
}

/// An RC SEND ONLY of 8 bytes from side 0 to side 1's QP with `psn`,
/// CE-marked.
fn ce_send(p: &Pair, qpn: u32, psn: u32) -> Vec<u8> {
    let mut f = p.frame(
        0,
        BthRepr::new(Opcode::RC_SEND_ONLY, qpn, psn),
        ExtHeaders::default(),
        &[7; 8],
    );
    mark_ce(&mut f);
    assert_eq!(RocePacket::parse(&f).unwrap().net().ecn(), 3);
    f
}

// ---------------------------------------------------------------------------
// Notification point.
// ---------------------------------------------------------------------------

#[test]
fn np_ce_packets_1us_apart_send_one_cnp() {
    let mut s = setup(9000, &ConnOpts::default(), 4096);
    for i in 0..2 {
        post_recv(&mut s, 1, i, 0, 64);
    }
    let q1 = s.c.qpn[1];
    // side 1's rq_psn = side 0's sq_psn = 0x100 (ConnOpts default).
    let a = ce_send(&s.p, q1, 0x100);
    let b = ce_send(&s.p, q1, 0x101);
    let dev = &mut s.p.dev[1];
    dev.handle_frame(Instant::ZERO, &a);
    let mut sent = cnps(&drain(dev, Instant::ZERO));
    dev.handle_frame(Instant::from_micros(1), &b);
    sent.extend(cnps(&drain(dev, Instant::from_micros(1))));
    // min_time_between_cnps = 4 µs: the second CE packet, 1 µs later, sends
    // nothing.
    assert_eq!(sent.len(), 1);
    let c = dev.counters();
    assert_eq!(c.np_ecn_marked_roce_packets, 2);
    assert_eq!(c.np_cnp_sent, 1);
}

#[test]
fn np_ce_packets_5us_apart_send_two_cnps() {
    let mut s = setup(9000, &ConnOpts::default(), 4096);
    for i in 0..2 {
        post_recv(&mut s, 1, i, 0, 64);
    }
    let q1 = s.c.qpn[1];
    let a = ce_send(&s.p, q1, 0x100);
    let b = ce_send(&s.p, q1, 0x101);
    let dev = &mut s.p.dev[1];
    dev.handle_frame(Instant::ZERO, &a);
    let mut sent = cnps(&drain(dev, Instant::ZERO));
    dev.handle_frame(Instant::from_micros(5), &b);
    sent.extend(cnps(&drain(dev, Instant::from_micros(5))));
    assert_eq!(sent.len(), 2);
    assert_eq!(dev.counters().np_cnp_sent, 2);
}

#[test]
fn np_queues_one_cnp_per_flow_until_sent() {
    // With no interval at all, a flow still has at most one CNP queued:
    // three CE packets before the device is polled give one CNP.
    let mut p = Pair::with_devices(
        [0, 1].map(|i| {
            Device::new(DeviceConfig {
                cc: CcConfig {
                    min_time_between_cnps: Duration::ZERO,
                    ..CcConfig::default()
                },
                ..roce_stack::testing::test_config(i, 9000)
            })
        }),
        Faults::default(),
        1,
    );
    let c = connect(&mut p, &ConnOpts::default());
    let frames: Vec<_> = (0..3).map(|i| ce_send(&p, c.qpn[1], 0x100 + i)).collect();
    for f in &frames {
        p.dev[1].handle_frame(Instant::ZERO, f);
    }
    assert_eq!(cnps(&drain(&mut p.dev[1], Instant::ZERO)).len(), 1);
    // Once it is sent, the next CE packet (same instant) gets its own.
    let f = ce_send(&p, c.qpn[1], 0x103);
    p.dev[1].handle_frame(Instant::ZERO, &f);
    assert_eq!(cnps(&drain(&mut p.dev[1], Instant::ZERO)).len(), 1);
}

#[test]
fn cnp_bytes_follow_annex_a17_9() {
    let mut s = setup(9000, &ConnOpts::default(), 4096);
    post_recv(&mut s, 1, 1, 0, 64);
    let f = ce_send(&s.p, s.c.qpn[1], 0x100);
    s.p.dev[1].handle_frame(Instant::ZERO, &f);
    let out = drain(&mut s.p.dev[1], Instant::ZERO);
    // CNPs go before anything else (here the RC ACK is not requested).
    let cnp_frame = &out[0];
    // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 16 reserved + ICRC 4.
    assert_eq!(cnp_frame.len(), 74);
    let p = RocePacket::parse(cnp_frame).expect("strict parse, ICRC verified");
    let bth = p.bth();
    assert_eq!(bth.opcode, Opcode(0x81));
    assert!(bth.becn);
    assert!(!bth.fecn && !bth.solicited && !bth.migreq && !bth.ack_req);
    assert_eq!(
        (bth.pad_count, bth.tver, bth.pkey, bth.psn),
        (0, 0, 0xFFFF, 0)
    );
    // DestQP = the sender's QP: side 1's dest_qp_num = side 0's QPN.
    assert_eq!(bth.dest_qp, s.c.qpn[0]);
    assert_eq!(cnp::cnp_target(&p), Some(s.c.qpn[0]));
    assert_eq!(p.ext().cnp_pad(), Some([0; 16]));
    assert!(p.payload().is_empty());
    match p.net() {
        NetInfo::Ipv4(i) => {
            assert_eq!(i.src, Ipv4Addr::new(10, 0, 0, 2));
            assert_eq!(i.dst, Ipv4Addr::new(10, 0, 0, 1));
            // cnp_dscp 48, ECT(0) as the ConnectX-4 Lx CNP (TOS 0xC2).
            assert_eq!((i.dscp, i.ecn), (48, 2));
            assert_eq!(i.total_len, 60);
            assert_eq!(i.ttl, 64);
            assert!(i.dont_frag);
        }
        other => panic!("{other:?}"),
    }
    let udp = p.udp().unwrap();
    assert_eq!(
        (udp.src_port, udp.dst_port, udp.len),
        (0, ROCEV2_UDP_PORT, 40)
    );
    assert_eq!(p.l2().src, [2, 0, 0, 0, 0, 2]);
    assert_eq!(p.l2().dst, [2, 0, 0, 0, 0, 1]);
    assert_eq!(p.l2().vlan, None);
    let c = s.p.dev[1].counters();
    assert_eq!((c.np_ecn_marked_roce_packets, c.np_cnp_sent), (1, 1));
}

/// A device at `mac`/`ip` with one RC QP in RTS towards `peer` (QPN
/// `dest_qp`, next-hop `dmac`, optional VLAN tag), expecting PSN `rq_psn`.
fn manual_rc(
    mac: [u8; 6],
    ip: Ipv4Addr,
    peer: Ipv4Addr,
    dmac: [u8; 6],
    vlan: Option<VlanTag>,
    dest_qp: u32,
    rq_psn: u32,
) -> (Device, u32, u32) {
    let mut dev = Device::new(DeviceConfig {
        mac,
        gids: vec![Gid::from_ipv4(ip)],
        netdev_mtu: 9000,
        ..DeviceConfig::default()
    });
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(64);
    let qpn = dev
        .create_qp(
            pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                cap: QpCap::default(),
                sq_sig_all: false,
            },
        )
        .unwrap();
    // QpAttr's defaults for what the test does not set (IBTA 1.7 §10.3.1).
    let o = ConnOpts {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        rd_atomic: 1,
        min_rnr_timer: 12,
        ..ConnOpts::default()
    };
    let av = AddressVector {
        dgid: Gid::from_ipv4(peer),
        dmac,
        hop_limit: 64,
        vlan,
        ..AddressVector::default()
    };
    modify_to_rts(&mut dev, qpn, av, dest_qp, 0, rq_psn, &o).unwrap();
    (dev, pd, qpn)
}

/// A CE-marked RC SEND ONLY from `src` to `dst`, addressed to `qpn`.
fn ce_frame_v4(
    src: (Ipv4Addr, [u8; 6]),
    dst: (Ipv4Addr, [u8; 6]),
    vlan: Option<VlanTag>,
    qpn: u32,
    psn: u32,
) -> Vec<u8> {
    let repr = PacketRepr {
        eth: EthRepr {
            dst: dst.1,
            src: src.1,
            vlan,
        },
        net: NetRepr::Ipv4(Ipv4Repr {
            src: src.0,
            dst: dst.0,
            dscp: 26,
            ecn: 3,
            ttl: 64,
            ident: 1,
            dont_frag: true,
        }),
        udp: UdpRepr {
            src_port: 0xC000,
            dst_port: ROCEV2_UDP_PORT,
            checksum: UdpChecksum::Default,
        },
        bth: BthRepr::new(Opcode::RC_SEND_ONLY, qpn, psn),
        ext: ExtHeaders::default(),
    };
    let mut buf = vec![0u8; 256];
    let n = repr.emit(&mut buf, &[1, 2, 3, 4]).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn cnp_layout_matches_connectx4_lx_vector() {
    // public-vectors.md A1: a CNP captured on a ConnectX-4 Lx, from
    // 10.0.17.1 (7c:fe:90:64:3b:32) to 10.0.18.1 (e4:1d:2d:ab:2b:c2), DestQP
    // 0x000118, IP ID 0x718c, ICRC 82 fd 00 2a.
    let a1 = unhex(concat!(
        "e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a001201",
        "000012b7002800008100ffff40000118000000000000000000000000000000000000",
        "000082fd002a"
    ));
    let me = (
        Ipv4Addr::new(10, 0, 17, 1),
        [0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32],
    );
    let peer = (
        Ipv4Addr::new(10, 0, 18, 1),
        [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2],
    );
    let (mut dev, _, qpn) = manual_rc(me.1, me.0, peer.0, peer.1, None, 0x118, 0x10);
    dev.handle_frame(Instant::ZERO, &ce_frame_v4(peer, me, None, qpn, 0x10));
    let out = cnps(&drain(&mut dev, Instant::ZERO));
    assert_eq!(out.len(), 1);
    let ours = &out[0];
    assert_eq!(ours.len(), a1.len());
    // Byte for byte, except what depends on the sender's IP ID counter: the
    // ID itself (18..20), the IPv4 checksum (24..26) and the ICRC (70..74).
    for (i, (x, y)) in ours.iter().zip(&a1).enumerate() {
        if !matches!(i, 18 | 19 | 24 | 25 | 70..=73) {
            assert_eq!(x, y, "byte {i}: ours {x:#04x}, ConnectX {y:#04x}");
        }
    }
    // With the captured IP ID the rebuilt frame is the capture exactly,
    // ICRC included.
    let p = RocePacket::parse(ours).unwrap();
    let mut repr = PacketRepr::from_packet(&p);
    match &mut repr.net {
        NetRepr::Ipv4(i) => i.ident = 0x718c,
        other => panic!("{other:?}"),
    }
    let mut buf = vec![0u8; 128];
    let n = repr.emit(&mut buf, p.payload()).unwrap();
    assert_eq!(&buf[..n], &a1[..]);
}

#[test]
fn data_and_cnp_priorities_on_a_vlan_path() {
    // The address vector carries VLAN 100 with PCP 0: data frames get the
    // configured data priority 3, CNPs cnp_802p_prio 6; the VID is kept.
    let me = (Ipv4Addr::new(10, 0, 0, 2), [2, 0, 0, 0, 0, 2]);
    let peer = (Ipv4Addr::new(10, 0, 0, 1), [2, 0, 0, 0, 0, 1]);
    let tag = VlanTag {
        pcp: 0,
        dei: false,
        vid: 100,
    };
    let (mut dev, pd, qpn) = manual_rc(me.1, me.0, peer.0, peer.1, Some(tag), 0x55, 0x10);
    let mr = dev
        .reg_mr(pd, vec![9; 64], 0, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let sge = [roce_stack::verbs::Sge {
        addr: 0,
        length: 64,
        lkey: mr.lkey,
    }];
    dev.post_send(qpn, &SendWr::new(1, WrOpcode::Send, &sge))
        .unwrap();
    let data = drain(&mut dev, Instant::ZERO);
    let d = RocePacket::parse(&data[0]).unwrap();
    assert_eq!(d.l2().vlan, Some(VlanTag { pcp: 3, ..tag }));
    assert_eq!((d.net().dscp(), d.net().ecn()), (26, 2));
    dev.handle_frame(Instant::ZERO, &ce_frame_v4(peer, me, Some(tag), qpn, 0x10));
    let out = cnps(&drain(&mut dev, Instant::ZERO));
    let c = RocePacket::parse(&out[0]).unwrap();
    assert_eq!(c.l2().vlan, Some(VlanTag { pcp: 6, ..tag }));
    assert_eq!(c.net().dscp(), 48);
    assert_eq!(c.bth().dest_qp, 0x55);
}

#[test]
fn ud_cnp_goes_to_the_deth_source_qp() {
    let o = ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    };
    let mut p = Pair::new(9000, Faults::default(), 1);
    let c = connect(&mut p, &o);
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey: o.qkey,
            rsvd: 0,
            src_qp: 0x77,
        }),
        ..ExtHeaders::default()
    };
    let mut f = p.frame(
        0,
        BthRepr::new(Opcode::UD_SEND_ONLY, c.qpn[1], 0),
        ext,
        &[1; 16],
    );
    mark_ce(&mut f);
    p.dev[1].handle_frame(Instant::ZERO, &f);
    let out = cnps(&drain(&mut p.dev[1], Instant::ZERO));
    assert_eq!(out.len(), 1);
    let cnp = RocePacket::parse(&out[0]).unwrap();
    assert_eq!(cnp.bth().dest_qp, 0x77);
    assert_eq!(cnp.net().dst(), Ipv4Addr::new(10, 0, 0, 1));
    assert_eq!(cnp.l2().dst, [2, 0, 0, 0, 0, 1]);
}

#[test]
fn np_disabled_counts_but_sends_nothing() {
    let mut p = Pair::with_devices(
        [0, 1].map(|i| {
            Device::new(DeviceConfig {
                cc: CcConfig {
                    np_enabled: false,
                    ..CcConfig::default()
                },
                ..roce_stack::testing::test_config(i, 9000)
            })
        }),
        Faults::default(),
        1,
    );
    let c = connect(&mut p, &ConnOpts::default());
    let f = ce_send(&p, c.qpn[1], 0x100);
    p.dev[1].handle_frame(Instant::ZERO, &f);
    assert!(cnps(&drain(&mut p.dev[1], Instant::ZERO)).is_empty());
    let k = p.dev[1].counters();
    assert_eq!((k.np_ecn_marked_roce_packets, k.np_cnp_sent), (1, 0));
}

// ---------------------------------------------------------------------------
// Received CNPs.
// ---------------------------------------------------------------------------

fn cnp_to(p: &Pair, from: usize, dest_qp: u32) -> Vec<u8> {
    p.frame(from, cnp::bth(dest_qp), cnp::ext(), &[])
}

#[test]
fn cnp_for_unknown_qp_is_counted_and_dropped() {
    let mut p = Pair::new(9000, Faults::default(), 1);
    let c = connect(&mut p, &ConnOpts::default());
    let f = cnp_to(&p, 1, 0x00AB_CDEF);
    p.dev[0].handle_frame(Instant::ZERO, &f);
    let k = p.dev[0].counters();
    assert_eq!(k.rx_cnp, 1);
    assert_eq!(k.rx_cnp_qp_not_found, 1);
    assert_eq!((k.rp_cnp_handled, k.rp_cnp_ignored), (0, 0));
    assert_eq!(p.dev[0].qp_rate_mbps(c.qpn[0]), None);
}

#[test]
fn cnp_ignored_when_rp_disabled_or_qp_not_sending() {
    // RP disabled.
    let mut p = Pair::with_devices(
        [0, 1].map(|i| {
            Device::new(DeviceConfig {
                cc: CcConfig {
                    rp_enabled: false,
                    ..CcConfig::default()
                },
                ..roce_stack::testing::test_config(i, 9000)
            })
        }),
        Faults::default(),
        1,
    );
    let c = connect(&mut p, &ConnOpts::default());
    let f = cnp_to(&p, 1, c.qpn[0]);
    p.dev[0].handle_frame(Instant::ZERO, &f);
    assert_eq!(p.dev[0].counters().rp_cnp_ignored, 1);
    assert_eq!(p.dev[0].qp_rate_mbps(c.qpn[0]), None);
    // A QP in RTR (receives, does not send).
    let mut p = Pair::new(9000, Faults::default(), 1);
    let c = connect(&mut p, &ConnOpts::default());
    let d = &mut p.dev[0];
    let pd = c.pd[0];
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: c.cq[0],
        recv_cq: c.cq[0],
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let q = d.create_qp(pd, &init).unwrap();
    let f = cnp_to(&p, 1, q);
    p.dev[0].handle_frame(Instant::ZERO, &f);
    let k = p.dev[0].counters();
    assert_eq!((k.rp_cnp_ignored, k.rp_cnp_handled), (1, 0));
    // The connected RTS QP takes it.
    let f = cnp_to(&p, 1, c.qpn[0]);
    p.dev[0].handle_frame(Instant::ZERO, &f);
    assert_eq!(p.dev[0].counters().rp_cnp_handled, 1);
    // Shipping defaults: 100 000·1025/2048 (see dcqcn_rp.rs, R30).
    assert_eq!(p.dev[0].qp_rate_mbps(c.qpn[0]), Some(50_048.828125));
}

#[test]
fn r22_qp_reset_forgets_congestion_state() {
    let mut p = Pair::new(9000, Faults::default(), 1);
    let c = connect(&mut p, &ConnOpts::default());
    let f = cnp_to(&p, 1, c.qpn[0]);
    p.dev[0].handle_frame(Instant::ZERO, &f);
    assert!(p.dev[0].qp_rate_mbps(c.qpn[0]).is_some());
    // The RP's increase timer is armed (300 µs).
    assert_eq!(p.dev[0].poll_timeout(), Some(Instant::from_micros(300)));
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    p.dev[0]
        .modify_qp(c.qpn[0], &reset, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(p.dev[0].qp_rate_mbps(c.qpn[0]), None);
    assert!(!p.dev[0].reaction_point(c.qpn[0]).unwrap().is_active());
    assert_eq!(p.dev[0].poll_timeout(), None);
}

// ---------------------------------------------------------------------------
// ECN marking of sent packets.
// ---------------------------------------------------------------------------

#[test]
fn data_packets_are_ecn_capable() {
    // Default: DSCP 26, ECT(0).
    let mut s = setup(9000, &ConnOpts::default(), 4096);
    post_write(&mut s, 1, 0, 64, 0);
    let out = drain(&mut s.p.dev[0], Instant::ZERO);
    let d = RocePacket::parse(&out[0]).unwrap();
    assert_eq!((d.net().dscp(), d.net().ecn()), (26, 2));
    // Configured: DSCP 10 with ECT(1), and Not-ECT.
    for (ecn, bits) in [(Ecn::Ect1, 1), (Ecn::NotEct, 0)] {
        let mut p = Pair::with_devices(
            [0, 1].map(|i| {
                Device::new(DeviceConfig {
                    cc: CcConfig {
                        data_dscp: 10,
                        data_ecn: ecn,
                        ..CcConfig::default()
                    },
                    ..roce_stack::testing::test_config(i, 9000)
                })
            }),
            Faults::default(),
            1,
        );
        let c = connect(&mut p, &ConnOpts::default());
        let wr = SendWr {
            send_flags: roce_stack::verbs::SendFlags::INLINE,
            inline_data: &[1, 2, 3],
            ..SendWr::new(1, WrOpcode::Send, &[])
        };
        p.dev[0].post_send(c.qpn[0], &wr).unwrap();
        let out = drain(&mut p.dev[0], Instant::ZERO);
        let d = RocePacket::parse(&out[0]).unwrap();
        assert_eq!((d.net().dscp(), d.net().ecn()), (10, bits));
    }
}

// ---------------------------------------------------------------------------
// End to end: CE marks → CNP → rate cut → paced transmissions.
// ---------------------------------------------------------------------------

/// Step `p` once; frames side 0 sent in that step (dropped by the filter)
/// go on the wire again via `inject`, CE-marked if `mark`. Returns the
/// originals with their times, and whether anything is left to happen.
fn step_marking(p: &mut Pair, next: &mut usize, mark: bool) -> (Vec<(Instant, Vec<u8>)>, bool) {
    let more = p.step();
    let new: Vec<(Instant, Vec<u8>)> = p.captured()[*next..].to_vec();
    let mut from0 = Vec::new();
    for (t, f) in new {
        if f[6..12] == [2, 0, 0, 0, 0, 1] {
            let mut g = f.clone();
            if mark {
                mark_ce(&mut g);
            }
            p.inject(0, &g);
            from0.push((t, f));
        }
    }
    *next = p.captured().len();
    (from0, more)
}

#[test]
fn r29_r30_e2e_ce_marks_cut_the_requester_rate_and_pace_it() {
    let o = ConnOpts {
        mtu: Mtu::Mtu4096,
        ..ConnOpts::default()
    };
    let mut s = setup(9000, &o, 64 * 1024);
    let q0 = s.c.qpn[0];
    // Side 0's frames are taken off the wire and re-injected (marked or not)
    // by `step_marking`; 1 µs one-way delay.
    s.p.drop_filter = Some(Box::new(|from, _, _| from == 0));
    let mut next = 0;
    let mut sent0: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();

    // Phase 1: one 4096-byte WRITE at t = 0, CE-marked on the way. Side 1
    // gets it at 1 µs and sends a CNP; side 0 gets the CNP at 2 µs.
    post_write(&mut s, 1, 0, 4096, 0);
    while s.p.dev[0].counters().rp_cnp_handled == 0 {
        let (f, more) = step_marking(&mut s.p, &mut next, true);
        sent0.extend(f);
        assert!(
            more && s.p.now < Instant::from_millis(1),
            "no CNP came back"
        );
    }
    assert_eq!(s.p.now, Instant::from_micros(2));
    let k = s.p.dev[1].counters();
    assert_eq!((k.np_ecn_marked_roce_packets, k.np_cnp_sent), (1, 1));
    // First CNP with the shipping defaults: R_C = R_T = 100 000, then
    // R_C = 100 000·(1 − (1023/1024)/2) = 50 048.828125 Mbit/s.
    let rate = 50_048.828125;
    assert_eq!(s.p.dev[0].qp_rate_mbps(q0), Some(rate));
    let rp = s.p.dev[0].reaction_point(q0).unwrap();
    assert_eq!(rp.target_rate(), 100_000.0);

    // Phase 2: 8 × 4096 bytes unmarked. The pacer spaces the frames by
    // bytes·8/rate: 4170 B (WRITE FIRST: 14 + 20 + 8 + 12 + RETH 16 + 4096
    // + ICRC 4) → 666.55 ns, 4154 B (MIDDLE/LAST) → 663.99 ns. The byte
    // counter (B = 32767) fires only after the eighth frame (4170 + 7·4154
    // = 33248 B; seven make 29094), so the rate is constant meanwhile.
    sent0.clear();
    let t0 = s.p.now;
    post_write(&mut s, 2, 0, 8 * 4096, 4096);
    // After the first frame the QP waits for its pacer, and the device's
    // next deadline is that release: t0 + 666.549 ns − the 1 ns tolerance,
    // rounded up = t0 + 666 ns.
    while sent0.is_empty() {
        let (f, _) = step_marking(&mut s.p, &mut next, false);
        sent0.extend(f);
    }
    assert_eq!(sent0[0].0, t0);
    let release = s.p.dev[0].qp_pacer_release(q0);
    assert_eq!(release, Some(Instant(t0.as_nanos() + 666)));
    assert_eq!(s.p.dev[0].poll_timeout(), release);
    while sent0.len() < 8 {
        let (f, more) = step_marking(&mut s.p, &mut next, false);
        sent0.extend(f);
        assert!(more && s.p.now < Instant::from_millis(1));
    }
    let frames: Vec<_> = sent0.iter().collect();
    for w in frames.windows(2) {
        let (ta, fa) = (w[0].0, &w[0].1);
        let tb = w[1].0;
        let gap = (tb.as_nanos() - ta.as_nanos()) as f64;
        let want = fa.len() as f64 * 8000.0 / rate;
        assert!(
            (gap - want).abs() <= 1.0,
            "gap {gap} ns after a {}-byte frame, want {want:.3} ns",
            fa.len()
        );
    }
    assert_eq!(frames[0].1.len(), 4170);
    assert!(frames[1..].iter().all(|(_, f)| f.len() == 4154));
    // The eighth frame completed the first byte-counter stage (F = 1, timer
    // stage 0 → additive): R_T = min(100 005, 100 000) = 100 000,
    // R_C = (100 000 + 50 048.828125)/2 = 75 024.4140625.
    let rp = s.p.dev[0].reaction_point(q0).unwrap();
    assert_eq!(rp.byte_stage(), 1);
    assert_eq!(s.p.dev[0].qp_rate_mbps(q0), Some(75_024.414_062_5));

    // The WRITE lands intact.
    s.p.drop_filter = None;
    assert!(s.p.run_until(Duration::from_millis(5), |p| p.dev[1]
        .mr(s.mr[1].lkey)
        .unwrap()
        .as_slice()[4096..4096 + 8 * 4096]
        == p.dev[0].mr(s.mr[0].lkey).unwrap().as_slice()[..8 * 4096]));
}

#[test]
fn paced_qp_waits_for_its_release_and_poll_transmit_alone_releases_it() {
    let mut s = setup(
        9000,
        &ConnOpts {
            mtu: Mtu::Mtu4096,
            ..ConnOpts::default()
        },
        64 * 1024,
    );
    let q0 = s.c.qpn[0];
    // No CNP yet: unlimited, no pacer involved.
    assert_eq!(s.p.dev[0].qp_rate_mbps(q0), None);
    let f = cnp_to(&s.p, 1, q0);
    s.p.dev[0].handle_frame(Instant::ZERO, &f);
    // 100 000·1025/2048 Mbit/s (shipping defaults, first CNP).
    assert_eq!(s.p.dev[0].qp_rate_mbps(q0), Some(50_048.828125));
    post_write(&mut s, 1, 0, 3 * 4096, 0);
    let dev = &mut s.p.dev[0];
    let mut buf = vec![0u8; 16384];
    // The first frame (WRITE FIRST, 4170 bytes) leaves at once ...
    assert_eq!(dev.poll_transmit(Instant::ZERO, &mut buf), Some(4170));
    // ... the second waits 4170·8/50 048.828125 µs = 666.549 ns, released
    // 1 ns early (clock resolution) and rounded up to the nanosecond: 666 ns.
    assert_eq!(dev.poll_transmit(Instant::ZERO, &mut buf), None);
    assert_eq!(dev.qp_pacer_release(q0), Some(Instant(666)));
    assert_eq!(dev.poll_timeout(), Some(Instant(666)));
    assert_eq!(dev.poll_transmit(Instant(665), &mut buf), None);
    // poll_transmit at the release time sends without handle_timeout.
    assert_eq!(dev.poll_transmit(Instant(666), &mut buf), Some(4154));
    assert_eq!(dev.qp_pacer_release(q0), None);
    assert_eq!(dev.poll_transmit(Instant(666), &mut buf), None);
    // tat = 666.549 + 4154·8/50 048.828125 (663.992) = 1330.541 ns → 1330.
    assert_eq!(dev.poll_timeout(), Some(Instant(1330)));
    dev.handle_timeout(Instant(1330));
    assert_eq!(dev.poll_transmit(Instant(1330), &mut buf), Some(4154));
}

#[test]
fn paced_qp_acknowledges_without_waiting() {
    let mut s = setup(
        9000,
        &ConnOpts {
            mtu: Mtu::Mtu4096,
            ..ConnOpts::default()
        },
        64 * 1024,
    );
    let (q0, q1) = (s.c.qpn[0], s.c.qpn[1]);
    let f = cnp_to(&s.p, 1, q0);
    s.p.dev[0].handle_frame(Instant::ZERO, &f);
    post_write(&mut s, 1, 0, 2 * 4096, 0);
    let mut buf = vec![0u8; 16384];
    assert!(s.p.dev[0].poll_transmit(Instant::ZERO, &mut buf).is_some());
    // The pacer holds the WRITE's second packet until 666 ns; meanwhile side
    // 1 writes to side 0 and asks for an ACK (side 1's sq_psn 0x200).
    let reth = roce_stack::wire::ext::RethRepr {
        va: 0,
        rkey: s.mr[0].rkey,
        dma_len: 8,
    };
    let w = common::req_frame(
        &s.p,
        1,
        q0,
        Opcode::RC_RDMA_WRITE_ONLY,
        0x200,
        true,
        Some(reth),
        &[5; 8],
    );
    let dev = &mut s.p.dev[0];
    dev.handle_frame(Instant(10), &w);
    let n = dev.poll_transmit(Instant(10), &mut buf).expect("the ACK");
    let ack = RocePacket::parse(&buf[..n]).unwrap();
    assert_eq!(ack.opcode(), Opcode::RC_ACKNOWLEDGE);
    assert_eq!(ack.bth().dest_qp, q1);
    // The data still waits.
    assert_eq!(dev.poll_transmit(Instant(10), &mut buf), None);
    assert_eq!(dev.poll_timeout(), Some(Instant(666)));
}
