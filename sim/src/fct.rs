//! Background traffic on a leaf-spine fabric, as the DCQCN and HPCC
//! evaluations run it: open-loop flows between random host pairs, Poisson
//! arrivals at a rate that loads the host links to `load`, sizes from the
//! web-search (DCTCP paper) or Facebook Hadoop distribution, each flow a
//! new RC QP pair doing RDMA WRITEs. Reported as FCT slowdown: a flow's
//! completion time over its ideal on an empty fabric (size over the host
//! link's payload rate plus the path's base round trip), p50/p99/p99.9 per
//! size bucket (HPCC's `fct_analysis.py` metric).

use std::io::{self, Write};

use roce_stack::testing::Rng;

use crate::clos::{
    base_rtt_ps, payload_gbps, ClosOpts, Column, Memory, NetSummary, DEFAULT_MEMORY_LIMIT,
};
use crate::fabric::{ConnSpec, ProgressFn, Ps, SimError, PS_PER_US};

/// A flow-size distribution: (bytes, cumulative %) points, sizes between
/// points interpolated linearly (as the HPCC repository's `traffic_gen`
/// does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeDist {
    /// Web search (DCTCP paper; HPCC `WebSearch_distribution.txt`).
    WebSearch,
    /// Facebook Hadoop (Roy et al. 2015; HPCC `FbHdp_distribution.txt`).
    Hadoop,
}

/// Web search CDF points (bytes, %).
pub const WEB_SEARCH: &[(f64, f64)] = &[
    (0.0, 0.0),
    (10_000.0, 15.0),
    (20_000.0, 20.0),
    (30_000.0, 30.0),
    (50_000.0, 40.0),
    (80_000.0, 53.0),
    (200_000.0, 60.0),
    (1_000_000.0, 70.0),
    (2_000_000.0, 80.0),
    (5_000_000.0, 90.0),
    (10_000_000.0, 97.0),
    (30_000_000.0, 100.0),
];

/// Facebook Hadoop CDF points (bytes, %).
pub const HADOOP: &[(f64, f64)] = &[
    (0.0, 0.0),
    (100.0, 1.0),
    (200.0, 2.0),
    (300.0, 5.0),
    (350.0, 15.0),
    (400.0, 20.0),
    (500.0, 30.0),
    (600.0, 40.0),
    (700.0, 50.0),
    (1_000.0, 60.0),
    (2_000.0, 67.0),
    (7_000.0, 70.0),
    (30_000.0, 72.0),
    (50_000.0, 82.0),
    (80_000.0, 87.0),
    (120_000.0, 90.0),
    (300_000.0, 95.0),
    (1_000_000.0, 97.5),
    (2_000_000.0, 99.0),
    (10_000_000.0, 100.0),
];

impl SizeDist {
    /// Name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SizeDist::WebSearch => "websearch",
            SizeDist::Hadoop => "hadoop",
        }
    }

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Option<SizeDist> {
        [SizeDist::WebSearch, SizeDist::Hadoop]
            .into_iter()
            .find(|d| d.name() == s)
    }

    /// The CDF points.
    pub fn points(self) -> &'static [(f64, f64)] {
        match self {
            SizeDist::WebSearch => WEB_SEARCH,
            SizeDist::Hadoop => HADOOP,
        }
    }

    /// The size at cumulative percentage `u` (0..100), interpolated.
    pub fn quantile(self, u: f64) -> f64 {
        let pts = self.points();
        for w in pts.windows(2) {
            let ((s0, c0), (s1, c1)) = (w[0], w[1]);
            if u <= c1 {
                if c1 <= c0 {
                    return s1;
                }
                return s0 + (s1 - s0) * (u - c0) / (c1 - c0);
            }
        }
        pts.last().map_or(0.0, |p| p.0)
    }

    /// A size drawn from the distribution, bytes (at least 1).
    pub fn sample(self, rng: &mut Rng) -> u64 {
        (self.quantile(rng.unit() * 100.0).round() as u64).max(1)
    }

    /// The mean size, bytes (each segment's midpoint times its mass).
    pub fn mean(self) -> f64 {
        self.points()
            .windows(2)
            .map(|w| (w[0].0 + w[1].0) / 2.0 * (w[1].1 - w[0].1) / 100.0)
            .sum()
    }
}

/// A background-traffic run.
#[derive(Debug, Clone, PartialEq)]
pub struct FctOpts {
    /// Fabric, mode, WRITE size and window.
    pub fabric: ClosOpts,
    /// Flow sizes.
    pub dist: SizeDist,
    /// Offered load of each host link (0..1).
    pub load: f64,
    /// Flows to start.
    pub flows: u64,
    /// Stop starting flows after this, µs (`None`: when `flows` started).
    pub max_arrival_us: Option<u64>,
    /// Abort when live flows need more memory than this, bytes.
    pub memory_limit: u64,
}

impl FctOpts {
    /// `flows` flows of `dist` at `load` on `fabric`.
    pub fn new(mut fabric: ClosOpts, dist: SizeDist, load: f64, flows: u64) -> FctOpts {
        fabric.fabric.cq_depth = fabric.fabric.cq_depth.max(16_384);
        FctOpts {
            fabric,
            dist,
            load,
            flows,
            max_arrival_us: None,
            memory_limit: DEFAULT_MEMORY_LIMIT,
        }
    }
}

/// How long flows may run after the last arrival, ps (1 s).
pub const DRAIN_LIMIT_PS: Ps = 1_000_000_000_000;

/// Upper edges of the size buckets, bytes (the last is open).
pub const BUCKETS: [u64; 4] = [10_000, 100_000, 1_000_000, 10_000_000];

/// Name of bucket `i`.
pub fn bucket_name(i: usize) -> String {
    let f = |b: u64| match b {
        b if b >= 1_000_000 => format!("{}M", b / 1_000_000),
        b => format!("{}K", b / 1000),
    };
    match i {
        0 => format!("<{}", f(BUCKETS[0])),
        i if i < BUCKETS.len() => format!("{}-{}", f(BUCKETS[i - 1]), f(BUCKETS[i])),
        _ => format!(">{}", f(BUCKETS[BUCKETS.len() - 1])),
    }
}

fn bucket(size: u64) -> usize {
    BUCKETS
        .iter()
        .position(|&b| size < b)
        .unwrap_or(BUCKETS.len())
}

/// One finished flow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowRecord {
    /// Bytes.
    pub size: u64,
    /// Arrival, ps.
    pub start_ps: Ps,
    /// Completion time, ps.
    pub fct_ps: Ps,
    /// Ideal on an empty fabric, ps.
    pub ideal_ps: Ps,
}

impl FlowRecord {
    /// FCT over ideal, at least 1 (as HPCC's analysis clamps it).
    pub fn slowdown(&self) -> f64 {
        (self.fct_ps as f64 / self.ideal_ps.max(1) as f64).max(1.0)
    }
}

/// Slowdown percentiles of one bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketRow {
    /// Name.
    pub name: String,
    /// Flows.
    pub flows: usize,
    /// p50, p99, p99.9 of the slowdown.
    pub p: [f64; 3],
}

/// The outcome of a background-traffic run.
#[derive(Debug, Clone, PartialEq)]
pub struct FctReport {
    /// Mode.
    pub mode: crate::scenario::Mode,
    /// Fabric shape.
    pub clos: crate::topo::ClosSpec,
    /// Sizes.
    pub dist: SizeDist,
    /// Offered load.
    pub load: f64,
    /// Finished flows.
    pub records: Vec<FlowRecord>,
    /// Flows started.
    pub started: u64,
    /// Per bucket, then all flows.
    pub buckets: Vec<BucketRow>,
    /// Every flow finished and every WRITE's bytes were right.
    pub delivered: bool,
    /// Flows with a failed WRITE or wrong bytes.
    pub bad_flows: usize,
    /// Most flows live at once.
    pub peak_live: usize,
    /// Memory the inputs implied (peak of live flows).
    pub memory: Memory,
    /// The network's figures.
    pub net: NetSummary,
}

fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let r = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[r.clamp(1, sorted.len()) - 1]
}

fn bucket_rows(records: &[FlowRecord]) -> Vec<BucketRow> {
    let mut rows = Vec::new();
    for i in 0..=BUCKETS.len() + 1 {
        let mut v: Vec<f64> = records
            .iter()
            .filter(|r| i > BUCKETS.len() || bucket(r.size) == i)
            .map(|r| r.slowdown())
            .collect();
        v.sort_by(f64::total_cmp);
        let name = if i > BUCKETS.len() {
            "all".to_string()
        } else {
            bucket_name(i)
        };
        rows.push(BucketRow {
            name,
            flows: v.len(),
            p: [50.0, 99.0, 99.9].map(|p| nearest_rank(&v, p)),
        });
    }
    rows
}

/// Run background traffic `o`; `progress` is called every 2^16 events.
pub fn run(o: &FctOpts, progress: Option<ProgressFn>) -> Result<FctReport, SimError> {
    let c = o.fabric.clos;
    let n = c.hosts();
    if n < 2 {
        return Err(SimError::NoSuchHost(n));
    }
    let mut fab = o.fabric.build()?;
    if let Some(p) = progress {
        fab.set_progress(1 << 16, p);
    }
    let cfg = fab.cfg.clone();
    let mut rng = Rng::new(o.fabric.fabric.seed ^ 0x6663_7421);
    // Arrivals over all hosts: load x host rate / mean size per host.
    let mean = o.dist.mean();
    let per_host = o.load * c.host.gbps * 1e9 / 8.0 / mean; // flows/s
    let rate = per_host * n as f64; // flows/s, whole fabric
    let mean_gap_ps = 1e12 / rate;
    let host_g = payload_gbps(&cfg, c.host.gbps);
    let rtt_local = base_rtt_ps(&cfg, c.host, c.uplink, 2);
    let rtt_cross = base_rtt_ps(&cfg, c.host, c.uplink, 4);
    let hpl = c.hosts_per_leaf.max(1);
    let limit_ps = o.max_arrival_us.map(|u| u * PS_PER_US);
    let mut next = 0f64;
    let mut started = 0u64;
    let mut live: Vec<Option<(u64, Ps)>> = Vec::new(); // per flow: size, ideal
    let mut live_n = 0usize;
    let mut peak_live = 0usize;
    let mut peak_mem = 0u64;
    let mut records = Vec::new();
    let mut all_flows = Vec::new();
    let mut bad_flows = 0usize;
    let mut last_arrival: Ps = 0;
    loop {
        let arrival = (started < o.flows)
            .then_some(next.round() as Ps)
            .filter(|&t| limit_ps.map_or(true, |l| t <= l));
        // After the last arrival, flows get a simulated second to finish
        // (a PFC deadlock keeps refreshing its pauses forever).
        let until = arrival.unwrap_or(last_arrival.saturating_add(DRAIN_LIMIT_PS));
        match fab.run_until_done(until) {
            Some(d) => {
                let Some((size, ideal)) = live.get_mut(d.flow).and_then(Option::take) else {
                    continue;
                };
                live_n -= 1;
                let f = &fab.flows[d.flow];
                if d.failed || f.bad_msgs > 0 || f.errors > 0 {
                    bad_flows += 1;
                }
                records.push(FlowRecord {
                    size,
                    start_ps: d.start_ps,
                    fct_ps: d.end_ps - d.start_ps,
                    ideal_ps: ideal,
                });
                fab.close_flow(d.flow);
            }
            None => {
                let Some(t) = arrival else {
                    break;
                };
                fab.run_until(t);
                last_arrival = t;
                let src = rng.below(n as u64) as usize;
                let mut dst = rng.below(n as u64 - 1) as usize;
                if dst >= src {
                    dst += 1;
                }
                let size = o.dist.sample(&mut rng);
                let msg = u64::from(o.fabric.msg_bytes).min(size) as u32;
                let f = fab.add_connection(ConnSpec {
                    label: format!("f{started}"),
                    src,
                    dst,
                    msg_bytes: msg,
                    window: o.fabric.window,
                })?;
                let rtt = if src / hpl == dst / hpl {
                    rtt_local
                } else {
                    rtt_cross
                };
                let ideal = (size as f64 * 8.0 / host_g * 1000.0).round() as Ps + rtt;
                if live.len() <= f {
                    live.resize(f + 1, None);
                }
                live[f] = Some((size, ideal));
                all_flows.push(f);
                live_n += 1;
                peak_live = peak_live.max(live_n);
                peak_mem = peak_mem.max(fab.flow_memory);
                if fab.flow_memory > o.memory_limit {
                    return Err(SimError::Memory {
                        need: fab.flow_memory,
                        limit: o.memory_limit,
                    });
                }
                fab.start_transfer(f, size, started);
                started += 1;
                // Exponential inter-arrival time.
                let u = rng.unit();
                next += -mean_gap_ps * (1.0 - u).ln();
            }
        }
    }
    let stalled = live_n > 0;
    let deadlock = if stalled { fab.pause_deadlock() } else { None };
    records.sort_by_key(|r| r.start_ps);
    let memory = Memory {
        flows: peak_mem,
        devices: n as u64 * (cfg.cq_depth as u64 * 40),
        frames: fab.frame_buffer_bytes(),
    };
    Ok(FctReport {
        mode: o.fabric.mode,
        clos: c,
        dist: o.dist,
        load: o.load,
        buckets: bucket_rows(&records),
        delivered: !stalled && bad_flows == 0 && records.len() as u64 == started,
        records,
        started,
        bad_flows,
        peak_live,
        memory,
        net: NetSummary::of(&fab, &c, &[], deadlock),
    })
}

impl FctReport {
    /// Print the report.
    pub fn write_table(&self, out: &mut dyn Write) -> io::Result<()> {
        let c = &self.clos;
        writeln!(
            out,
            "background flows ({}, load {:.2}) over {} hosts [mode {}]",
            self.dist.name(),
            self.load,
            c.hosts(),
            self.mode
        )?;
        writeln!(
            out,
            " fabric: {} leaves x {} hosts at {} Gbit/s, {} spines, uplinks {} Gbit/s (oversubscription {:.2}:1); {} flows finished of {} started, at most {} at once",
            c.leaves,
            c.hosts_per_leaf,
            c.host.gbps,
            c.spines,
            c.uplink.gbps,
            c.oversubscription(),
            self.records.len(),
            self.started,
            self.peak_live
        )?;
        writeln!(
            out,
            " {:<12} {:>8} {:>10} {:>10} {:>10}",
            "size [B]", "flows", "p50", "p99", "p99.9"
        )?;
        for b in &self.buckets {
            writeln!(
                out,
                " {:<12} {:>8} {:>10.2} {:>10.2} {:>10.2}",
                b.name, b.flows, b.p[0], b.p[1], b.p[2]
            )?;
        }
        let mut rows = vec![(
            "FCT slowdown".to_string(),
            "FCT / (size over the host link's payload rate + base RTT)".to_string(),
        )];
        rows.extend(self.net.rows(&self.memory));
        rows.push((
            "all flows completed, data verified".into(),
            if self.delivered {
                "yes".into()
            } else {
                format!("NO ({} bad flows)", self.bad_flows)
            },
        ));
        for (k, v) in rows {
            writeln!(out, " {k:<40} {v}")?;
        }
        Ok(())
    }

    /// The slowdown percentile `p` of bucket `name` ("all" for every flow).
    pub fn slowdown(&self, name: &str, p: usize) -> Option<f64> {
        self.buckets.iter().find(|b| b.name == name).map(|b| b.p[p])
    }
}

/// Print `reports` (the same flows under several modes) side by side: p50
/// and p99 slowdown per bucket, then the network figures.
pub fn write_compare(reports: &[FctReport], out: &mut dyn Write) -> io::Result<()> {
    let Some(first) = reports.first() else {
        return Ok(());
    };
    let c = &first.clos;
    writeln!(
        out,
        "FCT slowdown p50/p99 ({}, load {:.2}, {} hosts: {} leaves x {}, {} spines, {}/{} Gbit/s), by mode",
        first.dist.name(),
        first.load,
        c.hosts(),
        c.leaves,
        c.hosts_per_leaf,
        c.spines,
        c.host.gbps,
        c.uplink.gbps
    )?;
    write!(out, " {:<24}", "size [B] (flows)")?;
    for r in reports {
        write!(out, " {:>16}", r.mode.name())?;
    }
    writeln!(out)?;
    for (i, b) in first.buckets.iter().enumerate() {
        write!(out, " {:<24}", format!("{} ({})", b.name, b.flows))?;
        for r in reports {
            let x = &r.buckets[i];
            write!(out, " {:>16}", format!("{:.2}/{:.2}", x.p[0], x.p[1]))?;
        }
        writeln!(out)?;
    }
    let lines: Vec<(&str, Column<FctReport>)> = vec![
        ("drops", Box::new(|r| r.net.drops.to_string())),
        ("CNPs handled", Box::new(|r| r.net.cnps.1.to_string())),
        ("PFC XOFF", Box::new(|r| r.net.pfc_frames.0.to_string())),
        (
            "paused hosts/switches [us]",
            Box::new(|r| format!("{:.0}/{:.0}", r.net.host_paused_us, r.net.switch_paused_us)),
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
    for (name, f) in &lines {
        write!(out, " {name:<24}")?;
        for r in reports {
            write!(out, " {:>16}", f(r))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_the_published_points() {
        let d = SizeDist::WebSearch;
        assert_eq!(d.quantile(0.0), 0.0);
        assert_eq!(d.quantile(15.0), 10_000.0);
        // Halfway between (10000, 15) and (20000, 20).
        assert_eq!(d.quantile(17.5), 15_000.0);
        assert_eq!(d.quantile(100.0), 30_000_000.0);
        assert_eq!(SizeDist::Hadoop.quantile(50.0), 700.0);
        // The mean by hand: each segment's midpoint times its mass.
        let ws: f64 = [
            (5_000.0, 15.0),
            (15_000.0, 5.0),
            (25_000.0, 10.0),
            (40_000.0, 10.0),
            (65_000.0, 13.0),
            (140_000.0, 7.0),
            (600_000.0, 10.0),
            (1_500_000.0, 10.0),
            (3_500_000.0, 10.0),
            (7_500_000.0, 7.0),
            (20_000_000.0, 3.0),
        ]
        .iter()
        .map(|(m, w)| m * w / 100.0)
        .sum();
        assert!((d.mean() - ws).abs() < 1e-6);
        assert!((ws - 1_711_250.0).abs() < 1e-6, "{ws}");
    }

    #[test]
    fn buckets_are_named_and_found() {
        assert_eq!(bucket_name(0), "<10K");
        assert_eq!(bucket_name(2), "100K-1M");
        assert_eq!(bucket_name(4), ">10M");
        assert_eq!(bucket(9_999), 0);
        assert_eq!(bucket(10_000), 1);
        assert_eq!(bucket(30_000_000), 4);
    }
}
