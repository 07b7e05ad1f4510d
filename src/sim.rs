//! `roce sim`: run a scenario of the simulated fabric (crate `roce-sim`),
//! print its summary table and optionally plot it.

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant as WallClock;

use clap::ValueEnum;
use roce_sim::clos::{ClosOpts, DEFAULT_MEMORY_LIMIT, RATES_GBPS};
use roce_sim::collective::{self, CollectiveOpts, CollectiveReport, Kind, Placement};
use roce_sim::fabric::{flow_memory_bytes, FabricConfig, Progress, ProgressFn};
use roce_sim::fct::{self, FctOpts, FctReport, SizeDist};
use roce_sim::net::RedEcn;
use roce_sim::pfc::PfcConfig;
use roce_sim::plot;
use roce_sim::scenario::{self, Mode, Opts, Report};
use roce_sim::topo::{ClosSpec, LinkSpec};

/// Long help of `roce sim`.
pub const LONG_ABOUT: &str = "\
Run a scenario on a simulated RoCEv2 fabric: hosts running this stack (RC QPs \
doing RDMA WRITEs, every byte verified) behind NICs, output-queued switches \
with shared buffers, RED/ECN marking, PFC and DCQCN. Discrete-event, virtual \
time, deterministic for a given --seed: the figures do not depend on the \
machine.

Single-switch scenarios (100 Gbit/s):
  incast   N:1 incast (-n senders) under --mode
  pfc-hol  N:1 incast plus a victim flow from sender 0 to an idle host; \
reports the victim's goodput with and without PFC (default mode pfc)
  lossy    N:1 incast without ECN or PFC and a small buffer (--buffer, \
default 1 MB): drops, then RC retransmission delivers every byte
  churn    two flows, a third joins at 1/4 and leaves at 5/8 of the run: its \
share and the others' recovery time

Leaf-spine (two-tier Clos) scenarios, --leaves x --hosts-per-leaf hosts at \
--host-gbps, every leaf cabled to every one of --spines at --uplink-gbps, \
ECMP on the five-tuple (the RoCEv2 UDP source port is the entropy), PFC \
between switches as well as toward hosts (default mode dcqcn+pfc):
  allreduce  ring all-reduce of --size bytes per host: 2(N-1) steps, each \
rank writing a chunk to its ring neighbour, a step ending with its slowest \
transfer; --iterations with --compute-us between them model training
  alltoall   every host writes --size/N bytes to every other at once
  fct        open-loop background flows (Poisson arrivals at --load of the \
host links, --dist websearch or hadoop sizes): FCT slowdown per size bucket

Modes: dcqcn (ECN + DCQCN, PFC off), dcqcn+pfc (PFC as a backstop), pfc \
(lossless, no congestion control), none. --compare runs all four with the \
same seed and prints them side by side.

Single-switch tables give per-flow goodput over the measurement window, the \
bottleneck's utilisation, Jain's index, queue percentiles, drops, ECN marks, \
PFC frames, pause time, CNPs and retransmission signals. Leaf-spine tables \
give the completion time against the ideal (bytes over the bottleneck rate), \
per-step stragglers (slowest/median transfer), the share of an iteration \
spent on the network, utilisation, ECMP sharing and pause time per link \
class, queue p99 per tier, the PFC headroom check per switch, whether the \
routes have a cyclic buffer dependency (PFC deadlock), and the simulator's \
speed (wall time, packet-hops per second: every frame put on any link). \
Long runs print progress on a terminal. --plot writes SVG or PNG.

Inputs are bounded by the memory they imply (--memory-limit, default 4096 \
MiB) before anything is allocated.

Exit status: 0 ok; 1 a WRITE failed, data was wrong or a run stalled; 2 bad \
arguments, inputs over the limits, or the plot could not be written.";

/// Scenario names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// N:1 incast.
    Incast,
    /// Head-of-line blocking of a victim flow by PFC.
    PfcHol,
    /// Drops without ECN/PFC; retransmission delivers.
    Lossy,
    /// A flow joins and leaves a congested link.
    Churn,
    /// Ring all-reduce on a leaf-spine fabric.
    Allreduce,
    /// All-to-all on a leaf-spine fabric.
    Alltoall,
    /// Background flows on a leaf-spine fabric: FCT slowdown.
    Fct,
}

impl Scenario {
    fn leaf_spine(self) -> bool {
        matches!(
            self,
            Scenario::Allreduce | Scenario::Alltoall | Scenario::Fct
        )
    }
}

/// Arguments of `roce sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Scenario.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Senders of the incast.
    #[arg(short = 'n', long, default_value_t = 8)]
    pub senders: usize,
    /// dcqcn, dcqcn+pfc, pfc or none [default: dcqcn for incast and churn,
    /// pfc for pfc-hol, none for lossy, dcqcn+pfc for the leaf-spine ones].
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<Mode>,
    /// Run the leaf-spine scenario under every mode and compare.
    #[arg(long)]
    pub compare: bool,
    /// Traffic time, microseconds [default: 5000; fct: no limit, flows
    /// arrive until --flows have started].
    #[arg(long)]
    pub duration_us: Option<u64>,
    /// Start of the measurement window, microseconds [default: half the
    /// duration].
    #[arg(long)]
    pub from_us: Option<u64>,
    /// RED Kmin, bytes (for 100 Gbit/s; scaled by port rate).
    #[arg(long)]
    pub kmin: Option<u64>,
    /// RED Kmax, bytes (for 100 Gbit/s; scaled by port rate).
    #[arg(long)]
    pub kmax: Option<u64>,
    /// RED Pmax (0..=1).
    #[arg(long)]
    pub pmax: Option<f64>,
    /// PFC XOFF threshold per ingress port, bytes.
    #[arg(long)]
    pub xoff: Option<u64>,
    /// Shared buffer per switch, bytes [default: 8 MB; lossy: 1 MB;
    /// leaf-spine: 32 MiB].
    #[arg(long)]
    pub buffer: Option<u64>,
    /// Bytes per RDMA WRITE (at most 2^31).
    #[arg(long, default_value_t = 65536)]
    pub msg: u32,
    /// WRITEs each flow keeps outstanding (1..=16384).
    #[arg(long, default_value_t = 16)]
    pub window: u32,
    /// Seed (ECN marking, rank placement, background flows).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Time-series bin, microseconds.
    #[arg(long, default_value_t = 10)]
    pub bin_us: u64,
    /// Write a plot (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Moving average of the goodput lines in the plot, bins.
    #[arg(long, default_value_t = 5)]
    pub smooth: usize,
    /// Spine switches.
    #[arg(long, default_value_t = 8)]
    pub spines: usize,
    /// Leaf switches.
    #[arg(long, default_value_t = 8)]
    pub leaves: usize,
    /// Hosts per leaf.
    #[arg(long, default_value_t = 16)]
    pub hosts_per_leaf: usize,
    /// Host link rate, Gbit/s (100, 200, 400 or 800).
    #[arg(long, default_value_t = 400)]
    pub host_gbps: u64,
    /// Leaf-spine link rate, Gbit/s [default: the smallest of 100, 200, 400,
    /// 800 that makes the leaves non-blocking, else 800].
    #[arg(long)]
    pub uplink_gbps: Option<u64>,
    /// One-way delay of a host link (cable + switch pipeline), ns.
    #[arg(long, default_value_t = 1000)]
    pub host_delay_ns: u64,
    /// One-way delay of a leaf-spine link, ns.
    #[arg(long, default_value_t = 1000)]
    pub uplink_delay_ns: u64,
    /// Bytes per host (allreduce, alltoall): e.g. 1GiB, 64MiB, 4096.
    #[arg(long, value_parser = parse_size, default_value = "64MiB")]
    pub size: u64,
    /// Rank placement: contiguous (ring neighbours share a leaf) or random.
    #[arg(long, value_parser = parse_placement, default_value = "contiguous")]
    pub placement: Placement,
    /// QPs per rank pair (channels), each carrying its share of the bytes.
    #[arg(long, default_value_t = 1)]
    pub qps: u32,
    /// Training iterations (allreduce).
    #[arg(long, default_value_t = 1)]
    pub iterations: u32,
    /// Compute time before each iteration's all-reduce, microseconds.
    #[arg(long, default_value_t = 0)]
    pub compute_us: u64,
    /// Offered load of the host links (fct), 0 < load < 1.
    #[arg(long, default_value_t = 0.5)]
    pub load: f64,
    /// Flow sizes (fct): websearch or hadoop.
    #[arg(long, value_parser = parse_dist, default_value = "websearch")]
    pub dist: SizeDist,
    /// Background flows to start (fct).
    #[arg(long, default_value_t = 2000)]
    pub flows: u64,
    /// Refuse runs needing more memory than this, MiB.
    #[arg(long, default_value_t = DEFAULT_MEMORY_LIMIT >> 20)]
    pub memory_limit: u64,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("unknown mode {s:?} (dcqcn, dcqcn+pfc, pfc, none)"))
}

fn parse_placement(s: &str) -> Result<Placement, String> {
    Placement::parse(s).ok_or_else(|| format!("unknown placement {s:?} (contiguous, random)"))
}

fn parse_dist(s: &str) -> Result<SizeDist, String> {
    SizeDist::parse(s).ok_or_else(|| format!("unknown distribution {s:?} (websearch, hadoop)"))
}

/// A byte count with an optional unit: K/KiB, M/MiB, G/GiB (binary), KB,
/// MB, GB (decimal).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number of bytes such as 1GiB or 4096"))?;
    let mul: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        u => {
            return Err(format!(
                "{s:?}: unknown unit {u:?} (K, M, G, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    n.checked_mul(mul)
        .ok_or_else(|| format!("{s:?}: too large"))
}

/// Largest WRITE (IBTA: a message is at most 2^31 bytes).
const MAX_MSG: u32 = 1 << 31;
/// Most WRITEs outstanding per flow.
const MAX_WINDOW: u32 = 16_384;
/// Most bytes per host of a collective.
const MAX_SIZE: u64 = 64 << 30;
/// Most hosts of a leaf-spine fabric.
const MAX_HOSTS: usize = 4096;
/// Most background flows.
const MAX_FLOWS: u64 = 1_000_000;

impl SimArgs {
    fn memory_limit(&self) -> u64 {
        self.memory_limit.saturating_mul(1 << 20)
    }

    fn check_msg_window(&self) -> Result<(), String> {
        if self.msg == 0 || self.window == 0 || self.bin_us == 0 {
            return Err("--msg, --window and --bin-us must be positive".into());
        }
        if self.msg > MAX_MSG {
            return Err(format!(
                "--msg {}: at most 2^31 bytes (IBTA message limit)",
                self.msg
            ));
        }
        if self.window > MAX_WINDOW {
            return Err(format!("--window {}: at most {MAX_WINDOW}", self.window));
        }
        Ok(())
    }

    fn apply_red_pfc(&self, cfg: &mut FabricConfig) -> Result<(), String> {
        if let Some(b) = self.buffer {
            if b == 0 || b > 1 << 34 {
                return Err("--buffer must be 1..=16 GiB".into());
            }
            cfg.switch_buffer_bytes = b;
        }
        if let Some(red) = cfg.ecn.as_mut() {
            let base: RedEcn = *red;
            *red = RedEcn {
                kmin_bytes: self.kmin.unwrap_or(base.kmin_bytes),
                kmax_bytes: self.kmax.unwrap_or(base.kmax_bytes),
                pmax: self.pmax.unwrap_or(base.pmax),
            };
            if red.kmin_bytes >= red.kmax_bytes || !(0.0..=1.0).contains(&red.pmax) {
                return Err("need --kmin < --kmax and 0 <= --pmax <= 1".into());
            }
        }
        if let (Some(x), true) = (self.xoff, cfg.pfc.is_some()) {
            if x <= 2 * 4200 {
                return Err("--xoff must exceed two 4200-byte frames".into());
            }
            cfg.pfc = Some(PfcConfig::lossless_prio3(x));
        }
        cfg.seed = self.seed;
        cfg.bin_ns = self.bin_us * 1000;
        Ok(())
    }

    /// The single-switch scenario options the arguments describe.
    pub fn opts(&self) -> Result<Opts, String> {
        let mode = self.mode.unwrap_or(match self.scenario {
            Scenario::Incast | Scenario::Churn => Mode::Dcqcn,
            Scenario::PfcHol => Mode::Pfc,
            _ => Mode::None,
        });
        let mut o = Opts::new(mode);
        let duration = self.duration_us.unwrap_or(5000);
        if duration == 0 {
            return Err("--duration-us must be positive".into());
        }
        o.duration_us = duration;
        o.measure_from_us = self.from_us.unwrap_or(duration / 2);
        if o.measure_from_us >= o.duration_us {
            return Err("--from-us must be below --duration-us".into());
        }
        self.check_msg_window()?;
        o.msg_bytes = self.msg;
        o.window = self.window;
        self.apply_red_pfc(&mut o.fabric)?;
        if self.scenario == Scenario::Lossy && self.buffer.is_none() {
            o.fabric.switch_buffer_bytes = 1 << 20;
        }
        if self.senders == 0 || self.senders > 250 {
            return Err("-n must be 1..=250".into());
        }
        // Bound the memory the flows imply (issue: --window 100000 or
        // --msg 4294967295 used to abort allocating gigabytes).
        let (hosts, flows) = match self.scenario {
            Scenario::PfcHol => (self.senders + 2, self.senders as u64 + 1),
            Scenario::Churn => (4, 3),
            _ => (self.senders + 1, self.senders as u64),
        };
        let need = flows.saturating_mul(flow_memory_bytes(o.msg_bytes, o.window))
            + hosts as u64 * (o.fabric.cq_depth as u64 * 40 + (256 << 10))
            + o.fabric.switch_buffer_bytes * 2;
        if need > self.memory_limit() {
            return Err(format!(
                "{flows} flows of --window {} x --msg {} would need about {} MiB (limit {} MiB, --memory-limit)",
                o.window,
                o.msg_bytes,
                need >> 20,
                self.memory_limit() >> 20
            ));
        }
        Ok(o)
    }

    /// The leaf-spine fabric the arguments describe.
    pub fn clos_opts(&self, mode: Mode) -> Result<ClosOpts, String> {
        for (name, v, max) in [
            ("--spines", self.spines, 64),
            ("--leaves", self.leaves, 256),
            ("--hosts-per-leaf", self.hosts_per_leaf, 256),
        ] {
            if v == 0 || v > max {
                return Err(format!("{name} must be 1..={max}"));
            }
        }
        let hosts = self.leaves * self.hosts_per_leaf;
        if !(2..=MAX_HOSTS).contains(&hosts) {
            return Err(format!(
                "--leaves x --hosts-per-leaf = {hosts}: need 2..={MAX_HOSTS} hosts"
            ));
        }
        let rate = |name: &str, v: u64| {
            if RATES_GBPS.contains(&v) {
                Ok(v as f64)
            } else {
                Err(format!("{name} {v}: one of 100, 200, 400, 800"))
            }
        };
        let host = rate("--host-gbps", self.host_gbps)?;
        let need = self.host_gbps * self.hosts_per_leaf as u64;
        let auto = RATES_GBPS
            .into_iter()
            .find(|r| r * self.spines as u64 >= need)
            .unwrap_or(800);
        let up = rate("--uplink-gbps", self.uplink_gbps.unwrap_or(auto))?;
        for (name, d) in [
            ("--host-delay-ns", self.host_delay_ns),
            ("--uplink-delay-ns", self.uplink_delay_ns),
        ] {
            if d > 1_000_000 {
                return Err(format!("{name} must be at most 1 ms"));
            }
        }
        self.check_msg_window()?;
        let clos = ClosSpec {
            spines: self.spines,
            leaves: self.leaves,
            hosts_per_leaf: self.hosts_per_leaf,
            host: LinkSpec {
                gbps: host,
                delay_ns: self.host_delay_ns,
            },
            uplink: LinkSpec {
                gbps: up,
                delay_ns: self.uplink_delay_ns,
            },
        };
        let mut o = ClosOpts::new(mode, clos);
        o.msg_bytes = self.msg;
        o.window = self.window;
        self.apply_red_pfc(&mut o.fabric)?;
        Ok(o)
    }

    fn leaf_spine_mode(&self) -> Mode {
        self.mode.unwrap_or(Mode::DcqcnPfc)
    }

    fn modes(&self) -> Vec<Mode> {
        if self.compare {
            vec![Mode::None, Mode::Pfc, Mode::Dcqcn, Mode::DcqcnPfc]
        } else {
            vec![self.leaf_spine_mode()]
        }
    }

    fn collective_opts(&self, mode: Mode) -> Result<CollectiveOpts, String> {
        let f = self.clos_opts(mode)?;
        let hosts = f.clos.hosts() as u64;
        if self.size < hosts || self.size > MAX_SIZE {
            return Err(format!(
                "--size {}: need {hosts}..={MAX_SIZE} bytes per host (at least a byte per rank)",
                self.size
            ));
        }
        if self.qps == 0 || self.qps > 64 {
            return Err("--qps must be 1..=64".into());
        }
        if self.iterations == 0 || self.iterations > 10_000 {
            return Err("--iterations must be 1..=10000".into());
        }
        if self.compute_us > 10_000_000 {
            return Err("--compute-us must be at most 10 s".into());
        }
        let mut o = CollectiveOpts::new(f, self.size);
        o.placement = self.placement;
        o.qps_per_peer = self.qps;
        o.iterations = self.iterations;
        o.compute_us = self.compute_us;
        o.memory_limit = self.memory_limit();
        let kind = self.kind();
        // Each host's CQ must hold what its flows keep outstanding.
        let per_host = match kind {
            Kind::AllReduce => 1,
            Kind::AllToAll => hosts - 1,
        } * u64::from(self.qps)
            * u64::from(self.window);
        o.fabric.fabric.cq_depth = (per_host as usize).max(4096);
        let m = collective::memory(kind, &o);
        if m.total() > o.memory_limit {
            return Err(format!(
                "{} over {hosts} hosts with --qps {} --window {} --msg {} would need {m} (limit {} MiB, --memory-limit)",
                kind.name(),
                self.qps,
                self.window,
                self.msg,
                self.memory_limit
            ));
        }
        Ok(o)
    }

    fn kind(&self) -> Kind {
        if self.scenario == Scenario::Alltoall {
            Kind::AllToAll
        } else {
            Kind::AllReduce
        }
    }

    fn fct_opts(&self, mode: Mode) -> Result<FctOpts, String> {
        let f = self.clos_opts(mode)?;
        if !(self.load > 0.0 && self.load < 1.0) {
            return Err(format!("--load {}: need 0 < load < 1", self.load));
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return Err(format!("--flows must be 1..={MAX_FLOWS}"));
        }
        let mut o = FctOpts::new(f, self.dist, self.load, self.flows);
        o.memory_limit = self.memory_limit();
        if let Some(d) = self.duration_us {
            o.max_arrival_us = Some(d);
        }
        Ok(o)
    }
}

fn refuse(e: impl std::fmt::Display) -> ExitCode {
    let _ = writeln!(io::stderr(), "roce sim: {e}");
    ExitCode::from(2)
}

fn check_plot_path(p: &std::path::Path) -> Result<(), String> {
    let ext = p
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if matches!(ext.as_deref(), Some("svg" | "png")) {
        Ok(())
    } else {
        Err(format!(
            "{}: plot file must end in .svg or .png",
            p.display()
        ))
    }
}

/// Run the scenario and print its table.
pub fn run(args: &SimArgs) -> ExitCode {
    if let Some(p) = &args.plot {
        if let Err(e) = check_plot_path(p) {
            return refuse(e);
        }
    }
    if args.scenario.leaf_spine() {
        return run_leaf_spine(args);
    }
    if args.compare {
        return refuse("--compare is for allreduce, alltoall and fct");
    }
    let o = match args.opts() {
        Ok(o) => o,
        Err(e) => return refuse(e),
    };
    let report: Report = match args.scenario {
        Scenario::Incast => scenario::incast(args.senders, &o),
        Scenario::PfcHol => scenario::pfc_hol(args.senders, &o),
        Scenario::Lossy => {
            let b = o.fabric.switch_buffer_bytes;
            scenario::lossy(args.senders, b, &o)
        }
        _ => scenario::churn(&o),
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if report
        .write_table(&mut out)
        .and_then(|_| out.flush())
        .is_err()
    {
        return ExitCode::SUCCESS;
    }
    if let Some(p) = &args.plot {
        if let Err(e) = plot::write_plot(&report, p, args.smooth) {
            return refuse(e);
        }
        let _ = writeln!(out, " plot written to {}", p.display());
    }
    if report.delivered_all() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Progress on stderr while a run goes (terminal only): simulated time,
/// wall time, packet-hops and host packets per wall second.
fn progress_hook(label: String) -> Option<ProgressFn> {
    if !io::stderr().is_terminal() {
        return None;
    }
    let t0 = WallClock::now();
    let mut last = 0.0f64;
    Some(Box::new(move |p: &Progress| {
        let wall = t0.elapsed().as_secs_f64();
        if wall - last < 0.5 {
            return;
        }
        last = wall;
        let _ = write!(
            io::stderr(),
            "\r{label}: {:.3} ms simulated, {:.0} s wall, {:.2} M packet-hops/s, {:.2} M host packets/s   ",
            p.now_ps as f64 / 1e9,
            wall,
            p.packet_hops as f64 / wall / 1e6,
            p.host_frames as f64 / wall / 1e6
        );
    }))
}

fn clear_progress() {
    if io::stderr().is_terminal() {
        let _ = write!(io::stderr(), "\r{:100}\r", "");
    }
}

/// Peak resident set of this process, MiB (Linux `VmHWM`), if known.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn speed_line(out: &mut dyn Write, e: &Progress, wall: f64) -> io::Result<()> {
    writeln!(
        out,
        " wall time {:.1} s: {:.2} M packet-hops/s, {:.2} M host packets/s, {:.2} M events/s; peak RSS {}",
        wall,
        e.packet_hops as f64 / wall.max(1e-9) / 1e6,
        e.host_frames as f64 / wall.max(1e-9) / 1e6,
        e.events as f64 / wall.max(1e-9) / 1e6,
        peak_rss_mib().map_or("unknown".into(), |m| format!("{m:.0} MiB"))
    )
}

fn run_leaf_spine(args: &SimArgs) -> ExitCode {
    let modes = args.modes();
    match args.scenario {
        Scenario::Fct => {
            let mut opts = Vec::new();
            for &m in &modes {
                match args.fct_opts(m) {
                    Ok(o) => opts.push(o),
                    Err(e) => return refuse(e),
                }
            }
            let mut reports: Vec<FctReport> = Vec::new();
            let stdout = io::stdout();
            let mut out = stdout.lock();
            for o in &opts {
                let t0 = WallClock::now();
                let r = match fct::run(o, progress_hook(format!("fct [{}]", o.fabric.mode))) {
                    Ok(r) => r,
                    Err(e) => {
                        clear_progress();
                        return refuse(e);
                    }
                };
                clear_progress();
                let wall = t0.elapsed().as_secs_f64();
                if !args.compare {
                    let _ = r.write_table(&mut out);
                }
                let _ = speed_line(&mut out, &r.net.engine, wall);
                reports.push(r);
            }
            if args.compare {
                let _ = fct::write_compare(&reports, &mut out);
            }
            if let Some(p) = &args.plot {
                if let Err(e) = plot::write_fct_plot(&reports, p) {
                    return refuse(e);
                }
                let _ = writeln!(out, " plot written to {}", p.display());
            }
            let _ = out.flush();
            if reports.iter().all(|r| r.delivered) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        _ => {
            let mut opts = Vec::new();
            for &m in &modes {
                match args.collective_opts(m) {
                    Ok(o) => opts.push(o),
                    Err(e) => return refuse(e),
                }
            }
            let kind = args.kind();
            let mut reports: Vec<CollectiveReport> = Vec::new();
            let stdout = io::stdout();
            let mut out = stdout.lock();
            for o in &opts {
                let t0 = WallClock::now();
                let label = format!("{} [{}]", kind.name(), o.fabric.mode);
                let r = match collective::run(kind, o, progress_hook(label)) {
                    Ok(r) => r,
                    Err(e) => {
                        clear_progress();
                        return refuse(e);
                    }
                };
                clear_progress();
                let wall = t0.elapsed().as_secs_f64();
                if !args.compare {
                    let _ = r.write_table(&mut out);
                }
                let _ = speed_line(&mut out, &r.net.engine, wall);
                reports.push(r);
            }
            if args.compare {
                let _ = collective::write_compare(&reports, &mut out);
            }
            if let Some(p) = &args.plot {
                if let Err(e) = plot::write_collective_plot(&reports, p) {
                    return refuse(e);
                }
                let _ = writeln!(out, " plot written to {}", p.display());
            }
            let _ = out.flush();
            if reports.iter().all(|r| r.delivered) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert!(parse_size("1TiB").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }
}
