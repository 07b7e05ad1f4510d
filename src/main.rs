//! The `roce` command-line tool. Argument parsing only; the work is done in the
//! library (`roce::decode`, `roce::perf`).

use std::io::{self, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use roce::decode::{self, DecodeError, DecodeOptions};
use roce::perf::{self, PerfConfig, PerfError, PerfOptions};
use roce::replay::{self, ReplayOptions};
use roce_io::BackendKind;
use roce_stack::verbs::Mtu;

mod sim;

/// Exit status for usage, I/O and capture-format errors.
const EXIT_ERROR: u8 = 2;

/// User-space RoCEv2 protocol stack tools.
#[derive(Debug, Parser)]
#[command(name = "roce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Decode a pcap/pcapng capture: one line per frame, JSON Lines, or counts.
    #[command(long_about = DECODE_LONG_ABOUT)]
    Decode(DecodeArgs),
    /// Measure RC WRITE/READ/SEND/ATOMIC bandwidth or latency (like perftest's
    /// ib_*_bw / ib_*_lat), in one process or as --server / --client.
    #[command(long_about = PERF_LONG_ABOUT)]
    Perf(PerfArgs),
    /// Simulate a RoCEv2 fabric (incast, PFC, DCQCN) with this stack on every
    /// host and print a summary (deterministic, virtual time).
    #[command(long_about = sim::LONG_ABOUT)]
    Sim(sim::SimArgs),
    /// Play one QP of a capture with the stack and write what it sends.
    #[command(long_about = REPLAY_LONG_ABOUT)]
    Replay(ReplayArgs),
}

const REPLAY_LONG_ABOUT: &str = "\
Play one QP of a capture with the stack: the QP named by --qp (its QPN, the BTH \
destination QPN of the packets sent to it) is set up as its host had it, every \
captured frame addressed to it is fed to the stack in capture order (capture \
times as the clock), and what the stack sends is written to --out (pcap, \
nanosecond timestamps: the time of the frame answered). The QP answers the \
requests sent to it (responder) and re-sends the requests it sent (requester; \
not with --no-requests), completing them with the captured responses.

Inferred from the capture (overrides in brackets): our and the peer's IP and \
MAC from the first frame to the QP [--ip --mac --peer-ip --peer-mac], the \
transport from its opcodes, the peer QPN from the frames our host sent back \
[--peer-qpn], the first request PSN [--rq-psn] and first send PSN [--sq-psn], \
the path MTU from segmented messages [--mtu], memory regions under the captured \
R_Keys covering every RETH/AtomicETH VA range, preloaded with the captured READ \
data and atomic original values [--mr RKEY:VA:LEN], receive WQEs for SENDs.

The capture is the oracle: our READ responses and atomic ACKs must equal the \
captured ones in order (opcode, PSN, AETH syndrome class and MSN, payload, \
original value), every captured ACK/NAK must have one of ours with its PSN \
(extra ACKs are counted: NICs coalesce), our requests must equal the captured \
ones, every message delivered to a receive WQE must complete one of ours. \
QP1 (the GSI: RDMA CM's MADs) is not replayable. The capture is streamed \
(magic number first, devices refused, records of at most 262144 bytes, at most \
1 GiB of frames kept).

Exit status: 0 all matched; 1 a mismatch, or nothing compared (no frame fed, or \
nothing of the QP in the capture to compare with); 2 usage, I/O or set-up \
errors.";

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The capture (pcap or pcapng, Ethernet).
    capture: PathBuf,
    /// The QP to play, by QPN (0x11 or 17) [default: the only QP that
    /// receives requests].
    #[arg(long, value_parser = replay::parse_24)]
    qp: Option<u32>,
    /// Write what the stack sends to this pcap file.
    #[arg(short = 'o', long, value_name = "OUT")]
    out: Option<PathBuf>,
    /// Our IP address (picks the host when both have the QPN).
    #[arg(long)]
    ip: Option<std::net::IpAddr>,
    /// Our MAC address.
    #[arg(long, value_parser = replay::parse_mac)]
    mac: Option<[u8; 6]>,
    /// The peer's IP address.
    #[arg(long)]
    peer_ip: Option<std::net::IpAddr>,
    /// The peer's MAC address.
    #[arg(long, value_parser = replay::parse_mac)]
    peer_mac: Option<[u8; 6]>,
    /// The peer's QPN.
    #[arg(long, value_parser = replay::parse_24)]
    peer_qpn: Option<u32>,
    /// The PSN of the first request expected.
    #[arg(long, value_parser = replay::parse_24)]
    rq_psn: Option<u32>,
    /// The first PSN the QP sends.
    #[arg(long, value_parser = replay::parse_24)]
    sq_psn: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, value_parser = perf::parse_mtu)]
    mtu: Option<Mtu>,
    /// An extra (or wider) memory region RKEY:VA:LEN; repeatable.
    #[arg(long = "mr", value_parser = replay::parse_mr)]
    mrs: Vec<replay::MrSpec>,
    /// Only answer; do not re-send the QP's own requests.
    #[arg(long)]
    no_requests: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

fn run_replay(args: &ReplayArgs) -> ExitCode {
    let opts = ReplayOptions {
        capture: args.capture.clone(),
        qp: args.qp,
        out: args.out.clone(),
        ip: args.ip,
        mac: args.mac,
        peer_ip: args.peer_ip,
        peer_mac: args.peer_mac,
        peer_qpn: args.peer_qpn,
        rq_psn: args.rq_psn,
        sq_psn: args.sq_psn,
        mtu: args.mtu,
        mrs: args.mrs.clone(),
        no_requests: args.no_requests,
    };
    match replay::replay(&opts) {
        Ok(r) => {
            let stdout = io::stdout();
            let mut out = stdout.lock();
            let w = if args.json {
                writeln!(out, "{}", r.to_json())
            } else {
                r.write_text(&opts, &mut out)
            };
            let _ = w.and_then(|_| out.flush());
            if r.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            let _ = writeln!(io::stderr(), "roce replay: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

const PERF_LONG_ABOUT: &str = "\
Measure bandwidth (default) or latency (--lat) of RC RDMA WRITE, RDMA READ, SEND \
or ATOMIC FETCH_AND_ADD, like perftest's ib_write_bw, ib_read_bw, ib_send_bw, \
ib_atomic_bw and their _lat twins. By default both ends run in this process: two RoCEv2 \
devices (10.0.0.1 client, 10.0.0.2 server) on an in-memory Ethernet, one thread \
per side, each driving its device with a monotonic clock.

BW: -n iterations per QP (perftest's convention), tx-depth work requests \
outstanding per QP; BW average = all bytes over first post to last completion, \
in Gbit/s; BW peak = perftest's best run of consecutive operations (with -D: \
the best one-second window); MsgRate in millions of messages per second.
Latency: post to completion with one operation outstanding, in microseconds \
(a full round trip; perftest's ib_write_lat/ib_send_lat report half a ping-pong \
round trip instead).

The data is verified at the end: WRITE/READ compare the target memory with the \
source pattern, SEND checks every message's length, sequence number and bytes, \
ATOMIC checks every fetched value and the final counter. Retransmission \
counters are printed when not zero.

--backend picks what carries the frames: mem (default), or udp (kernel UDP \
sockets on 127.0.0.1 and 127.0.0.2). Between two processes or hosts, like \
perftest: `roce perf OP --server` and `roce perf OP --client ADDR` (TCP side \
channel on --port, default 18515) over --backend udp, tap or dpdk (EAL \
arguments after `--`); the server takes the test parameters from the client, \
both print the table, the client measures. --loss and --pcap work on every \
backend, each side dropping and recording its own frames.

Exit status: 0 verified; 1 the run failed (error completion, QP error, no \
progress for 5 s) or the data is wrong; 2 bad arguments or an unusable --pcap \
path.";

const DECODE_LONG_ABOUT: &str = "\
Decode a pcap or pcapng capture (detected by magic number; link type Ethernet \
only): one line per frame, in the spirit of `tshark -T fields`. Without FILE, an \
embedded sample capture (pcap-fixtures/pcaps/rc_mix.pcap) is decoded. FILE is \
streamed, never read whole: a regular file or a pipe (devices and directories \
are refused), checked by its magic number before anything else is read, each \
record at most 262144 bytes (Wireshark's limit). A capture without frames \
prints the header line and `(no frames)`.

Text columns (a header line comes first):
  FRAME        frame number, 1-based (as in Wireshark)
  SOURCE       RoCEv2: source IP:UDP port ([IPv6]:port); RoCEv1: source GID;
               other frames: source MAC
  DESTINATION  likewise for the destination
  OPCODE       BTH opcode name (RC_SEND_ONLY, ...; `v1:` prefix for RoCEv1;
               RESERVED(0xNN) for unassigned opcodes); for other frames the kind:
               PFC, PAUSE, ARP, BAD_ROCE, BAD_MAC_CTRL, other
  DQPN         destination QPN (hex, 24 bits)
  PSN          packet sequence number (decimal)
  A            BTH AckReq bit
  PAYLOAD      payload length in bytes, without pad bytes (from the length fields)
  ICRC         ok | bad | truncated (the capture ends before the ICRC)
  DETAILS      extension headers, separated by ` | `: RETH va/rkey/len, AETH
               syndrome and MSN, DETH qkey/srcqp, ImmDt, AtomicETH, AtomicAckETH,
               IETH, RDETH, XRCETH, FETH; then flags: SE, M (MigReq), pad=N, FECN,
               BECN, ecn=CE, pkey (if not 0xffff), VLAN; ip_checksum=WIRE
               expected=RIGHT for a wrong IPv4 header checksum (the frame is
               still decoded, as tshark does); for a bad ICRC the wire and the
               computed value (wire byte order)
Other frames print their details right after the kind: PFC class-enable vector \
and the pause timer (quanta) of each enabled priority; PAUSE quanta; ARP who-has/\
is-at; BAD_ROCE drop reason; other: EtherType.

--json prints one JSON object per line (keys: frame, kind, src_mac, dst_mac, vlan, \
then per kind; documented in the roce::decode module). --stats prints counts per kind, per opcode \
and per ICRC status instead of frames; with --json as one JSON object.

Exit status: 0 on success (also when the output pipe is closed early), 2 for \
usage errors, unreadable files and damaged or unsupported captures.";

#[derive(Debug, clap::Args)]
struct DecodeArgs {
    /// Capture file (pcap or pcapng). Default: the embedded sample capture.
    file: Option<PathBuf>,
    /// Print counts per frame kind, opcode and ICRC status instead of frames.
    #[arg(long)]
    stats: bool,
    /// JSON output: one object per frame (JSON Lines), or one object with --stats.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct PerfArgs {
    /// Operation: write, read, send or atomic.
    #[arg(value_parser = perf::parse_op)]
    op: perf::Op,
    /// Latency test (one operation outstanding) instead of bandwidth.
    #[arg(long)]
    lat: bool,
    /// Message size in bytes, suffixes K, M, G allowed [default: 65536 for BW,
    /// 2 for --lat; atomics are always 8].
    #[arg(short = 's', long, value_parser = perf::parse_size)]
    size: Option<u64>,
    /// Iterations per QP [default: 5000 for BW, 1000 for --lat].
    #[arg(short = 'n', long, conflicts_with = "duration")]
    iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long, value_parser = perf::parse_seconds)]
    duration: Option<Duration>,
    /// Number of QPs; work is spread round-robin.
    #[arg(short = 'q', long = "qps", default_value_t = 1)]
    qps: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (the IBTA's five; `enum
    /// ibv_mtu`), nothing in between.
    #[arg(short = 'm', long, default_value = "4096", value_parser = perf::parse_mtu)]
    mtu: Mtu,
    /// Work requests outstanding per QP (BW tests).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// Bandwidth tests: signal one send WR in this many; the others complete
    /// unreported with it (perftest's -Q; at most the TX depth).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = perf::DEFAULT_CQ_MOD)]
    cq_mod: u32,
    /// Local ACK timeout code: 4.096 us x 2^CODE, 0..=20, 0 = no timer
    /// (perftest's -u; the IBTA field goes to 31, but above 20, 4.3 s, a
    /// lossy run looks hung).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = perf::parse_qp_timeout)]
    qp_timeout: u8,
    /// Drop each frame on the wire with this probability, in [0, 1), on
    /// every backend (each side drops from what it sends).
    #[arg(long, default_value = "0", allow_hyphen_values = true, value_parser = perf::parse_loss)]
    loss: f64,
    /// Seed of the loss generator, data patterns, initial PSNs and the
    /// R_Keys and VAs of the memory regions, for a reproducible run
    /// [default: random, so PSNs and R_Keys cannot be guessed].
    #[arg(long)]
    seed: Option<u64>,
    /// Record the frames to this pcap file (Ethernet, nanosecond
    /// timestamps), on every backend: in one process every frame the wire
    /// delivered (both directions); between processes what this side sent
    /// and received. Slows the run.
    #[arg(long, value_name = "OUT")]
    pcap: Option<PathBuf>,
    /// What carries the frames: mem (in-process), udp (kernel UDP sockets;
    /// in-process on 127.0.0.1/127.0.0.2, or between processes), tap, dpdk
    /// (between processes; dpdk needs a build with --features dpdk), pcap
    /// (see `roce replay`).
    #[arg(long, value_parser = backend_parser(), default_value_t = BackendKind::Mem)]
    backend: BackendKind,
    /// Two-process mode: wait for a client on the TCP side channel.
    #[arg(long, conflicts_with = "client")]
    server: bool,
    /// Two-process mode: connect to the server at ADDR.
    #[arg(long, value_name = "ADDR")]
    client: Option<String>,
    /// TCP port of the side channel (perftest's default).
    #[arg(short = 'p', long, default_value_t = perf::DEFAULT_PORT)]
    port: u16,
    /// The device's IP address (GID 0) [default: the local address of the
    /// side channel].
    #[arg(long, value_name = "IP")]
    local_ip: Option<std::net::IpAddr>,
    /// udp: the local UDP port [default: 4791 on the server, any free port
    /// on the client].
    #[arg(long, value_name = "PORT")]
    udp_port: Option<u16>,
    /// udp, with --server/--client: raw mode (IPv4; needs CAP_NET_RAW):
    /// send and receive the stack's own IPv4 + UDP headers (per-QP UDP
    /// source ports, no identification recovery needed).
    #[arg(long)]
    udp_raw: bool,
    /// udp, with --server/--client: do not recover the IPv4 identification
    /// of received datagrams from their ICRC (recovery leaves about 15 bits
    /// of integrity check; without it only peers sending identification 0 +
    /// DF are received).
    #[arg(long)]
    no_ident_recovery: bool,
    /// udp, with --server/--client: send one datagram per frame instead of
    /// UDP GSO sends of up to 64 frames (with GSO, segment i of a send
    /// carries IPv4 identification i, which its ICRC covers).
    #[arg(long)]
    udp_no_gso: bool,
    /// tap: the interface name.
    #[arg(long, value_name = "NAME")]
    ifname: Option<String>,
    /// Ethernet backends: the device's MAC address.
    #[arg(long, value_parser = replay::parse_mac)]
    mac: Option<[u8; 6]>,
    /// dpdk: EAL arguments, after `--` (e.g. `-- -l 1 -a 0000:03:00.0`).
    #[arg(last = true, value_name = "EAL_ARGS")]
    eal_args: Vec<String>,
}

/// `--backend`'s values, each with its line of help.
fn backend_parser() -> impl clap::builder::TypedValueParser<Value = BackendKind> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        BackendKind::ALL.map(|k| PossibleValue::new(k.name()).help(k.about())),
    )
    .map(|s| s.parse().unwrap_or(BackendKind::Mem))
}

impl PerfArgs {
    fn options(&self) -> PerfOptions {
        PerfOptions {
            op: Some(self.op),
            lat: self.lat,
            size: self.size,
            iters: self.iters,
            duration: self.duration,
            qps: Some(self.qps),
            mtu: Some(self.mtu),
            tx_depth: Some(self.tx_depth),
            cq_mod: Some(self.cq_mod),
            qp_timeout: Some(self.qp_timeout),
            loss: Some(self.loss),
            seed: self.seed,
            pcap: self.pcap.clone(),
            backend: Some(self.backend),
        }
    }

    /// The two-process parameters, if `--server` or `--client` was given.
    fn remote(&self) -> Option<perf::Remote> {
        let role = match (&self.client, self.server) {
            (Some(host), _) => perf::RemoteRole::Client(host.clone()),
            (None, true) => perf::RemoteRole::Server,
            (None, false) => return None,
        };
        Some(perf::Remote {
            role,
            port: self.port,
            backend: roce_io::BackendOptions {
                local_ip: self.local_ip,
                udp_raw: self.udp_raw,
                udp_no_ident_recovery: self.no_ident_recovery,
                udp_no_gso: self.udp_no_gso,
                ifname: self.ifname.clone(),
                mac: self.mac,
                eal_args: self.eal_args.clone(),
                ..Default::default()
            },
            udp_port: self.udp_port,
        })
    }
}

/// One line on stderr for `roce perf`; a failing stderr cannot be reported.
fn perf_error_line(msg: &str) {
    let _ = writeln!(io::stderr(), "roce perf: {msg}");
}

fn run_perf(args: &PerfArgs) -> ExitCode {
    let result = PerfConfig::from_options(&args.options()).and_then(|cfg| {
        // A one-line progress indicator on stderr, only on a terminal and only
        // once the run has taken a second.
        let tty = io::stderr().is_terminal();
        let limit = cfg.limit;
        let qps = u64::from(cfg.qps);
        let mut shown = false;
        let mut show = |done: u64, elapsed: Duration| {
            if !tty || elapsed < Duration::from_secs(1) {
                return;
            }
            shown = true;
            let e = elapsed.as_secs_f64();
            let what = match limit {
                perf::Limit::Iters(n) => {
                    let t = n.saturating_mul(qps);
                    format!(
                        "{done}/{t} operations ({}%), {e:.1} s",
                        done * 100 / t.max(1)
                    )
                }
                perf::Limit::Duration(d) => {
                    format!("{done} operations, {e:.1} of {:.1} s", d.as_secs_f64())
                }
            };
            let _ = write!(io::stderr(), "\r\x1b[K roce perf {}: {what}", cfg.op);
        };
        let report = match args.remote() {
            Some(remote) => {
                perf::check_remote(&cfg)?;
                // The port bound (the one the system chose for -p 0).
                let mut listening = |port: u16| {
                    let mut out = io::stdout();
                    let _ = writeln!(out, " Waiting for a client on TCP port {port} ...");
                    let _ = out.flush();
                };
                perf::run_remote(&cfg, &remote, Some(&mut show), Some(&mut listening))
            }
            None => perf::run(&cfg, Some(&mut show)),
        };
        if shown {
            let _ = write!(io::stderr(), "\r\x1b[K");
        }
        let report = report?;
        let stdout = io::stdout();
        let mut out = stdout.lock();
        report
            .write_table(&mut out)
            .and_then(|_| out.flush())
            .map_err(PerfError::Output)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            perf_error_line(&e.to_string());
            ExitCode::from(e.exit_code())
        }
    }
}

/// Parse the command line. `roce perf` usage errors are one line on stderr
/// (exit status 2); other subcommands keep clap's own report.
fn parse_cli() -> Result<Cli, ExitCode> {
    match Cli::try_parse() {
        Ok(c) => Ok(c),
        Err(e) => {
            use clap::error::ErrorKind;
            let perf = std::env::args_os().nth(1).is_some_and(|a| a == "perf");
            let informational = matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            );
            if !perf || informational {
                e.exit();
            }
            let text = e.to_string();
            let head = text.split("\nUsage:").next().unwrap_or(&text);
            let line = head
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
                .collect::<Vec<_>>()
                .join(" ");
            perf_error_line(line.strip_prefix("error: ").unwrap_or(&line));
            Err(ExitCode::from(EXIT_ERROR))
        }
    }
}

fn run_decode(args: &DecodeArgs) -> Result<(), DecodeError> {
    let opts = DecodeOptions {
        stats: args.stats,
        json: args.json,
    };
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let result = match &args.file {
        // Streamed: never read whole (a device or a huge file cannot
        // exhaust memory).
        Some(path) => decode::decode_path(path, &opts, &mut out),
        None => decode::decode_bytes(decode::EMBEDDED_DEFAULT, &opts, &mut out),
    };
    // Frames decoded before an error are still shown.
    let flushed = out.flush().map_err(DecodeError::Output);
    result?;
    flushed
}

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let result = match &cli.command {
        Command::Decode(args) => run_decode(args),
        Command::Perf(args) => return run_perf(args),
        Command::Sim(args) => return sim::run(args),
        Command::Replay(args) => return run_replay(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            // One line on stderr; a failing stderr cannot be reported anywhere.
            let _ = writeln!(io::stderr(), "roce decode: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
