//! The verbs API: the QP state machine and attribute masks per QP type
//! (ROCEV2-DIGEST §5 table), queue limits, CQ overrun, PD/MR lifetime rules,
//! `reg_mr_with_rkey`, and the cost of idle QPs.

mod common;

use std::time::Duration;

use common::*;
use roce_stack::testing::{connect, test_device, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::transport::av::AddressVector;
use roce_stack::verbs::{
    AccessFlags, AsyncEvent, Device, Mtu, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendFlags, SendWr, Sge, VerbsError, WcStatus, WrOpcode,
};

const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

/// Required attributes per transition and QP type (ROCEV2-DIGEST §5 table;
/// always plus STATE). Transitions not in the table require nothing.
fn required(t: QpType, from: QpState, to: QpState) -> M {
    use QpState::*;
    match (from, to, t) {
        (Reset, Init, QpType::Ud) => M::PKEY_INDEX | M::PORT | M::QKEY,
        (Reset, Init, _) => M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
        (Init, Rtr, QpType::Rc) => {
            M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
        }
        (Init, Rtr, QpType::Uc) => M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
        (Rtr, Rts, QpType::Rc) => {
            M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
        }
        (Rtr, Rts, _) => M::SQ_PSN,
        _ => M::empty(),
    }
}

/// Legal moves (ROCEV2-DIGEST §5, kernel `qp_state_table`).
fn legal(from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Rts)
            | (Sqd, Sqd)
            | (Sqe, Rts)
            | (_, Reset)
    ) || (to == Err && from != Reset)
}

fn attr(dev: &Device, to: QpState) -> QpAttr {
    QpAttr {
        qp_state: to,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        qkey: 0x11,
        ah_attr: AddressVector {
            dgid: dev.gid(0).unwrap(),
            ..AddressVector::default()
        },
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x99,
        ..QpAttr::default()
    }
}

fn new_qp(dev: &mut Device, t: QpType) -> u32 {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(64);
    dev.create_qp(
        pd,
        &QpInitAttr {
            qp_type: t,
            send_cq: cq,
            recv_cq: cq,
            cap: QpCap::default(),
            sq_sig_all: false,
        },
    )
    .unwrap()
}

fn step(dev: &mut Device, q: u32, t: QpType, from: QpState, to: QpState) -> Result<(), VerbsError> {
    let a = attr(dev, to);
    dev.modify_qp(q, &a, M::STATE | required(t, from, to))
}

/// Bring a new QP of type `t` to `s` along legal moves.
fn qp_in(dev: &mut Device, t: QpType, s: QpState) -> u32 {
    use QpState::*;
    let q = new_qp(dev, t);
    let path: &[QpState] = match s {
        Reset => &[],
        Init => &[Init],
        Rtr => &[Init, Rtr],
        Rts => &[Init, Rtr, Rts],
        Sqd => &[Init, Rtr, Rts, Sqd],
        Err => &[Init, Err],
        Sqe => unreachable!("SQE is entered only on a send error"),
    };
    let mut cur = Reset;
    for &n in path {
        step(dev, q, t, cur, n).unwrap();
        cur = n;
    }
    assert_eq!(dev.qp(q).unwrap().state(), s);
    q
}

#[test]
fn qp_state_machine_legal_and_illegal_moves() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for from in STATES {
            if from == QpState::Sqe {
                continue;
            }
            for to in STATES {
                let mut dev = test_device(0, 1500);
                let q = qp_in(&mut dev, t, from);
                let r = step(&mut dev, q, t, from, to);
                if legal(from, to) {
                    assert_eq!(r, Ok(()), "{t:?} {from:?} -> {to:?}");
                    assert_eq!(dev.qp(q).unwrap().state(), to);
                } else {
                    assert_eq!(
                        r,
                        Err(VerbsError::IllegalTransition { from, to }),
                        "{t:?} {from:?} -> {to:?}"
                    );
                    assert_eq!(dev.qp(q).unwrap().state(), from, "state unchanged");
                }
            }
        }
    }
}

#[test]
fn qp_state_machine_missing_required_attributes() {
    use QpState::*;
    for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for (from, to) in [(Reset, Init), (Init, Rtr), (Rtr, Rts)] {
            let req = required(t, from, to);
            for bit in req.iter() {
                let mut dev = test_device(0, 1500);
                let q = qp_in(&mut dev, t, from);
                let a = attr(&dev, to);
                let r = dev.modify_qp(q, &a, M::STATE | (req - bit));
                assert_eq!(
                    r,
                    Result::Err(VerbsError::MissingAttributes(bit)),
                    "{t:?} {from:?}->{to:?} {bit:?}"
                );
                assert_eq!(dev.qp(q).unwrap().state(), from);
            }
        }
    }
}

#[test]
fn qp_state_machine_extra_attributes_rejected() {
    use QpState::*;
    let cases = [
        (QpType::Rc, Reset, Init, M::QKEY),
        (QpType::Ud, Reset, Init, M::ACCESS_FLAGS),
        (QpType::Rc, Reset, Init, M::SQ_PSN),
        (QpType::Ud, Init, Rtr, M::AV),
        (QpType::Ud, Init, Rtr, M::DEST_QPN),
        (QpType::Uc, Init, Rtr, M::MAX_DEST_RD_ATOMIC),
        (QpType::Uc, Init, Rtr, M::MIN_RNR_TIMER),
        (QpType::Rc, Init, Rtr, M::SQ_PSN),
        (QpType::Rc, Rtr, Rts, M::RQ_PSN),
        (QpType::Uc, Rtr, Rts, M::TIMEOUT),
        (QpType::Ud, Rtr, Rts, M::RETRY_CNT),
        (QpType::Rc, Rts, Rts, M::PATH_MTU),
    ];
    for (t, from, to, extra) in cases {
        let mut dev = test_device(0, 1500);
        let q = qp_in(&mut dev, t, from);
        let a = attr(&dev, to);
        let r = dev.modify_qp(q, &a, M::STATE | required(t, from, to) | extra);
        assert_eq!(
            r,
            Result::Err(VerbsError::ExtraAttributes(extra)),
            "{t:?} {from:?}->{to:?} {extra:?}"
        );
        assert_eq!(dev.qp(q).unwrap().state(), from);
    }
}

#[test]
fn qp_attribute_value_ranges() {
    let mut dev = test_device(0, 1500);
    let q = qp_in(&mut dev, QpType::Rc, QpState::Rtr);
    let base = attr(&dev, QpState::Rts);
    let mask = M::STATE | required(QpType::Rc, QpState::Rtr, QpState::Rts);
    for (a, name) in [
        (
            QpAttr {
                timeout: 32,
                ..base
            },
            "timeout",
        ),
        (
            QpAttr {
                retry_cnt: 8,
                ..base
            },
            "retry_cnt",
        ),
        (
            QpAttr {
                rnr_retry: 8,
                ..base
            },
            "rnr_retry",
        ),
    ] {
        assert_eq!(
            dev.modify_qp(q, &a, mask),
            Err(VerbsError::InvalidAttribute(name))
        );
    }
    let q = qp_in(&mut dev, QpType::Rc, QpState::Init);
    let base = attr(&dev, QpState::Rtr);
    let mask = M::STATE | required(QpType::Rc, QpState::Init, QpState::Rtr);
    let a = QpAttr {
        min_rnr_timer: 32,
        ..base
    };
    assert_eq!(
        dev.modify_qp(q, &a, mask),
        Err(VerbsError::InvalidAttribute("min_rnr_timer"))
    );
    let mut a = base;
    a.ah_attr.sgid_index = 3;
    assert_eq!(
        dev.modify_qp(q, &a, mask),
        Err(VerbsError::InvalidAttribute("sgid_index"))
    );
    assert_eq!(dev.modify_qp(q, &base, mask), Ok(()));
    assert_eq!(
        dev.modify_qp(0x7777, &base, mask),
        Err(VerbsError::NotFound)
    );
}

#[test]
fn post_send_and_recv_state_rules() {
    let mut dev = test_device(0, 1500);
    let sge: [Sge; 0] = [];
    let wr = SendWr::new(1, WrOpcode::Send, &sge);
    let rwr = RecvWr {
        wr_id: 1,
        sg_list: &sge,
    };
    for s in [QpState::Reset, QpState::Init, QpState::Rtr] {
        let q = qp_in(&mut dev, QpType::Rc, s);
        assert_eq!(dev.post_send(q, &wr), Err(VerbsError::BadState(s)));
        let r = dev.post_recv(q, &rwr);
        if s == QpState::Reset {
            assert_eq!(r, Err(VerbsError::BadState(QpState::Reset)));
        } else {
            assert_eq!(r, Ok(()), "receive WQEs may be posted from INIT");
        }
    }
    let q = qp_in(&mut dev, QpType::Rc, QpState::Rts);
    assert_eq!(dev.post_send(q, &wr), Ok(()));
}

#[test]
fn post_send_opcode_and_size_rules() {
    let mut dev = test_device(0, 1500);
    let none: [Sge; 0] = [];
    let ud = qp_in(&mut dev, QpType::Ud, QpState::Rts);
    assert_eq!(
        dev.post_send(ud, &SendWr::new(1, WrOpcode::RdmaWrite, &none)),
        Err(VerbsError::BadOpcode)
    );
    assert_eq!(
        dev.post_send(ud, &SendWr::new(1, WrOpcode::Send, &none)),
        Err(VerbsError::InvalidAttribute("ud")),
        "a UD send needs a destination"
    );
    let uc = qp_in(&mut dev, QpType::Uc, QpState::Rts);
    for op in [
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::SendWithInv,
    ] {
        assert_eq!(
            dev.post_send(uc, &SendWr::new(1, op, &none)),
            Err(VerbsError::BadOpcode),
            "{op:?}"
        );
    }
    let rc = qp_in(&mut dev, QpType::Rc, QpState::Rts);
    let five = [Sge::default(); 5]; // QpCap::default() allows 4
    assert_eq!(
        dev.post_send(rc, &SendWr::new(1, WrOpcode::Send, &five)),
        Err(VerbsError::TooLarge)
    );
    let big = [0u8; 65]; // max_inline_data 64
    let mut wr = SendWr::new(1, WrOpcode::Send, &none);
    wr.send_flags |= SendFlags::INLINE;
    wr.inline_data = &big;
    assert_eq!(dev.post_send(rc, &wr), Err(VerbsError::TooLarge));
    let five_recv = RecvWr {
        wr_id: 1,
        sg_list: &five,
    };
    assert_eq!(dev.post_recv(rc, &five_recv), Err(VerbsError::TooLarge));
}

#[test]
fn queue_full_is_an_error_not_an_overwrite() {
    let mut dev = test_device(0, 1500);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: 2,
            max_recv_wr: 2,
            ..QpCap::default()
        },
        sq_sig_all: false,
    };
    let q = dev.create_qp(pd, &init).unwrap();
    for (s, to) in [
        (QpState::Reset, QpState::Init),
        (QpState::Init, QpState::Rtr),
        (QpState::Rtr, QpState::Rts),
    ] {
        step(&mut dev, q, QpType::Rc, s, to).unwrap();
    }
    let none: [Sge; 0] = [];
    let wr = SendWr::new(1, WrOpcode::Send, &none);
    assert_eq!(dev.post_send(q, &wr), Ok(()));
    assert_eq!(dev.post_send(q, &wr), Ok(()));
    assert_eq!(dev.post_send(q, &wr), Err(VerbsError::QueueFull));
    let rwr = RecvWr {
        wr_id: 1,
        sg_list: &none,
    };
    assert_eq!(dev.post_recv(q, &rwr), Ok(()));
    assert_eq!(dev.post_recv(q, &rwr), Ok(()));
    assert_eq!(dev.post_recv(q, &rwr), Err(VerbsError::QueueFull));
    assert_eq!(dev.qp(q).unwrap().sq_outstanding(), 2);
    assert_eq!(dev.qp(q).unwrap().rq_outstanding(), 2);
}

#[test]
fn create_qp_rules() {
    let mut dev = test_device(0, 1500);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    assert_eq!(dev.create_qp_with_qpn(pd, &init, 0x40), Ok(0x40));
    assert_eq!(
        dev.create_qp_with_qpn(pd, &init, 0x40),
        Err(VerbsError::KeyInUse)
    );
    // QP0, QP1 and the multicast QPN 0xFFFFFF are not ours to create.
    for qpn in [0, 1, 0xFF_FFFF] {
        assert_eq!(
            dev.create_qp_with_qpn(pd, &init, qpn),
            Err(VerbsError::KeyInUse)
        );
    }
    assert_eq!(dev.create_qp(pd + 100, &init), Err(VerbsError::NotFound));
    let bad_cq = QpInitAttr {
        send_cq: cq + 100,
        ..init
    };
    assert_eq!(dev.create_qp(pd, &bad_cq), Err(VerbsError::NotFound));
    let zero = QpInitAttr {
        cap: QpCap {
            max_send_wr: 0,
            ..QpCap::default()
        },
        ..init
    };
    assert_eq!(dev.create_qp(pd, &zero), Err(VerbsError::TooLarge));
    assert_eq!(dev.destroy_qp(0x40), Ok(()));
    assert_eq!(dev.destroy_qp(0x40), Err(VerbsError::NotFound));
    assert_eq!(
        dev.create_qp_with_qpn(pd, &init, 0x40),
        Ok(0x40),
        "a destroyed QPN may be reused"
    );
}

#[test]
fn full_cq_raises_cq_err_never_silent() {
    let opts = ConnOpts {
        cqe: 2,
        ..ConnOpts::default()
    };
    let mut s = setup(1500, &opts, 64);
    for i in 0..3 {
        post_write(&mut s, i, 0, 64, 0);
    }
    let (p, c) = (&mut s.p, s.c);
    p.advance(Duration::from_millis(10));
    assert_eq!(p.dev[0].qp(c.qpn[0]).unwrap().sq_outstanding(), 0);
    let cq = p.dev[0].cq(c.cq[0]).unwrap();
    assert_eq!(cq.len(), 2);
    assert!(cq.is_overrun());
    assert_eq!(p.dev[0].counters().cq_overrun, 1);
    assert_eq!(
        p.dev[0].poll_event(),
        Some(AsyncEvent::CqErr { cq: c.cq[0] })
    );
    assert_eq!(p.dev[0].poll_event(), None);
    let wcs = poll_all(p, 0, c.cq[0]);
    assert_eq!(
        ids_status(&wcs),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
}

#[test]
fn dealloc_pd_and_dereg_mr_rules() {
    let mut dev = test_device(0, 1500);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(4);
    let mr = dev
        .reg_mr(pd, vec![7; 32], 0x1000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(dev.dealloc_pd(pd), Err(VerbsError::Busy), "an MR uses it");
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let q = dev.create_qp(pd, &init).unwrap();
    assert_eq!(
        dev.dereg_mr(mr.lkey),
        Ok(vec![7; 32]),
        "dereg returns the memory"
    );
    assert_eq!(dev.dereg_mr(mr.lkey), Err(VerbsError::NotFound));
    assert!(dev.mr(mr.lkey).is_none());
    assert_eq!(dev.dealloc_pd(pd), Err(VerbsError::Busy), "a QP uses it");
    dev.destroy_qp(q).unwrap();
    assert_eq!(dev.dealloc_pd(pd), Ok(()));
    assert_eq!(dev.dealloc_pd(pd), Err(VerbsError::NotFound));
    assert_eq!(
        dev.reg_mr(pd, vec![0; 8], 0, AccessFlags::LOCAL_WRITE)
            .map(|_| ()),
        Err(VerbsError::NotFound),
        "no MR on a freed PD"
    );
    let pd2 = dev.alloc_pd();
    // Remote write or atomic without local write is refused (ibv_reg_mr EINVAL).
    for acc in [AccessFlags::REMOTE_WRITE, AccessFlags::REMOTE_ATOMIC] {
        assert_eq!(
            dev.reg_mr(pd2, vec![0; 8], 0, acc).map(|_| ()),
            Err(VerbsError::InvalidAttribute("access"))
        );
    }
    assert_eq!(
        dev.reg_mr(pd2, vec![0; 8], u64::MAX - 3, AccessFlags::LOCAL_WRITE)
            .map(|_| ()),
        Err(VerbsError::InvalidAttribute("iova"))
    );
}

#[test]
fn deregistered_mr_is_refused_remotely() {
    let mut s = setup(1500, &ConnOpts::default(), 4096);
    let buf = s.p.dev[1].dereg_mr(s.mr[1].lkey).unwrap();
    assert_eq!(buf.len(), 4096);
    post_write(&mut s, 1, 0, 16, 0);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::RemAccessErr)]
    );
}

#[test]
fn reg_mr_with_rkey_rules() {
    let mut s = setup(1500, &ConnOpts::default(), 4096);
    let d = &mut s.p.dev[1];
    let chosen = 0x00AB_CD42;
    let k = d
        .reg_mr_with_rkey(s.c.pd[1], vec![0; 256], 0x7000, all_access(), chosen)
        .unwrap();
    assert_eq!(k.rkey, chosen);
    assert_ne!(k.lkey, s.mr[1].lkey);
    assert_eq!(d.mr(k.lkey).unwrap().rkey(), chosen);
    assert_eq!(
        d.reg_mr_with_rkey(s.c.pd[1], vec![0; 8], 0, all_access(), chosen)
            .map(|_| ()),
        Err(VerbsError::KeyInUse)
    );
    assert_eq!(
        d.reg_mr_with_rkey(s.c.pd[1], vec![0; 8], 0, all_access(), s.mr[1].rkey)
            .map(|_| ()),
        Err(VerbsError::KeyInUse),
        "an rkey the device chose is taken too"
    );
    // A WRITE through the chosen rkey lands in that MR.
    let sge = [Sge {
        addr: 0,
        length: 64,
        lkey: s.mr[0].lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 0x7010;
    wr.rkey = chosen;
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        &s.p.dev[1].mr(k.lkey).unwrap().as_slice()[0x10..0x50],
        &pattern(4096, 1)[..64]
    );
    // After dereg the rkey is free again; fresh keys never collide with it.
    s.p.dev[1].dereg_mr(k.lkey).unwrap();
    let k2 = s.p.dev[1]
        .reg_mr_with_rkey(s.c.pd[1], vec![0; 8], 0, all_access(), chosen)
        .unwrap();
    for _ in 0..100 {
        let f = s.p.dev[1]
            .reg_mr(s.c.pd[1], vec![0; 8], 0, all_access())
            .unwrap();
        assert_ne!(f.rkey, chosen);
        assert_ne!(f.lkey, k2.lkey);
    }
}

#[test]
fn idle_cost_10000_rc_qps() {
    let mut dev = test_device(0, 1500);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let mut qpns = Vec::new();
    for _ in 0..10_000 {
        let q = dev.create_qp(pd, &init).unwrap();
        let mut from = QpState::Reset;
        for to in [QpState::Init, QpState::Rtr, QpState::Rts] {
            step(&mut dev, q, QpType::Rc, from, to).unwrap();
            from = to;
        }
        qpns.push(q);
    }
    assert!(qpns
        .iter()
        .all(|q| dev.qp(*q).unwrap().state() == QpState::Rts));
    let mut buf = vec![0u8; 8192];
    assert_eq!(dev.poll_transmit(Instant::ZERO, &mut buf), None);
    assert_eq!(dev.active_qps(), 0, "the active list drained");
    assert_eq!(dev.poll_transmit(Instant::ZERO, &mut buf), None);
    assert_eq!(dev.poll_timeout(), None, "no timer armed");
    dev.handle_timeout(Instant::from_millis(10_000));
    assert_eq!(dev.active_qps(), 0);
    assert_eq!(dev.counters().sent_pkts, 0);
}

#[test]
fn idle_cost_after_traffic_back_to_nothing() {
    // One busy connection among idle QPs: once its work is done, both devices
    // hold no active QP and no timer.
    let mut p = Pair::new(1500, Faults::default(), 1);
    for side in 0..2 {
        for _ in 0..100 {
            qp_in(&mut p.dev[side], QpType::Rc, QpState::Rts);
        }
    }
    let c = connect(&mut p, &ConnOpts::default());
    let a = p.dev[0]
        .reg_mr(c.pd[0], pattern(8192, 1), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 8192], 0, all_access())
        .unwrap();
    let sge = [Sge {
        addr: 0,
        length: 8192,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    let mut rd = SendWr::new(2, WrOpcode::RdmaRead, &sge);
    rd.rkey = b.rkey;
    p.dev[0].post_send(c.qpn[0], &rd).unwrap();
    assert!(p.run_until(Duration::from_secs(1), |p| cq_len(p, 0, c.cq[0]) == 2));
    p.advance(Duration::from_millis(1));
    for side in 0..2 {
        assert_eq!(p.dev[side].active_qps(), 0);
        assert_eq!(p.dev[side].poll_timeout(), None);
    }
    assert_eq!(p.in_flight(), 0);
}

#[test]
fn sqd_finishes_started_work_then_raises_sq_drained() {
    let mut s = setup(
        1500,
        &ConnOpts {
            timeout: 10,
            ..ConnOpts::default()
        },
        16384,
    );
    let q = s.c.qpn[0];
    // Lose the first ACK so WQE 1 needs a retransmission while in SQD.
    let mut dropped = false;
    s.p.drop_filter = Some(Box::new(move |from, _, _| {
        let d = from == 1 && !dropped;
        dropped |= d;
        d
    }));
    post_write(&mut s, 1, 0, 3000, 0); // 3 packets
    post_write(&mut s, 2, 4096, 100, 4096);
    // Send exactly one packet of WQE 1, then move to SQD mid-message.
    let mut buf = vec![0u8; 8192];
    let n = s.p.dev[0].poll_transmit(s.p.now, &mut buf).unwrap();
    s.p.inject(0, &buf[..n]);
    let a = *s.p.dev[0].qp(q).unwrap().attr();
    s.p.dev[0]
        .modify_qp(
            q,
            &QpAttr {
                qp_state: QpState::Sqd,
                ..a
            },
            M::STATE,
        )
        .unwrap();
    assert_eq!(s.p.dev[0].poll_event(), None, "not drained yet");
    // Posting in SQD is allowed; the WQE waits for RTS.
    post_write(&mut s, 3, 8192, 100, 8192);
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 1));
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(
        s.p.dev[0].poll_event(),
        Some(AsyncEvent::SqDrained { qpn: q })
    );
    assert_eq!(
        s.p.dev[0].counters().local_ack_timeout_err,
        1,
        "the retransmission ran in SQD"
    );
    let f = seen_from(&s.p, 0);
    assert!(
        f.iter().all(|x| x.psn < 0x103),
        "nothing of WQE 2 or 3 left in SQD: {f:?}"
    );
    s.p.advance(Duration::from_millis(100));
    assert!(poll_all(&mut s.p, 0, s.c.cq[0]).is_empty());
    s.p.dev[0]
        .modify_qp(
            q,
            &QpAttr {
                qp_state: QpState::Rts,
                ..a
            },
            M::STATE,
        )
        .unwrap();
    assert!(s
        .p
        .run_until(Duration::from_secs(1), |p| cq_len(p, 0, s.c.cq[0]) == 2));
    assert_eq!(
        ids_status(&poll_all(&mut s.p, 0, s.c.cq[0])),
        vec![(2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(s.p.dev[0].poll_event(), None);
}
