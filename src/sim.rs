//! `roce sim`: run a scenario of the simulated fabric (crate `roce-sim`),
//! print its summary table and optionally plot its time series.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;
use roce_sim::net::RedEcn;
use roce_sim::pfc::PfcConfig;
use roce_sim::plot;
use roce_sim::scenario::{self, Mode, Opts, Report};

/// Long help of `roce sim`.
pub const LONG_ABOUT: &str = "\
Run a scenario on a simulated RoCEv2 fabric: hosts running this stack (RC QPs \
doing RDMA WRITEs, data verified at the end) behind 100 Gbit/s NICs, one \
output-queued switch with a shared buffer, RED/ECN marking, PFC and DCQCN. \
Discrete-event, virtual time, deterministic for a given --seed: the figures do \
not depend on the machine.

Scenarios:
  incast   N:1 incast (-n senders) under --mode
  pfc-hol  N:1 incast plus a victim flow from sender 0 to an idle host; \
reports the victim's goodput with and without PFC (default mode pfc)
  lossy    N:1 incast without ECN or PFC and a small buffer (--buffer, \
default 1 MB): drops, then RC retransmission delivers every byte
  churn    two flows, a third joins at 1/4 and leaves at 5/8 of the run: its \
share and the others' recovery time

Modes: dcqcn (ECN + DCQCN, PFC off), dcqcn+pfc (PFC as a backstop), pfc \
(lossless, no congestion control), none.

The table gives per-flow goodput over the measurement window (payload bytes \
received in order), the bottleneck's utilisation (wire bytes incl. FCS, \
preamble and IFG over capacity), Jain's fairness index, the bottleneck queue's \
p50/p99 (window) and max (run), drops, ECN marks, PFC frames, host pause time, \
CNPs, retransmission signals, and whether every WRITE completed with the \
expected data. --plot writes goodput per flow, DCQCN rates, the queue and the \
pause time as SVG or PNG.

Exit status: 0 ok; 1 a WRITE failed or data was wrong; 2 bad arguments or the \
plot could not be written.";

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
    /// pfc for pfc-hol, none for lossy].
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<Mode>,
    /// Traffic time, microseconds.
    #[arg(long, default_value_t = 5000)]
    pub duration_us: u64,
    /// Start of the measurement window, microseconds [default: half the
    /// duration].
    #[arg(long)]
    pub from_us: Option<u64>,
    /// RED Kmin, bytes.
    #[arg(long)]
    pub kmin: Option<u64>,
    /// RED Kmax, bytes.
    #[arg(long)]
    pub kmax: Option<u64>,
    /// RED Pmax (0..=1).
    #[arg(long)]
    pub pmax: Option<f64>,
    /// PFC XOFF threshold per ingress port, bytes.
    #[arg(long)]
    pub xoff: Option<u64>,
    /// Switch shared buffer, bytes [default: 8 MB; lossy: 1 MB].
    #[arg(long)]
    pub buffer: Option<u64>,
    /// Bytes per RDMA WRITE.
    #[arg(long, default_value_t = 65536)]
    pub msg: u32,
    /// WRITEs each flow keeps outstanding.
    #[arg(long, default_value_t = 16)]
    pub window: u32,
    /// Seed of the ECN marking generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Time-series bin, microseconds.
    #[arg(long, default_value_t = 10)]
    pub bin_us: u64,
    /// Write a plot of the time series (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Moving average of the goodput lines in the plot, bins.
    #[arg(long, default_value_t = 5)]
    pub smooth: usize,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("unknown mode {s:?} (dcqcn, dcqcn+pfc, pfc, none)"))
}

impl SimArgs {
    /// The scenario options the arguments describe.
    pub fn opts(&self) -> Result<Opts, String> {
        let mode = self.mode.unwrap_or(match self.scenario {
            Scenario::Incast | Scenario::Churn => Mode::Dcqcn,
            Scenario::PfcHol => Mode::Pfc,
            Scenario::Lossy => Mode::None,
        });
        let mut o = Opts::new(mode);
        if self.duration_us == 0 {
            return Err("--duration-us must be positive".into());
        }
        o.duration_us = self.duration_us;
        o.measure_from_us = self.from_us.unwrap_or(self.duration_us / 2);
        if o.measure_from_us >= o.duration_us {
            return Err("--from-us must be below --duration-us".into());
        }
        if self.msg == 0 || self.window == 0 || self.bin_us == 0 {
            return Err("--msg, --window and --bin-us must be positive".into());
        }
        o.msg_bytes = self.msg;
        o.window = self.window;
        o.fabric.seed = self.seed;
        o.fabric.bin_ns = self.bin_us * 1000;
        if let Some(b) = self.buffer {
            o.fabric.switch_buffer_bytes = b;
        }
        if let Some(red) = o.fabric.ecn.as_mut() {
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
        if let (Some(x), true) = (self.xoff, o.fabric.pfc.is_some()) {
            if x <= 2 * 4200 {
                return Err("--xoff must exceed two 4200-byte frames".into());
            }
            o.fabric.pfc = Some(PfcConfig::lossless_prio3(x));
        }
        if self.senders == 0 || self.senders > 250 {
            return Err("-n must be 1..=250".into());
        }
        Ok(o)
    }
}

/// Run the scenario and print its table.
pub fn run(args: &SimArgs) -> ExitCode {
    let o = match args.opts() {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(io::stderr(), "roce sim: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(p) = &args.plot {
        let ext = p
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if !matches!(ext.as_deref(), Some("svg" | "png")) {
            let _ = writeln!(
                io::stderr(),
                "roce sim: {}: plot file must end in .svg or .png",
                p.display()
            );
            return ExitCode::from(2);
        }
    }
    let report: Report = match args.scenario {
        Scenario::Incast => scenario::incast(args.senders, &o),
        Scenario::PfcHol => scenario::pfc_hol(args.senders, &o),
        Scenario::Lossy => scenario::lossy(args.senders, args.buffer.unwrap_or(1 << 20), &o),
        Scenario::Churn => scenario::churn(&o),
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
            let _ = writeln!(io::stderr(), "roce sim: {e}");
            return ExitCode::from(2);
        }
        let _ = writeln!(out, " plot written to {}", p.display());
    }
    if report.delivered_all() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
