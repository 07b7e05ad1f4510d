//! "Per-packet work allocates nothing" (the transport issue's architecture
//! rule), checked with a counting global allocator: after warm-up, moving
//! thousands of RC WRITE, READ, SEND and atomic messages between two devices —
//! posting, building every frame, parsing and verifying it, executing it,
//! acknowledging it, completing it — performs no heap allocation at all.
//!
//! The frames go straight from one device's `poll_transmit` buffer into the
//! other's `handle_frame` (the test wire `Pair` would allocate per frame).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use roce_stack::testing::{connect, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::verbs::{AccessFlags, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call forwards to `System` unchanged; the counter is a side
// effect only (and the thread-local is const-initialised, so reading it does
// not allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(|c| c.get()) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const WC0: Wc = Wc::EMPTY;

#[test]
fn steady_state_traffic_allocates_nothing() {
    let mut p = Pair::new(9000, Faults::default(), 1);
    let o = ConnOpts {
        mtu: roce_stack::verbs::Mtu::Mtu4096,
        ..ConnOpts::default()
    };
    let c = connect(&mut p, &o);
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let a = p.dev[0]
        .reg_mr(c.pd[0], vec![7u8; 1 << 20], 0x1_0000, all)
        .unwrap();
    let b = p.dev[1]
        .reg_mr(c.pd[1], vec![0u8; 1 << 20], 0x2_0000, all)
        .unwrap();
    let mut buf = vec![0u8; 16384];
    let mut wcs = [WC0; 64];
    let mut now = Instant::from_micros(1);

    let round = |p: &mut Pair, i: u64, now: Instant, buf: &mut [u8], wcs: &mut [Wc]| {
        let len = [0u32, 64, 4096, 20_000, 65_536][(i % 5) as usize];
        let rsge = [Sge {
            addr: 0x2_0000 + 0x8_0000,
            length: 65_536,
            lkey: b.lkey,
        }];
        p.dev[1]
            .post_recv(
                c.qpn[1],
                &RecvWr {
                    wr_id: i,
                    sg_list: &rsge,
                },
            )
            .unwrap();
        let sge = [Sge {
            addr: 0x1_0000,
            length: len,
            lkey: a.lkey,
        }];
        let ops = [
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaRead,
            WrOpcode::Send,
            WrOpcode::SendWithImm,
        ];
        for (k, op) in ops.into_iter().enumerate() {
            let mut wr = SendWr::new(i * 8 + k as u64, op, &sge);
            wr.remote_addr = 0x2_0000;
            wr.rkey = b.rkey;
            if op == WrOpcode::SendWithImm {
                // One receive per SEND (the first was posted above).
                p.dev[1]
                    .post_recv(
                        c.qpn[1],
                        &RecvWr {
                            wr_id: i,
                            sg_list: &rsge,
                        },
                    )
                    .unwrap();
            }
            p.dev[0].post_send(c.qpn[0], &wr).unwrap();
        }
        let res = [Sge {
            addr: 0x1_0000 + 0x8_0000,
            length: 8,
            lkey: a.lkey,
        }];
        let mut wr = SendWr::new(i * 8 + 5, WrOpcode::AtomicFetchAndAdd, &res);
        wr.remote_addr = 0x2_0000 + 0x10;
        wr.rkey = b.rkey;
        wr.compare_add = 1;
        p.dev[0].post_send(c.qpn[0], &wr).unwrap();
        // Move frames until both sides are quiet.
        loop {
            let mut moved = false;
            for s in 0..2 {
                while let Some(n) = p.dev[s].poll_transmit(now, buf) {
                    p.dev[1 - s].handle_frame(now, &buf[..n]);
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        let mut done = 0;
        for s in 0..2 {
            loop {
                let n = p.dev[s].poll_cq(c.cq[s], wcs);
                if n == 0 {
                    break;
                }
                for w in &wcs[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                }
                done += n;
            }
        }
        // 5 send completions + 2 receive completions per round.
        assert_eq!(done, 7, "round {i}");
    };

    // Warm-up: queues, maps and the timer set reach their working size.
    for i in 0..200 {
        round(&mut p, i, now, &mut buf, &mut wcs);
        now = now + std::time::Duration::from_micros(10);
    }
    COUNTING.with(|c| c.set(true));
    // The counter works: one allocation is seen.
    drop(std::hint::black_box(Vec::<u8>::with_capacity(16)));
    assert_eq!(
        ALLOCS.swap(0, Ordering::Relaxed),
        1,
        "the counting allocator counts"
    );
    for i in 200..1200 {
        round(&mut p, i, now, &mut buf, &mut wcs);
        now = now + std::time::Duration::from_micros(10);
    }
    COUNTING.with(|c| c.set(false));
    let n = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(
        n, 0,
        "heap allocations during 1,000 rounds of steady traffic"
    );
}
