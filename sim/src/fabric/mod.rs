//! The discrete-event engine: hosts (each a real
//! [`Device`](roce_stack::verbs::Device) behind a NIC
//! model), output-queued switches wired by a [`Topology`], links, and the
//! flows the hosts run.
//!
//! Time is virtual, in picoseconds (so serialisation times at 100 Gbit/s add
//! up without rounding drift); the devices see it rounded down to the
//! nanosecond. Events come out in the order of (time, insertion sequence)
//! (a timing wheel, `queue.rs`), so a run is a pure function of the
//! configuration and the seed.
//!
//! Links are full duplex and store-and-forward: a frame leaves its sender
//! when the sender's transmitter is free, occupies the link for its
//! serialisation time ([`crate::net::wire_bytes`] at the link rate) and is
//! delivered whole one propagation delay after its last bit left.
//!
//! Switches forward by destination MAC through their ECMP groups
//! ([`crate::topo::Wiring`]), hashing the five-tuple when a group has more
//! than one port. Each port accounts the bytes it received that are still
//! buffered anywhere in its switch (per ingress port and priority) and sends
//! PFC XOFF/XON to its peer from those counts; a port whose peer is a switch
//! honours the PFC frames that peer sends, so pause propagates hop by hop.
//! Hosts honour PFC and never send it.

mod frame;
mod host;
mod queue;
mod switch;

use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;

use roce_stack::cc::CcConfig;
use roce_stack::resources::wr::MAX_SGE;
use roce_stack::testing::Rng;
use roce_stack::time::Instant;
use roce_stack::transport::av::Gid;
use roce_stack::verbs::{DeviceConfig, WcStatus};

use crate::metrics::{Bins, Histogram};
use crate::net::{self, RedEcn};
use crate::pfc::{self as pfcmod, HostPause, PfcConfig};
use crate::topo::{LinkSpec, Peer, Tier, Topology, TopologyError, Wiring};

use frame::FramePool;
pub use frame::{Frame, SMALL_FRAME};
pub use host::Host;
use queue::{Entry, EventQueue};
use switch::Port;
pub use switch::{PortStats, Switch, PFC_LOG_MAX};

/// Picoseconds.
pub type Ps = u64;
/// Picoseconds per nanosecond.
pub const PS_PER_NS: Ps = 1_000;
/// Picoseconds per microsecond.
pub const PS_PER_US: Ps = 1_000_000;

/// DSCP of RoCE data (AF31; common RoCE practice and the CC helper's
/// default, ROCEV2-DIGEST §7) → priority 3 under the default DSCP map.
pub const DATA_DSCP: u8 = 26;
/// ECN codepoint ECT(0) (RFC 3168 §5).
pub const ECT0: u8 = 2;

/// Everything about the fabric that is not a flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricConfig {
    /// Rate of every link of a single-switch fabric ([`Fabric::new`]),
    /// Gbit/s; a [`Topology`] carries its own link rates.
    pub link_gbps: f64,
    /// One-way propagation delay of every link of a single-switch fabric,
    /// nanoseconds (cable plus the switch pipeline latency folded in).
    pub prop_delay_ns: u64,
    /// Ethernet MTU of the hosts, bytes; the path MTU is the largest IB MTU
    /// that fits (4200 → 4096).
    pub netdev_mtu: usize,
    /// Shared packet buffer of each switch, bytes of frames (tail drop when
    /// full).
    pub switch_buffer_bytes: u64,
    /// RED/ECN marking at switch egress (`None`: never mark), for a
    /// 100 Gbit/s port; a port of another speed scales Kmin and Kmax by
    /// its rate / 100 Gbit/s (the same queueing delay), as the HPCC
    /// simulator's per-speed `KMIN_MAP`/`KMAX_MAP` do.
    pub ecn: Option<RedEcn>,
    /// Where the marking decision is taken: at dequeue (default; the queue
    /// depth seen by a frame as it leaves, so the CE mark carries no queueing
    /// delay, as the DCQCN paper recommends) or at enqueue.
    pub ecn_at: MarkAt,
    /// PFC generation at the switches and honouring at hosts and switches
    /// (`None`: off).
    pub pfc: Option<PfcConfig>,
    /// DCQCN in the devices (notification and reaction point, pacer): when
    /// off, the devices neither send CNPs nor react to them.
    pub dcqcn: bool,
    /// The devices' congestion-control settings (used when `dcqcn` is on;
    /// the line rate is taken from the host's link, and the pacer charges
    /// the 24 bytes of FCS, preamble and inter-frame gap per frame so it
    /// paces wire bytes as the links count them).
    pub cc: CcConfig,
    /// Traffic class of the QPs (DSCP << 2 | ECN): DSCP 26 with ECT(0).
    pub traffic_class: u8,
    /// RC local ACK timeout code (4.096 µs × 2^code).
    pub qp_timeout: u8,
    /// RC retry count (0..=7).
    pub retry_cnt: u8,
    /// Width of the time-series bins, nanoseconds.
    pub bin_ns: u64,
    /// Interval between samples of the observed queue, nanoseconds.
    pub sample_ns: u64,
    /// Frames a NIC may hold per paused priority after taking them from its
    /// device (its per-priority transmit queue depth).
    pub nic_held_frames: usize,
    /// Completion queue depth of each host (completions are reaped after
    /// every event, so it must cover the WRITEs one ACK can complete: the
    /// sum of the windows of the host's flows).
    pub cq_depth: usize,
    /// Seed of the ECN marking generators.
    pub seed: u64,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            link_gbps: 100.0,
            prop_delay_ns: 1_000,
            netdev_mtu: 4200,
            switch_buffer_bytes: 8 << 20,
            ecn: None,
            ecn_at: MarkAt::Dequeue,
            pfc: None,
            dcqcn: false,
            cc: CcConfig::default(),
            traffic_class: (DATA_DSCP << 2) | ECT0,
            qp_timeout: 10,
            retry_cnt: 7,
            bin_ns: 10_000,
            sample_ns: 1_000,
            nic_held_frames: 1,
            cq_depth: 1 << 16,
            seed: 1,
        }
    }
}

/// Where a switch takes its ECN marking decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MarkAt {
    /// When the frame joins the egress queue, from the depth it finds.
    Enqueue,
    /// When the frame leaves the egress queue, from the depth it leaves
    /// behind plus itself.
    #[default]
    Dequeue,
}

/// A flow: an RC QP pair; the source keeps `window` RDMA WRITEs of
/// `msg_bytes` posted from `start_ns` until `stop_ns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSpec {
    /// Name in reports.
    pub label: String,
    /// Sending host.
    pub src: usize,
    /// Receiving host.
    pub dst: usize,
    /// Bytes per WRITE.
    pub msg_bytes: u32,
    /// WRITEs kept outstanding.
    pub window: u32,
    /// When the first WRITE is posted, ns.
    pub start_ns: u64,
    /// When posting stops, ns (`None`: at [`Fabric::stop_flows`]).
    pub stop_ns: Option<u64>,
}

/// A connection for [`Fabric::add_connection`]: an RC QP pair that sends
/// what [`Fabric::start_transfer`] asks for, as WRITEs of at most
/// `msg_bytes`, `window` outstanding, each checked at the receiver when the
/// sender sees it complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnSpec {
    /// Name in reports.
    pub label: String,
    /// Sending host.
    pub src: usize,
    /// Receiving host.
    pub dst: usize,
    /// Largest WRITE, bytes.
    pub msg_bytes: u32,
    /// WRITEs kept outstanding.
    pub window: u32,
}

/// A transfer that finished (every WRITE completed at the sender).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferDone {
    /// The flow.
    pub flow: usize,
    /// The caller's tag.
    pub tag: u64,
    /// Bytes asked for.
    pub bytes: u64,
    /// When it was started, ps.
    pub start_ps: Ps,
    /// When its last WRITE completed, ps.
    pub end_ps: Ps,
    /// Whether a WRITE failed (the rest was not sent).
    pub failed: bool,
}

/// Bytes one flow's memory and queues take in the simulator: a send buffer
/// of at most `msg_bytes / 16` + 4 KiB ([`send_sge_bytes`]: every WRITE of
/// the flow gathers from it through up to 16 SGEs; the engine writes each
/// packet's bytes into it just before the stack reads them, see
/// `Fabric::stage`), a receive region of `window` × `msg_bytes`, two QPs
/// with
/// `max(window, 16)` send and 16 receive WQE slots (counted at 512 bytes
/// each, an upper bound of the stack's WQE with 16 SGEs), and 16 KiB for
/// the QP and congestion-control state. What [`Fabric::add_flow`] and
/// [`Fabric::add_connection`] allocate; callers bound their inputs by it.
pub fn flow_memory_bytes(msg_bytes: u32, window: u32) -> u64 {
    let w = u64::from(window.max(1));
    let m = u64::from(msg_bytes);
    let send = m.min(m / MAX_SGE as u64 + 4096);
    send + m * w + 2 * (w.max(16) + 16) * 512 + (16 << 10)
}

/// A transfer in progress on a connection.
#[derive(Debug, Clone, Copy)]
struct Xfer {
    tag: u64,
    bytes: u64,
    left: u64,
    start_ps: Ps,
}

/// Per-flow state and counters.
#[derive(Debug, Clone)]
pub struct Flow {
    /// What the flow does.
    pub spec: FlowSpec,
    /// Source and destination QPNs.
    pub qpn: [u32; 2],
    /// The UDP source port of the sender's frames (the ECMP entropy).
    pub udp_sport: u16,
    src_lkey: u32,
    dst_lkey: u32,
    dst_rkey: u32,
    src_base: u64,
    dst_base: u64,
    /// Whether new WRITEs are posted.
    pub active: bool,
    /// WRITEs posted.
    pub posted: u64,
    /// WRITEs completed successfully.
    pub completed: u64,
    /// WRITEs completed with an error status.
    pub errors: u64,
    /// First error status seen.
    pub first_error: Option<WcStatus>,
    /// Per window slot, the last message completed into it and its length.
    last_in_slot: Vec<Option<(u64, u32)>>,
    /// Per window slot, the length of the message posted into it.
    slot_len: Vec<u32>,
    /// Receiver side: next PSN expected in order.
    rx_epsn: u32,
    /// Payload bytes received in order (goodput), total (flows with a time
    /// series only).
    pub rx_bytes: u64,
    /// Time of the last in-order payload byte, ps.
    pub last_rx_ps: Ps,
    /// Goodput per bin, bytes.
    pub rx_bins: Bins,
    /// DCQCN current rate sampled per bin, Mbit/s (0 when unknown).
    pub rate_bins: Bins,
    /// Whether goodput and rate are recorded per bin.
    record: bool,
    /// Whether each WRITE is checked at the receiver on completion.
    verify_each: bool,
    /// WRITEs whose bytes at the receiver were wrong when checked.
    pub bad_msgs: u64,
    /// Per window slot, the message last posted into it.
    slot_msg: Vec<u64>,
    /// Per window slot, the last message whose every packet was checked in
    /// the receiver's memory as it was placed.
    rx_done: Vec<Option<u64>>,
    /// Receiver side: the message being placed (slot, byte offset so far).
    rx_cur: Option<(usize, u64)>,
    xfer: Option<Xfer>,
    /// QPs destroyed and memory released ([`Fabric::close_flow`]).
    pub closed: bool,
    /// Path MTU of the sending QP, bytes (a WRITE is cut into packets of
    /// this size).
    pmtu: u32,
    /// Bytes each SGE of the flow's WRITEs covers, the size of its send
    /// buffer ([`send_sge_bytes`]).
    sge_bytes: u32,
    /// Per window slot, the first PSN of the message posted into it.
    slot_psn: Vec<u32>,
    /// The first PSN of the next message posted.
    post_psn: u32,
    /// Sender side: the PSN whose bytes were last written into the send
    /// buffer (`Fabric::stage`), and the message it belongs to.
    staged: Option<(u32, u64)>,
    /// A byte of the sender's memory to corrupt when it is written
    /// ([`Fabric::corrupt_source_byte`]): (message, offset in it).
    fault: Option<(u64, u32)>,
}

/// Series recorded for the observed (bottleneck) port.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The switch egress port observed.
    pub port: usize,
    /// Queue depth samples (bytes, all priorities), one per `sample_ns`.
    pub queue_samples: Vec<u64>,
    /// Time of the first sample, ps.
    pub first_sample_ps: Ps,
    /// Largest queue per bin, bytes.
    pub queue_max_bins: Bins,
    /// Wire bytes transmitted per bin (utilisation).
    pub busy_bins: Bins,
    /// PFC XOFF frames (first ones and refreshes) sent per bin, all ports.
    pub xoff_bins: Bins,
    /// Host time spent paused per bin, ps, summed over hosts and priorities.
    pub paused_bins: Bins,
    /// Drops per bin, all ports.
    pub drop_bins: Bins,
    /// Switch egress time spent paused by a peer switch per bin, ps,
    /// summed over ports and priorities.
    pub paused_bins_switch: Bins,
}

/// Where the engine has got to, for progress reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Virtual time, ps.
    pub now_ps: Ps,
    /// Events processed.
    pub events: u64,
    /// Frames put on a link by a host or a switch (packet-hops).
    pub packet_hops: u64,
    /// Frames sent by hosts.
    pub host_frames: u64,
}

/// A progress callback ([`Fabric::set_progress`]).
pub type ProgressFn = Box<dyn FnMut(&Progress)>;

/// A progress callback and how often (in events) it is called.
type ProgressHook = (u64, ProgressFn);

enum Ev {
    HostTx(u32),
    HostTimer(u32),
    HostRx(u32, Frame),
    SwitchRx(u32, Frame),
    SwitchTx(u32),
    PfcTimer(u32),
    PortResume(u32),
    FlowStart(u32),
    FlowStop(u32),
    Sample,
}

type Scheduled = Entry<Ev>;

/// Hosts, switches, flows and the event queue.
pub struct Fabric {
    /// Configuration.
    pub cfg: FabricConfig,
    /// Ports, routes and tiers.
    pub wiring: Wiring,
    /// Hosts, in topology order.
    pub hosts: Vec<Host>,
    /// Switches, in topology order.
    pub switches: Vec<Switch>,
    ports: Vec<Port>,
    /// Flows in creation order.
    pub flows: Vec<Flow>,
    /// Recorded series of the observed port.
    pub observed: Observed,
    /// Egress queue depth (bytes, all priorities of the port) seen by each
    /// data frame as it joins it, per tier ([`Tier`] order: single, leaf,
    /// spine, ring).
    pub queue_hist: [Histogram; 4],
    /// Transfers finished and not yet taken by [`Fabric::run_until_done`].
    done: VecDeque<TransferDone>,
    now: Ps,
    seq: u64,
    events: EventQueue<Ev>,
    pool: FramePool,
    sampling: bool,
    series_flows: usize,
    /// Events processed.
    pub events_processed: u64,
    /// Frames put on a link by hosts and switches.
    pub packet_hops: u64,
    /// Frames sent by hosts.
    pub host_frames: u64,
    /// Bytes of flow memory live (see [`flow_memory_bytes`]).
    pub flow_memory: u64,
    /// Every first XOFF (not refreshes) a switch port sent: (time, port),
    /// in time order (at most [`PFC_LOG_MAX`]).
    pub pfc_log: Vec<(Ps, u32)>,
    progress: Option<ProgressHook>,
    wc_buf: Vec<roce_stack::verbs::Wc>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("now_ps", &self.now)
            .field("hosts", &self.hosts.len())
            .field("switches", &self.switches.len())
            .field("flows", &self.flows.len())
            .field("events", &self.events.len())
            .finish_non_exhaustive()
    }
}

/// The MAC of host `i`: 02:00:00:00:(i >> 8):(i & 0xff) + 1.
pub fn host_mac(i: usize) -> [u8; 6] {
    let n = i + 1;
    [0x02, 0, 0, 0, (n >> 8) as u8, n as u8]
}

/// The host whose MAC is `mac` (the inverse of [`host_mac`]), if any of
/// `n` hosts.
pub fn mac_host(mac: &[u8; 6], n: usize) -> Option<usize> {
    if mac[..4] != [0x02, 0, 0, 0] {
        return None;
    }
    let i = (usize::from(mac[4]) << 8 | usize::from(mac[5])).checked_sub(1)?;
    (i < n).then_some(i)
}

/// The IPv4 address of host `i`: 10.0.(i >> 8).(i & 0xff) + 1.
pub fn host_ip(i: usize) -> Ipv4Addr {
    let n = i + 1;
    Ipv4Addr::new(10, 0, (n >> 8) as u8, n as u8)
}

/// The MAC of switch port `p` (global id; source of its PFC frames).
pub fn switch_port_mac(p: usize) -> [u8; 6] {
    [0x02, 0x5e, 0, (p >> 16) as u8, (p >> 8) as u8, p as u8]
}

/// Errors setting up a fabric or flows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// A host index out of range (or a flow from a host to itself).
    NoSuchHost(usize),
    /// A verbs call failed.
    Verbs(String),
    /// The topology cannot be wired.
    Topology(TopologyError),
    /// At most 65,534 hosts (the MAC and IP plan).
    TooManyHosts(usize),
    /// The inputs imply more memory than allowed.
    Memory {
        /// Bytes the run would need (estimate).
        need: u64,
        /// The limit.
        limit: u64,
    },
    /// A host's flows would need more completions than its CQ holds.
    CqTooSmall {
        /// The host.
        host: usize,
        /// Sum of its flows' windows.
        need: usize,
        /// [`FabricConfig::cq_depth`].
        depth: usize,
    },
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::NoSuchHost(h) => write!(f, "no host {h}"),
            SimError::Verbs(e) => write!(f, "verbs: {e}"),
            SimError::Topology(e) => write!(f, "topology: {e}"),
            SimError::TooManyHosts(n) => write!(f, "{n} hosts: at most 65534"),
            SimError::Memory { need, limit } => write!(
                f,
                "would need about {} MiB of memory (limit {} MiB): fewer hosts, flows, --window or --msg",
                need >> 20,
                limit >> 20
            ),
            SimError::CqTooSmall { host, need, depth } => write!(
                f,
                "host {host}: its flows keep {need} WRITEs outstanding, more than its CQ of {depth}"
            ),
        }
    }
}

impl std::error::Error for SimError {}

fn verbs<T, E: std::fmt::Debug>(r: Result<T, E>) -> Result<T, SimError> {
    r.map_err(|e| SimError::Verbs(format!("{e:?}")))
}

impl From<TopologyError> for SimError {
    fn from(e: TopologyError) -> SimError {
        SimError::Topology(e)
    }
}

/// Golden-ratio increment of the data pattern (odd, so `k × C` is distinct
/// for every word index `k`).
const PATTERN_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

fn pattern_seed(flow: usize, msg: u64) -> u64 {
    let mut z = ((flow as u64) << 44) ^ msg.wrapping_mul(PATTERN_STEP);
    z = (z ^ (z >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 29)
}

/// The data pattern of message `msg` of flow `flow`: 8-byte little-endian
/// words `seed + k × C` (`k` the word index, `seed` a hash of flow and
/// message, C odd), distinct per flow, message and word, so a misplaced or
/// stale byte shows; cheap enough to write and check every byte of a
/// datacenter-scale run.
pub fn fill_pattern(buf: &mut [u8], flow: usize, msg: u64) {
    fill_pattern_at(buf, flow, msg, 0);
}

/// Write the bytes of [`fill_pattern`]`(flow, msg)` from byte `offset` (a
/// multiple of 8) on into `buf`.
pub fn fill_pattern_at(buf: &mut [u8], flow: usize, msg: u64, offset: u64) {
    debug_assert_eq!(offset % 8, 0);
    let seed = pattern_seed(flow, msg);
    let mut w = seed.wrapping_add((offset / 8).wrapping_mul(PATTERN_STEP));
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&w.to_le_bytes());
        w = w.wrapping_add(PATTERN_STEP);
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&w.to_le_bytes()[..n]);
}

/// Whether `buf` holds [`fill_pattern`]`(flow, msg)`.
pub fn check_pattern(buf: &[u8], flow: usize, msg: u64) -> bool {
    check_pattern_at(buf, flow, msg, 0)
}

/// Whether `buf` holds the bytes of [`fill_pattern`]`(flow, msg)` from byte
/// `offset` (a multiple of 8) on.
pub fn check_pattern_at(buf: &[u8], flow: usize, msg: u64, offset: u64) -> bool {
    /// Words compared per step, each into its own accumulator (the
    /// compiler keeps them in vector registers).
    const LANES: usize = 8;
    if offset % 8 != 0 {
        return false;
    }
    let seed = pattern_seed(flow, msg);
    let first = seed.wrapping_add((offset / 8).wrapping_mul(PATTERN_STEP));
    let mut want: [u64; LANES] =
        std::array::from_fn(|i| first.wrapping_add((i as u64).wrapping_mul(PATTERN_STEP)));
    let step = PATTERN_STEP.wrapping_mul(LANES as u64);
    // OR of (word XOR expected) over the buffer: zero iff every word is
    // right.
    let mut diff = [0u64; LANES];
    let mut blocks = buf.chunks_exact(8 * LANES);
    for b in &mut blocks {
        for ((d, w), x) in diff.iter_mut().zip(&want).zip(b.chunks_exact(8)) {
            let mut word = [0u8; 8];
            word.copy_from_slice(x);
            *d |= u64::from_le_bytes(word) ^ w;
        }
        for w in want.iter_mut() {
            *w = w.wrapping_add(step);
        }
    }
    let mut ok = diff.iter().fold(0, |a, d| a | d) == 0;
    let mut w = want[0];
    let mut words = blocks.remainder().chunks_exact(8);
    for c in &mut words {
        ok &= c == w.to_le_bytes();
        w = w.wrapping_add(PATTERN_STEP);
    }
    let rest = words.remainder();
    ok && rest == &w.to_le_bytes()[..rest.len()]
}

/// Device configuration of host `i` under `cfg` on a link of `link_gbps`.
pub fn device_config(cfg: &FabricConfig, i: usize, link_gbps: f64) -> DeviceConfig {
    DeviceConfig {
        mac: host_mac(i),
        gids: vec![Gid::from_ipv4(host_ip(i))],
        netdev_mtu: cfg.netdev_mtu,
        cc: CcConfig {
            line_rate_mbps: (link_gbps * 1000.0).round() as u64,
            np_enabled: cfg.dcqcn,
            rp_enabled: cfg.dcqcn,
            pacer_overhead_bytes: (net::FCS_LEN + net::PREAMBLE_IFG_LEN) as u32,
            ..cfg.cc.clone()
        },
        ..DeviceConfig::default()
    }
}

/// RED thresholds of a port of `gbps` given the 100 Gbit/s ones.
pub fn red_for_rate(red: &RedEcn, gbps: f64) -> RedEcn {
    let k = gbps / 100.0;
    RedEcn {
        kmin_bytes: (red.kmin_bytes as f64 * k).round() as u64,
        kmax_bytes: (red.kmax_bytes as f64 * k).round() as u64,
        pmax: red.pmax,
    }
}

fn tier_index(t: Tier) -> usize {
    match t {
        Tier::Single => 0,
        Tier::Leaf => 1,
        Tier::Spine => 2,
        Tier::Ring => 3,
    }
}

impl Fabric {
    /// `n_hosts` hosts on one switch; host `i` on port `i`, every link at
    /// `cfg.link_gbps` with `cfg.prop_delay_ns`. `observe` is the switch
    /// egress port whose queue and utilisation are recorded.
    pub fn new(cfg: FabricConfig, n_hosts: usize, observe: usize) -> Fabric {
        let link = LinkSpec {
            gbps: cfg.link_gbps,
            delay_ns: cfg.prop_delay_ns,
        };
        match Fabric::with_topology(cfg, &Topology::single(n_hosts, link), observe) {
            Ok(f) => f,
            Err(e) => panic!("single-switch fabric: {e}"),
        }
    }

    /// The fabric `topo` describes. `observe` is the switch egress port
    /// (global id, [`Wiring`]) whose queue and utilisation are recorded
    /// as time series.
    pub fn with_topology(
        cfg: FabricConfig,
        topo: &Topology,
        observe: usize,
    ) -> Result<Fabric, SimError> {
        let wiring = Wiring::new(topo)?;
        let n_hosts = wiring.hosts();
        if n_hosts > 65_534 {
            return Err(SimError::TooManyHosts(n_hosts));
        }
        let prio_mask = cfg.pfc.as_ref().map_or(0, |p| p.priorities);
        let mut hosts = Vec::with_capacity(n_hosts);
        for i in 0..n_hosts {
            let link = wiring.host_link[i];
            hosts.push(Host::new(&cfg, i, link, wiring.host_port[i], prio_mask));
        }
        let ports = wiring
            .ports
            .iter()
            .enumerate()
            .map(|(id, w)| {
                Port::new(
                    w,
                    wiring.tiers[w.switch],
                    pfcmod::port_generator(
                        cfg.pfc.as_ref(),
                        switch_port_mac(id),
                        (w.link.gbps * 1000.0).round() as u64,
                    ),
                    // Only switch peers send PFC to a switch.
                    HostPause::new(
                        w.link.gbps,
                        if matches!(w.peer, Peer::Port(_)) {
                            prio_mask
                        } else {
                            0
                        },
                    ),
                    cfg.ecn.as_ref().map(|r| red_for_rate(r, w.link.gbps)),
                )
            })
            .collect();
        let switches = (0..wiring.switches())
            .map(|s| {
                // Switch 0 keeps the configured seed (the single-switch
                // runs); the others get distinct streams.
                let seed = if s == 0 {
                    cfg.seed
                } else {
                    cfg.seed ^ (s as u64).wrapping_mul(0xA24B_AED4_963E_E407)
                };
                Switch::new(wiring.tiers[s], seed)
            })
            .collect();
        let bin_ps = cfg.bin_ns * PS_PER_NS;
        let pool = FramePool::new(cfg.netdev_mtu + 64);
        Ok(Fabric {
            observed: Observed {
                port: observe,
                queue_samples: Vec::new(),
                first_sample_ps: 0,
                queue_max_bins: Bins::new(bin_ps),
                busy_bins: Bins::new(bin_ps),
                xoff_bins: Bins::new(bin_ps),
                paused_bins: Bins::new(bin_ps),
                drop_bins: Bins::new(bin_ps),
                paused_bins_switch: Bins::new(bin_ps),
            },
            queue_hist: std::array::from_fn(|_| Histogram::new(1000)),
            cfg,
            wiring,
            hosts,
            switches,
            ports,
            flows: Vec::new(),
            done: VecDeque::new(),
            now: 0,
            seq: 0,
            events: EventQueue::new(),
            pool,
            sampling: false,
            series_flows: 0,
            events_processed: 0,
            packet_hops: 0,
            host_frames: 0,
            flow_memory: 0,
            pfc_log: Vec::new(),
            progress: None,
            wc_buf: Vec::new(),
        })
    }

    /// Current virtual time, ps.
    pub fn now_ps(&self) -> Ps {
        self.now
    }

    fn now_instant(&self) -> Instant {
        Instant::from_nanos(self.now / PS_PER_NS)
    }

    fn schedule(&mut self, t: Ps, ev: Ev) {
        self.seq += 1;
        self.events.push(Scheduled {
            t: t.max(self.now),
            seq: self.seq,
            ev,
        });
    }

    /// Call `hook` every `every` events (at least 1) with the engine's
    /// position (the CLI prints progress from it; the engine reads no
    /// clock).
    pub fn set_progress(&mut self, every: u64, hook: ProgressFn) {
        self.progress = Some((every.max(1), hook));
    }

    /// The engine's position now.
    pub fn progress(&self) -> Progress {
        Progress {
            now_ps: self.now,
            events: self.events_processed,
            packet_hops: self.packet_hops,
            host_frames: self.host_frames,
        }
    }

    /// Counters of switch port `p` (global id).
    pub fn port_stats(&self, p: usize) -> PortStats {
        self.ports
            .get(p)
            .map(|x| x.stats_at(self.now))
            .unwrap_or_default()
    }

    /// Counters summed over all switch ports.
    pub fn totals(&self) -> PortStats {
        let mut t = PortStats::default();
        for p in 0..self.ports.len() {
            t.add(&self.port_stats(p));
        }
        t
    }

    /// Bytes queued at egress port `p` (all priorities).
    pub fn queue_bytes(&self, p: usize) -> u64 {
        self.ports.get(p).map_or(0, |x| x.qbytes.iter().sum())
    }

    /// Time switch port `p` spent paused by its peer, per bin (ps per bin).
    pub fn port_paused_bins(&self, p: usize) -> Option<&Bins> {
        self.ports.get(p).map(|x| x.pause.bins())
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::HostTx(h) => self.host_poke(h as usize),
            Ev::HostTimer(h) => self.host_timer(h as usize),
            Ev::HostRx(h, f) => self.host_rx(h as usize, f),
            Ev::SwitchRx(p, f) => self.switch_rx(p as usize, f),
            Ev::SwitchTx(p) => self.switch_kick(p as usize),
            Ev::PfcTimer(p) => {
                let p = p as usize;
                if self.ports[p].pfc_timer_at == Some(self.now) {
                    self.ports[p].pfc_timer_at = None;
                }
                self.pfc_poll(p);
            }
            Ev::PortResume(p) => {
                let p = p as usize;
                if self.ports[p].resume_at == Some(self.now) {
                    self.ports[p].resume_at = None;
                }
                self.switch_kick(p);
            }
            Ev::FlowStart(f) => {
                let f = f as usize;
                self.flows[f].active = true;
                self.fill_window(f);
                let h = self.flows[f].spec.src;
                self.host_poke(h);
            }
            Ev::FlowStop(f) => self.flows[f as usize].active = false,
            Ev::Sample => self.sample(),
        }
    }

    fn step(&mut self, s: Scheduled) {
        self.now = s.t;
        self.events_processed += 1;
        if let Some((every, hook)) = self.progress.as_mut() {
            if self.events_processed % *every == 0 {
                let p = Progress {
                    now_ps: self.now,
                    events: self.events_processed,
                    packet_hops: self.packet_hops,
                    host_frames: self.host_frames,
                };
                hook(&p);
            }
        }
        if matches!(s.ev, Ev::Sample) && !self.sampling {
            return;
        }
        self.dispatch(s.ev);
    }

    /// Process events up to and including time `until_ps` (the clock ends
    /// there).
    pub fn run_until(&mut self, until_ps: Ps) {
        while let Some(t) = self.events.peek_t() {
            if t > until_ps {
                break;
            }
            let Some(s) = self.events.pop() else {
                break;
            };
            self.step(s);
        }
        self.now = self.now.max(until_ps);
    }

    /// Process events until a transfer finishes (returned) or the next
    /// event lies beyond `limit_ps` (`None`; the clock stays at the last
    /// event).
    pub fn run_until_done(&mut self, limit_ps: Ps) -> Option<TransferDone> {
        loop {
            if let Some(d) = self.done.pop_front() {
                return Some(d);
            }
            let t = self.events.peek_t()?;
            if t > limit_ps {
                return None;
            }
            let s = self.events.pop()?;
            self.step(s);
        }
    }

    /// Time of the next event, ps.
    pub fn next_event_ps(&self) -> Option<Ps> {
        self.events.min_t()
    }

    /// Stop posting on every flow.
    pub fn stop_flows(&mut self) {
        for f in &mut self.flows {
            f.active = false;
        }
    }

    /// Whether every posted WRITE has completed (successfully or not).
    pub fn drained(&self) -> bool {
        self.flows
            .iter()
            .all(|f| f.completed + f.errors == f.posted)
    }

    /// Stop all flows and run until every WRITE has completed or `limit_ps`
    /// of virtual time passed; sampling stops. Returns whether it drained.
    pub fn drain(&mut self, limit_ps: Ps) -> bool {
        self.stop_flows();
        self.sampling = false;
        let end = self.now + limit_ps;
        let step = 10 * PS_PER_US;
        while !self.drained() && self.now < end {
            let t = (self.now + step).min(end);
            self.run_until(t);
        }
        self.drained()
    }

    /// Start sampling the observed queue every `sample_ns` from now.
    pub fn start_sampling(&mut self) {
        if !self.sampling {
            self.sampling = true;
            self.schedule(self.now, Ev::Sample);
        }
    }

    fn sample(&mut self) {
        let q = self.queue_bytes(self.observed.port);
        if self.observed.queue_samples.is_empty() {
            self.observed.first_sample_ps = self.now;
        }
        self.observed.queue_samples.push(q);
        self.observed.queue_max_bins.max(self.now, q as f64);
        let bin = self.cfg.bin_ns * PS_PER_NS;
        if self.now % bin == 0 {
            for f in 0..self.flows.len() {
                if !self.flows[f].record {
                    continue;
                }
                let r = self.flow_rate_mbps(f);
                let now = self.now;
                self.flows[f].rate_bins.max(now, r);
            }
        }
        self.schedule(self.now + self.cfg.sample_ns * PS_PER_NS, Ev::Sample);
    }

    /// The DCQCN current rate of flow `f`'s sending QP, Mbit/s (the line
    /// rate while its reaction point does not limit it).
    pub fn flow_rate_mbps(&self, f: usize) -> f64 {
        let flow = &self.flows[f];
        let host = &self.hosts[flow.spec.src];
        host.dev
            .qp_rate_mbps(flow.qpn[0])
            .unwrap_or(host.link.gbps * 1000.0)
    }

    /// Host pause time per host, summed over priorities, up to now, ps.
    pub fn paused_ps(&self, h: usize) -> Ps {
        self.hosts[h].nic.pause.total_ps(self.now)
    }

    /// Bytes of frame buffers allocated by the engine so far (its peak of
    /// frames in flight and queued: large buffers for data frames, small
    /// ones for control frames).
    pub fn frame_buffer_bytes(&self) -> u64 {
        let (large, small) = self.pool.allocated();
        (large * self.pool.size() + small * frame::SMALL_FRAME) as u64
    }
}

/// One RED decision at queue depth `depth` (the generator is drawn only
/// when the probability is strictly between 0 and 1).
fn red_hit(red: &RedEcn, depth: u64, rng: &mut Rng) -> bool {
    let p = red.probability(depth);
    p >= 1.0 || (p > 0.0 && rng.unit() < p)
}

/// Initial PSN of side `s` of flow `f` (distinct, deterministic).
fn flow_psn(f: usize, s: usize) -> u32 {
    ((f as u32).wrapping_mul(0x9E37) ^ (s as u32 * 0x5A5A)) & 0x00FF_FFFF
}

/// Host → flows map type (receiving QPN → flow index).
type RxFlows = HashMap<u32, usize>;

/// PSNs are 24 bits (IBTA 1.7 §9.7.1).
const PSN_MASK: u32 = 0x00FF_FFFF;

/// Bytes of the send buffer of a flow of WRITEs of at most `msg_bytes` at
/// path MTU `pmtu`, and of each SGE of its WRITEs: a whole number of
/// packets, so that a message's packets spread over at most 16 SGEs
/// (`MAX_SGE`) that all cover the buffer, and each packet's payload is one
/// contiguous range of it (a 64 KiB WRITE at PMTU 4096: 16 SGEs of 4 KiB,
/// every packet read from the same 4 KiB). Never more than `msg_bytes`
/// (at most `msg_bytes / 16` + `pmtu`).
pub fn send_sge_bytes(msg_bytes: u32, pmtu: u32) -> u32 {
    let pmtu = pmtu.max(1);
    let per_sge = npkts(msg_bytes, pmtu).div_ceil(MAX_SGE as u32);
    msg_bytes.min(per_sge * pmtu)
}

/// Packets (PSNs) of an RDMA WRITE of `len` bytes at path MTU `pmtu`: one
/// per PMTU of payload, one for a zero-length WRITE (IBTA 1.7 §9.7.1).
fn npkts(len: u32, pmtu: u32) -> u32 {
    len.div_ceil(pmtu.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_round_trip_and_sensitivity() {
        let mut b = vec![0u8; 37];
        fill_pattern(&mut b, 3, 9);
        assert!(check_pattern(&b, 3, 9));
        assert!(!check_pattern(&b, 3, 10));
        assert!(!check_pattern(&b, 4, 9));
        for i in [0, 8, 36] {
            let mut c = b.clone();
            c[i] ^= 1;
            assert!(!check_pattern(&c, 3, 9), "byte {i}");
        }
        // Every byte of a long buffer counts, in the vector part and the
        // tail.
        let mut l = vec![0u8; 4096 + 77];
        fill_pattern(&mut l, 5, 1);
        assert!(check_pattern(&l, 5, 1));
        assert!(check_pattern_at(&l[1024..], 5, 1, 1024));
        for i in [0, 63, 64, 2000, 4095, 4096, 4160, 4172] {
            let mut c = l.clone();
            c[i] ^= 0x80;
            assert!(!check_pattern(&c, 5, 1), "byte {i}");
        }
        // Shifted by one word: wrong; read at its offset: right.
        assert!(!check_pattern(&b[8..], 3, 9));
        assert!(check_pattern_at(&b[16..], 3, 9, 16));
        assert!(!check_pattern_at(&b[16..], 3, 9, 8));
        assert!(!check_pattern_at(&b[16..], 3, 9, 12));
    }

    #[test]
    fn mac_plan_round_trip() {
        for i in [0, 1, 254, 255, 256, 4000] {
            assert_eq!(mac_host(&host_mac(i), 5000), Some(i));
        }
        assert_eq!(mac_host(&host_mac(10), 10), None);
        assert_eq!(mac_host(&switch_port_mac(1), 10), None);
    }
}
