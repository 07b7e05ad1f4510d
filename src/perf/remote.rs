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
use crate::backend::{self, BackendKind, BackendOptions, Opened};

/// perftest's default TCP port for the side channel.
pub const DEFAULT_PORT: u16 = 18515;

/// How long the client keeps trying to reach the server, and how long
/// either side waits for the other's parameters.
const CONNECT_PATIENCE: Duration = Duration::from_secs(10);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

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

struct Channel {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Channel {
    fn new(s: TcpStream) -> Result<Channel, PerfError> {
        let w = s.try_clone().map_err(io_err("TCP"))?;
        let _ = s.set_nodelay(true);
        Ok(Channel {
            r: BufReader::new(s),
            w,
        })
    }
    fn send(&mut self, text: &str) -> Result<(), PerfError> {
        self.w
            .write_all(text.as_bytes())
            .and_then(|_| self.w.flush())
            .map_err(io_err("sending"))
    }
    fn line(&mut self) -> Result<Line, PerfError> {
        let mut s = String::new();
        let n = self.r.read_line(&mut s).map_err(io_err("receiving"))?;
        if n == 0 {
            return Err(proto("the peer closed the connection"));
        }
        Ok(Line::parse(&s))
    }
    fn expect(&mut self, word: &str) -> Result<Line, PerfError> {
        let l = self.line()?;
        if l.word == "error" {
            return Err(PerfError::Run(format!("the peer refused: {}", l.rest)));
        }
        if l.word != word {
            return Err(proto(format!("expected `{word}`, got `{}`", l.word)));
        }
        Ok(l)
    }
    fn set_timeout(&self, t: Option<Duration>) {
        let _ = self.r.get_ref().set_read_timeout(t);
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

fn read_endpoint(ch: &mut Channel) -> Result<Endpoint, PerfError> {
    let l = ch.expect("endpoint")?;
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
        let l = ch.line()?;
        match l.word.as_str() {
            "qp" => e.qps.push((l.hex("qpn")? as u32, l.hex("psn")? as u32)),
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
    PerfConfig::from_options(&o).map_err(|e| e.to_string())
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

/// Read `counter` lines up to `end`.
fn read_counters(ch: &mut Channel) -> Result<Vec<(String, u64)>, PerfError> {
    let mut out = Vec::new();
    loop {
        let l = ch.line()?;
        match l.word.as_str() {
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

/// `(name, client, server)` rows of the counters not zero on either side.
fn merge_counters(
    client: &[(String, u64)],
    server: &[(String, u64)],
) -> Vec<(&'static str, u64, u64)> {
    super::RETRANS_COUNTERS
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
///
/// # Errors
/// Usage errors (a backend that cannot join processes, a mismatched
/// server), side-channel and run failures, verification failures.
pub fn run_remote(
    cfg: &PerfConfig,
    remote: &Remote,
    progress: Option<&mut dyn FnMut(u64, Duration)>,
) -> Result<PerfReport, PerfError> {
    check_remote(cfg)?;
    match &remote.role {
        RemoteRole::Server => run_server(cfg, remote),
        RemoteRole::Client(host) => run_client(cfg, remote, host, progress),
    }
}

/// Whether `cfg` can run between two processes (the backend crosses
/// process boundaries; no `--loss`, no `--pcap`).
///
/// # Errors
/// A [`PerfError::Usage`] saying what does not fit.
pub fn check_remote(cfg: &PerfConfig) -> Result<(), PerfError> {
    if cfg.loss > 0.0 {
        return Err(PerfError::Usage("--loss needs the mem backend".into()));
    }
    if cfg.pcap.is_some() {
        return Err(PerfError::Usage("--pcap needs the mem backend".into()));
    }
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

fn run_server(own: &PerfConfig, remote: &Remote) -> Result<PerfReport, PerfError> {
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
    let (stream, _) = listener
        .accept()
        .map_err(|e| PerfError::Run(format!("accepting a client: {e}")))?;
    let tcp_local = stream
        .local_addr()
        .map_err(io_err("TCP"))?
        .ip()
        .to_canonical();
    let mut ch = Channel::new(stream)?;
    ch.set_timeout(Some(HANDSHAKE_TIMEOUT));
    let hello = ch.expect("ROCE-PERF")?;
    if hello.rest != "1 client" {
        return Err(proto(format!("unexpected greeting `{}`", hello.rest)));
    }
    let cl = ch.expect("config")?;
    let peer = read_endpoint(&mut ch)?;
    let cfg = match apply_config(&cl, own) {
        Ok(c) => c,
        Err(m) => {
            let _ = ch.send(&format!("ROCE-PERF 1 server\nerror {m}\n"));
            return Err(PerfError::Usage(m));
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
            let _ = ch.send(&format!("ROCE-PERF 1 server\nerror {m}\n"));
            return Err(PerfError::Usage(m));
        }
    }
    let opened = match early
        .take()
        .map_or_else(|| open_backend(&cfg, remote, tcp_local, 4791), Ok)
    {
        Ok(o) => o,
        Err(e) => {
            let _ = ch.send(&format!("ROCE-PERF 1 server\nerror server backend: {e}\n"));
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
    let server = engine::server(&cfg, local, opened.io).map_err(PerfError::Run)?;
    ch.send(&format!("ROCE-PERF 1 server\n{}", endpoint_text(&me)))?;
    ch.set_timeout(None);

    let sh = Shared::new(std::time::Instant::now());
    let mut side = ch.w.try_clone().map_err(io_err("TCP"))?;
    // The client's report arrives on the side channel; it ends the run.
    let (out, client) = thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let r = read_client_report(&mut ch);
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
        (Err(e), _) => return Err(PerfError::Run(e)),
        (_, Err(e)) => return Err(e),
    };
    let (out, client) = out;
    let verified = engine::verify_server(&cfg, &out, client.ops);
    let server_counters = owned(engine::retrans_counters(&out.dev));
    let counters = counters_text(&server_counters);
    match &verified {
        Ok(v) => ch.send(&format!("result ok {v}\n{counters}end\n"))?,
        Err(e) => ch.send(&format!("result fail {e}\n{counters}end\n"))?,
    }
    let verified = verified?;
    Ok(PerfReport {
        transport: transport_text(cfg.backend, &me, &peer, remote.port),
        side: Some("server".into()),
        iterations: client.iterations,
        total_ops: client.ops,
        figures: client.figures,
        retrans: merge_counters(&client.counters, &server_counters),
        frames_sent: [0, out.sent],
        frames_dropped: [0, 0],
        pcap_frames: 0,
        verified,
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

fn read_client_report(ch: &mut Channel) -> Result<ClientReport, PerfError> {
    let l = ch.line()?;
    match l.word.as_str() {
        "done" => {}
        "abort" => return Err(PerfError::Run(format!("client: {}", l.rest))),
        w => return Err(proto(format!("expected `done`, got `{w}`"))),
    }
    let ops = l.num("ops")?;
    let iterations = l.num("iterations")?;
    let figures = parse_figures(&ch.line()?)?;
    let counters = read_counters(ch)?;
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
    let stream = connect(host, remote.port)?;
    let tcp_local = stream
        .local_addr()
        .map_err(io_err("TCP"))?
        .ip()
        .to_canonical();
    let mut ch = Channel::new(stream)?;
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
    ch.set_timeout(Some(HANDSHAKE_TIMEOUT));
    let hello = ch.expect("ROCE-PERF")?;
    if hello.rest != "1 server" {
        return Err(proto(format!("unexpected greeting `{}`", hello.rest)));
    }
    let peer = read_endpoint(&mut ch)?;
    if let (Some(routes), Some(to)) = (&opened.routes, peer.udp) {
        routes.set(peer.gid.to_ip(), to);
    }
    engine::connect_local(&mut local, &peer, cfg).map_err(PerfError::Run)?;
    let client = engine::client(cfg, local, &peer, opened.io).map_err(PerfError::Run)?;
    let sh = Shared::new(std::time::Instant::now());
    let out = engine::with_progress(&sh, "roce-perf-client", progress, || client.run(&sh));
    let mut out = match out {
        Ok(o) => o,
        Err(e) => {
            let _ = ch.send(&format!("abort {e}\n"));
            return Err(PerfError::Run(e));
        }
    };
    let own_check = match engine::verify_client(cfg, &out) {
        Ok(v) => v,
        Err(e) => {
            let _ = ch.send(&format!("abort client verification: {e}\n"));
            return Err(e);
        }
    };
    let q = u64::from(cfg.qps);
    let counted = out.counted().map(|(f, l, n, c)| (f, l, n, c.to_vec()));
    let (tposted, tcompleted, samples) = out.timestamps();
    let (tposted, tcompleted) = (tposted.to_vec(), tcompleted.to_vec());
    let counted = counted
        .as_ref()
        .map(|(f, l, n, c)| (*f, *l, *n, c.as_slice()));
    let figures = engine::figures(cfg, &tposted, &tcompleted, samples, counted);
    let client_counters = owned(engine::retrans_counters(&out.dev));
    let counters = counters_text(&client_counters);
    ch.send(&format!(
        "done ops={} iterations={}\n{}{counters}end\n",
        out.total_done,
        out.total_done / q,
        figures_text(&figures)
    ))?;
    let r = ch.expect("result")?;
    let server_counters = read_counters(&mut ch)?;
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
        retrans: merge_counters(&client_counters, &server_counters),
        frames_sent: [out.sent, 0],
        frames_dropped: [0, 0],
        pcap_frames: 0,
        verified,
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
