//! Deterministic soak: mixed RC traffic (SEND, WRITE, READ, atomics) over a
//! wire that loses, duplicates, reorders and corrupts frames. Every WQE must
//! succeed, in order, with the right data, and every atomic must execute
//! exactly once (IBTA 1.7 §9.7.4.1.4: duplicate atomics are replayed from the
//! responder resource, never re-executed).
//!
//! Two families of runs:
//! - `soak_mixed_ops_*`: one QP pair, one direction, small messages, many
//!   seeds (`ROCE_SOAK_SCALE=<k>` multiplies the seeds, `ROCE_SOAK_SEED=<n>`
//!   reruns one, `ROCE_SOAK_TRACE=1` dumps a failing run's frames).
//! - The long soak ([`BigSoak`]): 100,000 messages of SEND, SEND_WITH_IMM,
//!   WRITE, WRITE_WITH_IMM, READ, CMP_SWAP and FETCH_ADD, 0 B to 1 MiB (skewed
//!   small, exactly 1 MiB in 0.3 %), one in eight unsignaled, on 4
//!   connections (8 QPs, both directions, path MTUs 4096/1024/2048/256), PSNs
//!   starting just below 2^24, on a clean wire and at 1 % and 5 % loss with
//!   reordering, duplication and corruption (and once with RNR NAKs). Every
//!   destination byte is checked (with a guard after it), every signaled WR
//!   completes exactly once and in order, every atomic cell ends as the
//!   model says, no QP ends in ERR, and the test thread's live heap,
//!   sampled with all traffic drained at 10 checkpoints, may not grow after
//!   the first by more than 64 KiB (a counting `#[global_allocator]`). The
//!   100k runs are `#[ignore]`: `cargo test --release -p roce-stack --test
//!   soak -- --ignored` (or `scripts/soak.sh`), under a minute on 2 cores;
//!   `ROCE_SOAK_MESSAGES=<n>` and `ROCE_SOAK_BIG_SEED=<n>` change the count
//!   and the seed. `soak_all_ops_quick` runs the same engine small in the
//!   default debug `cargo test`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::VecDeque;
use std::time::Duration;

use common::*;
use roce_stack::testing::{connect, test_config, ConnOpts, Faults, Pair, Rng, WireStats};
use roce_stack::verbs::{
    Device, DeviceConfig, MrKeys, Mtu, QpCap, QpState, RecvWr, SendFlags, SendWr, Sge, Wc, WcFlags,
    WcOpcode, WcStatus, WrOpcode,
};

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
                    k.bth().opcode.0,
                    k.bth().psn,
                    k.payload().len(),
                    k.ext().aeth().map(|a| a.syndrome),
                    k.ext().reth().map(|r| (r.va, r.dma_len))
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
    // Loss, duplication and reordering never make a correct responder's
    // MSN look backwards or skipped (it only grows, one per message).
    let c0 = p.dev[0].counters();
    assert_eq!(
        (c0.resp_msn_backwards, c0.resp_msn_skipped),
        (0, 0),
        "seed {seed}: MSN anomalies"
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

// ---------------------------------------------------------------------------
// The soak: 100,000+ messages of every RC operation, 0 B to 1 MiB,
// several QPs in both directions, PSNs starting just below 2^24, 0 / 1 / 5 %
// loss with reordering and duplication, every destination byte verified, and
// the live heap measured flat by a counting global allocator.

/// Counts the heap bytes live on each thread (allocations minus frees), and
/// the peak. Thread-local, so tests running in parallel in this binary do not
/// disturb each other's figures (the engine is single-threaded: everything a
/// test allocates is freed on its own thread).
struct CountingAlloc;

thread_local! {
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn track(delta: i64) {
    let _ = LIVE.try_with(|l| {
        let v = l.get() + delta;
        l.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v)
            }
        });
    });
}

/// Heap bytes live on this thread.
fn live_bytes() -> i64 {
    LIVE.try_with(|l| l.get()).unwrap_or(0)
}

/// Highest value `live_bytes` has had on this thread since `reset_peak`.
fn peak_bytes() -> i64 {
    PEAK.try_with(|p| p.get()).unwrap_or(0)
}

fn reset_peak() {
    let v = live_bytes();
    let _ = PEAK.try_with(|p| p.set(v));
}

// Safety: every method forwards to `System` with the caller's arguments and
// returns its result unchanged, so `System`'s guarantees carry over. The
// bookkeeping touches only const-initialised thread-local `Cell<i64>`s, which
// have no destructor and never allocate, so it cannot re-enter the allocator.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Safety: forwarded as is (see above).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            track(layout.size() as i64);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // Safety: forwarded as is (see above).
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            track(layout.size() as i64);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Safety: forwarded as is (see above).
        unsafe { System.dealloc(ptr, layout) };
        track(-(layout.size() as i64));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Safety: forwarded as is (see above).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            track(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// 1 MiB: the largest message.
const MIB: u32 = 1 << 20;
/// Bytes of guard after every destination range: they must still hold
/// `FILL` after each operation (nothing is written past a message).
const GUARD: usize = 64;
/// What every destination slot holds when an operation is posted to it.
const FILL: u8 = 0xA5;
/// Atomic cells per requester.
const CELLS: usize = 16;

/// Message sizes, bytes: skewed small so a 100,000-message run stays bounded,
/// with a tail up to and including exactly 1 MiB.
#[derive(Debug, Clone, Copy)]
enum Sizes {
    /// 40 % 0..=64, 30 % 65..=4 KiB, 20 % ..=64 KiB, 8.5 % ..=256 KiB,
    /// 1.2 % ..=1 MiB, 0.3 % exactly 1 MiB (mean about 25 KiB).
    Full,
    /// For the quick debug run: the same shape with the tail cut at 64 KiB,
    /// plus exactly 1 MiB once in 100 messages.
    Quick,
}

impl Sizes {
    fn draw(self, rng: &mut Rng) -> u32 {
        let r = rng.below(1000);
        let span = |rng: &mut Rng, lo: u32, hi: u32| lo + rng.below((hi - lo + 1) as u64) as u32;
        match self {
            Sizes::Full => match r {
                0..=399 => span(rng, 0, 64),
                400..=699 => span(rng, 65, 4096),
                700..=899 => span(rng, 4097, 64 << 10),
                900..=984 => span(rng, (64 << 10) + 1, 256 << 10),
                985..=996 => span(rng, (256 << 10) + 1, MIB),
                _ => MIB,
            },
            Sizes::Quick => match r {
                0..=449 => span(rng, 0, 64),
                450..=799 => span(rng, 65, 4096),
                800..=989 => span(rng, 4097, 64 << 10),
                _ => MIB,
            },
        }
    }
}

/// One soak run.
#[derive(Debug, Clone)]
struct BigSoak {
    name: &'static str,
    seed: u64,
    faults: Faults,
    /// Connections (each a QP on both devices; both sides send).
    conns: usize,
    /// Messages to post in total (a few more may be added to flush
    /// unsignaled tails before a checkpoint).
    messages: u64,
    sizes: Sizes,
    /// Outstanding WQEs per requester.
    window: usize,
    /// Receive WQEs kept posted at the peer for each requester (at most
    /// `window`; fewer makes the responder send RNR NAKs).
    recv_wqes: usize,
    /// Memory checkpoints (all traffic drained, then the live heap sampled);
    /// the first is the warm-up baseline.
    checkpoints: u64,
    /// Largest growth of the live heap allowed after the baseline, bytes.
    mem_bound: i64,
}

/// What one run did.
#[derive(Debug, Default, Clone)]
struct SoakFigures {
    messages: u64,
    by_op: [u64; 7],
    bytes: u64,
    one_mib: u64,
    virtual_ns: u64,
    wall: Duration,
    wire: WireStats,
    /// Counters summed over both devices.
    counters: Vec<(&'static str, u64)>,
    /// Data packets a loss-free run needs (requests + READ responses).
    min_data_pkts: u64,
    baseline_live: i64,
    checkpoint_live: Vec<i64>,
    peak_live: i64,
}

/// A posted operation not yet known to be complete.
#[derive(Debug, Clone, Copy)]
struct Op {
    seq: u64,
    op: WrOpcode,
    len: u32,
    signaled: bool,
    /// Source offset in the requester's (SEND/WRITE) or responder's (READ)
    /// pattern.
    src_off: usize,
    /// Destination slot (WRITE target, READ/atomic landing).
    slot: usize,
    expect_orig: u64,
}

/// A receive completion the responder side owes, in posting order.
#[derive(Debug, Clone, Copy)]
struct RecvDue {
    seq: u64,
    op: WrOpcode,
    len: u32,
    src_off: usize,
    imm: u32,
}

/// One direction of one connection: the QP on `side` sending to its peer.
struct Actor {
    side: usize,
    qpn: u32,
    peer_qpn: u32,
    /// CQ of `side` for this connection (send completions land here).
    cq: u32,
    /// CQ of the peer (our receive completions land there).
    peer_cq: u32,
    pmtu: u32,
    /// Requester-side MR: pattern `src` at 0, landing slots at `land`.
    local: MrKeys,
    /// Responder-side MR: write slots at 0, receive slots at `recv`, READ
    /// pattern at `rsrc`, atomic cells at `cells`.
    remote: MrKeys,
    src: Vec<u8>,
    rsrc: Vec<u8>,
    model: [u64; CELLS],
    next_seq: u64,
    outstanding: VecDeque<Op>,
    recv_due: VecDeque<RecvDue>,
    /// Receive WQEs posted so far (wr_id sequence) and completed so far.
    recv_posted: u64,
    recv_done: u64,
}

/// Frames the wire's queue is grown to hold before the run (see `Run::new`).
const WIRE_RESERVE: usize = 32 << 10;

/// Slot size: a 1 MiB message plus its guard.
const SLOT: usize = MIB as usize + GUARD;
/// Pattern length: 1 MiB plus the largest random start offset.
const PAT: usize = MIB as usize + (64 << 10);

impl Actor {
    fn land(&self, slot: usize) -> u64 {
        (PAT + slot * SLOT) as u64
    }
    fn wtgt(&self, slot: usize) -> u64 {
        (slot * SLOT) as u64
    }
    fn recv_slot(&self, window: usize, k: usize) -> u64 {
        ((window + k) * SLOT) as u64
    }
    fn rsrc_at(&self, window: usize) -> u64 {
        (2 * window * SLOT) as u64
    }
    fn cells_at(&self, window: usize) -> u64 {
        (2 * window * SLOT + PAT) as u64
    }
}

/// A completion slot for `poll_cq` to overwrite.
fn empty_wc() -> Wc {
    Wc::EMPTY
}

const SEND_TAG: u64 = 0;
const RECV_TAG: u64 = 1 << 63;

fn wr_id(tag: u64, actor: usize, seq: u64) -> u64 {
    tag | (actor as u64) << 48 | seq
}

fn ops_table() -> [WrOpcode; 7] {
    [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
    ]
}

fn npkts(len: u32, pmtu: u32) -> u64 {
    len.div_ceil(pmtu).max(1) as u64
}

/// Check `mem[at..at+len] == want` and the guard after it, then refill the
/// range with `FILL` for the slot's next use.
fn verify_and_refill(ctx: &dyn Fn() -> String, mem: &mut [u8], at: usize, want: &[u8]) {
    let len = want.len();
    if mem[at..at + len] != *want {
        let i = (0..len).find(|i| mem[at + i] != want[*i]).unwrap_or(0);
        panic!("{}: byte {i} of {len} differs", ctx());
    }
    if let Some(i) = mem[at + len..at + len + GUARD]
        .iter()
        .position(|b| *b != FILL)
    {
        panic!("{}: written past the end (guard byte {i})", ctx());
    }
    mem[at..at + len].fill(FILL);
}

struct Run {
    cfg: BigSoak,
    p: Pair,
    actors: Vec<Actor>,
    rng: Rng,
    fig: SoakFigures,
    posted: u64,
    wcs: Vec<Wc>,
}

impl Run {
    fn new(cfg: BigSoak) -> Run {
        let dev = |i: u8| {
            Device::new(DeviceConfig {
                // rxe's window (RXE_MAX_UNACKED_PSNS): bounds the go-back-N
                // cost of a loss at 5 %.
                max_unacked_psns: 128,
                ..test_config(i, 9000)
            })
        };
        let mut p = Pair::with_devices([dev(0), dev(1)], cfg.faults, cfg.seed);
        let mtus = [Mtu::Mtu4096, Mtu::Mtu1024, Mtu::Mtu2048, Mtu::Mtu256];
        let mut actors = Vec::new();
        for c in 0..cfg.conns {
            // PSNs start just below 2^24 and wrap within the first messages.
            let opts = ConnOpts {
                mtu: mtus[c % mtus.len()],
                timeout: 8,
                rd_atomic: 16,
                sq_psn: [0xFF_FFFF - c as u32 * 3, 0xFF_FFF0 + c as u32],
                cap: QpCap {
                    max_send_wr: 2 * cfg.window as u32 + 8,
                    max_recv_wr: cfg.window as u32 + 8,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                cqe: 8 * cfg.window + 64,
                ..ConnOpts::default()
            };
            let conn = connect(&mut p, &opts);
            for side in 0..2 {
                let peer = 1 - side;
                let seed = (cfg.seed as u8) ^ (c as u8 * 16 + side as u8 * 7);
                let src = pattern(PAT, seed);
                let rsrc = pattern(PAT, seed.wrapping_add(101));
                // Local: pattern + `window` landing slots.
                let mut lmem = src.clone();
                lmem.resize(PAT + cfg.window * SLOT, FILL);
                let local = p.dev[side]
                    .reg_mr(conn.pd[side], lmem, 0, all_access())
                    .unwrap();
                // Remote: write slots, receive slots, READ pattern, cells.
                let mut rmem = vec![FILL; 2 * cfg.window * SLOT];
                rmem.extend_from_slice(&rsrc);
                let mut model = [0u64; CELLS];
                for (k, m) in model.iter_mut().enumerate() {
                    *m = (c as u64) << 40 | (side as u64) << 32 | k as u64;
                    rmem.extend_from_slice(&m.to_ne_bytes());
                }
                let remote = p.dev[peer]
                    .reg_mr(conn.pd[peer], rmem, 0, all_access())
                    .unwrap();
                actors.push(Actor {
                    side,
                    qpn: conn.qpn[side],
                    peer_qpn: conn.qpn[peer],
                    cq: conn.cq[side],
                    peer_cq: conn.cq[peer],
                    pmtu: opts.mtu.bytes() as u32,
                    local,
                    remote,
                    src,
                    rsrc,
                    model,
                    next_seq: 0,
                    outstanding: VecDeque::with_capacity(2 * cfg.window + 8),
                    recv_due: VecDeque::with_capacity(2 * cfg.window + 8),
                    recv_posted: 0,
                    recv_done: 0,
                });
            }
        }
        let rng = Rng::new(cfg.seed ^ 0x50AC_0000);
        let mut run = Run {
            p,
            actors,
            rng,
            fig: SoakFigures::default(),
            posted: 0,
            wcs: vec![empty_wc(); 64],
            cfg,
        };
        assert!(run.cfg.recv_wqes >= 1 && run.cfg.recv_wqes <= run.cfg.window);
        // The wire's queue (a heap of frames in flight, a harness structure)
        // keeps the capacity of its largest burst; grow it once here so its
        // doublings (48 B per entry) are not mistaken for the stack's
        // memory. The frames are not RoCE (EtherType 0x88B5, IEEE local
        // experimental): the devices drop them on the EtherType.
        let mut junk = [0u8; 60];
        junk[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
        junk[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
        junk[12..14].copy_from_slice(&0x88B5u16.to_be_bytes());
        let saved = run.p.faults;
        run.p.faults = Faults::default();
        for _ in 0..WIRE_RESERVE {
            run.p.inject(0, &junk);
        }
        run.p.faults = saved;
        run.p
            .run_until(Duration::from_secs(1), |p| p.in_flight() == 0);
        run.p.stats = WireStats::default();
        for a in 0..run.actors.len() {
            for _ in 0..run.cfg.recv_wqes {
                run.post_recv(a);
            }
        }
        run
    }

    fn post_recv(&mut self, a: usize) {
        let w = self.cfg.window;
        let act = &mut self.actors[a];
        // Completions come in posting order and each frees the slot the
        // next post takes.
        let k = (act.recv_posted % self.cfg.recv_wqes as u64) as usize;
        let sge = [Sge {
            addr: act.recv_slot(w, k),
            length: SLOT as u32,
            lkey: act.remote.lkey,
        }];
        let wr = RecvWr {
            wr_id: wr_id(RECV_TAG, a, act.recv_posted),
            sg_list: &sge,
        };
        self.p.dev[1 - act.side]
            .post_recv(act.peer_qpn, &wr)
            .unwrap();
        act.recv_posted += 1;
    }

    /// Post one random operation on actor `a`; `force_signaled` for the
    /// last one before a drain.
    fn post_op(&mut self, a: usize, force_signaled: bool) {
        let w = self.cfg.window;
        let rng = &mut self.rng;
        let op = ops_table()[rng.below(7) as usize];
        let mut len = if op.is_atomic() {
            8
        } else {
            self.cfg.sizes.draw(rng)
        };
        if op == WrOpcode::SendWithImm || op == WrOpcode::Send {
            len = len.min(SLOT as u32 - GUARD as u32);
        }
        // One in eight unsignaled; never the one that fills the window (so a
        // full window always ends in a completion that retires it).
        let full = self.actors[a].outstanding.len() + 1 >= w;
        let signaled = force_signaled || full || rng.below(8) != 0;
        let src_off = rng.below(64 << 10) as usize;
        let imm = rng.next_u64() as u32;
        let cell = rng.below(CELLS as u64) as usize;
        let swap_or_add = rng.next_u64();
        let cmp_hit = rng.chance(0.5);
        let act = &mut self.actors[a];
        let seq = act.next_seq;
        let slot = (seq % w as u64) as usize;
        let mut o = Op {
            seq,
            op,
            len,
            signaled,
            src_off,
            slot,
            expect_orig: 0,
        };
        let lsge = |addr: u64| Sge {
            addr,
            length: len,
            lkey: act.local.lkey,
        };
        let sge = [match op {
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                lsge(act.land(slot))
            }
            _ => lsge(src_off as u64),
        }];
        let list: &[Sge] = if len == 0 { &[] } else { &sge };
        let mut wr = SendWr::new(wr_id(SEND_TAG, a, seq), op, list);
        if !signaled {
            wr.send_flags = SendFlags::empty();
        }
        wr.imm_data = imm;
        wr.rkey = act.remote.rkey;
        match op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                wr.remote_addr = act.wtgt(slot);
            }
            WrOpcode::RdmaRead => wr.remote_addr = act.rsrc_at(w) + src_off as u64,
            WrOpcode::AtomicCmpAndSwp => {
                wr.remote_addr = act.cells_at(w) + 8 * cell as u64;
                let cur = act.model[cell];
                wr.compare_add = if cmp_hit { cur } else { cur ^ 1 << 17 };
                wr.swap = swap_or_add;
                o.expect_orig = cur;
                if wr.compare_add == cur {
                    act.model[cell] = swap_or_add;
                }
            }
            WrOpcode::AtomicFetchAndAdd => {
                wr.remote_addr = act.cells_at(w) + 8 * cell as u64;
                wr.compare_add = swap_or_add;
                o.expect_orig = act.model[cell];
                act.model[cell] = act.model[cell].wrapping_add(swap_or_add);
            }
            _ => {}
        }
        if matches!(
            op,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
        ) {
            act.recv_due.push_back(RecvDue {
                seq,
                op,
                len,
                src_off,
                imm,
            });
        }
        let (side, qpn, pmtu) = (act.side, act.qpn, act.pmtu);
        act.outstanding.push_back(o);
        act.next_seq += 1;
        self.p.dev[side].post_send(qpn, &wr).unwrap();
        let f = &mut self.fig;
        f.messages += 1;
        f.by_op[ops_table().iter().position(|x| *x == op).unwrap_or(0)] += 1;
        f.bytes += len as u64;
        f.one_mib += u64::from(len == MIB);
        f.min_data_pkts += match op {
            WrOpcode::RdmaRead => 1 + npkts(len, pmtu),
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 2,
            _ => npkts(len, pmtu),
        };
        self.posted += 1;
    }

    fn ctx(&self) -> String {
        let c0 = self.p.dev[0].counters();
        let c1 = self.p.dev[1].counters();
        format!(
            "{} seed {}: after {} messages, t = {:?}: dev0 {c0:?} dev1 {c1:?} wire {:?}",
            self.cfg.name, self.cfg.seed, self.fig.messages, self.p.now, self.p.stats
        )
    }

    /// A send completion of actor `a`: everything before it (unsignaled) is
    /// complete too; verify each.
    fn on_send_wc(&mut self, a: usize, wc: Wc) {
        let seq = wc.wr_id & ((1 << 48) - 1);
        if wc.status != WcStatus::Success {
            panic!("actor {a} WR {seq}: {:?}: {}", wc.status, self.ctx());
        }
        loop {
            let Some(o) = self.actors[a].outstanding.pop_front() else {
                panic!(
                    "actor {a}: completion {seq} with nothing outstanding (twice?): {}",
                    self.ctx()
                );
            };
            if o.seq < seq {
                assert!(
                    !o.signaled,
                    "actor {a}: signaled WR {} skipped by completion {seq}: {}",
                    o.seq,
                    self.ctx()
                );
            } else {
                assert_eq!(
                    o.seq,
                    seq,
                    "actor {a}: completion out of order: {}",
                    self.ctx()
                );
                assert!(o.signaled, "actor {a}: unsignaled WR {seq} completed");
                assert_eq!(wc.opcode, o.op.wc_opcode(), "actor {a} WR {seq}");
                assert_eq!(wc.qp_num, self.actors[a].qpn, "actor {a} WR {seq}");
            }
            self.verify_op(a, o);
            if o.seq == seq {
                return;
            }
        }
    }

    /// The destination of a completed operation.
    fn verify_op(&mut self, a: usize, o: Op) {
        let name = self.cfg.name;
        let seed = self.cfg.seed;
        let ctx = move || {
            format!(
                "{name} seed {seed}: actor {a} WR {} {:?} len {}",
                o.seq, o.op, o.len
            )
        };
        let act = &self.actors[a];
        let (side, len) = (act.side, o.len as usize);
        match o.op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => {
                let want = &act.src[o.src_off..o.src_off + len];
                let at = act.wtgt(o.slot) as usize;
                let mem = self.p.dev[1 - side]
                    .mr_mut(act.remote.lkey)
                    .unwrap()
                    .as_mut_slice();
                verify_and_refill(&ctx, mem, at, want);
            }
            WrOpcode::RdmaRead => {
                let want = &act.rsrc[o.src_off..o.src_off + len];
                let at = act.land(o.slot) as usize;
                let mem = self.p.dev[side]
                    .mr_mut(act.local.lkey)
                    .unwrap()
                    .as_mut_slice();
                verify_and_refill(&ctx, mem, at, want);
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let want = o.expect_orig.to_ne_bytes();
                let at = act.land(o.slot) as usize;
                let mem = self.p.dev[side]
                    .mr_mut(act.local.lkey)
                    .unwrap()
                    .as_mut_slice();
                verify_and_refill(&ctx, mem, at, &want);
            }
            // SEND data is checked at the receive completion.
            _ => {}
        }
    }

    /// A receive completion on actor `a`'s responder side.
    fn on_recv_wc(&mut self, a: usize, wc: Wc) {
        let w = self.cfg.window;
        let rseq = wc.wr_id & ((1 << 48) - 1);
        let act = &mut self.actors[a];
        assert_eq!(
            rseq, act.recv_done,
            "actor {a}: receive completions out of order"
        );
        act.recv_done += 1;
        let Some(d) = act.recv_due.pop_front() else {
            panic!("actor {a}: receive completion {rseq} for no message");
        };
        let name = self.cfg.name;
        let seed = self.cfg.seed;
        let ctx = move || {
            format!(
                "{name} seed {seed}: actor {a} receive for WR {} {:?} len {}",
                d.seq, d.op, d.len
            )
        };
        assert_eq!(wc.status, WcStatus::Success, "{}", ctx());
        assert_eq!(wc.byte_len, d.len, "{}", ctx());
        let with_imm = d.op != WrOpcode::Send;
        assert_eq!(
            wc.wc_flags.contains(WcFlags::WITH_IMM),
            with_imm,
            "{}",
            ctx()
        );
        if with_imm {
            assert_eq!(wc.imm_data, d.imm, "{}", ctx());
        }
        let want_op = if d.op == WrOpcode::RdmaWriteWithImm {
            WcOpcode::RecvRdmaWithImm
        } else {
            WcOpcode::Recv
        };
        assert_eq!(wc.opcode, want_op, "{}", ctx());
        assert_eq!(wc.qp_num, act.peer_qpn, "{}", ctx());
        if d.op != WrOpcode::RdmaWriteWithImm {
            let k = (rseq % self.cfg.recv_wqes as u64) as usize;
            let at = act.recv_slot(w, k) as usize;
            let want = &act.src[d.src_off..d.src_off + d.len as usize];
            let mem = self.p.dev[1 - act.side]
                .mr_mut(act.remote.lkey)
                .unwrap()
                .as_mut_slice();
            verify_and_refill(&ctx, mem, at, want);
        }
        self.post_recv(a);
    }

    /// Take and check every completion waiting.
    fn poll(&mut self) {
        for a in 0..self.actors.len() {
            for cq_of in [true, false] {
                loop {
                    let (side, cq) = {
                        let act = &self.actors[a];
                        if cq_of {
                            (act.side, act.cq)
                        } else {
                            (1 - act.side, act.peer_cq)
                        }
                    };
                    let mut buf = std::mem::take(&mut self.wcs);
                    let n = self.p.dev[side].poll_cq(cq, &mut buf);
                    for wc in &buf[..n] {
                        let actor = ((wc.wr_id >> 48) & 0x7FFF) as usize;
                        if wc.wr_id & RECV_TAG != 0 {
                            self.on_recv_wc(actor, *wc);
                        } else {
                            self.on_send_wc(actor, *wc);
                        }
                    }
                    self.wcs = buf;
                    if n == 0 {
                        break;
                    }
                }
            }
        }
    }

    fn idle(&self) -> bool {
        self.actors
            .iter()
            .all(|a| a.outstanding.is_empty() && a.recv_due.is_empty())
    }

    fn any_cq(p: &Pair, actors: &[Actor]) -> bool {
        actors.iter().any(|a| {
            p.dev[a.side].cq(a.cq).is_some_and(|c| !c.is_empty())
                || p.dev[1 - a.side]
                    .cq(a.peer_cq)
                    .is_some_and(|c| !c.is_empty())
        })
    }

    /// Wait until a completion arrives.
    fn wait(&mut self) {
        let actors = std::mem::take(&mut self.actors);
        let ok = self
            .p
            .run_until(Duration::from_secs(10), |p| Self::any_cq(p, &actors));
        self.actors = actors;
        if !ok {
            panic!(
                "stuck: no completion for 10 s of virtual time: {}",
                self.ctx()
            );
        }
    }

    /// Finish everything in flight: flush unsignaled tails with a signaled
    /// operation, wait for every completion, then for the wire and the
    /// timers to go quiet.
    fn drain(&mut self) {
        for a in 0..self.actors.len() {
            // (An unsignaled tail means the window is not full: see post_op.)
            if self.actors[a]
                .outstanding
                .back()
                .is_some_and(|o| !o.signaled)
            {
                self.post_op(a, true);
            }
        }
        while !self.idle() {
            self.wait();
            self.poll();
        }
        let ok = self.p.run_until(Duration::from_secs(10), |p| {
            p.in_flight() == 0 && (0..2).all(|s| p.dev[s].poll_timeout().is_none())
        });
        assert!(ok, "not quiet after drain: {}", self.ctx());
        // Let the devices see that they have nothing left to send.
        for _ in 0..8 {
            if !self.p.step() {
                break;
            }
        }
        for s in 0..2 {
            assert_eq!(self.p.dev[s].active_qps(), 0, "{}", self.ctx());
            assert_eq!(self.p.dev[s].poll_timeout(), None, "{}", self.ctx());
        }
        assert_eq!(self.p.in_flight(), 0, "{}", self.ctx());
        self.poll();
        assert!(self.idle(), "{}", self.ctx());
    }

    fn run(mut self) -> SoakFigures {
        let wall = std::time::Instant::now();
        self.fig
            .checkpoint_live
            .reserve(self.cfg.checkpoints as usize + 2);
        reset_peak();
        let every = (self.cfg.messages / self.cfg.checkpoints).max(1);
        let mut next_cp = every;
        let mut n_cp = 0;
        loop {
            self.poll();
            if self.posted >= next_cp || self.posted >= self.cfg.messages {
                self.drain();
                let live = live_bytes();
                if n_cp == 0 {
                    self.fig.baseline_live = live;
                } else {
                    self.fig.checkpoint_live.push(live);
                }
                n_cp += 1;
                next_cp += every;
                if self.posted >= self.cfg.messages {
                    break;
                }
            }
            let mut posted_any = false;
            for a in 0..self.actors.len() {
                while self.actors[a].outstanding.len() < self.cfg.window
                    && self.posted < next_cp.min(self.cfg.messages)
                {
                    self.post_op(a, false);
                    posted_any = true;
                }
            }
            if !posted_any && !self.idle() {
                self.wait();
            }
        }
        // The end state: every QP in RTS, nothing left anywhere, atomic
        // cells as the model says (each atomic executed exactly once).
        for a in &self.actors {
            for (side, qpn) in [(a.side, a.qpn), (1 - a.side, a.peer_qpn)] {
                let st = self.p.dev[side].qp(qpn).unwrap().state();
                assert_eq!(
                    st,
                    QpState::Rts,
                    "{}: QP {qpn:#x} on side {side}",
                    self.cfg.name
                );
            }
            let mem = self.p.dev[1 - a.side].mr(a.remote.lkey).unwrap().as_slice();
            let at = a.cells_at(self.cfg.window) as usize;
            for k in 0..CELLS {
                let v = u64::from_ne_bytes(mem[at + 8 * k..at + 8 * k + 8].try_into().unwrap());
                assert_eq!(v, a.model[k], "{}: atomic cell {k}", self.cfg.name);
            }
            for c in [a.cq, a.peer_cq] {
                for s in 0..2 {
                    if let Some(cq) = self.p.dev[s].cq(c) {
                        assert!(!cq.is_overrun(), "{}: CQ overrun", self.cfg.name);
                    }
                }
            }
        }
        for s in 0..2 {
            let c = self.p.dev[s].counters();
            assert_eq!(c.cq_overrun, 0, "{}", self.cfg.name);
            assert_eq!(
                (c.resp_msn_backwards, c.resp_msn_skipped),
                (0, 0),
                "{}: MSN anomalies",
                self.cfg.name
            );
        }
        self.fig.wall = wall.elapsed();
        self.fig.virtual_ns = self.p.now.as_nanos();
        self.fig.wire = self.p.stats;
        self.fig.peak_live = peak_bytes();
        let c0 = self.p.dev[0].counters().clone();
        let c1 = self.p.dev[1].counters().clone();
        self.fig.counters = c0
            .iter()
            .zip(c1.iter())
            .map(|((n, x), (_, y))| (n, x + y))
            .filter(|(_, v)| *v > 0)
            .collect();
        self.fig
    }
}

/// Run one configuration and print its figures (one line, to quote).
fn big_soak(cfg: BigSoak) -> SoakFigures {
    let name = cfg.name;
    let bound = cfg.mem_bound;
    let fig = Run::new(cfg.clone()).run();
    let growth = fig
        .checkpoint_live
        .iter()
        .map(|v| v - fig.baseline_live)
        .max()
        .unwrap_or(0);
    let get = |n: &str| {
        fig.counters
            .iter()
            .find(|(k, _)| *k == n)
            .map_or(0, |(_, v)| *v)
    };
    eprintln!(
        "soak {name}: seed {} conns {} ({} QPs) messages {} (SEND {} SEND_IMM {} WRITE {} \
         WRITE_IMM {} READ {} CMP_SWAP {} FETCH_ADD {}), {} bytes ({:.1} MiB, {} messages of \
         exactly 1 MiB), virtual time {:.3} s, wall {:.1} s; packets sent {} (loss-free minimum \
         {} data packets + ACKs); wire lost {} duplicated {} reordered {} corrupted {}; \
         local_ack_timeout_err {} packet_seq_err {} seq_nak_sent {} implied_nak_seq_err {} \
         duplicate_request {} resp_duplicate {} resp_unexpected {} rnr(sent {} rcvd {}); live heap: baseline {} B, \
         checkpoints {:?} B, max growth {} B (bound {} B), peak {} B",
        cfg.seed,
        cfg.conns,
        2 * cfg.conns,
        fig.messages,
        fig.by_op[0],
        fig.by_op[1],
        fig.by_op[2],
        fig.by_op[3],
        fig.by_op[4],
        fig.by_op[5],
        fig.by_op[6],
        fig.bytes,
        fig.bytes as f64 / f64::from(MIB),
        fig.one_mib,
        fig.virtual_ns as f64 / 1e9,
        fig.wall.as_secs_f64(),
        get("sent_pkts"),
        fig.min_data_pkts,
        fig.wire.lost,
        fig.wire.duplicated,
        fig.wire.reordered,
        fig.wire.corrupted,
        get("local_ack_timeout_err"),
        get("packet_seq_err"),
        get("seq_nak_sent"),
        get("implied_nak_seq_err"),
        get("duplicate_request"),
        get("resp_duplicate"),
        get("resp_unexpected"),
        get("send_rnr_err"),
        get("rcvd_rnr_err"),
        fig.baseline_live,
        fig.checkpoint_live,
        growth,
        bound,
        fig.peak_live
    );
    assert!(fig.messages >= cfg.messages, "{name}: messages");
    assert!(fig.one_mib > 0, "{name}: no 1 MiB message drawn");
    assert!(
        growth <= bound,
        "{name}: live heap grew by {growth} B after warm-up (bound {bound} B): {:?}",
        fig.checkpoint_live
    );
    fig
}

/// `ROCE_SOAK_BIG_SEED=<n>` replaces the seed of the full runs (to explore
/// or reproduce).
fn full_seed(default: u64) -> u64 {
    std::env::var("ROCE_SOAK_BIG_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `ROCE_SOAK_MESSAGES=<n>` overrides the message count of the full runs.
fn full_messages() -> u64 {
    std::env::var("ROCE_SOAK_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn full(name: &'static str, seed: u64, faults: Faults) -> BigSoak {
    BigSoak {
        name,
        seed: full_seed(seed),
        faults,
        conns: 4,
        messages: full_messages(),
        sizes: Sizes::Full,
        window: 8,
        recv_wqes: 8,
        checkpoints: 10,
        mem_bound: 64 << 10,
    }
}

/// Loss `p` with duplication and reordering (`p`/2 each, up to 20 µs late)
/// and a few corrupted frames (`p`/5), which the ICRC check drops.
fn lossy(p: f64) -> Faults {
    Faults {
        corrupt: p / 5.0,
        ..Faults::lossy(p)
    }
}

/// The quick variant of the full soak for the default debug `cargo test`:
/// every operation, sizes to 64 KiB plus a few of 1 MiB, two connections,
/// each loss level.
#[test]
fn soak_all_ops_quick() {
    for (name, loss) in [
        ("quick-0%", 0.0),
        ("quick-1%", 0.01),
        ("quick-5%", 0.05),
        ("quick-rnr-1%", 0.01),
    ] {
        big_soak(BigSoak {
            name,
            seed: 11,
            faults: if loss > 0.0 {
                lossy(loss)
            } else {
                Faults::default()
            },
            conns: 2,
            messages: 1000,
            sizes: Sizes::Quick,
            window: 8,
            recv_wqes: if name == "quick-rnr-1%" { 2 } else { 8 },
            checkpoints: 4,
            mem_bound: 64 << 10,
        });
    }
}

/// 100,000 messages on a clean wire (release mode:
/// `cargo test --release -p roce-stack --test soak -- --ignored`).
#[test]
#[ignore = "long: run in release mode with --ignored"]
fn soak_100k_clean_wire() {
    big_soak(full("100k-0%", 1, Faults::default()));
}

/// 100,000 messages at 1 % loss with reordering, duplication, corruption.
#[test]
#[ignore = "long: run in release mode with --ignored"]
fn soak_100k_loss_1pct() {
    big_soak(full("100k-1%", 2, lossy(0.01)));
}

/// 100,000 messages at 1 % loss, with only 2 receive WQEs posted per
/// requester (window 8): the responders send RNR NAKs all along (rnr_retry 7
/// = infinite, min_rnr_timer 1 = 0.01 ms), and nothing may be lost or doubled.
#[test]
#[ignore = "long: run in release mode with --ignored"]
fn soak_100k_rnr_loss_1pct() {
    big_soak(BigSoak {
        recv_wqes: 2,
        ..full("100k-rnr-1%", 4, lossy(0.01))
    });
}

/// 100,000 messages at 5 % loss with reordering, duplication, corruption.
#[test]
#[ignore = "long: run in release mode with --ignored"]
fn soak_100k_loss_5pct() {
    big_soak(full("100k-5%", 3, lossy(0.05)));
}
