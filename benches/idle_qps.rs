//! The cost of idle RC QPs: a device's poll round and one small WRITE with 1
//! QP versus 10,000 QPs in RTS.
//!
//! # Set-up
//!
//! Two [`Device`]s (10.0.0.1 and 10.0.0.2, Ethernet MTU 9000, path MTU 4096),
//! driven by hand from one thread with a virtual clock (no wire, no threads:
//! frames go from one device's `poll_transmit` buffer straight into the
//! other's `handle_frame`). Each side has one PD, one CQ and `n` RC QPs
//! (n = 1 or 10,000), connected pairwise (RESET → INIT → RTR → RTS, IBTA 1.7
//! §10.3.1; ACK timeout code 14). Every QP then carries one 64-byte RDMA WRITE
//! that is acknowledged and completed, and both devices are drained (every
//! frame delivered, every completion polled) until neither has anything to
//! send. So the idle QPs have been used: their PSNs moved, their ACK timers
//! were armed and cancelled. The set-up prints (not timed, not asserted) the
//! active-list length and `poll_timeout()` of the client device afterwards;
//! both should be 0 / `None`.
//!
//! # Benches
//!
//! - `idle_qps_round/{1qp,10000qp}`: one poll round of the idle client
//!   device: `poll_transmit` (returns `None`), `poll_timeout`,
//!   `handle_timeout` at the current time. Timed as the best of blocks of
//!   256 rounds ([`best_of_blocks`]): a round takes ~10 ns, and the mean of
//!   such short calls moves by ±30% between runs on the shared machine.
//! - `idle_qps_write64/{1qp,10000qp}`: one 64-byte RDMA WRITE (signaled)
//!   through both devices on QP index `n / 2`: `post_send`, client
//!   `poll_transmit` until `None` (the WRITE_ONLY frame), server
//!   `handle_frame` and `poll_transmit` until `None` (the ACK), client
//!   `handle_frame` and `poll_cq` (one completion), and a timer check
//!   (`poll_timeout`) on each side. The clock moves 1 µs per iteration. This
//!   is the whole single-threaded per-message cost of the stack at 64 B (both
//!   sides, two frames, four ICRC computations).
//!
//! Criterion times the 1-QP and the 10,000-QP bench seconds apart, so load
//! from other processes moves their ratio by ±10-30% here. After the
//! criterion groups the bench therefore also measures both **paired**
//! ([`paired`]): timed blocks alternate between the two set-ups, and the
//! median of the per-pair ratios is printed and written to
//! `target/criterion/idle_qps_paired.json`.
//!
//! The ratio reported is `time(1 QP) / time(10,000 QPs)`; the transport
//! issue's target is at least 0.9 for the idle round (idle QPs cost nothing
//! per poll), and the WRITE ratio is reported alongside.
//! `scripts/bench-ratios.sh` prints both, from criterion's medians
//! (`target/criterion/<group>/<bench>/new/estimates.json`) and from the
//! paired file.
//!
//! Run: `cargo bench --bench idle_qps` (about 30 s plus 10 s of set-up).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use roce_stack::testing::{av_to, modify_to_rts, test_device, ConnOpts};
use roce_stack::time::Instant;
use roce_stack::verbs::{
    AccessFlags, Device, MrKeys, Mtu, QpCap, QpInitAttr, QpType, SendWr, Sge, Wc, WcStatus,
    WrOpcode,
};

/// Idle QPs in the large case.
const MANY: usize = 10_000;
/// Message size of the WRITEs, bytes.
const MSG: u32 = 64;
/// I/O virtual address of each side's MR.
const BASE: u64 = 0x1000_0000;
/// Largest frame: PMTU 4096 + headers, with room to spare.
const FRAME_CAP: usize = 4096 + 256;

/// Two connected devices with `n` RC QP pairs.
struct Setup {
    dev: [Device; 2],
    cq: [u32; 2],
    qpn: Vec<[u32; 2]>,
    mr: [MrKeys; 2],
    now: Instant,
    buf: Vec<u8>,
    wcs: Vec<Wc>,
    /// WRITEs posted, for wr_id.
    posted: u64,
}

/// Test side `i` (10.0.0.(i+1)) on a 9000-byte Ethernet.
fn device(i: u8) -> Device {
    test_device(i, 9000)
}

fn blank_wc() -> Wc {
    Wc::EMPTY
}

/// Bring QP pair `qpn` to RTS, each addressed to the other (IBTA 1.7
/// §10.3.1; [`modify_to_rts`] with path MTU 4096 and no remote atomics).
fn connect(dev: &mut [Device; 2], qpn: [u32; 2], psn: [u32; 2]) {
    let o = ConnOpts {
        mtu: Mtu::Mtu4096,
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..ConnOpts::default()
    };
    for s in 0..2 {
        let peer = 1 - s;
        let av = av_to(&dev[peer]).expect("GID 0");
        modify_to_rts(&mut dev[s], qpn[s], av, qpn[peer], psn[s], psn[peer], &o).expect("RTS");
    }
}

impl Setup {
    fn new(n: usize) -> Setup {
        let mut dev = [device(0), device(1)];
        let pd = [dev[0].alloc_pd(), dev[1].alloc_pd()];
        let cqe = n + 1024;
        let cq = [dev[0].create_cq(cqe), dev[1].create_cq(cqe)];
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = [0, 1].map(|s| {
            dev[s]
                .reg_mr(pd[s], vec![s as u8; 4096], BASE, access)
                .expect("reg_mr")
        });
        let init = |s: usize| QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq[s],
            recv_cq: cq[s],
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let mut qpn = Vec::with_capacity(n);
        for i in 0..n {
            let pair = [0, 1].map(|s| dev[s].create_qp(pd[s], &init(s)).expect("create_qp"));
            let psn = [
                (i as u32 * 7919) & 0xFF_FFFF,
                (i as u32 * 104_729) & 0xFF_FFFF,
            ];
            connect(&mut dev, pair, psn);
            qpn.push(pair);
        }
        let mut s = Setup {
            dev,
            cq,
            qpn,
            mr,
            now: Instant::from_millis(1),
            buf: vec![0u8; FRAME_CAP],
            wcs: vec![blank_wc(); 256],
            posted: 0,
        };
        // One WRITE per QP, then drain.
        for r in 0..n {
            s.post_write(r);
        }
        let done = s.drain();
        assert_eq!(done, n, "every priming WRITE completes");
        s
    }

    fn post_write(&mut self, r: usize) {
        let sge = [Sge {
            addr: BASE,
            length: MSG,
            lkey: self.mr[0].lkey,
        }];
        let mut wr = SendWr::new(self.posted, WrOpcode::RdmaWrite, &sge);
        wr.remote_addr = BASE;
        wr.rkey = self.mr[1].rkey;
        self.dev[0]
            .post_send(self.qpn[r][0], &wr)
            .expect("post_send");
        self.posted += 1;
    }

    /// Move frames both ways until neither device sends; poll both CQs.
    /// Returns the successful client completions.
    fn drain(&mut self) -> usize {
        let mut done = 0;
        loop {
            let mut moved = false;
            for s in 0..2 {
                while let Some(n) = self.dev[s].poll_transmit(self.now, &mut self.buf) {
                    self.dev[1 - s].handle_frame(self.now, &self.buf[..n]);
                    moved = true;
                }
            }
            for s in 0..2 {
                loop {
                    let k = self.dev[s].poll_cq(self.cq[s], &mut self.wcs);
                    if k == 0 {
                        break;
                    }
                    let ok = self.wcs[..k]
                        .iter()
                        .filter(|w| w.status == WcStatus::Success)
                        .count();
                    if s == 0 {
                        done += ok;
                    }
                }
            }
            if !moved {
                return done;
            }
        }
    }

    /// One poll round of the idle client device.
    fn idle_round(&mut self) -> bool {
        let d = &mut self.dev[0];
        let sent = d.poll_transmit(self.now, &mut self.buf);
        let t = d.poll_timeout();
        d.handle_timeout(self.now);
        sent.is_some() | t.is_some()
    }

    /// One 64-byte WRITE through both devices on QP index `r`; returns the
    /// completion's status.
    fn write64(&mut self, r: usize) -> WcStatus {
        self.now = self.now + Duration::from_micros(1);
        let now = self.now;
        self.post_write(r);
        while let Some(n) = self.dev[0].poll_transmit(now, &mut self.buf) {
            self.dev[1].handle_frame(now, &self.buf[..n]);
        }
        let _ = self.dev[1].poll_timeout();
        while let Some(n) = self.dev[1].poll_transmit(now, &mut self.buf) {
            self.dev[0].handle_frame(now, &self.buf[..n]);
        }
        let _ = self.dev[0].poll_timeout();
        let k = self.dev[0].poll_cq(self.cq[0], &mut self.wcs[..1]);
        if k == 1 {
            self.wcs[0].status
        } else {
            WcStatus::GeneralErr
        }
    }

    fn report(&self, n: usize) {
        eprintln!(
            "idle_qps set-up, {n} QP(s): client active list {}, poll_timeout {:?}; server active list {}, poll_timeout {:?}",
            self.dev[0].active_qps(),
            self.dev[0].poll_timeout(),
            self.dev[1].active_qps(),
            self.dev[1].poll_timeout(),
        );
    }
}

/// Rounds per timed block of [`best_of_blocks`].
const BLOCK: u64 = 256;

/// Run `f` `iters` times in blocks of [`BLOCK`], timing each block, and
/// return `iters ×` the best block's time per call: the cost of `f` without
/// the preemptions and cache-stealing neighbours of the shared machine (for a
/// deterministic few-nanosecond operation the minimum is the stable
/// estimator; the mean moves by ±30% from run to run here).
fn best_of_blocks<T>(iters: u64, mut f: impl FnMut() -> T) -> Duration {
    let mut best = f64::INFINITY;
    let mut left = iters;
    while left > 0 {
        let k = left.min(BLOCK);
        let t = std::time::Instant::now();
        for _ in 0..k {
            black_box(f());
        }
        let per = t.elapsed().as_nanos() as f64 / k as f64;
        best = best.min(per);
        left -= k;
    }
    Duration::from_nanos((best * iters as f64).round() as u64)
}

/// Per-call time of `k` calls of `f` on `s`, ns.
fn time_block<T>(s: &mut Setup, k: u64, f: &impl Fn(&mut Setup) -> T) -> f64 {
    let t = std::time::Instant::now();
    for _ in 0..k {
        black_box(f(s));
    }
    t.elapsed().as_nanos() as f64 / k as f64
}

/// A paired comparison of the 1-QP and the 10,000-QP device.
#[derive(Debug, Clone, Copy)]
struct Paired {
    /// Median over pairs of `time(1 QP) / time(10,000 QPs)`.
    ratio_median: f64,
    /// Best 1-QP block / best 10,000-QP block.
    ratio_of_mins: f64,
    /// Median block time per call, ns: 1 QP, 10,000 QPs.
    median_ns: [f64; 2],
    /// Best block time per call, ns: 1 QP, 10,000 QPs.
    min_ns: [f64; 2],
}

/// Alternate timed blocks of `block` calls of `f` on the 1-QP and the
/// 10,000-QP set-up (`pairs` times, the order flipping every pair), so both
/// see the same machine at the same moments: the ratio is immune to the
/// load changes that move separate criterion runs by ±10-30% here.
fn paired<T>(
    one: &mut Setup,
    many: &mut Setup,
    pairs: usize,
    block: u64,
    f: impl Fn(&mut Setup) -> T,
) -> Paired {
    let mut a = Vec::with_capacity(pairs);
    let mut b = Vec::with_capacity(pairs);
    let mut r = Vec::with_capacity(pairs);
    for p in 0..pairs {
        let (ta, tb) = if p % 2 == 0 {
            let ta = time_block(one, block, &f);
            (ta, time_block(many, block, &f))
        } else {
            let tb = time_block(many, block, &f);
            (time_block(one, block, &f), tb)
        };
        a.push(ta);
        b.push(tb);
        r.push(ta / tb);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let (amin, bmin) = (min(&a), min(&b));
    Paired {
        ratio_median: median(&mut r),
        ratio_of_mins: amin / bmin,
        median_ns: [median(&mut a), median(&mut b)],
        min_ns: [amin, bmin],
    }
}

/// Criterion's output directory (`$CRITERION_HOME`, else
/// `$CARGO_TARGET_DIR/criterion`, else this workspace's `target/criterion`).
fn criterion_dir() -> PathBuf {
    if let Some(h) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(h);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion")
}

/// Print the paired figures and write them to
/// `<criterion dir>/idle_qps_paired.json` for `scripts/bench-ratios.sh`.
fn report_paired(round: &Paired, write: &Paired) {
    let json = |p: &Paired| {
        format!(
            "{{\"ratio_median\": {:.4}, \"ratio_of_mins\": {:.4}, \"median_ns\": [{:.3}, {:.3}], \"min_ns\": [{:.3}, {:.3}]}}",
            p.ratio_median, p.ratio_of_mins, p.median_ns[0], p.median_ns[1], p.min_ns[0], p.min_ns[1]
        )
    };
    for (name, p) in [("idle round", round), ("64 B WRITE", write)] {
        eprintln!(
            "paired {name}: 1 QP {:.2} ns, {MANY} QPs {:.2} ns (medians of blocks); ratio 1-QP/{MANY}-QP: median {:.3}, of minimums {:.3}",
            p.median_ns[0], p.median_ns[1], p.ratio_median, p.ratio_of_mins
        );
    }
    let dir = criterion_dir();
    let text = format!(
        "{{\"qps\": {MANY}, \"round\": {}, \"write64\": {}}}\n",
        json(round),
        json(write)
    );
    let path = dir.join("idle_qps_paired.json");
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, text)) {
        eprintln!("idle_qps: cannot write {}: {e}", path.display());
    }
}

fn idle_qps(c: &mut Criterion) {
    let mut one = Setup::new(1);
    one.report(1);
    let mut many = Setup::new(MANY);
    many.report(MANY);
    let (r_one, r_many) = (0, MANY / 2);
    for (s, r) in [(&mut one, r_one), (&mut many, r_many)] {
        assert_eq!(s.write64(r), WcStatus::Success, "a 64-byte WRITE completes");
    }

    let mut g = c.benchmark_group("idle_qps_round");
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(5));
    for (name, s) in [("1qp", &mut one), ("10000qp", &mut many)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| best_of_blocks(iters, || s.idle_round()))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("idle_qps_write64");
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(5));
    for (name, s, r) in [("1qp", &mut one, r_one), ("10000qp", &mut many, r_many)] {
        g.bench_function(name, |b| b.iter(|| s.write64(r)));
    }
    g.finish();

    // Paired figures (about 1.5 s).
    let round = paired(&mut one, &mut many, 20_000, BLOCK, |s| s.idle_round());
    let write = paired(&mut one, &mut many, 2_000, 64, |s| {
        let r = if s.qpn.len() == 1 { r_one } else { r_many };
        s.write64(r)
    });
    report_paired(&round, &write);
    // Nothing may be left behind by the timed WRITEs (not timed).
    for s in [&mut one, &mut many] {
        assert_eq!(s.drain(), 0, "no completion left after the timed WRITEs");
    }
}

criterion_group!(benches, idle_qps);
criterion_main!(benches);
