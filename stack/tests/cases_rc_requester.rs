//! CASES.md requester scenarios: R15 (RNR), R16 (no spurious retransmits),
//! R18 (fatal NAK and flushing), R19 (multi-SGE gather), R20 (zero-length
//! messages across the PSN wrap), R22 (QP re-creation), R24 (path MTU vs
//! Ethernet MTU) and R25 (UDP source port, transmit side).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use roce_stack::testing::{connect, connect_with, test_device, ConnOpts, Faults, Pair, Rng};
use roce_stack::time::Instant;
use roce_stack::transport::av::{udp_sport, AddressVector};
use roce_stack::verbs::{
    AsyncEvent, Mtu, QpAttr, QpAttrMask, QpState, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
};
use roce_stack::wire::ext::AethRepr;
use roce_stack::wire::{BthRepr, ExtHeaders, Opcode, RocePacket};

// ---------------------------------------------------------------------------
// R15: RNR NAK.

/// CASES R15 set-up: ACK timeout code 8 (about 1.05 ms), first PSN `sq_psn`,
/// zero wire delay; side 1 is played by hand.
fn r15_setup(sq_psn: u32, retry_cnt: u8, rnr_retry: u8) -> Setup {
    let opts = ConnOpts {
        sq_psn: [sq_psn, 0x200],
        timeout: 8,
        retry_cnt,
        rnr_retry,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64 * 1024);
    s.p.faults.delay = Duration::ZERO;
    mute(&mut s.p, 0);
    s
}

/// Times at which side 0 sent PSN `psn`.
fn sends_of(s: &Setup, psn: u32) -> Vec<Instant> {
    seen_from(&s.p, 0)
        .iter()
        .filter(|f| f.psn == psn)
        .map(|f| f.at)
        .collect()
}

fn sent_count(s: &Setup) -> usize {
    seen_from(&s.p, 0).len()
}

/// Inject an AETH-only response from the hand-played side 1 and process it.
fn respond(s: &mut Setup, psn: u32, syndrome: u8) {
    let f = ack_frame(&s.p, 1, s.c.qpn[0], psn, syndrome, 0);
    s.p.inject(1, &f);
    s.p.advance(Duration::ZERO);
}

/// Send PSN 10 (a SEND), answer it with an RNR NAK of timer `code`, and
/// return how long after the NAK the resend came.
fn rnr_wait(code: u8) -> Duration {
    let mut s = r15_setup(10, 7, 7);
    post_send_msg(&mut s, 1, 0, 16);
    assert!(run_until_sent(&mut s.p, 0, 1));
    let nak_at = s.p.now;
    respond(&mut s, 10, 0x20 | code);
    assert!(run_until_sent(&mut s.p, 0, 2));
    let sends = sends_of(&s, 10);
    assert_eq!(sends.len(), 2, "one resend, nothing else before it");
    // Only the RNR timer led to the resend; the ACK timer never fired.
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 0);
    // The resend is acknowledged: the WQE succeeds.
    respond(&mut s, 10, 0x1F);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    sends[1] - nak_at
}

#[test]
fn r15a_rnr_wait_not_cut_short_by_ack_timer() {
    let mut s = r15_setup(10, 7, 7);
    post_send_msg(&mut s, 1, 0, 16);
    assert!(run_until_sent(&mut s.p, 0, 1));
    let first = seen_from(&s.p, 0);
    assert_eq!((first[0].opcode, first[0].psn), (0x04, 10));
    let nak_at = s.p.now;
    respond(&mut s, 10, 0x32); // RNR NAK, timer code 18 = 5.12 ms
                               // At 5.12 ms minus 1 ns: still nothing, though the ACK timer (1.05 ms)
                               // would have fired long ago.
    s.p.advance(Duration::from_nanos(5_120_000 - 1));
    assert_eq!(sent_count(&s), 1);
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 0);
    s.p.advance(Duration::from_nanos(1));
    let sends = sends_of(&s, 10);
    assert_eq!(sends.len(), 2);
    assert_eq!(sends[1] - nak_at, Duration::from_micros(5120));
    respond(&mut s, 10, 0x1F);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
}

#[test]
fn r15a_rnr_real_peer_packets_behind_the_rnr_do_not_cut_the_wait() {
    // Our responder, no receive WQE, RNR timer code 18 (5.12 ms); the
    // requester has three WRITEs in flight behind the SEND. Those must not
    // draw a sequence NAK that would make the requester resend early.
    let opts = ConnOpts {
        timeout: 8,
        min_rnr_timer: 18,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 8192);
    s.p.faults.delay = Duration::ZERO;
    post_send_msg(&mut s, 1, 0, 16);
    for i in 0..3 {
        post_write(&mut s, 2 + i, 0, 64, 64 * i);
    }
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| p.dev[0].counters().rcvd_rnr_err
            == 1));
    let nak_at = s.p.now;
    s.p.advance(Duration::from_micros(5120) - Duration::from_nanos(1));
    assert_eq!(
        seen_from(&s.p, 0).len(),
        4,
        "nothing resent during the RNR wait"
    );
    post_recv(&mut s, 1, 9, 0x1000, 64);
    s.p.advance(Duration::from_nanos(1));
    let f = seen_from(&s.p, 0);
    assert_eq!(f.len(), 8, "SEND and the three WRITEs resent at 5.12 ms");
    assert_eq!(
        (f[4].psn, f[4].at - nak_at),
        (0x100, Duration::from_micros(5120))
    );
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 4));
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        (1..=4).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(s.p.dev[1].counters().seq_nak_sent, 0);
    assert_eq!(s.p.dev[0].counters().packet_seq_err, 0);
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 0);
    assert_eq!(seen_from(&s.p, 0).len(), 8);
}

#[test]
fn r15a_rnr_does_not_use_up_retry_cnt() {
    // retry_cnt 0: if an RNR consumed a transport retry, the first RNR would
    // end in RETRY_EXC_ERR.
    let mut s = r15_setup(10, 0, 7);
    post_send_msg(&mut s, 1, 0, 16);
    for n in 1..=3 {
        assert!(run_until_sent(&mut s.p, 0, n));
        respond(&mut s, 10, 0x21);
    }
    assert!(run_until_sent(&mut s.p, 0, 4));
    respond(&mut s, 10, 0x1F);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(s.p.dev[0].counters().retry_exceeded_err, 0);
}

#[test]
fn r15b_rnr_timer_code_zero() {
    // Code 0 is the longest wait: 655.36 ms.
    assert_eq!(rnr_wait(0), Duration::from_micros(655_360));
}

#[test]
fn r15b_rnr_timer_code_one() {
    assert_eq!(rnr_wait(1), Duration::from_micros(10));
}

#[test]
fn r15b_rnr_timer_code_twelve() {
    assert_eq!(rnr_wait(12), Duration::from_micros(640));
}

#[test]
fn r15c_rnr_retry_zero_fails_and_flushes() {
    let mut s = r15_setup(10, 7, 0);
    post_recv(&mut s, 0, 101, 0x8000, 64);
    post_recv(&mut s, 0, 102, 0x9000, 64);
    post_send_msg(&mut s, 1, 0, 16);
    post_write(&mut s, 2, 0, 100, 0);
    post_send_msg(&mut s, 3, 0, 8);
    assert!(run_until_sent(&mut s.p, 0, 3));
    respond(&mut s, 10, 0x21);
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        vec![
            (1, WcStatus::RnrRetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr),
            (101, WcStatus::WrFlushErr),
            (102, WcStatus::WrFlushErr),
        ]
    );
    assert_eq!(s.p.dev[0].qp(s.c.qpn[0]).unwrap().state(), QpState::Err);
    assert_eq!(s.p.dev[0].counters().rnr_nak_retry_err, 1);
    s.p.advance(Duration::from_secs(1));
    assert_eq!(sent_count(&s), 3, "nothing more on the wire");
}

#[test]
fn r15d_rnr_retry_three_fourth_rnr_fails_ack_resets() {
    let mut s = r15_setup(10, 7, 3);
    // SEND 1 (PSN 10): three RNRs are retried ...
    post_send_msg(&mut s, 1, 0, 16);
    for n in 1..=3 {
        assert!(run_until_sent(&mut s.p, 0, n));
        respond(&mut s, 10, 0x21);
    }
    // ... the 4th attempt goes out and is ACKed: the count starts afresh.
    assert!(run_until_sent(&mut s.p, 0, 4));
    respond(&mut s, 10, 0x1F);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    // SEND 2 (PSN 11): three RNRs retried, the 4th in a row fails.
    post_send_msg(&mut s, 2, 0, 16);
    for n in 5..=7 {
        assert!(run_until_sent(&mut s.p, 0, n));
        respond(&mut s, 11, 0x21);
    }
    assert!(run_until_sent(&mut s.p, 0, 8));
    assert!(poll_all(&mut s.p, 0, s.c.cq[0]).is_empty());
    respond(&mut s, 11, 0x21);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(2, WcStatus::RnrRetryExcErr)]
    );
    assert_eq!(s.p.dev[0].qp(s.c.qpn[0]).unwrap().state(), QpState::Err);
    assert_eq!(sends_of(&s, 11).len(), 4);
}

#[test]
fn r15e_rnr_retry_seven_survives_1000_rnrs() {
    let mut s = r15_setup(10, 7, 7);
    post_send_msg(&mut s, 1, 0, 16);
    for n in 1..=1000 {
        assert!(run_until_sent(&mut s.p, 0, n), "attempt {n}");
        respond(&mut s, 10, 0x21);
    }
    assert!(run_until_sent(&mut s.p, 0, 1001));
    assert!(
        poll_all(&mut s.p, 0, s.c.cq[0]).is_empty(),
        "still retrying, no error"
    );
    assert_eq!(s.p.dev[0].qp(s.c.qpn[0]).unwrap().state(), QpState::Rts);
    respond(&mut s, 10, 0x1F);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(s.p.dev[0].counters().rcvd_rnr_err, 1000);
}

#[test]
fn r15e_rnr_retry_seven_real_peer_without_receive_wqe() {
    // Our own responder has no receive WQE: it RNR-NAKs every attempt with
    // timer code 1 until one is posted.
    let opts = ConnOpts {
        timeout: 8,
        rnr_retry: 7,
        min_rnr_timer: 1,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 4096);
    post_send_msg(&mut s, 1, 0, 100);
    assert!(s.p.run_until(Duration::from_secs(10), |p| p.dev[0]
        .counters()
        .rcvd_rnr_err
        >= 1000));
    assert!(poll_all(&mut s.p, 0, s.c.cq[0]).is_empty());
    assert_eq!(
        s.p.dev[1].counters().send_rnr_err,
        s.p.dev[0].counters().rcvd_rnr_err
    );
    // RNR is not an error at the responder: its QP stays in RTS.
    assert_eq!(s.p.dev[1].qp(s.c.qpn[1]).unwrap().state(), QpState::Rts);
    post_recv(&mut s, 1, 77, 0, 1000);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    let r = poll_all(&mut s.p, 1, s.c.cq[1]);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (77, WcStatus::Success, 100)
    );
    // No timeouts and no sequence errors on the way: only RNR waits.
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 0);
    assert_eq!(s.p.dev[0].counters().packet_seq_err, 0);
}

#[test]
fn r15f_ack_during_rnr_wait_completes_earlier_wqes_without_resend() {
    // WRITE A at PSN 8, WRITE B at 9, SEND C at 10, WRITE D at 11.
    let mut s = r15_setup(8, 7, 7);
    post_write(&mut s, 1, 0, 64, 0);
    post_write(&mut s, 2, 0, 64, 0);
    post_send_msg(&mut s, 3, 0, 16);
    post_write(&mut s, 4, 0, 64, 0);
    assert!(run_until_sent(&mut s.p, 0, 4));
    // C is RNR-NAKed (5.12 ms). The ACK for B arrives late, during the wait.
    let nak_at = s.p.now;
    respond(&mut s, 10, 0x32);
    s.p.advance(Duration::from_millis(1));
    respond(&mut s, 9, 0x1F);
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    // An ACK for A (older still) changes nothing either.
    respond(&mut s, 8, 0x1F);
    assert!(poll_all(&mut s.p, 0, s.c.cq[0]).is_empty());
    s.p.advance(Duration::from_micros(4120) - Duration::from_nanos(1));
    assert_eq!(sent_count(&s), 4, "no early resend of PSN 10");
    s.p.advance(Duration::from_nanos(1));
    let f = seen_from(&s.p, 0);
    assert_eq!(f.len(), 6);
    assert_eq!(
        (f[4].psn, f[4].at - nak_at),
        (10, Duration::from_micros(5120))
    );
    assert_eq!(f[5].psn, 11);
    respond(&mut s, 11, 0x1F);
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        vec![(3, WcStatus::Success), (4, WcStatus::Success)]
    );
}

#[test]
fn r15_ack_past_the_rnr_psn_ends_the_wait() {
    // SEND at 10 is RNR-NAKed with code 0 (655.36 ms); then an ACK for 10
    // arrives (a duplicate copy was accepted): the WRITE at 11 is resent at
    // once instead of after the wait.
    let mut s = r15_setup(10, 7, 7);
    post_send_msg(&mut s, 1, 0, 16);
    post_write(&mut s, 2, 0, 64, 0);
    assert!(run_until_sent(&mut s.p, 0, 2));
    respond(&mut s, 10, 0x20);
    s.p.advance(Duration::from_millis(1));
    assert_eq!(sent_count(&s), 2);
    let ack_at = s.p.now;
    respond(&mut s, 10, 0x1F);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    let f = seen_from(&s.p, 0);
    assert_eq!(f.len(), 3);
    assert_eq!((f[2].psn, f[2].at), (11, ack_at));
    respond(&mut s, 11, 0x1F);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(2, WcStatus::Success)]
    );
    assert_eq!(s.p.dev[0].poll_timeout(), None);
}

// ---------------------------------------------------------------------------
// R16: no spurious retransmits.

fn r16_opts() -> ConnOpts {
    ConnOpts {
        timeout: 14, // about 67.1 ms
        ..ConnOpts::default()
    }
}

#[test]
fn r16a_acked_writes_cause_no_retransmit() {
    let mut s = setup(1500, &r16_opts(), 64 * 1024);
    // 0.5 ms each way: every WRITE is ACKed 1 ms after it leaves.
    s.p.faults.delay = Duration::from_micros(500);
    for i in 0..100u64 {
        post_write(&mut s, i, i * 64, 64, i * 64);
        s.p.advance(Duration::from_millis(10));
    }
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(wcs.len(), 100);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let writes = seen_from(&s.p, 0);
    assert_eq!(writes.len(), 100, "zero retransmissions");
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 0);
    assert_eq!(s.p.dev[1].counters().duplicate_request, 0);
    assert_eq!(seen_from(&s.p, 1).len(), 100);
    // R16 (c): all done; 10 s later still nothing has been sent.
    assert_eq!(s.p.dev[0].poll_timeout(), None);
    s.p.advance(Duration::from_secs(10));
    assert_eq!(s.p.captured().len(), 200);
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 0);
}

#[test]
fn r16b_slow_read_keeps_rearming_the_timer() {
    // READ of 256 KiB at MTU 1024: 256 response packets, one every 1 ms
    // (256 ms in all, more than the 67 ms timeout). Side 1 played by hand.
    let mut s = setup(1500, &r16_opts(), 256 * 1024);
    mute(&mut s.p, 0);
    s.p.dev[0]
        .mr_mut(s.mr[0].lkey)
        .unwrap()
        .as_mut_slice()
        .fill(0);
    let sge = [Sge {
        addr: 0,
        length: 256 * 1024,
        lkey: s.mr[0].lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaRead, &sge);
    wr.remote_addr = 0x10_0000;
    wr.rkey = 0x1234;
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
    assert!(run_until_sent(&mut s.p, 0, 1));
    let req = &seen_from(&s.p, 0)[0];
    assert_eq!(req.opcode, 0x0C);
    let first = req.psn;
    let data = pattern(256 * 1024, 42);
    for i in 0..256u32 {
        s.p.advance(Duration::from_millis(1));
        let op = match i {
            0 => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            255 => Opcode::RC_RDMA_READ_RESPONSE_LAST,
            _ => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let ext = ExtHeaders {
            aeth: (i == 0 || i == 255).then_some(AethRepr {
                syndrome: 0x1F,
                msn: 1,
            }),
            ..ExtHeaders::default()
        };
        let bth = BthRepr::new(op, s.c.qpn[0], first + i);
        let f = s.p.frame(1, bth, ext, &data[i as usize * 1024..][..1024]);
        s.p.inject(1, &f);
    }
    s.p.advance(Duration::from_millis(1));
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(ids_status(&wcs), vec![(1, WcStatus::Success)]);
    assert_eq!(wcs[0].opcode, WcOpcode::RdmaRead);
    assert_eq!(s.p.dev[0].mr(s.mr[0].lkey).unwrap().as_slice(), &data[..]);
    assert_eq!(seen_from(&s.p, 0).len(), 1, "no retry");
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 0);
    // R16 (c).
    assert_eq!(s.p.dev[0].poll_timeout(), None);
    s.p.advance(Duration::from_secs(10));
    assert_eq!(seen_from(&s.p, 0).len(), 1);
}

#[test]
fn r16d_lost_last_ack_gives_exactly_one_retransmit_at_the_timeout() {
    let mut s = setup(1500, &r16_opts(), 64 * 1024);
    let last_psn = 0x100 + 99;
    let mut dropped = false;
    s.p.drop_filter = Some(Box::new(move |from, _, frame| {
        let Ok(pkt) = RocePacket::parse(frame) else {
            return false;
        };
        if from == 1
            && pkt.bth().opcode == Opcode::RC_ACKNOWLEDGE
            && pkt.bth().psn == last_psn
            && !dropped
        {
            dropped = true;
            return true;
        }
        false
    }));
    for i in 0..100u64 {
        post_write(&mut s, i, i * 64, 64, i * 64);
        s.p.advance(Duration::from_millis(10));
    }
    s.p.advance(Duration::from_millis(100));
    let sent = sends_of(&s, last_psn);
    assert_eq!(sent.len(), 2, "exactly one retransmission");
    assert_eq!(sent[1] - sent[0], ack_timeout(14));
    assert_eq!(seen_from(&s.p, 0).len(), 101);
    assert_eq!(s.p.dev[0].counters().local_ack_timeout_err, 1);
    assert_eq!(s.p.dev[1].counters().duplicate_request, 1);
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(wcs.len(), 100);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    s.p.advance(Duration::from_secs(10));
    assert_eq!(seen_from(&s.p, 0).len(), 101);
}

// ---------------------------------------------------------------------------
// R18: error completions and flushing after a fatal NAK.

fn r18_once(seed: u64) {
    let mut p = Pair::new(1500, Faults::default(), seed);
    let c = connect(&mut p, &ConnOpts::default());
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(4096, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 4096], 0, all_access())
        .unwrap();
    let rs = [Sge {
        addr: 2048,
        length: 512,
        lkey: a.lkey,
    }];
    p.dev[0]
        .post_recv(
            c.qpn[0],
            &RecvWr {
                wr_id: 101,
                sg_list: &rs,
            },
        )
        .unwrap();
    p.dev[0]
        .post_recv(
            c.qpn[0],
            &RecvWr {
                wr_id: 102,
                sg_list: &rs,
            },
        )
        .unwrap();
    let rs1 = [Sge {
        addr: 0,
        length: 512,
        lkey: b.lkey,
    }];
    p.dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 201,
                sg_list: &rs1,
            },
        )
        .unwrap();
    p.start_capture();
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: a.lkey,
    }];
    // WQE1: WRITE with a bad R_Key.
    let mut w1 = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    w1.rkey = b.rkey ^ 0x5A00;
    // WQE2 SEND, WQE3 WRITE, WQE4 READ, all valid.
    let w2 = SendWr::new(2, WrOpcode::Send, &sge);
    let mut w3 = SendWr::new(3, WrOpcode::RdmaWrite, &sge);
    w3.rkey = b.rkey;
    let rsge = [Sge {
        addr: 1024,
        length: 100,
        lkey: a.lkey,
    }];
    let mut w4 = SendWr::new(4, WrOpcode::RdmaRead, &rsge);
    w4.rkey = b.rkey;
    for w in [&w1, &w2, &w3, &w4] {
        p.dev[0].post_send(c.qpn[0], w).unwrap();
    }
    assert!(p.run_until(Duration::from_secs(1), |p| cq_len(p, 0, c.cq[0]) == 6));
    let wcs = poll_all(&mut p, 0, c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        vec![
            (1, WcStatus::RemAccessErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr),
            (4, WcStatus::WrFlushErr),
            (101, WcStatus::WrFlushErr),
            (102, WcStatus::WrFlushErr),
        ]
    );
    assert_eq!(p.dev[0].qp(c.qpn[0]).unwrap().state(), QpState::Err);
    // The NAK: remote access error on WQE1's PSN (0x100, ConnOpts default).
    let nak: Vec<Seen> = seen_from(&p, 1);
    assert_eq!(nak.len(), 1);
    assert_eq!(
        (nak[0].opcode, nak[0].psn, nak[0].aeth.unwrap().0),
        (0x11, 0x100, 0x62)
    );
    // Responder side: its QP is in ERR and its receive WQE flushed.
    assert_eq!(p.dev[1].qp(c.qpn[1]).unwrap().state(), QpState::Err);
    assert_eq!(
        ids_status(&poll_all(&mut p, 1, c.cq[1])),
        vec![(201, WcStatus::WrFlushErr)]
    );
    assert!(p.dev[1]
        .mr(b.lkey)
        .unwrap()
        .as_slice()
        .iter()
        .all(|x| *x == 0));
    // Nothing further on the wire.
    let sent_before = seen_from(&p, 0).len();
    assert_eq!(sent_before, 4);
    p.advance(Duration::from_secs(1));
    // Posts after the error complete at once with WR_FLUSH_ERR (never hang),
    // a second bad post included.
    p.dev[0].post_send(c.qpn[0], &w1).unwrap();
    p.dev[0].post_send(c.qpn[0], &w2).unwrap();
    p.dev[0]
        .post_recv(
            c.qpn[0],
            &RecvWr {
                wr_id: 103,
                sg_list: &rs,
            },
        )
        .unwrap();
    assert_eq!(
        ids_status(&poll_all(&mut p, 0, c.cq[0])),
        vec![
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (103, WcStatus::WrFlushErr)
        ]
    );
    p.advance(Duration::from_secs(1));
    assert_eq!(seen_from(&p, 0).len(), sent_before);
    assert_eq!(seen_from(&p, 1).len(), 1);
    assert_eq!(p.dev[0].poll_timeout(), None);
    assert_eq!(p.dev[0].active_qps(), 0);
}

#[test]
fn r18_fatal_nak_flushes_in_order() {
    r18_once(1);
}

#[test]
fn r18_fatal_nak_loop_1000() {
    for seed in 0..1000 {
        r18_once(seed);
    }
}

#[test]
fn r18_fatal_nak_events() {
    let mut s = setup(1500, &ConnOpts::default(), 4096);
    let sge = [Sge {
        addr: 0,
        length: 10,
        lkey: s.mr[0].lkey,
    }];
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    w.rkey = 0xBAD;
    s.p.dev[0].post_send(s.c.qpn[0], &w).unwrap();
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    assert_eq!(
        s.p.dev[0].poll_event(),
        Some(AsyncEvent::QpFatal { qpn: s.c.qpn[0] })
    );
    assert_eq!(
        s.p.dev[1].poll_event(),
        Some(AsyncEvent::QpFatal { qpn: s.c.qpn[1] })
    );
}

// ---------------------------------------------------------------------------
// R19: multi-SGE gather.

/// SEND from SGEs of `lens` (each over its own distinct pattern) at MTU 256.
fn r19_send(lens: [u32; 3]) {
    let opts = ConnOpts {
        mtu: Mtu::Mtu256,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 8192);
    let addrs = [0u64, 1000, 3000];
    let mut expect = Vec::new();
    for (k, (&addr, &len)) in addrs.iter().zip(&lens).enumerate() {
        let bytes = pattern(len as usize, 0x40 * (k as u8 + 1));
        s.p.dev[0].mr_mut(s.mr[0].lkey).unwrap().as_mut_slice()[addr as usize..][..len as usize]
            .copy_from_slice(&bytes);
        expect.extend_from_slice(&bytes);
    }
    let sges: Vec<Sge> = addrs
        .iter()
        .zip(&lens)
        .map(|(&addr, &length)| Sge {
            addr,
            length,
            lkey: s.mr[0].lkey,
        })
        .collect();
    post_recv(&mut s, 1, 9, 0x1000, 1000);
    s.p.dev[0]
        .post_send(s.c.qpn[0], &SendWr::new(1, WrOpcode::Send, &sges))
        .unwrap();
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 1, s.c.cq[1]) == 1));
    let f = seen_from(&s.p, 0);
    assert_eq!(f.len(), 2, "exactly two packets");
    assert_eq!((f[0].opcode, f[0].payload.len(), f[0].pad), (0x00, 256, 0));
    assert_eq!((f[1].opcode, f[1].payload.len(), f[1].pad), (0x02, 151, 1));
    let r = poll_all(&mut s.p, 1, s.c.cq[1]);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (9, WcStatus::Success, 407)
    );
    assert_eq!(
        &s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice()[0x1000..][..407],
        &expect[..]
    );
    let mut wire = f[0].payload.clone();
    wire.extend_from_slice(&f[1].payload);
    assert_eq!(wire, expect);

    // The same SGEs as a WRITE: RETH DMA length is the true sum.
    let mut wr = SendWr::new(2, WrOpcode::RdmaWrite, &sges);
    wr.remote_addr = 0x1800;
    wr.rkey = s.mr[1].rkey;
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 2));
    let f = seen_from(&s.p, 0);
    assert_eq!(f.len(), 4);
    assert_eq!(f[2].opcode, 0x06);
    assert_eq!(f[2].reth.unwrap().dma_len, 407);
    assert_eq!((f[3].opcode, f[3].payload.len(), f[3].pad), (0x08, 151, 1));
    assert_eq!(
        &s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice()[0x1800..][..407],
        &expect[..]
    );
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

#[test]
fn r19_multi_sge_100_300_7() {
    r19_send([100, 300, 7]);
}

#[test]
fn r19_multi_sge_7_300_100() {
    r19_send([7, 300, 100]);
}

#[test]
fn r19_multi_sge_300_0_107_with_zero_length_sge() {
    r19_send([300, 0, 107]);
}

// ---------------------------------------------------------------------------
// R20: zero-length messages across the 24-bit wrap.

#[test]
fn r20_zero_length_sends_across_psn_wrap() {
    let opts = ConnOpts {
        sq_psn: [0xFF_FFFE, 0x200],
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 8192);
    mute(&mut s.p, 0);
    post_send_msg(&mut s, 1, 0, 0);
    post_send_msg(&mut s, 2, 0, 0);
    post_write(&mut s, 3, 0, 2048, 0);
    assert!(run_until_sent(&mut s.p, 0, 4));
    let f = seen_from(&s.p, 0);
    let summary: Vec<(u8, u32, usize, u8)> = f
        .iter()
        .map(|x| (x.opcode, x.psn, x.payload.len(), x.pad))
        .collect();
    assert_eq!(
        summary,
        vec![
            (0x04, 0xFF_FFFE, 0, 0),
            (0x04, 0xFF_FFFF, 0, 0),
            (0x06, 0x00_0000, 1024, 0),
            (0x08, 0x00_0001, 1024, 0),
        ]
    );
    assert_eq!(f[2].reth.unwrap().dma_len, 2048);
    respond_ack(&mut s, 0x00_0001);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(s.p.dev[0].poll_timeout(), None);
}

fn respond_ack(s: &mut Setup, psn: u32) {
    let f = ack_frame(&s.p, 1, s.c.qpn[0], psn, 0x1F, 0);
    s.p.inject(1, &f);
    s.p.advance(Duration::from_micros(10));
}

#[test]
fn r20_zero_length_read_takes_one_psn() {
    let opts = ConnOpts {
        sq_psn: [0xFF_FFFF, 0x200],
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 8192);
    mute(&mut s.p, 0);
    let mut rd = SendWr::new(1, WrOpcode::RdmaRead, &[]);
    rd.rkey = 0x77;
    s.p.dev[0].post_send(s.c.qpn[0], &rd).unwrap();
    post_send_msg(&mut s, 2, 0, 0);
    assert!(run_until_sent(&mut s.p, 0, 2));
    let f = seen_from(&s.p, 0);
    assert_eq!(
        (f[0].opcode, f[0].psn, f[0].reth.unwrap().dma_len),
        (0x0C, 0xFF_FFFF, 0)
    );
    assert_eq!((f[1].opcode, f[1].psn), (0x04, 0x00_0000));
    let ext = ExtHeaders {
        aeth: Some(AethRepr {
            syndrome: 0x1F,
            msn: 1,
        }),
        ..ExtHeaders::default()
    };
    let bth = BthRepr::new(Opcode::RC_RDMA_READ_RESPONSE_ONLY, s.c.qpn[0], 0xFF_FFFF);
    let resp = s.p.frame(1, bth, ext, &[]);
    s.p.inject(1, &resp);
    respond_ack(&mut s, 0);
    let wcs = poll_all(&mut s.p, 0, s.c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!((wcs[0].opcode, wcs[0].byte_len), (WcOpcode::RdmaRead, 0));
}

#[test]
fn r20_zero_length_read_end_to_end() {
    let opts = ConnOpts {
        sq_psn: [0xFF_FFFF, 0x200],
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 8192);
    let mut rd = SendWr::new(1, WrOpcode::RdmaRead, &[]);
    rd.rkey = 0x77; // needs no valid R_Key (C9-88)
    s.p.dev[0].post_send(s.c.qpn[0], &rd).unwrap();
    post_recv(&mut s, 1, 9, 0, 16);
    post_send_msg(&mut s, 2, 0, 0);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 2));
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let resp = seen_from(&s.p, 1);
    assert_eq!(
        (resp[0].opcode, resp[0].psn, resp[0].payload.len()),
        (0x10, 0xFF_FFFF, 0)
    );
    let r = poll_all(&mut s.p, 1, s.c.cq[1]);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len),
        (9, WcStatus::Success, 0)
    );
}

// ---------------------------------------------------------------------------
// R22: QP re-creation with a reused QPN.

#[test]
fn r22_recreated_qp_starts_clean() {
    let mut p = Pair::new(1500, Faults::default(), 5);
    let o1 = ConnOpts {
        sq_psn: [0x100, 0x100],
        ..ConnOpts::default()
    };
    let c1 = connect(&mut p, &o1);
    assert_eq!(c1.qpn[0], 0x11);
    let a = p.dev[0]
        .reg_mr(c1.pd[0], pattern(4096, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c1.pd[1], vec![0; 4096], 0, all_access())
        .unwrap();
    // 50 WRITEs whose ACKs are all lost: they stay outstanding, timer running.
    p.drop_filter = Some(Box::new(|from, _, _| from == 1));
    for i in 0..50u64 {
        let sge = [Sge {
            addr: i * 64,
            length: 64,
            lkey: a.lkey,
        }];
        let mut wr = SendWr::new(i, WrOpcode::RdmaWrite, &sge);
        wr.remote_addr = i * 64;
        wr.rkey = b.rkey;
        p.dev[0].post_send(c1.qpn[0], &wr).unwrap();
    }
    p.advance(Duration::from_micros(100));
    assert!(p.dev[0].poll_timeout().is_some());
    p.dev[0].destroy_qp(c1.qpn[0]).unwrap();
    p.dev[1].destroy_qp(c1.qpn[1]).unwrap();
    assert_eq!(p.dev[0].poll_timeout(), None, "no timer survives the QP");
    assert_eq!(p.dev[0].active_qps(), 0);
    p.drop_filter = None;

    // Re-create QPN 0x11 on both sides with sq_psn 0x5A5A5A.
    let o2 = ConnOpts {
        sq_psn: [0x5A_5A5A, 0x5A_5A5A],
        ..ConnOpts::default()
    };
    let c2 = connect_with(&mut p, &o2, Some([0x11, 0x11])).unwrap();
    assert_eq!(c2.qpn, [0x11, 0x11]);
    assert_eq!(p.dev[0].poll_timeout(), None, "retransmit timer idle");
    p.start_capture();
    p.advance(Duration::from_secs(1));
    assert!(p.captured().is_empty(), "no old PSN retransmitted");
    let a2 = p.dev[0]
        .reg_mr(c2.pd[0], pattern(4096, 2), 0, all_access())
        .unwrap();
    let b2 = p.dev[1]
        .reg_mr(c2.pd[1], vec![0; 4096], 0, all_access())
        .unwrap();
    let sge = [Sge {
        addr: 0,
        length: 64,
        lkey: a2.lkey,
    }];
    let mut wr = SendWr::new(7, WrOpcode::RdmaWrite, &sge);
    wr.rkey = b2.rkey;
    p.dev[0].post_send(c2.qpn[0], &wr).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| cq_len(p, 0, c2.cq[0]) == 1));
    let f = seen(&p);
    assert_eq!((f[0].from, f[0].opcode, f[0].psn), (0, 0x0A, 0x5A_5A5A));
    // The peer's MSN restarted at 0: the first message is MSN 1.
    assert_eq!(
        (f[1].from, f[1].psn, f[1].aeth.unwrap().1),
        (1, 0x5A_5A5A, 1)
    );
    // And our own responder's MSN restarted too.
    let rs = [Sge {
        addr: 1024,
        length: 64,
        lkey: a2.lkey,
    }];
    p.dev[0]
        .post_recv(
            c2.qpn[0],
            &RecvWr {
                wr_id: 1,
                sg_list: &rs,
            },
        )
        .unwrap();
    let ss = [Sge {
        addr: 0,
        length: 8,
        lkey: b2.lkey,
    }];
    p.dev[1]
        .post_send(c2.qpn[1], &SendWr::new(8, WrOpcode::Send, &ss))
        .unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| cq_len(p, 1, c2.cq[1]) == 1));
    let ack = seen_from(&p, 0)
        .into_iter()
        .find(|x| x.opcode == 0x11)
        .unwrap();
    assert_eq!((ack.psn, ack.aeth.unwrap().1), (0x5A_5A5A, 1));
    assert_eq!(seen_from(&p, 0).len(), 2, "only the new WRITE and one ACK");
}

#[test]
fn r22_reset_responder_ignores_stale_psn() {
    let mut s = setup(1500, &ConnOpts::default(), 8192);
    mute(&mut s.p, 1);
    let q = s.c.qpn[1];
    let d = &mut s.p.dev[1];
    d.modify_qp(
        q,
        &QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: all_access(),
        ..QpAttr::default()
    };
    d.modify_qp(
        q,
        &init,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    let peer = AddressVector {
        dgid: s.p.dev[0].gid(0).unwrap(),
        dmac: s.p.dev[0].config().mac,
        ..AddressVector::default()
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ah_attr: peer,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: s.c.qpn[0],
        rq_psn: 0x12_3456,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    let d = &mut s.p.dev[1];
    d.modify_qp(
        q,
        &rtr,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    let reth = Some(roce_stack::wire::ext::RethRepr {
        va: 0,
        rkey: s.mr[1].rkey,
        dma_len: 16,
    });
    let stale = req_frame(
        &s.p,
        0,
        q,
        Opcode::RC_RDMA_WRITE_ONLY,
        0x00_0120,
        true,
        reth,
        &[0xEE; 16],
    );
    s.p.inject(0, &stale);
    s.p.advance(Duration::from_micros(10));
    assert!(s.p.dev[1]
        .mr(s.mr[1].lkey)
        .unwrap()
        .as_slice()
        .iter()
        .all(|x| *x == 0));
    assert_eq!(s.p.dev[1].counters().rx_write_requests, 0);
    // ePSN is unchanged: the packet at 0x123456 is the one executed.
    let good = req_frame(
        &s.p,
        0,
        q,
        Opcode::RC_RDMA_WRITE_ONLY,
        0x12_3456,
        true,
        reth,
        &[0x77; 16],
    );
    s.p.inject(0, &good);
    s.p.advance(Duration::from_micros(10));
    assert_eq!(
        &s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice()[..16],
        &[0x77; 16]
    );
    let acks: Vec<(u32, u8, u32)> = seen_from(&s.p, 1)
        .iter()
        .map(|f| (f.psn, f.aeth.unwrap().0, f.aeth.unwrap().1))
        .collect();
    assert_eq!(acks.last().copied(), Some((0x12_3456, 0x1F, 1)));
}

// ---------------------------------------------------------------------------
// R24: path MTU versus the Ethernet MTU.

#[test]
fn r24a_path_mtu_clamped_to_active_mtu() {
    // 1500-byte Ethernet: the largest IB MTU that fits is 1024 (2048 + 20 + 8
    // + 12 + 16 + 4 = 2108 > 1500). Our choice: modify_qp clamps.
    assert_eq!(Mtu::for_netdev(1500), Some(Mtu::Mtu1024));
    for asked in [Mtu::Mtu4096, Mtu::Mtu2048] {
        let mut p = Pair::new(1500, Faults::default(), 1);
        assert_eq!(p.dev[0].active_mtu(), Mtu::Mtu1024);
        let c = connect(
            &mut p,
            &ConnOpts {
                mtu: asked,
                ..ConnOpts::default()
            },
        );
        let qp = p.dev[0].qp(c.qpn[0]).unwrap();
        assert_eq!(qp.attr().path_mtu, Mtu::Mtu1024);
        assert_eq!(qp.pmtu(), 1024);
    }
}

#[test]
fn r24b_write_3000_bytes_segments_1024_1024_952() {
    let opts = ConnOpts {
        mtu: Mtu::Mtu4096,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 8192);
    post_write(&mut s, 1, 0, 3000, 0);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    let f = seen_from(&s.p, 0);
    let sizes: Vec<(u8, usize)> = f.iter().map(|x| (x.opcode, x.payload.len())).collect();
    assert_eq!(sizes, vec![(0x06, 1024), (0x07, 1024), (0x08, 952)]);
    assert_eq!(f[0].ip_total_len, 1084);
    assert_eq!(
        &s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice()[..3000],
        &pattern(8192, 1)[..3000]
    );
}

#[test]
fn r24c_oversized_write_only_naks_invalid_request() {
    // Side 0 on a 9000-byte Ethernet with path MTU 2048; our responder on
    // side 1 clamps to 1024.
    let mut p = Pair::with_devices(
        [test_device(0, 9000), test_device(1, 1500)],
        Faults::default(),
        3,
    );
    let c = connect(
        &mut p,
        &ConnOpts {
            mtu: Mtu::Mtu2048,
            ..ConnOpts::default()
        },
    );
    assert_eq!(p.dev[0].qp(c.qpn[0]).unwrap().pmtu(), 2048);
    assert_eq!(p.dev[1].qp(c.qpn[1]).unwrap().pmtu(), 1024);
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(2048, 3), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 4096], 0, all_access())
        .unwrap();
    p.start_capture();
    let sge = [Sge {
        addr: 0,
        length: 2048,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| cq_len(p, 0, c.cq[0]) == 1));
    let f = seen(&p);
    assert_eq!((f[0].opcode, f[0].payload.len()), (0x0A, 2048));
    assert_eq!((f[1].opcode, f[1].aeth.unwrap().0), (0x11, 0x61));
    assert_eq!(
        ids_status(&poll_all(&mut p, 0, c.cq[0])),
        vec![(1, WcStatus::RemInvReqErr)]
    );
    assert!(p.dev[1]
        .mr(b.lkey)
        .unwrap()
        .as_slice()
        .iter()
        .all(|x| *x == 0));
    assert_eq!(p.dev[1].qp(c.qpn[1]).unwrap().state(), QpState::Err);
}

#[test]
fn r24d_jumbo_mtu_allows_4096() {
    assert_eq!(Mtu::for_netdev(9000), Some(Mtu::Mtu4096));
    let opts = ConnOpts {
        mtu: Mtu::Mtu4096,
        ..ConnOpts::default()
    };
    let mut s = setup(9000, &opts, 16384);
    assert_eq!(
        s.p.dev[0].qp(s.c.qpn[0]).unwrap().attr().path_mtu,
        Mtu::Mtu4096
    );
    post_write(&mut s, 1, 0, 8192, 0);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    let sizes: Vec<(u8, usize)> = seen_from(&s.p, 0)
        .iter()
        .map(|x| (x.opcode, x.payload.len()))
        .collect();
    assert_eq!(sizes, vec![(0x06, 4096), (0x08, 4096)]);
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
}

// ---------------------------------------------------------------------------
// R25 (transmit side): UDP source port.

#[test]
fn r25a_udp_sport_kernel_convention_examples() {
    let av = AddressVector::default();
    assert_eq!(udp_sport(&av, 0x11, 0x12), 0xC132);
    assert_eq!(udp_sport(&av, 0x12, 0x11), 0xC132);
    assert_eq!(udp_sport(&av, 0x1, 0xD2), 0xC0D2);
    assert_eq!(udp_sport(&av, 0xFF_FFFF, 0xFF_FFFE), 0xFF12);
}

#[test]
fn r25a_udp_sport_constant_for_qp_lifetime_with_retransmits() {
    let mut p = Pair::new(1500, Faults::lossy(0.2), 11);
    let c = connect_with(
        &mut p,
        &ConnOpts {
            timeout: 10,
            ..ConnOpts::default()
        },
        Some([0x11, 0x12]),
    )
    .unwrap();
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(32768, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 32768], 0, all_access())
        .unwrap();
    p.start_capture();
    for i in 0..8u64 {
        let sge = [Sge {
            addr: i * 4096,
            length: 4096,
            lkey: a.lkey,
        }];
        let mut wr = SendWr::new(i, WrOpcode::RdmaWrite, &sge);
        wr.remote_addr = i * 4096;
        wr.rkey = b.rkey;
        p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    }
    assert!(p.run_until(Duration::from_secs(10), |p| cq_len(p, 0, c.cq[0]) == 8));
    let c0 = p.dev[0].counters();
    assert!(
        c0.local_ack_timeout_err + c0.packet_seq_err > 0,
        "the loss caused retransmissions"
    );
    let frames = seen(&p);
    assert!(frames.iter().any(|f| f.from == 1));
    assert!(
        frames.iter().all(|f| f.sport == 0xC132),
        "both directions, every frame: 0xC132"
    );
}

#[test]
fn r25a_udp_sport_spread_over_4096_random_qpn_pairs() {
    let mut rng = Rng::new(0x25);
    let av = AddressVector::default();
    let mut ports = HashSet::new();
    for _ in 0..4096 {
        let l = rng.below(1 << 24) as u32;
        let r = rng.below(1 << 24) as u32;
        let port = udp_sport(&av, l, r);
        assert!(port >= 0xC000, "{port:#x}");
        ports.insert(port);
    }
    assert!(ports.len() >= 1000, "{} distinct ports", ports.len());
}

/// Connect, then move side 0 through SQD to set a new AV, and send a WRITE:
/// the UDP source port of side 0's frames.
fn sport_with_av(f: impl Fn(&mut AddressVector)) -> Vec<u16> {
    let mut s = setup(1500, &ConnOpts::default(), 4096);
    let q = s.c.qpn[0];
    let mut av = *s.p.dev[0].qp(q).unwrap().attr();
    f(&mut av.ah_attr);
    let d = &mut s.p.dev[0];
    d.modify_qp(
        q,
        &QpAttr {
            qp_state: QpState::Sqd,
            ..av
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    d.modify_qp(
        q,
        &QpAttr {
            qp_state: QpState::Sqd,
            ..av
        },
        QpAttrMask::STATE | QpAttrMask::AV,
    )
    .unwrap();
    d.modify_qp(
        q,
        &QpAttr {
            qp_state: QpState::Rts,
            ..av
        },
        QpAttrMask::STATE,
    )
    .unwrap();
    post_write(&mut s, 1, 0, 3000, 0);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    seen_from(&s.p, 0).iter().map(|f| f.sport).collect()
}

#[test]
fn r25c_explicit_av_udp_port_overrides() {
    assert_eq!(
        sport_with_av(|av| av.udp_sport = Some(0xD00D)),
        vec![0xD00D; 3]
    );
}

#[test]
fn r25c_explicit_av_flow_label_overrides() {
    // Flow label 0x12345 → port 0xE341 (CASES R25 / ROCEV2-DIGEST §1).
    assert_eq!(sport_with_av(|av| av.flow_label = 0x12345), vec![0xE341; 3]);
}
