//! Heap held per RC QP (issue 14 §4), measured with a counting global
//! allocator: the live heap of the test thread before and after creating
//! 10,000 RC QPs on one `Device` and moving them to RTS (RESET → INIT →
//! RTR → RTS, IBTA 1.7 §10.3.1), then after every QP carried one 64-byte
//! RDMA WRITE that was acknowledged and completed (so its header cache, ACK
//! timer and response queue have been used).
//!
//! The WQE rings are measured, not assumed: the same QPs with a 16-deep
//! send (receive) queue hold 15 more slots each than with a 1-deep one, so
//! `(heap(16) - heap(1)) / 15` is the heap per send (receive) WQE slot, and
//! the heap per QP excluding its rings is `heap(1)` less one slot of each.
//! Bounds (the goals): at most 1 KiB per idle QP without its rings,
//! at most 128 bytes per send WQE slot (mlx5's basic WQE block is 64).
//! The figures are printed (`cargo test -p roce-stack --test qp_memory --
//! --nocapture`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, Ordering};

use roce_stack::testing::{av_to, modify_to_rts, test_device, ConnOpts};
use roce_stack::time::Instant;
use roce_stack::transport::av::AddressVector;
use roce_stack::verbs::{
    AccessFlags, Device, MrKeys, Mtu, QpCap, QpInitAttr, QpType, SendWr, Sge, Wc, WcStatus,
    WrOpcode,
};

struct Counting;

/// Live heap bytes allocated by the counting thread.
static LIVE: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn track(delta: i64) {
    if COUNTING.with(|c| c.get()) {
        LIVE.fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to `System` unchanged; the counter is a side
// effect only (and the thread-local is const-initialised, so reading it does
// not allocate).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as i64);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as i64);
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as i64));
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        track(new_size as i64 - layout.size() as i64);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// QPs per device.
const N: usize = 10_000;
/// I/O virtual address of each side's MR.
const BASE: u64 = 0x1000_0000;

/// Test side `i` (10.0.0.(i+1)) on a 9000-byte Ethernet.
fn device(i: u8) -> Device {
    test_device(i, 9000)
}

/// Live heap of the counting thread, bytes.
fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// What one run measured, bytes per QP (averaged over [`N`]).
struct Heap {
    /// Client QPs created and in RTS, never used.
    fresh: f64,
    /// After one WRITE each (client side).
    used_client: f64,
    /// After one WRITE each (server side, whose QPs received it).
    used_server: f64,
}

/// `N` connected RC QP pairs with `sq` send and `rq` receive slots each.
fn measure(sq: u32, rq: u32) -> Heap {
    let mut dev = [device(0), device(1)];
    let pd = [dev[0].alloc_pd(), dev[1].alloc_pd()];
    let cq = [dev[0].create_cq(N + 64), dev[1].create_cq(N + 64)];
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr: [MrKeys; 2] = [0, 1].map(|s| {
        dev[s]
            .reg_mr(pd[s], vec![s as u8; 4096], BASE, access)
            .expect("reg_mr")
    });
    let init = |s: usize| QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq[s],
        recv_cq: cq[s],
        cap: QpCap {
            max_send_wr: sq,
            max_recv_wr: rq,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    // RESET → INIT → RTR → RTS (IBTA 1.7 §10.3.1), SQ and RQ PSN alike.
    let o = ConnOpts {
        mtu: Mtu::Mtu4096,
        access,
        ..ConnOpts::default()
    };
    let to_rts = |d: &mut Device, qpn: u32, peer: AddressVector, dest: u32, psn: u32| {
        modify_to_rts(d, qpn, peer, dest, psn, psn, &o).expect("RTS");
    };
    let [p0, p1] = [0, 1].map(|s| av_to(&dev[s]).expect("GID 0"));
    // The servers first, uncounted.
    let srv: Vec<u32> = (0..N)
        .map(|_| dev[1].create_qp(pd[1], &init(1)).expect("create_qp"))
        .collect();
    COUNTING.with(|c| c.set(true));
    let before = live();
    let cli: Vec<u32> = (0..N)
        .map(|_| dev[0].create_qp(pd[0], &init(0)).expect("create_qp"))
        .collect();
    for (i, (&c, &s)) in cli.iter().zip(&srv).enumerate() {
        to_rts(&mut dev[0], c, p1, s, i as u32 * 7);
    }
    let fresh = (live() - before) as f64 / N as f64;
    COUNTING.with(|c| c.set(false));
    for (i, (&c, &s)) in cli.iter().zip(&srv).enumerate() {
        to_rts(&mut dev[1], s, p0, c, i as u32 * 7);
    }
    // One WRITE per QP, delivered, acknowledged and completed: device 0's
    // and device 1's heap are counted apart (the frames move in between).
    let mut buf = vec![0u8; 8192];
    let mut wcs = [Wc::EMPTY; 64];
    let now = Instant::from_millis(1);
    let sge = [Sge {
        addr: BASE,
        length: 64,
        lkey: mr[0].lkey,
    }];
    let mut frames: Vec<Vec<u8>> = Vec::with_capacity(N);
    let mut done = 0;
    let (mut used_c, mut used_s) = (0i64, 0i64);
    for &c in &cli {
        let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
        wr.remote_addr = BASE;
        wr.rkey = mr[1].rkey;
        COUNTING.with(|x| x.set(true));
        let t = live();
        dev[0].post_send(c, &wr).expect("post_send");
        let n = dev[0].poll_transmit(now, &mut buf).expect("the WRITE");
        used_c += live() - t;
        COUNTING.with(|x| x.set(false));
        frames.push(buf[..n].to_vec());
    }
    for f in frames.drain(..) {
        COUNTING.with(|x| x.set(true));
        let t = live();
        dev[1].handle_frame(now, &f);
        let n = dev[1].poll_transmit(now, &mut buf).expect("the ACK");
        used_s += live() - t;
        let t = live();
        dev[0].handle_frame(now, &buf[..n]);
        loop {
            let k = dev[0].poll_cq(cq[0], &mut wcs);
            if k == 0 {
                break;
            }
            assert!(wcs[..k].iter().all(|w| w.status == WcStatus::Success));
            done += k;
        }
        used_c += live() - t;
        COUNTING.with(|x| x.set(false));
    }
    assert_eq!(done, N, "every WRITE completes");
    assert!(dev[0].poll_transmit(now, &mut buf).is_none());
    Heap {
        fresh,
        used_client: fresh + used_c as f64 / N as f64,
        used_server: used_s as f64 / N as f64,
    }
}

#[test]
fn heap_per_idle_rc_qp_and_per_wqe_slot() {
    let one = measure(1, 1);
    let deep_sq = measure(16, 1);
    let deep_rq = measure(1, 16);
    let sq_slot = (deep_sq.fresh - one.fresh) / 15.0;
    let rq_slot = (deep_rq.fresh - one.fresh) / 15.0;
    let idle = one.fresh - sq_slot - rq_slot;
    let used = one.used_client - sq_slot - rq_slot;
    eprintln!(
        "heap per RC QP over {N} QPs: send WQE slot {sq_slot:.1} B, receive WQE slot {rq_slot:.1} B; \
         idle in RTS without its rings {idle:.1} B ({:.1} B with one-slot rings); \
         after one 64 B WRITE {used:.1} B on the requester (+{:.1} B on the responder)",
        one.fresh, one.used_server
    );
    assert!(sq_slot <= 128.0, "send WQE slot: {sq_slot:.1} B");
    assert!(idle <= 1024.0, "idle QP without rings: {idle:.1} B");
    assert!(used <= 1024.0, "used QP without rings: {used:.1} B");
    let served = idle + one.used_server;
    assert!(
        served <= 1024.0,
        "used responder QP without rings: {served:.1} B"
    );
}
