//! The stack's transports over DPDK: two `roce_stack` devices in one process
//! joined by a `net_memif` pair (server and client ports on one socket),
//! driven by `roce_io::pump` through `DpdkPort`. RC WRITE, READ
//! and SEND, and a UD SEND, each with its data checked byte for byte.
//! Needs root.

mod common;

use common::{memif_ports, pump_until, TempDir};
use dpdk_glue::{DpdkPort, MonotonicClock};
use roce_stack::testing::{all_access, pattern, post_gathered_send_imm};
use roce_stack::testing::{connect, Conn, ConnOpts, Faults, Pair};
use roce_stack::transport::av::AddressVector;
use roce_stack::verbs::{
    Device, MrKeys, QpType, RecvWr, SendWr, Sge, UdDest, Wc, WcOpcode, WcStatus, WrOpcode,
};

const QKEY: u32 = 0x1111_1111;

/// Two connected devices over a memif pair.
struct Setup {
    dev: [Device; 2],
    io: [DpdkPort; 2],
    clock: MonotonicClock,
    c: Conn,
    a: MrKeys,
    b: MrKeys,
    src: Vec<u8>,
    _dir: TempDir,
}

fn setup(qp_type: QpType) -> Setup {
    let dir = TempDir::new();
    let io = memif_ports(&dir, "mt");
    let mut p = Pair::new(1500, Faults::default(), 7);
    let c = connect(
        &mut p,
        &ConnOpts {
            qp_type,
            qkey: QKEY,
            ..ConnOpts::default()
        },
    );
    let src = pattern(4096, 7);
    let a = p.dev[0]
        .reg_mr(c.pd[0], src.clone(), 0x1000, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 8192], 0x8000_0000, all_access())
        .unwrap();
    let Pair { dev, .. } = p;
    Setup {
        dev,
        io,
        clock: MonotonicClock::new(),
        c,
        a,
        b,
        src,
        _dir: dir,
    }
}

fn poll_one(dev: &mut Device, cq: u32) -> Wc {
    let mut out = [Wc::EMPTY; 1];
    assert_eq!(dev.poll_cq(cq, &mut out), 1);
    out[0]
}

fn cq_len(dev: &[Device; 2], side: usize, cq: u32) -> usize {
    dev[side].cq(cq).map_or(0, |q| q.len())
}

#[test]
fn rc_write_read_send_over_memif() {
    let mut s = setup(QpType::Rc);
    let (c, a, b) = (s.c, s.a, s.b);

    // WRITE 3000 bytes (three 1024-byte PMTU packets) to b at +16.
    let sge = [Sge {
        addr: 0x1000,
        length: 3000,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 0x8000_0010;
    wr.rkey = b.rkey;
    s.dev[0].post_send(c.qpn[0], &wr).unwrap();
    pump_until(&mut s.dev, &mut s.io, &s.clock, "WRITE", |d| {
        cq_len(d, 0, c.cq[0]) == 1
    })
    .unwrap();
    let wc = poll_one(&mut s.dev[0], c.cq[0]);
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::RdmaWrite, 1)
    );
    let mr_b = s.dev[1].mr(b.lkey).unwrap().as_slice();
    assert_eq!(&mr_b[16..3016], &s.src[..3000]);
    assert!(mr_b[..16].iter().all(|&x| x == 0) && mr_b[3016..].iter().all(|&x| x == 0));

    // READ it back into a's zeroed buffer.
    s.dev[0].mr_mut(a.lkey).unwrap().as_mut_slice().fill(0);
    let mut wr = SendWr::new(2, WrOpcode::RdmaRead, &sge);
    wr.remote_addr = 0x8000_0010;
    wr.rkey = b.rkey;
    s.dev[0].post_send(c.qpn[0], &wr).unwrap();
    pump_until(&mut s.dev, &mut s.io, &s.clock, "READ", |d| {
        cq_len(d, 0, c.cq[0]) == 1
    })
    .unwrap();
    let wc = poll_one(&mut s.dev[0], c.cq[0]);
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::RdmaRead, 2)
    );
    assert_eq!(
        &s.dev[0].mr(a.lkey).unwrap().as_slice()[..3000],
        &s.src[..3000]
    );

    // SEND with immediate, 407 bytes gathered from three SGEs.
    s.dev[0]
        .mr_mut(a.lkey)
        .unwrap()
        .as_mut_slice()
        .copy_from_slice(&s.src);
    post_gathered_send_imm(&mut s.dev, c.qpn, a, 0x1000, b, 0x8000_1000).unwrap();
    pump_until(&mut s.dev, &mut s.io, &s.clock, "SEND", |d| {
        cq_len(d, 1, c.cq[1]) == 1 && cq_len(d, 0, c.cq[0]) == 1
    })
    .unwrap();
    let r = poll_one(&mut s.dev[1], c.cq[1]);
    assert_eq!(
        (r.status, r.opcode, r.wr_id),
        (WcStatus::Success, WcOpcode::Recv, 77)
    );
    assert_eq!((r.byte_len, r.imm_data), (407, 0xdead_beef));
    let mut expect = s.src[..100].to_vec();
    expect.extend_from_slice(&s.src[500..800]);
    expect.extend_from_slice(&s.src[1000..1007]);
    assert_eq!(
        &s.dev[1].mr(b.lkey).unwrap().as_slice()[0x1000..0x1000 + 407],
        &expect[..]
    );
    let wc = poll_one(&mut s.dev[0], c.cq[0]);
    assert_eq!(
        (wc.status, wc.opcode, wc.wr_id),
        (WcStatus::Success, WcOpcode::Send, 3)
    );

    // Every frame crossed the DPDK ports: the device counters and the port
    // counters agree, and nothing was dropped on the way.
    for side in 0..2 {
        let st = s.io[side].port().stats().unwrap();
        let cn = s.dev[side].counters();
        assert_eq!(st.opackets, cn.sent_pkts, "side {side} sent");
        assert_eq!(st.ipackets, s.io[1 - side].port().stats().unwrap().opackets);
        assert_eq!(cn.rx_parse_drops, 0);
    }
}

#[test]
fn ud_send_over_memif() {
    let mut s = setup(QpType::Ud);
    let (c, a, b) = (s.c, s.a, s.b);
    // A UD receive buffer: 40-byte GRH area, then up to 1024 bytes.
    let rsge = [Sge {
        addr: 0x8000_0000,
        length: 40 + 1024,
        lkey: b.lkey,
    }];
    s.dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 9,
                sg_list: &rsge,
            },
        )
        .unwrap();
    let sge = [Sge {
        addr: 0x1000 + 64,
        length: 700,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(5, WrOpcode::Send, &sge);
    wr.ud = Some(UdDest {
        av: AddressVector {
            dgid: s.dev[1].gid(0).unwrap(),
            dmac: s.dev[1].config().mac,
            ..AddressVector::default()
        },
        remote_qpn: c.qpn[1],
        remote_qkey: QKEY,
    });
    s.dev[0].post_send(c.qpn[0], &wr).unwrap();
    pump_until(&mut s.dev, &mut s.io, &s.clock, "UD SEND", |d| {
        cq_len(d, 1, c.cq[1]) == 1 && cq_len(d, 0, c.cq[0]) == 1
    })
    .unwrap();
    let r = poll_one(&mut s.dev[1], c.cq[1]);
    assert_eq!(
        (r.status, r.opcode, r.wr_id),
        (WcStatus::Success, WcOpcode::Recv, 9)
    );
    assert_eq!(r.byte_len, 40 + 700);
    assert_eq!(r.src_qp, c.qpn[0]);
    assert_eq!(
        &s.dev[1].mr(b.lkey).unwrap().as_slice()[40..740],
        &s.src[64..764]
    );
    let wc = poll_one(&mut s.dev[0], c.cq[0]);
    assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 5));
    assert_eq!(s.io[0].port().stats().unwrap().opackets, 1);
    assert_eq!(s.io[1].port().stats().unwrap().ipackets, 1);
}
