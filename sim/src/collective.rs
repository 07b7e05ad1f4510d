//! AI-training collectives on a leaf-spine fabric, every rank a host running
//! the stack: ring all-reduce (2(N-1) steps; in each, every rank writes one
//! chunk of S/N bytes to its ring neighbour, and the step ends when its
//! slowest transfer ends), all-to-all (every rank writes S/N bytes to every
//! other at once, the mixture-of-experts pattern), and training
//! iterations (a compute gap, then an all-reduce).
//!
//! The ideal a run is measured against is the fluid bound: every transfer
//! at the payload rate of the links it must share, with traffic spread
//! perfectly over the uplinks (no ECMP collisions) and no queueing
//! ([`CollectiveReport::ideal_ps`]); the per-step base round trip is given
//! beside it ([`CollectiveReport::ideal_latency_ps`]).

use std::io::{self, Write};

use roce_stack::testing::Rng;

use crate::clos::{
    base_rtt_ps, flow_path, memory_estimate, payload_gbps, ClassSummary, ClosOpts, Column, Memory,
    NetSummary, DEFAULT_MEMORY_LIMIT,
};
use crate::fabric::{ConnSpec, Fabric, ProgressFn, Ps, SimError, PS_PER_US};
use crate::scenario::Mode;
use crate::topo::{ClosSpec, Peer};

/// How ranks are laid out on hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Rank r on host r: ring neighbours share a leaf except at leaf
    /// boundaries (what a topology-aware launcher does).
    #[default]
    Contiguous,
    /// A seeded random permutation (a scheduler that ignores the
    /// topology): most ring edges cross the spines.
    Random,
}

impl Placement {
    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Contiguous => "contiguous",
            Placement::Random => "random",
        }
    }

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Option<Placement> {
        [Placement::Contiguous, Placement::Random]
            .into_iter()
            .find(|p| p.name() == s)
    }
}

/// Which collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Ring all-reduce.
    AllReduce,
    /// All-to-all.
    AllToAll,
}

impl Kind {
    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all-reduce",
            Kind::AllToAll => "all-to-all",
        }
    }
}

/// A collective run.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveOpts {
    /// Fabric, mode, WRITE size and window.
    pub fabric: ClosOpts,
    /// Bytes each rank contributes (S).
    pub bytes_per_host: u64,
    /// Rank layout.
    pub placement: Placement,
    /// Training iterations (each: compute gap, then the collective).
    pub iterations: u32,
    /// Compute gap before each collective, µs.
    pub compute_us: u64,
    /// QPs per (rank, peer) pair; each carries 1/k of the bytes (NCCL's
    /// channels: more flows for ECMP to spread).
    pub qps_per_peer: u32,
    /// Refuse runs whose [`Memory`] estimate exceeds this, bytes.
    pub memory_limit: u64,
}

impl CollectiveOpts {
    /// One collective of `bytes_per_host` on `fabric`, contiguous ranks,
    /// one QP per peer, no compute gap.
    pub fn new(fabric: ClosOpts, bytes_per_host: u64) -> CollectiveOpts {
        CollectiveOpts {
            fabric,
            bytes_per_host,
            placement: Placement::Contiguous,
            iterations: 1,
            compute_us: 0,
            qps_per_peer: 1,
            memory_limit: DEFAULT_MEMORY_LIMIT,
        }
    }
}

/// One step of a collective (all-to-all has one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRow {
    /// Iteration.
    pub iteration: u32,
    /// Step within the iteration.
    pub step: u32,
    /// When it started, ps.
    pub start_ps: Ps,
    /// How long until its slowest transfer ended, ps.
    pub time_ps: Ps,
    /// Median transfer time, ps.
    pub median_ps: Ps,
    /// The slowest transfer's flow.
    pub slowest_flow: usize,
    /// The most flows on one switch-to-switch link of the slowest
    /// transfer's ECMP path (0 if it stays on its leaf).
    pub slowest_sharing: usize,
}

impl StepRow {
    /// Slowest over median transfer time (1 = no straggler).
    pub fn straggler(&self) -> f64 {
        if self.median_ps == 0 {
            return 1.0;
        }
        self.time_ps as f64 / self.median_ps as f64
    }
}

/// The outcome of a collective run.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectiveReport {
    /// Which collective.
    pub kind: Kind,
    /// Mode.
    pub mode: Mode,
    /// Fabric shape.
    pub clos: ClosSpec,
    /// Rank layout.
    pub placement: Placement,
    /// Bytes per rank.
    pub bytes_per_host: u64,
    /// QPs per peer.
    pub qps_per_peer: u32,
    /// Connections (QP pairs).
    pub flows: usize,
    /// Connections whose ends are on different leaves.
    pub cross_leaf: usize,
    /// Steps, all iterations.
    pub steps: Vec<StepRow>,
    /// Per iteration: compute gap and collective time, ps.
    pub iterations: Vec<(Ps, Ps)>,
    /// The fluid ideal of one collective, ps.
    pub ideal_ps: Ps,
    /// The ideal plus one base round trip per step, ps.
    pub ideal_latency_ps: Ps,
    /// Every transfer completed and every WRITE's bytes were right.
    pub delivered: bool,
    /// Flows with a failed WRITE or wrong bytes.
    pub bad_flows: usize,
    /// The run stopped before every transfer finished.
    pub stalled: bool,
    /// Memory the inputs implied.
    pub memory: Memory,
    /// The network's figures.
    pub net: NetSummary,
}

impl CollectiveReport {
    /// Mean collective time per iteration, ps.
    pub fn comm_ps(&self) -> Ps {
        let n = self.iterations.len().max(1) as u64;
        self.iterations.iter().map(|i| i.1).sum::<Ps>() / n
    }

    /// Mean collective time over the fluid ideal.
    pub fn slowdown(&self) -> f64 {
        self.comm_ps() as f64 / self.ideal_ps.max(1) as f64
    }

    /// Fraction of the iterations' time spent in the collective (waiting on
    /// the network).
    pub fn network_fraction(&self) -> f64 {
        let total: Ps = self.iterations.iter().map(|i| i.0 + i.1).sum();
        let comm: Ps = self.iterations.iter().map(|i| i.1).sum();
        comm as f64 / total.max(1) as f64
    }

    /// Largest straggler ratio over the steps.
    pub fn worst_straggler(&self) -> f64 {
        self.steps.iter().map(|s| s.straggler()).fold(1.0, f64::max)
    }

    /// Median of the steps' straggler ratios.
    pub fn median_straggler(&self) -> f64 {
        let mut v: Vec<f64> = self.steps.iter().map(|s| s.straggler()).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(1.0)
    }

    /// Steps whose slowest transfer shared a switch-to-switch link of its
    /// path with another flow (an ECMP collision).
    pub fn collided_steps(&self) -> usize {
        self.steps.iter().filter(|s| s.slowest_sharing >= 2).count()
    }

    /// The summary of link class `c`.
    pub fn class(&self, c: crate::clos::LinkClass) -> Option<&ClassSummary> {
        self.net.links.iter().find(|l| l.class == c)
    }

    /// Print the report.
    pub fn write_table(&self, out: &mut dyn Write) -> io::Result<()> {
        let c = &self.clos;
        writeln!(
            out,
            "{} of {} per host over {} hosts [mode {}]",
            self.kind.name(),
            bytes(self.bytes_per_host),
            c.hosts(),
            self.mode
        )?;
        writeln!(
            out,
            " fabric: {} leaves x {} hosts at {} Gbit/s, {} spines, uplinks {} Gbit/s (oversubscription {:.2}:1); ranks {}, {} QP(s) per peer, {} connections ({} across the spines)",
            c.leaves,
            c.hosts_per_leaf,
            c.host.gbps,
            c.spines,
            c.uplink.gbps,
            c.oversubscription(),
            self.placement.name(),
            self.qps_per_peer,
            self.flows,
            self.cross_leaf
        )?;
        let us = |p: Ps| p as f64 / 1e6;
        let mut rows: Vec<(String, String)> = vec![
            (
                "completion time [us]".into(),
                format!(
                    "{:.1} (ideal {:.1}, with base RTT per step {:.1})",
                    us(self.comm_ps()),
                    us(self.ideal_ps),
                    us(self.ideal_latency_ps)
                ),
            ),
            (
                "slower than ideal".into(),
                format!("x{:.3}", self.slowdown()),
            ),
        ];
        if self.iterations.len() > 1 || self.iterations.first().is_some_and(|i| i.0 > 0) {
            rows.push((
                "iterations / compute gap [us]".into(),
                format!(
                    "{} / {:.1}",
                    self.iterations.len(),
                    us(self.iterations.first().map_or(0, |i| i.0))
                ),
            ));
            rows.push((
                "time waiting on the network".into(),
                format!("{:.1} %", self.network_fraction() * 100.0),
            ));
        }
        if !self.steps.is_empty() {
            let times: Vec<f64> = self.steps.iter().map(|s| us(s.time_ps)).collect();
            let min = times.iter().copied().fold(f64::INFINITY, f64::min);
            let max = times.iter().copied().fold(0.0, f64::max);
            rows.push((
                "steps / step time min-max [us]".into(),
                format!("{} / {min:.2} - {max:.2}", self.steps.len()),
            ));
            rows.push((
                "straggler slowest/median: median, worst".into(),
                format!(
                    "{:.3}, {:.3}",
                    self.median_straggler(),
                    self.worst_straggler()
                ),
            ));
            rows.push((
                "steps whose slowest shared an uplink".into(),
                format!("{} of {}", self.collided_steps(), self.steps.len()),
            ));
        }
        rows.extend(self.net.rows(&self.memory));
        rows.push((
            "all transfers completed, data verified".into(),
            if self.delivered {
                "yes".into()
            } else {
                format!(
                    "NO ({} bad flows{})",
                    self.bad_flows,
                    if self.stalled { ", stalled" } else { "" }
                )
            },
        ));
        for (k, v) in rows {
            writeln!(out, " {k:<40} {v}")?;
        }
        Ok(())
    }
}

/// `b` bytes in the largest binary unit that divides it, or bytes.
pub fn bytes(b: u64) -> String {
    for (u, s) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if b >= u && b % u == 0 {
            return format!("{} {s}", b / u);
        }
    }
    format!("{b} B")
}

/// Hosts of ranks 0..n under `p` (seeded by `seed` when random).
pub fn rank_hosts(n: usize, p: Placement, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    if p == Placement::Random {
        let mut rng = Rng::new(seed ^ 0x7261_6e6b);
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
    v
}

/// The (source host, destination host) pairs of `kind` over `ranks`.
fn pairs(kind: Kind, ranks: &[usize]) -> Vec<(usize, usize)> {
    let n = ranks.len();
    match kind {
        Kind::AllReduce => (0..n).map(|r| (ranks[r], ranks[(r + 1) % n])).collect(),
        Kind::AllToAll => (0..n)
            .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
            .map(|(a, b)| (ranks[a], ranks[b]))
            .collect(),
    }
}

/// Bytes each transfer carries per step and the number of steps.
fn shape(kind: Kind, n: usize, s: u64, qps: u32) -> (u64, u32) {
    let chunk = s.div_ceil(n.max(1) as u64);
    let per = chunk.div_ceil(u64::from(qps.max(1)));
    match kind {
        Kind::AllReduce => (per, 2 * (n as u32).saturating_sub(1)),
        Kind::AllToAll => (per, 1),
    }
}

/// The fluid ideal of one collective and the per-step base RTT, ps.
fn ideal(kind: Kind, o: &CollectiveOpts, pairs: &[(usize, usize)]) -> (Ps, Ps) {
    let c = &o.fabric.clos;
    let cfg = &o.fabric.fabric;
    let n = c.hosts();
    let (per, steps) = shape(kind, n, o.bytes_per_host, o.qps_per_peer);
    let q = u64::from(o.qps_per_peer.max(1));
    let host_g = payload_gbps(cfg, c.host.gbps);
    let up_g = payload_gbps(cfg, c.uplink.gbps) * c.spines as f64;
    let hpl = c.hosts_per_leaf.max(1);
    // Per-step bytes out of and into each host and leaf.
    let mut h_out = vec![0u64; n];
    let mut h_in = vec![0u64; n];
    let mut l_out = vec![0u64; c.leaves];
    let mut l_in = vec![0u64; c.leaves];
    let mut cross = false;
    for &(a, b) in pairs {
        let bytes = per * q;
        h_out[a] += bytes;
        h_in[b] += bytes;
        if a / hpl != b / hpl {
            l_out[a / hpl] += bytes;
            l_in[b / hpl] += bytes;
            cross = true;
        }
    }
    let t = |bytes: u64, gbps: f64| bytes as f64 * 8.0 / gbps * 1000.0; // ps
    let host_max = h_out.iter().chain(&h_in).copied().max().unwrap_or(0);
    let leaf_max = l_out.iter().chain(&l_in).copied().max().unwrap_or(0);
    let mut step = t(host_max, host_g);
    if c.spines > 0 {
        step = step.max(t(leaf_max, up_g));
    }
    let hops = if cross { 4 } else { 2 };
    let rtt = base_rtt_ps(cfg, c.host, c.uplink, hops);
    let ideal = (step * f64::from(steps)).round() as Ps;
    (ideal, ideal + u64::from(steps) * rtt)
}

/// The memory `kind` over `o` implies (see [`Memory`]).
pub fn memory(kind: Kind, o: &CollectiveOpts) -> Memory {
    let c = &o.fabric.clos;
    let n = c.hosts();
    let flows = match kind {
        Kind::AllReduce => n as u64,
        Kind::AllToAll => (n as u64) * (n as u64).saturating_sub(1),
    } * u64::from(o.qps_per_peer.max(1));
    let (per, _) = shape(kind, n, o.bytes_per_host, o.qps_per_peer);
    let msg = u64::from(o.fabric.msg_bytes).min(per.max(1)) as u32;
    let ports = n + 2 * c.leaves * c.spines;
    memory_estimate(
        &o.fabric.fabric,
        c.leaves + c.spines,
        ports,
        n,
        flows,
        msg,
        o.fabric.window,
    )
}

/// Run `kind` with `o`; `progress` is called every 2^16 events.
pub fn run(
    kind: Kind,
    o: &CollectiveOpts,
    progress: Option<ProgressFn>,
) -> Result<CollectiveReport, SimError> {
    let c = &o.fabric.clos;
    let n = c.hosts();
    if n < 2 {
        return Err(SimError::NoSuchHost(n));
    }
    let mem = memory(kind, o);
    if mem.total() > o.memory_limit {
        return Err(SimError::Memory {
            need: mem.total(),
            limit: o.memory_limit,
        });
    }
    let mut fab = o.fabric.build()?;
    if let Some(p) = progress {
        fab.set_progress(1 << 16, p);
    }
    let ranks = rank_hosts(n, o.placement, o.fabric.fabric.seed);
    let pairs = pairs(kind, &ranks);
    let (per, steps) = shape(kind, n, o.bytes_per_host, o.qps_per_peer);
    let msg = u64::from(o.fabric.msg_bytes).min(per.max(1)) as u32;
    let mut flows = Vec::new();
    for &(a, b) in &pairs {
        for q in 0..o.qps_per_peer.max(1) {
            flows.push(fab.add_connection(ConnSpec {
                label: format!("h{a}->h{b}.{q}"),
                src: a,
                dst: b,
                msg_bytes: msg,
                window: o.fabric.window,
            })?);
        }
    }
    // ECMP sharing: flows per switch-to-switch link of each flow's path
    // (host links carry a rank's own QPs by design).
    let sharing: Vec<usize> = {
        let mut on_port = vec![0usize; fab.wiring.ports.len()];
        let paths: Vec<Vec<usize>> = flows
            .iter()
            .map(|&f| {
                flow_path(&fab, f)
                    .into_iter()
                    .filter(|&p| matches!(fab.wiring.ports[p].peer, Peer::Port(_)))
                    .collect()
            })
            .collect();
        for p in paths.iter().flatten() {
            on_port[*p] += 1;
        }
        paths
            .iter()
            .map(|p| p.iter().map(|&x| on_port[x]).max().unwrap_or(0))
            .collect()
    };
    let (ideal_ps, ideal_latency_ps) = ideal(kind, o, &pairs);
    let step_limit = (ideal_ps / u64::from(steps.max(1))) * 100 + 10_000 * PS_PER_US;
    let mut rows = Vec::new();
    let mut iterations = Vec::new();
    let mut stalled = false;
    'outer: for it in 0..o.iterations.max(1) {
        let t0 = fab.now_ps();
        let gap = o.compute_us * PS_PER_US;
        if gap > 0 {
            fab.run_until(t0 + gap);
        }
        let c0 = fab.now_ps();
        for step in 0..steps {
            let start = fab.now_ps();
            for &f in &flows {
                fab.start_transfer(f, per, u64::from(step));
            }
            let mut times: Vec<(Ps, usize)> = Vec::with_capacity(flows.len());
            while times.len() < flows.len() {
                match fab.run_until_done(start + step_limit) {
                    Some(d) => times.push((d.end_ps - d.start_ps, d.flow)),
                    None => {
                        stalled = true;
                        break 'outer;
                    }
                }
            }
            times.sort_unstable();
            let (slow, slow_flow) = *times.last().unwrap_or(&(0, 0));
            let median = times[(times.len() - 1) / 2].0;
            let fi = flows.iter().position(|&f| f == slow_flow).unwrap_or(0);
            rows.push(StepRow {
                iteration: it,
                step,
                start_ps: start,
                time_ps: fab.now_ps() - start,
                median_ps: median,
                slowest_flow: slow_flow,
                slowest_sharing: sharing.get(fi).copied().unwrap_or(0),
            });
            let _ = slow;
        }
        iterations.push((c0 - t0, fab.now_ps() - c0));
    }
    let deadlock = if stalled { fab.pause_deadlock() } else { None };
    Ok(report(
        kind,
        o,
        &fab,
        &flows,
        rows,
        iterations,
        ideal_ps,
        ideal_latency_ps,
        stalled,
        deadlock,
        mem,
    ))
}

#[allow(clippy::too_many_arguments)]
fn report(
    kind: Kind,
    o: &CollectiveOpts,
    fab: &Fabric,
    flows: &[usize],
    steps: Vec<StepRow>,
    iterations: Vec<(Ps, Ps)>,
    ideal_ps: Ps,
    ideal_latency_ps: Ps,
    stalled: bool,
    deadlock: Option<Vec<usize>>,
    memory: Memory,
) -> CollectiveReport {
    let c = &o.fabric.clos;
    let bad = fab.verify();
    let errors = flows.iter().filter(|&&f| fab.flows[f].errors > 0).count();
    let bad_flows = bad.len().max(errors);
    CollectiveReport {
        kind,
        mode: o.fabric.mode,
        clos: *c,
        placement: o.placement,
        bytes_per_host: o.bytes_per_host,
        qps_per_peer: o.qps_per_peer.max(1),
        flows: flows.len(),
        cross_leaf: flows
            .iter()
            .filter(|&&f| {
                let fl = &fab.flows[f].spec;
                fab.wiring.host_switch(fl.src) != fab.wiring.host_switch(fl.dst)
            })
            .count(),
        delivered: !stalled && bad_flows == 0,
        steps,
        iterations,
        ideal_ps,
        ideal_latency_ps,
        bad_flows,
        stalled,
        memory,
        net: NetSummary::of(fab, c, flows, deadlock),
    }
}

/// Print `reports` (the same run under several modes) side by side.
pub fn write_compare(reports: &[CollectiveReport], out: &mut dyn Write) -> io::Result<()> {
    let Some(first) = reports.first() else {
        return Ok(());
    };
    let c = &first.clos;
    writeln!(
        out,
        "{} of {} per host over {} hosts ({} leaves x {}, {} spines, {}/{} Gbit/s, ranks {}), by mode",
        first.kind.name(),
        bytes(first.bytes_per_host),
        c.hosts(),
        c.leaves,
        c.hosts_per_leaf,
        c.spines,
        c.host.gbps,
        c.uplink.gbps,
        first.placement.name()
    )?;
    let us = |p: Ps| format!("{:.1}", p as f64 / 1e6);
    let lines: Vec<(&str, Column<CollectiveReport>)> = vec![
        ("completion time [us]", Box::new(move |r| us(r.comm_ps()))),
        ("ideal [us]", Box::new(move |r| us(r.ideal_ps))),
        (
            "ideal + base RTT per step [us]",
            Box::new(move |r| us(r.ideal_latency_ps)),
        ),
        (
            "slower than ideal",
            Box::new(|r| format!("x{:.3}", r.slowdown())),
        ),
        (
            "network share of iteration",
            Box::new(|r| format!("{:.1} %", r.network_fraction() * 100.0)),
        ),
        (
            "straggler median/worst",
            Box::new(|r| format!("{:.2}/{:.2}", r.median_straggler(), r.worst_straggler())),
        ),
        ("drops", Box::new(|r| r.net.drops.to_string())),
        ("CE marks", Box::new(|r| r.net.ecn_marked.to_string())),
        ("CNPs handled", Box::new(|r| r.net.cnps.1.to_string())),
        ("PFC XOFF", Box::new(|r| r.net.pfc_frames.0.to_string())),
        (
            "paused hosts/switches [us]",
            Box::new(|r| format!("{:.0}/{:.0}", r.net.host_paused_us, r.net.switch_paused_us)),
        ),
        (
            "leaf/spine queue p99 [KB]",
            Box::new(|r| {
                let q: Vec<String> = r
                    .net
                    .queue_p99
                    .iter()
                    .map(|(_, b)| format!("{:.0}", *b as f64 / 1000.0))
                    .collect();
                q.join("/")
            }),
        ),
        (
            "NAKs/timeouts",
            Box::new(|r| {
                format!(
                    "{}/{}",
                    r.net.retransmit_signals.0, r.net.retransmit_signals.1
                )
            }),
        ),
        (
            "delivered+verified",
            Box::new(|r| if r.delivered { "yes" } else { "NO" }.to_string()),
        ),
    ];
    write!(out, " {:<30}", "")?;
    for r in reports {
        write!(out, " {:>14}", r.mode.name())?;
    }
    writeln!(out)?;
    for (name, f) in &lines {
        write!(out, " {name:<30}")?;
        for r in reports {
            write!(out, " {:>14}", f(r))?;
        }
        writeln!(out)?;
    }
    Ok(())
}
