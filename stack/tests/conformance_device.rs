//! Issue 11 §4, device and requester conformance: the destination MAC and
//! VLAN of received frames, a named counter for every frame that is not
//! taken, the AETH MSN checks of the requester, and the QP state and
//! counters the API exposes.
//!
//! Oracles, none of them our own output:
//! - destination MAC: RFC 1122 §3.3.6 (a host discards a unicast datagram
//!   that arrived as link-layer broadcast) and Linux `ip_rcv_core`, which
//!   drops `PACKET_OTHERHOST` frames (a unicast MAC not the interface's)
//!   before rxe's UDP tunnel ever sees them;
//! - VLAN: Linux delivers a tagged frame only to the VLAN netdev of its VID
//!   (a frame with a VID nobody configured becomes `PACKET_OTHERHOST`), and
//!   rxe matches the destination GID only among the GIDs of the netdev the
//!   frame arrived on (`rxe_match_dgid`); VID 0 is a priority tag, not a
//!   VLAN (IEEE 802.1Q §9.6);
//! - MSN: starts at 0 (rxe `rxe_qp_init_resp`; MindShare, *InfiniBand
//!   Network Architecture* ch. 17, "Initial State of MSN and SSN") and grows
//!   by one per completed message (ROCEV2-DIGEST §5 "MSN");
//! - QP state: rxe `rxe_qp_to_attr` reports `sq_psn = qp->req.psn` and
//!   `rq_psn = qp->resp.psn`, the live PSNs `rdma res show qp` prints as
//!   `sq-psn` / `rq-psn`; PSNs per message from IBTA segmentation
//!   (`max(1, ceil(len / PMTU))`, ROCEV2-DIGEST §5);
//! - `rdma_recvs` / `rdma_sends`: rxe increments them in the responder's and
//!   the completer's `do_complete` (every successful receive completion;
//!   every SEND WQE).

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use common::*;
use roce_stack::testing::{connect, test_config, ConnOpts, Faults, Pair};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, Mtu, QpAttr, QpAttrMask, QpState, QpType, RecvWr, SendWr,
    Sge, WcStatus, WrOpcode,
};
use roce_stack::wire::ext::{DethRepr, RethRepr};
use roce_stack::wire::{BthRepr, ExtHeaders, Opcode, VlanTag};

/// A WRITE_ONLY of 64 bytes of 0xAB from side 0 to side 1's MR at 0x100.
fn write_frame(s: &Setup, psn: u32) -> Vec<u8> {
    req_frame(
        &s.p,
        0,
        s.c.qpn[1],
        Opcode::RC_RDMA_WRITE_ONLY,
        psn,
        true,
        Some(RethRepr {
            va: 0x100,
            rkey: s.mr[1].rkey,
            dma_len: 64,
        }),
        &[0xAB; 64],
    )
}

fn written(s: &Setup) -> bool {
    s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice()[0x100..0x140]
        .iter()
        .all(|b| *b == 0xAB)
}

fn rig(p: Pair) -> Setup {
    let mut s = setup_with(
        p,
        &ConnOpts {
            sq_psn: [100, 0x200],
            ..ConnOpts::default()
        },
        4096,
    );
    mute(&mut s.p, 1);
    s
}

fn feed(s: &mut Setup, frame: &[u8]) {
    s.p.dev[1].handle_frame(s.p.now, frame);
    s.p.advance(Duration::from_micros(10));
}

// ---------------------------------------------------------------------------
// Destination MAC.

#[test]
fn roce_frame_to_another_unicast_mac_is_dropped() {
    let mut s = rig(Pair::new(1500, Faults::default(), 1));
    let mut f = write_frame(&s, 100);
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
    feed(&mut s, &f);
    assert!(!written(&s), "not executed");
    assert!(seen_from(&s.p, 1).is_empty(), "not answered");
    assert_eq!(s.p.dev[1].counters().rx_dmac_mismatch, 1);
    assert_eq!(s.p.dev[1].counters().rcvd_pkts, 0);
    // The same frame to our MAC (the ICRC does not cover the MACs).
    let f = write_frame(&s, 100);
    feed(&mut s, &f);
    assert!(written(&s));
    assert_eq!(s.p.dev[1].counters().rcvd_pkts, 1);
}

#[test]
fn roce_frame_to_broadcast_or_multicast_mac_is_dropped() {
    let mut s = rig(Pair::new(1500, Faults::default(), 1));
    for dmac in [[0xFF; 6], [0x01, 0x00, 0x5E, 0x00, 0x00, 0x02]] {
        let mut f = write_frame(&s, 100);
        f[..6].copy_from_slice(&dmac);
        feed(&mut s, &f);
    }
    assert!(!written(&s));
    assert_eq!(s.p.dev[1].counters().rx_dmac_mismatch, 2);
}

#[test]
fn promiscuous_device_takes_any_destination_mac() {
    let dev1 = Device::new(DeviceConfig {
        promiscuous: true,
        ..test_config(1, 1500)
    });
    let p = Pair::with_devices(
        [roce_stack::testing::test_device(0, 1500), dev1],
        Faults::default(),
        1,
    );
    let mut s = rig(p);
    let mut f = write_frame(&s, 100);
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
    feed(&mut s, &f);
    assert!(written(&s));
    assert_eq!(s.p.dev[1].counters().rx_dmac_mismatch, 0);
}

// ---------------------------------------------------------------------------
// VLAN.

/// Move side `side`'s QP to the address vector with VLAN `vid` (RTS → SQD →
/// SQD with a new AV → RTS, the path IBTA 1.7 §10.3.1 allows).
fn set_vlan(s: &mut Setup, side: usize, vid: u16) {
    let qpn = s.c.qpn[side];
    let d = &mut s.p.dev[side];
    let mut a = QpAttr {
        qp_state: QpState::Sqd,
        ..QpAttr::default()
    };
    d.modify_qp(qpn, &a, QpAttrMask::STATE).unwrap();
    a.ah_attr = d.qp(qpn).unwrap().attr().ah_attr;
    a.ah_attr.vlan = Some(VlanTag {
        pcp: 0,
        dei: false,
        vid,
    });
    d.modify_qp(qpn, &a, QpAttrMask::STATE | QpAttrMask::AV)
        .unwrap();
    a.qp_state = QpState::Rts;
    d.modify_qp(qpn, &a, QpAttrMask::STATE).unwrap();
}

#[test]
fn rc_qp_without_vlan_drops_tagged_frames_but_takes_priority_tags() {
    let mut s = rig(Pair::new(1500, Faults::default(), 1));
    let f = tagged(&write_frame(&s, 100), 100);
    feed(&mut s, &f);
    assert!(!written(&s));
    assert_eq!(s.p.dev[1].counters().rx_vlan_mismatch, 1);
    // VID 0: a priority-tagged frame is untagged traffic (802.1Q §9.6).
    let f = tagged(&write_frame(&s, 100), 0);
    feed(&mut s, &f);
    assert!(written(&s));
    assert_eq!(s.p.dev[1].counters().rx_vlan_mismatch, 1);
}

#[test]
fn rc_qp_on_vlan_100_takes_only_vlan_100() {
    let mut s = rig(Pair::new(1500, Faults::default(), 1));
    set_vlan(&mut s, 1, 100);
    for f in [
        write_frame(&s, 100),
        tagged(&write_frame(&s, 100), 200),
        tagged(&write_frame(&s, 100), 0),
    ] {
        feed(&mut s, &f);
    }
    assert!(!written(&s));
    assert_eq!(s.p.dev[1].counters().rx_vlan_mismatch, 3);
    let f = tagged(&write_frame(&s, 100), 100);
    feed(&mut s, &f);
    assert!(written(&s));
    // Its ACK goes out on VLAN 100.
    let ack = seen_from(&s.p, 1).pop().expect("ACK");
    assert_eq!(&ack.raw[12..14], &[0x81, 0x00]);
    assert_eq!(u16::from_be_bytes([ack.raw[14], ack.raw[15]]) & 0x0FFF, 100);
}

#[test]
fn ud_qp_takes_the_port_vlan_only() {
    let dev1 = Device::new(DeviceConfig {
        vlan: Some(7),
        ..test_config(1, 1500)
    });
    let mut p = Pair::with_devices(
        [roce_stack::testing::test_device(0, 1500), dev1],
        Faults::default(),
        1,
    );
    let o = ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    };
    let c = connect(&mut p, &o);
    let mr = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 4096], 0, AccessFlags::LOCAL_WRITE)
        .unwrap();
    for i in 0..2 {
        let sge = [Sge {
            addr: 1024 * i,
            length: 1024,
            lkey: mr.lkey,
        }];
        p.dev[1]
            .post_recv(
                c.qpn[1],
                &RecvWr {
                    wr_id: i,
                    sg_list: &sge,
                },
            )
            .unwrap();
    }
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey: o.qkey,
            rsvd: 0,
            src_qp: c.qpn[0],
        }),
        ..ExtHeaders::default()
    };
    let f = p.frame(
        0,
        BthRepr::new(Opcode::UD_SEND_ONLY, c.qpn[1], 1),
        ext,
        &[5; 100],
    );
    p.dev[1].handle_frame(p.now, &f);
    p.dev[1].handle_frame(p.now, &tagged(&f, 8));
    assert_eq!(p.dev[1].counters().rx_vlan_mismatch, 2);
    p.dev[1].handle_frame(p.now, &tagged(&f, 7));
    let mut wc = [roce_stack::verbs::Wc::EMPTY; 4];
    assert_eq!(p.dev[1].poll_cq(c.cq[1], &mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (0, WcStatus::Success));
}

// ---------------------------------------------------------------------------
// Every frame that is not taken is counted.

fn eth(dst: [u8; 6], ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x09]);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let ck = ipv4_checksum(&h);
    h[10..12].copy_from_slice(&ck.to_be_bytes());
    h.extend_from_slice(l4);
    h
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = sport.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn ipv6_udp(dport: u16, next_header: u8) -> Vec<u8> {
    let l4 = udp(5353, dport, &[0; 12]);
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next_header, 64]);
    h.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    h.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(&l4);
    h
}

#[test]
fn frames_that_are_not_roce_each_have_a_counter() {
    let mut dev = roce_stack::testing::test_device(1, 1500);
    let me = [0x02, 0, 0, 0, 0, 2];
    let ours = Ipv4Addr::new(10, 0, 0, 2);
    let any = Ipv4Addr::new(0, 0, 0, 0);
    let bcast = Ipv4Addr::new(255, 255, 255, 255);
    let dhcp = eth(
        [0xFF; 6],
        0x0800,
        &ipv4(any, bcast, 17, &udp(68, 67, &[0; 240])),
    );
    let dns = eth(
        me,
        0x0800,
        &ipv4(
            Ipv4Addr::new(10, 0, 0, 9),
            ours,
            17,
            &udp(53, 40000, &[1; 20]),
        ),
    );
    let tcp = eth(
        me,
        0x0800,
        &ipv4(Ipv4Addr::new(10, 0, 0, 9), ours, 6, &[0; 20]),
    );
    let lldp = eth([0x01, 0x80, 0xC2, 0, 0, 0x0E], 0x88CC, &[0; 40]);
    let arp = eth([0xFF; 6], 0x0806, &[0; 28]);
    let v6_udp = eth(me, 0x86DD, &ipv6_udp(53, 17));
    let v6_icmp = eth(me, 0x86DD, &ipv6_udp(0, 58));
    for f in [&dhcp, &dns, &tcp, &lldp, &arp, &v6_udp, &v6_icmp] {
        dev.handle_frame(roce_stack::time::Instant::ZERO, f);
    }
    let c = dev.counters();
    assert_eq!(c.rx_frames, 7);
    assert_eq!(c.rx_other_udp_port, 3, "DHCP, DNS, IPv6 UDP");
    assert_eq!(c.rx_other_ip_protocol, 2, "TCP, ICMPv6");
    assert_eq!(c.rx_other_ethertype, 2, "LLDP, ARP");
    assert_eq!(c.rx_parse_drops + c.rcvd_pkts, 0);
}

// ---------------------------------------------------------------------------
// Requester: AETH MSN.

/// Side 0 sends three 64-byte WRITEs (PSNs 0x100..=0x102, one message
/// each); side 1 is played by hand.
fn msn_rig() -> Setup {
    let mut s = setup(1500, &ConnOpts::default(), 4096);
    s.p.faults.delay = Duration::ZERO;
    mute(&mut s.p, 0);
    for i in 0..3 {
        post_write(&mut s, i, 0, 64, 0x100 * i);
    }
    assert!(run_until_sent(&mut s.p, 0, 3));
    s
}

fn ack(s: &mut Setup, psn: u32, msn: u32) {
    let f = ack_frame(&s.p, 1, s.c.qpn[0], psn, 0x1F, msn);
    s.p.inject(1, &f);
    s.p.advance(Duration::ZERO);
}

#[test]
fn msn_going_backwards_is_counted_and_changes_nothing() {
    let mut s = msn_rig();
    ack(&mut s, 0x100, 1);
    ack(&mut s, 0x101, 0);
    ack(&mut s, 0x102, 3);
    let c = s.p.dev[0].counters();
    assert_eq!(c.resp_msn_backwards, 1);
    assert_eq!(c.resp_msn_skipped, 0);
    // Completion follows the PSNs: every WRITE succeeds once.
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        [
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success)
        ]
    );
}

#[test]
fn msn_beyond_the_messages_sent_is_counted() {
    let mut s = msn_rig();
    ack(&mut s, 0x101, 2);
    ack(&mut s, 0x102, 7);
    let c = s.p.dev[0].counters();
    assert_eq!((c.resp_msn_skipped, c.resp_msn_backwards), (1, 0));
    assert_eq!(poll_all(&mut s.p, 0, s.c.cq[0]).len(), 3);
}

#[test]
fn coalesced_acks_that_jump_over_msns_are_not_skips() {
    // One cumulative ACK for all three messages: MSN 0 -> 3 is legal.
    let mut s = msn_rig();
    ack(&mut s, 0x102, 3);
    let c = s.p.dev[0].counters();
    assert_eq!((c.resp_msn_skipped, c.resp_msn_backwards), (0, 0));
}

// ---------------------------------------------------------------------------
// Observability.

#[test]
fn query_qp_reports_the_live_psns_and_msns() {
    let mut s = setup(
        1500,
        &ConnOpts {
            mtu: Mtu::Mtu1024,
            sq_psn: [0x100, 0x200],
            ..ConnOpts::default()
        },
        8192,
    );
    let q0 = s.p.dev[0].query_qp(s.c.qpn[0]).unwrap();
    let q1 = s.p.dev[1].query_qp(s.c.qpn[1]).unwrap();
    assert_eq!((q0.sq_psn, q0.rq_psn), (0x100, 0x200));
    assert_eq!((q1.sq_psn, q1.rq_psn), (0x200, 0x100));
    assert_eq!((q0.last_acked_psn, q0.unacked_psns, q1.msn), (0xFF, 0, 0));

    // A 3000-byte WRITE at PMTU 1024 takes ceil(3000 / 1024) = 3 PSNs.
    post_write(&mut s, 1, 0, 3000, 0);
    assert!(s.p.run_until(Duration::from_secs(1), |p| {
        p.dev[0].query_qp(s.c.qpn[0]).unwrap().sq_psn == 0x103
    }));
    s.p.advance(Duration::from_millis(1));
    let q0 = s.p.dev[0].query_qp(s.c.qpn[0]).unwrap();
    let q1 = s.p.dev[1].query_qp(s.c.qpn[1]).unwrap();
    assert_eq!(
        (q0.sq_psn, q0.last_acked_psn, q0.unacked_psns),
        (0x103, 0x102, 0)
    );
    assert_eq!((q0.ssn, q0.peer_msn), (1, 1));
    assert_eq!((q1.rq_psn, q1.msn), (0x103, 1));
    assert_eq!(q0.qp_type, QpType::Rc);
    assert_eq!(q0.state, QpState::Rts);
    // `rdma res show qp` style, decimal as the rdma tool prints.
    assert_eq!(
        q0.to_string(),
        format!(
            "lqpn {} rqpn {} type RC state RTS rq-psn 512 sq-psn 259 msn 0 \
             last-acked-psn 258 path-mtu 1024",
            s.c.qpn[0], s.c.qpn[1]
        )
    );
}

#[test]
fn rdma_recvs_and_rdma_sends_count_successful_messages() {
    let mut s = setup(1500, &ConnOpts::default(), 8192);
    for i in 0..3 {
        post_recv(&mut s, 1, i, 1024 * i, 1024);
    }
    post_send_msg(&mut s, 10, 0, 100);
    post_send_msg(&mut s, 11, 0, 0);
    post_write(&mut s, 12, 0, 64, 4096);
    let sge = [Sge {
        addr: 0,
        length: 8,
        lkey: s.mr[0].lkey,
    }];
    let mut wr = SendWr::new(13, WrOpcode::RdmaWriteWithImm, &sge);
    wr.remote_addr = 5000;
    wr.rkey = s.mr[1].rkey;
    wr.imm_data = 7;
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
    s.p.advance(Duration::from_millis(1));
    let recvs = poll_all(&mut s.p, 1, s.c.cq[1]);
    assert_eq!(recvs.len(), 3);
    assert!(recvs.iter().all(|w| w.status == WcStatus::Success));
    // Two SENDs and the WRITE with immediate consumed receive WQEs.
    assert_eq!(s.p.dev[1].counters().rdma_recvs, 3);
    // Two SEND WQEs (the WRITEs are not sends).
    assert_eq!(s.p.dev[0].counters().rdma_sends, 2);
    assert_eq!(s.p.dev[0].counters().rdma_recvs, 0);
}

// ---------------------------------------------------------------------------
// Requester: PadCnt of READ responses (IBTA 1.7 §9.2: payload + pad is whole
// words; FIRST/MIDDLE carry PMTU bytes, so PadCnt 0).

#[test]
fn read_response_first_with_padcnt_is_dropped() {
    let mut s = setup(
        1500,
        &ConnOpts {
            mtu: Mtu::Mtu1024,
            ..ConnOpts::default()
        },
        4096,
    );
    s.p.faults.delay = Duration::ZERO;
    mute(&mut s.p, 0);
    let sge = [Sge {
        addr: 0,
        length: 2048,
        lkey: s.mr[0].lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaRead, &sge);
    wr.remote_addr = 0;
    wr.rkey = s.mr[1].rkey;
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
    assert!(run_until_sent(&mut s.p, 0, 1));
    let resp = |s: &Setup, op: Opcode, psn: u32, body: &[u8], pad: u8| {
        let ext = ExtHeaders {
            aeth: (op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE).then_some(
                roce_stack::wire::ext::AethRepr {
                    syndrome: 0x1F,
                    msn: 1,
                },
            ),
            ..ExtHeaders::default()
        };
        let aeth_len = if ext.aeth.is_some() { 4 } else { 0 };
        let base =
            s.p.frame(1, BthRepr::new(op, s.c.qpn[0], psn), ext, &[0; 4]);
        with_body(&base, aeth_len, body, pad)
    };
    // 1024 data bytes and PadCnt 3 (1027 bytes): dropped, nothing placed.
    let mut bad = pattern(1024, 7);
    bad.extend_from_slice(&[0; 3]);
    let f = resp(&s, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100, &bad, 3);
    s.p.inject(1, &f);
    s.p.advance(Duration::ZERO);
    assert_eq!(s.p.dev[0].counters().resp_unexpected, 1);
    // Side 0's MR still holds its initial pattern (common::setup).
    assert_eq!(
        &s.p.dev[0].mr(s.mr[0].lkey).unwrap().as_slice()[..1024],
        &pattern(4096, 1)[..1024],
        "nothing placed"
    );
    let data = pattern(2048, 9);
    let first = resp(
        &s,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        0x100,
        &data[..1024],
        0,
    );
    let last = resp(
        &s,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        0x101,
        &data[1024..],
        0,
    );
    s.p.inject(1, &first);
    s.p.inject(1, &last);
    s.p.advance(Duration::ZERO);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        [(1, WcStatus::Success)]
    );
    assert_eq!(
        &s.p.dev[0].mr(s.mr[0].lkey).unwrap().as_slice()[..2048],
        &data[..]
    );
}
