//! RDMA WRITE goodput through a TAP pair, against the same TAP pair moving
//! pre-built frames of the same size (needs root; `scripts/bench-tap.sh`).
//!
//! # Set-up
//!
//! Two TAP interfaces bridged in a network namespace of their own
//! (`tests/support/netns.rs`), MTU 9000 on both and on the bridge, so the
//! path MTU is 4096 and a 4 KiB WRITE is one RC_RDMA_WRITE_ONLY frame of
//! 4170 bytes. By default each side has a busy-polling thread of its own
//! (`ROCE_TAP_THREADS=2`), as two `roce perf` processes (or perftest's
//! server and client) run; the raw loop then writes on one thread and reads
//! on the other. It needs two idle cores: on the shared 2-core machine, with
//! other jobs running, it collapses to tens of MB/s for both figures.
//! `ROCE_TAP_THREADS=1` polls host A, then host B, in turn on one thread
//! (the kernel forwards each frame through the bridge inside the writer's
//! `write` syscall, so all the work is on that thread): the per-message
//! user-space cost then adds directly to the kernel's.
//!
//! - `stack`: two [`TapHost`]s (two devices, ARP-resolved addresses), one RC
//!   QP, 4 KiB RDMA WRITEs from A to B, [`WINDOW`] outstanding, one in
//!   [`CQ_MOD`] signaled, into a region of `ROCE_TAP_RING` bytes (default one
//!   4 KiB slot per WRITE in flight) checked against the source after each
//!   block. Goodput = 4096 × messages / time.
//! - `raw`: the same two TAP descriptors, no stack, the same threads: write
//!   byte copies of a 4 KiB WRITE_ONLY frame into A (at most [`WINDOW`]
//!   ahead of what B has read), read them from B. Goodput = 4096 × frames
//!   read / time. This is the cost of moving the frames through the kernel:
//!   the ceiling for any user-space stack on TAP.
//!
//! The two are measured in alternating blocks of `ROCE_TAP_BLOCK` messages
//! (`stack`, `raw`, then `raw`, `stack`, …), so slow phases of the shared
//! machine hit both; each pair's ratio is `stack / raw`, and the report
//! gives every pair, the medians, the median ratio (target ≥ 0.80), and
//! the process's user and system CPU time per message (getrusage(2), both
//! threads, tick-sampled: indicative only).
//!
//! Run with `cargo bench --bench tap` (as root; `scripts/bench-tap.sh`).
//! Under `cargo test` (no `--bench` argument) it only says so and exits.
//! `ROCE_TAP_PAIRS` (default 15) and `ROCE_TAP_BLOCK` (default 20000)
//! change the sizes.

#[path = "../tests/support/netns.rs"]
mod netns;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant as WallClock};

use roce_io::tap::{TapHost, TapIo};
use roce_stack::backend::FrameIo;
use roce_stack::neigh::Resolution;
use roce_stack::testing::{modify_to_rts, ConnOpts};
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, Mtu, QpCap, QpInitAttr, QpType, SendFlags, SendWr, Sge, Wc,
    WcStatus, WrOpcode,
};
use roce_stack::wire::ext::RethRepr;
use roce_stack::wire::{
    BthRepr, EthRepr, ExtHeaders, Ipv4Repr, NetRepr, Opcode, PacketRepr, UdpChecksum, UdpRepr,
    ROCEV2_UDP_PORT,
};

/// Message size, bytes.
const MSG: usize = 4096;
/// Ethernet MTU of the TAPs and the bridge.
const MTU: usize = 9000;
/// Messages (frames) in flight.
const WINDOW: usize = 64;

/// Every this many WRITEs one is signaled (and the last): perftest's
/// `--cq-mod` (default 100 there; at most [`WINDOW`] / 4 here so the window
/// keeps moving). The requester asks for an ACK on the last packet of a
/// signaled WRITE, so the stack sends one ACK per `CQ_MOD` WRITEs, as
/// `ib_write_bw` does, not one per message.
const CQ_MOD: usize = 16;
/// Default size of the source and destination regions, bytes: one 4 KiB
/// slot per WRITE in flight (`ROCE_TAP_RING` changes it; perftest's
/// ib_write_bw uses a single `size`-byte buffer).
const RING: usize = WINDOW * MSG;
/// Hang guard per block.
const LIMIT: Duration = Duration::from_secs(120);

/// One measured block.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// Payload bytes per second of wall time.
    goodput: f64,
    /// User and system CPU time of this process per message, ns.
    user_ns: f64,
    sys_ns: f64,
}

/// User and system CPU time of this process so far (getrusage(2)).
fn cpu_times() -> (Duration, Duration) {
    // SAFETY: all-zero bytes are a valid `rusage` (integers and timevals).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: one valid, exclusively borrowed `rusage` for the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// Time `f`, which moves `n` messages of [`MSG`] bytes.
fn measure(n: usize, f: impl FnOnce()) -> Block {
    let (u0, s0) = cpu_times();
    let start = WallClock::now();
    f();
    let secs = start.elapsed().as_secs_f64();
    let (u1, s1) = cpu_times();
    Block {
        goodput: (n * MSG) as f64 / secs,
        user_ns: (u1 - u0).as_nanos() as f64 / n as f64,
        sys_ns: (s1 - s0).as_nanos() as f64 / n as f64,
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mac(i: u8) -> [u8; 6] {
    [0x02, 0, 0, 0x99, 0, i]
}
fn ipv4(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, i)
}

fn host(i: u8, io: TapIo) -> TapHost {
    TapHost::new(
        Device::new(DeviceConfig {
            mac: mac(i),
            gids: vec![Gid::from_ipv4(ipv4(i))],
            netdev_mtu: MTU,
            max_unacked_psns: 1024,
            ..DeviceConfig::default()
        }),
        io,
    )
}

fn poll_both(h: &mut [TapHost; 2]) -> usize {
    let mut moved = 0;
    for x in h.iter_mut() {
        let s = x.poll(64).expect("poll");
        moved += s.rx + s.tx;
    }
    moved
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
}

/// An RC QP from A to B, addressed with ARP-resolved MACs. Returns (QPN of
/// A, CQ of A, lkey of A's region, rkey of B's region, lkey of B's).
fn connect(h: &mut [TapHost; 2], ring: usize) -> (u32, u32, u32, u32, u32) {
    let ip = [IpAddr::V4(ipv4(1)), IpAddr::V4(ipv4(2))];
    h[0].start_resolve(ip[1]);
    let start = WallClock::now();
    while !matches!(h[0].resolution(ip[1]), Resolution::Reachable(_)) {
        assert!(
            start.elapsed() < LIMIT,
            "ARP: {:?}",
            h[0].neigh().counters()
        );
        poll_both(h);
    }
    let mut pd = [0; 2];
    let mut cq = [0; 2];
    let mut qpn = [0; 2];
    for s in 0..2 {
        let d = &mut h[s].dev;
        pd[s] = d.alloc_pd();
        cq[s] = d.create_cq(4096);
        qpn[s] = d
            .create_qp(
                pd[s],
                &QpInitAttr {
                    qp_type: QpType::Rc,
                    send_cq: cq[s],
                    recv_cq: cq[s],
                    cap: QpCap {
                        max_send_wr: 256,
                        max_recv_wr: 16,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
            )
            .expect("create_qp");
    }
    let o = ConnOpts {
        mtu: Mtu::Mtu4096,
        access: access(),
        ..ConnOpts::default()
    };
    for s in 0..2 {
        let peer = 1 - s;
        let now = h[s].now();
        let dmac = h[s].neigh().lookup(now, ip[peer]).expect("resolved");
        let av = AddressVector {
            dgid: Gid::from_ip(ip[peer]),
            dmac,
            hop_limit: 64,
            ..AddressVector::default()
        };
        modify_to_rts(&mut h[s].dev, qpn[s], av, qpn[peer], 0, 0, &o).expect("RTS");
    }
    let src: Vec<u8> = (0..ring).map(|i| (i * 7 + (i >> 12)) as u8).collect();
    let a = h[0].dev.reg_mr(pd[0], src, 0, access()).expect("mr a");
    let b = h[1]
        .dev
        .reg_mr(pd[1], vec![0; ring], 0, access())
        .expect("mr b");
    (qpn[0], cq[0], a.lkey, b.rkey, b.lkey)
}

/// `n` 4 KiB WRITEs, [`WINDOW`] outstanding, then the data check.
fn stack_block(
    h: &mut [TapHost; 2],
    c: (u32, u32, u32, u32, u32),
    ring: usize,
    n: usize,
    threads: usize,
) -> Block {
    let (_, _, lkey, _, b_lkey) = c;
    h[1].dev.mr_mut(b_lkey).expect("mr").as_mut_slice().fill(0);
    let block = measure(n, || stack_run(h, c, ring, n, threads));
    // The whole region was written at least once (n * 4 KiB >= ring).
    let a = h[0].dev.mr(lkey).expect("mr a").as_slice();
    let b = h[1].dev.mr(b_lkey).expect("mr b").as_slice();
    assert!(n * MSG < ring || a == b, "WRITE data differs");
    block
}

/// Sets the flag when dropped (so a helper thread stops if the main one
/// panics).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// The WRITE loop of [`stack_block`]: this thread posts and polls A; B is
/// polled by this thread too (`threads` 1) or by a second one (2).
fn stack_run(
    h: &mut [TapHost; 2],
    c: (u32, u32, u32, u32, u32),
    ring: usize,
    n: usize,
    threads: usize,
) {
    let (qpn, cq, lkey, rkey, _) = c;
    let [a, b] = h;
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let stop = &stop;
        let mut b = if threads == 2 {
            scope.spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let s = b.poll(64).expect("poll B");
                    if s.rx + s.tx == 0 {
                        std::hint::spin_loop();
                    }
                }
            });
            None
        } else {
            Some(b)
        };
        let _stop = StopOnDrop(stop);
        let start = WallClock::now();
        let (mut posted, mut done) = (0usize, 0usize);
        let mut wcs = [Wc::EMPTY; 64];
        while done < n {
            while posted < n && posted - done < WINDOW {
                let off = ((posted * MSG) % ring) as u64;
                let sge = [Sge {
                    addr: off,
                    length: MSG as u32,
                    lkey,
                }];
                let mut wr = SendWr::new(posted as u64, WrOpcode::RdmaWrite, &sge);
                wr.remote_addr = off;
                wr.rkey = rkey;
                if (posted + 1) % CQ_MOD != 0 && posted + 1 != n {
                    wr.send_flags.remove(SendFlags::SIGNALED);
                }
                a.dev.post_send(qpn, &wr).expect("post_send");
                posted += 1;
            }
            a.poll(64).expect("poll A");
            if let Some(b) = b.as_deref_mut() {
                b.poll(64).expect("poll B");
            }
            let k = a.dev.poll_cq(cq, &mut wcs);
            for w in &wcs[..k] {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                // A signaled completion retires every WRITE before it.
                done = w.wr_id as usize + 1;
            }
            assert!(start.elapsed() < LIMIT, "stack block stuck at {done}/{n}");
        }
    });
}

/// A 4 KiB RC_RDMA_WRITE_ONLY frame from A to B (what the stack sends).
fn write_only_frame() -> Vec<u8> {
    let repr = PacketRepr {
        eth: EthRepr {
            dst: mac(2),
            src: mac(1),
            vlan: None,
        },
        net: NetRepr::Ipv4(Ipv4Repr {
            src: ipv4(1),
            dst: ipv4(2),
            dscp: 0,
            ecn: 0,
            ttl: 64,
            ident: 1,
            dont_frag: true,
        }),
        udp: UdpRepr {
            src_port: 0xC000,
            dst_port: ROCEV2_UDP_PORT,
            checksum: UdpChecksum::Default,
        },
        // QPN 0xFFFFFE: no such QP on B (the raw loop has no stack anyway).
        bth: BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, 0xFF_FFFE, 0),
        ext: ExtHeaders {
            reth: Some(RethRepr {
                va: 0,
                rkey: 0,
                dma_len: MSG as u32,
            }),
            ..ExtHeaders::default()
        },
    };
    let payload = vec![0x5a; MSG];
    let mut f = vec![0u8; repr.frame_len(MSG)];
    let n = repr.emit(&mut f, &payload).expect("emit");
    f.truncate(n);
    f
}

/// `n` pre-built frames written into A and read from B, at most
/// [`WINDOW`] in flight; goodput counts 4096 payload bytes per frame.
fn raw_block(h: &mut [TapHost; 2], frame: &[u8], n: usize, threads: usize) -> Block {
    measure(n, || raw_run(h, frame, n, threads))
}

/// Read B's frames, counting ours (the kernel's own, IPv6 router
/// solicitations and MLD reports, reach B too, now and then).
fn read_ours(b: &mut TapIo, len: usize) -> usize {
    let mut ours = 0;
    b.rx_burst(64, &mut |f| ours += usize::from(f.len() == len))
        .expect("read");
    ours
}

/// Write up to `want` copies of `frame` into `a`.
fn write_copies(a: &mut TapIo, frame: &[u8], want: usize) -> usize {
    let mut left = want;
    let sent = a
        .tx_burst(want, &mut |buf| {
            if left == 0 {
                return None;
            }
            left -= 1;
            buf[..frame.len()].copy_from_slice(frame);
            Some(frame.len())
        })
        .expect("write");
    // Anything the kernel sends A (none expected) is read and dropped.
    a.rx_burst(64, &mut |_| {}).expect("read");
    sent
}

/// The loop of [`raw_block`]: one thread writes and reads, or (`threads`
/// 2) this one writes and a second reads.
fn raw_run(h: &mut [TapHost; 2], frame: &[u8], n: usize, threads: usize) {
    let [a, b] = h;
    let (a, b) = (a.tap_mut(), b.tap_mut());
    let start = WallClock::now();
    if threads == 1 {
        let (mut sent, mut got) = (0usize, 0usize);
        while got < n {
            sent += write_copies(a, frame, (n - sent).min(WINDOW - (sent - got)));
            got += read_ours(b, frame.len());
            assert!(start.elapsed() < LIMIT, "raw block stuck at {got}/{n}");
        }
        return;
    }
    let got = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let got = &got;
        let len = frame.len();
        scope.spawn(move || {
            let mut mine = 0;
            while mine < n {
                let k = read_ours(b, len);
                if k == 0 {
                    std::hint::spin_loop();
                }
                mine += k;
                got.store(mine, Ordering::Release);
                assert!(start.elapsed() < LIMIT, "raw reader stuck at {mine}/{n}");
            }
        });
        let mut sent = 0;
        while sent < n {
            let inflight = sent - got.load(Ordering::Acquire);
            if inflight < WINDOW {
                sent += write_copies(a, frame, (n - sent).min(WINDOW - inflight));
            } else {
                std::hint::spin_loop();
            }
            assert!(start.elapsed() < LIMIT, "raw writer stuck at {sent}/{n}");
        }
    });
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "benches/tap.rs: run with `cargo bench --bench tap` (root); nothing to do under cargo test"
        );
        return;
    }
    if !netns::preconditions("benches/tap.rs", &[]) {
        return;
    }
    let pairs = env_usize("ROCE_TAP_PAIRS", 15).max(1);
    let block = env_usize("ROCE_TAP_BLOCK", 20_000).max(1);
    let ring = env_usize("ROCE_TAP_RING", RING).max(MSG) / MSG * MSG;
    let threads = env_usize("ROCE_TAP_THREADS", 2).clamp(1, 2);
    let n = netns::Netns::new("p");
    let ta = n.tap(0, MTU);
    let tb = n.tap(1, MTU);
    n.bridge_mtu(MTU);
    let mut h = [host(1, ta), host(2, tb)];
    let c = connect(&mut h, ring);
    let frame = write_only_frame();
    println!(
        "TAP pair, {threads} thread(s): {MSG}-byte RC RDMA WRITEs (frame {} B, MTU {MTU}), window {WINDOW}, \
         {} KiB regions, {pairs} pairs of {block}-message blocks",
        frame.len(),
        ring / 1024
    );
    // Warm-up: a short block of each.
    stack_block(&mut h, c, ring, block / 4, threads);
    raw_block(&mut h, &frame, block / 4, threads);
    let (mut st, mut raw, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for p in 0..pairs {
        let (s, r) = if p % 2 == 0 {
            let s = stack_block(&mut h, c, ring, block, threads);
            (s, raw_block(&mut h, &frame, block, threads))
        } else {
            let r = raw_block(&mut h, &frame, block, threads);
            (stack_block(&mut h, c, ring, block, threads), r)
        };
        println!(
            "pair {p:2}: stack {:6.1} MB/s (user {:5.0} + sys {:5.0} ns/msg)  raw {:6.1} MB/s \
             (user {:5.0} + sys {:5.0} ns/msg)  ratio {:.3}",
            s.goodput / 1e6,
            s.user_ns,
            s.sys_ns,
            r.goodput / 1e6,
            r.user_ns,
            r.sys_ns,
            s.goodput / r.goodput
        );
        ratio.push(s.goodput / r.goodput);
        st.push(s);
        raw.push(r);
    }
    let med = |v: &[Block], f: fn(&Block) -> f64| median(&mut v.iter().map(f).collect::<Vec<_>>());
    let (ms, mr) = (med(&st, |b| b.goodput), med(&raw, |b| b.goodput));
    let mq = median(&mut ratio);
    println!(
        "median stack: {:.1} MB/s = {:.2} Gbit/s, {:.0} msg/s (user {:.0} + sys {:.0} ns/msg)",
        ms / 1e6,
        ms * 8.0 / 1e9,
        ms / MSG as f64,
        med(&st, |b| b.user_ns),
        med(&st, |b| b.sys_ns)
    );
    println!(
        "median raw:   {:.1} MB/s = {:.2} Gbit/s (user {:.0} + sys {:.0} ns/frame)",
        mr / 1e6,
        mr * 8.0 / 1e9,
        med(&raw, |b| b.user_ns),
        med(&raw, |b| b.sys_ns)
    );
    println!(
        "ratio stack/raw: median of pairs {mq:.3} (min {:.3}, max {:.3}), of medians {:.3}; target >= 0.80",
        ratio[0],
        ratio[ratio.len() - 1],
        ms / mr
    );
    let (sa, sb) = (h[0].tap().stats(), h[1].tap().stats());
    println!(
        "TAP A: tx {} rx {} tx_dropped {}; TAP B: tx {} rx {}; A: NAKs (packet_seq_err) {}, ACK timeouts {}",
        sa.tx_frames,
        sa.rx_frames,
        sa.tx_dropped,
        sb.tx_frames,
        sb.rx_frames,
        h[0].dev.counters().packet_seq_err,
        h[0].dev.counters().local_ack_timeout_err
    );
}
