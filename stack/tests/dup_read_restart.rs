//! A duplicate READ request that arrives while the original READ's responses
//! are still being sent restarts that stream from the duplicate's PSN: one
//! stream, not a second one queued behind the first. The oracle is rxe
//! (`rxe_resp.c` `duplicate_request` and `read_reply`): a replay from a PSN
//! after the READ's first continues the original response sequence with
//! READ_RESPONSE_MIDDLE ... LAST (`rdatm_res_state_replay`), and one from the
//! first PSN starts with FIRST (`rdatm_res_state_new`); the bytes are those
//! at the duplicate's VA.

use roce_stack::testing::{connect, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::verbs::{AccessFlags, Mtu, SendWr, Sge, WrOpcode};
use roce_stack::wire::{Opcode, PacketRepr, RocePacket};

#[test]
fn duplicate_read_restarts_the_stream_in_flight() {
    let mut p = Pair::new(1500, Faults::default(), 1);
    let c = connect(
        &mut p,
        &ConnOpts {
            mtu: Mtu::Mtu1024,
            ..ConnOpts::default()
        },
    );
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let a = p.dev[0]
        .reg_mr(c.pd[0], vec![0; 8192], 0x1000, all)
        .unwrap();
    let b = p.dev[1]
        .reg_mr(
            c.pd[1],
            (0..8192).map(|i| i as u8).collect(),
            0x10_0000,
            all,
        )
        .unwrap();
    let sge = [Sge {
        addr: 0x1000,
        length: 8192,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaRead, &sge);
    wr.remote_addr = 0x10_0000;
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();

    let now = Instant::from_micros(1);
    let mut buf = vec![0u8; 9000];
    let n = p.dev[0].poll_transmit(now, &mut buf).expect("READ request");
    let req = buf[..n].to_vec();
    let r = RocePacket::parse(&req).unwrap();
    assert_eq!(r.opcode(), Opcode::RC_RDMA_READ_REQUEST);
    let first = r.bth().psn;
    p.dev[1].handle_frame(now, &req);

    // Three of the eight responses leave.
    for i in 0..3 {
        let n = p.dev[1].poll_transmit(now, &mut buf).expect("response");
        assert_eq!(RocePacket::parse(&buf[..n]).unwrap().bth().psn, first + i);
    }
    // The requester retries from the fourth: READ for the missing tail.
    let mut dup = PacketRepr::from_packet(&r);
    dup.bth.psn = first + 3;
    let mut reth = dup.ext.reth.unwrap();
    reth.va += 3 * 1024;
    reth.dma_len -= 3 * 1024;
    dup.ext.reth = Some(reth);
    dup.udp.checksum = roce_stack::wire::UdpChecksum::Zero;
    let mut f = vec![0u8; 200];
    let n = dup.emit(&mut f, &[]).unwrap();
    p.dev[1].handle_frame(now, &f[..n]);

    // One stream: PSNs first+3 ..= first+7, continuing with MIDDLE (rxe).
    let mut psns = Vec::new();
    let mut ops = Vec::new();
    let mut data = Vec::new();
    while let Some(n) = p.dev[1].poll_transmit(now, &mut buf) {
        let q = RocePacket::parse(&buf[..n]).unwrap();
        psns.push(q.bth().psn);
        ops.push(q.opcode());
        data.extend_from_slice(q.payload());
    }
    assert_eq!(psns, (3..8).map(|i| first + i).collect::<Vec<_>>());
    assert_eq!(
        ops,
        [
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
        ]
    );
    // The remote MR holds byte i = i mod 256; the replay covers 3072..8192.
    assert!(data.iter().enumerate().all(|(i, b)| *b == (3072 + i) as u8));
    assert_eq!(data.len(), 8192 - 3072);
    assert_eq!(p.dev[1].counters().duplicate_request, 1);
}

/// A duplicate of the whole READ (its first PSN, the original RETH) restarts
/// with READ_RESPONSE_FIRST (rxe `rdatm_res_state_new`), so the requester
/// sees a complete FIRST ... LAST sequence again.
#[test]
fn duplicate_read_at_first_psn_restarts_with_first() {
    let mut p = Pair::new(1500, Faults::default(), 1);
    let c = connect(
        &mut p,
        &ConnOpts {
            mtu: Mtu::Mtu1024,
            ..ConnOpts::default()
        },
    );
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let a = p.dev[0]
        .reg_mr(c.pd[0], vec![0; 3000], 0x1000, all)
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![7; 3000], 0x10_0000, all)
        .unwrap();
    let sge = [Sge {
        addr: 0x1000,
        length: 3000,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaRead, &sge);
    wr.remote_addr = 0x10_0000;
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    let now = Instant::from_micros(1);
    let mut buf = vec![0u8; 9000];
    let n = p.dev[0].poll_transmit(now, &mut buf).expect("READ request");
    let req = buf[..n].to_vec();
    p.dev[1].handle_frame(now, &req);
    while p.dev[1].poll_transmit(now, &mut buf).is_some() {}
    p.dev[1].handle_frame(now, &req);
    let mut ops = Vec::new();
    while let Some(n) = p.dev[1].poll_transmit(now, &mut buf) {
        ops.push(RocePacket::parse(&buf[..n]).unwrap().opcode());
    }
    assert_eq!(
        ops,
        [
            Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            Opcode::RC_RDMA_READ_RESPONSE_LAST,
        ]
    );
}
