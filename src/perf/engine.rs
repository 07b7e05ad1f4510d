//! Set-up of the two devices, the client and server thread loops, and the
//! final verification.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use roce_stack::backend::FrameIo;
use roce_stack::testing::Rng;
use roce_stack::time::Instant;
use roce_stack::transport::ack_timeout;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, AsyncEvent, Device, DeviceConfig, MrKeys, QpAttr, QpAttrMask, QpCap, QpInitAttr,
    QpState, QpType, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};

use super::stats;
use super::{
    Figures, Limit, Op, PerfConfig, PerfError, PerfReport, Placement, ATOMIC_ADD, DROP_COUNTERS,
    RETRANS_COUNTERS, STALL,
};
use roce_io::adapt::{FaultConfig, FaultIo, FrameTap, Tee, TeeIo};
use roce_io::mem::{self, MemConfig};
use roce_io::pcap::PcapTap;
use roce_io::pump;
use roce_io::udp::{UdpConfig, UdpIo};
use roce_io::{mac_for_ip, BackendKind};

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
/// The in-process `udp` run's two sides (loopback addresses).
const UDP_LOOPBACK: [Ipv4Addr; 2] = [Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2)];
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

/// Operations a BW run stamps (post and completion time, 16 bytes each) at
/// most: a run of more operations counts completions per interval instead
/// (as a `-D` run does). perftest keeps no stamps at all above 20,000
/// iterations (its peak is then not measured).
pub(crate) const MAX_STAMPED_OPS: u64 = 1 << 20;

/// Latency samples kept at most (8 bytes each); beyond, a uniform sample of
/// this many (reservoir sampling) gives the percentiles, and running sums
/// the exact minimum, maximum, mean and standard deviation.
pub(crate) const MAX_LAT_SAMPLES: usize = 1 << 20;

/// Where the memory of a run goes, bytes (both sides of an in-process run;
/// a two-process run holds about half, but both ends apply the same bound
/// so that they refuse the same configurations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryNeeded {
    /// Memory regions (with their alignment allowance) and the verification
    /// copy of a pattern.
    pub(crate) regions: u64,
    /// QPs (send and receive rings with their WQE slots, responder
    /// resources), CQs and the per-QP bookkeeping of the loops.
    pub(crate) queues: u64,
    /// Frame buffers, per-operation stamps and latency samples.
    pub(crate) buffers: u64,
}

impl MemoryNeeded {
    pub(crate) fn total(&self) -> u64 {
        self.regions
            .saturating_add(self.queues)
            .saturating_add(self.buffers)
    }
}

/// The QP attributes a side creates its QPs with.
fn qp_init(cfg: &PerfConfig, cq: u32) -> QpInitAttr {
    let rx_depth = if cfg.op == Op::Send { cfg.depth() } else { 1 };
    QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: cfg.depth(),
            max_recv_wr: rx_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

/// Completions a side's CQ holds.
fn cq_entries(cfg: &PerfConfig) -> u64 {
    u64::from(cfg.qps) * u64::from(cfg.depth()) * 2 + 64
}

/// The memory a run of `cfg` needs (every structure whose size follows from
/// the configuration: this bounds what a command line or a peer's `config`
/// line can make the process allocate).
pub(crate) fn memory_needed(cfg: &PerfConfig) -> MemoryNeeded {
    let l = layout(cfg);
    let q = u64::from(cfg.qps);
    let size = cfg.size;
    // Alignment allowance of each region, and the verification copy of the
    // larger pattern (two-process WRITE/READ).
    let regions = l.len[0] + l.len[1] + 2 * 4096 + l.len[0].max(l.len[1]);
    let per_qp = qp_init(cfg, 0).footprint(RD_ATOMIC)
        // wr counters, QP maps, SEND patterns
        + 64
        + if cfg.op == Op::Send { size } else { 0 };
    let cq = cq_entries(cfg) * std::mem::size_of::<Wc>() as u64;
    let queues = 2u64
        .saturating_mul(q.saturating_mul(per_qp))
        .saturating_add(2 * cq);
    let ops = match cfg.limit {
        Limit::Iters(n) => n.saturating_mul(q),
        Limit::Duration(_) => 0,
    };
    let stamps = if cfg.lat {
        ops.min(MAX_LAT_SAMPLES as u64) * 8
    } else if ops <= MAX_STAMPED_OPS {
        ops * 16
    } else {
        // Counts per interval (-D, or more operations than are stamped).
        0
    };
    // ATOMIC: one bit per operation to check that fetched values are
    // distinct.
    let seen = if cfg.op == Op::Atomic { ops / 8 } else { 0 };
    let frames = 2 * mem::DEFAULT_POOL as u64 * frame_cap(cfg) as u64;
    MemoryNeeded {
        regions,
        queues,
        buffers: stamps.saturating_add(seen).saturating_add(frames),
    }
}

/// A side's memory region: `len` bytes at I/O virtual address `base`,
/// registered exactly (no byte before `base` or from `base + len` on is part
/// of the MR, so the responder refuses an access past the advertised
/// length: IBTA 1.7 §9.7.4.1.5 C9-88).
#[derive(Debug, Clone, Copy)]
struct Mem {
    keys: MrKeys,
    base: u64,
    len: usize,
}

impl Mem {
    fn bytes<'a>(&self, dev: &'a Device) -> Option<&'a [u8]> {
        dev.mr(self.keys.lkey)?.as_slice().get(..self.len)
    }
    fn bytes_mut<'a>(&self, dev: &'a mut Device) -> Option<&'a mut [u8]> {
        dev.mr_mut(self.keys.lkey)?
            .as_mut_slice()
            .get_mut(..self.len)
    }
}

/// Register `len` bytes, filled by `fill`, starting `extra` bytes past a
/// 4096-byte boundary in memory (normally 0: page-aligned), at I/O virtual
/// address `base` under R_Key `rkey`. The buffer is allocated with room for
/// the alignment; only the `len` bytes are registered.
fn reg_aligned(
    dev: &mut Device,
    pd: u32,
    (base, rkey): (u64, u32),
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
        .reg_mr_window(pd, buf, pad..pad + len, base, access, Some(rkey))
        .map_err(|e| format!("reg_mr: {e}"))?;
    Ok(Mem { keys, base, len })
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

/// The R_Key and I/O virtual address of each side's memory region
/// `[client, server]`, from the seed: random 32-bit keys (never 0) and
/// page-aligned VAs at a random page below the fixed bases, so neither can
/// be guessed by a blind peer unless `--seed` is given.
pub(crate) fn mr_keys(cfg: &PerfConfig) -> [(u64, u32); 2] {
    let mut rng = Rng::new(cfg.seed ^ 0x524B_4559_5641);
    let mut one = |base: u64| {
        let page = rng.next_u64() & 0xF_FFFF;
        let rkey = (rng.next_u64() as u32).max(1);
        (base + (page << 12), rkey)
    };
    [one(CLIENT_BASE), one(SERVER_BASE)]
}

/// Which end of the test a device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The requester (perftest's client).
    Client,
    /// The responder (perftest's server).
    Server,
}

impl Role {
    fn index(self) -> usize {
        match self {
            Role::Client => 0,
            Role::Server => 1,
        }
    }
}

/// The device configuration of a side at `ip` / `mac`: GID 0 is the IP, and
/// a 9000-byte Ethernet when the path MTU needs one (2048 and 4096; a
/// device's active MTU is its Ethernet MTU − 80, as in rxe), 1500 otherwise.
pub(crate) fn device_config(cfg: &PerfConfig, ip: IpAddr, mac: [u8; 6]) -> DeviceConfig {
    let mtu = cfg.mtu.bytes();
    DeviceConfig {
        mac,
        gids: vec![Gid::from_ip(ip)],
        netdev_mtu: if mtu + 80 <= 1500 { 1500 } else { 9000 },
        ..DeviceConfig::default()
    }
}

/// The largest frame a run sends, bytes (path MTU + headers, rounded up).
pub(crate) fn frame_cap(cfg: &PerfConfig) -> usize {
    cfg.mtu.bytes() + 256
}

/// The initial PSNs `[client, server]` of each QP pair, 24 random bits each
/// from the seed (perftest: `lrand48() & 0xffffff` per QP; the seed is
/// itself random unless `--seed` is given, so a blind peer cannot guess
/// them).
pub(crate) fn initial_psns(cfg: &PerfConfig) -> Vec<[u32; 2]> {
    let mut rng = Rng::new(cfg.seed ^ 0x0050_534E);
    (0..cfg.qps)
        .map(|_| {
            [
                (rng.next_u64() & 0xFF_FFFF) as u32,
                (rng.next_u64() & 0xFF_FFFF) as u32,
            ]
        })
        .collect()
}

/// What one side tells the other to connect to it: addresses, QPNs and
/// initial PSNs, and its memory region (exchanged over the TCP side channel
/// between processes, handed over directly in one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// GID 0.
    pub(crate) gid: Gid,
    /// MAC address.
    pub(crate) mac: [u8; 6],
    /// The UDP socket peers send to (`udp` backend).
    pub(crate) udp: Option<SocketAddr>,
    /// I/O virtual address of the memory region.
    pub(crate) va: u64,
    /// Its R_Key.
    pub(crate) rkey: u32,
    /// Its length, bytes.
    pub(crate) len: u64,
    /// `(QPN, initial send PSN)` of each QP, in QP-index order.
    pub(crate) qps: Vec<(u32, u32)>,
}

/// One side, set up and not yet connected: device, PD, CQ, QPs in RESET,
/// memory registered.
pub(crate) struct Local {
    dev: Device,
    cq: u32,
    qpn: Vec<u32>,
    psn: Vec<u32>,
    mem: Mem,
    role: Role,
}

impl Local {
    /// What the peer needs to connect to this side.
    pub(crate) fn endpoint(&self, udp: Option<SocketAddr>) -> Endpoint {
        Endpoint {
            gid: self.dev.gid(0).unwrap_or_default(),
            mac: self.dev.config().mac,
            udp,
            va: self.mem.base,
            rkey: self.mem.keys.rkey,
            len: self.mem.len as u64,
            qps: self
                .qpn
                .iter()
                .copied()
                .zip(self.psn.iter().copied())
                .collect(),
        }
    }
}

/// Create a side's PD, CQ, QPs (RESET) and memory region on `dev`; `psn`
/// holds each QP's initial send PSN; the region starts `mr_offset` bytes
/// past a page boundary (0 normally; benches vary it).
pub(crate) fn build_local(
    cfg: &PerfConfig,
    role: Role,
    mut dev: Device,
    psn: Vec<u32>,
    mr_offset: usize,
) -> Result<Local, String> {
    let lay = layout(cfg);
    let q = cfg.qps as usize;
    let depth = u64::from(cfg.depth());
    let size = cfg.size as usize;
    let seed = cfg.seed;
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(cq_entries(cfg) as usize);
    let init = qp_init(cfg, cq);
    let mut qpn = Vec::with_capacity(q);
    for _ in 0..q {
        qpn.push(
            dev.create_qp(pd, &init)
                .map_err(|e| format!("create_qp: {e}"))?,
        );
    }
    let len = lay.len[role.index()] as usize;
    let base = mr_keys(cfg)[role.index()];
    let mc = mr_offset;
    let mem = match (role, cfg.op) {
        (Role::Client, Op::Write) => {
            reg_aligned(&mut dev, pd, base, len, mc, |b| client_pattern(b, seed))?
        }
        (Role::Server, Op::Read) => {
            reg_aligned(&mut dev, pd, base, len, mc, |b| server_pattern(b, seed))?
        }
        (Role::Client, Op::Send) => {
            let stride = lay.stride as usize;
            reg_aligned(&mut dev, pd, base, len, mc, |b| {
                for r in 0..q {
                    let p = send_pattern(seed, r, size);
                    for slot in 0..depth as usize {
                        let o = (r * depth as usize + slot) * stride;
                        b[o..o + size].copy_from_slice(&p);
                    }
                }
            })?
        }
        (Role::Server, Op::Atomic) => reg_aligned(&mut dev, pd, base, len, mc, |b| b.fill(0))?,
        _ => reg_aligned(&mut dev, pd, base, len, mc, |b| b.fill(0x5A))?,
    };
    Ok(Local {
        dev,
        cq,
        qpn,
        psn,
        mem,
        role,
    })
}

/// The client's WRITE source pattern (and what the server must hold after).
fn client_pattern(b: &mut [u8], seed: u64) {
    fill_random(b, seed ^ 0xC11E);
}

/// The server's READ source pattern (and what the client must hold after).
fn server_pattern(b: &mut [u8], seed: u64) {
    fill_random(b, seed ^ 0x5E4E);
}

/// Bring every QP of `local` to RTS, addressed to `peer` (IBTA 1.7
/// §10.3.1 and the attribute table of ROCEV2-DIGEST §5, as
/// `roce_stack::testing::connect` does).
pub(crate) fn connect_local(
    local: &mut Local,
    peer: &Endpoint,
    cfg: &PerfConfig,
) -> Result<(), String> {
    if peer.qps.len() != local.qpn.len() {
        return Err(format!(
            "the peer has {} QPs, this side {}",
            peer.qps.len(),
            local.qpn.len()
        ));
    }
    for (r, &qpn) in local.qpn.iter().enumerate() {
        let (peer_qpn, peer_psn) = peer.qps[r];
        let d = &mut local.dev;
        let err = |what: &str, e| format!("modify_qp 0x{qpn:06x} to {what}: {e}");
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ..QpAttr::default()
        };
        d.modify_qp(
            qpn,
            &a,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
        .map_err(|e| err("INIT", e))?;
        a.qp_state = QpState::Rtr;
        a.ah_attr = AddressVector {
            dgid: peer.gid,
            dmac: peer.mac,
            hop_limit: 64,
            ..AddressVector::default()
        };
        a.path_mtu = cfg.mtu;
        a.dest_qp_num = peer_qpn;
        a.rq_psn = peer_psn;
        a.max_dest_rd_atomic = RD_ATOMIC;
        a.min_rnr_timer = MIN_RNR_TIMER;
        d.modify_qp(
            qpn,
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
        a.sq_psn = local.psn[r];
        a.timeout = cfg.qp_timeout;
        a.retry_cnt = RETRY_CNT;
        a.rnr_retry = RNR_RETRY;
        a.max_rd_atomic = RD_ATOMIC;
        d.modify_qp(
            qpn,
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

/// The error of a server loop stopped because the other side failed.
pub(crate) const STOPPED_BY_PEER: &str = "stopped: the client side failed";

/// State shared by the threads.
#[derive(Debug)]
pub(crate) struct Shared {
    start: std::time::Instant,
    state: AtomicU8,
    /// Operations the client has completed.
    progress: AtomicU64,
    /// When the server last received a frame (ns since `start`).
    last_rx: AtomicU64,
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
///
/// A poll-mode backend (DPDK: each process owns its lcore, and the driver
/// only moves frames when polled) busy-polls instead, as DPDK applications
/// and perftest do: a nap there holds the peer's frames in the ring for a
/// whole timer slice (~60-100 µs on these machines). Such a loop warns at
/// its start when its CPU is busy-polled by another `roce` process
/// (`perf::cpu`).
#[derive(Debug, Default)]
struct Idle {
    spins: u32,
    since: u64,
    busy_poll: bool,
}

impl Idle {
    /// Idle passes spent spinning before yielding.
    const SPIN: u32 = 4;
    /// Idle time after which the thread naps between passes, ns.
    const NAP_AFTER: u64 = 1_000_000;

    fn new(backend: BackendKind) -> Idle {
        Idle {
            busy_poll: backend == BackendKind::Dpdk,
            ..Idle::default()
        }
    }
    fn work(&mut self) {
        self.spins = 0;
    }
    fn wait(&mut self, now_ns: u64) {
        if self.busy_poll {
            std::hint::spin_loop();
            return;
        }
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

/// The error of a failed receive burst.
fn rx_err(e: impl std::fmt::Display) -> String {
    format!("backend receive: {e}")
}

/// The error of a failed transmit burst.
fn tx_err(e: impl std::fmt::Display) -> String {
    format!("backend transmit: {e}")
}

/// Hand the wire what the device still has queued (a NAK or the last ACK
/// of a QP that just failed), before a loop gives up: the peer then learns
/// why (a bounded number of bursts; a full pool ends it early).
fn flush_tx<B: FrameIo>(dev: &mut Device, io: &mut B, now: Instant, sent: &mut u64) {
    for _ in 0..64 {
        match pump::transmit(dev, io, now, BURST) {
            Ok(n) if n > 0 => *sent += n as u64,
            _ => break,
        }
    }
}

/// The requester side.
pub(crate) struct Client<B> {
    dev: Device,
    io: B,
    backend: BackendKind,
    sent: u64,
    cq: u32,
    qpn: Vec<u32>,
    mem: Mem,
    peer_base: u64,
    peer_rkey: u32,
    op: Op,
    lat: bool,
    size: u64,
    depth: u64,
    /// One send WR in this many is signalled ([`PerfConfig::cq_mod`]).
    cq_mod: u64,
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
    samples: stats::LatSamples,
    /// A duration run (`-D`) of a BW test, or one of more than
    /// [`MAX_STAMPED_OPS`] operations, counts completions per interval
    /// instead of stamping every operation (which would grow by 16 bytes
    /// per message for as long as the run lasts).
    counted: Option<Counted>,
    /// Latency test: when the outstanding operation was posted.
    lat_post: u64,
    next_qp: usize,
    first_post: Option<u64>,
    stop_posting: bool,
    /// ATOMIC: which original values `k × add` have been fetched.
    seen: Vec<u64>,
}

/// What the client hands back.
pub(crate) struct ClientOut<B> {
    pub(crate) dev: Device,
    pub(crate) io: B,
    mem: Mem,
    pub(crate) sent: u64,
    pub(crate) total_done: u64,
    tposted: Vec<u64>,
    tcompleted: Vec<u64>,
    samples: stats::LatSamples,
    /// The first post's time and the counts, for a counted run.
    counted: Option<(u64, Counted)>,
}

/// Completions of a duration run, counted per [`stats::INTERVAL_NS`].
#[derive(Debug, Clone, Default)]
pub(crate) struct Counted {
    /// Time of the last completion (ns since the run's start).
    last_ns: u64,
    /// Completions in each interval after the first post.
    counts: Vec<u64>,
}

impl<B: FrameIo> Client<B> {
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
        if k != self.signaled_at(k) {
            wr.send_flags = SendFlags::empty();
        }
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
        if self.counted.is_none() && !self.lat {
            self.tposted.push(now);
        }
        if self.first_post.is_none() {
            self.first_post = Some(now);
        }
        Ok(())
    }

    /// The index of the signalled WR that completes WR `k` of a QP: the
    /// last of its batch of `cq_mod`, or the run's last WR (`-n`).
    fn signaled_at(&self, k: u64) -> u64 {
        let end = (k / self.cq_mod + 1) * self.cq_mod - 1;
        match self.iters {
            Some(n) => end.min(n.saturating_sub(1)),
            None => end,
        }
    }

    fn can_post(&self, r: usize) -> bool {
        let below_limit = match self.iters {
            Some(n) => self.posted[r] < n,
            // After the deadline (-D), only to close the batch in progress:
            // its signalled WR completes the unsignalled ones before it.
            None => !self.stop_posting || self.posted[r] % self.cq_mod != 0,
        };
        self.posted[r] - self.done[r] < self.depth && below_limit
    }

    /// Post new work; returns whether any was posted.
    /// `loop_ns` is the time read at the top of the polling loop: a counted
    /// run uses it, saving a clock read per pass; a stamped one reads the
    /// clock again so each post's time is right before it.
    fn post_work(&mut self, sh: &Shared, loop_ns: u64) -> Result<bool, String> {
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
        let now = if self.counted.is_some() {
            loop_ns
        } else {
            sh.now_ns()
        };
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
        // The signalled WR that ends the batch starting at `done[r]`; it
        // completes the whole batch.
        let last = self.done.get(r).map(|&d| self.signaled_at(d));
        if r >= self.qpn.len()
            || wc.qp_num != self.qpn[r]
            || Some(k) != last.map(|l| l & WR_IDX_MASK)
        {
            return Err(format!(
                "client QP 0x{:06x}: completion wr_id {:#x} out of order (expected #{} of QP index {r})",
                wc.qp_num,
                wc.wr_id,
                last.unwrap_or(0)
            ));
        }
        let first = self.done[r];
        let last = last.unwrap_or(first);
        if self.op == Op::Atomic {
            for k in first..=last {
                self.check_atomic(r, k, wc.qp_num)?;
            }
        }
        if self.lat {
            self.samples.push(t.saturating_sub(self.lat_post));
        }
        let n = last + 1 - first;
        self.done[r] += n;
        self.total_done += n;
        if let Some(c) = &mut self.counted {
            let i = (t.saturating_sub(self.first_post.unwrap_or(t)) / stats::INTERVAL_NS) as usize;
            if i >= c.counts.len() {
                c.counts.resize(i + 1, 0);
            }
            c.counts[i] += n;
            c.last_ns = t;
        } else if !self.lat {
            for _ in 0..n {
                self.tcompleted.push(t);
            }
        }
        Ok(())
    }

    /// ATOMIC: WR `k` of QP index `r` fetched a multiple of the add below
    /// every add posted so far, and no other WR fetched the same one.
    fn check_atomic(&mut self, r: usize, k: u64, qp_num: u32) -> Result<(), String> {
        let off = ((r as u64 * self.depth + k % self.depth) * 8) as usize;
        let buf = self.mem.bytes(&self.dev).ok_or("client MR vanished")?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[off..off + 8]);
        // Host byte order, as the responder stores it (ROCEV2-DIGEST §5).
        let orig = u64::from_ne_bytes(b);
        let idx = orig / ATOMIC_ADD;
        if orig % ATOMIC_ADD != 0 || idx >= self.total_posted {
            return Err(format!(
                "FETCH_ADD #{k} on QP 0x{qp_num:06x} returned {orig}, not a multiple of {ATOMIC_ADD} below {}",
                self.total_posted * ATOMIC_ADD
            ));
        }
        let (w, bit) = ((idx / 64) as usize, idx % 64);
        if w >= self.seen.len() {
            self.seen.resize(w + 1, 0);
        }
        if self.seen[w] & (1 << bit) != 0 {
            return Err(format!(
                "FETCH_ADD #{k} on QP 0x{qp_num:06x} returned {orig}, which an earlier one already returned"
            ));
        }
        self.seen[w] |= 1 << bit;
        Ok(())
    }

    fn finished(&self) -> bool {
        match self.iters {
            Some(n) => self.done.iter().all(|&d| d == n),
            None => self.stop_posting && self.total_done == self.total_posted,
        }
    }

    pub(crate) fn run(mut self, sh: &Shared) -> Result<ClientOut<B>, String> {
        let mut guard = AbortGuard(sh, true);
        let mut wcs = [blank_wc(); 64];
        let mut idle = Idle::new(self.backend);
        let _cpu = idle
            .busy_poll
            .then(|| super::cpu::check_busy_poll("client"));
        let mut last_progress = sh.now_ns();
        loop {
            let now_ns = sh.now_ns();
            let now = Instant::from_nanos(now_ns);
            let rx = pump::receive(&mut self.dev, &mut self.io, now, BURST).map_err(rx_err)?;
            let mut work = !rx.is_idle();
            // Completions first: an error completion says more than the
            // QP-fatal event that follows it.
            loop {
                let n = self.dev.poll_cq(self.cq, &mut wcs);
                if n == 0 {
                    break;
                }
                let t = sh.now_ns();
                for wc in &wcs[..n] {
                    if let Err(e) = self.complete(wc, t) {
                        flush_tx(&mut self.dev, &mut self.io, now, &mut self.sent);
                        return Err(e);
                    }
                }
                work = true;
                last_progress = t;
                sh.progress.store(self.total_done, Ordering::Relaxed);
            }
            if let Some(ev) = self.dev.poll_event() {
                flush_tx(&mut self.dev, &mut self.io, now, &mut self.sent);
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
            work |= self.post_work(sh, now_ns)?;
            let tx = pump::transmit(&mut self.dev, &mut self.io, now, BURST).map_err(tx_err)?;
            self.sent += tx as u64;
            work |= tx > 0;
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
            sent: self.sent,
            io: self.io,
            dev: self.dev,
            mem: self.mem,
            total_done: self.total_done,
            tposted: self.tposted,
            tcompleted: self.tcompleted,
            samples: self.samples,
            counted: self.counted.map(|c| (self.first_post.unwrap_or(0), c)),
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

/// The responder side.
pub(crate) struct Server<B> {
    dev: Device,
    io: B,
    backend: BackendKind,
    sent: u64,
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

pub(crate) struct ServerOut<B> {
    pub(crate) dev: Device,
    pub(crate) io: B,
    mem: Mem,
    pub(crate) sent: u64,
    pub(crate) received: u64,
}

impl<B: FrameIo> Server<B> {
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

    pub(crate) fn run(mut self, sh: &Shared) -> Result<ServerOut<B>, String> {
        let mut guard = AbortGuard(sh, true);
        let mut wcs = [blank_wc(); 64];
        let mut idle = Idle::new(self.backend);
        let _cpu = idle
            .busy_poll
            .then(|| super::cpu::check_busy_poll("server"));
        loop {
            let now_ns = sh.now_ns();
            let now = Instant::from_nanos(now_ns);
            let rx = pump::receive(&mut self.dev, &mut self.io, now, BURST).map_err(rx_err)?;
            let mut work = !rx.is_idle();
            if rx.rx > 0 {
                sh.last_rx.store(now_ns, Ordering::Relaxed);
            }
            // A QP that failed (a bad R_Key, a length past the region) has
            // queued its NAK: put it on the wire before stopping, so the
            // peer learns why (IBTA 1.7 §9.7.5.2.4: the responder reports
            // the error to the requester).
            match self.poll(&mut wcs) {
                Ok(w) => work |= w,
                Err(e) => {
                    flush_tx(&mut self.dev, &mut self.io, now, &mut self.sent);
                    return Err(e);
                }
            }
            if let Some(ev) = self.dev.poll_event() {
                flush_tx(&mut self.dev, &mut self.io, now, &mut self.sent);
                return Err(event_error("server", ev));
            }
            let tx = pump::transmit(&mut self.dev, &mut self.io, now, BURST).map_err(tx_err)?;
            self.sent += tx as u64;
            work |= tx > 0;
            match sh.state() {
                RUNNING => {}
                DONE => {
                    self.poll(&mut wcs)?;
                    break;
                }
                _ => return Err(STOPPED_BY_PEER.into()),
            }
            if work {
                idle.work();
            } else {
                idle.wait(now_ns);
            }
        }
        guard.1 = false;
        Ok(ServerOut {
            sent: self.sent,
            io: self.io,
            dev: self.dev,
            mem: self.mem,
            received: self.received,
        })
    }
}

/// The client of a connected `local` side, sending over `io` to `peer`.
pub(crate) fn client<B: FrameIo>(
    cfg: &PerfConfig,
    local: Local,
    peer: &Endpoint,
    io: B,
) -> Result<Client<B>, String> {
    if local.role != Role::Client {
        return Err("not a client side".into());
    }
    let q = cfg.qps as usize;
    let iters = match cfg.limit {
        Limit::Iters(n) => Some(n),
        Limit::Duration(_) => None,
    };
    let duration_ns = match cfg.limit {
        Limit::Duration(d) => Some(d.as_nanos() as u64),
        Limit::Iters(_) => None,
    };
    let ops = iters.map(|n| n.saturating_mul(q as u64));
    let counted = (!cfg.lat && ops.map_or(true, |n| n > MAX_STAMPED_OPS)).then(Counted::default);
    let expected = match (ops, &counted) {
        (_, Some(_)) => 0,
        (Some(n), None) => n.min(MAX_STAMPED_OPS) as usize,
        (None, None) => 1 << 16,
    };
    let stall = ack_timeout(cfg.qp_timeout).unwrap_or_default() * 3;
    Ok(Client {
        dev: local.dev,
        io,
        backend: cfg.backend,
        sent: 0,
        cq: local.cq,
        qpn: local.qpn,
        mem: local.mem,
        peer_base: peer.va,
        peer_rkey: peer.rkey,
        op: cfg.op,
        lat: cfg.lat,
        size: cfg.size,
        depth: u64::from(cfg.depth()),
        cq_mod: u64::from(cfg.cq_mod.max(1)),
        lay: layout(cfg),
        iters,
        duration_ns,
        stall_ns: stall.max(STALL).as_nanos() as u64,
        posted: vec![0; q],
        done: vec![0; q],
        total_posted: 0,
        total_done: 0,
        tposted: Vec::with_capacity(if cfg.lat { 0 } else { expected }),
        tcompleted: Vec::with_capacity(if cfg.lat { 0 } else { expected }),
        samples: stats::LatSamples::new(
            MAX_LAT_SAMPLES,
            if cfg.lat { expected } else { 0 },
            cfg.seed,
        ),
        counted,
        lat_post: 0,
        next_qp: 0,
        first_post: None,
        stop_posting: false,
        seen: Vec::new(),
    })
}

/// The server of a connected `local` side, over `io`; SEND receive buffers
/// posted.
pub(crate) fn server<B: FrameIo>(
    cfg: &PerfConfig,
    local: Local,
    io: B,
) -> Result<Server<B>, String> {
    if local.role != Role::Server {
        return Err("not a server side".into());
    }
    let q = cfg.qps as usize;
    let depth = u64::from(cfg.depth());
    let mut server = Server {
        dev: local.dev,
        io,
        backend: cfg.backend,
        sent: 0,
        cq: local.cq,
        qp_index: local.qpn.iter().enumerate().map(|(r, p)| (*p, r)).collect(),
        qpn: local.qpn,
        mem: local.mem,
        op: cfg.op,
        size: cfg.size,
        depth,
        lay: layout(cfg),
        expect: vec![0; q],
        patterns: Vec::new(),
        received: 0,
    };
    if server.op == Op::Send {
        server.patterns = (0..q)
            .map(|r| send_pattern(cfg.seed, r, cfg.size as usize))
            .collect();
        for r in 0..q {
            for slot in 0..depth {
                server.post_recv(r, slot)?;
            }
        }
    }
    Ok(server)
}

impl Shared {
    /// Run state shared by the threads of one process, clock starting now.
    pub(crate) fn new(start: std::time::Instant) -> Shared {
        Shared {
            start,
            state: AtomicU8::new(RUNNING),
            progress: AtomicU64::new(0),
            last_rx: AtomicU64::new(0),
        }
    }
    /// Whether the run was stopped (a side failed).
    pub(crate) fn stopped(&self) -> bool {
        self.state() == ABORT
    }
    /// How long since the server last received a frame (or since the
    /// start).
    pub(crate) fn idle_for(&self) -> Duration {
        let last = self.last_rx.load(Ordering::Relaxed);
        Duration::from_nanos(self.now_ns().saturating_sub(last))
    }
    /// Operations the client has completed so far.
    pub(crate) fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }
    /// The other process finished (server: the client said so).
    pub(crate) fn finish(&self) {
        self.set(DONE);
    }
    /// Stop the run (the other side failed or vanished).
    pub(crate) fn abort(&self) {
        self.set(ABORT);
    }
}

/// Run `f` on a thread of its own while the calling thread reports
/// progress about every 100 ms.
pub(crate) fn with_progress<T: Send>(
    sh: &Shared,
    name: &str,
    mut progress: Option<&mut dyn FnMut(u64, Duration)>,
    f: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    thread::scope(|scope| {
        let h = thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, f)
            .map_err(|e| format!("cannot start the {name} thread: {e}"))?;
        let mut last = std::time::Instant::now();
        while !h.is_finished() {
            thread::sleep(Duration::from_millis(2));
            if last.elapsed() >= Duration::from_millis(100) {
                last = std::time::Instant::now();
                if let Some(p) = progress.as_mut() {
                    p(sh.progress(), sh.start.elapsed());
                }
            }
        }
        h.join()
            .unwrap_or_else(|_| Err(format!("the {name} thread panicked")))
    })
}

/// Build both sides, run them, verify, report.
pub(crate) fn run(
    cfg: &PerfConfig,
    placement: &Placement,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    match cfg.backend {
        BackendKind::Mem => run_mem(cfg, placement, progress),
        BackendKind::Udp => run_udp(cfg, placement, progress),
        BackendKind::Tap | BackendKind::Dpdk => Err(PerfError::Usage(format!(
            "--backend {} joins two processes: run `roce perf ... --server` and `roce perf ... --client ADDR`",
            cfg.backend
        ))),
        BackendKind::Pcap => Err(PerfError::Usage(
            "--backend pcap replays captures (`roce replay`); to record a run use --pcap OUT".into(),
        )),
    }
}

/// The seeds of the two sides' fault injectors (`--loss`): independent
/// decisions per direction, both from the run's seed (client first).
pub(crate) fn fault_seeds(seed: u64) -> [u64; 2] {
    let mut seeder = Rng::new(seed);
    [seeder.next_u64(), seeder.next_u64()]
}

/// The `--pcap` recorder of a run, if it asks for one.
pub(crate) fn pcap_tap(cfg: &PerfConfig) -> Result<Option<Arc<PcapTap>>, PerfError> {
    let Some(p) = &cfg.pcap else {
        return Ok(None);
    };
    let tap = PcapTap::create(p, std::time::Instant::now())
        .map_err(|e| PerfError::Pcap(e.to_string()))?;
    Ok(Some(Arc::new(tap)))
}

/// Flush the `--pcap` recorder: the frames written (0 without one).
pub(crate) fn finish_pcap(tap: Option<&Arc<PcapTap>>) -> Result<u64, PerfError> {
    tap.map_or(Ok(0), |t| t.finish().map_err(PerfError::Pcap))
}

/// A side's backend as the run uses it: `--loss` ([`FaultIo`]: side
/// `side`'s seed of [`fault_seeds`]; no fault without it) around what
/// `--pcap` records ([`TeeIo`], `which` frames to `tap`), around `io`.
pub(crate) fn shaped<B: FrameIo>(
    cfg: &PerfConfig,
    side: usize,
    io: B,
    tap: Option<(&Arc<PcapTap>, Tee)>,
) -> FaultIo<Recorded<B>> {
    let io = match tap {
        Some((t, which)) => Recorded::Tee(TeeIo::new(io, t.clone() as Arc<dyn FrameTap>, which)),
        None => Recorded::Plain(io),
    };
    let seed = fault_seeds(cfg.seed)[side];
    FaultIo::new(io, FaultConfig::loss(cfg.loss, seed))
}

/// A backend, recorded to the `--pcap` file or not.
#[derive(Debug)]
pub(crate) enum Recorded<B> {
    /// Not recorded.
    Plain(B),
    /// Recorded.
    Tee(TeeIo<B>),
}

impl<B: FrameIo> FrameIo for Recorded<B> {
    type Error = B::Error;

    fn max_frame_len(&self) -> usize {
        match self {
            Recorded::Plain(b) => b.max_frame_len(),
            Recorded::Tee(t) => t.max_frame_len(),
        }
    }
    fn rx_burst(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> Result<usize, B::Error> {
        match self {
            Recorded::Plain(b) => b.rx_burst(max, on_frame),
            Recorded::Tee(t) => t.rx_burst(max, on_frame),
        }
    }
    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, B::Error> {
        match self {
            Recorded::Plain(b) => b.tx_burst(max, fill),
            Recorded::Tee(t) => t.tx_burst(max, fill),
        }
    }
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self {
            Recorded::Plain(b) => b.wait_fd(),
            Recorded::Tee(t) => t.wait_fd(),
        }
    }
}

/// Two devices (10.0.0.1 client, 10.0.0.2 server) on the `mem` wire.
fn run_mem(
    cfg: &PerfConfig,
    placement: &Placement,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    let (a, b) = mem::pair(&MemConfig {
        frame_cap: frame_cap(cfg),
        pool: mem::DEFAULT_POOL,
        page_offset: placement.frame_page_offset,
    });
    let ips = [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)];
    let macs = [[0x02, 0, 0, 0, 0, 1], [0x02, 0, 0, 0, 0, 2]];
    run_shaped(cfg, placement, ips, macs, [None, None], (a, b), progress)
}

/// Two devices on kernel UDP sockets, 127.0.0.1 (client) and 127.0.0.2
/// (server), each on a free port, with UDP GSO.
fn run_udp(
    cfg: &PerfConfig,
    placement: &Placement,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    let open = |ip: Ipv4Addr| {
        UdpIo::bind(UdpConfig {
            gso: true,
            ..UdpConfig::new(SocketAddr::new(IpAddr::V4(ip), 0))
        })
        .map_err(|e| PerfError::Run(format!("udp: bind {ip}: {e}")))
    };
    let a = open(UDP_LOOPBACK[0])?;
    let b = open(UDP_LOOPBACK[1])?;
    a.routes().set(b.local_addr().ip(), b.local_addr());
    b.routes().set(a.local_addr().ip(), a.local_addr());
    let udp = [Some(a.local_addr()), Some(b.local_addr())];
    let ips = UDP_LOOPBACK;
    let macs = ips.map(|i| mac_for_ip(IpAddr::V4(i)));
    let mut report = run_shaped(cfg, placement, ips, macs, udp, (a, b), progress)?;
    report.transport = format!(
        "kernel UDP sockets {} <-> {} (one thread per side)",
        udp[0].map_or(String::new(), |a| a.to_string()),
        udp[1].map_or(String::new(), |a| a.to_string())
    );
    Ok(report)
}

/// [`run_pair`] over `io` with `--loss` and `--pcap` around both sides
/// ([`shaped`]; the capture records what each side sends, after the loss,
/// so every frame the wire delivers is in it once).
#[allow(clippy::too_many_arguments)]
fn run_shaped<B: FrameIo + Send>(
    cfg: &PerfConfig,
    placement: &Placement,
    ips: [Ipv4Addr; 2],
    macs: [[u8; 6]; 2],
    udp: [Option<SocketAddr>; 2],
    io: (B, B),
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    let tap = pcap_tap(cfg)?;
    let start = std::time::Instant::now();
    let rec = tap.as_ref().map(|t| (t, Tee::Tx));
    let io = (shaped(cfg, 0, io.0, rec), shaped(cfg, 1, io.1, rec));
    let r = run_pair(cfg, placement, ips, macs, udp, io, start, progress);
    let pcap_frames = finish_pcap(tap.as_ref())?;
    let (mut report, c, s) = r?;
    report.frames_dropped = [c.io.stats().dropped, s.io.stats().dropped];
    report.pcap_frames = pcap_frames;
    Ok(report)
}

type PairOut<B> = (PerfReport, ClientOut<B>, ServerOut<B>);

/// Build, connect and run both sides of one process over `io`
/// `(client, server)`; verify; report (frames dropped and pcap frames left
/// 0 for the caller).
#[allow(clippy::too_many_arguments)]
fn run_pair<B: FrameIo + Send>(
    cfg: &PerfConfig,
    placement: &Placement,
    ips: [Ipv4Addr; 2],
    macs: [[u8; 6]; 2],
    udp: [Option<SocketAddr>; 2],
    io: (B, B),
    start: std::time::Instant,
    mut progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PairOut<B>, PerfError> {
    let psns = initial_psns(cfg);
    let mut sides = Vec::with_capacity(2);
    for (i, role) in [Role::Client, Role::Server].into_iter().enumerate() {
        let dev = Device::new(device_config(cfg, IpAddr::V4(ips[i]), macs[i]));
        let psn = psns.iter().map(|p| p[i]).collect();
        sides.push(
            build_local(cfg, role, dev, psn, placement.mr_offset[i]).map_err(PerfError::Run)?,
        );
    }
    let (Some(mut s), Some(mut c)) = (sides.pop(), sides.pop()) else {
        return Err(PerfError::Run("side set-up".into()));
    };
    let ce = c.endpoint(udp[0]);
    let se = s.endpoint(udp[1]);
    connect_local(&mut c, &se, cfg).map_err(PerfError::Run)?;
    connect_local(&mut s, &ce, cfg).map_err(PerfError::Run)?;
    let client = client(cfg, c, &se, io.0).map_err(PerfError::Run)?;
    let server = server(cfg, s, io.1).map_err(PerfError::Run)?;
    let sh = Shared::new(start);
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
                    p(sh.progress(), start.elapsed());
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
    let mut samples = c.samples.clone();
    let figures = figures(cfg, &c.tposted, &c.tcompleted, &mut samples, c.counted());
    let both = |names: &[&'static str]| {
        names
            .iter()
            .filter_map(|&name| {
                let a = c.dev.counters().get(name).unwrap_or(0);
                let b = s.dev.counters().get(name).unwrap_or(0);
                (a != 0 || b != 0).then_some((name, a, b))
            })
            .collect::<Vec<_>>()
    };
    let retrans = both(RETRANS_COUNTERS);
    let drops = both(DROP_COUNTERS);
    let report = PerfReport {
        config: cfg.clone(),
        transport: super::MEM_TRANSPORT.into(),
        side: None,
        iterations: c.total_done / q,
        total_ops: c.total_done,
        figures,
        retrans,
        drops,
        frames_sent: [c.sent, s.sent],
        frames_dropped: [0, 0],
        pcap_frames: 0,
        verified,
        notes: c.notes(cfg),
    };
    Ok((report, c, s))
}

/// BW or latency figures of a client's timestamps, or of its counts
/// ([`ClientOut::counted`]) after a duration run.
pub(crate) fn figures(
    cfg: &PerfConfig,
    tposted: &[u64],
    tcompleted: &[u64],
    samples: &mut stats::LatSamples,
    counted: Option<(u64, u64, u64, &[u64])>,
) -> Figures {
    if cfg.lat {
        Figures::Lat(samples.stats())
    } else if let Some((first, last, total, counts)) = counted {
        Figures::Bw(stats::bw_counted(cfg.size, first, last, total, counts))
    } else {
        Figures::Bw(stats::bw(cfg.size, tposted, tcompleted))
    }
}

impl<B> ClientOut<B> {
    /// Lines for the report about how the figures were computed when the
    /// run was too long to keep every stamp or sample.
    pub(crate) fn notes(&self, cfg: &PerfConfig) -> Vec<String> {
        let mut v = Vec::new();
        if matches!(cfg.limit, Limit::Iters(_)) && self.counted.is_some() {
            v.push(format!(
                "BW peak: best one-second window (a run of more than {MAX_STAMPED_OPS} operations \
                 counts completions per 100 ms instead of stamping each)"
            ));
        }
        if cfg.lat && self.samples.len() > self.samples.kept() as u64 {
            v.push(format!(
                "latency: typical and percentiles from a uniform sample of {} of the {} operations; \
                 min, max, average and stdev over all",
                self.samples.kept(),
                self.samples.len()
            ));
        }
        v
    }

    /// The latency samples and the post / completion timestamps (ns).
    pub(crate) fn timestamps(&mut self) -> (&[u64], &[u64], &mut stats::LatSamples) {
        (&self.tposted, &self.tcompleted, &mut self.samples)
    }

    /// A duration run's first post, last completion (ns), operations
    /// completed and counts per interval; `None` when every operation was
    /// stamped.
    pub(crate) fn counted(&self) -> Option<(u64, u64, u64, &[u64])> {
        self.counted
            .as_ref()
            .map(|(first, c)| (*first, c.last_ns, self.total_done, c.counts.as_slice()))
    }
}

/// The retransmission and drop counters of `dev` that are not zero (what
/// a side reports to the other).
pub(crate) fn report_counters(dev: &Device) -> Vec<(&'static str, u64)> {
    RETRANS_COUNTERS
        .iter()
        .chain(DROP_COUNTERS)
        .filter_map(|&n| {
            let v = dev.counters().get(n).unwrap_or(0);
            (v != 0).then_some((n, v))
        })
        .collect()
}

/// Check, at the server of a two-process run, what the server can see
/// (WRITE: its memory holds the client's pattern; SEND: every message
/// arrived, each checked as it came; ATOMIC: the counter); `client_done` is
/// the client's count of completed operations.
pub(crate) fn verify_server<B>(
    cfg: &PerfConfig,
    s: &ServerOut<B>,
    client_done: u64,
) -> Result<String, PerfError> {
    let vfail = |m: String| PerfError::Verify(m);
    let sb = s
        .mem
        .bytes(&s.dev)
        .ok_or_else(|| vfail("server MR missing".into()))?;
    let q = cfg.qps as usize;
    let size = cfg.size as usize;
    let lay = layout(cfg);
    match cfg.op {
        Op::Write => {
            let mut want = vec![0u8; lay.len[0] as usize];
            client_pattern(&mut want, cfg.seed);
            for r in 0..q {
                let o = r * lay.region as usize;
                if let Some(i) = first_diff(&sb[o..o + size], &want[o..o + size]) {
                    return Err(vfail(format!(
                        "QP {r}: server MR differs from the client's data at byte {i} of {size} ({:#04x}, expected {:#04x})",
                        sb[o + i],
                        want[o + i]
                    )));
                }
            }
            Ok(format!(
                "server MR equals the client's pattern, {q} QP(s) x {size} bytes"
            ))
        }
        Op::Read => Ok("the server's memory was read; the client checks the data".into()),
        Op::Send => {
            if s.received != client_done {
                return Err(vfail(format!(
                    "the server received {} messages, the client completed {client_done}",
                    s.received
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
            let want = client_done * ATOMIC_ADD;
            if counter != want {
                return Err(vfail(format!(
                    "the server's counter is {counter}, expected {client_done} FETCH_ADDs x {ATOMIC_ADD} = {want}"
                )));
            }
            Ok(format!(
                "counter = {client_done} FETCH_ADDs x {ATOMIC_ADD} = {counter}, every fetched value distinct"
            ))
        }
    }
}

/// Check, at the client of a two-process run, what the client can see
/// (READ: its memory holds the server's pattern). `None` when the server
/// checks the data.
pub(crate) fn verify_client<B>(
    cfg: &PerfConfig,
    c: &ClientOut<B>,
) -> Result<Option<String>, PerfError> {
    let vfail = |m: String| PerfError::Verify(m);
    if c.total_done == 0 {
        return Err(vfail("no operation completed".into()));
    }
    if cfg.op != Op::Read {
        return Ok(None);
    }
    let cb = c
        .mem
        .bytes(&c.dev)
        .ok_or_else(|| vfail("client MR missing".into()))?;
    let lay = layout(cfg);
    let size = cfg.size as usize;
    let mut want = vec![0u8; lay.len[1] as usize];
    server_pattern(&mut want, cfg.seed);
    for r in 0..cfg.qps as usize {
        let o = r * lay.region as usize;
        if let Some(i) = first_diff(&cb[o..o + size], &want[o..o + size]) {
            return Err(vfail(format!(
                "QP {r}: client MR differs from the server's data at byte {i} of {size} ({:#04x}, expected {:#04x})",
                cb[o + i],
                want[o + i]
            )));
        }
    }
    Ok(Some(format!(
        "client MR equals the server's pattern, {} QP(s) x {size} bytes",
        cfg.qps
    )))
}

/// The first byte where `got` and `want` differ.
fn first_diff(got: &[u8], want: &[u8]) -> Option<usize> {
    got.iter().zip(want).position(|(a, b)| a != b)
}

/// Check the data (the module documentation of `perf` lists what).
fn verify<B>(cfg: &PerfConfig, c: &ClientOut<B>, s: &ServerOut<B>) -> Result<String, PerfError> {
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
