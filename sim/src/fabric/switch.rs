//! Switches: output-queued, strict priority between the eight priorities,
//! one shared buffer each, ECMP forwarding, RED/ECN at egress, PFC
//! generated per ingress port and honoured per egress port.

use std::collections::VecDeque;

use roce_stack::pfc::PfcGenerator;
use roce_stack::testing::Rng;
use roce_stack::wire::pfc::MacControl;

use super::frame::Frame;
use super::{mac_host, red_hit, tier_index, Ev, Fabric, MarkAt, Ps, PS_PER_NS};
use crate::net::{self, RedEcn};
use crate::pfc::HostPause;
use crate::topo::{Peer, PortWire, Tier};

/// Most first-XOFF events kept in [`Fabric::pfc_log`].
pub const PFC_LOG_MAX: usize = 1 << 20;

/// A switch egress port (and, for PFC, the ingress state of the same port).
#[derive(Debug)]
pub(super) struct Port {
    queues: [VecDeque<(Frame, u32)>; 8],
    pub(super) qbytes: [u64; 8],
    ctrl: VecDeque<Frame>,
    busy_until: Ps,
    /// PFC generator over the bytes received on this port and still
    /// buffered (the port's ingress side).
    gen: PfcGenerator,
    /// Whether an XOFF is outstanding per priority (to tell refreshes from
    /// first XOFFs).
    advertised: [bool; 8],
    /// The pending PFC timer event of this port.
    pub(super) pfc_timer_at: Option<Ps>,
    /// PFC received from the peer (a switch) and honoured at egress.
    pub(super) pause: HostPause,
    /// The pending resume event of this port (end of a pause).
    pub(super) resume_at: Option<Ps>,
    red: Option<RedEcn>,
    switch: u32,
    peer: Peer,
    tier: Tier,
    gbps: f64,
    prop_ps: Ps,
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
    /// Frames marked CE on this egress port.
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
    /// PFC frames received from the peer switch and honoured.
    pub rx_pfc: u64,
    /// Time this egress port was paused by its peer, ps (summed over
    /// priorities).
    pub paused_ps: u64,
}

impl PortStats {
    /// Add `o`'s counts (the maximum of the queue maxima).
    pub fn add(&mut self, o: &PortStats) {
        self.tx_frames += o.tx_frames;
        self.tx_wire_bytes += o.tx_wire_bytes;
        self.drops += o.drops;
        self.ecn_marked += o.ecn_marked;
        self.pfc_xoff += o.pfc_xoff;
        self.pfc_refresh += o.pfc_refresh;
        self.pfc_xon += o.pfc_xon;
        self.max_queue_bytes = self.max_queue_bytes.max(o.max_queue_bytes);
        self.rx_pfc += o.rx_pfc;
        self.paused_ps += o.paused_ps;
    }
}

/// A switch: its shared buffer and the counters not tied to a port.
#[derive(Debug)]
pub struct Switch {
    /// Tier in the topology.
    pub tier: Tier,
    buffer_used: u64,
    /// Largest buffer occupancy seen, bytes.
    pub buffer_peak: u64,
    /// Frames with an unknown or unreachable destination (dropped).
    pub unknown_dst: u64,
    /// MAC control frames received from hosts (ignored).
    pub rx_mac_control: u64,
    rng: Rng,
}

impl Switch {
    pub(super) fn new(tier: Tier, seed: u64) -> Switch {
        Switch {
            tier,
            buffer_used: 0,
            buffer_peak: 0,
            unknown_dst: 0,
            rx_mac_control: 0,
            rng: Rng::new(seed),
        }
    }

    /// Bytes of frames buffered now.
    pub fn buffer_used(&self) -> u64 {
        self.buffer_used
    }
}

impl Port {
    pub(super) fn new(
        w: &PortWire,
        tier: Tier,
        gen: PfcGenerator,
        pause: HostPause,
        red: Option<RedEcn>,
    ) -> Port {
        Port {
            queues: Default::default(),
            qbytes: [0; 8],
            ctrl: VecDeque::new(),
            busy_until: 0,
            gen,
            advertised: [false; 8],
            pfc_timer_at: None,
            pause,
            resume_at: None,
            red,
            switch: w.switch as u32,
            peer: w.peer,
            tier,
            gbps: w.link.gbps,
            prop_ps: w.link.delay_ns * PS_PER_NS,
            stats: PortStats::default(),
        }
    }

    pub(super) fn stats_at(&self, now: Ps) -> PortStats {
        PortStats {
            paused_ps: self.pause.total_ps(now),
            ..self.stats
        }
    }
}

impl Fabric {
    pub(super) fn switch_rx(&mut self, ingress: usize, mut frame: Frame) {
        let now = self.now;
        let info = *frame.info();
        let sw = self.ports[ingress].switch as usize;
        if info.mac_control {
            self.switch_rx_control(ingress, frame);
            return;
        }
        let n_hosts = self.hosts.len();
        let route = mac_host(&info.dst, n_hosts)
            .filter(|&h| self.hosts[h].mac == info.dst)
            .map(|h| self.wiring.group(sw, h));
        let out = match route {
            Some([one]) => *one as usize,
            Some(g) if !g.is_empty() => g[(frame.ecmp_hash() % g.len() as u32) as usize] as usize,
            _ => {
                self.switches[sw].unknown_dst += 1;
                self.pool.put(frame);
                return;
            }
        };
        let prio = info.prio;
        let len = frame.len() as u64;
        let switch = &mut self.switches[sw];
        if switch.buffer_used + len > self.cfg.switch_buffer_bytes {
            self.ports[out].stats.drops += 1;
            self.observed.drop_bins.add(now, 1.0);
            self.pool.put(frame);
            return;
        }
        let port = &mut self.ports[out];
        if self.cfg.ecn_at == MarkAt::Enqueue {
            let depth = port.qbytes[prio as usize];
            if let Some(red) = &port.red {
                if red_hit(red, depth, &mut switch.rng) && net::mark_ce(frame.bytes_mut()) {
                    port.stats.ecn_marked += 1;
                }
            }
        }
        port.qbytes[prio as usize] += len;
        let total: u64 = port.qbytes.iter().sum();
        port.stats.max_queue_bytes = port.stats.max_queue_bytes.max(total);
        port.queues[prio as usize].push_back((frame, ingress as u32));
        self.queue_hist[tier_index(port.tier)].add(total);
        if out == self.observed.port {
            self.observed.queue_max_bins.max(now, total as f64);
        }
        switch.buffer_used += len;
        switch.buffer_peak = switch.buffer_peak.max(switch.buffer_used);
        // Ingress accounting for PFC.
        let now_i = self.now_instant();
        self.ports[ingress].gen.on_enqueue(now_i, prio, len);
        self.pfc_poll(ingress);
        self.switch_kick(out);
    }

    /// A MAC control frame arrived on port `p`: honoured when the peer is a
    /// switch and PFC is on (the port's egress stops the paused
    /// priorities), counted and ignored from a host.
    fn switch_rx_control(&mut self, p: usize, frame: Frame) {
        let now = self.now;
        let port = &mut self.ports[p];
        if !matches!(port.peer, Peer::Port(_)) {
            let sw = port.switch as usize;
            self.switches[sw].rx_mac_control += 1;
            self.pool.put(frame);
            return;
        }
        port.stats.rx_pfc += 1;
        let (wake, resumed) =
            port.pause
                .on_frame(frame.bytes(), now, &mut self.observed.paused_bins_switch);
        self.pool.put(frame);
        if let Some(w) = wake {
            if port.resume_at.map_or(true, |x| w < x || x < now) {
                port.resume_at = Some(w);
                self.schedule(w, Ev::PortResume(p as u32));
            }
        }
        if resumed {
            self.switch_kick(p);
        }
    }

    /// Take the PFC frames port `p`'s generator has due (XOFF, refresh,
    /// XON) and queue them out of `p` (toward its peer) ahead of data
    /// frames (802.3 §31B.1); arm the port's PFC timer for the next
    /// refresh.
    pub(super) fn pfc_poll(&mut self, p: usize) {
        let now = self.now;
        let now_i = self.now_instant();
        let mut buf = [0u8; 64];
        let mut queued = false;
        loop {
            let port = &mut self.ports[p];
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
                            if self.pfc_log.len() < PFC_LOG_MAX {
                                self.pfc_log.push((now, p as u32));
                            }
                        }
                        port.advertised[i] = true;
                        self.observed.xoff_bins.add(now, 1.0);
                    }
                }
            }
            let f = self.pool.copy(&buf[..n]);
            self.ports[p].ctrl.push_back(f);
            queued = true;
        }
        let port = &mut self.ports[p];
        if let Some(t) = port.gen.poll_timeout() {
            let t = (t.as_nanos() * PS_PER_NS).max(now + PS_PER_NS);
            if port.pfc_timer_at.map_or(true, |x| t < x || x < now) {
                port.pfc_timer_at = Some(t);
                self.schedule(t, Ev::PfcTimer(p as u32));
            }
        }
        if queued {
            self.switch_kick(p);
        }
    }

    pub(super) fn switch_kick(&mut self, p: usize) {
        let now = self.now;
        let port = &mut self.ports[p];
        if port.busy_until > now {
            return;
        }
        let mut frame = port.ctrl.pop_front();
        if frame.is_none() {
            port.pause
                .settle(now, &mut self.observed.paused_bins_switch);
            let any_paused = port.pause.any_paused(now);
            let mut got = None;
            let mut held_back = false;
            for prio in (0..8usize).rev() {
                if port.queues[prio].is_empty() {
                    continue;
                }
                if any_paused && port.pause.is_paused(prio as u8, now) {
                    held_back = true;
                    continue;
                }
                if let Some((mut f, ing)) = port.queues[prio].pop_front() {
                    if let (Some(red), MarkAt::Dequeue) = (&port.red, self.cfg.ecn_at) {
                        let depth = port.qbytes[prio];
                        let rng = &mut self.switches[port.switch as usize].rng;
                        if red_hit(red, depth, rng) && net::mark_ce(f.bytes_mut()) {
                            port.stats.ecn_marked += 1;
                        }
                    }
                    port.qbytes[prio] -= f.len() as u64;
                    got = Some((f, ing as usize, prio as u8));
                    break;
                }
            }
            if got.is_none() && held_back {
                // Everything queued is paused: wake when the pause ends (an
                // XON kicks the port earlier).
                let wake = (0..8u8)
                    .filter_map(|q| port.pause.resume_at_ps(q))
                    .filter(|&t| t > now)
                    .min();
                if let Some(w) = wake {
                    if port.resume_at.map_or(true, |x| w < x || x <= now) {
                        port.resume_at = Some(w);
                        self.schedule(w, Ev::PortResume(p as u32));
                    }
                }
            }
            if let Some((f, ing, prio)) = got {
                let len = f.len() as u64;
                let sw = self.ports[p].switch as usize;
                self.switches[sw].buffer_used -= len;
                let now_i = self.now_instant();
                self.ports[ing].gen.on_dequeue(now_i, prio, len);
                self.pfc_poll(ing);
                frame = Some(f);
            }
        }
        let Some(f) = frame else {
            return;
        };
        let wb = net::wire_bytes(f.len());
        let port = &mut self.ports[p];
        let ser = net::serialisation_ps(wb, port.gbps);
        port.busy_until = now + ser;
        port.stats.tx_frames += 1;
        port.stats.tx_wire_bytes += wb;
        if p == self.observed.port {
            self.observed.busy_bins.add(now, wb as f64);
        }
        let prop = port.prop_ps;
        let peer = port.peer;
        self.packet_hops += 1;
        self.schedule(now + ser, Ev::SwitchTx(p as u32));
        match peer {
            Peer::Host(h) => self.schedule(now + ser + prop, Ev::HostRx(h as u32, f)),
            Peer::Port(q) => self.schedule(now + ser + prop, Ev::SwitchRx(q as u32, f)),
        }
    }
}

impl Fabric {
    /// A PFC deadlock, if one holds now: a cycle of switch egress ports,
    /// each paused by its peer while holding frames that arrived through
    /// the port whose XOFF pauses the previous one (so none can drain
    /// until another does). Returns the ports in cycle order.
    pub fn pause_deadlock(&self) -> Option<Vec<usize>> {
        let now = self.now;
        let n = self.ports.len();
        let stuck = |p: &Port| p.pause.any_paused(now) && p.qbytes.iter().any(|&b| b > 0);
        let mut edges: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (p, port) in self.ports.iter().enumerate() {
            if !stuck(port) {
                continue;
            }
            let Peer::Port(r) = port.peer else {
                continue;
            };
            let b = self.ports[r].switch as usize;
            for q in self.wiring.switch_ports[b].clone() {
                let qp = &self.ports[q];
                if q != r
                    && stuck(qp)
                    && qp
                        .queues
                        .iter()
                        .any(|qu| qu.iter().any(|(_, ing)| *ing as usize == r))
                {
                    edges[p].push(q);
                }
            }
        }
        crate::topo::find_cycle(&edges)
    }
}
