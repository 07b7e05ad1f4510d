//! The engine behind one opened device: the stack's [`Device`], the
//! backend, and the progress thread that drives them, in safe Rust. The C
//! layer ([`crate::ffi`]) turns every verb into a call here.
//!
//! # Who moves the frames
//! The device and the backend sit behind one mutex. Whoever holds it drives
//! them (`Live::pump`: a burst in, due timers, a burst out):
//!
//! - the application, from `ibv_poll_cq` and the post verbs, with
//!   `try_lock` only: an application thread never waits for the progress
//!   thread. A post that finds the engine busy goes onto a short queue
//!   (`pending`, a critical section of a few instructions) that whoever
//!   holds the engine drains before letting it go;
//! - the progress thread, so that ACKs, READ responses, retransmissions and
//!   completion events happen while the application sleeps (the perftest
//!   server waits in a TCP `read()` for the whole run). It stands aside,
//!   asleep, while an application thread busy-polls a CQ (that thread then
//!   does the receiving), polls while frames move and for a few
//!   microseconds after, and otherwise sleeps in poll(2) on the backend's
//!   descriptor (and a kick eventfd) until a frame arrives or the device's
//!   next timer is due, so an idle process does not burn a core.
//!
//! Plain ACKs wait (at most [`ack_hold::ACK_HOLD`]) for this process's
//! next request and go out behind it, so that a ping-pong's answer reaches
//! the peer's `ibv_poll_cq` before the ACK that ends that poll
//! ([`crate::ack_hold`]).
//!
//! # Emulated in this layer
//! - Completion channels: a CQ armed by `ibv_req_notify_cq` that holds a
//!   completion after a pump is disarmed and its channel's eventfd is
//!   signalled (one event per arm, as rdma-core providers do; a
//!   solicited-only arm fires on any completion).
//! - SRQs: the stack's QPs have their own receive queues. A receive posted
//!   to an SRQ waits in the SRQ's pool; when a SEND (or an RDMA WRITE with
//!   immediate) arrives for a QP attached to the SRQ whose own receive
//!   queue is empty, the oldest pooled WQE is moved to that QP just before
//!   the stack handles the packet. So WQEs are taken in FIFO order across
//!   the QPs and bound to a QP only when it needs one; an empty pool makes
//!   the QP answer RNR (RC) or drop (UD), as an empty SRQ does.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use roce_stack::backend::FrameIo;
use roce_stack::neigh::Resolution;
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, AsyncEvent, Device, DeviceConfig, MrBuffer, MrKeys, QpAttr, QpAttrMask,
    QpInitAttr, QpState, RecvWr, SendFlags, SendWr, Sge, UdDest, VerbsError, Wc, WcOpcode,
    WrOpcode,
};
use roce_stack::wire::opcode::OpKind;
use roce_stack::wire::{ExtHeader, RocePacket};

use crate::ack_hold::{self, Held};
use crate::backend::Backend;
use crate::config::Config;
use crate::ffi::sys;

/// Frames per receive or transmit burst.
const BURST: usize = 32;
/// Frames per receive burst of an `ibv_poll_cq` while frames come a few at
/// a time ([`Live::poll_cq`]).
const APP_BURST: usize = 4;
/// Longest sleep of the progress thread, so a timer armed by an application
/// thread while it sleeps is at most this late, and `close` waits at most
/// this long for it.
const MAX_SLEEP: Duration = Duration::from_millis(10);
/// Nap of the progress thread on a backend without a descriptor (DPDK).
const POLL_MODE_NAP: Duration = Duration::from_micros(50);
/// How long the progress thread keeps polling after the last frame moved,
/// yielding between passes, before it sleeps on the descriptor (or naps,
/// DPDK): the next frame of a ping-pong or a stream is taken without a
/// wake-up.
const LINGER: Duration = Duration::from_micros(30);
/// How recent an application's `ibv_poll_cq` must be for the progress
/// thread to leave the backend to that thread ([`Live::app_polling`]).
/// Far longer than a ping-pong program spends between two polls: with 20
/// us, an application thread that lost its CPU for a moment (on a machine
/// with fewer cores than busy threads, to this very progress thread waking
/// up) made the progress thread take over, and the two then took turns on
/// the CPUs: typical `ib_write_lat` 16-29 us in half of the runs instead of
/// 4.
const APP_POLLING: Duration = Duration::from_micros(200);
/// An application thread spinning on an empty CQ yields its CPU once per
/// this many empty polls ([`Live::poll_cq`]).
const YIELD_EVERY: u32 = 16;
/// The progress thread's first nap while an application thread polls
/// ([`Live::progress`]); each nap that finds the application still polling
/// doubles the next, up to [`STAND_ASIDE_MAX`].
const STAND_ASIDE_MIN: Duration = Duration::from_micros(20);
/// The progress thread's longest nap while an application thread polls.
const STAND_ASIDE_MAX: Duration = Duration::from_millis(1);
/// How long `modify_qp` / `create_ah` wait for ARP / neighbour discovery on
/// an Ethernet backend.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest inline payload of a send WR, bytes (the stack's).
pub const MAX_INLINE: usize = roce_stack::verbs::wr::MAX_INLINE;
/// Largest scatter/gather list, entries (the stack's).
pub const MAX_SGE: usize = roce_stack::verbs::wr::MAX_SGE;

/// An opaque handle to a C object (its address), given back to the C layer
/// in events; never dereferenced here.
pub type Handle = usize;

/// A send work request copied out of the application's `ibv_send_wr`.
#[derive(Debug, Clone)]
pub struct SendOwned {
    /// `wr_id`.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// Gather list (the first `nsge` entries).
    pub sges: [Sge; MAX_SGE],
    /// Entries in use.
    pub nsge: usize,
    /// Inline payload (the first `inline_len` bytes), when `flags` has INLINE.
    pub inline: [u8; MAX_INLINE],
    /// Inline bytes in use.
    pub inline_len: usize,
    /// Immediate data, as the stack sends it (host order of the wire's big
    /// endian value).
    pub imm: u32,
    /// R_Key to invalidate.
    pub invalidate_rkey: u32,
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Compare / add.
    pub compare_add: u64,
    /// Swap.
    pub swap: u64,
    /// UD destination.
    pub ud: Option<UdDest>,
}

impl SendOwned {
    /// An empty request of `opcode`.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendOwned {
        SendOwned {
            wr_id,
            opcode,
            flags: SendFlags::empty(),
            sges: [Sge::default(); MAX_SGE],
            nsge: 0,
            inline: [0; MAX_INLINE],
            inline_len: 0,
            imm: 0,
            invalidate_rkey: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }
    fn as_wr(&self) -> SendWr<'_> {
        SendWr {
            wr_id: self.wr_id,
            opcode: self.opcode,
            send_flags: self.flags,
            sg_list: &self.sges[..self.nsge],
            inline_data: &self.inline[..self.inline_len],
            imm_data: self.imm,
            invalidate_rkey: self.invalidate_rkey,
            remote_addr: self.remote_addr,
            rkey: self.rkey,
            compare_add: self.compare_add,
            swap: self.swap,
            ud: self.ud,
        }
    }
}

/// A receive work request copied out of an `ibv_recv_wr`.
#[derive(Debug, Clone, Copy)]
pub struct RecvOwned {
    /// `wr_id`.
    pub wr_id: u64,
    /// Scatter list (the first `nsge` entries).
    pub sges: [Sge; MAX_SGE],
    /// Entries in use.
    pub nsge: usize,
}

impl RecvOwned {
    fn as_wr(&self) -> RecvWr<'_> {
        RecvWr {
            wr_id: self.wr_id,
            sg_list: &self.sges[..self.nsge],
        }
    }
}

enum Pending {
    Send(u32, Box<SendOwned>),
    Recv(u32, Box<RecvOwned>),
}

/// A completion channel: an eventfd the application can poll(2), and the
/// CQs whose events it has not read yet.
#[derive(Debug)]
pub struct Channel {
    fd: File,
    queue: Mutex<VecDeque<Handle>>,
}

impl Channel {
    /// A new channel.
    ///
    /// # Errors
    /// eventfd(2)'s.
    pub fn new() -> io::Result<Channel> {
        Ok(Channel {
            fd: File::from(sys::eventfd(true, false)?),
            queue: Mutex::new(VecDeque::new()),
        })
    }
    /// The descriptor (`ibv_comp_channel.fd`).
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
    fn notify(&self, cq: Handle) {
        if let Ok(mut q) = self.queue.lock() {
            q.push_back(cq);
        }
        let _ = (&self.fd).write(&1u64.to_ne_bytes());
    }
    /// Wait for the next event (`ibv_get_cq_event`): the CQ it is for. A
    /// descriptor the application made non-blocking fails with
    /// `WouldBlock` when no event waits.
    ///
    /// # Errors
    /// read(2)'s.
    pub fn wait(&self) -> io::Result<Handle> {
        let mut b = [0u8; 8];
        loop {
            match (&self.fd).read(&mut b) {
                Ok(8) => break,
                Ok(_) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.queue
            .lock()
            .ok()
            .and_then(|mut q| q.pop_front())
            .ok_or_else(|| io::Error::from(io::ErrorKind::WouldBlock))
    }
}

/// What the engine and the C layer share about one CQ.
#[derive(Debug)]
pub struct CqShared {
    /// The stack's CQ.
    pub id: u32,
    /// The `ibv_cq` (reported in events).
    pub handle: Handle,
    /// Its channel, if it has one.
    pub channel: Option<Arc<Channel>>,
    /// Armed by `ibv_req_notify_cq`, until the next completion signals.
    pub armed: AtomicBool,
}

/// An asynchronous event (`struct ibv_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEv {
    /// `enum ibv_event_type`.
    pub event_type: i32,
    /// The object: an `ibv_cq`, `ibv_qp` or `ibv_srq` handle.
    pub element: Handle,
}

#[derive(Debug)]
struct Srq {
    pool: VecDeque<RecvOwned>,
    max_wr: usize,
    max_sge: usize,
    /// `srq_limit`; 0 = not armed.
    limit: usize,
    handle: Handle,
}

#[derive(Debug, Clone, Copy)]
struct QpInfo {
    handle: Handle,
    srq: Option<u32>,
}

/// The part behind the mutex.
struct Engine {
    dev: Device,
    io: Backend,
    cqs: HashMap<u32, Arc<CqShared>>,
    qps: HashMap<u32, QpInfo>,
    /// The SRQ WQE parked in a QP's own receive queue, per QPN.
    parked: HashMap<u32, (u32, RecvOwned)>,
    /// Plain ACKs held until this process's next request goes out.
    held: Held,
    /// When this process last posted a send ([`ack_hold::RECENT_POST`]).
    last_send_post: Option<Instant>,
}

/// The running part of an opened device: the engine and its progress
/// thread, started by the first verb that needs them.
pub struct Live {
    eng: Mutex<Engine>,
    pending: Mutex<VecDeque<Pending>>,
    pending_len: AtomicUsize,
    srqs: Mutex<HashMap<u32, Srq>>,
    n_srqs: AtomicUsize,
    next_srq: AtomicU32,
    stop: AtomicBool,
    kick: File,
    events: Arc<AsyncQueue>,
    epoch: std::time::Instant,
    gid: Gid,
    mac: [u8; 6],
    thread: Mutex<Option<JoinHandle<()>>>,
    /// When an application thread's `poll_cq` last pumped and found
    /// nothing, ns since `epoch`; 0 after one that found completions (the
    /// application is likely to do something else next).
    app_polled: AtomicU64,
    /// Empty `ibv_poll_cq` calls in a row (the application yields its CPU
    /// once per [`YIELD_EVERY`]).
    empty_polls: AtomicU32,
    /// The last receive burst of an `ibv_poll_cq` came back full.
    app_rx_full: AtomicBool,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("gid", &self.gid)
            .finish_non_exhaustive()
    }
}

fn errno_of(e: &VerbsError) -> i32 {
    match e {
        VerbsError::QueueFull => libc::ENOMEM,
        VerbsError::Busy => libc::EBUSY,
        VerbsError::KeyInUse => libc::EEXIST,
        _ => libc::EINVAL,
    }
}

/// A verbs failure as the errno rdma-core's providers return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl From<VerbsError> for Errno {
    fn from(e: VerbsError) -> Errno {
        Errno(errno_of(&e))
    }
}

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl Live {
    /// Open the backend `cfg` names, create the device and start its
    /// progress thread.
    ///
    /// # Errors
    /// One line: the backend's failure, or eventfd's.
    fn open(cfg: &Config, events: Arc<AsyncQueue>) -> Result<Arc<Live>, String> {
        let io = Backend::open(cfg)?;
        let gid = Gid::from_ip(io.ip);
        let mac = io.mac;
        let dev = Device::new(DeviceConfig {
            mac,
            gids: vec![gid],
            netdev_mtu: cfg.netdev_mtu(),
            ..DeviceConfig::default()
        });
        let kick = File::from(sys::eventfd(false, true).map_err(|e| format!("eventfd: {e}"))?);
        let ctx = Arc::new(Live {
            eng: Mutex::new(Engine {
                dev,
                io,
                cqs: HashMap::new(),
                qps: HashMap::new(),
                parked: HashMap::new(),
                held: Held::default(),
                last_send_post: None,
            }),
            pending: Mutex::new(VecDeque::new()),
            pending_len: AtomicUsize::new(0),
            srqs: Mutex::new(HashMap::new()),
            n_srqs: AtomicUsize::new(0),
            next_srq: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            kick,
            events,
            epoch: std::time::Instant::now(),
            gid,
            mac,
            thread: Mutex::new(None),
            app_polled: AtomicU64::new(0),
            empty_polls: AtomicU32::new(0),
            app_rx_full: AtomicBool::new(false),
        });
        if let Ok(mut l) = LIVE.lock() {
            l.retain(|w| w.strong_count() > 0);
            l.push(Arc::downgrade(&ctx));
        }
        let c = ctx.clone();
        let t = thread::Builder::new()
            .name("roce-progress".into())
            .spawn(move || c.progress())
            .map_err(|e| format!("progress thread: {e}"))?;
        if let Ok(mut g) = ctx.thread.lock() {
            *g = Some(t);
        }
        tracing::info!(backend = ?cfg.backend, ip = %ctx.gid.to_ip(), "device open");
        Ok(ctx)
    }

    /// Stop the progress thread (`ibv_close_device`).
    fn close(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.kick_progress();
        let t = self.thread.lock().ok().and_then(|mut g| g.take());
        if let Some(t) = t {
            let _ = t.join();
        }
        // The last message's ACK may still be held: the peer waits for it.
        let mut g = self.lock();
        let now = self.now();
        while !g.held.is_empty() && transmit(&mut g, now, true) > 0 {}
    }

    /// Send what is held now, if the engine is free (for [`flush_held_at_exit`]).
    fn flush_held(&self) {
        if let Ok(mut g) = self.eng.try_lock() {
            if !g.held.is_empty() {
                let now = self.now();
                while !g.held.is_empty() && transmit(&mut g, now, true) > 0 {}
            }
        }
    }

    /// The device's MAC (the backend's).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn kick_progress(&self) {
        let _ = (&self.kick).write(&1u64.to_ne_bytes());
    }

    /// The engine for a control verb (blocking: the progress thread holds
    /// it for one burst at most).
    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.eng.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Let the engine go, after draining the posts queued while it was held
    /// (and again if more came while letting go).
    fn release<'a>(&'a self, mut g: MutexGuard<'a, Engine>) {
        loop {
            if self.pending_len.load(Ordering::SeqCst) > 0 {
                let sent = self.drain_pending(&mut g);
                let now = self.now();
                transmit(&mut g, now, sent);
            }
            drop(g);
            if self.pending_len.load(Ordering::SeqCst) == 0 {
                return;
            }
            match self.eng.try_lock() {
                Ok(n) => g = n,
                Err(_) => return,
            }
        }
    }

    /// Hand the queued posts to the device; whether one was a send.
    fn drain_pending(&self, e: &mut Engine) -> bool {
        let items: Vec<Pending> = match self.pending.lock() {
            Ok(mut q) => {
                self.pending_len.store(0, Ordering::SeqCst);
                q.drain(..).collect()
            }
            Err(_) => return false,
        };
        let sends = items.iter().any(|p| matches!(p, Pending::Send(..)));
        if sends {
            e.last_send_post = Some(self.now());
        }
        for p in items {
            let r = match &p {
                Pending::Send(qpn, w) => e.dev.post_send(*qpn, &w.as_wr()),
                Pending::Recv(qpn, w) => e.dev.post_recv(*qpn, &w.as_wr()),
            };
            if let Err(err) = r {
                tracing::warn!(
                    ?err,
                    "a work request queued while the engine was busy was refused"
                );
            }
        }
        sends
    }

    fn queue(&self, p: Pending) {
        if let Ok(mut q) = self.pending.lock() {
            q.push_back(p);
            self.pending_len.fetch_add(1, Ordering::SeqCst);
        }
        if let Ok(g) = self.eng.try_lock() {
            self.release(g);
        }
    }

    /// One pump: a burst in (with SRQ top-ups), due timers, a burst out;
    /// then completion events and async events. Returns frames moved.
    fn pump(&self, e: &mut Engine, now: Instant) -> usize {
        let (rx, tx) = self.pump_rx(e, now, BURST);
        rx + tx
    }

    /// [`Live::pump`] receiving at most `rx_max` frames; returns the frames
    /// received and sent.
    fn pump_rx(&self, e: &mut Engine, now: Instant, rx_max: usize) -> (usize, usize) {
        let has_srq = self.n_srqs.load(Ordering::Relaxed) > 0;
        let Engine {
            dev,
            io,
            qps,
            parked,
            ..
        } = e;
        let mut srq_events = Vec::new();
        let rx = if has_srq {
            let mut srqs = self.srqs.lock().unwrap_or_else(|p| p.into_inner());
            io.rx_burst(rx_max, &mut |frame| {
                srq_topup(dev, qps, parked, &mut srqs, &mut srq_events, frame);
                dev.handle_frame(now, frame);
            })
        } else {
            io.rx_burst(rx_max, &mut |frame| dev.handle_frame(now, frame))
        };
        let rx = rx.unwrap_or_else(|err| {
            tracing::warn!(%err, "backend receive failed");
            0
        });
        if dev.poll_timeout().is_some_and(|t| t <= now) {
            dev.handle_timeout(now);
        }
        // Posts queued while this pump received (an application that spins
        // on its buffer posts its answer as soon as a WRITE lands) go out
        // in this burst, with the ACKs.
        let sent = self.pending_len.load(Ordering::SeqCst) > 0 && self.drain_pending(e);
        let tx = transmit(e, now, sent);
        self.after_pump(e, srq_events);
        (rx, tx)
    }

    fn after_pump(&self, e: &mut Engine, srq_events: Vec<Handle>) {
        for cq in e.cqs.values() {
            if cq.armed.load(Ordering::Acquire)
                && e.dev.cq(cq.id).is_some_and(|c| !c.is_empty())
                && cq.armed.swap(false, Ordering::AcqRel)
            {
                if let Some(ch) = &cq.channel {
                    ch.notify(cq.handle);
                }
            }
        }
        let mut evs: Vec<AsyncEv> = srq_events
            .into_iter()
            .map(|h| AsyncEv {
                event_type: crate::ffi::types::IBV_EVENT_SRQ_LIMIT_REACHED,
                element: h,
            })
            .collect();
        while let Some(ev) = e.dev.poll_event() {
            let (t, h) = match ev {
                AsyncEvent::CqErr { cq } => (
                    crate::ffi::types::IBV_EVENT_CQ_ERR,
                    e.cqs.get(&cq).map(|c| c.handle),
                ),
                AsyncEvent::QpFatal { qpn } => (
                    crate::ffi::types::IBV_EVENT_QP_FATAL,
                    e.qps.get(&qpn).map(|q| q.handle),
                ),
                AsyncEvent::SqDrained { qpn } => (
                    crate::ffi::types::IBV_EVENT_SQ_DRAINED,
                    e.qps.get(&qpn).map(|q| q.handle),
                ),
            };
            if let Some(h) = h {
                evs.push(AsyncEv {
                    event_type: t,
                    element: h,
                });
            }
        }
        for ev in evs {
            tracing::debug!(?ev, "async event");
            self.events.push(ev);
        }
    }

    /// Whether an application thread is busy-polling a CQ: its last
    /// `ibv_poll_cq` was less than [`APP_POLLING`] ago, and it has not gone
    /// to sleep on a channel since. The progress thread then leaves the
    /// backend to it.
    fn app_polling(&self) -> bool {
        let t = self.app_polled.load(Ordering::Relaxed);
        t != 0 && self.now().as_nanos().saturating_sub(t) < APP_POLLING.as_nanos() as u64
    }

    /// The progress thread.
    ///
    /// - While an application thread busy-polls a CQ (`app_polling`), that
    ///   thread pumps the backend itself and this one naps, from
    ///   [`STAND_ASIDE_MIN`] growing to [`STAND_ASIDE_MAX`]: one thread per
    ///   process on the backend, so a frame is taken by whoever runs, and
    ///   the two do not take turns on a CPU for one frame.
    /// - Otherwise it pumps while frames move, then polls on for
    ///   [`LINGER`], yielding between passes (the next frame of a ping-pong
    ///   is usually a few microseconds away, and a wake-up from poll(2)
    ///   costs more than that on these machines), then blocks in poll(2)
    ///   on the backend's descriptor and the kick eventfd until a frame
    ///   arrives or the device's next timer is due, so an idle process does
    ///   not burn a core.
    /// - A backend without a descriptor (DPDK, a poll-mode driver) naps
    ///   [`POLL_MODE_NAP`] instead of blocking.
    /// - It blocks every asynchronous signal
    ///   ([`sys::block_async_signals`]): the program's handlers run on the
    ///   program's threads.
    fn progress(self: Arc<Self>) {
        if let Err(err) = sys::block_async_signals() {
            tracing::warn!(%err, "progress thread: signals not blocked");
        }
        // Its naps while it stands aside end when asked, not up to 50 us
        // later: a frame only it can take waits that long.
        if let Err(err) = sys::set_timer_slack(1_000) {
            tracing::warn!(%err, "progress thread: timer slack not set");
        }
        let mut fds = vec![self.kick.as_raw_fd()];
        let backend_fd = self.lock().io.fd;
        tracing::info!(?backend_fd, "progress thread started");
        if let Some(fd) = backend_fd {
            fds.push(fd);
        }
        let mut last_moved = std::time::Instant::now();
        let mut nap = STAND_ASIDE_MIN;
        while !self.stop.load(Ordering::SeqCst) {
            if self.app_polling() {
                // Asleep, not yielding: a runnable thread here would take
                // turns on a CPU with the application's. Not on the
                // backend's descriptor either: every frame the application
                // takes would wake it. Each wake-up costs the application
                // a few microseconds of its CPU (every 70 us: typical
                // ib_write_lat 10 us instead of 4), so the naps grow while
                // the application goes on polling.
                let _ = sys::poll_readable(&fds[..1], nap);
                nap = (nap * 2).min(STAND_ASIDE_MAX);
                last_moved = std::time::Instant::now();
                continue;
            }
            nap = STAND_ASIDE_MIN;
            let mut g = self.lock();
            let now = self.now();
            let mut moved = 0;
            for _ in 0..64 {
                let n = self.pump(&mut g, now);
                moved += n;
                if n == 0 {
                    break;
                }
            }
            // QPs still on the active list after the passes: frames the
            // backend did not take (its queue is full), or more than 64
            // bursts' worth.
            let busy = g.dev.active_qps() > 0;
            let due = [
                g.dev.poll_timeout().map(|t| t.saturating_since(now)),
                g.io.neigh_due(),
            ]
            .into_iter()
            .flatten()
            .min();
            self.release(g);
            if moved > 0 {
                last_moved = std::time::Instant::now();
                continue;
            }
            if busy || last_moved.elapsed() < LINGER {
                thread::yield_now();
                continue;
            }
            let mut t = due.map_or(MAX_SLEEP, |d| d.min(MAX_SLEEP));
            if backend_fd.is_none() {
                t = t.min(POLL_MODE_NAP);
            }
            if t.is_zero() {
                continue;
            }
            {
                // Held ACKs go out before a sleep that may outlast their
                // hold.
                let mut g = self.lock();
                if !g.held.is_empty() {
                    let now = self.now();
                    transmit(&mut g, now, true);
                }
                self.release(g);
            }
            match sys::poll_readable(&fds, t) {
                Ok(bits) if bits & 1 != 0 => {
                    let mut b = [0u8; 8];
                    let _ = (&self.kick).read(&mut b);
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(%err, "poll failed");
                    thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    // ---- verbs --------------------------------------------------------

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> u32 {
        self.lock().dev.alloc_pd()
    }

    /// `ibv_dealloc_pd`.
    ///
    /// # Errors
    /// `EBUSY` while MRs or QPs use it.
    pub fn dealloc_pd(&self, pd: u32) -> Result<(), Errno> {
        let mut g = self.lock();
        let r = g.dev.dealloc_pd(pd);
        self.release(g);
        Ok(r?)
    }

    /// `ibv_reg_mr_iova2`: register the application's memory.
    ///
    /// # Errors
    /// As [`Device::reg_mr_external`].
    pub fn reg_mr(
        &self,
        pd: u32,
        mem: Box<dyn MrBuffer>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrKeys, Errno> {
        let mut g = self.lock();
        let r = g.dev.reg_mr_external(pd, mem, iova, access);
        self.release(g);
        Ok(r?)
    }

    /// `ibv_dereg_mr`.
    ///
    /// # Errors
    /// `EBUSY` while a posted WQE uses it.
    pub fn dereg_mr(&self, lkey: u32) -> Result<(), Errno> {
        let mut g = self.lock();
        // Posts queued while the engine was busy come first: they may name
        // the MR.
        self.drain_pending(&mut g);
        let r = g.dev.dereg_mr(lkey).map(|_| ());
        self.release(g);
        Ok(r?)
    }

    /// `ibv_create_cq`.
    pub fn create_cq(
        &self,
        cqe: usize,
        channel: Option<Arc<Channel>>,
        handle: Handle,
    ) -> Arc<CqShared> {
        let mut g = self.lock();
        let id = g.dev.create_cq(cqe);
        let cq = Arc::new(CqShared {
            id,
            handle,
            channel,
            armed: AtomicBool::new(false),
        });
        g.cqs.insert(id, cq.clone());
        self.release(g);
        cq
    }

    /// `ibv_destroy_cq`.
    ///
    /// # Errors
    /// `EBUSY` while a QP uses it.
    pub fn destroy_cq(&self, id: u32) -> Result<(), Errno> {
        let mut g = self.lock();
        let r = g.dev.destroy_cq(id);
        if r.is_ok() {
            g.cqs.remove(&id);
        }
        self.release(g);
        Ok(r?)
    }

    /// `ibv_req_notify_cq`.
    pub fn req_notify(&self, cq: &CqShared) {
        cq.armed.store(true, Ordering::Release);
        // A completion already there signals at the next pump; make it soon.
        if let Ok(mut g) = self.eng.try_lock() {
            self.after_pump(&mut g, Vec::new());
            self.release(g);
        } else {
            self.kick_progress();
        }
    }

    /// `ibv_create_qp`. `srq`: the SRQ the QP receives from.
    ///
    /// # Errors
    /// As [`Device::create_qp`].
    pub fn create_qp(
        &self,
        pd: u32,
        init: &QpInitAttr,
        srq: Option<u32>,
        handle: Handle,
    ) -> Result<u32, Errno> {
        let mut g = self.lock();
        let r = g.dev.create_qp(pd, init);
        if let Ok(qpn) = r {
            g.qps.insert(qpn, QpInfo { handle, srq });
        }
        self.release(g);
        Ok(r?)
    }

    /// `ibv_destroy_qp`. An SRQ WQE parked in its receive queue goes back to
    /// the front of the SRQ.
    ///
    /// # Errors
    /// `EINVAL` for an unknown QP.
    pub fn destroy_qp(&self, qpn: u32) -> Result<(), Errno> {
        let mut g = self.lock();
        self.drain_pending(&mut g);
        // The program is done with the connection: the ACKs it holds (the
        // one for the last message received, at least) go now, while the
        // peer still listens, not at close.
        if !g.held.is_empty() {
            let now = self.now();
            transmit(&mut g, now, true);
        }
        let back = g
            .parked
            .remove(&qpn)
            .filter(|_| g.dev.qp(qpn).is_some_and(|q| q.rq_outstanding() > 0));
        let r = g.dev.destroy_qp(qpn);
        if r.is_ok() {
            g.qps.remove(&qpn);
            if let Some((srq, w)) = back {
                if let Some(s) = self.srqs.lock().ok().as_mut().and_then(|m| m.get_mut(&srq)) {
                    s.pool.push_front(w);
                }
            }
        }
        self.release(g);
        Ok(r?)
    }

    /// The address vector to `dgid`: the peer's MAC resolved by ARP /
    /// neighbour discovery on an Ethernet backend (waits up to 3 s).
    ///
    /// # Errors
    /// `ETIMEDOUT` (`EHOSTUNREACH` when the neighbour table gave up).
    pub fn resolve(&self, av: AddressVector) -> Result<AddressVector, Errno> {
        let ip = av.dgid.to_ip();
        let start = std::time::Instant::now();
        loop {
            let mut g = self.lock();
            if !g.io.resolves() {
                self.release(g);
                return Ok(AddressVector {
                    dmac: roce_io::mac_for_ip(ip),
                    ..av
                });
            }
            let r = match g.io.resolution(ip) {
                Resolution::Reachable(mac) => Some(Ok(mac)),
                Resolution::Failed => Some(Err(Errno(libc::EHOSTUNREACH))),
                Resolution::Unknown => g.io.request(ip).map(Ok),
                Resolution::Resolving => None,
            };
            let now = self.now();
            self.pump(&mut g, now);
            self.release(g);
            match r {
                Some(Ok(dmac)) => return Ok(AddressVector { dmac, ..av }),
                Some(Err(e)) => return Err(e),
                None => {}
            }
            if start.elapsed() > RESOLVE_TIMEOUT {
                tracing::warn!(%ip, "no ARP / neighbour answer");
                return Err(Errno(libc::ETIMEDOUT));
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// `ibv_modify_qp`. An address vector is resolved first (Ethernet
    /// backends).
    ///
    /// # Errors
    /// As [`Device::modify_qp`]; a peer that does not answer ARP.
    pub fn modify_qp(&self, qpn: u32, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Errno> {
        let mut attr = *attr;
        if mask.contains(QpAttrMask::AV) && attr.ah_attr.dgid != Gid::default() {
            attr.ah_attr = self.resolve(attr.ah_attr)?;
        }
        let mut g = self.lock();
        self.drain_pending(&mut g);
        let r = g.dev.modify_qp(qpn, &attr, mask);
        if let Err(e) = &r {
            tracing::debug!(qpn, ?e, ?mask, "modify_qp refused");
        }
        let now = self.now();
        self.pump(&mut g, now);
        self.release(g);
        Ok(r?)
    }

    /// `ibv_query_qp`: state, attributes, capacities, and whether it sends
    /// every WR signaled.
    ///
    /// # Errors
    /// `EINVAL` for an unknown QP.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpState, QpAttr, roce_stack::verbs::QpCap), Errno> {
        let g = self.lock();
        let r = g
            .dev
            .qp(qpn)
            .map(|q| (q.state(), *q.attr(), q.cap()))
            .ok_or(Errno(libc::EINVAL));
        self.release(g);
        r
    }

    /// `ibv_post_send`.
    ///
    /// # Errors
    /// As [`Device::post_send`] when checked at once; a post queued because
    /// the engine was busy is checked when it is handed over.
    pub fn post_send(&self, qpn: u32, wr: &SendOwned) -> Result<(), Errno> {
        if self.pending_len.load(Ordering::SeqCst) == 0 {
            if let Ok(mut g) = self.eng.try_lock() {
                let r = g.dev.post_send(qpn, &wr.as_wr());
                let now = self.now();
                g.last_send_post = Some(now);
                transmit(&mut g, now, true);
                self.release(g);
                return Ok(r?);
            }
        }
        self.queue(Pending::Send(qpn, Box::new(wr.clone())));
        Ok(())
    }

    /// `ibv_post_recv`.
    ///
    /// # Errors
    /// As [`Device::post_recv`] when checked at once.
    pub fn post_recv(&self, qpn: u32, wr: &RecvOwned) -> Result<(), Errno> {
        if self.pending_len.load(Ordering::SeqCst) == 0 {
            if let Ok(mut g) = self.eng.try_lock() {
                let r = g.dev.post_recv(qpn, &wr.as_wr());
                self.release(g);
                return Ok(r?);
            }
        }
        self.queue(Pending::Recv(qpn, Box::new(*wr)));
        Ok(())
    }

    /// `ibv_poll_cq`: completions of CQ `id` into `out`, after a pump when
    /// the CQ has fewer than asked for. 0 when the engine is busy (the
    /// progress thread holds it for one burst).
    pub fn poll_cq(&self, id: u32, out: &mut [Wc]) -> usize {
        // Found something or not, and even when the progress thread holds
        // the engine, this thread is polling: a ping-pong program comes
        // straight back after handling what it found, and the progress
        // thread, seeing this, lets go of the backend after its burst.
        // (Marked only after a successful try_lock, a poll that keeps
        // finding the progress thread busy would keep it busy: ~30 us per
        // ib_write_lat round until the two happened to miss each other.)
        let now = self.now();
        self.app_polled
            .store(now.as_nanos().max(1), Ordering::Relaxed);
        let Ok(mut g) = self.eng.try_lock() else {
            return 0;
        };
        let mut n = g.dev.poll_cq(id, out);
        let mut moved = 0;
        if n < out.len() {
            // A small receive burst while frames come one or two at a time
            // (a ping-pong: the backend prepares every slot of a burst,
            // 4 us -> 3.65 us typical ib_write_lat at 32 -> 4), the full
            // one as soon as a burst comes back full.
            let full = self.app_rx_full.load(Ordering::Relaxed);
            let (rx, tx) = self.pump_rx(&mut g, now, if full { BURST } else { APP_BURST });
            self.app_rx_full.store(rx >= APP_BURST, Ordering::Relaxed);
            moved = rx + tx;
            n += g.dev.poll_cq(id, &mut out[n..]);
        }
        let empty_polls = if n == 0 && moved == 0 {
            self.empty_polls.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.empty_polls.store(0, Ordering::Relaxed);
            0
        };
        if empty_polls >= ack_hold::FLUSH_AFTER_EMPTY_POLLS && !g.held.is_empty() {
            // The program is waiting, not about to answer: what it waits
            // for may be the peer's answer to these ACKs.
            transmit(&mut g, now, true);
        }
        if !g.parked.is_empty() {
            for wc in &out[..n] {
                if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
                    || wc.status != roce_stack::verbs::WcStatus::Success
                {
                    if let Some((_, w)) = g.parked.get(&wc.qp_num) {
                        if w.wr_id == wc.wr_id {
                            g.parked.remove(&wc.qp_num);
                        }
                    }
                }
            }
        }
        self.release(g);
        if empty_polls % YIELD_EVERY == YIELD_EVERY - 1 {
            // An application that spins on an empty CQ holds a core; now
            // and then it gives it up for a moment, so that another
            // runnable thread (another process's progress thread, woken by
            // a frame) runs now rather than at the end of the spinner's
            // time slice. Not at every empty poll: sched_yield(2) costs
            // about what the poll does, and would double the time to see
            // the next frame.
            thread::yield_now();
        }
        n
    }

    /// `ibv_create_srq`: an SRQ of `max_wr` WQEs of `max_sge` entries.
    pub fn create_srq(&self, max_wr: usize, max_sge: usize, limit: usize, handle: Handle) -> u32 {
        let id = self.next_srq.fetch_add(1, Ordering::Relaxed) + 1;
        if let Ok(mut m) = self.srqs.lock() {
            m.insert(
                id,
                Srq {
                    pool: VecDeque::with_capacity(max_wr),
                    max_wr,
                    max_sge,
                    limit,
                    handle,
                },
            );
            self.n_srqs.fetch_add(1, Ordering::Relaxed);
        }
        id
    }

    /// `ibv_modify_srq`: arm the limit event (`Some(limit)`), resize (`max_wr`).
    ///
    /// # Errors
    /// `EINVAL` for an unknown SRQ or a size below what is queued.
    pub fn modify_srq(
        &self,
        id: u32,
        max_wr: Option<usize>,
        limit: Option<usize>,
    ) -> Result<(), Errno> {
        let mut m = self.srqs.lock().map_err(|_| Errno(libc::EINVAL))?;
        let s = m.get_mut(&id).ok_or(Errno(libc::EINVAL))?;
        if let Some(w) = max_wr {
            if w < s.pool.len() {
                return Err(Errno(libc::EINVAL));
            }
            s.max_wr = w;
        }
        if let Some(l) = limit {
            if l > s.max_wr {
                return Err(Errno(libc::EINVAL));
            }
            s.limit = l;
        }
        Ok(())
    }

    /// `ibv_query_srq`: (max_wr, max_sge, srq_limit).
    ///
    /// # Errors
    /// `EINVAL` for an unknown SRQ.
    pub fn query_srq(&self, id: u32) -> Result<(usize, usize, usize), Errno> {
        let m = self.srqs.lock().map_err(|_| Errno(libc::EINVAL))?;
        let s = m.get(&id).ok_or(Errno(libc::EINVAL))?;
        Ok((s.max_wr, s.max_sge, s.limit))
    }

    /// `ibv_destroy_srq`.
    ///
    /// # Errors
    /// `EBUSY` while a QP receives from it.
    pub fn destroy_srq(&self, id: u32) -> Result<(), Errno> {
        let g = self.lock();
        let used = g.qps.values().any(|q| q.srq == Some(id));
        self.release(g);
        if used {
            return Err(Errno(libc::EBUSY));
        }
        let mut m = self.srqs.lock().map_err(|_| Errno(libc::EINVAL))?;
        m.remove(&id).ok_or(Errno(libc::EINVAL))?;
        self.n_srqs.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    /// `ibv_post_srq_recv`.
    ///
    /// # Errors
    /// `ENOMEM` when the SRQ is full, `EINVAL` for too many SGEs.
    pub fn post_srq_recv(&self, id: u32, wr: &RecvOwned) -> Result<(), Errno> {
        let mut m = self.srqs.lock().map_err(|_| Errno(libc::EINVAL))?;
        let s = m.get_mut(&id).ok_or(Errno(libc::EINVAL))?;
        if wr.nsge > s.max_sge {
            return Err(Errno(libc::EINVAL));
        }
        if s.pool.len() >= s.max_wr {
            return Err(Errno(libc::ENOMEM));
        }
        s.pool.push_back(*wr);
        Ok(())
    }

    /// Wake the progress thread: the application is about to sleep on a
    /// channel or the async descriptor.
    pub fn app_sleeps(&self) {
        self.app_polled.store(0, Ordering::Relaxed);
        self.kick_progress();
    }

    /// The device's counters, for logs: (name, value) of the non-zero ones.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let g = self.lock();
        let c: Vec<_> = g.dev.counters().iter().filter(|(_, v)| *v != 0).collect();
        self.release(g);
        c
    }
}

/// The async events of a device (`ibv_context.async_fd` and what it counts).
#[derive(Debug)]
pub struct AsyncQueue {
    fd: File,
    q: Mutex<VecDeque<AsyncEv>>,
}

impl AsyncQueue {
    fn new() -> io::Result<AsyncQueue> {
        Ok(AsyncQueue {
            fd: File::from(sys::eventfd(true, false)?),
            q: Mutex::new(VecDeque::new()),
        })
    }
    fn push(&self, ev: AsyncEv) {
        if let Ok(mut q) = self.q.lock() {
            q.push_back(ev);
        }
        let _ = (&self.fd).write(&1u64.to_ne_bytes());
    }
}

/// One opened device (`struct ibv_context`). Opening it binds nothing (so
/// `ibv_devinfo` runs beside a program that uses the address); the backend
/// is opened and the progress thread started by the first verb that needs
/// them ([`Context::live`]).
pub struct Context {
    cfg: Config,
    gid: Gid,
    mac: [u8; 6],
    events: Arc<AsyncQueue>,
    live: OnceLock<Arc<Live>>,
    opening: Mutex<()>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A device with configuration `cfg`.
    ///
    /// # Errors
    /// eventfd(2)'s.
    pub fn new(cfg: &Config) -> io::Result<Context> {
        Ok(Context {
            cfg: cfg.clone(),
            gid: Gid::from_ip(cfg.local_ip),
            mac: roce_io::mac_for_ip(cfg.local_ip),
            events: Arc::new(AsyncQueue::new()?),
            live: OnceLock::new(),
            opening: Mutex::new(()),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// GID 0.
    pub fn gid(&self) -> Gid {
        self.gid
    }
    /// The device's MAC: the backend's once open, else the one derived
    /// from the address.
    pub fn mac(&self) -> [u8; 6] {
        self.live.get().map_or(self.mac, |l| l.mac())
    }
    /// The async-event descriptor (`ibv_context.async_fd`).
    pub fn async_raw_fd(&self) -> RawFd {
        self.events.fd.as_raw_fd()
    }

    /// The running device, opened now if it is not yet.
    ///
    /// # Errors
    /// `ENODEV` when the backend cannot be opened (the reason is logged
    /// once per attempt on stderr).
    pub fn live(&self) -> Result<&Arc<Live>, Errno> {
        if let Some(l) = self.live.get() {
            return Ok(l);
        }
        let _g = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = self.live.get() {
            return Ok(l);
        }
        match Live::open(&self.cfg, self.events.clone()) {
            Ok(l) => Ok(self.live.get_or_init(|| l)),
            Err(e) => {
                eprintln!("roce-ibverbs: {e}");
                Err(Errno(libc::ENODEV))
            }
        }
    }

    /// Open the backend now if it is one that must be up before the program
    /// talks to its peer (`ibv_open_device`): DPDK, whose EAL and port take
    /// a while, and whose `net_memif` server must have its socket before
    /// the client's port starts (perftest and the pingpongs open the device
    /// before their TCP side channel and create the PD after it). The
    /// others open at the first verb that needs them. A failure is logged
    /// and the verbs fail with `ENODEV`, as they would at that verb.
    pub fn open_early(&self) {
        if self.cfg.backend == crate::config::BackendKind::Dpdk {
            let _ = self.live();
        }
    }

    /// Block for the next async event (`ibv_get_async_event`); a descriptor
    /// made non-blocking fails with `WouldBlock`.
    ///
    /// # Errors
    /// read(2)'s.
    pub fn get_async_event(&self) -> io::Result<AsyncEv> {
        if let Some(l) = self.live.get() {
            l.app_sleeps();
        }
        let mut b = [0u8; 8];
        loop {
            match (&self.events.fd).read(&mut b) {
                Ok(8) => break,
                Ok(_) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.events
            .q
            .lock()
            .ok()
            .and_then(|mut q| q.pop_front())
            .ok_or_else(|| io::Error::from(io::ErrorKind::WouldBlock))
    }

    /// The running device, if a verb opened it.
    pub fn if_live(&self) -> Option<&Arc<Live>> {
        self.live.get()
    }

    /// Stop the progress thread, if it runs (`ibv_close_device`).
    pub fn close(&self) {
        if let Some(l) = self.live.get() {
            l.close();
        }
    }
}

/// The opened devices, for [`flush_held_at_exit`].
static LIVE: Mutex<Vec<std::sync::Weak<Live>>> = Mutex::new(Vec::new());

/// At process exit (`atexit`, registered by the C layer): every device's
/// held ACKs go out, so that a program that exits right after its last
/// message without destroying its QP does not leave that message
/// unacknowledged (its peer would retry, then fail the send). A device
/// whose engine another thread holds is skipped: exit must not wait.
pub fn flush_held_at_exit() {
    let live: Vec<Arc<Live>> = match LIVE.try_lock() {
        Ok(l) => l.iter().filter_map(std::sync::Weak::upgrade).collect(),
        Err(_) => return,
    };
    for l in live {
        l.flush_held();
    }
}

/// One transmit burst (the pump's transmit half): the device's frames,
/// with its plain ACKs held back ([`crate::ack_hold`]) if this process
/// posted a send in the last [`ack_hold::RECENT_POST`]; then every held
/// frame with `flush` (a request of this process is in the burst, the
/// program is waiting on an empty CQ, or the progress thread is about to
/// sleep), else those that are due.
fn transmit(e: &mut Engine, now: Instant, flush: bool) -> usize {
    let hold = e
        .last_send_post
        .is_some_and(|t| now.saturating_since(t) < ack_hold::RECENT_POST);
    let Engine { dev, io, held, .. } = e;
    let mut dev_empty = false;
    io.tx_burst(BURST, &mut |buf| {
        if !hold {
            // A process that does not post: nothing to hold for, and held
            // ACKs go first (they are older).
            return held.pop_into(buf).or_else(|| dev.poll_transmit(now, buf));
        }
        while !dev_empty {
            let Some(n) = dev.poll_transmit(now, buf) else {
                dev_empty = true;
                break;
            };
            match ack_hold::classify(&buf[..n]) {
                ack_hold::Kind::Other => return Some(n),
                ack_hold::Kind::PlainAck(k) => held.hold_ack(k, now, &buf[..n]),
                ack_hold::Kind::Response if held.is_empty() => return Some(n),
                ack_hold::Kind::Response => held.queue_behind(&buf[..n]),
            }
        }
        if flush || held.due(now) {
            held.pop_into(buf)
        } else {
            None
        }
    })
    .unwrap_or_else(|err| {
        tracing::warn!(%err, "backend transmit failed");
        0
    })
}

/// Before the stack handles `frame`: if it is a SEND (or a WRITE with
/// immediate) for a QP that receives from an SRQ and the QP's own receive
/// queue is empty, move the SRQ's oldest WQE there. Records an SRQ whose
/// armed limit it crossed.
fn srq_topup(
    dev: &mut Device,
    qps: &HashMap<u32, QpInfo>,
    parked: &mut HashMap<u32, (u32, RecvOwned)>,
    srqs: &mut HashMap<u32, Srq>,
    events: &mut Vec<Handle>,
    frame: &[u8],
) {
    let Ok(pkt) = RocePacket::parse(frame) else {
        return;
    };
    let bth = pkt.bth();
    let info = bth.opcode.info();
    let consumes = info.is_request
        && (info.kind == OpKind::Send
            || (info.kind == OpKind::Write && info.hdrs.contains(ExtHeader::ImmDt)));
    if !consumes {
        return;
    }
    let qpn = bth.dest_qp;
    let Some(srq_id) = qps.get(&qpn).and_then(|q| q.srq) else {
        return;
    };
    if dev.qp(qpn).map_or(true, |q| q.rq_outstanding() > 0) {
        return;
    }
    let Some(s) = srqs.get_mut(&srq_id) else {
        return;
    };
    let Some(w) = s.pool.pop_front() else {
        return;
    };
    match dev.post_recv(qpn, &w.as_wr()) {
        Ok(()) => {
            parked.insert(qpn, (srq_id, w));
            if s.limit > 0 && s.pool.len() < s.limit {
                s.limit = 0;
                events.push(s.handle);
            }
        }
        Err(_) => s.pool.push_front(w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's view (`/proc/self/task/*/status`, `SigBlk`) of the
    /// progress thread: process-directed signals such as perftest's
    /// `SIGALRM` (`-D`) are blocked there, so they run on the program's
    /// own threads; fault signals are not.
    #[test]
    fn progress_thread_blocks_asynchronous_signals() {
        // An address no other test of the workspace binds (port 4791).
        let cfg = Config::from_lookup(|k| match k {
            "ROCE_LOCAL_IP" => Some("127.0.0.21".to_string()),
            _ => None,
        })
        .unwrap();
        let ctx = Context::new(&cfg).unwrap();
        ctx.live().expect("device opens on 127.0.0.21");
        // The thread names itself and sets its mask as it starts: look
        // until it has (or for 10 s).
        let mut blocked = None;
        let start = std::time::Instant::now();
        while blocked.is_none_or(|m| m == 0) && start.elapsed() < Duration::from_secs(10) {
            blocked = progress_sigblk();
            thread::sleep(Duration::from_millis(5));
        }
        ctx.close();
        let m = blocked.expect("a roce-progress thread");
        let bit = |s: i32| m & (1u64 << (s - 1)) != 0;
        for s in [
            libc::SIGALRM,
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGCHLD,
        ] {
            assert!(
                bit(s),
                "signal {s} deliverable to the progress thread: {m:#x}"
            );
        }
        for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL] {
            assert!(!bit(s), "fault signal {s} blocked: {m:#x}");
        }
    }

    /// `SigBlk` of the thread named `roce-progress`, if there is one.
    fn progress_sigblk() -> Option<u64> {
        for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() == "roce-progress" {
                let st = std::fs::read_to_string(t.path().join("status")).ok()?;
                let hex = st.lines().find_map(|l| l.strip_prefix("SigBlk:"))?;
                return u64::from_str_radix(hex.trim(), 16).ok();
            }
        }
        None
    }
}
