//! CASES.md responder scenarios: R10 (length checks) and R14 (ACK coalescing),
//! played against our RC responder with hand-made request frames.

mod common;

use std::time::Duration;

use common::*;
use roce_stack::testing::ConnOpts;
use roce_stack::verbs::{AsyncEvent, Mtu, QpState, WcStatus};
use roce_stack::wire::ext::RethRepr;
use roce_stack::wire::Opcode;

const NAK_INVALID_REQUEST: u8 = 0x61;

/// CASES R10 set-up: RC QP, path MTU 1024, ePSN 100, an R_Key covering 64 KiB.
/// Side 0 is played by hand (its device's own frames are dropped); side 1 is
/// the responder under test.
fn r10_setup() -> Setup {
    let opts = ConnOpts {
        mtu: Mtu::Mtu1024,
        sq_psn: [100, 0x200],
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64 * 1024);
    mute(&mut s.p, 1);
    s
}

fn reth(s: &Setup, va: u64, len: u32) -> Option<RethRepr> {
    Some(RethRepr {
        va,
        rkey: s.mr[1].rkey,
        dma_len: len,
    })
}

/// Inject a request from side 0 to the responder and let it answer.
fn send_req(s: &mut Setup, op: Opcode, psn: u32, ack_req: bool, r: Option<RethRepr>, data: &[u8]) {
    let f = req_frame(&s.p, 0, s.c.qpn[1], op, psn, ack_req, r, data);
    s.p.inject(0, &f);
    s.p.advance(Duration::from_micros(50));
}

/// The responder's frames (ACK/NAK) so far.
fn responses(s: &Setup) -> Vec<Seen> {
    seen_from(&s.p, 1)
}

fn mr1(s: &Setup) -> Vec<u8> {
    s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice().to_vec()
}

/// After an invalid-request NAK: the responder QP is in ERR (rxe treats the
/// NAK as fatal for the RC QP), raised QP_FATAL, and later packets place no
/// data and get no answer.
fn assert_fatal_and_deaf(s: &mut Setup, failing_psn: u32, next_psn: u32) {
    let r = responses(s);
    assert_eq!(r.len(), 1, "exactly one response: {r:?}");
    assert_eq!(r[0].opcode, 0x11);
    assert_eq!(r[0].psn, failing_psn);
    assert_eq!(r[0].aeth.unwrap().0, NAK_INVALID_REQUEST);
    assert_eq!(s.p.dev[1].qp(s.c.qpn[1]).unwrap().state(), QpState::Err);
    let mut fatal = false;
    while let Some(ev) = s.p.dev[1].poll_event() {
        fatal |= ev == AsyncEvent::QpFatal { qpn: s.c.qpn[1] };
    }
    assert!(fatal, "QP_FATAL raised");
    assert_eq!(s.p.dev[1].counters().resp_invalid_request, 1);

    let before = mr1(s);
    let data = vec![0xEE; 64];
    let r = reth(s, 0x8000, 64);
    send_req(s, Opcode::RC_RDMA_WRITE_ONLY, next_psn, true, r, &data);
    send_req(s, Opcode::RC_RDMA_WRITE_ONLY, failing_psn, true, r, &data);
    assert_eq!(mr1(s), before, "no data placed after the NAK");
    assert_eq!(responses(s).len(), 1, "no answer after the NAK");
}

#[test]
fn r10a_write_only_1025_bytes_naks_invalid_request() {
    let mut s = r10_setup();
    let r = reth(&s, 0, 1025);
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_ONLY,
        100,
        true,
        r,
        &vec![0xAB; 1025],
    );
    assert!(mr1(&s).iter().all(|b| *b == 0), "nothing written");
    assert_fatal_and_deaf(&mut s, 100, 101);
}

#[test]
fn r10b_write_first_short_of_pmtu_naks_invalid_request() {
    let mut s = r10_setup();
    let r = reth(&s, 0, 3000);
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_FIRST,
        100,
        false,
        r,
        &vec![0xAB; 1000],
    );
    assert!(mr1(&s).iter().all(|b| *b == 0), "nothing written");
    assert_fatal_and_deaf(&mut s, 100, 101);
}

#[test]
fn r10c_write_first_middle_last_accepted_one_ack() {
    let mut s = r10_setup();
    let data = pattern(3000, 9);
    let r = reth(&s, 0x100, 3000);
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_FIRST,
        100,
        false,
        r,
        &data[..1024],
    );
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        101,
        false,
        None,
        &data[1024..2048],
    );
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_LAST,
        102,
        true,
        None,
        &data[2048..],
    );
    let r = responses(&s);
    assert_eq!(r.len(), 1, "one ACK: {r:?}");
    assert_eq!(r[0].opcode, 0x11);
    assert_eq!(r[0].psn, 102);
    let (syndrome, msn) = r[0].aeth.unwrap();
    assert!(syndrome <= 0x1F, "an ACK, not a NAK: {syndrome:#x}");
    assert_eq!(msn, 1);
    assert_eq!(&mr1(&s)[0x100..0x100 + 3000], &data[..]);
    assert_eq!(s.p.dev[1].qp(s.c.qpn[1]).unwrap().state(), QpState::Rts);
}

#[test]
fn r10d_write_last_without_data_naks_invalid_request() {
    let mut s = r10_setup();
    let data = pattern(1024, 3);
    let r = reth(&s, 0, 2048);
    send_req(&mut s, Opcode::RC_RDMA_WRITE_FIRST, 100, false, r, &data);
    send_req(&mut s, Opcode::RC_RDMA_WRITE_LAST, 101, true, None, &[]);
    // The FIRST was valid and placed; the LAST placed nothing.
    let m = mr1(&s);
    assert_eq!(&m[..1024], &data[..]);
    assert!(m[1024..].iter().all(|b| *b == 0));
    assert_fatal_and_deaf(&mut s, 101, 102);
}

#[test]
fn r10e_write_middle_1020_bytes_naks_invalid_request() {
    let mut s = r10_setup();
    let data = pattern(1024, 4);
    let r = reth(&s, 0, 3072);
    send_req(&mut s, Opcode::RC_RDMA_WRITE_FIRST, 100, false, r, &data);
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        101,
        false,
        None,
        &vec![0xCD; 1020],
    );
    let m = mr1(&s);
    assert_eq!(&m[..1024], &data[..]);
    assert!(
        m[1024..].iter().all(|b| *b == 0),
        "the MIDDLE placed nothing"
    );
    assert_fatal_and_deaf(&mut s, 101, 102);
}

#[test]
fn r10f_read_request_over_2_pow_31_naks_invalid_request() {
    let mut s = r10_setup();
    let r = reth(&s, 0, 0x8000_0001);
    send_req(&mut s, Opcode::RC_RDMA_READ_REQUEST, 100, true, r, &[]);
    assert_eq!(s.p.dev[1].counters().rx_read_requests, 0);
    assert_fatal_and_deaf(&mut s, 100, 101);
}

#[test]
fn r10g_write_bytes_beyond_reth_length_nak_and_nothing_beyond() {
    let mut s = r10_setup();
    let data = pattern(2052, 5);
    let r = reth(&s, 0, 2048);
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_FIRST,
        100,
        false,
        r,
        &data[..1024],
    );
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        101,
        false,
        None,
        &data[1024..2048],
    );
    send_req(
        &mut s,
        Opcode::RC_RDMA_WRITE_LAST,
        102,
        true,
        None,
        &data[2048..],
    );
    let m = mr1(&s);
    assert!(
        m[2048..].iter().all(|b| *b == 0),
        "nothing written beyond 2048 bytes"
    );
    assert_fatal_and_deaf(&mut s, 102, 103);
}

// ---------------------------------------------------------------------------
// R14: ACK coalescing.

/// Responder with ACK coalescing `n`, ePSN 0, MTU 256; side 0 played by hand.
fn r14_setup(n: u32) -> Setup {
    let opts = ConnOpts {
        mtu: Mtu::Mtu256,
        sq_psn: [0, 0x200],
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64 * 1024);
    s.p.dev[1].set_ack_coalesce(n);
    mute(&mut s.p, 1);
    s
}

/// `(PSN, MSN)` of every ACK the responder sent, checking each is an ACK.
fn acks(s: &Setup) -> Vec<(u32, u32)> {
    responses(s)
        .iter()
        .map(|r| {
            assert_eq!(r.opcode, 0x11);
            let (syn, msn) = r.aeth.unwrap();
            assert!(syn <= 0x1F, "ACK, not NAK: {syn:#x}");
            (r.psn, msn)
        })
        .collect()
}

/// A WRITE of `n` packets of 256 bytes at PSN 0.., AckReq on the LAST and on
/// the PSNs in `ack_req`; `each` runs before packet `i` is injected.
fn r14_write(s: &mut Setup, n: u32, ack_req: &[u32], mut each: impl FnMut(&mut Setup, u32)) {
    let data = pattern(256 * n as usize, 2);
    for i in 0..n {
        each(s, i);
        let op = match i {
            0 => Opcode::RC_RDMA_WRITE_FIRST,
            i if i == n - 1 => Opcode::RC_RDMA_WRITE_LAST,
            _ => Opcode::RC_RDMA_WRITE_MIDDLE,
        };
        let r = (i == 0).then(|| RethRepr {
            va: 0,
            rkey: s.mr[1].rkey,
            dma_len: 256 * n,
        });
        let chunk = &data[256 * i as usize..256 * (i as usize + 1)];
        send_req(s, op, i, i == n - 1 || ack_req.contains(&i), r, chunk);
    }
    assert_eq!(&mr1(s)[..data.len()], &data[..]);
}

fn assert_strictly_increasing(a: &[(u32, u32)]) {
    assert!(
        a.windows(2).all(|w| w[0].0 < w[1].0),
        "ACK PSNs strictly increase: {a:?}"
    );
}

#[test]
fn r14_coalesced_acks_interval_4() {
    let mut s = r14_setup(4);
    r14_write(&mut s, 8, &[], |_, _| {});
    let a = acks(&s);
    // At most two coalesced ACKs plus the one AckReq forces.
    assert!(a.len() <= 3, "{a:?}");
    assert_strictly_increasing(&a);
    assert_eq!(*a.last().unwrap(), (7, 1), "last ACK: PSN 7, MSN 1");
    // Interval 4 over PSN 0..7: milestones after the 4th and 8th packet.
    assert_eq!(a, vec![(3, 0), (7, 1)]);
}

#[test]
fn r14_coalesced_acks_burst_carry_highest_psn() {
    // All eight packets arrive before the responder can transmit: the ACK
    // that leaves carries the highest in-order PSN.
    let mut s = r14_setup(4);
    let data = pattern(2048, 2);
    for i in 0..8u32 {
        let op = match i {
            0 => Opcode::RC_RDMA_WRITE_FIRST,
            7 => Opcode::RC_RDMA_WRITE_LAST,
            _ => Opcode::RC_RDMA_WRITE_MIDDLE,
        };
        let r = (i == 0).then(|| RethRepr {
            va: 0,
            rkey: s.mr[1].rkey,
            dma_len: 2048,
        });
        let f = req_frame(
            &s.p,
            0,
            s.c.qpn[1],
            op,
            i,
            i == 7,
            r,
            &data[256 * i as usize..][..256],
        );
        s.p.inject(0, &f);
    }
    s.p.advance(Duration::from_micros(50));
    let a = acks(&s);
    assert!(!a.is_empty() && a.len() <= 3, "{a:?}");
    assert_strictly_increasing(&a);
    assert_eq!(*a.last().unwrap(), (7, 1));
}

#[test]
fn r14_ack_req_on_psn_2_acks_at_once() {
    let mut s = r14_setup(4);
    r14_write(&mut s, 8, &[2], |s, i| {
        if i == 3 {
            // Right after PSN 2 was delivered: its ACK is already out.
            assert_eq!(acks(s), vec![(2, 0)]);
        }
    });
    let a = acks(&s);
    assert_strictly_increasing(&a);
    // The AckReq restarted the count: next milestone after PSN 3..6.
    assert_eq!(a, vec![(2, 0), (6, 0), (7, 1)]);
}

#[test]
fn r14_interval_changed_from_1_to_8_mid_stream() {
    let mut s = r14_setup(1);
    r14_write(&mut s, 16, &[], |s, i| {
        if i == 4 {
            s.p.dev[1].set_ack_coalesce(8);
        }
    });
    let a = acks(&s);
    assert_strictly_increasing(&a);
    // Interval 1: PSN 0..3 each ACKed; then interval 8 counts from PSN 4:
    // the 8th packet is PSN 11; the LAST (AckReq) is PSN 15.
    assert_eq!(a, vec![(0, 0), (1, 0), (2, 0), (3, 0), (11, 0), (15, 1)]);
}

#[test]
fn r14_interval_changed_from_8_to_1_mid_stream() {
    let mut s = r14_setup(8);
    r14_write(&mut s, 12, &[], |s, i| {
        if i == 5 {
            s.p.dev[1].set_ack_coalesce(1);
        }
    });
    let a = acks(&s);
    assert_strictly_increasing(&a);
    assert_eq!(
        a,
        vec![(5, 0), (6, 0), (7, 0), (8, 0), (9, 0), (10, 0), (11, 1)]
    );
}

#[test]
fn r14_requester_one_coalesced_ack_completes_every_wqe_up_to_psn_7() {
    // Requester side 0, sq_psn 0, MTU 1024; side 1 played by hand.
    let opts = ConnOpts {
        mtu: Mtu::Mtu1024,
        sq_psn: [0, 0x200],
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64 * 1024);
    mute(&mut s.p, 0);
    // PSNs: W1 0-1, W2 2, W3 3-5, W4 6, W5 7, W6 8-9.
    post_write(&mut s, 1, 0, 2048, 0);
    post_send_msg(&mut s, 2, 0, 0);
    post_write(&mut s, 3, 0, 3000, 0);
    post_write(&mut s, 4, 0, 1, 0);
    post_write(&mut s, 5, 0, 1024, 0);
    post_write(&mut s, 6, 0, 2048, 0);
    assert!(run_until_sent(&mut s.p, 0, 10));
    let psns: Vec<u32> = seen_from(&s.p, 0).iter().map(|f| f.psn).collect();
    assert_eq!(psns, (0..10).collect::<Vec<_>>());
    let f = ack_frame(&s.p, 1, s.c.qpn[0], 7, 0x1F, 5);
    s.p.inject(1, &f);
    s.p.advance(Duration::from_micros(50));
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(s.p.dev[0].qp(s.c.qpn[0]).unwrap().sq_outstanding(), 1);
    let f = ack_frame(&s.p, 1, s.c.qpn[0], 9, 0x1F, 6);
    s.p.inject(1, &f);
    s.p.advance(Duration::from_micros(50));
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(6, WcStatus::Success)]
    );
}

// ---------------------------------------------------------------------------
// R10 for UC: the same length rules; a violation drops the message silently
// (UC never NAKs) and the responder resynchronises on the next FIRST/ONLY.

fn uc_setup() -> Setup {
    let opts = ConnOpts {
        qp_type: roce_stack::verbs::QpType::Uc,
        mtu: Mtu::Mtu1024,
        sq_psn: [100, 0x200],
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64 * 1024);
    mute(&mut s.p, 1);
    s
}

const UC_WRITE_FIRST: Opcode = Opcode(0x26);
const UC_WRITE_MIDDLE: Opcode = Opcode(0x27);
const UC_WRITE_LAST: Opcode = Opcode(0x28);

fn assert_uc_alive(s: &mut Setup) {
    assert_eq!(s.p.dev[1].poll_event(), None);
    assert_eq!(s.p.dev[1].qp(s.c.qpn[1]).unwrap().state(), QpState::Rts);
    assert!(responses(s).is_empty(), "UC never answers");
}

#[test]
fn r10_uc_write_only_over_pmtu_dropped_then_resync() {
    let mut s = uc_setup();
    let r = reth(&s, 0, 1025);
    send_req(
        &mut s,
        Opcode::UC_RDMA_WRITE_ONLY,
        100,
        false,
        r,
        &vec![0xAB; 1025],
    );
    assert!(mr1(&s).iter().all(|b| *b == 0), "nothing written");
    assert!(s.p.dev[1].counters().uc_dropped >= 1);
    assert_uc_alive(&mut s);
    let r = reth(&s, 0x100, 64);
    send_req(
        &mut s,
        Opcode::UC_RDMA_WRITE_ONLY,
        101,
        false,
        r,
        &[0x5A; 64],
    );
    assert_eq!(&mr1(&s)[0x100..0x140], &[0x5A; 64]);
    assert_uc_alive(&mut s);
}

#[test]
fn r10_uc_bad_middle_drops_rest_of_message_then_resync() {
    let mut s = uc_setup();
    let data = pattern(1024, 4);
    let r = reth(&s, 0, 3072);
    send_req(&mut s, UC_WRITE_FIRST, 100, false, r, &data);
    send_req(&mut s, UC_WRITE_MIDDLE, 101, false, None, &[0xCD; 1020]);
    send_req(&mut s, UC_WRITE_LAST, 102, false, None, &[0xCD; 1024]);
    let m = mr1(&s);
    assert_eq!(&m[..1024], &data[..]);
    assert!(
        m[1024..].iter().all(|b| *b == 0),
        "the broken message placed nothing more"
    );
    assert_uc_alive(&mut s);
    let r = reth(&s, 0x4000, 2048);
    let d2 = pattern(2048, 8);
    send_req(&mut s, UC_WRITE_FIRST, 103, false, r, &d2[..1024]);
    send_req(&mut s, UC_WRITE_LAST, 104, false, None, &d2[1024..]);
    assert_eq!(&mr1(&s)[0x4000..0x4800], &d2[..]);
    assert_uc_alive(&mut s);
}
