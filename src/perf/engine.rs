//! Set-up of the two devices, the client and server thread loops, and the
//! final verification.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use roce_stack::testing::Rng;
use roce_stack::time::Instant;
use roce_stack::transport::ack_timeout;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, AsyncEvent, Device, DeviceConfig, MrKeys, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};

use super::link::{self, Port, Tap};
use super::stats;
use super::{
    Figures, Limit, Op, PerfConfig, PerfError, PerfReport, Placement, ATOMIC_ADD, RETRANS_COUNTERS,
    STALL,
};

/// I/O virtual address of the client's (aligned) memory.
const CLIENT_BASE: u64 = 0x0000_7f00_0000_0000;
/// I/O virtual address of the server's (aligned) memory.
const SERVER_BASE: u64 = 0x0000_7e00_0000_0000;
/// Outstanding RDMA READ / ATOMIC per QP, both directions (`max_rd_atomic`,
/// `max_dest_rd_atomic`; ConnectX's limit, which perftest uses).
const RD_ATOMIC: u8 = 16;
/// RNR NAK timer code the server sends (0.01 ms, IBTA 1.7 Table 45); the
/// server keeps its receive queues full, so RNR is not expected.
const MIN_RNR_TIMER: u8 = 1;
/// Retry counts (IBTA maximum; perftest's default).
const RETRY_CNT: u8 = 7;
const RNR_RETRY: u8 = 7;
/// Frames handled, and frames transmitted, per loop iteration at most.
const BURST: usize = 64;
/// wr_id layout: QP index above bit 40, per-QP operation index below.
const WR_QP_SHIFT: u32 = 40;
const WR_IDX_MASK: u64 = (1 << WR_QP_SHIFT) - 1;

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABORT: u8 = 2;

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

/// The shape of each side's memory for `cfg`.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// WRITE/READ: bytes reserved per QP (the message, 4096-aligned).
    region: u64,
    /// SEND: bytes per message slot (256-aligned); ATOMIC: 8.
    stride: u64,
    /// Bytes of the client's and the server's memory.
    len: [u64; 2],
}

fn layout(cfg: &PerfConfig) -> Layout {
    let q = cfg.qps as u64;
    let depth = cfg.depth() as u64;
    let size = cfg.size.max(1);
    match cfg.op {
        Op::Write | Op::Read => {
            let region = align_up(size, 4096);
            Layout {
                region,
                stride: 0,
                len: [q * region, q * region],
            }
        }
        Op::Send => {
            let stride = align_up(size, 256);
            Layout {
                region: 0,
                stride,
                len: [q * depth * stride, q * depth * stride],
            }
        }
        Op::Atomic => Layout {
            region: 0,
            stride: 8,
            len: [q * depth * 8, 8],
        },
    }
}

/// Bytes of memory both sides register for `cfg`.
pub(crate) fn memory_needed(cfg: &PerfConfig) -> u64 {
    let l = layout(cfg);
    l.len[0] + l.len[1]
}

/// A side's memory region: `len` bytes at I/O virtual address `base`, which
/// sits `pad` bytes into the registered buffer (4096-aligned in memory).
#[derive(Debug, Clone, Copy)]
struct Mem {
    keys: MrKeys,
    base: u64,
    pad: usize,
    len: usize,
}

impl Mem {
    fn bytes<'a>(&self, dev: &'a Device) -> Option<&'a [u8]> {
        dev.mr(self.keys.lkey)?
            .as_slice()
            .get(self.pad..self.pad + self.len)
    }
    fn bytes_mut<'a>(&self, dev: &'a mut Device) -> Option<&'a mut [u8]> {
        dev.mr_mut(self.keys.lkey)?
            .as_mut_slice()
            .get_mut(self.pad..self.pad + self.len)
    }
}

/// Register `len` bytes, filled by `fill`, starting `extra` bytes past a
/// 4096-byte boundary in memory (normally 0: page-aligned), at I/O virtual
/// address `base`.
fn reg_aligned(
    dev: &mut Device,
    pd: u32,
    base: u64,
    len: usize,
    extra: usize,
    fill: impl FnOnce(&mut [u8]),
) -> Result<Mem, String> {
    let mut buf = vec![0u8; len + 4096 + extra];
    let addr = buf.as_ptr() as usize;
    let pad = (4096 - addr % 4096) % 4096 + extra;
    fill(&mut buf[pad..pad + len]);
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let keys = dev
        .reg_mr(pd, buf, base - pad as u64, access)
        .map_err(|e| format!("reg_mr: {e}"))?;
    Ok(Mem {
        keys,
        base,
        pad,
        len,
    })
}

/// Pseudo-random bytes (SplitMix64 of `seed`).
fn fill_random(out: &mut [u8], seed: u64) {
    let mut rng = Rng::new(seed);
    for chunk in out.chunks_mut(8) {
        let v = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// The payload pattern of QP `r`'s messages (SEND), from the run's seed.
fn send_pattern(seed: u64, r: usize, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size];
    fill_random(&mut p, seed ^ 0x5E4D_0000 ^ (r as u64) << 20);
    p
}

fn test_device(i: u8, netdev_mtu: usize) -> Device {
    Device::new(DeviceConfig {
        mac: [0x02, 0, 0, 0, 0, i + 1],
        gids: vec![Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, i + 1))],
        netdev_mtu,
        ..DeviceConfig::default()
    })
}

/// Bring QP pair `qpn` (client, server) to RTS, each addressed to the other,
/// as `roce_stack::testing::connect` does (IBTA 1.7 §10.3.1 and the attribute
/// table of ROCEV2-DIGEST §5).
fn connect(
    dev: &mut [Device; 2],
    qpn: [u32; 2],
    psn: [u32; 2],
    cfg: &PerfConfig,
) -> Result<(), String> {
    for s in 0..2 {
        let peer = 1 - s;
        let peer_gid = dev[peer].gid(0).ok_or("no GID")?;
        let peer_mac = dev[peer].config().mac;
        let d = &mut dev[s];
        let err = |what: &str, e| format!("modify_qp 0x{:06x} to {what}: {e}", qpn[s]);
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ..QpAttr::default()
        };
        d.modify_qp(
            qpn[s],
            &a,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
        .map_err(|e| err("INIT", e))?;
        a.qp_state = QpState::Rtr;
        a.ah_attr = AddressVector {
            dgid: peer_gid,
            dmac: peer_mac,
            hop_limit: 64,
            ..AddressVector::default()
        };
        a.path_mtu = cfg.mtu;
        a.dest_qp_num = qpn[peer];
        a.rq_psn = psn[peer];
        a.max_dest_rd_atomic = RD_ATOMIC;
        a.min_rnr_timer = MIN_RNR_TIMER;
        d.modify_qp(
            qpn[s],
            &a,
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER,
        )
        .map_err(|e| err("RTR", e))?;
        a.qp_state = QpState::Rts;
        a.sq_psn = psn[s];
        a.timeout = cfg.qp_timeout;
        a.retry_cnt = RETRY_CNT;
        a.rnr_retry = RNR_RETRY;
        a.max_rd_atomic = RD_ATOMIC;
        d.modify_qp(
            qpn[s],
            &a,
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC,
        )
        .map_err(|e| err("RTS", e))?;
    }
    Ok(())
}

/// State shared by the threads.
#[derive(Debug)]
struct Shared {
    start: std::time::Instant,
    state: AtomicU8,
    /// Operations the client has completed.
    progress: AtomicU64,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }
    fn set(&self, s: u8) {
        // ABORT wins over DONE.
        let _ = self
            .state
            .compare_exchange(RUNNING, s, Ordering::AcqRel, Ordering::Relaxed);
        if s == ABORT {
            self.state.store(ABORT, Ordering::Release);
        }
    }
}

/// Sets ABORT when dropped armed (a thread that returns early or panics stops
/// the other).
struct AbortGuard<'a>(&'a Shared, bool);

impl Drop for AbortGuard<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.set(ABORT);
        }
    }
}

/// Spin, then yield, then nap while there is nothing to do. The spin phase is
/// short: when both threads share one CPU (a busy 2-core machine), every hop
/// of a frame waits for the idle thread to give the CPU up.
#[derive(Debug, Default)]
struct Idle {
    spins: u32,
    since: u64,
}

impl Idle {
    /// Idle passes spent spinning before yielding.
    const SPIN: u32 = 4;
    /// Idle time after which the thread naps between passes, ns.
    const NAP_AFTER: u64 = 1_000_000;

    fn work(&mut self) {
        self.spins = 0;
    }
    fn wait(&mut self, now_ns: u64) {
        if self.spins == 0 {
            self.since = now_ns;
        }
        self.spins = self.spins.saturating_add(1);
        if self.spins < Self::SPIN {
            std::hint::spin_loop();
        } else if now_ns.saturating_sub(self.since) < Self::NAP_AFTER {
            thread::yield_now();
        } else {
            thread::sleep(Duration::from_micros(20));
        }
    }
}

fn blank_wc() -> Wc {
    Wc::EMPTY
}

fn event_error(side: &str, ev: AsyncEvent) -> String {
    match ev {
        AsyncEvent::QpFatal { qpn } => format!("{side} QP 0x{qpn:06x} entered the error state"),
        AsyncEvent::CqErr { cq } => format!("{side} CQ {cq} overran"),
        AsyncEvent::SqDrained { qpn } => format!("{side} QP 0x{qpn:06x} drained unexpectedly"),
    }
}

/// One pass of the frame path: received frames in, timers, transmit out.
/// Returns whether anything happened.
fn drive_rx(dev: &mut Device, port: &mut Port, now: Instant) -> bool {
    let mut work = false;
    for _ in 0..BURST {
        let Some(f) = port.recv() else { break };
        dev.handle_frame(now, f.frame());
        port.release(f);
        work = true;
    }
    if dev.poll_timeout().is_some_and(|t| t <= now) {
        dev.handle_timeout(now);
        work = true;
    }
    work
}

fn drive_tx(dev: &mut Device, port: &mut Port, now: Instant) -> bool {
    let mut work = false;
    for _ in 0..BURST {
        let Some(mut b) = port.take() else { break };
        match dev.poll_transmit(now, b.space()) {
            Some(n) => {
                port.send(b, n);
                work = true;
            }
            None => {
                port.keep(b);
                break;
            }
        }
    }
    work
}

/// The requester side (10.0.0.1).
struct Client {
    dev: Device,
    port: Port,
    cq: u32,
    qpn: Vec<u32>,
    mem: Mem,
    peer_base: u64,
    peer_rkey: u32,
    op: Op,
    lat: bool,
    size: u64,
    depth: u64,
    lay: Layout,
    /// Per-QP limit on posts (`-n`), or none (`-D`).
    iters: Option<u64>,
    duration_ns: Option<u64>,
    stall_ns: u64,
    posted: Vec<u64>,
    done: Vec<u64>,
    total_posted: u64,
    total_done: u64,
    tposted: Vec<u64>,
    tcompleted: Vec<u64>,
    samples: Vec<u64>,
    /// Latency test: when the outstanding operation was posted.
    lat_post: u64,
    next_qp: usize,
    first_post: Option<u64>,
    stop_posting: bool,
    /// ATOMIC: which original values `k × add` have been fetched.
    seen: Vec<u64>,
}

/// What the client hands back.
struct ClientOut {
    dev: Device,
    mem: Mem,
    sent: u64,
    dropped: u64,
    total_done: u64,
    tposted: Vec<u64>,
    tcompleted: Vec<u64>,
    samples: Vec<u64>,
}

impl Client {
    fn post(&mut self, r: usize, now: u64) -> Result<(), String> {
        let k = self.posted[r];
        let wr_id = (r as u64) << WR_QP_SHIFT | (k & WR_IDX_MASK);
        let (opcode, off, len) = match self.op {
            Op::Write => (WrOpcode::RdmaWrite, r as u64 * self.lay.region, self.size),
            Op::Read => (WrOpcode::RdmaRead, r as u64 * self.lay.region, self.size),
            Op::Send => {
                let off = (r as u64 * self.depth + k % self.depth) * self.lay.stride;
                // Stamp the per-QP sequence number into the message.
                let m = self.size.min(8) as usize;
                let mem = self.mem;
                let buf = mem.bytes_mut(&mut self.dev).ok_or("client MR vanished")?;
                let o = off as usize;
                buf[o..o + m].copy_from_slice(&k.to_le_bytes()[..m]);
                (WrOpcode::Send, off, self.size)
            }
            Op::Atomic => (
                WrOpcode::AtomicFetchAndAdd,
                (r as u64 * self.depth + k % self.depth) * 8,
                8,
            ),
        };
        let sge = [Sge {
            addr: self.mem.base + off,
            length: len as u32,
            lkey: self.mem.keys.lkey,
        }];
        let sg_list: &[Sge] = if len == 0 { &[] } else { &sge };
        let mut wr = SendWr::new(wr_id, opcode, sg_list);
        match self.op {
            Op::Write | Op::Read => {
                wr.remote_addr = self.peer_base + off;
                wr.rkey = self.peer_rkey;
            }
            Op::Atomic => {
                wr.remote_addr = self.peer_base;
                wr.rkey = self.peer_rkey;
                wr.compare_add = ATOMIC_ADD;
            }
            Op::Send => {}
        }
        self.dev
            .post_send(self.qpn[r], &wr)
            .map_err(|e| format!("post_send on QP 0x{:06x}: {e}", self.qpn[r]))?;
        self.posted[r] += 1;
        self.total_posted += 1;
        self.tposted.push(now);
        if self.first_post.is_none() {
            self.first_post = Some(now);
        }
        Ok(())
    }

    fn can_post(&self, r: usize) -> bool {
        let below_limit = match self.iters {
            Some(n) => self.posted[r] < n,
            None => true,
        };
        self.posted[r] - self.done[r] < self.depth && below_limit
    }

    /// Post new work; returns whether any was posted.
    fn post_work(&mut self, sh: &Shared) -> Result<bool, String> {
        if self.stop_posting {
            return Ok(false);
        }
        let q = self.qpn.len();
        if self.lat {
            if self.total_posted != self.total_done {
                return Ok(false);
            }
            for _ in 0..q {
                let r = self.next_qp;
                self.next_qp = (self.next_qp + 1) % q;
                if self.can_post(r) {
                    let t = sh.now_ns();
                    self.lat_post = t;
                    self.post(r, t)?;
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        let now = sh.now_ns();
        let mut any = false;
        loop {
            let mut round = false;
            for _ in 0..q {
                let r = self.next_qp;
                self.next_qp = (self.next_qp + 1) % q;
                if self.can_post(r) {
                    self.post(r, now)?;
                    round = true;
                }
            }
            if !round {
                break;
            }
            any = true;
        }
        Ok(any)
    }

    fn complete(&mut self, wc: &Wc, t: u64) -> Result<(), String> {
        let r = (wc.wr_id >> WR_QP_SHIFT) as usize;
        let k = wc.wr_id & WR_IDX_MASK;
        if wc.status != WcStatus::Success {
            return Err(format!(
                "client QP 0x{:06x}: {} #{k} completed with status {:?}",
                wc.qp_num, self.op, wc.status
            ));
        }
        if r >= self.qpn.len() || wc.qp_num != self.qpn[r] || k != self.done[r] & WR_IDX_MASK {
            return Err(format!(
                "client QP 0x{:06x}: completion wr_id {:#x} out of order (expected #{} of QP index {r})",
                wc.qp_num,
                wc.wr_id,
                self.done.get(r).copied().unwrap_or(0)
            ));
        }
        if self.op == Op::Atomic {
            let off = ((r as u64 * self.depth + k % self.depth) * 8) as usize;
            let buf = self.mem.bytes(&self.dev).ok_or("client MR vanished")?;
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[off..off + 8]);
            // Host byte order, as the responder stores it (ROCEV2-DIGEST §5).
            let orig = u64::from_ne_bytes(b);
            let idx = orig / ATOMIC_ADD;
            if orig % ATOMIC_ADD != 0 || idx >= self.total_posted {
                return Err(format!(
                    "FETCH_ADD #{k} on QP 0x{:06x} returned {orig}, not a multiple of {ATOMIC_ADD} below {}",
                    wc.qp_num,
                    self.total_posted * ATOMIC_ADD
                ));
            }
            let (w, bit) = ((idx / 64) as usize, idx % 64);
            if w >= self.seen.len() {
                self.seen.resize(w + 1, 0);
            }
            if self.seen[w] & (1 << bit) != 0 {
                return Err(format!(
                    "FETCH_ADD #{k} on QP 0x{:06x} returned {orig}, which an earlier one already returned",
                    wc.qp_num
                ));
            }
            self.seen[w] |= 1 << bit;
        }
        if self.lat {
            self.samples.push(t.saturating_sub(self.lat_post));
        }
        self.done[r] += 1;
        self.total_done += 1;
        self.tcompleted.push(t);
        Ok(())
    }

    fn finished(&self) -> bool {
        match self.iters {
            Some(n) => self.done.iter().all(|&d| d == n),
            None => self.stop_posting && self.total_done == self.total_posted,
        }
    }

    fn run(mut self, sh: &Shared) -> Result<ClientOut, String> {
        let mut guard = AbortGuard(sh, true);
        let mut wcs = [blank_wc(); 64];
        let mut idle = Idle::default();
        let mut last_progress = sh.now_ns();
        loop {
            let now_ns = sh.now_ns();
            let now = Instant::from_nanos(now_ns);
            let mut work = drive_rx(&mut self.dev, &mut self.port, now);
            // Completions first: an error completion says more than the
            // QP-fatal event that follows it.
            loop {
                let n = self.dev.poll_cq(self.cq, &mut wcs);
                if n == 0 {
                    break;
                }
                let t = sh.now_ns();
                for wc in &wcs[..n] {
                    self.complete(wc, t)?;
                }
                work = true;
                last_progress = t;
                sh.progress.store(self.total_done, Ordering::Relaxed);
            }
            if let Some(ev) = self.dev.poll_event() {
                return Err(event_error("client", ev));
            }
            if let (Some(d), Some(f)) = (self.duration_ns, self.first_post) {
                if now_ns >= f + d {
                    self.stop_posting = true;
                }
            }
            if self.finished() {
                break;
            }
            work |= self.post_work(sh)?;
            work |= drive_tx(&mut self.dev, &mut self.port, now);
            if sh.state() == ABORT {
                return Err("the server side failed".into());
            }
            if work {
                idle.work();
            } else {
                if now_ns.saturating_sub(last_progress) > self.stall_ns {
                    return Err(format!(
                        "stalled: no completion for {:.1} s ({} of {} operations completed; client counters: {})",
                        self.stall_ns as f64 / 1e9,
                        self.total_done,
                        self.iters
                            .map_or("?".to_string(), |n| n.saturating_mul(self.qpn.len() as u64).to_string()),
                        nonzero_counters(&self.dev)
                    ));
                }
                idle.wait(now_ns);
            }
        }
        sh.set(DONE);
        guard.1 = false;
        Ok(ClientOut {
            sent: self.port.sent,
            dropped: self.port.dropped,
            dev: self.dev,
            mem: self.mem,
            total_done: self.total_done,
            tposted: self.tposted,
            tcompleted: self.tcompleted,
            samples: self.samples,
        })
    }
}

fn nonzero_counters(dev: &Device) -> String {
    let v: Vec<String> = dev
        .counters()
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    v.join(" ")
}

/// The responder side (10.0.0.2).
struct Server {
    dev: Device,
    port: Port,
    cq: u32,
    qpn: Vec<u32>,
    qp_index: HashMap<u32, usize>,
    mem: Mem,
    op: Op,
    size: u64,
    depth: u64,
    lay: Layout,
    /// SEND: next sequence number expected per QP.
    expect: Vec<u64>,
    /// SEND: each QP's payload pattern.
    patterns: Vec<Vec<u8>>,
    received: u64,
}

struct ServerOut {
    dev: Device,
    mem: Mem,
    sent: u64,
    dropped: u64,
    received: u64,
}

impl Server {
    fn post_recv(&mut self, r: usize, slot: u64) -> Result<(), String> {
        let off = (r as u64 * self.depth + slot) * self.lay.stride;
        let sge = [Sge {
            addr: self.mem.base + off,
            length: self.size as u32,
            lkey: self.mem.keys.lkey,
        }];
        let sg_list: &[Sge] = if self.size == 0 { &[] } else { &sge };
        let wr = RecvWr {
            wr_id: (r as u64) << 32 | slot,
            sg_list,
        };
        self.dev
            .post_recv(self.qpn[r], &wr)
            .map_err(|e| format!("post_recv on QP 0x{:06x}: {e}", self.qpn[r]))
    }

    fn complete(&mut self, wc: &Wc) -> Result<(), String> {
        if wc.status != WcStatus::Success {
            return Err(format!(
                "server QP 0x{:06x}: receive completed with status {:?}",
                wc.qp_num, wc.status
            ));
        }
        if wc.opcode != WcOpcode::Recv {
            return Err(format!(
                "server QP 0x{:06x}: unexpected completion {:?}",
                wc.qp_num, wc.opcode
            ));
        }
        let r = (wc.wr_id >> 32) as usize;
        let slot = wc.wr_id & 0xFFFF_FFFF;
        if self.qp_index.get(&wc.qp_num) != Some(&r) {
            return Err(format!(
                "server QP 0x{:06x}: receive wr_id {:#x} belongs to another QP",
                wc.qp_num, wc.wr_id
            ));
        }
        let k = self.expect[r];
        if u64::from(wc.byte_len) != self.size {
            return Err(format!(
                "server QP 0x{:06x}: message #{k} is {} bytes, expected {}",
                wc.qp_num, wc.byte_len, self.size
            ));
        }
        let off = ((r as u64 * self.depth + slot) * self.lay.stride) as usize;
        let size = self.size as usize;
        let data = self
            .mem
            .bytes(&self.dev)
            .and_then(|b| b.get(off..off + size))
            .ok_or("server MR vanished")?;
        let m = size.min(8);
        if data[..m] != k.to_le_bytes()[..m] {
            let mut got = [0u8; 8];
            got[..m].copy_from_slice(&data[..m]);
            return Err(format!(
                "server QP 0x{:06x}: message #{k} carries sequence number {} (lost, duplicated or reordered message)",
                wc.qp_num,
                u64::from_le_bytes(got)
            ));
        }
        let pat = &self.patterns[r];
        if data[m..] != pat[m..] {
            let at = m + data[m..]
                .iter()
                .zip(&pat[m..])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(format!(
                "server QP 0x{:06x}: message #{k} byte {at} is {:#04x}, expected {:#04x}",
                wc.qp_num, data[at], pat[at]
            ));
        }
        self.expect[r] += 1;
        self.received += 1;
        self.post_recv(r, slot)
    }

    fn poll(&mut self, wcs: &mut [Wc]) -> Result<bool, String> {
        let mut work = false;
        loop {
            let n = self.dev.poll_cq(self.cq, wcs);
            if n == 0 {
                return Ok(work);
            }
            for wc in &wcs[..n] {
                self.complete(wc)?;
            }
            work = true;
        }
    }

    fn run(mut self, sh: &Shared) -> Result<ServerOut, String> {
        let mut guard = AbortGuard(sh, true);
        let mut wcs = [blank_wc(); 64];
        let mut idle = Idle::default();
        loop {
            let now_ns = sh.now_ns();
            let now = Instant::from_nanos(now_ns);
            let mut work = drive_rx(&mut self.dev, &mut self.port, now);
            work |= self.poll(&mut wcs)?;
            if let Some(ev) = self.dev.poll_event() {
                return Err(event_error("server", ev));
            }
            work |= drive_tx(&mut self.dev, &mut self.port, now);
            match sh.state() {
                RUNNING => {}
                DONE => {
                    self.poll(&mut wcs)?;
                    break;
                }
                _ => return Err("stopped: the client side failed".into()),
            }
            if work {
                idle.work();
            } else {
                idle.wait(now_ns);
            }
        }
        guard.1 = false;
        Ok(ServerOut {
            sent: self.port.sent,
            dropped: self.port.dropped,
            dev: self.dev,
            mem: self.mem,
            received: self.received,
        })
    }
}

/// Build both sides, run them, verify, report.
pub(crate) fn run(
    cfg: &PerfConfig,
    placement: &Placement,
    mut progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    let start = std::time::Instant::now();
    let tap = match &cfg.pcap {
        Some(p) => Some(Arc::new(Tap::create(p, start).map_err(PerfError::Pcap)?)),
        None => None,
    };
    let (mut client, server) = build(cfg, placement, tap.clone()).map_err(PerfError::Run)?;
    let sh = Shared {
        start,
        state: AtomicU8::new(RUNNING),
        progress: AtomicU64::new(0),
    };
    client.stall_ns = {
        let t = ack_timeout(cfg.qp_timeout).unwrap_or_default() * 3;
        t.max(STALL).as_nanos() as u64
    };
    let (c, s) = thread::scope(|scope| {
        let hc = thread::Builder::new()
            .name("roce-perf-client".into())
            .spawn_scoped(scope, || client.run(&sh));
        let hs = thread::Builder::new()
            .name("roce-perf-server".into())
            .spawn_scoped(scope, || server.run(&sh));
        let (hc, hs) = match (hc, hs) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                sh.set(ABORT);
                fn err<T>(what: &str) -> Result<T, String> {
                    Err(format!("cannot start the {what} thread"))
                }
                let c = match a {
                    Ok(h) => h.join().unwrap_or_else(|_| err("client")),
                    Err(_) => err("client"),
                };
                let s = match b {
                    Ok(h) => h.join().unwrap_or_else(|_| err("server")),
                    Err(_) => err("server"),
                };
                return (c, s);
            }
        };
        let mut last = std::time::Instant::now();
        while !(hc.is_finished() && hs.is_finished()) {
            thread::sleep(Duration::from_millis(2));
            if last.elapsed() >= Duration::from_millis(100) {
                last = std::time::Instant::now();
                if let Some(p) = progress.as_mut() {
                    p(sh.progress.load(Ordering::Relaxed), start.elapsed());
                }
            }
        }
        let c = hc
            .join()
            .unwrap_or_else(|_| Err("the client thread panicked".into()));
        let s = hs
            .join()
            .unwrap_or_else(|_| Err("the server thread panicked".into()));
        (c, s)
    });
    let pcap_frames = match &tap {
        Some(t) => t.finish().map_err(PerfError::Pcap)?,
        None => 0,
    };
    let (c, s) = match (c, s) {
        (Ok(c), Ok(s)) => (c, s),
        // Report the side that failed first, not the one that was stopped.
        (Err(e), Err(f)) if e.starts_with("the server side failed") => {
            return Err(PerfError::Run(f))
        }
        (Err(e), _) | (_, Err(e)) => return Err(PerfError::Run(e)),
    };
    let verified = verify(cfg, &c, &s)?;
    let q = u64::from(cfg.qps);
    let mut samples = c.samples;
    let figures = if cfg.lat {
        Figures::Lat(stats::lat(&mut samples))
    } else {
        Figures::Bw(stats::bw(cfg.size, &c.tposted, &c.tcompleted))
    };
    let retrans = RETRANS_COUNTERS
        .iter()
        .filter_map(|&name| {
            let a = c.dev.counters().get(name).unwrap_or(0);
            let b = s.dev.counters().get(name).unwrap_or(0);
            (a != 0 || b != 0).then_some((name, a, b))
        })
        .collect();
    Ok(PerfReport {
        config: cfg.clone(),
        iterations: c.total_done / q,
        total_ops: c.total_done,
        figures,
        retrans,
        frames_sent: [c.sent, s.sent],
        frames_dropped: [c.dropped, s.dropped],
        pcap_frames,
        verified,
    })
}

/// Create the devices, memory and QPs of both sides, connected.
fn build(
    cfg: &PerfConfig,
    placement: &Placement,
    tap: Option<Arc<Tap>>,
) -> Result<(Client, Server), String> {
    let mtu = cfg.mtu.bytes();
    let netdev_mtu = if mtu + 80 <= 1500 { 1500 } else { 9000 };
    let mut dev = [test_device(0, netdev_mtu), test_device(1, netdev_mtu)];
    let lay = layout(cfg);
    let q = cfg.qps as usize;
    let depth = u64::from(cfg.depth());
    let size = cfg.size as usize;
    let pd = [dev[0].alloc_pd(), dev[1].alloc_pd()];
    let cqe = q * (depth as usize) * 2 + 64;
    let cq = [dev[0].create_cq(cqe), dev[1].create_cq(cqe)];
    let rx_depth = if cfg.op == Op::Send { cfg.depth() } else { 1 };
    let mut qpn = vec![[0u32; 2]; q];
    for pair in qpn.iter_mut() {
        for s in 0..2 {
            let init = QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq[s],
                recv_cq: cq[s],
                cap: QpCap {
                    max_send_wr: cfg.depth(),
                    max_recv_wr: rx_depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            };
            pair[s] = dev[s]
                .create_qp(pd[s], &init)
                .map_err(|e| format!("create_qp: {e}"))?;
        }
    }
    // Initial PSNs from the seed (perftest draws them at random).
    let mut rng = Rng::new(cfg.seed ^ 0x0050_534E);
    for pair in &qpn {
        let psn = [
            (rng.next_u64() & 0xFF_FFFF) as u32,
            (rng.next_u64() & 0xFF_FFFF) as u32,
        ];
        connect(&mut dev, *pair, psn, cfg)?;
    }
    let seed = cfg.seed;
    let [mc, ms] = placement.mr_offset;
    let len = lay.len.map(|l| l as usize);
    let (cmem, smem) = match cfg.op {
        Op::Write => (
            reg_aligned(&mut dev[0], pd[0], CLIENT_BASE, len[0], mc, |b| {
                fill_random(b, seed ^ 0xC11E)
            })?,
            reg_aligned(&mut dev[1], pd[1], SERVER_BASE, len[1], ms, |b| {
                b.fill(0x5A)
            })?,
        ),
        Op::Read => (
            reg_aligned(&mut dev[0], pd[0], CLIENT_BASE, len[0], mc, |b| {
                b.fill(0x5A)
            })?,
            reg_aligned(&mut dev[1], pd[1], SERVER_BASE, len[1], ms, |b| {
                fill_random(b, seed ^ 0x5E4E)
            })?,
        ),
        Op::Send => {
            let stride = lay.stride as usize;
            let c = reg_aligned(&mut dev[0], pd[0], CLIENT_BASE, len[0], mc, |b| {
                for r in 0..q {
                    let p = send_pattern(seed, r, size);
                    for slot in 0..depth as usize {
                        let o = (r * depth as usize + slot) * stride;
                        b[o..o + size].copy_from_slice(&p);
                    }
                }
            })?;
            let s = reg_aligned(&mut dev[1], pd[1], SERVER_BASE, len[1], ms, |b| {
                b.fill(0x5A)
            })?;
            (c, s)
        }
        Op::Atomic => (
            reg_aligned(&mut dev[0], pd[0], CLIENT_BASE, len[0], mc, |b| {
                b.fill(0x5A)
            })?,
            reg_aligned(&mut dev[1], pd[1], SERVER_BASE, len[1], ms, |b| b.fill(0))?,
        ),
    };
    let (cport, sport) = link::wire(
        mtu + 256,
        cfg.loss,
        cfg.seed,
        tap,
        placement.frame_page_offset,
    );
    let [d0, d1] = dev;
    let iters = match cfg.limit {
        Limit::Iters(n) => Some(n),
        Limit::Duration(_) => None,
    };
    let duration_ns = match cfg.limit {
        Limit::Duration(d) => Some(d.as_nanos() as u64),
        Limit::Iters(_) => None,
    };
    let expected = iters.map_or(1 << 16, |n| n.saturating_mul(q as u64).min(1 << 24)) as usize;
    let client = Client {
        dev: d0,
        port: cport,
        cq: cq[0],
        qpn: qpn.iter().map(|p| p[0]).collect(),
        mem: cmem,
        peer_base: smem.base,
        peer_rkey: smem.keys.rkey,
        op: cfg.op,
        lat: cfg.lat,
        size: cfg.size,
        depth,
        lay,
        iters,
        duration_ns,
        stall_ns: STALL.as_nanos() as u64,
        posted: vec![0; q],
        done: vec![0; q],
        total_posted: 0,
        total_done: 0,
        tposted: Vec::with_capacity(expected),
        tcompleted: Vec::with_capacity(expected),
        samples: Vec::with_capacity(if cfg.lat { expected } else { 0 }),
        lat_post: 0,
        next_qp: 0,
        first_post: None,
        stop_posting: false,
        seen: Vec::new(),
    };
    let mut server = Server {
        dev: d1,
        port: sport,
        cq: cq[1],
        qp_index: qpn.iter().enumerate().map(|(r, p)| (p[1], r)).collect(),
        qpn: qpn.iter().map(|p| p[1]).collect(),
        mem: smem,
        op: cfg.op,
        size: cfg.size,
        depth,
        lay,
        expect: vec![0; q],
        patterns: Vec::new(),
        received: 0,
    };
    if server.op == Op::Send {
        server.patterns = (0..q).map(|r| send_pattern(seed, r, size)).collect();
        for r in 0..q {
            for slot in 0..depth {
                server.post_recv(r, slot)?;
            }
        }
    }
    Ok((client, server))
}

/// The first byte where `got` and `want` differ.
fn first_diff(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter().zip(want).position(|(a, b)| a != b)
}

/// Check the data (the module documentation of `perf` lists what).
fn verify(cfg: &PerfConfig, c: &ClientOut, s: &ServerOut) -> Result<String, PerfError> {
    let vfail = |m: String| PerfError::Verify(m);
    let cb = c
        .mem
        .bytes(&c.dev)
        .ok_or_else(|| vfail("client MR missing".into()))?;
    let sb = s
        .mem
        .bytes(&s.dev)
        .ok_or_else(|| vfail("server MR missing".into()))?;
    let q = cfg.qps as usize;
    let size = cfg.size as usize;
    let lay = layout(cfg);
    match cfg.op {
        Op::Write | Op::Read => {
            let (got, want, who) = if cfg.op == Op::Write {
                (sb, cb, "server MR differs from the client's data")
            } else {
                (cb, sb, "client MR differs from the server's data")
            };
            if c.total_done == 0 {
                return Err(vfail("no operation completed".into()));
            }
            for r in 0..q {
                let o = r * lay.region as usize;
                if let Some(i) = first_diff(&got[o..o + size], &want[o..o + size]) {
                    return Err(vfail(format!(
                        "QP {r}: {who} at byte {i} of {size} ({:#04x}, expected {:#04x})",
                        got[o + i],
                        want[o + i]
                    )));
                }
            }
            let what = if cfg.op == Op::Write {
                "server MR equals the client's pattern"
            } else {
                "client MR equals the server's pattern"
            };
            Ok(format!("{what}, {q} QP(s) x {size} bytes"))
        }
        Op::Send => {
            if s.received != c.total_done {
                return Err(vfail(format!(
                    "the server received {} messages, the client completed {}",
                    s.received, c.total_done
                )));
            }
            Ok(format!(
                "{} messages received, each with its length, sequence number and {size} bytes checked",
                s.received
            ))
        }
        Op::Atomic => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&sb[..8]);
            let counter = u64::from_ne_bytes(b);
            let want = c.total_done * ATOMIC_ADD;
            if counter != want {
                return Err(vfail(format!(
                    "the server's counter is {counter}, expected {} FETCH_ADDs x {ATOMIC_ADD} = {want}",
                    c.total_done
                )));
            }
            Ok(format!(
                "counter = {} FETCH_ADDs x {ATOMIC_ADD} = {counter}, every fetched value distinct",
                c.total_done
            ))
        }
    }
}
