//! The stack behind `net_pcap`: a pcap of RC requests (generated here by a
//! requester device on the in-memory wire) is replayed into a responder
//! device through DPDK's pcap driver, and the responder's frames are written
//! by the driver to a tx pcap. Every response must parse strictly (valid
//! ICRC), answer the requester's QP, acknowledge a PSN that the requests
//! asked to be acknowledged, and carry the READ data. Needs root.

mod common;

use std::time::{Duration, Instant};

use common::{eal, unique, TempDir};
use dpdk_glue::{DpdkPort, Mempool, MonotonicClock, Port, DEFAULT_DATA_ROOM};
use roce_io::pump;
use roce_stack::testing::{all_access, pattern};
use roce_stack::testing::{connect, Conn, ConnOpts, Faults, Pair};
use roce_stack::verbs::{MrKeys, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
use roce_stack::wire::{AethSyndrome, Opcode, RocePacket};

/// Two connected devices with one MR each (same QPNs, PSNs and keys every
/// time: the setup is deterministic), and a receive posted on side 1.
fn pair() -> (Pair, Conn, MrKeys, MrKeys) {
    let mut p = Pair::new(1500, Faults::default(), 3);
    let c = connect(&mut p, &ConnOpts::default());
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(4096, 5), 0x1000, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 8192], 0x8000_0000, all_access())
        .unwrap();
    let rsge = [Sge {
        addr: 0x8000_1000,
        length: 1024,
        lkey: b.lkey,
    }];
    p.dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 1,
                sg_list: &rsge,
            },
        )
        .unwrap();
    (p, c, a, b)
}

/// Side 0's request frames for WRITE 3000 B, SEND 500 B, READ 2000 B, as
/// they go on the wire (the in-memory run completes all three).
fn request_frames() -> Vec<Vec<u8>> {
    let (mut p, c, a, b) = pair();
    p.start_capture();
    let w = [Sge {
        addr: 0x1000,
        length: 3000,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &w);
    wr.remote_addr = 0x8000_0010;
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    let s = [Sge {
        addr: 0x1000 + 100,
        length: 500,
        lkey: a.lkey,
    }];
    p.dev[0]
        .post_send(c.qpn[0], &SendWr::new(2, WrOpcode::Send, &s))
        .unwrap();
    let r = [Sge {
        addr: 0x1000,
        length: 2000,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(3, WrOpcode::RdmaRead, &r);
    wr.remote_addr = 0x8000_0010;
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    assert!(p.run_until(Duration::from_millis(50), |p| p.dev[0]
        .cq(c.cq[0])
        .unwrap()
        .len()
        == 3));
    let mac0 = p.dev[0].config().mac;
    p.captured()
        .iter()
        .filter(|(_, f)| f.get(6..12) == Some(&mac0[..]))
        .map(|(_, f)| f.clone())
        .collect()
}

#[test]
fn pcap_replay_responses_have_valid_icrc() {
    let requests = request_frames();
    // WRITE: 3 packets at PMTU 1024; SEND: 1; READ request: 1.
    assert_eq!(requests.len(), 5);
    let req: Vec<RocePacket<'_>> = requests
        .iter()
        .map(|f| RocePacket::parse(f).unwrap())
        .collect();
    let ackreq_psns: Vec<u32> = req
        .iter()
        .filter(|p| p.bth().ack_req)
        .map(|p| p.bth().psn)
        .collect();
    let read_psn = req[4].bth().psn;
    assert_eq!(req[4].opcode(), Opcode::RC_RDMA_READ_REQUEST);

    let dir = TempDir::new();
    let rx = dir.0.join("requests.pcap");
    let tx = dir.0.join("responses.pcap");
    let stamped: Vec<(Duration, Vec<u8>)> = requests
        .iter()
        .enumerate()
        .map(|(i, f)| (Duration::from_micros(i as u64), f.clone()))
        .collect();
    std::fs::write(&rx, pcap_fixtures::write_pcap(&stamped)).unwrap();

    // The responder: side 1 of an identical setup, behind net_pcap.
    let (p, c, _a, b) = pair();
    let Pair { dev, .. } = p;
    let [_, mut responder] = dev;
    let eal = eal();
    let devargs = format!(
        "{},rx_pcap={},tx_pcap={}",
        unique("net_pcap"),
        rx.display(),
        tx.display()
    );
    let id = eal.probe_vdev(&devargs).expect("probe net_pcap");
    let pool = Mempool::new(&unique("pc"), 2047, 0, DEFAULT_DATA_ROOM).unwrap();
    let mut io = DpdkPort::new(Port::configure(id, 1, 1, &pool, 1500).unwrap()).unwrap();
    let clock = MonotonicClock::new();
    let guard = Instant::now();
    loop {
        pump(&mut responder, &mut io, clock.now(), 32).unwrap();
        let done = responder.counters().rx_frames as usize == requests.len()
            && responder.active_qps() == 0
            && io.tx_pending() == 0;
        if done {
            break;
        }
        assert!(
            guard.elapsed() < Duration::from_secs(60),
            "responder stuck: {:?} {:?}",
            responder.counters(),
            io.port().stats()
        );
    }
    let sent = io.port().stats().unwrap().opackets;
    drop(io); // closes the port: the driver flushes and closes the tx pcap
    assert_eq!(responder.counters().rx_parse_drops, 0);
    let mut wc = [roce_stack::verbs::Wc::EMPTY; 4];
    assert_eq!(responder.poll_cq(c.cq[1], &mut wc), 1);
    assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 500));
    let src = pattern(4096, 5);
    let mr = responder.mr(b.lkey).unwrap().as_slice();
    assert_eq!(&mr[16..3016], &src[..3000], "WRITE data landed");
    assert_eq!(
        &mr[0x1000..0x1000 + 500],
        &src[100..600],
        "SEND data landed"
    );

    let responses = pcap_fixtures::read_frames(&std::fs::read(&tx).unwrap()).unwrap();
    assert_eq!(responses.len() as u64, sent);
    assert!(
        responses.len() >= 3,
        "at least one ACK and two READ responses"
    );
    let mut read_data = Vec::new();
    let mut acks = 0;
    let mut max_psn = 0;
    for f in &responses {
        let p = RocePacket::parse(f).unwrap_or_else(|e| panic!("response does not parse: {e}"));
        let bth = p.bth();
        assert_eq!(bth.dest_qp, c.qpn[0], "to the requester's QP");
        max_psn = max_psn.max(bth.psn);
        let aeth = p.ext().aeth();
        match p.opcode() {
            Opcode::RC_ACKNOWLEDGE => {
                acks += 1;
                assert!(matches!(aeth.unwrap().kind(), AethSyndrome::Ack { .. }));
                assert!(
                    ackreq_psns.contains(&bth.psn),
                    "ACK of PSN {:#x}, not one that asked for it ({ackreq_psns:x?})",
                    bth.psn
                );
            }
            Opcode::RC_RDMA_READ_RESPONSE_FIRST => {
                assert_eq!(bth.psn, read_psn);
                read_data.extend_from_slice(p.payload());
            }
            Opcode::RC_RDMA_READ_RESPONSE_LAST => {
                assert_eq!(bth.psn, read_psn + 1);
                assert!(matches!(aeth.unwrap().kind(), AethSyndrome::Ack { .. }));
                read_data.extend_from_slice(p.payload());
            }
            other => panic!("unexpected response opcode {other:?}"),
        }
    }
    assert!(acks >= 1);
    assert_eq!(max_psn, read_psn + 1);
    assert_eq!(
        read_data,
        &src[..2000],
        "READ responses carry the written data"
    );
}
