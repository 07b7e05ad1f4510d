//! Loopback RC RDMA WRITE goodput, reported as a ratio to the
//! copy-and-checksum limit measured in the same run.
//!
//! # What runs
//!
//! `goodput` is `roce perf write` (the engine of `src/perf`): two
//! [`roce_stack::verbs::Device`]s, **one thread per side**, joined by the
//! in-memory Ethernet (a fixed pool of reusable frame buffers), one RC QP,
//! path MTU 4096 (Ethernet MTU 9000), 128 WRITEs outstanding, every WRITE
//! signaled. One criterion iteration is one message: a sample of `n`
//! iterations is one `roce perf` run of `-n n`, and the time reported is the
//! engine's own (first post to last completion, [`roce::perf::BwStats`]), so
//! set-up, thread start and the final check are not timed. Each run verifies
//! its data (the server's region must equal the client's pattern) and the
//! bench panics if it does not, so the figure is goodput: bytes of verified
//! payload per second.
//!
//! Memory placement (a [`Placement`]): every frame buffer starts 128 bytes past
//! a 4096-byte boundary, so each payload copy has one known
//! `(dst − src) mod 4096` (payload at frame offset 70 in packets with a RETH,
//! FIRST and ONLY, and 54 in MIDDLE and LAST: Ethernet 14 + IPv4 20 + UDP 8 +
//! BTH 12 [+ RETH 16]). The client's memory region is page-aligned; the
//! server's (the WRITE destination) is page-aligned in the `aligned` groups
//! and starts [`TRAP_MR_OFFSET`] = 199 bytes past a page in the `dst_trap`
//! group. 199 = 128 + 54 + 17 puts the responder's copy (frame → MR) at
//! `(dst − src) mod 4096` = 17 for MIDDLE/LAST packets and 1 for the FIRST
//! packet: inside the 1..=31 window where glibc 2.36's `rep movsb` memcpy (used
//! for copies above 2112 bytes on this CPU) runs ~35x slower on Zen 3 (glibc
//! bug 30994, ../shared/reference/PERF-NOTES.md). A plain 17-byte MR offset
//! would not do it with these frame buffers: its differences are 91 and 75
//! modulo 256.
//!
//! # The limit
//!
//! `limit` is the per-byte work a software RoCE data path cannot avoid, done by
//! one thread over the same bytes: for each packet of the message (PMTU-sized
//! pieces; 1 for 4 KiB and 64 B), `memcpy` the payload from the source region
//! into a frame buffer (at its payload offset, 70 or 54), `crc32fast::hash` the
//! payload in the frame twice (the sender's ICRC and the receiver's check),
//! and `memcpy` it from the frame into the destination region. Headers, their
//! share of the ICRC, parsing and the transport's bookkeeping are not in it, so
//! it is a lower bound on the per-byte cost, not a model of the stack. Buffers
//! are placed as in the `aligned` run (source page-aligned, frame at page +
//! 128, destination page-aligned), so no copy is in the `rep movsb` trap: the
//! `limit` of the `dst_trap` group is the same trap-free figure.
//!
//! The limit is **single-core**: it is the time one core needs for both sides'
//! per-byte work. The engine splits that work over two threads (sender: copy +
//! CRC; receiver: CRC + copy), so with two idle cores the ideal ratio is up to
//! 2.0; on one core (or with the other core busy) it is at most 1.0. The
//! issue's target for the 64 KiB case is `goodput / limit >= 0.5`.
//!
//! The `dst_trap` group also times the limit's loop at the trap placement:
//! `limit_same_placement` with plain `copy_from_slice` (as the stack copies
//! today), and `limit_chunked` copying in [`COPY_CHUNK`]-byte pieces, below
//! glibc's `rep movsb` threshold (the fix proposed for the stack's copies).
//!
//! Criterion times goodput and limit seconds apart, and on this shared VM the
//! two threads' share of the machine changes between them (the same goodput
//! varied 2x between runs), so the bench first measures each case **paired**:
//! 15 rounds alternating an engine run and the limit's loop over the same
//! messages, the fastest round of each compared. Those ratios are printed and
//! written to `target/criterion/rc_pair_paired.json`.
//!
//! # Groups and benches
//!
//! | group | message | server MR | benches |
//! |---|---|---|---|
//! | `rc_pair_64KiB_aligned` | 65536 B, 16 packets | page-aligned | `goodput`, `limit` |
//! | `rc_pair_64KiB_dst_trap` | 65536 B, 16 packets | page + 199 | `goodput`, `limit`, `limit_same_placement`, `limit_chunked` |
//! | `rc_pair_4KiB` | 4096 B, 1 packet | page-aligned | `goodput`, `limit` |
//! | `rc_pair_64B` | 64 B, 1 packet | page-aligned | `goodput`, `limit` |
//! | `rc_pair_64B_send` | 64 B SEND, 1 packet | page-aligned receive buffers | `goodput`, `limit` |
//! | `rc_pair_8B_fetch_add` | 8 B ATOMIC FETCH_AND_ADD | page-aligned | `goodput`, `limit` |
//!
//! The SEND and FETCH_ADD cases are `roce perf send` and `roce perf atomic`
//! (a SEND posts a receive per message on the server and checks each
//! message; a FETCH_ADD checks every fetched value), compared with the same
//! limit loop over their payload (64 bytes; the atomic's 8-byte operand):
//! for them the ratio shows the per-message cost, the limit being a few
//! nanoseconds.
//!
//! Throughput is one message per iteration (`Throughput::Bytes` of the message
//! for 64 KiB and 4 KiB, `Throughput::Elements(1)` for 64 B); the ratio of two
//! benches of a group is the inverse ratio of their times per message.
//! `scripts/bench-ratios.sh` prints goodput (GB/s, 10^9 B/s), message rate
//! (Mpps) and the ratios from `target/criterion/<group>/<bench>/new/estimates.json`.
//!
//! Run: `cargo bench --bench rc_pair` (about 2 minutes). The machine is shared
//! and has two cores: the threaded figure depends on what else runs; compare
//! ratios from the same run and repeat.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use roce::perf::{self, Figures, Op, PerfConfig, PerfOptions, Placement};
use roce_stack::verbs::Mtu;

/// Path MTU, bytes.
const PMTU: usize = 4096;
/// Frame buffers start this far past a 4096-byte boundary.
const FRAME_PAGE_OFFSET: usize = 128;
/// Payload offset in a frame with a RETH (WRITE FIRST / ONLY), bytes:
/// Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + RETH 16.
const HDR_RETH: usize = 70;
/// Payload offset in WRITE MIDDLE / LAST frames, bytes.
const HDR_PLAIN: usize = 54;
/// Server MR offset past a page that puts the responder's copy into glibc's
/// `rep movsb` slow window: `(dst − src) mod 4096` = 199 − (128 + 54) = 17.
const TRAP_MR_OFFSET: usize = FRAME_PAGE_OFFSET + HDR_PLAIN + 17;
/// Copy piece of `limit_chunked`, bytes: below glibc 2.36's `rep movsb`
/// threshold (2112 bytes with FSRM; 2048 or more on every x86-64 default).
const COPY_CHUNK: usize = 2048;

/// The engine's placement with a server MR `server_mr_offset` bytes past a page.
fn placement(server_mr_offset: usize) -> Placement {
    Placement {
        mr_offset: [0, server_mr_offset],
        frame_page_offset: Some(FRAME_PAGE_OFFSET),
    }
}

/// One `roce perf OP -s size -n iters` run (1 QP, PMTU 4096, TX depth
/// 128); the engine's time from the first post to the last completion.
/// Panics if the run fails or its data does not verify.
fn engine_run(op: Op, size: usize, iters: u64, placement: &Placement) -> Duration {
    let opts = PerfOptions {
        op: Some(op),
        size: Some(size as u64),
        iters: Some(iters.max(1)),
        qps: Some(1),
        mtu: Some(Mtu::Mtu4096),
        ..PerfOptions::default()
    };
    let cfg = PerfConfig::from_options(&opts).expect("perf config");
    let report = perf::run_placed(&cfg, placement, None)
        .unwrap_or_else(|e| panic!("rc_pair: roce perf {op} -s {size} -n {iters}: {e}"));
    assert_eq!(report.total_ops, iters.max(1), "operations completed");
    match report.figures {
        Figures::Bw(b) => Duration::from_nanos(b.elapsed_ns),
        Figures::Lat(_) => unreachable!("a bandwidth run reports bandwidth"),
    }
}

/// `len` bytes starting `page_offset` bytes past a 4096-byte boundary.
struct Placed {
    buf: Vec<u8>,
    off: usize,
    len: usize,
}

impl Placed {
    fn new(len: usize, page_offset: usize, fill: u8) -> Placed {
        let buf = vec![fill; len + 8192];
        let addr = buf.as_ptr() as usize;
        let off = (page_offset % 4096 + 4096 - addr % 4096) % 4096;
        Placed { buf, off, len }
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[self.off..self.off + self.len]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// How the limit copies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CopyMode {
    /// One `copy_from_slice` per packet (what the stack does).
    Plain,
    /// `copy_from_slice` in [`COPY_CHUNK`]-byte pieces.
    Chunked,
}

fn copy(dst: &mut [u8], src: &[u8], how: CopyMode) {
    match how {
        CopyMode::Plain => dst.copy_from_slice(src),
        CopyMode::Chunked => {
            for (d, s) in dst.chunks_mut(COPY_CHUNK).zip(src.chunks(COPY_CHUNK)) {
                d.copy_from_slice(s);
            }
        }
    }
}

/// The buffers of the copy-and-checksum limit.
struct Limit {
    src: Placed,
    frame: Placed,
    dst: Placed,
    size: usize,
    how: CopyMode,
}

impl Limit {
    /// Source page-aligned, frame at page + 128, destination at page +
    /// `dst_offset`.
    fn new(size: usize, dst_offset: usize, how: CopyMode) -> Limit {
        let mut src = Placed::new(size.max(1), 0, 0);
        for (i, b) in src.bytes_mut().iter_mut().enumerate() {
            *b = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3];
        }
        Limit {
            src,
            frame: Placed::new(PMTU + 256, FRAME_PAGE_OFFSET, 0),
            dst: Placed::new(size.max(1), dst_offset, 0x5A),
            size,
            how,
        }
    }

    /// One message: per packet copy in, CRC twice, copy out. Returns the XOR
    /// of the CRCs (kept alive with `black_box`).
    fn message(&mut self) -> u32 {
        let mut acc = 0u32;
        let mut off = 0;
        let mut first = true;
        while off < self.size || first {
            let len = PMTU.min(self.size - off);
            let h = if first { HDR_RETH } else { HDR_PLAIN };
            let payload = &mut self.frame.bytes_mut()[h..h + len];
            copy(payload, &self.src.bytes()[off..off + len], self.how);
            acc ^= crc32fast::hash(black_box(&*payload));
            acc ^= crc32fast::hash(black_box(&*payload));
            copy(
                &mut self.dst.bytes_mut()[off..off + len],
                black_box(&*payload),
                self.how,
            );
            off += len;
            first = false;
        }
        acc
    }

    /// Check once that the copies moved the data (not timed).
    fn check(&mut self) {
        self.message();
        assert!(
            self.dst.bytes()[..self.size] == self.src.bytes()[..self.size],
            "limit: copy lost data"
        );
    }
}

fn bench_case(c: &mut Criterion, group: &str, op: Op, size: usize, dst_offset: usize) {
    let mut g = c.benchmark_group(group);
    if size >= PMTU {
        g.throughput(Throughput::Bytes(size as u64));
    } else {
        g.throughput(Throughput::Elements(1));
    }
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(5));

    // Threaded, with set-up outside the timed part: few, equal samples.
    g.sampling_mode(SamplingMode::Flat).sample_size(10);
    let place = placement(dst_offset);
    g.bench_function("goodput", |b| {
        b.iter_custom(|iters| engine_run(op, size, iters, &place))
    });

    g.sampling_mode(SamplingMode::Auto).sample_size(30);
    let mut reference = Limit::new(size, 0, CopyMode::Plain);
    reference.check();
    g.bench_function("limit", |b| b.iter(|| reference.message()));
    if dst_offset != 0 {
        let mut same = Limit::new(size, dst_offset, CopyMode::Plain);
        same.check();
        g.bench_function("limit_same_placement", |b| b.iter(|| same.message()));
        let mut chunked = Limit::new(size, dst_offset, CopyMode::Chunked);
        chunked.check();
        g.bench_function("limit_chunked", |b| b.iter(|| chunked.message()));
    }
    g.finish();
}

/// Paired measurement of one case: `rounds` rounds, each one engine run of
/// `msgs` messages then `msgs` messages of the limit's loop, alternating so
/// both see the same machine; the fastest round of each, per message (ns).
fn paired_case(op: Op, size: usize, dst_offset: usize, msgs: u64, rounds: usize) -> (f64, f64) {
    let place = placement(dst_offset);
    let mut limit = Limit::new(size, 0, CopyMode::Plain);
    limit.check();
    let (mut g, mut l) = (f64::MAX, f64::MAX);
    for _ in 0..rounds {
        let t = engine_run(op, size, msgs, &place);
        g = g.min(t.as_nanos() as f64 / msgs as f64);
        let start = std::time::Instant::now();
        for _ in 0..msgs {
            black_box(limit.message());
        }
        l = l.min(start.elapsed().as_nanos() as f64 / msgs as f64);
    }
    (g, l)
}

/// Print the paired figures and write `target/criterion/rc_pair_paired.json`.
fn report_paired() {
    let mut json = Vec::new();
    for (name, op, size, off, msgs) in [
        ("rc_pair_64KiB_aligned", Op::Write, 65536, 0, 400u64),
        (
            "rc_pair_64KiB_dst_trap",
            Op::Write,
            65536,
            TRAP_MR_OFFSET,
            400,
        ),
        ("rc_pair_4KiB", Op::Write, 4096, 0, 4000),
        ("rc_pair_64B", Op::Write, 64, 0, 8000),
        ("rc_pair_64B_send", Op::Send, 64, 0, 8000),
        ("rc_pair_8B_fetch_add", Op::Atomic, 8, 0, 8000),
    ] {
        let (g, l) = paired_case(op, size, off, msgs, 15);
        eprintln!(
            "paired {name}: goodput {:.3} us/msg, limit {:.3} us/msg, goodput/limit {:.3}",
            g / 1e3,
            l / 1e3,
            l / g
        );
        json.push(format!(
            "\"{name}\": {{\"goodput_ns\": {g:.1}, \"limit_ns\": {l:.1}, \"ratio\": {:.4}, \"size\": {size}}}",
            l / g
        ));
    }
    let dir = std::path::PathBuf::from(
        std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into()),
    )
    .join("criterion");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        dir.join("rc_pair_paired.json"),
        format!("{{{}}}\n", json.join(", ")),
    );
}

fn rc_pair(c: &mut Criterion) {
    // `cargo bench` passes --bench; `cargo test --benches` does not (test mode).
    if std::env::args().any(|a| a == "--bench") {
        report_paired();
    }
    bench_case(c, "rc_pair_64KiB_aligned", Op::Write, 65536, 0);
    bench_case(
        c,
        "rc_pair_64KiB_dst_trap",
        Op::Write,
        65536,
        TRAP_MR_OFFSET,
    );
    bench_case(c, "rc_pair_4KiB", Op::Write, 4096, 0);
    bench_case(c, "rc_pair_64B", Op::Write, 64, 0);
    bench_case(c, "rc_pair_64B_send", Op::Send, 64, 0);
    bench_case(c, "rc_pair_8B_fetch_add", Op::Atomic, 8, 0);
}

criterion_group!(benches, rc_pair);
criterion_main!(benches);
