//! Error paths end to end between two of our devices, with the exact
//! completion status on both sides (ROCEV2-DIGEST §5: responder class A/C
//! errors NAK with 0x61 / 0x62 / 0x63 and move the responder QP to ERR; the
//! requester maps them to REM_INV_REQ_ERR / REM_ACCESS_ERR / REM_OP_ERR; RNR
//! and retry exhaustion end in RNR_RETRY_EXC_ERR / RETRY_EXC_ERR).

mod common;

use std::time::Duration;

use common::*;
use roce_stack::testing::{connect, Conn, ConnOpts, Faults, Pair};
use roce_stack::verbs::{AccessFlags, MrKeys, QpState, RecvWr, SendWr, Sge, WcStatus, WrOpcode};

/// Responder MR: 4096 bytes at IOVA 0x1000.
const R_IOVA: u64 = 0x1000;

struct E {
    p: Pair,
    c: Conn,
    a: MrKeys,
    b: MrKeys,
}

/// A connected pair where the QPs grant `qp_access` and side 1's MR has
/// `mr_access`; side 1 has one receive WQE (wr_id 201, 64 bytes).
fn env(qp_access: AccessFlags, mr_access: AccessFlags) -> E {
    let mut p = Pair::new(1500, Faults::default(), 9);
    let c = connect(
        &mut p,
        &ConnOpts {
            access: qp_access,
            ..ConnOpts::default()
        },
    );
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(4096, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 4096], R_IOVA, mr_access)
        .unwrap();
    // A separate, valid buffer for the responder's receive WQE.
    let rb = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 64], 0x10_0000, all_access())
        .unwrap();
    let rs = [Sge {
        addr: 0x10_0000,
        length: 64,
        lkey: rb.lkey,
    }];
    p.dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 201,
                sg_list: &rs,
            },
        )
        .unwrap();
    p.start_capture();
    E { p, c, a, b }
}

/// `(wr_id, status)` of each completion.
type Wcs = Vec<(u64, WcStatus)>;

/// Post `wr` on side 0, run until it completes; returns (requester
/// completions, responder completions, the AETH syndrome of side 1's frames).
fn run(e: &mut E, wr: &SendWr<'_>) -> (Wcs, Wcs, Vec<u8>) {
    e.p.dev[0].post_send(e.c.qpn[0], wr).unwrap();
    assert!(e
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, e.c.cq[0]) >= 1));
    e.p.advance(Duration::from_millis(1));
    let req = ids_status(&poll_all(&mut e.p, 0, e.c.cq[0]));
    let resp = ids_status(&poll_all(&mut e.p, 1, e.c.cq[1]));
    let syn = seen_from(&e.p, 1)
        .iter()
        .filter_map(|f| f.aeth.map(|a| a.0))
        .collect();
    (req, resp, syn)
}

/// A remote class A/C error: requester `status`, NAK `nak`, responder QP in
/// ERR with its receive WQE completing `recv_status`, and no data placed.
fn assert_remote_error(
    e: &mut E,
    wr: &SendWr<'_>,
    status: WcStatus,
    nak: u8,
    recv_status: WcStatus,
) {
    let (req, resp, syn) = run(e, wr);
    assert_eq!(req, vec![(wr.wr_id, status)]);
    assert_eq!(syn, vec![nak]);
    assert_eq!(resp, vec![(201, recv_status)]);
    assert_eq!(e.p.dev[0].qp(e.c.qpn[0]).unwrap().state(), QpState::Err);
    assert_eq!(e.p.dev[1].qp(e.c.qpn[1]).unwrap().state(), QpState::Err);
    assert!(e.p.dev[1]
        .mr(e.b.lkey)
        .unwrap()
        .as_slice()
        .iter()
        .all(|x| *x == 0));
}

fn write_wr<'a>(e: &E, sge: &'a [Sge], va: u64, rkey: u32) -> SendWr<'a> {
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, sge);
    wr.remote_addr = va;
    wr.rkey = rkey;
    let _ = e;
    wr
}

fn read_wr<'a>(sge: &'a [Sge], va: u64, rkey: u32) -> SendWr<'a> {
    let mut wr = SendWr::new(1, WrOpcode::RdmaRead, sge);
    wr.remote_addr = va;
    wr.rkey = rkey;
    wr
}

fn fadd_wr<'a>(sge: &'a [Sge], va: u64, rkey: u32) -> SendWr<'a> {
    let mut wr = SendWr::new(1, WrOpcode::AtomicFetchAndAdd, sge);
    wr.remote_addr = va;
    wr.rkey = rkey;
    wr.compare_add = 1;
    wr
}

const RIGHTS_BUT_WRITE: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_READ);

#[test]
fn err_write_bad_rkey() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = write_wr(&e, &sge, R_IOVA, e.b.rkey ^ 0x100);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
    assert_eq!(e.p.dev[1].counters().resp_remote_access_error, 1);
    assert_eq!(e.p.dev[0].counters().req_remote_access_errors, 1);
}

#[test]
fn err_read_bad_rkey() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = read_wr(&sge, R_IOVA, e.b.rkey ^ 0x100);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_atomic_bad_rkey() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 8,
        lkey: e.a.lkey,
    }];
    let wr = fadd_wr(&sge, R_IOVA, e.b.rkey ^ 0x100);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_write_out_of_bounds_past_end() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    // [0x1000 + 4000, +100) ends 4 bytes past the 4096-byte MR.
    let wr = write_wr(&e, &sge, R_IOVA + 4000, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_write_out_of_bounds_before_start() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = write_wr(&e, &sge, R_IOVA - 1, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_read_out_of_bounds() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = read_wr(&sge, R_IOVA + 4090, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_write_mr_lacks_remote_write() {
    let mut e = env(all_access(), RIGHTS_BUT_WRITE);
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = write_wr(&e, &sge, R_IOVA, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_read_mr_lacks_remote_read() {
    let mut e = env(
        all_access(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = read_wr(&sge, R_IOVA, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_atomic_mr_lacks_remote_atomic() {
    let mut e = env(
        all_access(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
    );
    let sge = [Sge {
        addr: 0,
        length: 8,
        lkey: e.a.lkey,
    }];
    let wr = fadd_wr(&sge, R_IOVA, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemAccessErr,
        0x62,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_write_qp_lacks_remote_write() {
    // QP access flags gate the operation: NAK invalid request (0x61).
    let mut e = env(RIGHTS_BUT_WRITE, all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = write_wr(&e, &sge, R_IOVA, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemInvReqErr,
        0x61,
        WcStatus::WrFlushErr,
    );
    assert_eq!(e.p.dev[0].counters().req_remote_invalid_request, 1);
}

#[test]
fn err_read_qp_lacks_remote_read() {
    let mut e = env(
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        all_access(),
    );
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = read_wr(&sge, R_IOVA, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemInvReqErr,
        0x61,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_atomic_qp_lacks_remote_atomic() {
    let mut e = env(
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        all_access(),
    );
    let sge = [Sge {
        addr: 0,
        length: 8,
        lkey: e.a.lkey,
    }];
    let wr = fadd_wr(&sge, R_IOVA, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemInvReqErr,
        0x61,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_atomic_misaligned() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 8,
        lkey: e.a.lkey,
    }];
    let wr = fadd_wr(&sge, R_IOVA + 4, e.b.rkey);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemInvReqErr,
        0x61,
        WcStatus::WrFlushErr,
    );
}

#[test]
fn err_send_longer_than_receive_wqe() {
    // 100 bytes into a 64-byte receive WQE: NAK 0x61, receive LOC_LEN_ERR.
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let wr = SendWr::new(1, WrOpcode::Send, &sge);
    assert_remote_error(
        &mut e,
        &wr,
        WcStatus::RemInvReqErr,
        0x61,
        WcStatus::LocLenErr,
    );
}

#[test]
fn err_send_into_malformed_receive_wqe() {
    // The receive WQE names an lkey that does not exist: NAK remote
    // operational error (0x63), receive LOC_QP_OP_ERR, requester REM_OP_ERR.
    let mut p = Pair::new(1500, Faults::default(), 9);
    let c = connect(&mut p, &ConnOpts::default());
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(4096, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 4096], R_IOVA, all_access())
        .unwrap();
    let rs = [Sge {
        addr: 0,
        length: 64,
        lkey: 0xDEAD_0000,
    }];
    p.dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 201,
                sg_list: &rs,
            },
        )
        .unwrap();
    p.start_capture();
    let mut e = E { p, c, a, b };
    let sge = [Sge {
        addr: 0,
        length: 16,
        lkey: e.a.lkey,
    }];
    let wr = SendWr::new(1, WrOpcode::Send, &sge);
    assert_remote_error(&mut e, &wr, WcStatus::RemOpErr, 0x63, WcStatus::LocQpOpErr);
    assert_eq!(e.p.dev[0].counters().req_remote_operational_error, 1);
    assert_eq!(e.p.dev[1].counters().resp_remote_operational_error, 1);
}

#[test]
fn err_local_bad_lkey_is_loc_prot_err_and_sends_nothing() {
    let mut e = env(all_access(), all_access());
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey ^ 0x100,
    }];
    let wr = write_wr(&e, &sge, R_IOVA, e.b.rkey);
    let (req, resp, _) = run(&mut e, &wr);
    assert_eq!(req, vec![(1, WcStatus::LocProtErr)]);
    assert!(resp.is_empty(), "the responder saw nothing");
    assert!(e.p.captured().is_empty(), "nothing on the wire");
    assert_eq!(e.p.dev[0].qp(e.c.qpn[0]).unwrap().state(), QpState::Err);
    assert_eq!(e.p.dev[1].qp(e.c.qpn[1]).unwrap().state(), QpState::Rts);
}

#[test]
fn err_local_bad_lkey_behind_outstanding_wqe_completes_in_order() {
    // WQE1 is valid and in flight when WQE2's gather fails: WQE1 still
    // succeeds, then WQE2 completes LOC_PROT_ERR and WQE3 is flushed.
    let mut e = env(all_access(), all_access());
    e.p.faults.delay = Duration::from_micros(100);
    let good = [Sge {
        addr: 0,
        length: 100,
        lkey: e.a.lkey,
    }];
    let bad = [Sge {
        addr: 4090,
        length: 100,
        lkey: e.a.lkey,
    }]; // past the MR end
    let w1 = write_wr(&e, &good, R_IOVA, e.b.rkey);
    let mut w2 = write_wr(&e, &bad, R_IOVA, e.b.rkey);
    w2.wr_id = 2;
    let mut w3 = write_wr(&e, &good, R_IOVA + 512, e.b.rkey);
    w3.wr_id = 3;
    for w in [&w1, &w2, &w3] {
        e.p.dev[0].post_send(e.c.qpn[0], w).unwrap();
    }
    assert!(e
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, e.c.cq[0]) == 3));
    assert_eq!(
        ids_status(&poll_all(&mut e.p, 0, e.c.cq[0])),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(seen_from(&e.p, 0).len(), 1, "only WQE1 left");
    assert_eq!(
        &e.p.dev[1].mr(e.b.lkey).unwrap().as_slice()[..100],
        &pattern(4096, 1)[..100]
    );
}

#[test]
fn err_rnr_with_retries_left_then_success() {
    let opts = ConnOpts {
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64);
    let (c, b) = (s.c, s.mr[1]);
    post_send_msg(&mut s, 1, 0, 64);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| p.dev[0].counters().rcvd_rnr_err
            == 1));
    post_recv(&mut s, 1, 201, 0, 64);
    let p = &mut s.p;
    assert!(p.run_until(Duration::from_secs(1), |p| cq_len(p, 0, c.cq[0]) == 1));
    assert_eq!(
        ids_status(&poll_all(p, 0, c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        ids_status(&poll_all(p, 1, c.cq[1])),
        vec![(201, WcStatus::Success)]
    );
    assert_eq!(p.dev[1].mr(b.lkey).unwrap().as_slice(), &pattern(64, 1)[..]);
}

#[test]
fn err_rnr_without_retries_left() {
    let opts = ConnOpts {
        rnr_retry: 1,
        min_rnr_timer: 1,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64);
    post_send_msg(&mut s, 1, 0, 64);
    let (p, c) = (&mut s.p, s.c);
    assert!(p.run_until(Duration::from_secs(1), |p| cq_len(p, 0, c.cq[0]) == 1));
    assert_eq!(
        ids_status(&poll_all(p, 0, c.cq[0])),
        vec![(1, WcStatus::RnrRetryExcErr)]
    );
    assert_eq!(
        p.dev[0].counters().rcvd_rnr_err,
        2,
        "one retry, then the 2nd RNR fails"
    );
    // RNR is class B at the responder: no completion, no state change.
    assert!(poll_all(p, 1, c.cq[1]).is_empty());
    assert_eq!(p.dev[1].qp(c.qpn[1]).unwrap().state(), QpState::Rts);
    assert_eq!(p.dev[0].qp(c.qpn[0]).unwrap().state(), QpState::Err);
}

/// Every frame is lost: with `retry_cnt` r the WRITE goes out r + 1 times,
/// one ACK timeout apart, and fails with RETRY_EXC_ERR at the (r + 1)th
/// timeout.
fn retry_exhaustion(retry_cnt: u8) {
    let mut p = Pair::new(1500, Faults::default(), 9);
    let c = connect(
        &mut p,
        &ConnOpts {
            timeout: 10,
            retry_cnt,
            ..ConnOpts::default()
        },
    );
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(64, 1), 0, all_access())
        .unwrap();
    p.drop_filter = Some(Box::new(|_, _, _| true));
    p.start_capture();
    let sge = [Sge {
        addr: 0,
        length: 64,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.rkey = 0x1234;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    let t0 = p.now;
    assert!(p.run_until(Duration::from_secs(10), |p| cq_len(p, 0, c.cq[0]) == 1));
    let t = ack_timeout(10); // 4.194304 ms
    let n = retry_cnt as u32 + 1;
    assert_eq!(p.now - t0, t * n, "fails at the {n}th timeout");
    assert_eq!(
        ids_status(&poll_all(&mut p, 0, c.cq[0])),
        vec![(1, WcStatus::RetryExcErr)]
    );
    let times: Vec<Duration> = seen_from(&p, 0).iter().map(|f| f.at - t0).collect();
    assert_eq!(times, (0..n).map(|k| t * k).collect::<Vec<_>>());
    assert_eq!(p.dev[0].counters().local_ack_timeout_err, n as u64);
    assert_eq!(p.dev[0].counters().retry_exceeded_err, 1);
    assert_eq!(p.dev[0].qp(c.qpn[0]).unwrap().state(), QpState::Err);
    // The peer saw nothing and completed nothing.
    assert!(poll_all(&mut p, 1, c.cq[1]).is_empty());
    assert_eq!(p.dev[1].counters().rcvd_pkts, 0);
    assert_eq!(p.dev[0].poll_timeout(), None);
}

#[test]
fn err_retry_exhausted_peer_gone_retry_cnt_3() {
    retry_exhaustion(3);
}

#[test]
fn err_retry_exhausted_peer_gone_retry_cnt_0() {
    retry_exhaustion(0);
}

#[test]
fn err_retry_exhausted_peer_gone_retry_cnt_7_is_not_infinite() {
    // IBTA: 7 means "infinite" only for rnr_retry (our documented choice;
    // rxe retries forever here).
    retry_exhaustion(7);
}

#[test]
fn err_local_sge_address_overflow_is_loc_prot_err() {
    // An SGE whose address range wraps past 2^64 is a local protection
    // error, never an arithmetic overflow.
    let mut e = env(all_access(), all_access());
    let sge = [
        Sge {
            addr: 0,
            length: 10,
            lkey: e.a.lkey,
        },
        Sge {
            addr: u64::MAX - 4,
            length: 100,
            lkey: e.a.lkey,
        },
    ];
    let wr = write_wr(&e, &sge, R_IOVA, e.b.rkey);
    let (req, resp, _) = run(&mut e, &wr);
    assert_eq!(req, vec![(1, WcStatus::LocProtErr)]);
    assert!(resp.is_empty());
    // And as a receive buffer: the responder reports a malformed WQE.
    let mut e = env(all_access(), all_access());
    let rs = [Sge {
        addr: u64::MAX - 4,
        length: 64,
        lkey: e.b.lkey,
    }];
    // The first receive WQE (wr 201) is valid; post the bad one behind it.
    e.p.dev[1]
        .post_recv(
            e.c.qpn[1],
            &RecvWr {
                wr_id: 202,
                sg_list: &rs,
            },
        )
        .unwrap();
    let sge = [Sge {
        addr: 0,
        length: 16,
        lkey: e.a.lkey,
    }];
    let mut w1 = SendWr::new(1, WrOpcode::Send, &sge);
    e.p.dev[0].post_send(e.c.qpn[0], &w1).unwrap();
    w1.wr_id = 2;
    let (req, resp, syn) = run(&mut e, &w1);
    assert_eq!(req, vec![(1, WcStatus::Success), (2, WcStatus::RemOpErr)]);
    assert_eq!(
        resp,
        vec![(201, WcStatus::Success), (202, WcStatus::LocQpOpErr)]
    );
    assert_eq!(syn.last(), Some(&0x63));
}
