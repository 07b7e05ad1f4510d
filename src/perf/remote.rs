//! `roce perf --server` / `--client ADDR`: the two ends of a test in two
//! processes (or on two hosts), joined by a backend that crosses process
//! boundaries (`udp`, `tap`, `dpdk`), after perftest's model: a TCP side
//! channel (default port 18515, perftest's) carries the connection
//! parameters before the run and the results after it.
//!
//! # The side channel
//!
//! Text lines (UTF-8, `\n`-terminated), `key=value` fields separated by one
//! space; numbers in hex carry `0x`. The client speaks first:
//!
//! ```text
//! client -> server
//!   ROCE-PERF 1 client
//!   config op=write lat=0 size=4096 iters=1000 duration_ns=0 qps=1 mtu=4096 tx_depth=128 cq_mod=100 qp_timeout=14 seed=1 backend=udp
//!   endpoint gid=::ffff:127.0.0.1 mac=02:00:7f:00:00:01 udp=127.0.0.1:40000 va=0x00007f0000000000 rkey=0x00000001 len=4096
//!   qp qpn=0x000011 psn=0x5b0a3c            (one line per QP, in QP-index order)
//!   end
//! server -> client
//!   ROCE-PERF 1 server
//!   error <message>                          (and the server exits), or
//!   endpoint ... / qp ... / end              (as above, the server's)
//! ... the test runs over the backend ...
//! client -> server
//!   done ops=1000 iterations=1000
//!   bw peak=12.3 avg=11.9 rate=0.36 elapsed_ns=2750000
//!     or: lat min=.. max=.. typical=.. avg=.. stdev=.. p99=.. p999=..   (microseconds)
//!   counter <name> <value>                   (the client's non-zero retransmission counters)
//!   end
//!     or, when the client's run failed: abort <message>
//! server -> client
//!   result ok <what was verified>  |  result fail <message>
//!   counter <name> <value>                   (the server's)
//!   end
//! ```
//!
//! `endpoint` is what the peer needs to connect its QPs (perftest exchanges
//! the same: LID/GID, QPN, PSN, R_Key, VA): GID 0 of the device (in IPv6
//! notation; IPv4 as `::ffff:a.b.c.d`), its MAC (the peer's address vector
//! uses it as the next-hop MAC: Ethernet backends), the UDP socket peers
//! send to (`udp` backend, else `-`), and the memory region's I/O virtual
//! address, R_Key and length. `config` is the client's: the server takes
//! the size, iterations, QPs, MTU, TX depth, timeout and seed from it, and
//! refuses (`error`) a different operation, test type or backend.
//!
//! Limits (every line comes from a peer that may be hostile): a line is at
//! most [`MAX_LINE`] bytes with its newline and valid UTF-8; an endpoint
//! carries exactly as many `qp` lines as the configuration's QPs, a report
//! at most 256 `counter` lines; the server checks the client's `config`
//! against its own and against the memory bound before it reads anything
//! more. The whole handshake must be done within [`HANDSHAKE_TIMEOUT`] of
//! the connection (a deadline, so a peer trickling a byte at a time is cut
//! off too), and so must the server's `result`; during the run the server
//! gives up when the client has sent neither a frame nor a line for
//! [`RUN_IDLE_TIMEOUT`]. Each failure is one line in plain words. With
//! `-p 0` the server listens on a port the system picks and reports it
//! (`Waiting for a client on TCP port N`).
//!
//! The client does the measuring. Both sides print perftest's table: the
//! server shows the client's figures. The data is verified where it can be
//! seen: the server checks WRITE targets against the client's pattern
//! (regenerated from the seed), every SEND as it arrives, and the atomic
//! counter; the client checks READ data against the server's pattern.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::str::FromStr;
use std::thread;
use std::time::Duration;

use roce_stack::backend::FrameIo;
use roce_stack::transport::av::Gid;
use roce_stack::verbs::Device;

use super::engine::{self, Endpoint, Role, Shared};
use super::stats::{BwStats, LatStats};
use super::{Figures, Limit, PerfConfig, PerfError, PerfReport};
use roce_io::adapt::Tee;
use roce_io::{self as backend, BackendKind, BackendOptions, Opened};

/// perftest's default TCP port for the side channel.
pub const DEFAULT_PORT: u16 = 18515;

/// How long the client keeps trying to reach the server.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);
/// The whole exchange of parameters (hello, config, endpoint) must be done
/// within this time of the connection (a deadline, not a per-read timeout:
/// a peer that trickles a byte at a time is cut off as well); so must the
/// server's `result` after the client's report.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// The server gives up on a run when the client has sent nothing, neither a
/// frame nor a side-channel line, for this long (the client itself fails a
/// run after [`super::STALL`] without a completion, and reports it).
pub const RUN_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest side-channel line accepted, bytes with the newline (the longest
/// the protocol sends, `config`, is under 300).
pub const MAX_LINE: usize = 1024;
/// Most `counter` lines accepted in a report.
const MAX_COUNTER_LINES: usize = 256;
/// How often a wait on the side channel wakes up to check its deadline.
const POLL: Duration = Duration::from_millis(200);

/// Which end this process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteRole {
    /// Wait for a client on the TCP port (`--server`).
    Server,
    /// Connect to the server at this host name or address (`--client`).
    Client(String),
}

/// A two-process run's parameters besides the test's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// Server or client.
    pub role: RemoteRole,
    /// The side channel's TCP port.
    pub port: u16,
    /// The backend's options. `local_ip` `None` = the local address of the
    /// TCP connection; `udp_port` `None` = 4791 on the server, any free port
    /// on the client.
    pub backend: BackendOptions,
    /// `--udp-port`, if given.
    pub udp_port: Option<u16>,
}

fn proto(m: impl Into<String>) -> PerfError {
    PerfError::Run(format!("side channel: {}", m.into()))
}

fn io_err(what: &str) -> impl Fn(io::Error) -> PerfError + '_ {
    move |e| proto(format!("{what}: {e}"))
}

/// One parsed line: the keyword and its `key=value` fields.
struct Line {
    word: String,
    rest: String,
}

impl Line {
    fn parse(s: &str) -> Line {
        let s = s.trim_end_matches(['\r', '\n']);
        let (w, r) = s.split_once(' ').unwrap_or((s, ""));
        Line {
            word: w.to_string(),
            rest: r.to_string(),
        }
    }
    fn field(&self, key: &str) -> Result<&str, PerfError> {
        self.rest
            .split(' ')
            .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .ok_or_else(|| proto(format!("`{}` line without {key}=", self.word)))
    }
    fn num<T: FromStr>(&self, key: &str) -> Result<T, PerfError> {
        let v = self.field(key)?;
        v.parse()
            .map_err(|_| proto(format!("{key}={v} is not a number")))
    }
    fn hex(&self, key: &str) -> Result<u64, PerfError> {
        let v = self.field(key)?;
        u64::from_str_radix(v.trim_start_matches("0x"), 16)
            .map_err(|_| proto(format!("{key}={v} is not a hex number")))
    }
}

/// What a wait on the side channel is bounded by.
enum Wait<'a> {
    /// Give up at this instant, saying what was expected of whom.
    Deadline(std::time::Instant, &'a str),
    /// Ask this every [`POLL`] whether to go on waiting (the run's idle
    /// check).
    Check(&'a mut dyn FnMut() -> Result<(), PerfError>),
}

struct Channel {
    r: BufReader<TcpStream>,
    w: TcpStream,
    /// The peer, for messages: "the client 127.0.0.1:40000".
    peer: String,
    /// Bytes of a line whose end has not arrived yet.
    partial: Vec<u8>,
}

impl Channel {
    fn new(s: TcpStream, who: &str) -> Result<Channel, PerfError> {
        let w = s.try_clone().map_err(io_err("TCP"))?;
        let _ = s.set_nodelay(true);
        let peer = match s.peer_addr() {
            Ok(a) => format!("the {who} at {a}"),
            Err(_) => format!("the {who}"),
        };
        Ok(Channel {
            r: BufReader::with_capacity(MAX_LINE, s),
            w,
            peer,
            partial: Vec::new(),
        })
    }
    fn send(&mut self, text: &str) -> Result<(), PerfError> {
        self.w
            .write_all(text.as_bytes())
            .and_then(|_| self.w.flush())
            .map_err(io_err("sending"))
    }
    /// One line, at most [`MAX_LINE`] bytes, waiting as `wait` says.
    fn line_in(&mut self, wait: &mut Wait<'_>) -> Result<Line, PerfError> {
        loop {
            let timeout = match wait {
                Wait::Deadline(at, what) => {
                    let left = at.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Err(proto(format!(
                            "{} sent no {what} within {} s",
                            self.peer,
                            HANDSHAKE_TIMEOUT.as_secs()
                        )));
                    }
                    left.min(POLL)
                }
                Wait::Check(_) => POLL,
            };
            let _ = self.r.get_ref().set_read_timeout(Some(timeout));
            let got = match self.r.fill_buf() {
                Ok(b) => b,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    if let Wait::Check(f) = wait {
                        f()?;
                    }
                    continue;
                }
                Err(e) => return Err(proto(format!("receiving from {}: {e}", self.peer))),
            };
            if got.is_empty() {
                return Err(proto(format!("{} closed the connection", self.peer)));
            }
            let (take, end) = match got.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (got.len(), false),
            };
            if self.partial.len() + take > MAX_LINE {
                return Err(proto(format!(
                    "{} sent a line longer than {MAX_LINE} bytes",
                    self.peer
                )));
            }
            self.partial.extend_from_slice(&got[..take]);
            self.r.consume(take);
            if end {
                let bytes = std::mem::take(&mut self.partial);
                let text = String::from_utf8(bytes)
                    .map_err(|_| proto(format!("{} sent a line that is not UTF-8", self.peer)))?;
                return Ok(Line::parse(&text));
            }
        }
    }
    /// One line before `deadline`; `what` names it for the timeout message.
    fn line_by(&mut self, deadline: std::time::Instant, what: &str) -> Result<Line, PerfError> {
        self.line_in(&mut Wait::Deadline(deadline, what))
    }
    fn expect_by(&mut self, word: &str, deadline: std::time::Instant) -> Result<Line, PerfError> {
        let l = self.line_by(deadline, &format!("`{word}` line"))?;
        if l.word == "error" {
            return Err(PerfError::Run(format!("{} refused: {}", self.peer, l.rest)));
        }
        if l.word != word {
            return Err(proto(format!(
                "{}: expected `{word}`, got `{}`",
                self.peer, l.word
            )));
        }
        Ok(l)
    }
}

fn fmt_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut it = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    it.next().is_none().then_some(m)
}

fn endpoint_text(e: &Endpoint) -> String {
    let mut t = format!(
        "endpoint gid={} mac={} udp={} va=0x{:016x} rkey=0x{:08x} len={}\n",
        Ipv6Addr::from(e.gid.0),
        fmt_mac(e.mac),
        e.udp.map_or("-".to_string(), |a| a.to_string()),
        e.va,
        e.rkey,
        e.len
    );
    for (qpn, psn) in &e.qps {
        t.push_str(&format!("qp qpn=0x{qpn:06x} psn=0x{psn:06x}\n"));
    }
    t.push_str("end\n");
    t
}

/// The peer's `endpoint` and its `qp` lines (exactly `qps` of them) up to
/// `end`, before `deadline`.
fn read_endpoint(
    ch: &mut Channel,
    qps: u32,
    deadline: std::time::Instant,
) -> Result<Endpoint, PerfError> {
    let l = ch.expect_by("endpoint", deadline)?;
    let gid: Ipv6Addr = l.field("gid")?.parse().map_err(|_| proto("bad gid"))?;
    let mac = parse_mac(l.field("mac")?).ok_or_else(|| proto("bad mac"))?;
    let udp = match l.field("udp")? {
        "-" => None,
        a => Some(a.parse().map_err(|_| proto(format!("bad udp={a}")))?),
    };
    let mut e = Endpoint {
        gid: Gid(gid.octets()),
        mac,
        udp,
        va: l.hex("va")?,
        rkey: l.hex("rkey")? as u32,
        len: l.num("len")?,
        qps: Vec::new(),
    };
    loop {
        let l = ch.line_by(deadline, "`qp` or `end` line")?;
        match l.word.as_str() {
            "qp" if e.qps.len() >= qps as usize => {
                return Err(proto(format!(
                    "{} sent more `qp` lines than its {qps} QPs",
                    ch.peer
                )))
            }
            "qp" => e.qps.push((l.hex("qpn")? as u32, l.hex("psn")? as u32)),
            "end" if e.qps.len() != qps as usize => {
                return Err(proto(format!(
                    "{} sent {} `qp` lines for {qps} QPs",
                    ch.peer,
                    e.qps.len()
                )))
            }
            "end" => return Ok(e),
            w => return Err(proto(format!("unexpected `{w}` in an endpoint"))),
        }
    }
}

fn config_text(c: &PerfConfig) -> String {
    let (iters, dur) = match c.limit {
        Limit::Iters(n) => (n, 0),
        Limit::Duration(d) => (0, d.as_nanos() as u64),
    };
    format!(
        "config op={} lat={} size={} iters={iters} duration_ns={dur} qps={} mtu={} tx_depth={} cq_mod={} qp_timeout={} seed={} backend={}\n",
        c.op,
        u8::from(c.lat),
        c.size,
        c.qps,
        c.mtu.bytes(),
        c.tx_depth,
        c.cq_mod,
        c.qp_timeout,
        c.seed,
        c.backend
    )
}

/// The client's config line applied to the server's own (whose operation,
/// test type and backend must agree).
fn apply_config(l: &Line, own: &PerfConfig) -> Result<PerfConfig, String> {
    let f = |k: &str| l.field(k).map_err(|e| e.to_string());
    let n = |k: &str| -> Result<u64, String> {
        f(k)?
            .parse()
            .map_err(|_| format!("config: {k} is not a number"))
    };
    let op = super::parse_op(f("op")?)?;
    let lat = f("lat")? == "1";
    let backend = f("backend")?;
    if op != own.op || lat != own.lat || backend != own.backend.name() {
        return Err(format!(
            "the client runs {} {}over {backend}, this server {} {}over {}",
            op,
            if lat { "--lat " } else { "" },
            own.op,
            if own.lat { "--lat " } else { "" },
            own.backend
        ));
    }
    let limit = match (n("iters")?, n("duration_ns")?) {
        (0, d) if d > 0 => Limit::Duration(Duration::from_nanos(d)),
        (i, 0) if i > 0 => Limit::Iters(i),
        _ => return Err("config: neither iterations nor a duration".into()),
    };
    let mtu = super::parse_mtu(f("mtu")?)?;
    let cfg = PerfConfig {
        op,
        lat,
        size: n("size")?,
        limit,
        qps: u32::try_from(n("qps")?).map_err(|_| "config: qps")?,
        mtu,
        tx_depth: u32::try_from(n("tx_depth")?).map_err(|_| "config: tx_depth")?,
        cq_mod: u32::try_from(n("cq_mod")?).map_err(|_| "config: cq_mod")?,
        qp_timeout: u8::try_from(n("qp_timeout")?).map_err(|_| "config: qp_timeout")?,
        loss: 0.0,
        seed: n("seed")?,
        pcap: None,
        backend: own.backend,
    };
    // The same checks as the client's own command line had.
    let o = super::PerfOptions {
        op: Some(cfg.op),
        lat: cfg.lat,
        size: Some(cfg.size),
        iters: match cfg.limit {
            Limit::Iters(i) => Some(i),
            Limit::Duration(_) => None,
        },
        duration: match cfg.limit {
            Limit::Duration(d) => Some(d),
            Limit::Iters(_) => None,
        },
        qps: Some(cfg.qps),
        mtu: Some(cfg.mtu),
        tx_depth: Some(cfg.tx_depth),
        cq_mod: Some(cfg.cq_mod),
        qp_timeout: Some(cfg.qp_timeout),
        loss: None,
        seed: Some(cfg.seed),
        pcap: None,
        backend: Some(cfg.backend),
    };
    let mut cfg = PerfConfig::from_options(&o).map_err(|e| e.to_string())?;
    // Each side drops and records its own frames, as its own command line
    // says.
    cfg.loss = own.loss;
    cfg.pcap.clone_from(&own.pcap);
    Ok(cfg)
}

fn figures_text(f: &Figures) -> String {
    match f {
        Figures::Bw(b) => format!(
            "bw peak={} avg={} rate={} elapsed_ns={}\n",
            b.peak_gbps, b.avg_gbps, b.msg_rate_mpps, b.elapsed_ns
        ),
        Figures::Lat(l) => format!(
            "lat min={} max={} typical={} avg={} stdev={} p99={} p999={}\n",
            l.min_us, l.max_us, l.typical_us, l.avg_us, l.stdev_us, l.p99_us, l.p999_us
        ),
    }
}

fn parse_figures(l: &Line) -> Result<Figures, PerfError> {
    match l.word.as_str() {
        "bw" => Ok(Figures::Bw(BwStats {
            peak_gbps: l.num("peak")?,
            avg_gbps: l.num("avg")?,
            msg_rate_mpps: l.num("rate")?,
            elapsed_ns: l.num("elapsed_ns")?,
        })),
        "lat" => Ok(Figures::Lat(LatStats {
            min_us: l.num("min")?,
            max_us: l.num("max")?,
            typical_us: l.num("typical")?,
            avg_us: l.num("avg")?,
            stdev_us: l.num("stdev")?,
            p99_us: l.num("p99")?,
            p999_us: l.num("p999")?,
        })),
        w => Err(proto(format!("expected figures, got `{w}`"))),
    }
}

fn counters_text(c: &[(String, u64)]) -> String {
    c.iter()
        .map(|(n, v)| format!("counter {n} {v}\n"))
        .collect()
}

/// Read `counter` lines (at most [`MAX_COUNTER_LINES`]) up to `end`.
fn read_counters(ch: &mut Channel, wait: &mut Wait<'_>) -> Result<Vec<(String, u64)>, PerfError> {
    let mut out = Vec::new();
    loop {
        let l = ch.line_in(wait)?;
        match l.word.as_str() {
            "counter" if out.len() >= MAX_COUNTER_LINES => {
                return Err(proto(format!(
                    "{} sent more than {MAX_COUNTER_LINES} counters",
                    ch.peer
                )))
            }
            "counter" => {
                let (n, v) = l
                    .rest
                    .split_once(' ')
                    .ok_or_else(|| proto("bad counter line"))?;
                out.push((
                    n.to_string(),
                    v.parse().map_err(|_| proto("bad counter value"))?,
                ));
            }
            "end" => return Ok(out),
            w => return Err(proto(format!("unexpected `{w}` among counters"))),
        }
    }
}

/// `(name, client, server)` rows of the counters of `names` not zero on
/// either side.
fn merge_counters(
    names: &[&'static str],
    client: &[(String, u64)],
    server: &[(String, u64)],
) -> Vec<(&'static str, u64, u64)> {
    names
        .iter()
        .filter_map(|&n| {
            let a = client.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| *v);
            let b = server.iter().find(|(k, _)| k == n).map_or(0, |(_, v)| *v);
            (a != 0 || b != 0).then_some((n, a, b))
        })
        .collect()
}

fn owned(c: Vec<(&'static str, u64)>) -> Vec<(String, u64)> {
    c.into_iter().map(|(n, v)| (n.to_string(), v)).collect()
}

/// Open the backend with the local address defaulting to the TCP
/// connection's.
fn open_backend(
    cfg: &PerfConfig,
    remote: &Remote,
    tcp_local: IpAddr,
    default_udp_port: u16,
) -> Result<Opened, PerfError> {
    let mut o = remote.backend.clone();
    if o.local_ip.is_none() {
        o.local_ip = Some(tcp_local);
    }
    o.udp_port = remote.udp_port.unwrap_or(default_udp_port);
    o.max_frame_len = engine::frame_cap(cfg);
    backend::open(cfg.backend, &o).map_err(|e| match cfg.backend {
        BackendKind::Dpdk if e.to_string() == backend::NO_DPDK => PerfError::Usage(e.to_string()),
        BackendKind::Mem | BackendKind::Pcap => PerfError::Usage(e.to_string()),
        _ => PerfError::Run(e.to_string()),
    })
}

fn transport_text(kind: BackendKind, local: &Endpoint, peer: &Endpoint, port: u16) -> String {
    let at = |e: &Endpoint| match e.udp {
        Some(a) => a.to_string(),
        None => format!("{} ({})", e.gid_ip(), fmt_mac(e.mac)),
    };
    format!(
        "{kind} {} <-> {} (TCP side channel port {port})",
        at(local),
        at(peer)
    )
}

impl Endpoint {
    fn gid_ip(&self) -> IpAddr {
        self.gid.to_ip()
    }
}

/// Run one end of a two-process test. `cfg` is this process's command
/// line (the server takes most of its parameters from the client's).
/// `listening` (server) is called with the TCP port once the side channel
/// listens (the real one when `remote.port` is 0).
///
/// # Errors
/// Usage errors (a backend that cannot join processes, a mismatched
/// server, a client's configuration beyond the limits), side-channel and
/// run failures, verification failures.
pub fn run_remote(
    cfg: &PerfConfig,
    remote: &Remote,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
    listening: Option<&mut dyn FnMut(u16)>,
) -> Result<PerfReport, PerfError> {
    check_remote(cfg)?;
    match &remote.role {
        RemoteRole::Server => run_server(cfg, remote, listening),
        RemoteRole::Client(host) => run_client(cfg, remote, host, progress),
    }
}

/// Whether `cfg` can run between two processes (the backend crosses
/// process boundaries).
///
/// # Errors
/// A [`PerfError::Usage`] saying what does not fit.
pub fn check_remote(cfg: &PerfConfig) -> Result<(), PerfError> {
    if matches!(cfg.backend, BackendKind::Mem | BackendKind::Pcap) {
        return Err(PerfError::Usage(format!(
            "--backend {} cannot join two processes; use udp, tap or dpdk",
            cfg.backend
        )));
    }
    if cfg.backend == BackendKind::Dpdk && cfg!(not(feature = "dpdk")) {
        return Err(PerfError::Usage(backend::NO_DPDK.into()));
    }
    Ok(())
}

fn listen(port: u16) -> Result<TcpListener, PerfError> {
    // Dual-stack where the system allows it, else IPv4 only.
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| PerfError::Run(format!("listening on TCP port {port}: {e}")))
}

/// The server's half of the handshake after the client's hello: its
/// configuration (checked against this server's and the limits before
/// anything else is read) and its endpoint.
fn server_handshake(
    ch: &mut Channel,
    own: &PerfConfig,
    deadline: std::time::Instant,
) -> Result<(PerfConfig, Endpoint), PerfError> {
    let hello = ch.expect_by("ROCE-PERF", deadline)?;
    if hello.rest != "1 client" {
        return Err(proto(format!(
            "{}: unexpected greeting `{}`",
            ch.peer, hello.rest
        )));
    }
    let cl = ch.expect_by("config", deadline)?;
    let cfg = apply_config(&cl, own).map_err(PerfError::Usage)?;
    let peer = read_endpoint(ch, cfg.qps, deadline)?;
    Ok((cfg, peer))
}

fn run_server(
    own: &PerfConfig,
    remote: &Remote,
    listening: Option<&mut dyn FnMut(u16)>,
) -> Result<PerfReport, PerfError> {
    // A --pcap path that cannot be written fails before anything else.
    let tap = engine::pcap_tap(own)?;
    // DPDK: start the port before listening, so that a net_memif server
    // socket exists by the time a client (which opens its port right after
    // connecting) starts its own; its link comes up with the client's.
    // Its MTU cannot wait for the client's config: it follows this
    // process's own --mtu (checked against the client's below).
    let mut early = if own.backend == BackendKind::Dpdk {
        let mut o = remote.backend.clone();
        o.max_frame_len = engine::frame_cap(own);
        Some(backend::open_dpdk_unlinked(&o).map_err(|e| {
            if e.to_string() == backend::NO_DPDK {
                PerfError::Usage(e.to_string())
            } else {
                PerfError::Run(e.to_string())
            }
        })?)
    } else {
        None
    };
    let listener = listen(remote.port)?;
    let port = listener
        .local_addr()
        .map_or(remote.port, |a: SocketAddr| a.port());
    if let Some(f) = listening {
        f(port);
    }
    let (stream, _) = listener
        .accept()
        .map_err(|e| PerfError::Run(format!("accepting a client: {e}")))?;
    drop(listener);
    let tcp_local = stream
        .local_addr()
        .map_err(io_err("TCP"))?
        .ip()
        .to_canonical();
    let mut ch = Channel::new(stream, "client")?;
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let refuse = |ch: &mut Channel, m: &str| {
        let _ = ch.send(&format!("ROCE-PERF 1 server\nerror {m}\n"));
    };
    let (cfg, peer) = match server_handshake(&mut ch, own, deadline) {
        Ok(x) => x,
        Err(e) => {
            refuse(&mut ch, &e.to_string());
            return Err(e);
        }
    };
    if let Some(o) = &early {
        if engine::frame_cap(&cfg) > o.io.max_frame_len() {
            let m = format!(
                "the server's port carries frames of at most {} bytes, too small for the \
                 client's --mtu {}: give the server the same --mtu",
                o.io.max_frame_len(),
                cfg.mtu.bytes()
            );
            refuse(&mut ch, &m);
            return Err(PerfError::Usage(m));
        }
    }
    let opened = match early
        .take()
        .map_or_else(|| open_backend(&cfg, remote, tcp_local, 4791), Ok)
    {
        Ok(o) => o,
        Err(e) => {
            refuse(&mut ch, &format!("server backend: {e}"));
            return Err(e);
        }
    };
    let psns = engine::initial_psns(&cfg);
    let dev = Device::new(engine::device_config(&cfg, opened.ip, opened.mac));
    let mut local = engine::build_local(
        &cfg,
        Role::Server,
        dev,
        psns.iter().map(|p| p[1]).collect(),
        0,
    )
    .map_err(PerfError::Run)?;
    let me = local.endpoint(opened.udp);
    if let (Some(routes), Some(to)) = (&opened.routes, peer.udp) {
        routes.set(peer.gid.to_ip(), to);
    }
    engine::connect_local(&mut local, &peer, &cfg).map_err(PerfError::Run)?;
    let io = engine::shaped(&cfg, 1, opened.io, tap.as_ref().map(|t| (t, Tee::Both)));
    let server = engine::server(&cfg, local, io).map_err(PerfError::Run)?;
    ch.send(&format!("ROCE-PERF 1 server\n{}", endpoint_text(&me)))?;

    let sh = Shared::new(std::time::Instant::now());
    let mut side = ch.w.try_clone().map_err(io_err("TCP"))?;
    // The client's report arrives on the side channel; it ends the run.
    // Meanwhile the reader checks that the client is alive: a frame or a
    // line from it at least every RUN_IDLE_TIMEOUT.
    let (out, client) = thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let peer = ch.peer.clone();
            let mut check = || {
                if sh.stopped() {
                    return Err(proto("the server stopped"));
                }
                let idle = sh.idle_for();
                if idle >= RUN_IDLE_TIMEOUT {
                    return Err(PerfError::Run(format!(
                        "{peer} sent nothing (no frame, no side-channel line) for {} s; giving up",
                        idle.as_secs()
                    )));
                }
                Ok(())
            };
            let r = read_client_report(&mut ch, &mut Wait::Check(&mut check));
            match &r {
                Ok(_) => sh.finish(),
                Err(_) => sh.abort(),
            }
            r
        });
        let out = server.run(&sh);
        if let Err(e) = &out {
            // Tell the client, and unblock the reader.
            let _ = side.write_all(format!("result fail server: {e}\nend\n").as_bytes());
            let _ = side.shutdown(std::net::Shutdown::Both);
        }
        let client = reader
            .join()
            .unwrap_or_else(|_| Err(proto("the reader thread panicked")));
        (out, client)
    });
    let out = match (out, client) {
        (Ok(o), Ok(c)) => (o, c),
        // The reader's reason (an idle or failed client) says more than the
        // server loop's "stopped".
        (Err(e), Err(c)) if e == engine::STOPPED_BY_PEER => return Err(c),
        (Err(e), _) => return Err(PerfError::Run(e)),
        (_, Err(e)) => return Err(e),
    };
    let (out, client) = out;
    let pcap_frames = engine::finish_pcap(tap.as_ref())?;
    let verified = engine::verify_server(&cfg, &out, client.ops);
    let server_counters = owned(engine::report_counters(&out.dev));
    let counters = counters_text(&server_counters);
    match &verified {
        Ok(v) => ch.send(&format!("result ok {v}\n{counters}end\n"))?,
        Err(e) => ch.send(&format!("result fail {e}\n{counters}end\n"))?,
    }
    let verified = verified?;
    Ok(PerfReport {
        transport: transport_text(cfg.backend, &me, &peer, port),
        side: Some("server".into()),
        iterations: client.iterations,
        total_ops: client.ops,
        figures: client.figures,
        retrans: merge_counters(super::RETRANS_COUNTERS, &client.counters, &server_counters),
        drops: merge_counters(super::DROP_COUNTERS, &client.counters, &server_counters),
        frames_sent: [0, out.sent],
        frames_dropped: [0, out.io.stats().dropped],
        pcap_frames,
        verified,
        notes: Vec::new(),
        config: cfg,
    })
}

/// What the client reports at the end.
struct ClientReport {
    ops: u64,
    iterations: u64,
    figures: Figures,
    counters: Vec<(String, u64)>,
}

fn read_client_report(ch: &mut Channel, wait: &mut Wait<'_>) -> Result<ClientReport, PerfError> {
    let l = ch.line_in(wait)?;
    match l.word.as_str() {
        "done" => {}
        "abort" => return Err(PerfError::Run(format!("client: {}", l.rest))),
        w => return Err(proto(format!("expected `done`, got `{w}`"))),
    }
    let ops = l.num("ops")?;
    let iterations = l.num("iterations")?;
    let figures = parse_figures(&ch.line_in(wait)?)?;
    let counters = read_counters(ch, wait)?;
    Ok(ClientReport {
        ops,
        iterations,
        figures,
        counters,
    })
}

fn connect(host: &str, port: u16) -> Result<TcpStream, PerfError> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| PerfError::Usage(format!("--client {host}: {e}")))?
        .collect();
    let start = std::time::Instant::now();
    loop {
        let mut last = None;
        for a in &addrs {
            match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        if start.elapsed() >= CONNECT_PATIENCE {
            return Err(PerfError::Run(format!(
                "cannot reach a server at {host} TCP port {port}: {}",
                last.map_or("no address".to_string(), |e| e.to_string())
            )));
        }
        thread::sleep(Duration::from_millis(100));
    }
}

fn run_client(
    cfg: &PerfConfig,
    remote: &Remote,
    host: &str,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    let tap = engine::pcap_tap(cfg)?;
    let stream = connect(host, remote.port)?;
    let tcp_local = stream
        .local_addr()
        .map_err(io_err("TCP"))?
        .ip()
        .to_canonical();
    let mut ch = Channel::new(stream, "server")?;
    let opened = open_backend(cfg, remote, tcp_local, 0)?;
    let psns = engine::initial_psns(cfg);
    let dev = Device::new(engine::device_config(cfg, opened.ip, opened.mac));
    let mut local = engine::build_local(
        cfg,
        Role::Client,
        dev,
        psns.iter().map(|p| p[0]).collect(),
        0,
    )
    .map_err(PerfError::Run)?;
    let me = local.endpoint(opened.udp);
    ch.send(&format!(
        "ROCE-PERF 1 client\n{}{}",
        config_text(cfg),
        endpoint_text(&me)
    ))?;
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let hello = ch.expect_by("ROCE-PERF", deadline)?;
    if hello.rest != "1 server" {
        return Err(proto(format!(
            "{}: unexpected greeting `{}`",
            ch.peer, hello.rest
        )));
    }
    let peer = read_endpoint(&mut ch, cfg.qps, deadline)?;
    if let (Some(routes), Some(to)) = (&opened.routes, peer.udp) {
        routes.set(peer.gid.to_ip(), to);
    }
    engine::connect_local(&mut local, &peer, cfg).map_err(PerfError::Run)?;
    let io = engine::shaped(cfg, 0, opened.io, tap.as_ref().map(|t| (t, Tee::Both)));
    let client = engine::client(cfg, local, &peer, io).map_err(PerfError::Run)?;
    let sh = Shared::new(std::time::Instant::now());
    let out = engine::with_progress(&sh, "roce-perf-client", progress, || client.run(&sh));
    let mut out = match out {
        Ok(o) => o,
        Err(e) => {
            let _ = ch.send(&format!("abort {e}\n"));
            return Err(PerfError::Run(e));
        }
    };
    let pcap_frames = engine::finish_pcap(tap.as_ref())?;
    let own_check = match engine::verify_client(cfg, &out) {
        Ok(v) => v,
        Err(e) => {
            let _ = ch.send(&format!("abort client verification: {e}\n"));
            return Err(e);
        }
    };
    let q = u64::from(cfg.qps);
    let notes = out.notes(cfg);
    let counted = out.counted().map(|(f, l, n, c)| (f, l, n, c.to_vec()));
    let (tposted, tcompleted, samples) = out.timestamps();
    let (tposted, tcompleted) = (tposted.to_vec(), tcompleted.to_vec());
    let counted = counted
        .as_ref()
        .map(|(f, l, n, c)| (*f, *l, *n, c.as_slice()));
    let figures = engine::figures(cfg, &tposted, &tcompleted, samples, counted);
    let client_counters = owned(engine::report_counters(&out.dev));
    let counters = counters_text(&client_counters);
    ch.send(&format!(
        "done ops={} iterations={}\n{}{counters}end\n",
        out.total_done,
        out.total_done / q,
        figures_text(&figures)
    ))?;
    // The server verifies its memory, then answers.
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let r = ch.expect_by("result", deadline)?;
    let server_counters = read_counters(&mut ch, &mut Wait::Deadline(deadline, "counters"))?;
    let (status, text) = r.rest.split_once(' ').unwrap_or((&r.rest, ""));
    if status != "ok" {
        return Err(PerfError::Verify(format!("server: {text}")));
    }
    let verified = match own_check {
        Some(v) => v,
        None => format!("by the server: {text}"),
    };
    Ok(PerfReport {
        transport: transport_text(cfg.backend, &me, &peer, remote.port),
        side: Some("client".into()),
        iterations: out.total_done / q,
        total_ops: out.total_done,
        figures,
        retrans: merge_counters(super::RETRANS_COUNTERS, &client_counters, &server_counters),
        drops: merge_counters(super::DROP_COUNTERS, &client_counters, &server_counters),
        frames_sent: [out.sent, 0],
        frames_dropped: [out.io.stats().dropped, 0],
        pcap_frames,
        verified,
        notes,
        config: cfg.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Op;
    use super::*;

    #[test]
    fn config_line_round_trips() {
        let o = super::super::PerfOptions {
            op: Some(Op::Send),
            size: Some(4096),
            iters: Some(77),
            qps: Some(3),
            seed: Some(9),
            backend: Some(BackendKind::Udp),
            ..Default::default()
        };
        let c = PerfConfig::from_options(&o).unwrap();
        let t = config_text(&c);
        let back = apply_config(&Line::parse(&t), &c).unwrap();
        assert_eq!(back, c);
        let other = PerfConfig {
            op: Op::Write,
            ..c.clone()
        };
        assert!(apply_config(&Line::parse(&t), &other).is_err());
    }

    #[test]
    fn macs_and_lines() {
        let m = [0x02, 0, 0x7f, 0, 0, 1];
        assert_eq!(fmt_mac(m), "02:00:7f:00:00:01");
        assert_eq!(parse_mac("02:00:7f:00:00:01"), Some(m));
        assert_eq!(parse_mac("02:00:7f:00:00"), None);
        let l = Line::parse("qp qpn=0x000011 psn=0x5b0a3c\n");
        assert_eq!(l.word, "qp");
        assert_eq!(l.hex("qpn").unwrap(), 0x11);
        assert_eq!(l.hex("psn").unwrap(), 0x5b0a3c);
        assert!(l.hex("rkey").is_err());
    }
}
