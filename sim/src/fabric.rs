//! The discrete-event engine: hosts (each a real [`Device`] behind a NIC
//! model), one output-queued switch, links, and the flows the hosts run.
//!
//! Time is virtual, in picoseconds (so serialisation times at 100 Gbit/s add
//! up without rounding drift); the devices see it rounded down to the
//! nanosecond. Events sit in a binary heap ordered by (time, insertion
//! sequence), so a run is a pure function of the configuration and the seed.
//!
//! Links are full duplex and store-and-forward: a frame leaves its sender
//! when the sender's transmitter is free, occupies the link for its
//! serialisation time ([`crate::net::wire_bytes`] at the link rate) and is
//! delivered whole one propagation delay after its last bit left.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::Ipv4Addr;

use roce_stack::cc::CcConfig;
use roce_stack::testing::Rng;
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType,
    SendWr, Sge, Wc, WcStatus, WrOpcode,
};
use roce_stack::wire::pfc::MacControl;
use roce_stack::wire::{RocePacket, Transport};

use crate::metrics::Bins;
use crate::net::{self, RedEcn};
use crate::pfc::{self as pfcmod, HostPause, PfcConfig};
use roce_stack::pfc::PfcGenerator;

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
/// Size of the buffer the devices build frames in (PMTU 4096 + headers,
/// with room for any netdev MTU up to 9 KB).
const FRAME_BUF: usize = 9216;

/// Everything about the fabric that is not a flow.
#[derive(Debug, Clone, PartialEq)]
pub struct FabricConfig {
    /// Rate of every link (host NICs and switch ports), Gbit/s.
    pub link_gbps: f64,
    /// One-way propagation delay of every link, nanoseconds (cable plus the
    /// switch pipeline latency folded in).
    pub prop_delay_ns: u64,
    /// Ethernet MTU of the hosts, bytes; the path MTU is the largest IB MTU
    /// that fits (4200 → 4096).
    pub netdev_mtu: usize,
    /// Switch shared packet buffer, bytes of frames (tail drop when full).
    pub switch_buffer_bytes: u64,
    /// RED/ECN marking at switch egress (`None`: never mark).
    pub ecn: Option<RedEcn>,
    /// Where the marking decision is taken: at dequeue (default; the queue
    /// depth seen by a frame as it leaves, so the CE mark carries no queueing
    /// delay, as the DCQCN paper recommends) or at enqueue.
    pub ecn_at: MarkAt,
    /// PFC generation at the switch and honouring at the hosts (`None`: off).
    pub pfc: Option<PfcConfig>,
    /// DCQCN in the devices (notification and reaction point, pacer): when
    /// off, the devices neither send CNPs nor react to them.
    pub dcqcn: bool,
    /// The devices' congestion-control settings (used when `dcqcn` is on;
    /// the line rate is taken from `link_gbps`, and the pacer charges the
    /// 24 bytes of FCS, preamble and inter-frame gap per frame so it paces
    /// wire bytes as the links count them).
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
    /// Seed of the ECN marking generator.
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

/// Per-flow state and counters.
#[derive(Debug, Clone)]
pub struct Flow {
    /// What the flow does.
    pub spec: FlowSpec,
    /// Source and destination QPNs.
    pub qpn: [u32; 2],
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
    /// Per window slot, the last message completed into it.
    last_in_slot: Vec<Option<u64>>,
    /// Receiver side: next PSN expected in order.
    rx_epsn: u32,
    /// Payload bytes received in order (goodput), total.
    pub rx_bytes: u64,
    /// Time of the last in-order payload byte, ps.
    pub last_rx_ps: Ps,
    /// Goodput per bin, bytes.
    pub rx_bins: Bins,
    /// DCQCN current rate sampled per bin, Mbit/s (0 when unknown).
    pub rate_bins: Bins,
}

/// Transmitter state of a host NIC.
#[derive(Debug, Clone)]
struct Nic {
    busy_until: Ps,
    held: [VecDeque<Vec<u8>>; 8],
    pause: HostPause,
    tx_frames: u64,
}

/// A host: a device, its NIC, and its switch port (= its index).
#[derive(Debug)]
pub struct Host {
    /// The stack.
    pub dev: Device,
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 address (GID 0).
    pub ip: Ipv4Addr,
    pd: u32,
    cq: u32,
    nic: Nic,
    timer_at: Option<Ps>,
    /// Receiving QPN → flow index (goodput measurement).
    rx_flows: HashMap<u32, usize>,
}

impl Host {
    /// PFC/PAUSE honouring state of the NIC.
    pub fn pause(&self) -> &HostPause {
        &self.nic.pause
    }
    /// Frames the NIC transmitted.
    pub fn tx_frames(&self) -> u64 {
        self.nic.tx_frames
    }
}

/// A switch egress port (and, for PFC, the ingress state of the same port).
#[derive(Debug)]
struct Port {
    queues: [VecDeque<(Vec<u8>, usize)>; 8],
    qbytes: [u64; 8],
    ctrl: VecDeque<Vec<u8>>,
    busy_until: Ps,
    /// PFC generator over the bytes received on this port and still
    /// buffered (the port's ingress side).
    gen: PfcGenerator,
    /// Whether an XOFF is outstanding per priority (to tell refreshes from
    /// first XOFFs).
    advertised: [bool; 8],
    /// The pending PFC timer event of this port.
    pfc_timer_at: Option<Ps>,
    stats: PortStats,
}

/// Counters of one switch port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames transmitted (data and control).
    pub tx_frames: u64,
    /// Wire bytes transmitted (frames + FCS + preamble/IFG).
    pub tx_wire_bytes: u64,
    /// Frames tail-dropped for lack of buffer, counted at their egress port.
    pub drops: u64,
    /// Frames marked CE at enqueue on this egress port.
    pub ecn_marked: u64,
    /// PFC XOFF frames sent out of this port (first ones, not refreshes).
    pub pfc_xoff: u64,
    /// PFC XOFF refreshes sent (the congestion lasted longer than half the
    /// pause time).
    pub pfc_refresh: u64,
    /// PFC XON frames sent.
    pub pfc_xon: u64,
    /// Largest queue of this egress port seen at an enqueue, bytes.
    pub max_queue_bytes: u64,
}

/// The switch: output-queued, strict priority between the eight priorities,
/// one shared buffer, static forwarding by destination MAC.
#[derive(Debug)]
pub struct Switch {
    ports: Vec<Port>,
    fwd: HashMap<[u8; 6], usize>,
    buffer_used: u64,
    /// Largest buffer occupancy seen, bytes.
    pub buffer_peak: u64,
    /// Frames with an unknown destination (dropped).
    pub unknown_dst: u64,
    /// MAC control frames received from hosts (ignored).
    pub rx_mac_control: u64,
    rng: Rng,
}

impl Switch {
    /// Counters of port `p`.
    pub fn port_stats(&self, p: usize) -> PortStats {
        self.ports.get(p).map(|x| x.stats).unwrap_or_default()
    }
    /// Counters summed over all ports.
    pub fn totals(&self) -> PortStats {
        let mut t = PortStats::default();
        for p in &self.ports {
            let s = p.stats;
            t.tx_frames += s.tx_frames;
            t.tx_wire_bytes += s.tx_wire_bytes;
            t.drops += s.drops;
            t.ecn_marked += s.ecn_marked;
            t.pfc_xoff += s.pfc_xoff;
            t.pfc_refresh += s.pfc_refresh;
            t.pfc_xon += s.pfc_xon;
            t.max_queue_bytes = t.max_queue_bytes.max(s.max_queue_bytes);
        }
        t
    }
    /// Bytes queued at egress port `p` (all priorities).
    pub fn queue_bytes(&self, p: usize) -> u64 {
        self.ports.get(p).map_or(0, |x| x.qbytes.iter().sum())
    }
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
}

enum Ev {
    HostTx(usize),
    HostTimer(usize),
    HostRx(usize, Vec<u8>),
    SwitchRx(usize, Vec<u8>),
    SwitchTx(usize),
    PfcTimer(usize),
    FlowStart(usize),
    FlowStop(usize),
    Sample,
}

struct Scheduled {
    t: Ps,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        // Min-heap on (t, seq).
        (o.t, o.seq).cmp(&(self.t, self.seq))
    }
}

/// Hosts, switch, flows and the event queue.
pub struct Fabric {
    /// Configuration.
    pub cfg: FabricConfig,
    /// Hosts; host `i` is on switch port `i`.
    pub hosts: Vec<Host>,
    /// The switch.
    pub switch: Switch,
    /// Flows in creation order.
    pub flows: Vec<Flow>,
    /// Recorded series of the observed port.
    pub observed: Observed,
    now: Ps,
    seq: u64,
    events: BinaryHeap<Scheduled>,
    scratch: Vec<u8>,
    sampling: bool,
    /// Events processed.
    pub events_processed: u64,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("now_ps", &self.now)
            .field("hosts", &self.hosts.len())
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

/// The IPv4 address of host `i`: 10.0.(i >> 8).(i & 0xff) + 1.
pub fn host_ip(i: usize) -> Ipv4Addr {
    let n = i + 1;
    Ipv4Addr::new(10, 0, (n >> 8) as u8, n as u8)
}

/// The MAC of switch port `p` (source of its PFC frames).
pub fn switch_port_mac(p: usize) -> [u8; 6] {
    [0x02, 0x5e, 0, 0, (p >> 8) as u8, p as u8]
}

/// Errors setting up flows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimError {
    /// A host index out of range.
    NoSuchHost(usize),
    /// A verbs call failed.
    Verbs(String),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::NoSuchHost(h) => write!(f, "no host {h}"),
            SimError::Verbs(e) => write!(f, "verbs: {e}"),
        }
    }
}

impl std::error::Error for SimError {}

fn verbs<T, E: std::fmt::Debug>(r: Result<T, E>) -> Result<T, SimError> {
    r.map_err(|e| SimError::Verbs(format!("{e:?}")))
}

/// The data pattern of message `msg` of flow `flow` (distinct per flow,
/// message and 8-byte word, so a misplaced or stale byte shows).
pub fn fill_pattern(buf: &mut [u8], flow: usize, msg: u64) {
    let seed = ((flow as u64) << 44) ^ msg.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for (k, chunk) in buf.chunks_mut(8).enumerate() {
        let mut z = seed.wrapping_add((k as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9));
        z = (z ^ (z >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 29;
        let b = z.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Device configuration of host `i` under `cfg`.
pub fn device_config(cfg: &FabricConfig, i: usize) -> DeviceConfig {
    DeviceConfig {
        mac: host_mac(i),
        gids: vec![Gid::from_ipv4(host_ip(i))],
        netdev_mtu: cfg.netdev_mtu,
        cc: CcConfig {
            line_rate_mbps: (cfg.link_gbps * 1000.0).round() as u64,
            np_enabled: cfg.dcqcn,
            rp_enabled: cfg.dcqcn,
            pacer_overhead_bytes: (net::FCS_LEN + net::PREAMBLE_IFG_LEN) as u32,
            ..cfg.cc.clone()
        },
        ..DeviceConfig::default()
    }
}

impl Fabric {
    /// `n_hosts` hosts on one switch; host `i` on port `i`. `observe` is the
    /// switch egress port whose queue and utilisation are recorded.
    pub fn new(cfg: FabricConfig, n_hosts: usize, observe: usize) -> Fabric {
        let mut hosts = Vec::with_capacity(n_hosts);
        let mut fwd = HashMap::new();
        let mut ports = Vec::with_capacity(n_hosts);
        for i in 0..n_hosts {
            let mut dev = Device::new(device_config(&cfg, i));
            let pd = dev.alloc_pd();
            let cq = dev.create_cq(1 << 16);
            hosts.push(Host {
                dev,
                mac: host_mac(i),
                ip: host_ip(i),
                pd,
                cq,
                nic: Nic {
                    busy_until: 0,
                    held: Default::default(),
                    pause: HostPause::new(
                        cfg.link_gbps,
                        cfg.pfc.as_ref().map_or(0, |p| p.priorities),
                    ),
                    tx_frames: 0,
                },
                timer_at: None,
                rx_flows: HashMap::new(),
            });
            fwd.insert(host_mac(i), i);
            ports.push(Port {
                queues: Default::default(),
                qbytes: [0; 8],
                ctrl: VecDeque::new(),
                busy_until: 0,
                gen: pfcmod::port_generator(
                    cfg.pfc.as_ref(),
                    switch_port_mac(i),
                    (cfg.link_gbps * 1000.0).round() as u64,
                ),
                advertised: [false; 8],
                pfc_timer_at: None,
                stats: PortStats::default(),
            });
        }
        let bin_ps = cfg.bin_ns * PS_PER_NS;
        let switch = Switch {
            ports,
            fwd,
            buffer_used: 0,
            buffer_peak: 0,
            unknown_dst: 0,
            rx_mac_control: 0,
            rng: Rng::new(cfg.seed),
        };
        Fabric {
            observed: Observed {
                port: observe,
                queue_samples: Vec::new(),
                first_sample_ps: 0,
                queue_max_bins: Bins::new(bin_ps),
                busy_bins: Bins::new(bin_ps),
                xoff_bins: Bins::new(bin_ps),
                paused_bins: Bins::new(bin_ps),
                drop_bins: Bins::new(bin_ps),
            },
            cfg,
            hosts,
            switch,
            flows: Vec::new(),
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            scratch: vec![0u8; FRAME_BUF],
            sampling: false,
            events_processed: 0,
        }
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

    /// Add a flow: create and connect its QPs and memory, and schedule its
    /// start. Returns its index.
    pub fn add_flow(&mut self, spec: FlowSpec) -> Result<usize, SimError> {
        let n = self.hosts.len();
        for h in [spec.src, spec.dst] {
            if h >= n || spec.src == spec.dst {
                return Err(SimError::NoSuchHost(h));
            }
        }
        let idx = self.flows.len();
        let window = spec.window.max(1);
        let region = u64::from(spec.msg_bytes) * u64::from(window);
        let base = 0x1000_0000_0000u64 + (idx as u64) * 0x1_0000_0000;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mut qpn = [0u32; 2];
        let mut keys = [(0u32, 0u32); 2];
        for (s, h) in [spec.src, spec.dst].into_iter().enumerate() {
            let host = &mut self.hosts[h];
            let init = QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: host.cq,
                recv_cq: host.cq,
                cap: QpCap {
                    max_send_wr: window.max(16),
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            };
            qpn[s] = verbs(host.dev.create_qp(host.pd, &init))?;
            let k = verbs(
                host.dev
                    .reg_mr(host.pd, vec![0u8; region as usize], base, access),
            )?;
            keys[s] = (k.lkey, k.rkey);
        }
        let sides = [spec.src, spec.dst];
        for s in 0..2 {
            let peer = sides[1 - s];
            let peer_gid = Gid::from_ipv4(host_ip(peer));
            let peer_mac = host_mac(peer);
            let dev = &mut self.hosts[sides[s]].dev;
            let mut a = QpAttr {
                qp_state: QpState::Init,
                qp_access_flags: access,
                ..QpAttr::default()
            };
            verbs(dev.modify_qp(
                qpn[s],
                &a,
                QpAttrMask::STATE
                    | QpAttrMask::PKEY_INDEX
                    | QpAttrMask::PORT
                    | QpAttrMask::ACCESS_FLAGS,
            ))?;
            a.qp_state = QpState::Rtr;
            a.ah_attr = AddressVector {
                dgid: peer_gid,
                dmac: peer_mac,
                hop_limit: 64,
                traffic_class: self.cfg.traffic_class,
                ..AddressVector::default()
            };
            a.path_mtu = dev.active_mtu();
            a.dest_qp_num = qpn[1 - s];
            a.rq_psn = flow_psn(idx, 1 - s);
            a.max_dest_rd_atomic = 1;
            a.min_rnr_timer = 1;
            verbs(dev.modify_qp(
                qpn[s],
                &a,
                QpAttrMask::STATE
                    | QpAttrMask::AV
                    | QpAttrMask::PATH_MTU
                    | QpAttrMask::DEST_QPN
                    | QpAttrMask::RQ_PSN
                    | QpAttrMask::MAX_DEST_RD_ATOMIC
                    | QpAttrMask::MIN_RNR_TIMER,
            ))?;
            a.qp_state = QpState::Rts;
            a.sq_psn = flow_psn(idx, s);
            a.timeout = self.cfg.qp_timeout;
            a.retry_cnt = self.cfg.retry_cnt;
            a.rnr_retry = 7;
            a.max_rd_atomic = 1;
            verbs(dev.modify_qp(
                qpn[s],
                &a,
                QpAttrMask::STATE
                    | QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::SQ_PSN
                    | QpAttrMask::MAX_QP_RD_ATOMIC,
            ))?;
        }
        self.hosts[spec.dst].rx_flows.insert(qpn[1], idx);
        let bin_ps = self.cfg.bin_ns * PS_PER_NS;
        let start = spec.start_ns * PS_PER_NS;
        let stop = spec.stop_ns.map(|s| s * PS_PER_NS);
        self.flows.push(Flow {
            spec,
            qpn,
            src_lkey: keys[0].0,
            dst_lkey: keys[1].0,
            dst_rkey: keys[1].1,
            src_base: base,
            dst_base: base,
            active: false,
            posted: 0,
            completed: 0,
            errors: 0,
            first_error: None,
            last_in_slot: vec![None; window as usize],
            rx_epsn: flow_psn(idx, 0),
            rx_bytes: 0,
            last_rx_ps: 0,
            rx_bins: Bins::new(bin_ps),
            rate_bins: Bins::new(bin_ps),
        });
        self.schedule(start, Ev::FlowStart(idx));
        if let Some(stop) = stop {
            self.schedule(stop, Ev::FlowStop(idx));
        }
        Ok(idx)
    }

    /// Post WRITEs on flow `f` until its window is full (if it is active).
    fn fill_window(&mut self, f: usize) {
        let flow = &self.flows[f];
        if !flow.active {
            return;
        }
        let src = flow.spec.src;
        let window = u64::from(flow.spec.window.max(1));
        let size = flow.spec.msg_bytes;
        while self.flows[f].active
            && self.flows[f].posted - (self.flows[f].completed + self.flows[f].errors) < window
        {
            let flow = &self.flows[f];
            let msg = flow.posted;
            let slot = msg % window;
            let off = slot * u64::from(size);
            let (lkey, qpn) = (flow.src_lkey, flow.qpn[0]);
            let (laddr, raddr, rkey) = (flow.src_base + off, flow.dst_base + off, flow.dst_rkey);
            let dev = &mut self.hosts[src].dev;
            if let Some(mr) = dev.mr_mut(lkey) {
                let o = off as usize;
                fill_pattern(&mut mr.as_mut_slice()[o..o + size as usize], f, msg);
            }
            let sge = [Sge {
                addr: laddr,
                length: size,
                lkey,
            }];
            let mut wr = SendWr::new(((f as u64) << 40) | msg, WrOpcode::RdmaWrite, &sge);
            wr.remote_addr = raddr;
            wr.rkey = rkey;
            if dev.post_send(qpn, &wr).is_err() {
                self.flows[f].active = false;
                break;
            }
            self.flows[f].posted += 1;
        }
    }

    /// Take completions of host `h` and refill windows.
    fn reap(&mut self, h: usize) {
        let mut wcs = [Wc::EMPTY; 64];
        loop {
            let cq = self.hosts[h].cq;
            let n = self.hosts[h].dev.poll_cq(cq, &mut wcs);
            if n == 0 {
                break;
            }
            let mut touched: Vec<usize> = Vec::new();
            for wc in &wcs[..n] {
                let f = (wc.wr_id >> 40) as usize;
                let msg = wc.wr_id & ((1 << 40) - 1);
                let Some(flow) = self.flows.get_mut(f) else {
                    continue;
                };
                if wc.status == WcStatus::Success {
                    flow.completed += 1;
                    let w = flow.last_in_slot.len() as u64;
                    flow.last_in_slot[(msg % w) as usize] = Some(msg);
                } else {
                    flow.errors += 1;
                    flow.first_error.get_or_insert(wc.status);
                    flow.active = false;
                }
                if !touched.contains(&f) {
                    touched.push(f);
                }
            }
            for f in touched {
                self.fill_window(f);
            }
        }
    }

    /// Goodput accounting: count the payload of an in-order request packet
    /// of a flow received by host `h` (a go-back-N responder accepts exactly
    /// these).
    fn measure_rx(&mut self, h: usize, frame: &[u8]) {
        let Ok(p) = RocePacket::parse(frame) else {
            return;
        };
        let info = p.bth().opcode.info();
        if info.transport != Transport::Rc || !info.is_request {
            return;
        }
        let Some(&f) = self.hosts[h].rx_flows.get(&p.bth().dest_qp) else {
            return;
        };
        let flow = &mut self.flows[f];
        if p.bth().psn != flow.rx_epsn {
            return;
        }
        flow.rx_epsn = (flow.rx_epsn + 1) & 0x00FF_FFFF;
        let len = p.payload().len() as u64;
        flow.rx_bytes += len;
        flow.last_rx_ps = self.now;
        flow.rx_bins.add(self.now, len as f64);
    }

    /// Host `h`'s NIC: start the next frame if the link is free.
    fn host_kick(&mut self, h: usize) {
        let now = self.now;
        let now_i = self.now_instant();
        let cap = self.cfg.nic_held_frames.max(1);
        let host = &mut self.hosts[h];
        if host.nic.busy_until > now {
            return;
        }
        host.nic.pause.settle(now, &mut self.observed.paused_bins);
        // Timers due now first (a pacer release re-activates its QP).
        if host.dev.poll_timeout().is_some_and(|d| d <= now_i) {
            host.dev.handle_timeout(now_i);
        }
        let mut frame = None;
        for p in (0..8u8).rev() {
            if !host.nic.pause.is_paused(p, now) {
                if let Some(f) = host.nic.held[p as usize].pop_front() {
                    frame = Some(f);
                    break;
                }
            }
        }
        if frame.is_none() {
            // Pull from the device unless a paused priority's queue is full
            // (the next frame might be for it).
            let blocked = (0..8u8).any(|p| {
                host.nic.pause.is_paused(p, now) && host.nic.held[p as usize].len() >= cap
            });
            if !blocked {
                while let Some(n) = host.dev.poll_transmit(now_i, &mut self.scratch) {
                    let f = self.scratch[..n].to_vec();
                    let p = net::priority(&f);
                    if !host.nic.pause.is_paused(p, now) {
                        frame = Some(f);
                        break;
                    }
                    let q = &mut host.nic.held[p as usize];
                    q.push_back(f);
                    if q.len() >= cap {
                        break;
                    }
                }
            }
        }
        if let Some(f) = frame {
            let ser = net::serialisation_ps(net::wire_bytes(f.len()), self.cfg.link_gbps);
            let host = &mut self.hosts[h];
            host.nic.busy_until = now + ser;
            host.nic.tx_frames += 1;
            let prop = self.cfg.prop_delay_ns * PS_PER_NS;
            self.schedule(now + ser, Ev::HostTx(h));
            self.schedule(now + ser + prop, Ev::SwitchRx(h, f));
        }
    }

    /// Schedule a timer event for host `h`'s next device deadline.
    fn host_arm(&mut self, h: usize) {
        let now = self.now;
        let host = &mut self.hosts[h];
        let Some(d) = host.dev.poll_timeout() else {
            return;
        };
        let mut t = d.as_nanos().saturating_mul(PS_PER_NS);
        if t <= now {
            // Due already but nothing could be done now: the transmitter is
            // busy (its HostTx event retries) or the device has nothing to
            // send yet; retry at the transmitter's next free time or 100 ns on.
            t = host.nic.busy_until.max(now + 100 * PS_PER_NS);
        }
        if host.timer_at.map_or(true, |x| t < x) {
            host.timer_at = Some(t);
            self.schedule(t, Ev::HostTimer(h));
        }
    }

    fn host_poke(&mut self, h: usize) {
        self.reap(h);
        self.host_kick(h);
        self.host_arm(h);
    }

    fn host_rx(&mut self, h: usize, frame: Vec<u8>) {
        if net::is_mac_control(&frame) {
            {
                let now = self.now;
                let host = &mut self.hosts[h];
                let (wake, _) =
                    host.nic
                        .pause
                        .on_frame(&frame, now, &mut self.observed.paused_bins);
                if let Some(w) = wake {
                    self.schedule(w, Ev::HostTx(h));
                }
                self.host_kick(h);
                self.host_arm(h);
            }
            return;
        }
        self.measure_rx(h, &frame);
        let now_i = self.now_instant();
        self.hosts[h].dev.handle_frame(now_i, &frame);
        self.host_poke(h);
    }

    fn switch_rx(&mut self, ingress: usize, mut frame: Vec<u8>) {
        let now = self.now;
        if net::is_mac_control(&frame) {
            self.switch.rx_mac_control += 1;
            return;
        }
        let mut dst = [0u8; 6];
        if let Some(d) = frame.get(..6) {
            dst.copy_from_slice(d);
        }
        let Some(&out) = self.switch.fwd.get(&dst) else {
            self.switch.unknown_dst += 1;
            return;
        };
        let prio = net::priority(&frame);
        let len = frame.len() as u64;
        if self.switch.buffer_used + len > self.cfg.switch_buffer_bytes {
            self.switch.ports[out].stats.drops += 1;
            self.observed.drop_bins.add(now, 1.0);
            return;
        }
        let port = &mut self.switch.ports[out];
        if self.cfg.ecn_at == MarkAt::Enqueue {
            let depth = port.qbytes[prio as usize];
            if let Some(red) = &self.cfg.ecn {
                if red_hit(red, depth, &mut self.switch.rng) && net::mark_ce(&mut frame) {
                    port.stats.ecn_marked += 1;
                }
            }
        }
        port.qbytes[prio as usize] += len;
        let total: u64 = port.qbytes.iter().sum();
        port.stats.max_queue_bytes = port.stats.max_queue_bytes.max(total);
        port.queues[prio as usize].push_back((frame, ingress));
        if out == self.observed.port {
            self.observed.queue_max_bins.max(now, total as f64);
        }
        self.switch.buffer_used += len;
        self.switch.buffer_peak = self.switch.buffer_peak.max(self.switch.buffer_used);
        // Ingress accounting for PFC.
        let now_i = self.now_instant();
        self.switch.ports[ingress].gen.on_enqueue(now_i, prio, len);
        self.pfc_poll(ingress);
        self.switch_kick(out);
    }

    /// Take the PFC frames port `p`'s generator has due (XOFF, refresh,
    /// XON) and queue them out of `p` (toward its host) ahead of data frames
    /// (802.3 §31B.1); arm the port's PFC timer for the next refresh.
    fn pfc_poll(&mut self, p: usize) {
        let now = self.now;
        let now_i = self.now_instant();
        let mut buf = [0u8; 64];
        let mut queued = false;
        loop {
            let port = &mut self.switch.ports[p];
            let Some(n) = port.gen.poll_transmit(now_i, &mut buf) else {
                break;
            };
            if let Ok(MacControl::Pfc(r)) = MacControl::parse(&buf[..n]) {
                for prio in 0..8u8 {
                    let Some(q) = r.time(prio) else {
                        continue;
                    };
                    let i = prio as usize;
                    if q == 0 {
                        port.stats.pfc_xon += 1;
                        port.advertised[i] = false;
                    } else {
                        if port.advertised[i] {
                            port.stats.pfc_refresh += 1;
                        } else {
                            port.stats.pfc_xoff += 1;
                        }
                        port.advertised[i] = true;
                        self.observed.xoff_bins.add(now, 1.0);
                    }
                }
            }
            port.ctrl.push_back(buf[..n].to_vec());
            queued = true;
        }
        let port = &mut self.switch.ports[p];
        if let Some(t) = port.gen.poll_timeout() {
            let t = (t.as_nanos() * PS_PER_NS).max(now + PS_PER_NS);
            if port.pfc_timer_at.map_or(true, |x| t < x || x < now) {
                port.pfc_timer_at = Some(t);
                self.schedule(t, Ev::PfcTimer(p));
            }
        }
        if queued {
            self.switch_kick(p);
        }
    }

    fn switch_kick(&mut self, p: usize) {
        let now = self.now;
        let port = &mut self.switch.ports[p];
        if port.busy_until > now {
            return;
        }
        let mut frame = port.ctrl.pop_front();
        if frame.is_none() {
            let mut got = None;
            for prio in (0..8usize).rev() {
                if let Some((mut f, ing)) = port.queues[prio].pop_front() {
                    if let (Some(red), MarkAt::Dequeue) = (&self.cfg.ecn, self.cfg.ecn_at) {
                        let depth = port.qbytes[prio];
                        if red_hit(red, depth, &mut self.switch.rng) && net::mark_ce(&mut f) {
                            port.stats.ecn_marked += 1;
                        }
                    }
                    port.qbytes[prio] -= f.len() as u64;
                    got = Some((f, ing, prio as u8));
                    break;
                }
            }
            if let Some((f, ing, prio)) = got {
                let len = f.len() as u64;
                self.switch.buffer_used -= len;
                let now_i = self.now_instant();
                self.switch.ports[ing].gen.on_dequeue(now_i, prio, len);
                self.pfc_poll(ing);
                frame = Some(f);
            }
        }
        let Some(f) = frame else {
            return;
        };
        let wb = net::wire_bytes(f.len());
        let ser = net::serialisation_ps(wb, self.cfg.link_gbps);
        let port = &mut self.switch.ports[p];
        port.busy_until = now + ser;
        port.stats.tx_frames += 1;
        port.stats.tx_wire_bytes += wb;
        if p == self.observed.port {
            self.observed.busy_bins.add(now, wb as f64);
        }
        let prop = self.cfg.prop_delay_ns * PS_PER_NS;
        self.schedule(now + ser, Ev::SwitchTx(p));
        self.schedule(now + ser + prop, Ev::HostRx(p, f));
    }

    fn sample(&mut self) {
        let q = self.switch.queue_bytes(self.observed.port);
        if self.observed.queue_samples.is_empty() {
            self.observed.first_sample_ps = self.now;
        }
        self.observed.queue_samples.push(q);
        self.observed.queue_max_bins.max(self.now, q as f64);
        let bin = self.cfg.bin_ns * PS_PER_NS;
        if self.now % bin == 0 {
            for f in 0..self.flows.len() {
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
        self.hosts[flow.spec.src]
            .dev
            .qp_rate_mbps(flow.qpn[0])
            .unwrap_or(self.cfg.link_gbps * 1000.0)
    }

    /// Start sampling the observed queue every `sample_ns` from now.
    pub fn start_sampling(&mut self) {
        if !self.sampling {
            self.sampling = true;
            self.schedule(self.now, Ev::Sample);
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::HostTx(h) => self.host_poke(h),
            Ev::HostTimer(h) => {
                if self.hosts[h].timer_at == Some(self.now) {
                    self.hosts[h].timer_at = None;
                }
                let now_i = self.now_instant();
                let host = &mut self.hosts[h];
                if host.dev.poll_timeout().is_some_and(|d| d <= now_i) {
                    host.dev.handle_timeout(now_i);
                }
                self.host_poke(h);
            }
            Ev::HostRx(h, f) => self.host_rx(h, f),
            Ev::SwitchRx(p, f) => self.switch_rx(p, f),
            Ev::SwitchTx(p) => self.switch_kick(p),
            Ev::PfcTimer(p) => {
                if self.switch.ports[p].pfc_timer_at == Some(self.now) {
                    self.switch.ports[p].pfc_timer_at = None;
                }
                self.pfc_poll(p);
            }
            Ev::FlowStart(f) => {
                self.flows[f].active = true;
                self.fill_window(f);
                let h = self.flows[f].spec.src;
                self.host_poke(h);
            }
            Ev::FlowStop(f) => self.flows[f].active = false,
            Ev::Sample => self.sample(),
        }
    }

    /// Process events up to and including time `until_ps` (the clock ends
    /// there).
    pub fn run_until(&mut self, until_ps: Ps) {
        while let Some(top) = self.events.peek() {
            if top.t > until_ps {
                break;
            }
            let Some(s) = self.events.pop() else {
                break;
            };
            self.now = s.t;
            self.events_processed += 1;
            self.dispatch(s.ev);
        }
        self.now = self.now.max(until_ps);
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
            self.run_until_no_sample(t);
        }
        self.drained()
    }

    fn run_until_no_sample(&mut self, until_ps: Ps) {
        while let Some(top) = self.events.peek() {
            if top.t > until_ps {
                break;
            }
            let Some(s) = self.events.pop() else {
                break;
            };
            self.now = s.t;
            self.events_processed += 1;
            if matches!(s.ev, Ev::Sample) && !self.sampling {
                continue;
            }
            self.dispatch(s.ev);
        }
        self.now = self.now.max(until_ps);
    }

    /// Check every flow's receive buffer: each window slot holds the pattern
    /// of the last message completed into it. Returns the flows that do not
    /// (call after [`Fabric::drain`]).
    pub fn verify(&self) -> Vec<usize> {
        let mut bad = Vec::new();
        for (i, f) in self.flows.iter().enumerate() {
            let size = f.spec.msg_bytes as usize;
            let Some(mr) = self.hosts[f.spec.dst].dev.mr(f.dst_lkey) else {
                bad.push(i);
                continue;
            };
            let mem = mr.as_slice();
            let mut expect = vec![0u8; size];
            let ok = f.last_in_slot.iter().enumerate().all(|(slot, last)| {
                let got = &mem[slot * size..(slot + 1) * size];
                match last {
                    Some(m) => {
                        fill_pattern(&mut expect, i, *m);
                        got == expect.as_slice()
                    }
                    None => true,
                }
            });
            if !ok {
                bad.push(i);
            }
        }
        bad
    }

    /// Host pause time per host, summed over priorities, up to now, ps.
    pub fn paused_ps(&self, h: usize) -> Ps {
        self.hosts[h].nic.pause.total_ps(self.now)
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
