//! The `roce` command-line tool. Argument parsing only; the work is done in the
//! library (`roce::decode`).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use roce::decode::{self, DecodeError, DecodeOptions};

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
}

const DECODE_LONG_ABOUT: &str = "\
Decode a pcap or pcapng capture (detected by magic number; link type Ethernet \
only): one line per frame, in the spirit of `tshark -T fields`. Without FILE, an \
embedded sample capture (pcap-fixtures/pcaps/rc_mix.pcap) is decoded.

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
               BECN, ecn=CE, pkey (if not 0xffff), VLAN; for a bad ICRC the wire
               and the computed value (wire byte order)
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

fn run_decode(args: &DecodeArgs) -> Result<(), DecodeError> {
    let opts = DecodeOptions {
        stats: args.stats,
        json: args.json,
    };
    let owned;
    let data: &[u8] = match &args.file {
        Some(path) => {
            owned = decode::read_capture(path)?;
            &owned
        }
        None => decode::EMBEDDED_DEFAULT,
    };
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(64 * 1024, stdout.lock());
    let result = decode::decode_bytes(data, &opts, &mut out);
    // Frames decoded before an error are still shown.
    let flushed = out.flush().map_err(DecodeError::Output);
    result?;
    flushed
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Decode(args) => run_decode(args),
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
