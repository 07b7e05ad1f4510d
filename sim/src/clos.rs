//! Leaf-spine fabrics for the datacenter-scale workloads: their
//! configuration (speeds, buffers, RED, PFC, DCQCN scaled to the link
//! rates), the static facts a report needs (each flow's ECMP path, the
//! lossless-buffer check per switch, the cyclic-buffer-dependency check),
//! per-tier link figures after a run, and the memory a run implies.

use std::fmt;

use crate::fabric::{flow_memory_bytes, Fabric, FabricConfig, SimError, PS_PER_NS};
use crate::net;
use crate::pfc::{self, PfcConfig};
use crate::scenario::{default_cc, Mode, DEFAULT_RED, DEFAULT_XOFF_BYTES};
use crate::topo::{ClosSpec, LinkSpec, Peer, Tier, Topology};

/// One column of a side-by-side comparison: a report to its cell.
pub(crate) type Column<R> = Box<dyn Fn(&R) -> String>;

/// Link rates a NIC or switch port may run at, Gbit/s.
pub const RATES_GBPS: [u64; 4] = [100, 200, 400, 800];

/// Default shared buffer of each switch in a leaf-spine fabric: 32 MiB
/// (the order of a 12.8-25.6 Tbit/s switch ASIC's packet buffer).
pub const DEFAULT_CLOS_BUFFER: u64 = 32 << 20;

/// Default bound on the memory a simulation may need (flows, queues,
/// devices, frame buffers), bytes: 4 GiB.
pub const DEFAULT_MEMORY_LIMIT: u64 = 4 << 30;

/// The congestion control of a fabric whose hosts run at `host_gbps`: the
/// single-switch settings ([`default_cc`]) with the additive and
/// hyper-additive increase steps scaled by `host_gbps / 100`, so a flow
/// regains the same fraction of its line rate per increase event at every
/// speed, and NP flow tracking for 1024 flows.
pub fn clos_cc(host_gbps: f64) -> roce_stack::cc::CcConfig {
    let mut cc = default_cc();
    let k = (host_gbps / 100.0).max(0.01);
    cc.dcqcn.rpg_ai_rate = (cc.dcqcn.rpg_ai_rate as f64 * k).round() as u64;
    cc.dcqcn.rpg_hai_rate = (cc.dcqcn.rpg_hai_rate as f64 * k).round() as u64;
    cc.np_max_flows = 1024;
    cc
}

/// Fabric configuration of `mode` for the fabric `c`: RED at the
/// single-switch thresholds for 100 Gbit/s (scaled per port by its rate,
/// see [`FabricConfig::ecn`]), PFC XOFF at 100 KB per ingress port and
/// priority, [`DEFAULT_CLOS_BUFFER`] per switch, [`clos_cc`].
pub fn clos_fabric_config(mode: Mode, c: &ClosSpec) -> FabricConfig {
    FabricConfig {
        link_gbps: c.host.gbps,
        prop_delay_ns: c.host.delay_ns,
        switch_buffer_bytes: DEFAULT_CLOS_BUFFER,
        ecn: mode.dcqcn().then_some(DEFAULT_RED),
        dcqcn: mode.dcqcn(),
        cc: clos_cc(c.host.gbps),
        pfc: mode
            .pfc()
            .then(|| PfcConfig::lossless_prio3(DEFAULT_XOFF_BYTES)),
        cq_depth: 4096,
        ..FabricConfig::default()
    }
}

/// A leaf-spine fabric, its congestion management and how hosts write.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosOpts {
    /// Shape and link rates.
    pub clos: ClosSpec,
    /// Congestion management.
    pub mode: Mode,
    /// Fabric settings, normally [`clos_fabric_config`]`(mode, clos)`.
    pub fabric: FabricConfig,
    /// Largest RDMA WRITE, bytes.
    pub msg_bytes: u32,
    /// WRITEs each connection keeps outstanding.
    pub window: u32,
}

impl ClosOpts {
    /// Defaults for `mode` on `clos`: 64 KiB WRITEs, 16 outstanding per
    /// connection (1 MiB in flight at most).
    pub fn new(mode: Mode, clos: ClosSpec) -> ClosOpts {
        ClosOpts {
            fabric: clos_fabric_config(mode, &clos),
            clos,
            mode,
            msg_bytes: 65_536,
            window: 16,
        }
    }

    /// The same fabric under another mode (same seed, sizes and buffers;
    /// RED, PFC and DCQCN as `mode` has them).
    pub fn with_mode(&self, mode: Mode) -> ClosOpts {
        let base = clos_fabric_config(mode, &self.clos);
        let mut o = self.clone();
        o.mode = mode;
        o.fabric.ecn = mode.dcqcn().then(|| self.fabric.ecn.unwrap_or(DEFAULT_RED));
        o.fabric.dcqcn = base.dcqcn;
        o.fabric.pfc = mode.pfc().then(|| {
            self.fabric
                .pfc
                .clone()
                .unwrap_or_else(|| PfcConfig::lossless_prio3(DEFAULT_XOFF_BYTES))
        });
        o
    }

    /// Build the fabric (no flows yet).
    pub fn build(&self) -> Result<Fabric, SimError> {
        Fabric::with_topology(self.fabric.clone(), &Topology::clos(&self.clos), usize::MAX)
    }
}

/// The switch ports (global ids) a frame of flow `f` crosses, in order,
/// from the sender's leaf to the receiver's: its ECMP path, worked out from
/// the flow's five-tuple (source and destination IP, UDP, the QP pair's
/// source port, 4791) exactly as the switches hash it.
pub fn flow_path(fab: &Fabric, f: usize) -> Vec<usize> {
    let flow = &fab.flows[f];
    let (src, dst) = (flow.spec.src, flow.spec.dst);
    let hash = net::ecmp_hash_v4(
        fab.hosts[src].ip,
        fab.hosts[dst].ip,
        17,
        flow.udp_sport,
        roce_stack::wire::ROCEV2_UDP_PORT,
    );
    let w = &fab.wiring;
    let mut s = w.host_switch(src);
    let mut path = Vec::new();
    for _ in 0..w.switches() + 1 {
        let g = w.group(s, dst);
        if g.is_empty() {
            break;
        }
        let p = g[(hash % g.len() as u32) as usize] as usize;
        path.push(p);
        match w.ports[p].peer {
            Peer::Host(_) => break,
            Peer::Port(q) => s = w.ports[q].switch,
        }
    }
    path
}

/// The headroom of port `p` (global id) from the stack's calculator
/// ([`pfc::headroom_bytes`]: the port's rate, the largest frame of the
/// fabric's MTU, its cable delay).
pub fn port_headroom(fab: &Fabric, p: usize) -> u64 {
    let w = &fab.wiring.ports[p];
    pfc::headroom_bytes(w.link.gbps, fab.cfg.netdev_mtu as u64 + 18, w.link.delay_ns)
}

/// PFC buffer check of one switch: the headroom of each of its ports and
/// whether the shared buffer covers XOFF + headroom on all of them (then
/// no frame of the lossless priority can be dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LosslessCheck {
    /// Tier of the switch.
    pub tier: Tier,
    /// Smallest and largest headroom among its ports, bytes.
    pub headroom: (u64, u64),
    /// Σ over its ports of (XOFF + headroom), bytes.
    pub need: u64,
    /// Its buffer, bytes.
    pub buffer: u64,
}

impl LosslessCheck {
    /// Whether the buffer covers every port's XOFF + headroom.
    pub fn ok(&self) -> bool {
        self.need <= self.buffer
    }
}

/// [`LosslessCheck`] of every switch (empty when PFC is off).
pub fn lossless_checks(fab: &Fabric) -> Vec<LosslessCheck> {
    let Some(p) = fab.cfg.pfc.as_ref() else {
        return Vec::new();
    };
    let w = &fab.wiring;
    (0..w.switches())
        .map(|s| {
            let hs: Vec<u64> = w.switch_ports[s]
                .clone()
                .map(|q| port_headroom(fab, q))
                .collect();
            LosslessCheck {
                tier: w.tiers[s],
                headroom: (
                    hs.iter().copied().min().unwrap_or(0),
                    hs.iter().copied().max().unwrap_or(0),
                ),
                need: hs.iter().map(|h| p.xoff_bytes + h).sum(),
                buffer: fab.cfg.switch_buffer_bytes,
            }
        })
        .collect()
}

/// A class of links for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkClass {
    /// Host → leaf.
    HostUp,
    /// Leaf → host.
    HostDown,
    /// Leaf → spine.
    LeafUp,
    /// Spine → leaf.
    SpineDown,
}

impl LinkClass {
    /// Every class, in report order.
    pub const ALL: [LinkClass; 4] = [
        LinkClass::HostUp,
        LinkClass::HostDown,
        LinkClass::LeafUp,
        LinkClass::SpineDown,
    ];

    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            LinkClass::HostUp => "host->leaf",
            LinkClass::HostDown => "leaf->host",
            LinkClass::LeafUp => "leaf->spine",
            LinkClass::SpineDown => "spine->leaf",
        }
    }
}

/// One directed link of the fabric and its figures over a run.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRow {
    /// Class.
    pub class: LinkClass,
    /// Name, e.g. `h3->leaf0`, `leaf1->spine2`.
    pub name: String,
    /// The transmitting switch port (global id), or `None` for a host NIC.
    pub port: Option<usize>,
    /// The transmitting host for a host NIC.
    pub host: Option<usize>,
    /// Utilisation over the run: wire bytes over capacity.
    pub utilisation: f64,
    /// Time its transmitter was paused by PFC, µs.
    pub paused_us: f64,
    /// Frames dropped at it (switch egress).
    pub drops: u64,
    /// Flows (of those given) whose ECMP path crosses it.
    pub flows: usize,
}

fn switch_name(fab: &Fabric, s: usize, c: &ClosSpec) -> String {
    match fab.wiring.tiers[s] {
        Tier::Leaf => format!("leaf{s}"),
        Tier::Spine => format!("spine{}", s - c.leaves),
        t => format!("{}{s}", t.name()),
    }
}

/// Every directed link with its figures over `[0, now]`; `flows` are the
/// flows whose ECMP paths are counted per link.
pub fn link_rows(fab: &Fabric, c: &ClosSpec, flows: &[usize]) -> Vec<LinkRow> {
    let secs = fab.now_ps() as f64 * 1e-12;
    let util = |bytes: u64, gbps: f64| {
        if secs > 0.0 {
            bytes as f64 * 8.0 / (gbps * 1e9 * secs)
        } else {
            0.0
        }
    };
    let mut on_port = vec![0usize; fab.wiring.ports.len()];
    for &f in flows {
        for p in flow_path(fab, f) {
            on_port[p] += 1;
        }
    }
    let mut rows = Vec::new();
    for (h, host) in fab.hosts.iter().enumerate() {
        let s = fab.wiring.host_switch(h);
        rows.push(LinkRow {
            class: LinkClass::HostUp,
            name: format!("h{h}->{}", switch_name(fab, s, c)),
            port: None,
            host: Some(h),
            utilisation: util(host.tx_wire_bytes(), host.link.gbps),
            paused_us: fab.paused_ps(h) as f64 / 1e6,
            drops: 0,
            flows: flows
                .iter()
                .filter(|&&f| fab.flows[f].spec.src == h)
                .count(),
        });
    }
    for (p, w) in fab.wiring.ports.iter().enumerate() {
        let st = fab.port_stats(p);
        let from = switch_name(fab, w.switch, c);
        let (class, to) = match w.peer {
            Peer::Host(h) => (LinkClass::HostDown, format!("h{h}")),
            Peer::Port(q) => {
                let s2 = fab.wiring.ports[q].switch;
                let class = if fab.wiring.tiers[w.switch] == Tier::Spine {
                    LinkClass::SpineDown
                } else {
                    LinkClass::LeafUp
                };
                (class, switch_name(fab, s2, c))
            }
        };
        rows.push(LinkRow {
            class,
            name: format!("{from}->{to}"),
            port: Some(p),
            host: None,
            utilisation: util(st.tx_wire_bytes, w.link.gbps),
            paused_us: st.paused_ps as f64 / 1e6,
            drops: st.drops,
            flows: on_port[p],
        });
    }
    rows
}

/// Figures of one link class.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassSummary {
    /// Class.
    pub class: LinkClass,
    /// Links of the class.
    pub links: usize,
    /// Mean and largest utilisation.
    pub util_mean: f64,
    /// Largest utilisation.
    pub util_max: f64,
    /// Links paused at some point, and their total pause time, µs.
    pub paused_links: usize,
    /// Total pause time, µs.
    pub paused_us: f64,
    /// Drops.
    pub drops: u64,
    /// Most flows on one link of the class.
    pub max_flows: usize,
    /// Links carrying two or more flows (ECMP collisions on uplinks).
    pub shared_links: usize,
}

/// Per-class summary of `rows`.
pub fn summarise_links(rows: &[LinkRow]) -> Vec<ClassSummary> {
    LinkClass::ALL
        .iter()
        .filter_map(|&class| {
            let r: Vec<&LinkRow> = rows.iter().filter(|r| r.class == class).collect();
            if r.is_empty() {
                return None;
            }
            Some(ClassSummary {
                class,
                links: r.len(),
                util_mean: r.iter().map(|x| x.utilisation).sum::<f64>() / r.len() as f64,
                util_max: r.iter().map(|x| x.utilisation).fold(0.0, f64::max),
                paused_links: r.iter().filter(|x| x.paused_us > 0.0).count(),
                paused_us: r.iter().map(|x| x.paused_us).sum(),
                drops: r.iter().map(|x| x.drops).sum(),
                max_flows: r.iter().map(|x| x.flows).max().unwrap_or(0),
                shared_links: r.iter().filter(|x| x.flows >= 2).count(),
            })
        })
        .collect()
}

/// Payload goodput of a saturated link of `gbps` carrying WRITEs of at
/// least one PMTU at the fabric's MTU, Gbit/s: rate × PMTU / wire bytes of
/// a full MIDDLE packet (RoCEv2 over IPv4: 58 bytes of headers and ICRC,
/// then FCS, preamble and IFG; the RETH of each FIRST packet ignored).
pub fn payload_gbps(cfg: &FabricConfig, gbps: f64) -> f64 {
    let pmtu =
        roce_stack::verbs::Mtu::for_netdev(cfg.netdev_mtu).map_or(1024, |m| m.bytes() as u64);
    gbps * pmtu as f64 / net::wire_bytes((pmtu + 58) as usize) as f64
}

/// Base round trip of a WRITE's last packet and its ACK over `hops` links
/// each way, ps: per link the propagation delay both ways, the
/// store-and-forward time of one full frame (data; not on the first link,
/// whose serialisation is the transfer's own time) and of one ACK (back);
/// all links `link` except the two host links `host`. A transfer of `b`
/// bytes alone on an idle path completes `b` over the payload rate
/// ([`payload_gbps`]) plus this after it starts (to within a few frame
/// times of the FIRST packet's RETH).
pub fn base_rtt_ps(cfg: &FabricConfig, host: LinkSpec, link: LinkSpec, hops: usize) -> u64 {
    let pmtu = roce_stack::verbs::Mtu::for_netdev(cfg.netdev_mtu).map_or(1024, |m| m.bytes());
    let data = net::wire_bytes(pmtu + 58);
    let ack = net::wire_bytes(62);
    let mut t = 0;
    for i in 0..hops {
        let l = if i == 0 || i + 1 == hops { host } else { link };
        t += 2 * l.delay_ns * PS_PER_NS + net::serialisation_ps(ack, l.gbps);
        if i > 0 {
            // The first link's serialisation is the transfer's own time.
            t += net::serialisation_ps(data, l.gbps);
        }
    }
    t
}

/// What a run will hold in memory, bytes, as its inputs imply it (see
/// [`Memory::total`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Flows' send and receive regions and send queues
    /// ([`flow_memory_bytes`]).
    pub flows: u64,
    /// The hosts' completion queues and per-device tables.
    pub devices: u64,
    /// Frame buffers: every switch buffer full of full-size frames (each
    /// in a buffer of MTU + 64 bytes), plus 64 frames in flight per link.
    /// Control frames (ACKs, CNPs, PFC) ride in 256-byte buffers; the
    /// workloads' queues hold data frames, so this is the bound that
    /// matters (the run reports the peak it reached).
    pub frames: u64,
}

impl Memory {
    /// Sum of the parts.
    pub fn total(&self) -> u64 {
        self.flows + self.devices + self.frames
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        write!(
            f,
            "{:.0} MiB (flows {:.0}, devices {:.0}, frame buffers {:.0})",
            mib(self.total()),
            mib(self.flows),
            mib(self.devices),
            mib(self.frames)
        )
    }
}

/// Per-device bytes besides its CQ: QP and MR tables, NP flow table,
/// timers (an upper estimate).
const DEVICE_BASE_BYTES: u64 = 256 << 10;

/// The memory of a fabric `c` under `cfg` running `flows` flows of
/// `msg_bytes` × `window`.
pub fn memory_estimate(
    cfg: &FabricConfig,
    switches: usize,
    ports: usize,
    hosts: usize,
    flows: u64,
    msg_bytes: u32,
    window: u32,
) -> Memory {
    let wc = std::mem::size_of::<roce_stack::verbs::Wc>() as u64;
    let large = (cfg.netdev_mtu + 64) as u64;
    let per_byte_full = large as f64 / (cfg.netdev_mtu as f64 + 18.0);
    let buffers = switches as u64 * cfg.switch_buffer_bytes;
    let frames = (buffers as f64 * per_byte_full) as u64 + (ports + hosts) as u64 * 64 * large;
    Memory {
        flows: flows.saturating_mul(flow_memory_bytes(msg_bytes, window)),
        devices: hosts as u64 * (cfg.cq_depth as u64 * wc + DEVICE_BASE_BYTES),
        frames,
    }
}

/// What a leaf-spine run did to the network: per-link and per-class
/// figures, PFC and ECN counters, queue p99 per tier, the static checks
/// (lossless buffers, cyclic buffer dependency), pause heat map rows, and
/// the engine's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct NetSummary {
    /// Per link class: utilisation, pause, drops, flows per link.
    pub links: Vec<ClassSummary>,
    /// Every link.
    pub link_rows: Vec<LinkRow>,
    /// Lossless-buffer check per switch (PFC on).
    pub lossless: Vec<LosslessCheck>,
    /// A cyclic buffer dependency of the routes (names of the links), if
    /// any.
    pub buffer_cycle: Option<Vec<String>>,
    /// A PFC deadlock found when a run stalled (links in cycle order).
    pub deadlock: Option<Vec<String>>,
    /// Frames dropped by switches.
    pub drops: u64,
    /// Frames marked CE.
    pub ecn_marked: u64,
    /// PFC XOFF (first), refresh and XON frames sent by switches.
    pub pfc_frames: (u64, u64, u64),
    /// Time host NICs were paused, summed, µs.
    pub host_paused_us: f64,
    /// Time switch ports were paused by peer switches, summed, µs.
    pub switch_paused_us: f64,
    /// CNPs sent by notification points and handled by reaction points.
    pub cnps: (u64, u64),
    /// Sequence NAKs and ACK timeouts.
    pub retransmit_signals: (u64, u64),
    /// p99 of the egress queue a data frame joins, per tier, bytes.
    pub queue_p99: Vec<(Tier, u64)>,
    /// Per link with pause time: name and paused fraction per bin.
    pub pause_map: Vec<(String, Vec<f64>)>,
    /// Width of the pause-map bins, µs.
    pub bin_us: f64,
    /// Simulated time, ps.
    pub sim_ps: u64,
    /// Engine figures at the end.
    pub engine: crate::fabric::Progress,
    /// Frame buffers the engine allocated (peak), bytes.
    pub frame_buffer_bytes: u64,
}

impl NetSummary {
    /// Summarise `fab` after a run; `flows` are counted per link,
    /// `deadlock` names the ports of a PFC deadlock found.
    pub fn of(
        fab: &Fabric,
        c: &ClosSpec,
        flows: &[usize],
        deadlock: Option<Vec<usize>>,
    ) -> NetSummary {
        let rows = link_rows(fab, c, flows);
        let name_of = |p: usize| {
            rows.iter()
                .find(|r| r.port == Some(p))
                .map_or_else(|| format!("port{p}"), |r| r.name.clone())
        };
        let buffer_cycle = fab
            .wiring
            .buffer_dependency_cycle()
            .map(|c| c.into_iter().map(name_of).collect());
        let deadlock = deadlock.map(|c| c.into_iter().map(name_of).collect());
        let totals = fab.totals();
        let (mut cnp_s, mut cnp_h, mut naks, mut tos) = (0, 0, 0, 0);
        let mut host_paused = 0;
        for (h, host) in fab.hosts.iter().enumerate() {
            let k = host.dev.counters();
            cnp_s += k.get("np_cnp_sent").unwrap_or(0);
            cnp_h += k.get("rp_cnp_handled").unwrap_or(0);
            naks += k.seq_nak_sent;
            tos += k.local_ack_timeout_err;
            host_paused += fab.paused_ps(h);
        }
        let queue_p99 = [(Tier::Leaf, 1), (Tier::Spine, 2)]
            .into_iter()
            .map(|(t, i)| (t, fab.queue_hist[i].percentile(99.0)))
            .collect();
        let bin_ps = (fab.cfg.bin_ns * PS_PER_NS).max(1);
        let nbins = fab.now_ps().div_ceil(bin_ps) as usize;
        let frac = |b: &crate::metrics::Bins| -> Vec<f64> {
            (0..nbins).map(|i| b.get(i) / bin_ps as f64).collect()
        };
        let mut pause_map = Vec::new();
        for r in &rows {
            if r.paused_us <= 0.0 {
                continue;
            }
            let b = match (r.port, r.host) {
                (Some(p), _) => fab.port_paused_bins(p),
                (None, Some(h)) => Some(fab.hosts[h].pause().bins()),
                _ => None,
            };
            if let Some(b) = b {
                pause_map.push((r.name.clone(), frac(b)));
            }
        }
        NetSummary {
            links: summarise_links(&rows),
            link_rows: rows,
            lossless: lossless_checks(fab),
            buffer_cycle,
            deadlock,
            drops: totals.drops,
            ecn_marked: totals.ecn_marked,
            pfc_frames: (totals.pfc_xoff, totals.pfc_refresh, totals.pfc_xon),
            host_paused_us: host_paused as f64 / 1e6,
            switch_paused_us: totals.paused_ps as f64 / 1e6,
            cnps: (cnp_s, cnp_h),
            retransmit_signals: (naks, tos),
            queue_p99,
            pause_map,
            bin_us: fab.cfg.bin_ns as f64 / 1000.0,
            sim_ps: fab.now_ps(),
            engine: fab.progress(),
            frame_buffer_bytes: fab.frame_buffer_bytes(),
        }
    }

    /// The table rows every leaf-spine report prints after its own.
    pub fn rows(&self, memory: &Memory) -> Vec<(String, String)> {
        let mut rows = Vec::new();
        let counted = self.links.iter().any(|l| l.max_flows > 0);
        for l in &self.links {
            let mut v = format!("{:.1} % / {:.1} %", l.util_mean * 100.0, l.util_max * 100.0);
            if counted {
                v += &format!(
                    "  (flows per link max {}, links with >=2: {} of {})",
                    l.max_flows, l.shared_links, l.links
                );
            }
            rows.push((format!("{} util mean/max", l.class.name()), v));
        }
        for (t, q) in &self.queue_p99 {
            rows.push((
                format!("queue p99 at {} egress [KB]", t.name()),
                format!("{:.1}", *q as f64 / 1000.0),
            ));
        }
        rows.push(("drops".into(), self.drops.to_string()));
        rows.push(("ECN CE marks".into(), self.ecn_marked.to_string()));
        rows.push((
            "CNPs sent/handled".into(),
            format!("{} / {}", self.cnps.0, self.cnps.1),
        ));
        rows.push((
            "PFC XOFF/refresh/XON".into(),
            format!(
                "{} / {} / {}",
                self.pfc_frames.0, self.pfc_frames.1, self.pfc_frames.2
            ),
        ));
        let paused_links: usize = self.links.iter().map(|l| l.paused_links).sum();
        rows.push((
            "paused: hosts / switch ports [us]".into(),
            format!(
                "{:.1} / {:.1} ({} links paused)",
                self.host_paused_us, self.switch_paused_us, paused_links
            ),
        ));
        rows.push((
            "seq NAKs / ACK timeouts".into(),
            format!(
                "{} / {}",
                self.retransmit_signals.0, self.retransmit_signals.1
            ),
        ));
        for tier in [Tier::Leaf, Tier::Spine] {
            let t: Vec<&LosslessCheck> = self.lossless.iter().filter(|l| l.tier == tier).collect();
            if let Some(l) = t.first() {
                rows.push((
                    format!("PFC headroom per {} port [B]", tier.name()),
                    format!(
                        "{}-{}; buffer covers ports x (XOFF + headroom): {} ({} of {} KB)",
                        l.headroom.0,
                        l.headroom.1,
                        if t.iter().all(|x| x.ok()) {
                            "yes"
                        } else {
                            "NO"
                        },
                        l.need / 1000,
                        l.buffer / 1000
                    ),
                ));
            }
        }
        rows.push((
            "cyclic buffer dependency".into(),
            match &self.buffer_cycle {
                None => "none (up-down routing)".into(),
                Some(c) => format!("YES: {}", c.join(" -> ")),
            },
        ));
        if let Some(d) = &self.deadlock {
            rows.push(("PFC DEADLOCK".into(), d.join(" -> ")));
        }
        let e = &self.engine;
        rows.push((
            "simulated / events / packet-hops".into(),
            format!(
                "{:.1} us / {} / {}",
                self.sim_ps as f64 / 1e6,
                e.events,
                e.packet_hops
            ),
        ));
        rows.push((
            "memory (estimate; frame buffers used)".into(),
            format!(
                "{memory}; {:.0} MiB",
                self.frame_buffer_bytes as f64 / (1u64 << 20) as f64
            ),
        ));
        rows
    }
}
