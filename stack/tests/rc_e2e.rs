//! End-to-end RC/UC/UD between two devices over the deterministic wire.

use std::time::Duration;

mod common;

use common::poll_all;
use roce_stack::testing::{all_access, pattern, post_gathered_send_imm};
use roce_stack::testing::{connect, ConnOpts, Faults, Pair};
use roce_stack::verbs::{QpType, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};

#[test]
fn rc_write_read_send_atomic() {
    let mut p = Pair::new(1500, Faults::default(), 1);
    let c = connect(&mut p, &ConnOpts::default());
    let src = pattern(3000, 7);
    let a = p.dev[0]
        .reg_mr(c.pd[0], src.clone(), 0x1000, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 8192], 0x8000_0000, all_access())
        .unwrap();
    // WRITE 3000 bytes to b at +16.
    let sge = [Sge {
        addr: 0x1000,
        length: 3000,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 0x8000_0010;
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    assert!(p.run_until(Duration::from_millis(10), |p| p.dev[0]
        .cq(c.cq[0])
        .unwrap()
        .len()
        == 1));
    let wcs = poll_all(&mut p, 0, c.cq[0]);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].opcode, WcOpcode::RdmaWrite);
    assert_eq!(&p.dev[1].mr(b.lkey).unwrap().as_slice()[16..3016], &src[..]);

    // READ it back into a's buffer at 0 (overwrite with zeros first).
    p.dev[0].mr_mut(a.lkey).unwrap().as_mut_slice().fill(0);
    let mut wr = SendWr::new(2, WrOpcode::RdmaRead, &sge);
    wr.remote_addr = 0x8000_0010;
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    assert!(p.run_until(Duration::from_millis(10), |p| p.dev[0]
        .cq(c.cq[0])
        .unwrap()
        .len()
        == 1));
    let wcs = poll_all(&mut p, 0, c.cq[0]);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[0].opcode, WcOpcode::RdmaRead);
    assert_eq!(p.dev[0].mr(a.lkey).unwrap().as_slice(), &src[..]);

    // SEND 407 bytes from three SGEs (CASES R19 shape) at MTU 1024.
    post_gathered_send_imm(&mut p.dev, c.qpn, a, 0x1000, b, 0x8000_1000).unwrap();
    assert!(p.run_until(Duration::from_millis(10), |p| p.dev[1]
        .cq(c.cq[1])
        .unwrap()
        .len()
        == 1
        && p.dev[0].cq(c.cq[0]).unwrap().len() == 1));
    let r = poll_all(&mut p, 1, c.cq[1]);
    assert_eq!(r[0].wr_id, 77);
    assert_eq!(r[0].byte_len, 407);
    assert_eq!(r[0].imm_data, 0xdead_beef);
    let mut expect = src[..100].to_vec();
    expect.extend_from_slice(&src[500..800]);
    expect.extend_from_slice(&src[1000..1007]);
    assert_eq!(
        &p.dev[1].mr(b.lkey).unwrap().as_slice()[0x1000..0x1000 + 407],
        &expect[..]
    );
    poll_all(&mut p, 0, c.cq[0]);

    // FETCH_ADD on b at +0x1800 (8-aligned), then CMP_SWAP.
    p.dev[1].mr_mut(b.lkey).unwrap().as_mut_slice()[0x1800..0x1808]
        .copy_from_slice(&5u64.to_ne_bytes());
    let res = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(4, WrOpcode::AtomicFetchAndAdd, &res);
    wr.remote_addr = 0x8000_1800;
    wr.rkey = b.rkey;
    wr.compare_add = 10;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    let mut wr = SendWr::new(5, WrOpcode::AtomicCmpAndSwp, &res);
    wr.remote_addr = 0x8000_1800;
    wr.rkey = b.rkey;
    wr.compare_add = 15;
    wr.swap = 99;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    assert!(p.run_until(Duration::from_millis(10), |p| p.dev[0]
        .cq(c.cq[0])
        .unwrap()
        .len()
        == 2));
    let wcs = poll_all(&mut p, 0, c.cq[0]);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(4, WcStatus::Success), (5, WcStatus::Success)]
    );
    assert_eq!(
        &p.dev[0].mr(a.lkey).unwrap().as_slice()[..8],
        &15u64.to_ne_bytes()
    );
    assert_eq!(
        &p.dev[1].mr(b.lkey).unwrap().as_slice()[0x1800..0x1808],
        &99u64.to_ne_bytes()
    );
}

#[test]
fn rc_write_survives_loss() {
    for seed in 0..20 {
        let mut p = Pair::new(1500, Faults::lossy(0.05), seed);
        let c = connect(
            &mut p,
            &ConnOpts {
                sq_psn: [0xFF_FFF0, 0xFF_FFFE],
                ..ConnOpts::default()
            },
        );
        let src = pattern(64 * 1024, seed as u8);
        let a = p.dev[0]
            .reg_mr(c.pd[0], src.clone(), 0, all_access())
            .unwrap();
        let b = p.dev[1]
            .reg_mr(c.pd[1], vec![0; 64 * 1024], 0, all_access())
            .unwrap();
        for i in 0..8u64 {
            let sge = [Sge {
                addr: i * 8192,
                length: 8192,
                lkey: a.lkey,
            }];
            let mut wr = SendWr::new(i, WrOpcode::RdmaWrite, &sge);
            wr.remote_addr = i * 8192;
            wr.rkey = b.rkey;
            p.dev[0].post_send(c.qpn[0], &wr).unwrap();
        }
        let ok = p.run_until(Duration::from_secs(5), |p| {
            p.dev[0].cq(c.cq[0]).unwrap().len() == 8
        });
        assert!(ok, "seed {seed}: {:?} {:?}", p.dev[0].counters(), p.stats);
        let wcs = poll_all(&mut p, 0, c.cq[0]);
        assert!(
            wcs.iter()
                .enumerate()
                .all(|(i, w)| w.wr_id == i as u64 && w.status == WcStatus::Success),
            "{wcs:?}"
        );
        assert_eq!(
            p.dev[1].mr(b.lkey).unwrap().as_slice(),
            &src[..],
            "seed {seed}"
        );
    }
}

#[test]
fn ud_send() {
    let mut p = Pair::new(1500, Faults::default(), 3);
    let c = connect(
        &mut p,
        &ConnOpts {
            qp_type: QpType::Ud,
            ..ConnOpts::default()
        },
    );
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(100, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 140], 0, all_access())
        .unwrap();
    let rsge = [Sge {
        addr: 0,
        length: 140,
        lkey: b.lkey,
    }];
    p.dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 9,
                sg_list: &rsge,
            },
        )
        .unwrap();
    let sge = [Sge {
        addr: 0,
        length: 100,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::Send, &sge);
    let peer = p.dev[1].gid(0).unwrap();
    wr.ud = Some(roce_stack::verbs::UdDest {
        av: roce_stack::transport::av::AddressVector {
            dgid: peer,
            dmac: p.dev[1].config().mac,
            ..Default::default()
        },
        remote_qpn: c.qpn[1],
        remote_qkey: 0x1111_1111,
    });
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    assert!(p.run_until(Duration::from_millis(1), |p| p.dev[1]
        .cq(c.cq[1])
        .unwrap()
        .len()
        == 1));
    let r = poll_all(&mut p, 1, c.cq[1]);
    assert_eq!(r[0].status, WcStatus::Success);
    assert_eq!(r[0].byte_len, 140);
    assert_eq!(r[0].src_qp, c.qpn[0]);
    let buf = p.dev[1].mr(b.lkey).unwrap().as_slice();
    assert_eq!(buf[20], 0x45);
    assert_eq!(&buf[32..36], &[10, 0, 0, 1]);
    assert_eq!(&buf[40..140], &pattern(100, 1)[..]);
}
