//! Issue 11 §4, responder conformance: duplicate handling after a READ, PadCnt
//! and pad-word rules, and the order of the request checks. The responder
//! under test is side 1; side 0 is played by hand (its device's frames are
//! dropped) and every request is a hand-made frame.
//!
//! Oracles: Linux rxe (`drivers/infiniband/sw/rxe/rxe_resp.c`: the state
//! machine CHK_PSN → CHK_OP_SEQ → CHK_OP_VALID → CHK_RESOURCE → CHK_LENGTH →
//! CHK_RKEY → EXECUTE, `duplicate_request` acknowledging `ack_psn - 1` since
//! commit 4e4c53df5677 "IB/rxe: fix for duplicate request processing and ack
//! psns", `check_rkey`'s PadCnt rules), the IBTA MSN rule (the MSN counts
//! the messages completed: the last packet of a SEND/WRITE, a READ request
//! on arrival, each ATOMIC; ROCEV2-DIGEST §5 "MSN", C9-148) and the rule
//! that PadCnt pads the payload to a whole number of 4-byte words (IBTA 1.7
//! §9.2.3, ROCEV2-DIGEST §3 "Pad"). Every expected MSN below is counted
//! from the requests by that rule. No expected value is taken from our own
//! output.
//!
//! One documented difference from rxe: a duplicate's answer carries the MSN
//! of the original answer (the count as of the request it answers), where
//! rxe's `prepare_ack_packet` writes the current `resp.msn` (see the
//! responder's module docs for why).

mod common;

use std::time::Duration;

use common::*;
use roce_stack::testing::ConnOpts;
use roce_stack::verbs::{AccessFlags, Mtu, QpState, WcStatus};
use roce_stack::wire::ext::{AtomicEthRepr, RethRepr};
use roce_stack::wire::{BthRepr, ExtHeaders, Opcode};

const ACK: u8 = 0x1F;
const NAK_INVALID_REQUEST: u8 = 0x61;
const NAK_REMOTE_ACCESS: u8 = 0x62;

/// RC QP pair, path MTU 1024, the responder's ePSN 100, 64 KiB MRs; side 0
/// played by hand.
fn rig_with(opts: ConnOpts) -> Setup {
    let mut s = setup(1500, &opts, 64 * 1024);
    mute(&mut s.p, 1);
    s
}

fn rig() -> Setup {
    rig_with(ConnOpts {
        mtu: Mtu::Mtu1024,
        sq_psn: [100, 0x200],
        ..ConnOpts::default()
    })
}

fn reth(s: &Setup, va: u64, len: u32) -> Option<RethRepr> {
    Some(RethRepr {
        va,
        rkey: s.mr[1].rkey,
        dma_len: len,
    })
}

/// Put `frame` on the wire from side 0 and let the responder answer.
fn inject(s: &mut Setup, frame: &[u8]) {
    s.p.inject(0, frame);
    s.p.advance(Duration::from_micros(50));
}

fn req(s: &mut Setup, op: Opcode, psn: u32, ack_req: bool, r: Option<RethRepr>, data: &[u8]) {
    let f = req_frame(&s.p, 0, s.c.qpn[1], op, psn, ack_req, r, data);
    inject(s, &f);
}

fn fetch_add(s: &mut Setup, psn: u32, va: u64, rkey: u32) {
    let mut bth = BthRepr::new(Opcode::RC_FETCH_ADD, s.c.qpn[1], psn);
    bth.ack_req = true;
    let ext = ExtHeaders {
        atomic_eth: Some(AtomicEthRepr {
            va,
            rkey,
            swap_add: 5,
            compare: 0,
        }),
        ..ExtHeaders::default()
    };
    let f = s.p.frame(0, bth, ext, &[]);
    inject(s, &f);
}

/// Every frame the responder sent so far.
fn responses(s: &Setup) -> Vec<Seen> {
    seen_from(&s.p, 1)
}

fn last_response(s: &Setup) -> Seen {
    responses(s).pop().expect("a response")
}

fn mr1(s: &Setup) -> Vec<u8> {
    s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice().to_vec()
}

fn qp1_state(s: &Setup) -> QpState {
    s.p.dev[1].qp(s.c.qpn[1]).unwrap().state()
}

// ---------------------------------------------------------------------------
// Duplicates after a READ (Linux 4e4c53df5677).

/// WRITE at 100 (ACKed 100, MSN 1), READ of 3000 bytes at 101 (response PSNs
/// 101..=103, MSN 2), then the WRITE again: rxe ACKs `ack_psn - 1` = 100, the
/// last SEND/WRITE PSN executed, not ePSN - 1 = 103, which is the READ's
/// last response PSN (an ACK for 103 would tell a requester the READ is
/// done); its MSN is that of the WRITE's own ACK, 1 (one message completed
/// through PSN 100), not the current 2.
#[test]
fn duplicate_write_after_read_is_acked_below_the_read() {
    let mut s = rig();
    let r = reth(&s, 0x100, 64);
    req(
        &mut s,
        Opcode::RC_RDMA_WRITE_ONLY,
        100,
        true,
        r,
        &[0xAB; 64],
    );
    let r = reth(&s, 0x1000, 3000);
    req(&mut s, Opcode::RC_RDMA_READ_REQUEST, 101, true, r, &[]);
    let before = responses(&s);
    assert_eq!(
        before.iter().map(|f| (f.opcode, f.psn)).collect::<Vec<_>>(),
        [(0x11, 100), (0x0D, 101), (0x0E, 102), (0x0F, 103)]
    );
    let r = reth(&s, 0x100, 64);
    req(
        &mut s,
        Opcode::RC_RDMA_WRITE_ONLY,
        100,
        true,
        r,
        &[0xAB; 64],
    );
    let dup = last_response(&s);
    assert_eq!(responses(&s).len(), 5, "one answer to the duplicate");
    assert_eq!((dup.opcode, dup.psn), (0x11, 100), "ACK PSN = ack_psn - 1");
    assert_eq!(dup.aeth, Some((ACK, 1)), "the MSN as of PSN 100");
    assert_eq!(s.p.dev[1].counters().duplicate_request, 1);
    assert_eq!(
        s.p.dev[1].counters().rx_write_requests,
        1,
        "not re-executed"
    );
}

/// The same with a two-packet SEND before the READ: the ACK names the SEND's
/// LAST packet (101), rxe's `ack_psn` following every executed SEND packet,
/// with MSN 1 (the SEND).
#[test]
fn duplicate_send_first_after_read_is_acked_at_the_send_last() {
    let mut s = rig();
    post_recv(&mut s, 1, 7, 0x4000, 4096);
    let data = pattern(1500, 3);
    req(
        &mut s,
        Opcode::RC_SEND_FIRST,
        100,
        false,
        None,
        &data[..1024],
    );
    req(&mut s, Opcode::RC_SEND_LAST, 101, true, None, &data[1024..]);
    let r = reth(&s, 0x1000, 1024);
    req(&mut s, Opcode::RC_RDMA_READ_REQUEST, 102, true, r, &[]);
    req(
        &mut s,
        Opcode::RC_SEND_FIRST,
        100,
        false,
        None,
        &data[..1024],
    );
    let dup = last_response(&s);
    assert_eq!((dup.opcode, dup.psn), (0x11, 101));
    assert_eq!(dup.aeth, Some((ACK, 1)));
    let wcs = poll_all(&mut s.p, 1, s.c.cq[1]);
    assert_eq!(ids_status(&wcs), [(7, WcStatus::Success)], "received once");
}

/// rxe's `atomic_reply` moves `ack_psn` like `execute` does, so a duplicate
/// WRITE after an ATOMIC is ACKed at the atomic's PSN, MSN 2 (WRITE and
/// ATOMIC).
#[test]
fn duplicate_write_after_atomic_is_acked_at_the_atomic() {
    let mut s = rig();
    let r = reth(&s, 0x100, 64);
    req(&mut s, Opcode::RC_RDMA_WRITE_ONLY, 100, true, r, &[1; 64]);
    let rkey = s.mr[1].rkey;
    fetch_add(&mut s, 101, 0x800, rkey);
    let r = reth(&s, 0x100, 64);
    req(&mut s, Opcode::RC_RDMA_WRITE_ONLY, 100, true, r, &[1; 64]);
    let dup = last_response(&s);
    assert_eq!((dup.opcode, dup.psn), (0x11, 101));
    assert_eq!(dup.aeth, Some((ACK, 2)));
}

/// Nothing executed yet but a READ: `ack_psn` is still the RQ PSN (rxe sets
/// it with `resp.psn` on modify), so a duplicate (a packet from before the
/// connection's first PSN) is ACKed at ePSN₀ - 1 = 99, below the READ.
#[test]
fn duplicate_after_only_a_read_is_acked_before_the_first_psn() {
    let mut s = rig();
    let r = reth(&s, 0x1000, 2048);
    req(&mut s, Opcode::RC_RDMA_READ_REQUEST, 100, true, r, &[]);
    let r = reth(&s, 0x100, 64);
    req(&mut s, Opcode::RC_RDMA_WRITE_ONLY, 99, true, r, &[1; 64]);
    let dup = last_response(&s);
    assert_eq!((dup.opcode, dup.psn), (0x11, 99));
    assert!(
        mr1(&s)[0x100..0x140].iter().all(|b| *b == 0),
        "not executed"
    );
}

/// Duplicate ATOMIC and READ replays carry the MSN of the original answer:
/// the ATOMIC was message 1, the READ message 2, though three messages are
/// complete when the duplicates come (rxe and rdmavt would send 3); the
/// original value and the READ bytes are those of the first execution.
#[test]
fn duplicate_atomic_and_read_replays_carry_the_original_msn() {
    let mut s = rig();
    let rkey = s.mr[1].rkey;
    fetch_add(&mut s, 100, 0x800, rkey); // MSN 1
    let r = reth(&s, 0x1000, 512);
    req(&mut s, Opcode::RC_RDMA_READ_REQUEST, 101, true, r, &[]); // MSN 2
    let r = reth(&s, 0x100, 64);
    req(&mut s, Opcode::RC_RDMA_WRITE_ONLY, 102, true, r, &[9; 64]); // MSN 3
    let first = responses(&s);
    assert_eq!(first[0].opcode, 0x12);
    assert_eq!(first[0].aeth, Some((ACK, 1)));
    assert_eq!(first[1].aeth, Some((ACK, 2)));
    let orig_atomic = first[0].raw[first[0].raw.len() - 12..first[0].raw.len() - 4].to_vec();

    fetch_add(&mut s, 100, 0x800, rkey);
    let a = last_response(&s);
    assert_eq!((a.opcode, a.psn, a.aeth), (0x12, 100, Some((ACK, 1))));
    assert_eq!(
        &a.raw[a.raw.len() - 12..a.raw.len() - 4],
        &orig_atomic[..],
        "saved original value, not re-executed"
    );
    let r = reth(&s, 0x1000, 512);
    req(&mut s, Opcode::RC_RDMA_READ_REQUEST, 101, true, r, &[]);
    let rd = last_response(&s);
    assert_eq!((rd.opcode, rd.psn, rd.aeth), (0x10, 101, Some((ACK, 2))));
    assert_eq!(rd.payload, first[1].payload);
    assert_eq!(s.p.dev[1].counters().rx_atomic_requests, 1);
}

// ---------------------------------------------------------------------------
// PadCnt and pad words (IBTA 1.7 §9.2.3; rxe check_length/check_rkey).

/// A WRITE_FIRST at ePSN with `body` after its RETH (payload, then `pad`
/// pad bytes per PadCnt).
fn write_first_with(s: &Setup, body: &[u8], pad: u8) -> Vec<u8> {
    let base = req_frame(
        &s.p,
        0,
        s.c.qpn[1],
        Opcode::RC_RDMA_WRITE_FIRST,
        100,
        false,
        reth(s, 0, 4096),
        &[0; 4],
    );
    with_body(&base, 16, body, pad)
}

fn assert_invalid_request_nak(s: &Setup, psn: u32) {
    let r = responses(s);
    assert_eq!(r.len(), 1, "one answer: {r:?}");
    assert_eq!((r[0].opcode, r[0].psn), (0x11, psn));
    assert_eq!(r[0].aeth.map(|a| a.0), Some(NAK_INVALID_REQUEST));
    assert_eq!(qp1_state(s), QpState::Err);
}

/// The frame: a FIRST whose 1024 bytes are 1021 data bytes and 3
/// pad bytes. FIRST must carry exactly PMTU payload bytes and PadCnt 0.
#[test]
fn first_of_pmtu_minus_3_data_and_3_pad_bytes_naks_invalid_request() {
    let mut s = rig();
    let f = write_first_with(&s, &pattern(1024, 1), 3);
    inject(&mut s, &f);
    assert!(mr1(&s).iter().all(|b| *b == 0), "nothing written");
    assert_invalid_request_nak(&s, 100);
}

/// A FIRST with the full 1024 data bytes and PadCnt 3 (payload + pad = 1027,
/// not a whole number of words; and FIRST must have PadCnt 0).
#[test]
fn first_of_pmtu_data_with_padcnt_3_naks_invalid_request() {
    let mut s = rig();
    let mut body = pattern(1024, 1);
    body.extend_from_slice(&[0; 3]);
    let f = write_first_with(&s, &body, 3);
    inject(&mut s, &f);
    assert!(mr1(&s).iter().all(|b| *b == 0), "nothing written");
    assert_invalid_request_nak(&s, 100);
}

/// A MIDDLE of exactly 1024 data bytes but PadCnt 1 (one pad byte after
/// them): MIDDLE must carry PadCnt 0, and 1024 + 1 is not whole words.
#[test]
fn middle_with_padcnt_naks_invalid_request() {
    let mut s = rig();
    let data = pattern(1024, 2);
    let r = reth(&s, 0, 3072);
    req(&mut s, Opcode::RC_RDMA_WRITE_FIRST, 100, false, r, &data);
    let base = req_frame(
        &s.p,
        0,
        s.c.qpn[1],
        Opcode::RC_RDMA_WRITE_MIDDLE,
        101,
        false,
        None,
        &[0; 4],
    );
    let mut body = pattern(1024, 3);
    body.push(0);
    let f = with_body(&base, 0, &body, 1);
    inject(&mut s, &f);
    let m = mr1(&s);
    assert_eq!(&m[..1024], &data[..], "the FIRST was placed");
    assert!(m[1024..].iter().all(|b| *b == 0), "the MIDDLE was not");
    assert_invalid_request_nak(&s, 101);
}

/// An ONLY of 5 data bytes with PadCnt 0: 5 + 0 is not a multiple of 4.
#[test]
fn only_whose_payload_and_pad_are_not_whole_words_naks_invalid_request() {
    let mut s = rig();
    post_recv(&mut s, 1, 1, 0x4000, 64);
    let base = req_frame(
        &s.p,
        0,
        s.c.qpn[1],
        Opcode::RC_SEND_ONLY,
        100,
        true,
        None,
        &[0; 4],
    );
    let f = with_body(&base, 0, &[1, 2, 3, 4, 5], 0);
    inject(&mut s, &f);
    assert_invalid_request_nak(&s, 100);
    // rxe: the receive WQE taken at CHK_RESOURCE completes with the error.
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 1, s.c.cq[1])),
        [(1, WcStatus::RemInvReqErr)]
    );
}

/// The well-formed counterpart (5 data bytes, PadCnt 3) is accepted, so the
/// frames above fail for their pad alone.
#[test]
fn only_with_5_bytes_and_padcnt_3_is_accepted() {
    let mut s = rig();
    post_recv(&mut s, 1, 1, 0x4000, 64);
    let base = req_frame(
        &s.p,
        0,
        s.c.qpn[1],
        Opcode::RC_SEND_ONLY,
        100,
        true,
        None,
        &[0; 4],
    );
    let f = with_body(&base, 0, &[1, 2, 3, 4, 5, 0, 0, 0], 3);
    inject(&mut s, &f);
    let r = last_response(&s);
    assert_eq!((r.opcode, r.psn, r.aeth), (0x11, 100, Some((ACK, 1))));
    let wcs = poll_all(&mut s.p, 1, s.c.cq[1]);
    assert_eq!(ids_status(&wcs), [(1, WcStatus::Success)]);
    assert_eq!(wcs[0].byte_len, 5);
    assert_eq!(&mr1(&s)[0x4000..0x4005], &[1, 2, 3, 4, 5]);
}

/// UC never NAKs: the broken message is dropped and counted, the QP stays up.
#[test]
fn uc_first_with_padcnt_is_dropped_silently() {
    let mut s = rig_with(ConnOpts {
        qp_type: roce_stack::verbs::QpType::Uc,
        mtu: Mtu::Mtu1024,
        sq_psn: [100, 0x200],
        ..ConnOpts::default()
    });
    let base = req_frame(
        &s.p,
        0,
        s.c.qpn[1],
        Opcode(0x26), /* UC_RDMA_WRITE_FIRST */
        100,
        false,
        reth(&s, 0, 4096),
        &[0; 4],
    );
    let mut body = pattern(1024, 1);
    body.extend_from_slice(&[0; 3]);
    let f = with_body(&base, 16, &body, 3);
    inject(&mut s, &f);
    assert!(responses(&s).is_empty());
    assert!(mr1(&s).iter().all(|b| *b == 0));
    assert_eq!(s.p.dev[1].counters().uc_dropped, 1);
    assert_eq!(qp1_state(&s), QpState::Rts);
}

// ---------------------------------------------------------------------------
// Check order (rxe rxe_responder state machine).

/// CHK_RESOURCE before CHK_LENGTH: a SEND_ONLY of 1025 bytes (too long for
/// the PMTU) with no receive WQE gets an RNR NAK and changes nothing; once a
/// WQE is posted the same packet gets NAK invalid request and the WQE
/// completes with REM_INV_REQ_ERR (rxe class C error, `do_complete` of
/// `resp.wqe`).
#[test]
fn order_missing_receive_wqe_is_found_before_a_bad_length() {
    let mut s = rig();
    let data = pattern(1025, 4);
    req(&mut s, Opcode::RC_SEND_ONLY, 100, true, None, &data);
    let r = responses(&s);
    assert_eq!(r.len(), 1);
    // RNR NAK: 0x20 | min_rnr_timer (1 in ConnOpts::default()).
    assert_eq!(
        (r[0].opcode, r[0].psn, r[0].aeth.map(|a| a.0)),
        (0x11, 100, Some(0x21))
    );
    assert_eq!(qp1_state(&s), QpState::Rts);
    assert_eq!(s.p.dev[1].counters().send_rnr_err, 1);
    assert_eq!(s.p.dev[1].counters().resp_invalid_request, 0);

    post_recv(&mut s, 1, 5, 0x4000, 4096);
    req(&mut s, Opcode::RC_SEND_ONLY, 100, true, None, &data);
    let r = last_response(&s);
    assert_eq!(
        (r.psn, r.aeth.map(|a| a.0)),
        (100, Some(NAK_INVALID_REQUEST))
    );
    assert_eq!(qp1_state(&s), QpState::Err);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 1, s.c.cq[1])),
        [(5, WcStatus::RemInvReqErr)]
    );
}

/// CHK_OP_VALID before CHK_RESOURCE: a WRITE_ONLY_WITH_IMMEDIATE to a QP
/// without REMOTE_WRITE and without a receive WQE gets NAK invalid request,
/// not an RNR NAK.
#[test]
fn order_qp_access_is_checked_before_the_receive_wqe() {
    let mut s = rig_with(ConnOpts {
        mtu: Mtu::Mtu1024,
        sq_psn: [100, 0x200],
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        ..ConnOpts::default()
    });
    let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, s.c.qpn[1], 100);
    bth.ack_req = true;
    let ext = ExtHeaders {
        reth: reth(&s, 0, 64),
        immdt: Some(0x1234),
        ..ExtHeaders::default()
    };
    let f = s.p.frame(0, bth, ext, &[7; 64]);
    inject(&mut s, &f);
    let r = responses(&s);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].aeth.map(|a| a.0), Some(NAK_INVALID_REQUEST));
    assert_eq!(s.p.dev[1].counters().send_rnr_err, 0);
}

/// CHK_LENGTH before CHK_RKEY: a WRITE_ONLY of 1025 bytes with a wrong R_Key
/// gets NAK invalid request (0x61), not remote access error (0x62).
#[test]
fn order_length_is_checked_before_the_rkey() {
    let mut s = rig();
    let bad = Some(RethRepr {
        va: 0,
        rkey: s.mr[1].rkey ^ 0x5A5A_0000,
        dma_len: 1025,
    });
    req(
        &mut s,
        Opcode::RC_RDMA_WRITE_ONLY,
        100,
        true,
        bad,
        &pattern(1025, 1),
    );
    assert_eq!(
        last_response(&s).aeth.map(|a| a.0),
        Some(NAK_INVALID_REQUEST)
    );
    assert_eq!(s.p.dev[1].counters().resp_remote_access_error, 0);
}

/// CHK_RKEY before the atomic's alignment (rxe `atomic_reply` checks it when
/// executing): a FETCH_ADD at a misaligned VA with a wrong R_Key gets remote
/// access error; with the right R_Key, invalid request.
#[test]
fn order_atomic_rkey_before_alignment() {
    let mut s = rig();
    let rkey = s.mr[1].rkey;
    fetch_add(&mut s, 100, 0x804, rkey ^ 0x5A5A_0000);
    assert_eq!(last_response(&s).aeth.map(|a| a.0), Some(NAK_REMOTE_ACCESS));

    let mut s = rig();
    let rkey = s.mr[1].rkey;
    fetch_add(&mut s, 100, 0x804, rkey);
    assert_eq!(
        last_response(&s).aeth.map(|a| a.0),
        Some(NAK_INVALID_REQUEST)
    );
    assert!(mr1(&s).iter().all(|b| *b == 0), "nothing added");
}
