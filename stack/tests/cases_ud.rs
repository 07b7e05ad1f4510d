//! CASES.md UD scenarios: R26 (oversized datagrams are dropped, never fatal)
//! and R27 (layout of the 40-byte GRH area for IPv4 and IPv6).

mod common;

use std::time::Duration;

use common::*;
use roce_stack::testing::{connect, test_device_ipv6, Conn, ConnOpts, Faults, Pair};
use roce_stack::transport::av::AddressVector;
use roce_stack::verbs::{
    MrKeys, NetworkHdrType, QpState, QpType, RecvWr, SendWr, Sge, UdDest, WcFlags, WcStatus,
    WrOpcode,
};
use roce_stack::wire::ext::DethRepr;
use roce_stack::wire::{BthRepr, ExtHeaders, Opcode};

const QKEY: u32 = 0x1111_1111;

struct Ud {
    p: Pair,
    c: Conn,
    a: MrKeys,
    b: MrKeys,
}

fn ud_pair(p: Pair) -> Ud {
    let mut p = p;
    let c = connect(
        &mut p,
        &ConnOpts {
            qp_type: QpType::Ud,
            qkey: QKEY,
            ..ConnOpts::default()
        },
    );
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(8192, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0xAA; 8192], 0, all_access())
        .unwrap();
    p.start_capture();
    Ud { p, c, a, b }
}

fn ud() -> Ud {
    ud_pair(Pair::new(1500, Faults::default(), 26))
}

/// Post a receive WQE of `len` bytes at offset 0 of side 1's MR.
fn recv(u: &mut Ud, wr_id: u64, len: u32) {
    let sge = [Sge {
        addr: 0,
        length: len,
        lkey: u.b.lkey,
    }];
    u.p.dev[1]
        .post_recv(
            u.c.qpn[1],
            &RecvWr {
                wr_id,
                sg_list: &sge,
            },
        )
        .unwrap();
}

/// A hand-made UD SEND_ONLY from side 0 with `len` pattern bytes.
fn datagram(u: &Ud, qkey: u32, len: usize) -> Vec<u8> {
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey,
            rsvd: 0,
            src_qp: u.c.qpn[0],
        }),
        ..ExtHeaders::default()
    };
    let bth = BthRepr::new(Opcode::UD_SEND_ONLY, u.c.qpn[1], 5);
    u.p.frame(0, bth, ext, &pattern(len, 7))
}

fn deliver(u: &mut Ud, frame: &[u8]) {
    u.p.inject(0, frame);
    u.p.advance(Duration::from_micros(20));
}

/// The datagram was dropped silently: no completion, the WQE is still
/// there, the QP is still in RTS, nothing was sent back, no event.
fn assert_dropped(u: &mut Ud, wqes: u64) {
    assert!(poll_all(&mut u.p, 1, u.c.cq[1]).is_empty(), "no CQE");
    let qp = u.p.dev[1].qp(u.c.qpn[1]).unwrap();
    assert_eq!(qp.rq_outstanding(), wqes, "WQE not consumed");
    assert_eq!(qp.state(), QpState::Rts);
    assert_eq!(u.p.dev[1].counters().sent_pkts, 0, "UD never answers");
    assert_eq!(u.p.dev[1].poll_event(), None);
}

#[test]
fn r26_oversized_ud_datagram_dropped_then_fitting_one_accepted() {
    let mut u = ud();
    recv(&mut u, 1, 140); // 40 GRH + 100 data
    let f = datagram(&u, QKEY, 200);
    deliver(&mut u, &f);
    assert_dropped(&mut u, 1);
    assert_eq!(u.p.dev[1].counters().ud_len_err, 1);
    let f = datagram(&u, QKEY, 100);
    deliver(&mut u, &f);
    let wcs = poll_all(&mut u.p, 1, u.c.cq[1]);
    assert_eq!(ids_status(&wcs), vec![(1, WcStatus::Success)]);
    assert_eq!(wcs[0].byte_len, 140);
    assert_eq!(
        &u.p.dev[1].mr(u.b.lkey).unwrap().as_slice()[40..140],
        &pattern(100, 7)[..]
    );
}

#[test]
fn r26_boundary_100_bytes_into_139_byte_buffer_dropped() {
    let mut u = ud();
    recv(&mut u, 1, 139);
    let f = datagram(&u, QKEY, 100);
    deliver(&mut u, &f);
    assert_dropped(&mut u, 1);
    assert_eq!(u.p.dev[1].counters().ud_len_err, 1);
    // 99 bytes fit.
    let f = datagram(&u, QKEY, 99);
    deliver(&mut u, &f);
    let wcs = poll_all(&mut u.p, 1, u.c.cq[1]);
    assert_eq!((wcs[0].status, wcs[0].byte_len), (WcStatus::Success, 139));
}

#[test]
fn r26_larger_than_path_mtu_dropped() {
    // 1500-byte Ethernet: the UD QP's MTU is the port's active MTU, 1024.
    let mut u = ud();
    assert_eq!(u.p.dev[1].qp(u.c.qpn[1]).unwrap().pmtu(), 1024);
    recv(&mut u, 1, 4096);
    let f = datagram(&u, QKEY, 1025);
    deliver(&mut u, &f);
    assert_dropped(&mut u, 1);
    assert_eq!(u.p.dev[1].counters().ud_len_err, 1);
    let f = datagram(&u, QKEY, 1024);
    deliver(&mut u, &f);
    let wcs = poll_all(&mut u.p, 1, u.c.cq[1]);
    assert_eq!((wcs[0].status, wcs[0].byte_len), (WcStatus::Success, 1064));
}

#[test]
fn r26_wrong_qkey_dropped() {
    let mut u = ud();
    recv(&mut u, 1, 140);
    let f = datagram(&u, QKEY ^ 1, 10);
    deliver(&mut u, &f);
    assert_dropped(&mut u, 1);
    assert_eq!(u.p.dev[1].counters().qkey_violation, 1);
}

#[test]
fn r26_repeated_oversized_datagrams_never_kill_the_qp() {
    let mut u = ud();
    recv(&mut u, 1, 140);
    for _ in 0..100 {
        let f = datagram(&u, QKEY, 900);
        deliver(&mut u, &f);
    }
    assert_dropped(&mut u, 1);
    assert_eq!(u.p.dev[1].counters().ud_len_err, 100);
}

fn ud_dest(u: &Ud) -> UdDest {
    UdDest {
        av: AddressVector {
            dgid: u.p.dev[1].gid(0).unwrap(),
            dmac: u.p.dev[1].config().mac,
            ..AddressVector::default()
        },
        remote_qpn: u.c.qpn[1],
        remote_qkey: QKEY,
    }
}

#[test]
fn r26_ud_send_larger_than_pmtu_completes_loc_len_err() {
    // Our choice (documented in transport/ud.rs): an oversized UD send
    // completes with LOC_LEN_ERR and is not transmitted (rxe "succeeds").
    let mut u = ud();
    let sge = [Sge {
        addr: 0,
        length: 1025,
        lkey: u.a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::Send, &sge);
    wr.ud = Some(ud_dest(&u));
    u.p.dev[0].post_send(u.c.qpn[0], &wr).unwrap();
    u.p.advance(Duration::from_millis(1));
    assert_eq!(
        ids_status(&poll_all(&mut u.p, 0, u.c.cq[0])),
        vec![(1, WcStatus::LocLenErr)]
    );
    assert!(u.p.captured().is_empty());
    assert_eq!(u.p.dev[0].qp(u.c.qpn[0]).unwrap().state(), QpState::Rts);
}

// ---------------------------------------------------------------------------
// R27: GRH area.

/// Send a 64-byte UD datagram from side 0 through the stack; return side 1's
/// receive buffer and completion, and the frame on the wire.
fn ud_64(u: &mut Ud) -> (Vec<u8>, roce_stack::verbs::Wc, Vec<u8>) {
    recv(u, 1, 200);
    let sge = [Sge {
        addr: 0,
        length: 64,
        lkey: u.a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::Send, &sge);
    wr.ud = Some(ud_dest(u));
    u.p.dev[0].post_send(u.c.qpn[0], &wr).unwrap();
    assert!(u
        .p
        .run_until(Duration::from_millis(1), |p| cq_len(p, 1, u.c.cq[1]) == 1));
    let wc = poll_all(&mut u.p, 1, u.c.cq[1])[0];
    let frame = u.p.captured()[0].1.clone();
    (
        u.p.dev[1].mr(u.b.lkey).unwrap().as_slice().to_vec(),
        wc,
        frame,
    )
}

#[test]
fn r27a_ipv4_grh_area_layout() {
    let mut u = ud();
    let (buf, wc, frame) = ud_64(&mut u);
    assert_eq!(
        &buf[..20],
        &[0u8; 20],
        "bytes 0-19 are zero (our definition)"
    );
    assert_eq!(buf[20], 0x45);
    assert_eq!(&buf[32..36], &[10, 0, 0, 1], "source address");
    assert_eq!(&buf[36..40], &[10, 0, 0, 2], "destination address");
    assert_eq!(&buf[20..40], &frame[14..34], "the received IPv4 header");
    assert_eq!(&buf[40..104], &pattern(8192, 1)[..64], "data at 40..104");
    assert_eq!(buf[104], 0xAA, "nothing written past the data");
    assert_eq!(wc.status, WcStatus::Success);
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert_eq!(wc.network_hdr_type, NetworkHdrType::Ipv4);
    assert_eq!(wc.src_qp, u.c.qpn[0]);
    assert_eq!(wc.byte_len, 104);
}

#[test]
fn r27b_ipv6_grh_area_layout() {
    let p = Pair::with_devices(
        [test_device_ipv6(0, 1500), test_device_ipv6(1, 1500)],
        Faults::default(),
        27,
    );
    let mut u = ud_pair(p);
    let (buf, wc, frame) = ud_64(&mut u);
    assert_eq!(
        u16::from_be_bytes([frame[12], frame[13]]),
        0x86DD,
        "sent over IPv6"
    );
    assert_eq!(&buf[..40], &frame[14..54], "the received IPv6 header");
    assert_eq!(buf[0] >> 4, 6);
    assert_eq!(buf[6], 17, "next header UDP");
    let src: [u8; 16] = "2001:db8::1"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    let dst: [u8; 16] = "2001:db8::2"
        .parse::<std::net::Ipv6Addr>()
        .unwrap()
        .octets();
    assert_eq!(&buf[8..24], &src);
    assert_eq!(&buf[24..40], &dst);
    assert_eq!(&buf[40..104], &pattern(8192, 1)[..64]);
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert_eq!(wc.network_hdr_type, NetworkHdrType::Ipv6);
    assert_eq!((wc.src_qp, wc.byte_len), (u.c.qpn[0], 104));
}

#[test]
fn r27c_ipv4_options_dropped_never_shift_the_layout() {
    // Our choice (wire::Error::Ipv4Options): RoCEv2 over IPv4 with options is
    // dropped, so the GRH area never holds a shifted header.
    let mut u = ud();
    recv(&mut u, 1, 200);
    let f = datagram(&u, QKEY, 64);
    let mut g = f[..34].to_vec();
    g.extend_from_slice(&[1, 1, 1, 1]); // four NOP options
    g.extend_from_slice(&f[34..]);
    g[14] = 0x46;
    let total = u16::from_be_bytes([g[16], g[17]]) + 4;
    g[16..18].copy_from_slice(&total.to_be_bytes());
    common::fix_ipv4_checksum(&mut g[14..]);
    deliver(&mut u, &g);
    assert_dropped(&mut u, 1);
    assert_eq!(u.p.dev[1].drop_counters().get("rx_ipv4_options"), 1);
    assert!(u.p.dev[1]
        .mr(u.b.lkey)
        .unwrap()
        .as_slice()
        .iter()
        .all(|x| *x == 0xAA));
}

#[test]
fn r26_ud_mtu_follows_the_port_mtu() {
    // On a 9000-byte Ethernet a UD QP carries 4096-byte datagrams (the port's
    // active MTU), in both directions; 4097 is too large.
    let mut u = ud_pair(Pair::new(9000, Faults::default(), 26));
    assert_eq!(u.p.dev[1].qp(u.c.qpn[1]).unwrap().pmtu(), 4096);
    recv(&mut u, 1, 4136);
    let sge = [Sge {
        addr: 0,
        length: 4096,
        lkey: u.a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::Send, &sge);
    wr.ud = Some(ud_dest(&u));
    u.p.dev[0].post_send(u.c.qpn[0], &wr).unwrap();
    assert!(u
        .p
        .run_until(Duration::from_millis(1), |p| cq_len(p, 1, u.c.cq[1]) == 1));
    let wcs = poll_all(&mut u.p, 1, u.c.cq[1]);
    assert_eq!((wcs[0].status, wcs[0].byte_len), (WcStatus::Success, 4136));
    assert_eq!(
        ids_status(&poll_all(&mut u.p, 0, u.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    recv(&mut u, 2, 8000);
    let f = datagram(&u, QKEY, 4097);
    deliver(&mut u, &f);
    assert!(poll_all(&mut u.p, 1, u.c.cq[1]).is_empty());
    assert_eq!(u.p.dev[1].counters().ud_len_err, 1);
}
