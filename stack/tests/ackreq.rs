//! The requester's AckReq policy (IBTA 1.7 §9.2.3: AckReq is the requester's
//! choice; §9.7.5.1.1: the responder acknowledges the packets that carry it,
//! and an ACK covers every earlier PSN, §9.7.5.1.2). A stream of unsignalled
//! WRITEs with a signalled one every few WRs, as perftest posts them
//! (`--cq-mod`), must draw one ACK per signalled WR and one for the last WR
//! queued, complete only the signalled WR, and still free every send-queue
//! slot.

mod common;

use common::*;
use roce_stack::testing::ConnOpts;
use roce_stack::verbs::{SendFlags, SendWr, Sge, WcStatus, WrOpcode};
use roce_stack::wire::Opcode;

/// Post WRITE `i` (64 bytes at offset 64·i), signalled or not.
fn post(s: &mut Setup, i: u64, signaled: bool) {
    let sge = [Sge {
        addr: 64 * i,
        length: 64,
        lkey: s.mr[0].lkey,
    }];
    let mut wr = SendWr::new(i, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 64 * i;
    wr.rkey = s.mr[1].rkey;
    if !signaled {
        wr.send_flags = SendFlags::empty();
    }
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
}

#[test]
fn unsignalled_writes_with_more_queued_leave_without_ackreq() {
    let mut s = setup(1500, &ConnOpts::default(), 64 * 1024);
    // WRs 0..10 posted at once: WR 4 signalled, WR 9 the last queued.
    for i in 0..10 {
        post(&mut s, i, i == 4);
    }
    assert!(run_until_sent(&mut s.p, 0, 10));
    assert!(run_until_sent(&mut s.p, 1, 1));
    // Long enough for any further ACK (or retransmission) to show.
    s.p.advance(std::time::Duration::from_millis(1));

    let sent = seen_from(&s.p, 0);
    let writes: Vec<_> = sent
        .iter()
        .filter(|f| f.opcode == Opcode::RC_RDMA_WRITE_ONLY.0)
        .collect();
    assert_eq!(writes.len(), 10, "each WRITE once, no retransmission");
    let with_ackreq: Vec<usize> = writes
        .iter()
        .enumerate()
        .filter(|(_, f)| f.ack_req)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        with_ackreq,
        vec![4, 9],
        "AckReq on the signalled WR and the last queued"
    );

    // The responder acknowledges only those two (no coalescing interval is
    // configured); the second may replace the first before it leaves
    // (cumulative ACKs), so one or two ACKs, the last for WR 9's PSN.
    let acks: Vec<u32> = seen_from(&s.p, 1)
        .iter()
        .filter(|f| f.opcode == Opcode::RC_ACKNOWLEDGE.0)
        .map(|f| f.psn)
        .collect();
    assert!(
        acks == vec![writes[9].psn] || acks == vec![writes[4].psn, writes[9].psn],
        "ACKs {acks:?}"
    );

    // One completion, the signalled WR's; the data of all ten arrived.
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(4, WcStatus::Success)]
    );
    assert_eq!(
        &s.p.dev[1].mr(s.mr[1].lkey).unwrap().as_slice()[..640],
        &pattern(64 * 1024, 1)[..640]
    );

    // The cumulative ACK of WR 9 freed every slot: a full queue posts again.
    for i in 0..256 {
        post(&mut s, i % 10, false);
    }
}

#[test]
fn ackreq_at_least_every_interval_packets_without_signalling() {
    // 100 unsignalled WRITEs queued at once: the default interval (64, as
    // rxe) forces AckReq on the 64th packet, and the last queued carries it.
    let mut s = setup(1500, &ConnOpts::default(), 64 * 1024);
    for i in 0..100 {
        post(&mut s, i, false);
    }
    assert!(run_until_sent(&mut s.p, 0, 100));
    let with_ackreq: Vec<usize> = seen_from(&s.p, 0)
        .iter()
        .filter(|f| f.opcode == Opcode::RC_RDMA_WRITE_ONLY.0)
        .enumerate()
        .filter(|(_, f)| f.ack_req)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(with_ackreq, vec![63, 99]);
}
