//! Deterministic soak: mixed RC traffic (SEND, WRITE, READ, atomics) over a
//! wire that loses, duplicates, reorders and corrupts frames. Every WQE must
//! succeed, in order, with the right data, and every atomic must execute
//! exactly once (IBTA 1.7 §9.7.4.1.4: duplicate atomics are replayed from the
//! responder resource, never re-executed).

mod common;

use std::time::Duration;

use common::*;
use roce_stack::testing::{connect, ConnOpts, Faults, Pair, Rng};
use roce_stack::verbs::{Mtu, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode};

fn soak(seed: u64, faults: Faults, mtu: Mtu, n: u64) {
    // `ROCE_SOAK_SEED=<n>` reruns one seed (with `ROCE_SOAK_TRACE=1` to dump
    // the frames of a failing run).
    if let Some(only) = std::env::var("ROCE_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        if only != seed {
            return;
        }
    }
    let mut p = Pair::new(1500, faults, seed);
    let opts = ConnOpts {
        mtu,
        timeout: 8,
        rd_atomic: 4,
        sq_psn: [0xFF_FF00, 0xFF_FFF0],
        ..ConnOpts::default()
    };
    let c = connect(&mut p, &opts);
    if std::env::var("ROCE_SOAK_TRACE").is_ok() {
        p.start_capture();
    }
    let src = pattern(64 * 1024, seed as u8);
    let a = p.dev[0]
        .reg_mr(c.pd[0], src.clone(), 0, all_access())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 64 * 1024], 0, all_access())
        .unwrap();
    // Local landing zone for READs and atomic results; side 1's receive buffers.
    let l = p.dev[0]
        .reg_mr(c.pd[0], vec![0; 64 * 1024], 0x100_0000, all_access())
        .unwrap();
    let rb = p.dev[1]
        .reg_mr(c.pd[1], vec![0; 8192], 0x200_0000, all_access())
        .unwrap();
    let mut rng = Rng::new(seed ^ 0xABCD);
    let mut expect_b = vec![0u8; 64 * 1024];
    let mut counter = 0u64; // atomic cell at b + 0xF000
    let mut sends = Vec::new();
    let mut reads = Vec::new();
    let mut ops = Vec::new();
    for i in 0..n {
        let kind = rng.below(5);
        let len = match rng.below(4) {
            0 => 0,
            1 => rng.below(64) as u32 + 1,
            _ => rng.below(5000) as u32 + 1,
        };
        let off = rng.below(8) * 4096;
        let sge = [Sge {
            addr: off,
            length: len,
            lkey: a.lkey,
        }];
        let list: &[Sge] = if len == 0 { &[] } else { &sge };
        match kind {
            0 => {
                // WRITE to b at 8 KiB-aligned slot i % 6 (below the atomic cell).
                let dst = (i % 6) * 8192;
                let mut wr = SendWr::new(i, WrOpcode::RdmaWrite, list);
                wr.remote_addr = dst;
                wr.rkey = b.rkey;
                p.dev[0].post_send(c.qpn[0], &wr).unwrap();
                expect_b[dst as usize..][..len as usize]
                    .copy_from_slice(&src[off as usize..][..len as usize]);
                ops.push((i, WcOpcode::RdmaWrite));
            }
            1 => {
                let rsge = [Sge {
                    addr: 0x200_0000,
                    length: 8192,
                    lkey: rb.lkey,
                }];
                p.dev[1]
                    .post_recv(
                        c.qpn[1],
                        &RecvWr {
                            wr_id: 1000 + i,
                            sg_list: &rsge,
                        },
                    )
                    .unwrap();
                let wr = SendWr::new(i, WrOpcode::Send, list);
                p.dev[0].post_send(c.qpn[0], &wr).unwrap();
                sends.push((1000 + i, len));
                ops.push((i, WcOpcode::Send));
            }
            2 => {
                // READ from side 1's source region (written by nobody).
                let lsge = [Sge {
                    addr: 0x100_0000 + (i % 8) * 8192,
                    length: len,
                    lkey: l.lkey,
                }];
                let ll: &[Sge] = if len == 0 { &[] } else { &lsge };
                let mut wr = SendWr::new(i, WrOpcode::RdmaRead, ll);
                wr.remote_addr = 0xF008;
                wr.rkey = b.rkey;
                let len = len.min(0x1000 - 8);
                let lsge2 = [Sge {
                    addr: lsge[0].addr,
                    length: len,
                    lkey: l.lkey,
                }];
                let ll2: &[Sge] = if len == 0 { &[] } else { &lsge2 };
                wr.sg_list = ll2;
                p.dev[0].post_send(c.qpn[0], &wr).unwrap();
                reads.push((i, lsge2[0].addr, len));
                ops.push((i, WcOpcode::RdmaRead));
            }
            _ => {
                let rsge = [Sge {
                    addr: 0x100_0000 + 0xF000 + (i % 64) * 8,
                    length: 8,
                    lkey: l.lkey,
                }];
                let mut wr = SendWr::new(i, WrOpcode::AtomicFetchAndAdd, &rsge);
                wr.remote_addr = 0xF000;
                wr.rkey = b.rkey;
                wr.compare_add = i + 1;
                p.dev[0].post_send(c.qpn[0], &wr).unwrap();
                counter += i + 1;
                ops.push((i, WcOpcode::FetchAdd));
            }
        }
        // Keep the queues shallow enough for the default capacities.
        if i % 16 == 15 {
            let want = ops.len();
            let ok = p.run_until(Duration::from_secs(30), |p| cq_len(p, 0, c.cq[0]) >= want);
            assert!(
                ok,
                "seed {seed}: stuck at op {i}: {:?} {:?}",
                p.dev[0].counters(),
                p.stats
            );
        }
    }
    let want = ops.len();
    let ok = p.run_until(Duration::from_secs(30), |p| cq_len(p, 0, c.cq[0]) >= want);
    assert!(ok, "seed {seed}: {:?} {:?}", p.dev[0].counters(), p.stats);
    let wcs = poll_all(&mut p, 0, c.cq[0]);
    let got: Vec<(u64, WcOpcode, WcStatus)> =
        wcs.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    let exp: Vec<(u64, WcOpcode, WcStatus)> = ops
        .iter()
        .map(|(i, op)| (*i, *op, WcStatus::Success))
        .collect();
    let first_bad = got.iter().zip(&exp).position(|(g, e)| g != e);
    if first_bad.is_some() && std::env::var("ROCE_SOAK_TRACE").is_ok() {
        eprintln!("dev1 {:?}", p.dev[1].counters());
        for (t, f) in p.captured() {
            if let Ok(k) = roce_stack::wire::RocePacket::parse(f) {
                eprintln!(
                    "{:>12} {} op {:02x} psn {:06x} len {} aeth {:?} reth {:?}",
                    t.as_nanos(),
                    f[11],
                    k.bth.opcode.0,
                    k.bth.psn,
                    k.payload.len(),
                    k.ext.aeth.map(|a| a.syndrome),
                    k.ext.reth.map(|r| (r.va, r.dma_len))
                );
            }
        }
    }
    assert!(
        got.len() == exp.len() && first_bad.is_none(),
        "seed {seed}: {} completions for {} WQEs, first mismatch {:?}: {:?} {:?}",
        got.len(),
        exp.len(),
        first_bad.map(|i| (got[i], exp[i])),
        p.dev[0].counters(),
        p.stats
    );
    // Side 1's memory: the WRITE slots, and the atomic cell added exactly once each.
    let mb = p.dev[1].mr(b.lkey).unwrap().as_slice().to_vec();
    assert!(
        mb[..6 * 8192] == expect_b[..6 * 8192],
        "seed {seed}: WRITE data"
    );
    assert_eq!(
        u64::from_ne_bytes(mb[0xF000..0xF008].try_into().unwrap()),
        counter,
        "seed {seed}"
    );
    // READs returned side 1's bytes at 0xF008 (zeros, as nobody writes there).
    let ml = p.dev[0].mr(l.lkey).unwrap().as_slice().to_vec();
    for (i, addr, len) in reads {
        let o = (addr - 0x100_0000) as usize;
        assert!(
            ml[o..o + len as usize].iter().all(|x| *x == 0),
            "seed {seed} read {i}"
        );
    }
    p.advance(Duration::from_millis(50));
    let r = poll_all(&mut p, 1, c.cq[1]);
    let got: Vec<(u64, u32, WcStatus)> =
        r.iter().map(|w| (w.wr_id, w.byte_len, w.status)).collect();
    let exp: Vec<(u64, u32, WcStatus)> = sends
        .iter()
        .map(|(id, len)| (*id, *len, WcStatus::Success))
        .collect();
    assert_eq!(got, exp, "seed {seed}: receive completions");
    for side in 0..2 {
        assert_eq!(p.dev[side].active_qps(), 0, "seed {seed}");
        assert_eq!(p.dev[side].poll_timeout(), None, "seed {seed}");
    }
}

/// How many seeds to run: `default`, or more with `ROCE_SOAK_SCALE=<factor>`.
fn seeds(default: u64) -> u64 {
    let scale: u64 = std::env::var("ROCE_SOAK_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    default * scale.max(1)
}

#[test]
fn soak_mixed_ops_clean_wire() {
    for seed in 0..seeds(5) {
        soak(seed, Faults::default(), Mtu::Mtu1024, 200);
    }
}

#[test]
fn soak_mixed_ops_lossy_wire() {
    for seed in 0..seeds(30) {
        let f = Faults {
            corrupt: 0.01,
            ..Faults::lossy(0.05)
        };
        soak(seed, f, Mtu::Mtu1024, 120);
    }
}

#[test]
fn soak_mixed_ops_very_lossy_wire_small_mtu() {
    for seed in 100..100 + seeds(15) {
        let f = Faults {
            corrupt: 0.02,
            ..Faults::lossy(0.10)
        };
        soak(seed, f, Mtu::Mtu256, 80);
    }
}
