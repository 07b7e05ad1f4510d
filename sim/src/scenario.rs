//! The experiments of `roce sim`: incast under each congestion-management
//! mode, PFC head-of-line blocking of a victim flow, a lossy fabric where RC
//! retransmission must deliver every byte, and flows joining and leaving a
//! congested link. Each returns a [`Report`] (summary figures and the time
//! series for the `plot` module, feature `plot`).

use std::fmt;
use std::io::{self, Write};

use roce_stack::cc::CcConfig;

use crate::fabric::{Fabric, FabricConfig, FlowSpec, Ps, PS_PER_NS, PS_PER_US};
use crate::metrics::{jain_index, percentile};
use crate::net::RedEcn;
use crate::pfc::{self, PfcConfig};

/// Congestion management of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// ECN marking + DCQCN, PFC off (lossy; the buffer must absorb the
    /// transients).
    Dcqcn,
    /// ECN marking + DCQCN with PFC on the data priority as a backstop.
    DcqcnPfc,
    /// PFC only (lossless, no congestion control).
    Pfc,
    /// Neither: tail drop, RC retransmission recovers.
    None,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 4] = [Mode::Dcqcn, Mode::DcqcnPfc, Mode::Pfc, Mode::None];

    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Dcqcn => "dcqcn",
            Mode::DcqcnPfc => "dcqcn+pfc",
            Mode::Pfc => "pfc",
            Mode::None => "none",
        }
    }

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == s)
    }

    /// ECN marking and DCQCN on.
    pub fn dcqcn(self) -> bool {
        matches!(self, Mode::Dcqcn | Mode::DcqcnPfc)
    }

    /// PFC on.
    pub fn pfc(self) -> bool {
        matches!(self, Mode::DcqcnPfc | Mode::Pfc)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Default RED/ECN thresholds for 100 Gbit/s (see the crate README section
/// "Simulated fabric" for how they were chosen): Kmin 40 KB, Kmax 400 KB,
/// Pmax 20 %.
pub const DEFAULT_RED: RedEcn = RedEcn {
    kmin_bytes: 40_000,
    kmax_bytes: 400_000,
    pmax: 0.2,
};

/// Default PFC XOFF threshold per ingress port and priority, bytes.
pub const DEFAULT_XOFF_BYTES: u64 = 100_000;

/// The congestion-control configuration the scenarios use: the mlx5
/// defaults ([`CcConfig::default`]: CNPs at most every 4 µs per flow, one cut
/// per 4 µs `rate_reduce_monitor_period`, α gain and α period as shipped)
/// with the increase side changed so a synchronized incast converges within
/// a few simulated milliseconds (see the README section "Simulated fabric"):
///
/// - `clamp_tgt_rate` on (the paper's `R_T ← R_C` at every cut): without it
///   the target keeps the pre-congestion rate and every flow jumps halfway
///   back to it at its first increase, all flows at once;
/// - `rpg_time_reset` 55 µs (the paper's T) and `rpg_byte_reset` 0 (byte
///   counter off): increase events per unit of time rather than per byte,
///   so slow flows catch up (a byte counter gives the fast flows more
///   increases);
/// - `rpg_ai_rate` 500 Mbit/s (the mlx5 5 Mbit/s would need seconds).
pub fn default_cc() -> CcConfig {
    let mut cc = CcConfig::default();
    let d = &mut cc.dcqcn;
    d.clamp_tgt_rate = true;
    d.rpg_time_reset = std::time::Duration::from_micros(55);
    d.rpg_byte_reset = 0;
    d.rpg_ai_rate = 500;
    cc
}

/// Fabric configuration of `mode` with the defaults above.
pub fn fabric_config(mode: Mode) -> FabricConfig {
    FabricConfig {
        ecn: mode.dcqcn().then_some(DEFAULT_RED),
        dcqcn: mode.dcqcn(),
        cc: default_cc(),
        pfc: mode
            .pfc()
            .then(|| PfcConfig::lossless_prio3(DEFAULT_XOFF_BYTES)),
        ..FabricConfig::default()
    }
}

/// Options shared by the scenarios.
#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    /// Congestion management.
    pub mode: Mode,
    /// Fabric (links, buffer, RED, PFC, DCQCN); normally
    /// [`fabric_config`]`(mode)`.
    pub fabric: FabricConfig,
    /// Traffic time, µs (flows post until then; then everything drains).
    pub duration_us: u64,
    /// Start of the measurement window, µs (after convergence).
    pub measure_from_us: u64,
    /// Bytes per RDMA WRITE.
    pub msg_bytes: u32,
    /// WRITEs each flow keeps outstanding.
    pub window: u32,
}

impl Opts {
    /// Defaults for `mode`: 5 ms of traffic measured from 2.5 ms, 64 KB
    /// WRITEs, 16 outstanding (1 MB in flight per flow at most).
    pub fn new(mode: Mode) -> Opts {
        Opts {
            mode,
            fabric: fabric_config(mode),
            duration_us: 5_000,
            measure_from_us: 2_500,
            msg_bytes: 65_536,
            window: 16,
        }
    }
}

/// One flow's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRow {
    /// Name.
    pub label: String,
    /// Source and destination host.
    pub src: usize,
    /// Destination host.
    pub dst: usize,
    /// Goodput in the measurement window, Gbit/s (payload bytes received in
    /// order).
    pub goodput_gbps: f64,
    /// WRITEs completed successfully (whole run).
    pub completed: u64,
    /// WRITEs completed in error.
    pub errors: u64,
}

/// Binned time series for plotting.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// Bin start times, µs.
    pub t_us: Vec<f64>,
    /// Goodput per flow per bin, Gbit/s.
    pub flows: Vec<(String, Vec<f64>)>,
    /// DCQCN rate per flow per bin, Gbit/s (empty without DCQCN).
    pub rates: Vec<(String, Vec<f64>)>,
    /// Largest bottleneck queue per bin, KB.
    pub queue_kb: Vec<f64>,
    /// Fraction of the bin the hosts spent paused (summed over hosts).
    pub paused: Vec<f64>,
    /// Bottleneck utilisation per bin (wire bytes / capacity).
    pub util: Vec<f64>,
}

/// The outcome of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Title.
    pub title: String,
    /// Mode.
    pub mode: Mode,
    /// Measurement window, µs.
    pub window_us: (f64, f64),
    /// Link rate, Gbit/s.
    pub link_gbps: f64,
    /// Flows (goodput in the window).
    pub flows: Vec<FlowRow>,
    /// Bottleneck utilisation in the window: wire bytes (frames + FCS +
    /// preamble/IFG) sent out of the bottleneck port over its capacity.
    pub utilisation: f64,
    /// Jain's fairness index of the flows' goodputs in the window (the flows
    /// named by the scenario; all by default).
    pub jain: f64,
    /// Bottleneck queue percentiles in the window, bytes (samples every
    /// `sample_ns`).
    pub queue_p50: u64,
    /// 99th percentile.
    pub queue_p99: u64,
    /// Largest bottleneck queue of the whole run, bytes.
    pub queue_max: u64,
    /// Frames dropped by the switch (whole run).
    pub drops: u64,
    /// Frames marked CE (whole run).
    pub ecn_marked: u64,
    /// PFC XOFF frames (first of an episode) sent by the switch.
    pub pfc_xoff: u64,
    /// PFC XOFF refreshes.
    pub pfc_refresh: u64,
    /// PFC XON frames.
    pub pfc_xon: u64,
    /// Time hosts spent paused, summed over hosts, µs.
    pub paused_us: f64,
    /// CNPs sent by notification points (`np_cnp_sent`).
    pub cnp_sent: u64,
    /// CNPs handled by reaction points (`rp_cnp_handled`).
    pub cnp_handled: u64,
    /// Sequence-error NAKs sent by responders.
    pub seq_naks: u64,
    /// Requester ACK timeouts.
    pub ack_timeouts: u64,
    /// Every WRITE completed after the run (drained).
    pub drained: bool,
    /// Flows whose receive memory did not hold the expected data.
    pub bad_data: Vec<usize>,
    /// Scenario-specific figures, printed after the table.
    pub notes: Vec<(String, String)>,
    /// Scenario-specific figures as numbers (same names as in `notes`).
    pub figures: Vec<(String, f64)>,
    /// Time series.
    pub series: Series,
    /// Events the simulation processed.
    pub events: u64,
}

impl Report {
    /// Whether every WRITE completed successfully and every receive buffer
    /// holds the expected data.
    pub fn delivered_all(&self) -> bool {
        self.drained && self.bad_data.is_empty() && self.flows.iter().all(|f| f.errors == 0)
    }

    /// A scenario-specific figure by name.
    pub fn figure(&self, name: &str) -> Option<f64> {
        self.figures
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// Record a scenario-specific figure (also printed).
    pub fn add_figure(&mut self, name: &str, value: f64, text: String) {
        self.figures.push((name.to_string(), value));
        self.notes.push((name.to_string(), text));
    }

    /// Sum of the flows' goodput in the window, Gbit/s.
    pub fn goodput_gbps(&self) -> f64 {
        self.flows.iter().map(|f| f.goodput_gbps).sum()
    }

    /// Print the summary table.
    pub fn write_table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "{} [mode {}]", self.title, self.mode)?;
        writeln!(
            out,
            " window {:.0}-{:.0} us, links {} Gbit/s",
            self.window_us.0, self.window_us.1, self.link_gbps
        )?;
        writeln!(
            out,
            " {:<12} {:>4} {:>4} {:>14} {:>10} {:>7}",
            "flow", "src", "dst", "goodput[Gb/s]", "writes", "errors"
        )?;
        for f in &self.flows {
            writeln!(
                out,
                " {:<12} {:>4} {:>4} {:>14.2} {:>10} {:>7}",
                f.label, f.src, f.dst, f.goodput_gbps, f.completed, f.errors
            )?;
        }
        let kb = |b: u64| b as f64 / 1000.0;
        let rows: Vec<(&str, String)> = vec![
            (
                "goodput total [Gb/s]",
                format!("{:.2}", self.goodput_gbps()),
            ),
            (
                "bottleneck utilisation",
                format!("{:.1} %", self.utilisation * 100.0),
            ),
            ("Jain fairness index", format!("{:.4}", self.jain)),
            (
                "queue p50/p99/max [KB]",
                format!(
                    "{:.1} / {:.1} / {:.1}",
                    kb(self.queue_p50),
                    kb(self.queue_p99),
                    kb(self.queue_max)
                ),
            ),
            ("drops", self.drops.to_string()),
            ("ECN CE marks", self.ecn_marked.to_string()),
            (
                "PFC XOFF/refresh/XON",
                format!(
                    "{} / {} / {}",
                    self.pfc_xoff, self.pfc_refresh, self.pfc_xon
                ),
            ),
            ("hosts paused [us]", format!("{:.1}", self.paused_us)),
            (
                "CNPs sent/handled",
                format!("{} / {}", self.cnp_sent, self.cnp_handled),
            ),
            (
                "seq NAKs / ACK timeouts",
                format!("{} / {}", self.seq_naks, self.ack_timeouts),
            ),
            (
                "all WRITEs completed, data verified",
                if self.delivered_all() { "yes" } else { "NO" }.to_string(),
            ),
        ];
        for (k, v) in rows.iter().chain(
            self.notes
                .iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect::<Vec<_>>()
                .iter(),
        ) {
            writeln!(out, " {k:<36} {v}")?;
        }
        Ok(())
    }
}

/// Goodput of flow `f` over `[from, to)`, Gbit/s.
pub fn flow_gbps(fab: &Fabric, f: usize, from: Ps, to: Ps) -> f64 {
    let bytes = fab.flows[f].rx_bins.sum(from, to);
    bytes * 8.0 / ((to - from) as f64 / 1000.0)
}

/// Run `fab` (flows added, observed port set) for `duration_us`, drain, and
/// summarise over `[from_us, duration_us)`; `fair` selects the flows for
/// Jain's index (all when empty).
pub fn run_and_report(
    mut fab: Fabric,
    title: String,
    mode: Mode,
    duration_us: u64,
    from_us: u64,
    fair: &[usize],
) -> (Report, Fabric) {
    fab.start_sampling();
    let end = duration_us * PS_PER_US;
    fab.run_until(end);
    let from = (from_us * PS_PER_US).min(end);
    let rates: Vec<f64> = (0..fab.flows.len())
        .map(|f| flow_gbps(&fab, f, from, end))
        .collect();
    let drained = fab.drain(100_000 * PS_PER_US);
    let bad_data = fab.verify();
    let report = summarise(
        &fab, title, mode, from, end, &rates, fair, drained, bad_data,
    );
    (report, fab)
}

#[allow(clippy::too_many_arguments)]
fn summarise(
    fab: &Fabric,
    title: String,
    mode: Mode,
    from: Ps,
    end: Ps,
    rates: &[f64],
    fair: &[usize],
    drained: bool,
    bad_data: Vec<usize>,
) -> Report {
    let cfg = &fab.cfg;
    let obs = &fab.observed;
    let window_s = (end - from) as f64 * 1e-12;
    let util = obs.busy_bins.sum(from, end) * 8.0 / (cfg.link_gbps * 1e9 * window_s);
    let fair_rates: Vec<f64> = if fair.is_empty() {
        rates.to_vec()
    } else {
        fair.iter().filter_map(|&i| rates.get(i).copied()).collect()
    };
    let sample_ps = cfg.sample_ns * PS_PER_NS;
    let in_window: Vec<u64> = obs
        .queue_samples
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            let t = obs.first_sample_ps + *i as u64 * sample_ps;
            t >= from && t < end
        })
        .map(|(_, q)| *q)
        .collect();
    let totals = fab.totals();
    let mut cnp_sent = 0;
    let mut cnp_handled = 0;
    let mut seq_naks = 0;
    let mut ack_timeouts = 0;
    let mut paused_ps = 0;
    for (h, host) in fab.hosts.iter().enumerate() {
        let c = host.dev.counters();
        cnp_sent += c.get("np_cnp_sent").unwrap_or(0);
        cnp_handled += c.get("rp_cnp_handled").unwrap_or(0);
        seq_naks += c.seq_nak_sent;
        ack_timeouts += c.local_ack_timeout_err;
        paused_ps += fab.paused_ps(h);
    }
    let flows = fab
        .flows
        .iter()
        .zip(rates)
        .map(|(f, r)| FlowRow {
            label: f.spec.label.clone(),
            src: f.spec.src,
            dst: f.spec.dst,
            goodput_gbps: *r,
            completed: f.completed,
            errors: f.errors,
        })
        .collect();
    Report {
        title,
        mode,
        window_us: (from as f64 / 1e6, end as f64 / 1e6),
        link_gbps: cfg.link_gbps,
        flows,
        utilisation: util,
        jain: jain_index(&fair_rates),
        queue_p50: percentile(&in_window, 50.0),
        queue_p99: percentile(&in_window, 99.0),
        queue_max: fab.port_stats(obs.port).max_queue_bytes,
        drops: totals.drops,
        ecn_marked: totals.ecn_marked,
        pfc_xoff: totals.pfc_xoff,
        pfc_refresh: totals.pfc_refresh,
        pfc_xon: totals.pfc_xon,
        paused_us: paused_ps as f64 / 1e6,
        cnp_sent,
        cnp_handled,
        seq_naks,
        ack_timeouts,
        drained,
        bad_data,
        notes: Vec::new(),
        figures: Vec::new(),
        series: series(fab, end),
        events: fab.events_processed,
    }
}

fn series(fab: &Fabric, end: Ps) -> Series {
    let cfg = &fab.cfg;
    let bin_ps = cfg.bin_ns * PS_PER_NS;
    let n = end.div_ceil(bin_ps) as usize;
    let bin_ns = cfg.bin_ns as f64;
    let gbps = |bytes: f64| bytes * 8.0 / bin_ns;
    let obs = &fab.observed;
    let mut s = Series {
        t_us: (0..n).map(|i| i as f64 * bin_ns / 1000.0).collect(),
        ..Series::default()
    };
    for f in &fab.flows {
        s.flows.push((
            f.spec.label.clone(),
            (0..n).map(|i| gbps(f.rx_bins.get(i))).collect(),
        ));
        if cfg.dcqcn {
            s.rates.push((
                f.spec.label.clone(),
                (0..n).map(|i| f.rate_bins.get(i) / 1000.0).collect(),
            ));
        }
    }
    s.queue_kb = (0..n).map(|i| obs.queue_max_bins.get(i) / 1000.0).collect();
    s.paused = (0..n)
        .map(|i| obs.paused_bins.get(i) / bin_ps as f64)
        .collect();
    s.util = (0..n)
        .map(|i| gbps(obs.busy_bins.get(i)) / cfg.link_gbps)
        .collect();
    s
}

/// N:1 incast: hosts 0..n send to host n. Jain's index over all flows.
pub fn incast(n: usize, o: &Opts) -> Report {
    let mut fab = Fabric::new(o.fabric.clone(), n + 1, n);
    for i in 0..n {
        let spec = FlowSpec {
            label: format!("h{i}->h{n}"),
            src: i,
            dst: n,
            msg_bytes: o.msg_bytes,
            window: o.window,
            start_ns: 0,
            stop_ns: None,
        };
        if let Err(e) = fab.add_flow(spec) {
            panic!("incast set-up: {e}");
        }
    }
    let title = format!("incast {n}:1");
    let mut r = run_and_report(fab, title, o.mode, o.duration_us, o.measure_from_us, &[]).0;
    add_lossless_notes(&mut r, &o.fabric, n + 1);
    r
}

/// With PFC on: the headroom per ingress port and whether the shared buffer
/// covers XOFF + headroom on every port (then no frame can be dropped).
fn add_lossless_notes(r: &mut Report, cfg: &FabricConfig, ports: usize) {
    if let Some((h, need)) = lossless_buffer(cfg, ports) {
        r.add_figure("PFC headroom per port [B]", h as f64, h.to_string());
        let ok = need <= cfg.switch_buffer_bytes;
        r.notes.push((
            "buffer >= ports x (XOFF + headroom)".into(),
            format!(
                "{} ({} KB needed, {} KB buffer)",
                if ok { "yes" } else { "no" },
                need / 1000,
                cfg.switch_buffer_bytes / 1000
            ),
        ));
    }
}

/// Head-of-line blocking by PFC: hosts 0..n send to host n (congested);
/// host 0 also runs a victim flow to host n+1, whose link is idle. Runs
/// `o` and, for comparison, the same fabric with PFC off (and otherwise
/// `o`'s settings); the notes give the victim's goodput in both. Jain's index
/// is over the incast flows.
pub fn pfc_hol(n: usize, o: &Opts) -> Report {
    let build = |cfg: FabricConfig| {
        let mut fab = Fabric::new(cfg, n + 2, n);
        for i in 0..n {
            let spec = FlowSpec {
                label: format!("h{i}->h{n}"),
                src: i,
                dst: n,
                msg_bytes: o.msg_bytes,
                window: o.window,
                start_ns: 0,
                stop_ns: None,
            };
            if let Err(e) = fab.add_flow(spec) {
                panic!("pfc-hol set-up: {e}");
            }
        }
        let victim = FlowSpec {
            label: format!("victim h0->h{}", n + 1),
            src: 0,
            dst: n + 1,
            msg_bytes: o.msg_bytes,
            window: o.window,
            start_ns: 0,
            stop_ns: None,
        };
        if let Err(e) = fab.add_flow(victim) {
            panic!("pfc-hol set-up: {e}");
        }
        fab
    };
    let incast_flows: Vec<usize> = (0..n).collect();
    let (mut report, _) = run_and_report(
        build(o.fabric.clone()),
        format!("PFC head-of-line blocking, incast {n}:1 + victim"),
        o.mode,
        o.duration_us,
        o.measure_from_us,
        &incast_flows,
    );
    let victim_with = report.flows[n].goodput_gbps;
    let mut off = o.fabric.clone();
    off.pfc = None;
    let (base, _) = run_and_report(
        build(off),
        String::new(),
        o.mode,
        o.duration_us,
        o.measure_from_us,
        &incast_flows,
    );
    let victim_without = base.flows[n].goodput_gbps;
    report.add_figure(
        "victim goodput [Gb/s]",
        victim_with,
        format!("{victim_with:.2}"),
    );
    report.add_figure(
        "victim goodput, PFC off [Gb/s]",
        victim_without,
        format!("{victim_without:.2} (drops {})", base.drops),
    );
    add_lossless_notes(&mut report, &o.fabric, n + 2);
    report
}

/// Flow churn on one bottleneck: flows A and B start at 0, C joins at 1/4 of
/// the run and leaves at 5/8 (stops posting; its outstanding WRITEs finish).
/// Notes: C's share of the bottleneck in the second half of its stay (fair
/// share 1/3), Jain's index of the three then, and how long after C's last
/// byte A + B take to reach 90 % of line goodput again (sustained for five
/// bins). Jain in the table is over A, B, C in that window.
pub fn churn(o: &Opts) -> Report {
    let d = o.duration_us;
    let (join, leave) = (d / 4, d * 5 / 8);
    let mut fab = Fabric::new(o.fabric.clone(), 4, 3);
    let specs = [
        ("A h0->h3", 0, 0, None),
        ("B h1->h3", 1, 0, None),
        ("C h2->h3", 2, join, Some(leave)),
    ];
    for (label, src, start_us, stop_us) in specs {
        let spec = FlowSpec {
            label: label.into(),
            src,
            dst: 3,
            msg_bytes: o.msg_bytes,
            window: o.window,
            start_ns: start_us * 1000,
            stop_ns: stop_us.map(|s: u64| s * 1000),
        };
        if let Err(e) = fab.add_flow(spec) {
            panic!("churn set-up: {e}");
        }
    }
    fab.start_sampling();
    let end = d * PS_PER_US;
    fab.run_until(end);
    // Window: second half of C's stay.
    let (w0, w1) = ((join + (leave - join) / 2) * PS_PER_US, leave * PS_PER_US);
    let rates: Vec<f64> = (0..3).map(|f| flow_gbps(&fab, f, w0, w1)).collect();
    let c_last = fab.flows[2].last_rx_ps;
    let bin = fab.cfg.bin_ns * PS_PER_NS;
    let line_goodput = line_goodput_gbps(&fab.cfg, o.msg_bytes);
    let recover = recovery_time(&fab, &[0, 1], c_last, end, bin, 0.9 * line_goodput, 5);
    let drained = fab.drain(100_000 * PS_PER_US);
    let bad = fab.verify();
    let mut report = summarise(
        &fab,
        "flow churn: A, B from 0, C joins and leaves".into(),
        o.mode,
        w0,
        w1,
        &rates,
        &[],
        drained,
        bad,
    );
    let total: f64 = rates.iter().sum();
    let share = if total > 0.0 { rates[2] / total } else { 0.0 };
    report
        .notes
        .push(("C joins / leaves [us]".into(), format!("{join} / {leave}")));
    report.add_figure(
        "C share of goodput (fair 1/3)",
        share,
        format!("{share:.3}"),
    );
    let last_us = c_last as f64 / 1e6;
    report.add_figure("C last byte [us]", last_us, format!("{last_us:.1}"));
    let name = "A+B back to 90% of line goodput after [us]";
    match recover {
        Some(t) => {
            let us = t as f64 / 1e6;
            report.add_figure(name, us, format!("{us:.1}"));
        }
        None => report
            .notes
            .push((name.into(), "not within the run".into())),
    }
    report.add_figure(
        "line goodput [Gb/s]",
        line_goodput,
        format!("{line_goodput:.2}"),
    );
    report
}

/// Payload goodput of a saturated link carrying `msg_bytes` WRITEs at the
/// fabric's MTU, Gbit/s: link rate × payload / wire bytes per packet.
pub fn line_goodput_gbps(cfg: &FabricConfig, msg_bytes: u32) -> f64 {
    let pmtu = roce_stack::verbs::Mtu::for_netdev(cfg.netdev_mtu)
        .map_or(1024, |m| m.bytes() as u64)
        .min(u64::from(msg_bytes.max(1)));
    // Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 (+ RETH on the first
    // packet of a message, ignored) + FCS, preamble, IFG.
    let wire = crate::net::wire_bytes((pmtu + 58) as usize);
    cfg.link_gbps * pmtu as f64 / wire as f64
}

/// Time from `from` until flows `which` together first reach `level` Gbit/s
/// in `sustain` consecutive bins (ps), or `None` before `end`.
pub fn recovery_time(
    fab: &Fabric,
    which: &[usize],
    from: Ps,
    end: Ps,
    bin: Ps,
    level: f64,
    sustain: usize,
) -> Option<Ps> {
    let first = from.div_ceil(bin) as usize;
    let last = (end / bin) as usize;
    let ok = |i: usize| {
        let bytes: f64 = which.iter().map(|&f| fab.flows[f].rx_bins.get(i)).sum();
        bytes * 8.0 / (bin as f64 / 1000.0) >= level
    };
    (first..last.saturating_sub(sustain.saturating_sub(1)))
        .find(|&i| (i..i + sustain).all(ok))
        .map(|i| (i as u64 * bin).saturating_sub(from))
}

/// A lossy fabric: incast n:1 with neither ECN nor PFC and a small buffer
/// (`buffer_bytes`), so the switch drops; RC retransmission must still
/// deliver every WRITE, and the receive buffers are checked.
pub fn lossy(n: usize, buffer_bytes: u64, o: &Opts) -> Report {
    let mut o = o.clone();
    o.fabric.switch_buffer_bytes = buffer_bytes;
    let mut r = incast(n, &o);
    r.title = format!("lossy incast {n}:1, {} KiB buffer", buffer_bytes / 1024);
    r
}

/// The PFC headroom and the buffer a lossless priority needs on `ports`
/// ingress ports at the fabric's settings (notes for reports).
pub fn lossless_buffer(cfg: &FabricConfig, ports: usize) -> Option<(u64, u64)> {
    let p = cfg.pfc.as_ref()?;
    let frame = cfg.netdev_mtu as u64 + 18;
    let h = pfc::headroom_bytes(cfg.link_gbps, frame, cfg.prop_delay_ns);
    Some((h, ports as u64 * (p.xoff_bytes + h)))
}
