//! `roce decode`: one line per frame of a pcap/pcapng capture, in the spirit of
//! `tshark -T fields`, as aligned text or as JSON Lines; or, with `--stats`,
//! counts per frame kind, per opcode and per ICRC status.
//!
//! Frames are classified by [`roce_stack::wire::classify`] (lenient parsing) and
//! RoCE ICRCs checked with [`RocePacket::icrc_status`] (IBTA 1.7 §7.8.1, RoCEv2
//! Annex A17.4). The entry point [`decode_bytes`] works on a capture held in
//! memory and writes to any [`Write`], so a fuzz target can drive it without a
//! filesystem; [`decode_path`] streams a file or a pipe (never read whole;
//! devices and directories are refused).
//!
//! # Text output
//!
//! A header line, then one line per frame. RoCE frames:
//!
//! ```text
//!  FRAME  SOURCE                 DESTINATION            OPCODE                              DQPN           PSN  A  PAYLOAD  ICRC       DETAILS
//!      1  192.168.1.1:49153      192.168.1.2:4791       RC_SEND_ONLY                        0x000012       256  1       16  ok
//!      5  192.168.1.2:49154      192.168.1.1:4791       RC_ACKNOWLEDGE                      0x000011       256  0        0  ok         AETH ACK(credit=invalid) msn=5
//! ```
//!
//! - `FRAME`: frame number, 1-based (as in Wireshark).
//! - `SOURCE`, `DESTINATION`: IP address and UDP port (RoCEv2; IPv6 addresses in
//!   brackets), or the source/destination GID (RoCEv1).
//! - `OPCODE`: the BTH opcode name (`v1:` prefix for RoCEv1), or
//!   `RESERVED(0xNN)` / `MANUFACTURER(0xNN)` for opcodes the IBTA does not assign.
//! - `DQPN`: destination QPN (hex, 24 bits). `PSN`: packet sequence number
//!   (decimal, 24 bits). `A`: the BTH AckReq bit.
//! - `PAYLOAD`: payload length in bytes, without pad bytes, from the length
//!   fields (also for frames the capture cut short).
//! - `ICRC`: `ok`, `bad` or `truncated` (the frame ends before the ICRC).
//! - `DETAILS`: the extension headers (`RETH va= rkey= len=`, `AETH <syndrome>
//!   msn=`, `DETH qkey= srcqp=`, `ImmDt=`, `AtomicETH ...`, `AtomicAckETH orig=`,
//!   `IETH rkey=`, `RDETH eec=`, `XRCETH srq=`, `FETH ...`), separated by ` | `,
//!   then flags: `SE`, `M` (MigReq), `pad=N`, `FECN`, `BECN`, `ecn=CE`, the VLAN
//!   tag, `ip_checksum=0xWIRE expected=0xRIGHT` for a wrong IPv4 header
//!   checksum (the frame is decoded all the same, as tshark does; the ICRC
//!   masks that field), and for a bad ICRC the wire and the computed value
//!   (wire byte order).
//!
//! A capture without frames prints the header line and `(no frames)`.
//!
//! Other frames show the source and destination MAC, a kind in the `OPCODE`
//! column, and details right after it: `PFC` (class-enable vector and the timer of
//! each enabled priority, in quanta), `PAUSE` (quanta), `ARP` (`who-has X tell Y`
//! / `X is-at MAC`), `BAD_ROCE` (the drop counter of the malformed RoCE frame),
//! `BAD_MAC_CTRL`, and `other` (with the EtherType).
//!
//! # JSON output
//!
//! JSON Lines, one object per frame; every key is always present unless marked
//! optional:
//!
//! - all frames: `frame` (1-based number), `kind` (`roce`, `bad_roce`, `pfc`,
//!   `pause`, `bad_mac_control`, `arp`, `other`), `src_mac`, `dst_mac`
//!   (`"aa:bb:.."`, null if the frame is shorter than 14 bytes), `vlan` (null or
//!   `{"pcp", "dei", "vid"}`);
//! - `roce`: `version` (1 or 2), `src`, `dst` (IP addresses; GIDs for RoCEv1),
//!   `sport`, `dport` (null for RoCEv1), `dscp`, `ecn`, `ttl`, `opcode` (number),
//!   `opcode_name` (`RC_SEND_ONLY`, ..., `RESERVED`), `se`, `migreq`, `pad`,
//!   `tver`, `pkey`, `fecn`, `becn`, `dest_qp`, `ack_req`, `psn`; then each
//!   extension header present: `rdeth` `{"ee_context"}`, `deth` `{"qkey",
//!   "src_qp"}`, `xrceth` `{"xrc_srq"}`, `feth` `{"raw"}`, `reth` `{"va", "rkey",
//!   "dma_len"}`, `atomic_eth` `{"va", "rkey", "swap_add", "compare"}`, `aeth`
//!   `{"syndrome" (raw byte), "msn", "text"}`, `atomic_ack_eth` `{"orig"}`,
//!   `immdt` (big-endian value), `ieth`; then `payload_len` (bytes, without pad),
//!   `icrc` (the 4 wire bytes as hex in wire order, null when not captured),
//!   `icrc_status` (`ok`, `bad`, `truncated`); optional `ip_checksum_bad`
//!   `{"wire", "computed"}` when the IPv4 header checksum is wrong;
//! - `bad_roce`, `bad_mac_control`: `error` (the drop counter name, e.g.
//!   `rx_ipv4_bad_ihl`);
//! - `pfc`: `class_enable` (number), `quanta` (8 numbers, priority 0 first);
//!   `pause`: `quanta`;
//! - `arp`: `op` (`request`, `reply` or the number), `sender_ip`, `target_ip`;
//! - `other`: `ethertype` (number, or null).
//!
//! With `--stats`, one object: `{"frames", "kinds", "opcodes", "icrc"}` (see
//! [`Summary::to_json`]).

use core::fmt::{self, Write as _};
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use roce_stack::wire::arp::ArpOp;
use roce_stack::wire::{
    classify, ExtHeaders, Frame, IcrcStatus, L2Info, NetInfo, Opcode, RocePacket,
};

use roce_io::pcap::read::{open_capture, CaptureError, CapturedFrame, Frames, OpenError};

/// The capture decoded when no file is given: `pcap-fixtures/pcaps/rc_mix.pcap`,
/// a mix of RC traffic built by our own frame builder.
pub static EMBEDDED_DEFAULT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/pcap-fixtures/pcaps/rc_mix.pcap"
));

/// What to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DecodeOptions {
    /// Print only the counts ([`Summary`]) instead of one line per frame.
    pub stats: bool,
    /// JSON Lines (one object per frame), or one JSON object with `stats`.
    pub json: bool,
}

/// Why decoding stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum DecodeError {
    /// The capture file could not be read.
    Read {
        /// The path given.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The capture is not a pcap/pcapng file, or is damaged.
    Capture(CaptureError),
    /// Writing the output failed (for example a closed pipe:
    /// [`DecodeError::is_broken_pipe`]).
    Output(io::Error),
}

impl DecodeError {
    /// Whether this is a write to a closed pipe (`roce decode | head`), which the
    /// CLI ends quietly.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, DecodeError::Output(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            DecodeError::Capture(e) => e.fmt(f),
            DecodeError::Output(e) => write!(f, "cannot write output: {e}"),
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecodeError::Read { source, .. } => Some(source),
            DecodeError::Capture(e) => Some(e),
            DecodeError::Output(e) => Some(e),
        }
    }
}

impl From<CaptureError> for DecodeError {
    fn from(e: CaptureError) -> Self {
        DecodeError::Capture(e)
    }
}

impl From<io::Error> for DecodeError {
    fn from(e: io::Error) -> Self {
        DecodeError::Output(e)
    }
}

/// What a frame is (the JSON `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    /// A RoCEv2 or RoCEv1 packet (ICRC good, bad or not captured).
    Roce,
    /// Looked like RoCE (RoCEv1 EtherType, or IP/UDP to port 4791) but is
    /// malformed.
    BadRoce,
    /// IEEE 802.1Qbb PFC.
    Pfc,
    /// IEEE 802.3x PAUSE (802.3 Annex 31B).
    Pause,
    /// A MAC control frame (EtherType 0x8808) that is neither, or is malformed.
    BadMacControl,
    /// ARP (RFC 826).
    Arp,
    /// Anything else.
    Other,
}

impl FrameKind {
    /// Every kind, in the order of the JSON `kinds` object.
    pub const ALL: [FrameKind; 7] = [
        FrameKind::Roce,
        FrameKind::BadRoce,
        FrameKind::Pfc,
        FrameKind::Pause,
        FrameKind::BadMacControl,
        FrameKind::Arp,
        FrameKind::Other,
    ];

    /// The JSON name: `roce`, `bad_roce`, `pfc`, `pause`, `bad_mac_control`,
    /// `arp`, `other`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FrameKind::Roce => "roce",
            FrameKind::BadRoce => "bad_roce",
            FrameKind::Pfc => "pfc",
            FrameKind::Pause => "pause",
            FrameKind::BadMacControl => "bad_mac_control",
            FrameKind::Arp => "arp",
            FrameKind::Other => "other",
        }
    }

    fn of(frame: &Frame<'_>) -> FrameKind {
        match frame {
            Frame::Roce(_) => FrameKind::Roce,
            Frame::BadRoce(..) => FrameKind::BadRoce,
            Frame::Pfc(..) => FrameKind::Pfc,
            Frame::Pause(..) => FrameKind::Pause,
            Frame::BadMacControl(..) => FrameKind::BadMacControl,
            Frame::Arp(..) => FrameKind::Arp,
            Frame::Other(_) => FrameKind::Other,
        }
    }
}

/// RoCE version of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RoceVersion {
    /// RoCEv1: EtherType 0x8915 and a GRH (RoCE Annex A16).
    V1,
    /// RoCEv2: IPv4/IPv6 and UDP port 4791 (RoCEv2 Annex A17).
    V2,
}

impl RoceVersion {
    /// 1 or 2.
    pub const fn number(self) -> u8 {
        match self {
            RoceVersion::V1 => 1,
            RoceVersion::V2 => 2,
        }
    }

    fn of(p: &RocePacket<'_>) -> RoceVersion {
        match p.net() {
            NetInfo::Grh(_) => RoceVersion::V1,
            NetInfo::Ipv4(_) | NetInfo::Ipv6(_) => RoceVersion::V2,
        }
    }
}

/// ICRC status counts of the RoCE frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IcrcCounts {
    /// The ICRC matches.
    pub ok: u64,
    /// The ICRC does not match.
    pub bad: u64,
    /// The frame ends before the ICRC.
    pub truncated: u64,
}

/// Counts of frames per [`FrameKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KindCounts {
    counts: [u64; 7],
}

impl KindCounts {
    /// Frames of kind `k`.
    pub fn get(&self, k: FrameKind) -> u64 {
        self.counts[k as usize]
    }
    fn add(&mut self, k: FrameKind) {
        self.counts[k as usize] += 1;
    }
}

/// Counts over a whole capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Frames read.
    pub frames: u64,
    /// Frames per kind.
    pub kinds: KindCounts,
    /// ICRC status of the RoCE frames.
    pub icrc: IcrcCounts,
    /// RoCE frames per opcode byte: `[RoCEv1, RoCEv2]`.
    opcodes: Box<[[u64; 256]; 2]>,
}

impl Default for Summary {
    fn default() -> Self {
        Summary {
            frames: 0,
            kinds: KindCounts::default(),
            icrc: IcrcCounts::default(),
            opcodes: Box::new([[0; 256]; 2]),
        }
    }
}

fn version_index(v: RoceVersion) -> usize {
    match v {
        RoceVersion::V1 => 0,
        RoceVersion::V2 => 1,
    }
}

impl Summary {
    /// RoCE frames of `version` with opcode `op`.
    pub fn opcode(&self, version: RoceVersion, op: Opcode) -> u64 {
        self.opcodes[version_index(version)][op.0 as usize]
    }

    /// Every (version, opcode, count) with a non-zero count, RoCEv2 first, by
    /// opcode byte.
    pub fn opcodes(&self) -> impl Iterator<Item = (RoceVersion, Opcode, u64)> + '_ {
        [RoceVersion::V2, RoceVersion::V1]
            .into_iter()
            .flat_map(move |v| {
                self.opcodes[version_index(v)]
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n != 0)
                    .map(move |(op, n)| (v, Opcode(op as u8), *n))
            })
    }

    /// The `--stats --json` object: `{"frames": N, "kinds": {"roce": n, ...}
    /// (every kind, zeros included), "opcodes": {"RC_SEND_ONLY": n, ...}
    /// (non-zero only; RoCEv1 as "v1:NAME"; reserved opcodes summed under
    /// "RESERVED"/"MANUFACTURER"), "icrc": {"ok", "bad", "truncated"}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut kinds = serde_json::Map::new();
        for k in FrameKind::ALL {
            kinds.insert(k.as_str().to_string(), self.kinds.get(k).into());
        }
        let mut opcodes = serde_json::Map::new();
        for (v, op, n) in self.opcodes() {
            let name = match v {
                RoceVersion::V2 => op.name().to_string(),
                RoceVersion::V1 => format!("v1:{}", op.name()),
            };
            let total = opcodes.get(&name).and_then(|x| x.as_u64()).unwrap_or(0) + n;
            opcodes.insert(name, total.into());
        }
        serde_json::json!({
            "frames": self.frames,
            "kinds": kinds,
            "opcodes": opcodes,
            "icrc": {
                "ok": self.icrc.ok,
                "bad": self.icrc.bad,
                "truncated": self.icrc.truncated,
            },
        })
    }

    fn write_text(&self, out: &mut dyn Write) -> io::Result<()> {
        const W: usize = 40;
        writeln!(out, "{:<w$}{:>10}", "frames", self.frames, w = W + 2)?;
        writeln!(out, "kinds")?;
        for k in FrameKind::ALL {
            let n = self.kinds.get(k);
            if n != 0 {
                writeln!(out, "  {:<W$}{n:>10}", k.as_str())?;
            }
        }
        writeln!(out, "opcodes")?;
        let mut name = String::new();
        for (v, op, n) in self.opcodes() {
            name.clear();
            if v == RoceVersion::V1 {
                name.push_str("v1:");
            }
            let _ = write!(name, "{op}");
            writeln!(out, "  {name:<W$}{n:>10}")?;
        }
        writeln!(out, "icrc")?;
        writeln!(out, "  {:<W$}{:>10}", "ok", self.icrc.ok)?;
        writeln!(out, "  {:<W$}{:>10}", "bad", self.icrc.bad)?;
        writeln!(out, "  {:<W$}{:>10}", "truncated", self.icrc.truncated)?;
        Ok(())
    }
}

/// Decode the capture file at `path`, streamed ([`roce_io::pcap::read::open_capture`]:
/// a regular file or a pipe; its magic number checked from the first 4
/// bytes, one record in memory at a time), and write the result to `out`
/// as [`decode_bytes`] does. Returns the counts.
///
/// Errors: [`DecodeError::Read`] (cannot open it, it is a device or a
/// directory, a read fails), [`DecodeError::Capture`], [`DecodeError::Output`].
pub fn decode_path(
    path: &Path,
    opts: &DecodeOptions,
    out: &mut dyn Write,
) -> Result<Summary, DecodeError> {
    let read_err = |m: String| DecodeError::Read {
        path: path.to_path_buf(),
        source: io::Error::other(m),
    };
    let mut r = open_capture(path).map_err(|e| match e {
        OpenError::Capture(c) => DecodeError::Capture(c),
        OpenError::Io(m) | OpenError::NotACapture(m) => read_err(m),
    })?;
    let mut decoder = Decoder::new(*opts);
    while let Some(frame) = r.next_frame() {
        decoder.frame(&frame?, out)?;
    }
    Ok(decoder.finish(out)?)
}

/// Decode a whole capture held in memory (pcap or pcapng, detected by magic
/// number) and write the result to `out`: one line per frame, or the counts
/// when `opts.stats`. Returns the counts.
///
/// Frames decoded before a damaged record are written before the error is
/// returned. Never panics.
///
/// Errors: [`DecodeError::Capture`] (not a capture, damaged, not Ethernet),
/// [`DecodeError::Output`] (writing to `out` failed).
pub fn decode_bytes(
    data: &[u8],
    opts: &DecodeOptions,
    out: &mut dyn Write,
) -> Result<Summary, DecodeError> {
    let mut decoder = Decoder::new(*opts);
    for frame in Frames::new(data)? {
        decoder.frame(&frame?, out)?;
    }
    Ok(decoder.finish(out)?)
}

/// Decodes frames one at a time, keeping the counts and one reused line buffer.
#[derive(Debug)]
pub struct Decoder {
    opts: DecodeOptions,
    summary: Summary,
    line: String,
    header_done: bool,
}

/// Width of the source and destination columns (an IPv4 address and port).
const ADDR_W: usize = 21;
/// Width of the opcode column (the longest IBTA opcode name,
/// `XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE`, plus `v1:`).
const OPCODE_W: usize = 34;

impl Decoder {
    /// A decoder with empty counts.
    pub fn new(opts: DecodeOptions) -> Decoder {
        Decoder {
            opts,
            summary: Summary::default(),
            line: String::with_capacity(512),
            header_done: false,
        }
    }

    /// The counts so far.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// Classify and count one frame, and write its line unless `stats` is set.
    /// Returns its kind.
    pub fn frame(&mut self, f: &CapturedFrame<'_>, out: &mut dyn Write) -> io::Result<FrameKind> {
        let mut frame = classify(f.data);
        // A RoCE frame whose only fault is its IPv4 header checksum is shown
        // decoded, with the checksum flagged (tshark decodes the BTH whatever
        // the checksum; the ICRC masks the checksum field, so the ICRC status
        // is the frame's own).
        let fixed;
        let mut ip_bad = None;
        if let Frame::BadRoce(l2, roce_stack::wire::Error::Ipv4BadChecksum) = frame {
            if let Some((copy, wire, computed)) = with_ipv4_checksum_fixed(f.data, l2.header_len())
            {
                fixed = copy;
                if let Frame::Roce(p) = classify(&fixed) {
                    frame = Frame::Roce(p);
                    ip_bad = Some((wire, computed));
                }
            }
        }
        let kind = FrameKind::of(&frame);
        self.summary.frames += 1;
        self.summary.kinds.add(kind);
        let icrc = match &frame {
            Frame::Roce(p) => {
                let st = p.icrc_status();
                match st {
                    IcrcStatus::Ok => self.summary.icrc.ok += 1,
                    IcrcStatus::Bad { .. } => self.summary.icrc.bad += 1,
                    IcrcStatus::Truncated => self.summary.icrc.truncated += 1,
                }
                self.summary.opcodes[version_index(RoceVersion::of(p))]
                    [p.bth().opcode.0 as usize] += 1;
                Some(st)
            }
            _ => None,
        };
        if self.opts.stats {
            return Ok(kind);
        }
        self.line.clear();
        if self.opts.json {
            write_json(&mut self.line, f.number, &frame, icrc, ip_bad);
        } else {
            if !self.header_done {
                self.header_done = true;
                write_text_header(&mut self.line);
            }
            write_text(&mut self.line, f.number, &frame, icrc, ip_bad);
        }
        self.line.push('\n');
        out.write_all(self.line.as_bytes())?;
        Ok(kind)
    }

    /// Write the counts if `stats` is set, flush, and return the counts. A
    /// capture without frames still gets the header line in text mode,
    /// followed by `(no frames)` (JSON Lines: no line, zero objects).
    pub fn finish(mut self, out: &mut dyn Write) -> io::Result<Summary> {
        if !self.opts.stats && !self.opts.json && !self.header_done {
            self.line.clear();
            write_text_header(&mut self.line);
            self.line.push_str("(no frames)\n");
            out.write_all(self.line.as_bytes())?;
        }
        if self.opts.stats {
            if self.opts.json {
                let mut s = self.summary.to_json().to_string();
                s.push('\n');
                out.write_all(s.as_bytes())?;
            } else {
                self.summary.write_text(out)?;
            }
        }
        out.flush()?;
        Ok(self.summary)
    }
}

// ---------------------------------------------------------------------------
// Shared formatting helpers. Writing to a `String` cannot fail, so the
// `fmt::Result`s are ignored.

struct Mac([u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

struct Hex4([u8; 4]);

impl fmt::Display for Hex4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3])
    }
}

/// Pads `s` from `start` with spaces to `width` characters (at least one space
/// follows when it overflows).
fn pad_to(s: &mut String, start: usize, width: usize) {
    let used = s.len() - start;
    let n = if used < width { width - used } else { 1 };
    s.extend(core::iter::repeat(' ').take(n));
}

fn ethertype_name(t: u16) -> &'static str {
    match t {
        0x0800 => " (IPv4)",
        0x86DD => " (IPv6)",
        0x0806 => " (ARP)",
        0x8915 => " (RoCEv1)",
        0x8808 => " (MAC control)",
        0x88CC => " (LLDP)",
        0x8100 => " (802.1Q)",
        0x88A8 => " (802.1ad)",
        0x8940 => " (ECP)",
        _ => "",
    }
}

// ---------------------------------------------------------------------------
// Text.

fn write_text_header(s: &mut String) {
    let _ = write!(s, "{:>6}  ", "FRAME");
    let st = s.len();
    s.push_str("SOURCE");
    pad_to(s, st, ADDR_W + 2);
    let st = s.len();
    s.push_str("DESTINATION");
    pad_to(s, st, ADDR_W + 2);
    let st = s.len();
    s.push_str("OPCODE");
    pad_to(s, st, OPCODE_W + 2);
    let _ = write!(
        s,
        "{:<8}  {:>8}  A  {:>7}  {:<9}  DETAILS",
        "DQPN", "PSN", "PAYLOAD", "ICRC"
    );
    s.push('\n');
}

fn write_endpoint(s: &mut String, addr: IpAddr, port: Option<u16>) {
    let st = s.len();
    match (addr, port) {
        (IpAddr::V6(a), Some(p)) => {
            let _ = write!(s, "[{a}]:{p}");
        }
        (a, Some(p)) => {
            let _ = write!(s, "{a}:{p}");
        }
        (a, None) => {
            let _ = write!(s, "{a}");
        }
    }
    pad_to(s, st, ADDR_W + 2);
}

fn write_macs(s: &mut String, l2: Option<&L2Info>) {
    for mac in [l2.map(|l| l.src), l2.map(|l| l.dst)] {
        let st = s.len();
        match mac {
            Some(m) => {
                let _ = write!(s, "{}", Mac(m));
            }
            None => s.push('-'),
        }
        pad_to(s, st, ADDR_W + 2);
    }
}

fn write_kind_label(s: &mut String, label: &str) {
    let st = s.len();
    s.push_str(label);
    pad_to(s, st, OPCODE_W + 2);
}

fn write_vlan_text(s: &mut String, l2: Option<&L2Info>) {
    if let Some(v) = l2.and_then(|l| l.vlan) {
        let _ = write!(s, " vlan={} pcp={}", v.vid, v.pcp);
        if v.dei {
            s.push_str(" dei");
        }
    }
}

fn write_ext_text(s: &mut String, e: &ExtHeaders) {
    let mut sep = "";
    let mut next = |s: &mut String| {
        s.push_str(sep);
        sep = " | ";
    };
    if let Some(r) = e.rdeth {
        next(s);
        let _ = write!(s, "RDETH eec=0x{:06x}", r.ee_context);
    }
    if let Some(d) = e.deth {
        next(s);
        let _ = write!(s, "DETH qkey=0x{:08x} srcqp=0x{:06x}", d.qkey, d.src_qp);
    }
    if let Some(x) = e.xrceth {
        next(s);
        let _ = write!(s, "XRCETH srq=0x{:06x}", x.xrc_srq);
    }
    if let Some(fe) = e.feth {
        next(s);
        let _ = write!(
            s,
            "FETH sel={} placement={}",
            fe.selectivity_level(),
            fe.placement_type()
        );
    }
    if let Some(r) = e.reth {
        next(s);
        let _ = write!(
            s,
            "RETH va=0x{:016x} rkey=0x{:08x} len={}",
            r.va, r.rkey, r.dma_len
        );
    }
    if let Some(a) = e.atomic_eth {
        next(s);
        let _ = write!(
            s,
            "AtomicETH va=0x{:016x} rkey=0x{:08x} swap_add=0x{:016x} compare=0x{:016x}",
            a.va, a.rkey, a.swap_add, a.compare
        );
    }
    if let Some(a) = e.aeth {
        next(s);
        let _ = write!(s, "AETH {} msn={}", a.kind(), a.msn);
    }
    if let Some(a) = e.atomic_ack_eth {
        next(s);
        let _ = write!(s, "AtomicAckETH orig=0x{:016x}", a.orig);
    }
    if let Some(i) = e.immdt {
        next(s);
        let _ = write!(s, "ImmDt=0x{i:08x}");
    }
    if let Some(i) = e.ieth {
        next(s);
        let _ = write!(s, "IETH rkey=0x{i:08x}");
    }
}

/// A copy of `frame` with the IPv4 header at `l3` given its right header
/// checksum (RFC 791 / RFC 1071), the wire and the computed value; `None`
/// when there is no whole IPv4 header there.
fn with_ipv4_checksum_fixed(frame: &[u8], l3: usize) -> Option<(Vec<u8>, u16, u16)> {
    let ihl = usize::from(frame.get(l3)? & 0x0F) * 4;
    let hdr = frame.get(l3..l3 + ihl).filter(|_| ihl >= 20)?;
    let wire = u16::from_be_bytes([hdr[10], hdr[11]]);
    let mut sum: u32 = 0;
    for (i, w) in hdr.chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
        }
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    let computed = !(sum as u16);
    let mut copy = frame.to_vec();
    copy[l3 + 10..l3 + 12].copy_from_slice(&computed.to_be_bytes());
    Some((copy, wire, computed))
}

fn write_text(
    s: &mut String,
    number: u64,
    frame: &Frame<'_>,
    icrc: Option<IcrcStatus>,
    ip_bad: Option<(u16, u16)>,
) {
    let _ = write!(s, "{number:>6}  ");
    match frame {
        Frame::Roce(p) => write_roce_text(s, p, icrc.unwrap_or(IcrcStatus::Truncated), ip_bad),
        Frame::BadRoce(l2, e) => {
            write_macs(s, Some(l2));
            write_kind_label(s, "BAD_ROCE");
            let _ = write!(s, "{e}");
            write_vlan_text(s, Some(l2));
        }
        Frame::Pfc(l2, p) => {
            write_macs(s, Some(l2));
            write_kind_label(s, "PFC");
            let _ = write!(s, "class_enable=0x{:04x}", p.class_enable);
            for prio in 0..8u8 {
                if let Some(q) = p.time(prio) {
                    let _ = write!(s, " p{prio}={q}");
                    if q == 0 {
                        s.push_str("(XON)");
                    }
                }
            }
            write_vlan_text(s, Some(l2));
        }
        Frame::Pause(l2, p) => {
            write_macs(s, Some(l2));
            write_kind_label(s, "PAUSE");
            let _ = write!(s, "quanta={}", p.quanta);
            if p.quanta == 0 {
                s.push_str(" (XON)");
            }
            write_vlan_text(s, Some(l2));
        }
        Frame::BadMacControl(l2, e) => {
            write_macs(s, Some(l2));
            write_kind_label(s, "BAD_MAC_CTRL");
            let _ = write!(s, "{e}");
            write_vlan_text(s, Some(l2));
        }
        Frame::Arp(l2, a) => {
            write_macs(s, Some(l2));
            write_kind_label(s, "ARP");
            let _ = match a.op {
                ArpOp::Request => write!(s, "who-has {} tell {}", a.target_ip, a.sender_ip),
                ArpOp::Reply => write!(s, "{} is-at {}", a.sender_ip, Mac(a.sender_mac)),
                ArpOp::Other(op) => {
                    write!(s, "op={op} sender={} target={}", a.sender_ip, a.target_ip)
                }
            };
            write_vlan_text(s, Some(l2));
        }
        Frame::Other(l2) => {
            write_macs(s, l2.as_ref());
            write_kind_label(s, "other");
            match l2 {
                Some(l) => {
                    let _ = write!(
                        s,
                        "ethertype=0x{:04x}{}",
                        l.ethertype,
                        ethertype_name(l.ethertype)
                    );
                }
                None => s.push_str("shorter than an Ethernet header"),
            }
            write_vlan_text(s, l2.as_ref());
        }
    }
    // No trailing blanks.
    let t = s.trim_end_matches(' ').len();
    s.truncate(t);
}

fn write_roce_text(
    s: &mut String,
    p: &RocePacket<'_>,
    icrc: IcrcStatus,
    ip_bad: Option<(u16, u16)>,
) {
    let (sport, dport) = match p.udp() {
        Some(u) => (Some(u.src_port), Some(u.dst_port)),
        None => (None, None),
    };
    write_endpoint(s, p.net().src(), sport);
    write_endpoint(s, p.net().dst(), dport);
    let st = s.len();
    if RoceVersion::of(p) == RoceVersion::V1 {
        s.push_str("v1:");
    }
    let _ = write!(s, "{}", p.bth().opcode);
    pad_to(s, st, OPCODE_W + 2);
    let _ = write!(
        s,
        "0x{:06x}  {:>8}  {}  {:>7}  {:<9}  ",
        p.bth().dest_qp,
        p.bth().psn,
        u8::from(p.bth().ack_req),
        p.declared_payload_len(),
        icrc.as_str()
    );
    let details = s.len();
    write_ext_text(s, &p.ext().to_headers());
    let flag = |s: &mut String, f: &str| {
        if s.len() > details {
            s.push(' ');
        }
        s.push_str(f);
    };
    if p.bth().solicited {
        flag(s, "SE");
    }
    if p.bth().migreq {
        flag(s, "M");
    }
    if p.pad() != 0 {
        flag(s, "pad=");
        let _ = write!(s, "{}", p.pad());
    }
    if p.bth().fecn {
        flag(s, "FECN");
    }
    if p.bth().becn {
        flag(s, "BECN");
    }
    if p.net().ecn() == 3 {
        flag(s, "ecn=CE");
    }
    if p.bth().tver != 0 {
        flag(s, "tver=");
        let _ = write!(s, "{}", p.bth().tver);
    }
    if p.bth().pkey != 0xFFFF {
        flag(s, "pkey=");
        let _ = write!(s, "0x{:04x}", p.bth().pkey);
    }
    if let Some(v) = p.l2().vlan {
        flag(s, "vlan=");
        let _ = write!(s, "{} pcp={}", v.vid, v.pcp);
    }
    if let Some((wire, computed)) = ip_bad {
        flag(s, "ip_checksum=");
        let _ = write!(s, "0x{wire:04x} expected=0x{computed:04x}");
    }
    if let IcrcStatus::Bad { expected, found } = icrc {
        flag(s, "icrc=");
        let _ = write!(
            s,
            "{} expected={}",
            Hex4(found.to_le_bytes()),
            Hex4(expected.to_le_bytes())
        );
    }
}

// ---------------------------------------------------------------------------
// JSON, through serde_json: one struct per object, whose field order is the
// contract's key order.

use roce_stack::wire::AethSyndrome;
use serde::Serialize;

/// A value written as a JSON string through its `Display` (addresses, MACs,
/// hex, syndrome text).
struct Disp<T>(T);

impl<T: fmt::Display> Serialize for Disp<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

#[derive(Serialize)]
struct JsonFrame {
    frame: u64,
    kind: &'static str,
    src_mac: Option<Disp<Mac>>,
    dst_mac: Option<Disp<Mac>>,
    vlan: Option<JsonVlan>,
    #[serde(flatten)]
    body: JsonBody,
}

#[derive(Serialize)]
struct JsonVlan {
    pcp: u8,
    dei: bool,
    vid: u16,
}

/// The fields after `vlan`, by kind of frame.
#[derive(Serialize)]
#[serde(untagged)]
enum JsonBody {
    Roce(Box<JsonRoce>),
    Error {
        error: &'static str,
    },
    Pfc {
        class_enable: u16,
        quanta: [u16; 8],
    },
    Pause {
        quanta: u16,
    },
    Arp {
        op: JsonArpOp,
        sender_ip: Disp<IpAddr>,
        target_ip: Disp<IpAddr>,
    },
    Other {
        ethertype: Option<u16>,
    },
}

#[derive(Serialize)]
#[serde(untagged)]
enum JsonArpOp {
    Name(&'static str),
    Code(u16),
}

#[derive(Serialize)]
struct JsonRoce {
    version: u8,
    src: Disp<IpAddr>,
    dst: Disp<IpAddr>,
    sport: Option<u16>,
    dport: Option<u16>,
    dscp: u8,
    ecn: u8,
    ttl: u8,
    opcode: u8,
    opcode_name: &'static str,
    se: bool,
    migreq: bool,
    pad: u8,
    tver: u8,
    pkey: u16,
    fecn: bool,
    becn: bool,
    dest_qp: u32,
    ack_req: bool,
    psn: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    rdeth: Option<JsonRdeth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deth: Option<JsonDeth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    xrceth: Option<JsonXrceth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    feth: Option<JsonFeth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reth: Option<JsonReth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_eth: Option<JsonAtomicEth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    aeth: Option<JsonAeth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_ack_eth: Option<JsonAtomicAckEth>,
    #[serde(skip_serializing_if = "Option::is_none")]
    immdt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ieth: Option<u32>,
    payload_len: usize,
    icrc: Option<Disp<Hex4>>,
    icrc_status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip_checksum_bad: Option<JsonIpChecksum>,
}

/// A wrong IPv4 header checksum: what the frame carries, what it should be.
#[derive(Serialize)]
struct JsonIpChecksum {
    wire: u16,
    computed: u16,
}

#[derive(Serialize)]
struct JsonRdeth {
    ee_context: u32,
}

#[derive(Serialize)]
struct JsonDeth {
    qkey: u32,
    src_qp: u32,
}

#[derive(Serialize)]
struct JsonXrceth {
    xrc_srq: u32,
}

#[derive(Serialize)]
struct JsonFeth {
    raw: u32,
}

#[derive(Serialize)]
struct JsonReth {
    va: u64,
    rkey: u32,
    dma_len: u32,
}

#[derive(Serialize)]
struct JsonAtomicEth {
    va: u64,
    rkey: u32,
    swap_add: u64,
    compare: u64,
}

#[derive(Serialize)]
struct JsonAeth {
    syndrome: u8,
    msn: u32,
    text: Disp<AethSyndrome>,
}

#[derive(Serialize)]
struct JsonAtomicAckEth {
    orig: u64,
}

/// `io::Write` into the reused line buffer. serde_json hands over whole
/// UTF-8 pieces (ASCII punctuation and digits, and string slices cut at
/// ASCII escape points), so each piece is valid UTF-8 on its own.
struct LineWriter<'s>(&'s mut String);

impl io::Write for LineWriter<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let piece =
            core::str::from_utf8(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.0.push_str(piece);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn write_json(
    s: &mut String,
    number: u64,
    frame: &Frame<'_>,
    icrc: Option<IcrcStatus>,
    ip_bad: Option<(u16, u16)>,
) {
    let l2 = match frame {
        Frame::Roce(p) => Some(p.l2()),
        Frame::BadRoce(l, _)
        | Frame::Pfc(l, _)
        | Frame::Pause(l, _)
        | Frame::BadMacControl(l, _)
        | Frame::Arp(l, _) => Some(*l),
        Frame::Other(l) => *l,
    };
    let body = match frame {
        Frame::Roce(p) => JsonBody::Roce(Box::new(JsonRoce {
            ip_checksum_bad: ip_bad.map(|(wire, computed)| JsonIpChecksum { wire, computed }),
            ..roce_json(p, icrc.unwrap_or(IcrcStatus::Truncated))
        })),
        Frame::BadRoce(_, e) | Frame::BadMacControl(_, e) => JsonBody::Error {
            error: e.counter_name(),
        },
        Frame::Pfc(_, p) => JsonBody::Pfc {
            class_enable: p.class_enable,
            quanta: p.quanta,
        },
        Frame::Pause(_, p) => JsonBody::Pause { quanta: p.quanta },
        Frame::Arp(_, a) => JsonBody::Arp {
            op: match a.op {
                ArpOp::Request => JsonArpOp::Name("request"),
                ArpOp::Reply => JsonArpOp::Name("reply"),
                ArpOp::Other(v) => JsonArpOp::Code(v),
            },
            sender_ip: Disp(a.sender_ip.into()),
            target_ip: Disp(a.target_ip.into()),
        },
        Frame::Other(l) => JsonBody::Other {
            ethertype: l.map(|l| l.ethertype),
        },
    };
    let obj = JsonFrame {
        frame: number,
        kind: FrameKind::of(frame).as_str(),
        src_mac: l2.map(|l| Disp(Mac(l.src))),
        dst_mac: l2.map(|l| Disp(Mac(l.dst))),
        vlan: l2.and_then(|l| l.vlan).map(|v| JsonVlan {
            pcp: v.pcp,
            dei: v.dei,
            vid: v.vid,
        }),
        body,
    };
    // Writing into a String only fails on a piece that is not UTF-8, which
    // serde_json does not produce.
    let _ = serde_json::to_writer(LineWriter(s), &obj);
}

fn roce_json(p: &RocePacket<'_>, icrc: IcrcStatus) -> JsonRoce {
    let net = p.net();
    let b = p.bth();
    let e = p.ext();
    JsonRoce {
        version: RoceVersion::of(p).number(),
        src: Disp(net.src()),
        dst: Disp(net.dst()),
        sport: p.udp().map(|u| u.src_port),
        dport: p.udp().map(|u| u.dst_port),
        dscp: net.dscp(),
        ecn: net.ecn(),
        ttl: net.ttl(),
        opcode: b.opcode.0,
        opcode_name: b.opcode.name(),
        se: b.solicited,
        migreq: b.migreq,
        pad: b.pad_count,
        tver: b.tver,
        pkey: b.pkey,
        fecn: b.fecn,
        becn: b.becn,
        dest_qp: b.dest_qp,
        ack_req: b.ack_req,
        psn: b.psn,
        rdeth: e.rdeth().map(|r| JsonRdeth {
            ee_context: r.ee_context,
        }),
        deth: e.deth().map(|d| JsonDeth {
            qkey: d.qkey,
            src_qp: d.src_qp,
        }),
        xrceth: e.xrceth().map(|r| JsonXrceth { xrc_srq: r.xrc_srq }),
        feth: e.feth().map(|r| JsonFeth { raw: r.raw }),
        reth: e.reth().map(|r| JsonReth {
            va: r.va,
            rkey: r.rkey,
            dma_len: r.dma_len,
        }),
        atomic_eth: e.atomic_eth().map(|r| JsonAtomicEth {
            va: r.va,
            rkey: r.rkey,
            swap_add: r.swap_add,
            compare: r.compare,
        }),
        aeth: e.aeth().map(|r| JsonAeth {
            syndrome: r.syndrome,
            msn: r.msn,
            text: Disp(r.kind()),
        }),
        atomic_ack_eth: e
            .atomic_ack_eth()
            .map(|r| JsonAtomicAckEth { orig: r.orig }),
        immdt: e.immdt(),
        ieth: e.ieth(),
        payload_len: p.declared_payload_len(),
        icrc: p.icrc().map(|w| Disp(Hex4(w))),
        icrc_status: icrc.as_str(),
        ip_checksum_bad: None,
    }
}
