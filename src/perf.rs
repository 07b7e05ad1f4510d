//! `roce perf`: bandwidth and latency of RC RDMA WRITE, RDMA READ, SEND and
//! ATOMIC FETCH_AND_ADD between two RoCEv2 devices, after perftest's
//! `ib_write_bw` / `ib_read_bw` / `ib_send_bw` / `ib_atomic_bw` and their
//! `_lat` twins.
//!
//! # What runs
//!
//! Both ends run in this process: two [`roce_stack::verbs::Device`]s (the
//! client 10.0.0.1, MAC 02:00:00:00:00:01, and the server 10.0.0.2, MAC
//! 02:00:00:00:00:02) joined by an in-memory Ethernet, **one thread per side**.
//! Each thread owns its device and loops (module `engine`):
//!
//! 1. hand every frame received from the peer to `handle_frame(now, ..)`;
//! 2. run `handle_timeout(now)` once `poll_timeout()` has passed;
//! 3. poll the CQ (client: send completions; server: receive completions, each
//!    receive buffer re-posted at once);
//! 4. client: post work requests, keeping `--tx-depth` outstanding per QP
//!    (one in all with `--lat`);
//! 5. `poll_transmit(now, ..)` into a free frame buffer and pass it to the peer.
//!
//! `now` is a monotonic clock the CLI reads ([`std::time::Instant`], in
//! nanoseconds since the start of the run); the stack itself never reads a
//! clock. Frames travel in a fixed pool of reusable buffers per direction,
//! circulated through two single-producer,
//! single-consumer rings (frames one way, empty buffers back, each side
//! publishing once per burst; `roce_io::mem`), so nothing is allocated per
//! frame; a sender that runs
//! out of buffers waits for the peer to return some, as a NIC does when its
//! ring is full. `--loss P` drops each frame with probability `P`, decided by a
//! seeded SplitMix64 generator per direction ([`roce_stack::testing::Rng`]), so
//! the RC retransmission machinery (sequence NAKs, ACK timeouts, go-back-N;
//! IBTA 1.7 §9.7.5) is exercised. The loss is a [`roce_io::adapt::FaultIo`]
//! around each side's backend, so it works the same over every backend.
//!
//! The QPs are set up as [`roce_stack::testing::connect`] does (RESET → INIT →
//! RTR → RTS, IBTA 1.7 §10.3.1), `-q` of them, work spread round-robin.
//! `--mtu` is the path MTU; the devices get a 9000-byte Ethernet MTU when it
//! needs one (2048 and 4096; a device's active MTU is its Ethernet MTU − 80,
//! as in rxe), 1500 otherwise.
//!
//! # What is measured
//!
//! - BW (as perftest): `-n` iterations **per QP**; average bandwidth is
//!   `qps × iterations × size × 8` bits over the time from the first post to the
//!   last completion, in Gbit/s (10^9 bit/s); the message rate is in millions
//!   of messages per second. The peak is perftest's: the best
//!   `(t_completed[j] − t_posted[i]) / (j − i + 1)` over all `i <= j` (over a
//!   uniform sample of at most 4096 points when there are more iterations).
//!   A duration run (`-D`) stamps no operation (the stamps would grow by 16
//!   bytes per message for as long as the run lasts); it counts completions
//!   per 100 ms instead, and its peak is the best one-second window of those
//!   (the average when the run is shorter). So does a `-n` run of more than
//!   2^20 operations in all (16 MiB of stamps; perftest stops measuring the
//!   peak above 20,000 iterations), and its table says so.
//! - Latency (`--lat`): the time from `post_send` to the poll that returns its
//!   completion, with one operation outstanding, in microseconds. For WRITE and
//!   SEND that is a full round trip (request out, ACK back), like perftest's
//!   `ib_read_lat` and `ib_atomic_lat` measure; perftest's `ib_write_lat` and
//!   `ib_send_lat` instead ping-pong between the two hosts and report half a
//!   round trip, so their figures correspond to about half of ours. At most
//!   2^20 samples are kept: beyond, the median and percentiles come from a
//!   uniform sample of that many (reservoir sampling) and the table says so;
//!   minimum, maximum, mean and standard deviation are always over every
//!   operation.
//!
//! # Verification
//!
//! At the end (or as completions arrive) the data is checked: WRITE: each QP's
//! region of the server MR equals the client's pattern; READ: each QP's region
//! of the client MR equals the server's pattern; SEND: every received message
//! has the right length, its per-QP sequence number in its first 8 bytes and the
//! QP's pattern after it (so loss, duplication and reordering of messages are
//! caught); ATOMIC: every FETCH_ADD returned a distinct original value
//! `k × add` with `k` below the number of operations, and the final counter
//! equals the number of FETCH_ADDs × the add value. A run also fails on an
//! error completion, a fatal QP or CQ event, or when it stalls (no completion
//! for 5 s, or 3 local ACK timeouts if that is longer).
//!
//! # Backends and two processes
//!
//! The frames move through a [`roce_io`] backend: `mem` (the
//! in-memory wire above, the default) or, in one process, `udp` (two kernel
//! UDP sockets, 127.0.0.1 and 127.0.0.2). With `--server` / `--client ADDR`
//! the two ends run in two processes (or hosts), over `udp`, `tap` or
//! `dpdk`, after exchanging their QPNs, PSNs, memory keys and addresses over
//! a TCP side channel as perftest does ([`run_remote`]; the format is in the
//! `remote` module's source).
//!
//! # Limits, keys and hostile peers
//!
//! Every input is bounded before anything is allocated: `-q` at most
//! [`MAX_QPS`], `--tx-depth` at most [`MAX_TX_DEPTH`], and everything the
//! configuration makes the run allocate (both sides' memory regions, every
//! QP's send and receive rings with their WQE slots and responder resources,
//! the CQs, frame buffers, stamps) at most [`MAX_MEMORY`]
//! ([`roce_stack::verbs::QpInitAttr::footprint`] counts a QP); a server
//! applies the same checks to the configuration a client sends and refuses
//! it with an `error` line (exit status 2). The side channel's limits are in
//! the `remote` module.
//!
//! Without `--seed` the seed is random (`/dev/urandom`), and with it the
//! initial PSNs (24 bits per QP, as perftest's `lrand48() & 0xffffff`), the
//! memory regions' R_Keys (32 bits) and their VAs (a random page), so a peer
//! that is not party to the side channel cannot aim a forged request at a
//! run; `--seed S` repeats a run exactly. Each side registers exactly the
//! region it advertises (`len` bytes at `va`), so an access just past it is
//! refused with a remote access error NAK (IBTA 1.7 §9.7.4.1.5 C9-88). A QP
//! that fails (e.g. on such a NAK) puts what it has queued on the wire
//! before its loop stops, so the peer gets the NAK and its completion status.
//!
//! # Capture
//!
//! `--pcap OUT` writes every frame the wire delivers, both directions, to a
//! classic pcap file (link type Ethernet, nanosecond timestamps from the run's
//! clock plus the wall-clock time at its start), in the order the frames were
//! put on the wire. Frames dropped by `--loss` are not in it, so the capture
//! shows what a tap at the receivers would: the PSN gaps, the NAKs and the
//! retransmissions. Writing takes a lock per frame and slows the run. The
//! recorder is a [`roce_io::adapt::TeeIo`] inside each side's loss, on any
//! backend; between processes each side records what it sends (after its
//! `--loss`) and what it receives.
//!
//! # Memory alignment
//!
//! Memory regions are laid out 4096-byte aligned and frame buffers start 128
//! bytes past a 256-byte boundary, so every payload copy between a frame and a
//! memory region has `(dst − src) mod 4096` outside 1..=31: glibc 2.36's
//! `rep movsb` memcpy (used above ~2 KiB) runs ~35× slower in that window on
//! the Zen 3 machines this runs on (glibc bug 30994; PERF-NOTES.md). Headers are
//! 54..=74 bytes long, so the differences are 54..=74 or 182..=202 modulo 256.

mod cpu;
mod engine;
mod remote;
mod stats;

use std::fmt;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use roce_stack::verbs::Mtu;

pub use remote::{check_remote, run_remote, Remote, RemoteRole, DEFAULT_PORT};
pub use roce_io::BackendKind;
pub use stats::{BwStats, LatStats};

/// The transport line of an in-process run on the `mem` backend.
pub const MEM_TRANSPORT: &str = "in-memory wire (one thread per side)";

/// The value each FETCH_AND_ADD adds to the server's counter.
pub const ATOMIC_ADD: u64 = 7;

/// Message size of an atomic operation, bytes (IBTA 1.7 §9.4.5: 64-bit
/// operands).
pub const ATOMIC_SIZE: u64 = 8;

/// Largest message size accepted, bytes (the RETH DMA length limit is 2^31,
/// IBTA 1.7 §9.4.4; memory is the practical bound).
pub const MAX_SIZE: u64 = 1 << 30;

/// Largest memory a run may allocate, bytes: both sides' memory regions,
/// QPs (rings, WQE slots, responder resources), CQs, frame buffers and
/// stamps together, as computed from the configuration before anything is
/// allocated (the same bound applies to a server taking its configuration
/// from a client).
pub const MAX_MEMORY: u64 = 4 << 30;

/// Largest `-q` (perftest's `MAX_QP_NUM` is larger; a software stack's QPs
/// cost memory and time per pass).
pub const MAX_QPS: u32 = 4096;

/// Largest `--tx-depth` (ConnectX's `max_qp_wr` is 32768).
pub const MAX_TX_DEPTH: u32 = 16384;

/// Largest `--qp-timeout` code accepted: 4.096 µs × 2^20 ≈ 4.3 s (longer
/// timers would make a lossy run look hung).
pub const MAX_QP_TIMEOUT: u8 = 20;

/// A run that completes nothing for this long has stalled (unless three local
/// ACK timeouts are longer).
pub const STALL: Duration = Duration::from_secs(5);

/// Signalled send WRs: one in this many (perftest's `CQ_MODERATION`, the
/// default of its `--cq-mod`).
pub const DEFAULT_CQ_MOD: u32 = 100;

/// The operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// RDMA WRITE (`ib_write_bw`, `ib_write_lat`).
    Write,
    /// RDMA READ (`ib_read_bw`, `ib_read_lat`).
    Read,
    /// SEND into posted receive buffers (`ib_send_bw`, `ib_send_lat`).
    Send,
    /// ATOMIC FETCH_AND_ADD on one 8-byte counter (`ib_atomic_bw`, `ib_atomic_lat`).
    Atomic,
}

impl Op {
    /// perftest's name of the operation in its table titles.
    pub fn title(self) -> &'static str {
        match self {
            Op::Write => "RDMA_Write",
            Op::Read => "RDMA_Read",
            Op::Send => "Send",
            Op::Atomic => "Atomic FETCH_AND_ADD",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
            Op::Atomic => "atomic",
        })
    }
}

/// How long a run lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// This many iterations per QP (`-n`).
    Iters(u64),
    /// Post work for this long (`-D`), then wait for what is outstanding.
    Duration(Duration),
}

/// A validated run configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfConfig {
    /// Operation.
    pub op: Op,
    /// Latency test (one operation outstanding) instead of bandwidth.
    pub lat: bool,
    /// Message size, bytes (8 for atomics).
    pub size: u64,
    /// Iterations or duration.
    pub limit: Limit,
    /// Number of QPs (work spread round-robin).
    pub qps: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// Work requests outstanding per QP (bandwidth tests).
    pub tx_depth: u32,
    /// Bandwidth tests: one send WR in this many is signalled (perftest's
    /// `-Q`/`--cq-mod`, default 100, at most `tx_depth`); the others complete
    /// with it, unreported (ibverbs: an unsignalled WR completes when a later
    /// signalled one does). 1 for latency tests.
    pub cq_mod: u32,
    /// Local ACK timeout code: 4.096 µs × 2^code (IBTA 1.7 §9.7.6.1.3); 0 = no
    /// timer (a lost tail then stalls the run).
    pub qp_timeout: u8,
    /// Probability that the wire drops a frame, in [0, 1).
    pub loss: f64,
    /// Seed of the loss generator, the data patterns, the initial PSNs and
    /// the memory regions' R_Keys and VAs (random unless `--seed` was
    /// given).
    pub seed: u64,
    /// Write the delivered frames of both directions to this pcap file.
    pub pcap: Option<PathBuf>,
    /// What carries the frames.
    pub backend: BackendKind,
}

/// Options as given on the command line, before defaults and cross-checks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PerfOptions {
    /// Operation.
    pub op: Option<Op>,
    /// `--lat`.
    pub lat: bool,
    /// `-s`, bytes.
    pub size: Option<u64>,
    /// `-n`.
    pub iters: Option<u64>,
    /// `-D`.
    pub duration: Option<Duration>,
    /// `-q` (default 1).
    pub qps: Option<u32>,
    /// `--mtu` (default 4096).
    pub mtu: Option<Mtu>,
    /// `--tx-depth` (default 128).
    pub tx_depth: Option<u32>,
    /// `--cq-mod` (default 100, perftest's; capped at the TX depth).
    pub cq_mod: Option<u32>,
    /// `--qp-timeout` (default 14, perftest's).
    pub qp_timeout: Option<u8>,
    /// `--loss` (default 0).
    pub loss: Option<f64>,
    /// `--seed` (default: a random seed, so that initial PSNs, R_Keys and
    /// VAs differ from run to run).
    pub seed: Option<u64>,
    /// `--pcap`.
    pub pcap: Option<PathBuf>,
    /// `--backend` (default `mem`).
    pub backend: Option<BackendKind>,
}

impl PerfConfig {
    /// Apply perftest's defaults (size 65536 for BW, 2 for latency, 8 for
    /// atomics; 5000 iterations for BW, 1000 for latency; 1 QP; MTU 4096;
    /// TX depth 128) and check the combination.
    pub fn from_options(o: &PerfOptions) -> Result<PerfConfig, PerfError> {
        let op =
            o.op.ok_or_else(|| usage("missing operation (write, read, send or atomic)"))?;
        let size = match (op, o.size) {
            (Op::Atomic, None) => ATOMIC_SIZE,
            (Op::Atomic, Some(s)) if s != ATOMIC_SIZE => {
                return Err(usage(format!(
                    "atomic operations are {ATOMIC_SIZE} bytes; -s {s} is not allowed"
                )))
            }
            (_, Some(s)) => s,
            (_, None) if o.lat => 2,
            (_, None) => 65536,
        };
        if size > MAX_SIZE {
            return Err(usage(format!(
                "message size {size} is larger than the maximum {MAX_SIZE}"
            )));
        }
        let limit = match (o.iters, o.duration) {
            (Some(_), Some(_)) => return Err(usage("-n and -D cannot be used together")),
            (Some(0), _) => return Err(usage("-n must be at least 1")),
            (Some(n), None) => Limit::Iters(n),
            (None, Some(d)) if d.is_zero() => return Err(usage("-D must be positive")),
            (None, Some(d)) => Limit::Duration(d),
            (None, None) => Limit::Iters(if o.lat { 1000 } else { 5000 }),
        };
        let qps = o.qps.unwrap_or(1);
        if !(1..=MAX_QPS).contains(&qps) {
            return Err(usage(format!("-q must be 1..={MAX_QPS}, not {qps}")));
        }
        let tx_depth = o.tx_depth.unwrap_or(128);
        if !(1..=MAX_TX_DEPTH).contains(&tx_depth) {
            return Err(usage(format!(
                "--tx-depth must be 1..={MAX_TX_DEPTH}, not {tx_depth}"
            )));
        }
        let cq_mod = match o.cq_mod {
            Some(0) => return Err(usage("--cq-mod must be at least 1")),
            _ if o.lat => 1,
            Some(m) => m.min(tx_depth),
            None => DEFAULT_CQ_MOD.min(tx_depth),
        };
        let qp_timeout = o.qp_timeout.unwrap_or(14);
        if qp_timeout > MAX_QP_TIMEOUT {
            return Err(usage(qp_timeout_range(&qp_timeout.to_string())));
        }
        let backend = o.backend.unwrap_or(BackendKind::Mem);
        if backend == BackendKind::Dpdk && cfg!(not(feature = "dpdk")) {
            return Err(usage(roce_io::NO_DPDK));
        }
        let loss = o.loss.unwrap_or(0.0);
        if !(0.0..1.0).contains(&loss) {
            return Err(usage(format!("--loss must be in [0, 1), not {loss}")));
        }
        let cfg = PerfConfig {
            op,
            lat: o.lat,
            size,
            limit,
            qps,
            mtu: o.mtu.unwrap_or(Mtu::Mtu4096),
            tx_depth,
            cq_mod,
            qp_timeout,
            loss,
            seed: o.seed.unwrap_or_else(random_seed),
            pcap: o.pcap.clone(),
            backend,
        };
        let mem = engine::memory_needed(&cfg);
        if mem.total() > MAX_MEMORY {
            return Err(usage(format!(
                "the run would need {} MiB of memory ({} MiB of memory regions, {} MiB of QPs and CQs \
                 for {} QPs x {} WQEs, {} MiB of buffers; limit {} MiB); lower -s, -q or --tx-depth",
                mem.total() >> 20,
                mem.regions >> 20,
                mem.queues >> 20,
                cfg.qps,
                cfg.depth(),
                mem.buffers >> 20,
                MAX_MEMORY >> 20
            )));
        }
        Ok(cfg)
    }

    /// Work requests outstanding per QP: `tx_depth`, or 1 for latency tests.
    pub fn depth(&self) -> u32 {
        if self.lat {
            1
        } else {
            self.tx_depth
        }
    }
}

fn usage(msg: impl Into<String>) -> PerfError {
    PerfError::Usage(msg.into())
}

/// Parse an operation name: `write`, `read`, `send` or `atomic`.
pub fn parse_op(s: &str) -> Result<Op, String> {
    match s {
        "write" => Ok(Op::Write),
        "read" => Ok(Op::Read),
        "send" => Ok(Op::Send),
        "atomic" => Ok(Op::Atomic),
        _ => Err(format!(
            "unknown operation '{s}' (expected write, read, send or atomic)"
        )),
    }
}

/// Parse a size in bytes with an optional binary suffix: `65536`, `64K`,
/// `64KiB`, `1M`, `1G` (K = 1024, M = 1024², G = 1024³; case-insensitive).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (num, suffix) = t.split_at(digits);
    let bad =
        || format!("invalid size '{s}' (expected bytes, optionally with K, M or G: 4096, 64K, 1M)");
    if num.is_empty() {
        return Err(bad());
    }
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift).ok_or_else(bad)
}

/// Parse a path MTU: 256, 512, 1024, 2048 or 4096 bytes (`enum ibv_mtu`).
pub fn parse_mtu(s: &str) -> Result<Mtu, String> {
    s.trim()
        .parse::<usize>()
        .ok()
        .and_then(Mtu::from_bytes)
        .ok_or_else(|| format!("invalid MTU '{s}' (expected 256, 512, 1024, 2048 or 4096)"))
}

/// The message for a `--qp-timeout` outside what `roce perf` accepts.
fn qp_timeout_range(v: &str) -> String {
    format!(
        "--qp-timeout must be 0..={MAX_QP_TIMEOUT} (4.096 us x 2^code, 0 = no timer; the IBTA's \
         5-bit field goes to 31, but above {MAX_QP_TIMEOUT} (4.3 s) a lossy run looks hung), not {v}"
    )
}

/// Parse a local ACK timeout code (`-u`): 0..=[`MAX_QP_TIMEOUT`].
pub fn parse_qp_timeout(s: &str) -> Result<u8, String> {
    match s.trim().parse::<u8>() {
        Ok(v) if v <= MAX_QP_TIMEOUT => Ok(v),
        _ => Err(qp_timeout_range(s.trim())),
    }
}

/// A seed from the operating system's random source (`/dev/urandom`), for
/// runs without `--seed`; if that cannot be read, the standard library's
/// per-process random hash keys mixed with the time and the process ID.
pub fn random_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_le_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Parse a loss probability in [0, 1).
pub fn parse_loss(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if (0.0..1.0).contains(&p) => Ok(p),
        _ => Err(format!(
            "invalid loss '{s}' (expected a probability in [0, 1))"
        )),
    }
}

/// Parse a duration in seconds (`-D`), e.g. `5` or `0.5`.
pub fn parse_seconds(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 86_400.0 => Ok(Duration::from_secs_f64(x)),
        _ => Err(format!(
            "invalid duration '{s}' (expected seconds, 0 < D <= 86400)"
        )),
    }
}

/// Why a run did not produce a verified result.
#[derive(Debug)]
#[non_exhaustive]
pub enum PerfError {
    /// Bad arguments (exit status 2).
    Usage(String),
    /// The pcap file could not be created or written.
    Pcap(String),
    /// A work completion had an error status, a QP or CQ failed, or a side
    /// stalled.
    Run(String),
    /// The transferred data is wrong.
    Verify(String),
    /// Writing the report failed.
    Output(io::Error),
}

impl PerfError {
    /// The process exit status: 2 for usage errors and an unusable pcap path,
    /// 1 for failed runs and verification failures.
    pub fn exit_code(&self) -> u8 {
        match self {
            PerfError::Usage(_) => 2,
            PerfError::Pcap(_) => 2,
            _ => 1,
        }
    }
    /// Whether this is a write to a closed pipe.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, PerfError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfError::Usage(m) => f.write_str(m),
            PerfError::Pcap(m) => write!(f, "pcap: {m}"),
            PerfError::Run(m) => write!(f, "run failed: {m}"),
            PerfError::Verify(m) => write!(f, "data verification FAILED: {m}"),
            PerfError::Output(e) => write!(f, "writing the report: {e}"),
        }
    }
}

impl std::error::Error for PerfError {}

/// Measured figures.
#[derive(Debug, Clone, PartialEq)]
pub enum Figures {
    /// Bandwidth test.
    Bw(BwStats),
    /// Latency test.
    Lat(LatStats),
}

/// The result of a verified run.
#[derive(Debug, Clone)]
pub struct PerfReport {
    /// The configuration that ran.
    pub config: PerfConfig,
    /// What carried the frames (the table's "Transport" line).
    pub transport: String,
    /// In a two-process run, which end this report is from
    /// (`"client"` / `"server"`).
    pub side: Option<String>,
    /// Operations completed per QP (total / QPs).
    pub iterations: u64,
    /// Operations completed in all.
    pub total_ops: u64,
    /// The figures.
    pub figures: Figures,
    /// Retransmission-related device counters `(name, client, server)`, only
    /// those not zero on either side.
    pub retrans: Vec<(&'static str, u64, u64)>,
    /// Counters of received frames dropped before reaching a QP
    /// ([`DROP_COUNTERS`]) `(name, client, server)`, only those not zero on
    /// either side.
    pub drops: Vec<(&'static str, u64, u64)>,
    /// Frames each side handed to the wire `[client, server]`.
    pub frames_sent: [u64; 2],
    /// Frames the wire dropped (`--loss`) `[client → server, server → client]`.
    pub frames_dropped: [u64; 2],
    /// Frames written to the pcap file.
    pub pcap_frames: u64,
    /// What was verified.
    pub verified: String,
    /// How the figures were computed, when a long run kept only a bounded
    /// number of stamps or samples (one line each).
    pub notes: Vec<String>,
}

/// Device counters that tell about loss and retransmission (names after mlx5
/// and rxe, see `roce_stack::counters`).
pub const RETRANS_COUNTERS: &[&str] = &[
    "local_ack_timeout_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "out_of_sequence",
    "seq_nak_sent",
    "duplicate_request",
    "resp_duplicate",
    "resp_unexpected",
    "dup_no_resource",
    "rcvd_rnr_err",
    "send_rnr_err",
    "retry_exceeded_err",
    "rnr_nak_retry_err",
];

/// Device counters of received frames dropped before any QP saw them
/// (malformed, for no QP, for a QP in the wrong state or from the wrong
/// peer): garbage on the wire, not retransmissions. Printed under their own
/// heading when not zero.
pub const DROP_COUNTERS: &[&str] = &[
    "rx_parse_drops",
    "rx_qp_not_found",
    "rx_qp_bad_state",
    "rx_opcode_qp_mismatch",
    "rx_pkey_mismatch",
    "rx_addr_mismatch",
    "rx_cnp_qp_not_found",
];

const RULE: &str =
    "---------------------------------------------------------------------------------------";

impl PerfReport {
    /// Write the perftest-style table and the trailer lines.
    pub fn write_table(&self, out: &mut dyn Write) -> io::Result<()> {
        let c = &self.config;
        writeln!(out, "{RULE}")?;
        let kind = if c.lat { "Latency" } else { "BW" };
        writeln!(out, "                    {} {} Test", c.op.title(), kind)?;
        writeln!(
            out,
            " Transport: {}   QPs: {}   MTU: {}   TX depth: {}",
            self.transport,
            c.qps,
            c.mtu.bytes(),
            c.depth()
        )?;
        if let Some(side) = &self.side {
            writeln!(
                out,
                " Side: {side}{}",
                if side == "server" {
                    " (figures measured by the client)"
                } else {
                    ""
                }
            )?;
        }
        if c.loss > 0.0 {
            writeln!(
                out,
                " Loss: {} (seed {})   dropped frames: {} client->server, {} server->client",
                c.loss, c.seed, self.frames_dropped[0], self.frames_dropped[1]
            )?;
        }
        if c.lat {
            writeln!(
                out,
                " Latency: post to completion, one operation outstanding (a full round trip)"
            )?;
        }
        writeln!(out, "{RULE}")?;
        match &self.figures {
            Figures::Bw(b) => {
                writeln!(
                    out,
                    " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
                )?;
                writeln!(
                    out,
                    " {:<10} {:<14} {:<18.2} {:<20.2} {:.6}",
                    c.size, self.iterations, b.peak_gbps, b.avg_gbps, b.msg_rate_mpps
                )?;
            }
            Figures::Lat(l) => {
                writeln!(
                    out,
                    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
                )?;
                writeln!(
                    out,
                    " {:<6} {:<14} {:<14.2} {:<12.2} {:<18.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                    c.size,
                    self.iterations,
                    l.min_us,
                    l.max_us,
                    l.typical_us,
                    l.avg_us,
                    l.stdev_us,
                    l.p99_us,
                    l.p999_us
                )?;
            }
        }
        writeln!(out, "{RULE}")?;
        for n in &self.notes {
            writeln!(out, " {n}")?;
        }
        if self.side.is_some() {
            writeln!(
                out,
                " Total: {} bytes in {} operations ({} QP(s) x {} iterations x {} bytes)",
                self.total_ops * c.size,
                self.total_ops,
                c.qps,
                self.iterations,
                c.size
            )?;
        }
        if !self.retrans.is_empty() {
            writeln!(out, " Retransmission counters (client / server):")?;
            for (name, a, b) in &self.retrans {
                writeln!(out, "   {name:<24} {a} / {b}")?;
            }
        }
        if !self.drops.is_empty() {
            writeln!(
                out,
                " Received frames dropped before any QP (client / server):"
            )?;
            for (name, a, b) in &self.drops {
                writeln!(out, "   {name:<24} {a} / {b}")?;
            }
        }
        if let Some(p) = &c.pcap {
            writeln!(
                out,
                " pcap: {} frames written to {}",
                self.pcap_frames,
                p.display()
            )?;
        }
        writeln!(out, " data verified: OK ({})", self.verified)?;
        Ok(())
    }
}

/// Run the test described by `cfg` and verify its data. `progress` (if any)
/// is called about every 100 ms from the calling thread with the operations
/// completed so far and the time elapsed.
pub fn run(
    cfg: &PerfConfig,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    engine::run(cfg, &Placement::default(), progress)
}

/// Where a run puts its memory regions and frame buffers in (virtual)
/// memory, for benches that vary the alignment of the payload copies (see
/// "Memory alignment" above). The default is what `roce perf` uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Placement {
    /// Bytes past a 4096-byte boundary at which the client's and the server's
    /// memory region start, `[client, server]` (0 = page-aligned, the
    /// default). The I/O virtual addresses do not change.
    pub mr_offset: [usize; 2],
    /// `Some(p)`: every frame buffer (both directions) starts exactly `p`
    /// bytes past a 4096-byte boundary (`p` is taken modulo 4096), so every
    /// copy between a frame and a memory region has one known
    /// `(dst − src) mod 4096`. `None` (the default): 128 bytes past a
    /// 256-byte boundary, page offset left to the allocator.
    pub frame_page_offset: Option<usize>,
}

/// [`run`] with the memory placed as `placement` says (benches).
pub fn run_placed(
    cfg: &PerfConfig,
    placement: &Placement,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    engine::run(cfg, placement, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("0"), Ok(0));
        for bad in ["", "K", "-1", "1.5K", "12Q", "1KK", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mtus_and_loss() {
        assert_eq!(parse_mtu("4096"), Ok(Mtu::Mtu4096));
        assert_eq!(parse_mtu("256"), Ok(Mtu::Mtu256));
        for bad in ["128", "1000", "8192", "x", ""] {
            assert!(parse_mtu(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_loss("0"), Ok(0.0));
        assert_eq!(parse_loss("0.5"), Ok(0.5));
        for bad in ["1", "-0.1", "NaN", "x", "1.5"] {
            assert!(parse_loss(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_follow_perftest() {
        let o = PerfOptions {
            op: Some(Op::Write),
            ..PerfOptions::default()
        };
        let c = PerfConfig::from_options(&o).unwrap();
        assert_eq!(
            (c.size, c.limit, c.qps, c.tx_depth, c.cq_mod),
            (65536, Limit::Iters(5000), 1, 128, 100)
        );
        assert_eq!(c.mtu, Mtu::Mtu4096);
        let c = PerfConfig::from_options(&PerfOptions {
            lat: true,
            ..o.clone()
        })
        .unwrap();
        assert_eq!(
            (c.size, c.limit, c.depth(), c.cq_mod),
            (2, Limit::Iters(1000), 1, 1)
        );
        // perftest caps the moderation at the TX depth.
        let c = PerfConfig::from_options(&PerfOptions {
            tx_depth: Some(16),
            ..o.clone()
        })
        .unwrap();
        assert_eq!(c.cq_mod, 16);
        let a = PerfOptions {
            op: Some(Op::Atomic),
            ..PerfOptions::default()
        };
        assert_eq!(PerfConfig::from_options(&a).unwrap().size, 8);
        for s in [0, 4, 16] {
            let e = PerfConfig::from_options(&PerfOptions {
                size: Some(s),
                ..a.clone()
            });
            assert!(matches!(e, Err(PerfError::Usage(_))), "{s}");
        }
    }
}
