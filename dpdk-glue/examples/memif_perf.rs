//! 64-byte RDMA WRITE message rate between two processes over a `net_memif`
//! pair, with the whole RoCEv2 stack (`roce_stack::verbs::Device`) on a
//! `DpdkPort` at each end.
//!
//! ```text
//! memif_perf --role server --socket /tmp/x/memif.sock [--lcore 0] [--seconds 10]
//! memif_perf --role client --socket /tmp/x/memif.sock [--lcore 1] [--seconds 10]
//!            [--window 512] [--size 64] [--warmup 2]
//! ```
//!
//! The QP connection is fixed on both sides (no side channel): client =
//! `roce_stack::testing::test_config(0)` with QPN 0x100, server =
//! `test_config(1)` with QPN 0x200 and an MR with R_Key 0x5eed0001 at IOVA
//! 0x1000_0000. The client keeps `--window` signaled WRITEs outstanding and
//! prints completions per second; the server runs the responder and exits
//! after `--seconds` of receiving (or 3 s idle once traffic stopped). The
//! last line of each is `RESULT role=... key=value ...`. Needs root.

use std::time::{Duration, Instant};

use dpdk_glue::{DpdkPort, Eal, Mempool, MonotonicClock, Port, DEFAULT_DATA_ROOM};
use roce_io::pump;
use roce_stack::testing::test_config;
use roce_stack::transport::av::AddressVector;
use roce_stack::verbs::{
    AccessFlags, Device, Mtu, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, SendWr, Sge,
    Wc, WcStatus, WrOpcode,
};

const QPN: [u32; 2] = [0x100, 0x200];
const SQ_PSN: [u32; 2] = [0x1000, 0x2000];
const SERVER_RKEY: u32 = 0x5eed_0001;
const SERVER_IOVA: u64 = 0x1000_0000;
const SERVER_MR_LEN: usize = 1 << 20;

struct Opts {
    server: bool,
    both: bool,
    socket: String,
    lcore: u32,
    seconds: f64,
    warmup: f64,
    window: usize,
    size: u32,
    burst: usize,
    file_prefix: String,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        server: false,
        both: false,
        socket: String::new(),
        lcore: 0,
        seconds: 10.0,
        warmup: 2.0,
        window: 512,
        size: 64,
        burst: 64,
        file_prefix: format!("memif-perf-{}", std::process::id()),
    };
    let mut role = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--role" => role = Some(val("--role")?),
            "--socket" => o.socket = val("--socket")?,
            "--lcore" => {
                o.lcore = val("--lcore")?
                    .parse()
                    .map_err(|e| format!("--lcore: {e}"))?
            }
            "--seconds" => {
                o.seconds = val("--seconds")?
                    .parse()
                    .map_err(|e| format!("--seconds: {e}"))?
            }
            "--warmup" => {
                o.warmup = val("--warmup")?
                    .parse()
                    .map_err(|e| format!("--warmup: {e}"))?
            }
            "--window" => {
                o.window = val("--window")?
                    .parse()
                    .map_err(|e| format!("--window: {e}"))?
            }
            "--size" => o.size = val("--size")?.parse().map_err(|e| format!("--size: {e}"))?,
            "--burst" => {
                o.burst = val("--burst")?
                    .parse()
                    .map_err(|e| format!("--burst: {e}"))?
            }
            "--file-prefix" => o.file_prefix = val("--file-prefix")?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    (o.server, o.both) = match role.as_deref() {
        Some("server") => (true, false),
        Some("client") => (false, false),
        Some("both") => (false, true),
        _ => return Err("--role server|client|both is required".to_string()),
    };
    if o.socket.is_empty() {
        return Err("--socket PATH is required".to_string());
    }
    if o.size as usize > SERVER_MR_LEN || o.window == 0 {
        return Err("bad --size or --window".to_string());
    }
    Ok(o)
}

/// Bring `qpn` of `dev` (side `me`) to RTS, addressed to the other side.
fn setup_qp(dev: &mut Device, me: usize, cq: u32, pd: u32, window: u32) -> Result<u32, String> {
    let peer = 1 - me;
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: window.max(16),
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        sq_sig_all: false,
    };
    let qpn = dev
        .create_qp_with_qpn(pd, &init, QPN[me])
        .map_err(|e| format!("create_qp: {e:?}"))?;
    let pc = test_config(peer as u8, 1500);
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        ..QpAttr::default()
    };
    let m =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    dev.modify_qp(qpn, &a, m)
        .map_err(|e| format!("INIT: {e:?}"))?;
    a.qp_state = QpState::Rtr;
    a.ah_attr = AddressVector {
        dgid: pc.gids[0],
        dmac: pc.mac,
        hop_limit: 64,
        ..AddressVector::default()
    };
    a.path_mtu = Mtu::Mtu1024;
    a.dest_qp_num = QPN[peer];
    a.rq_psn = SQ_PSN[peer];
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    dev.modify_qp(qpn, &a, m)
        .map_err(|e| format!("RTR: {e:?}"))?;
    a.qp_state = QpState::Rts;
    a.sq_psn = SQ_PSN[me];
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    let m = QpAttrMask::STATE
        | QpAttrMask::TIMEOUT
        | QpAttrMask::RETRY_CNT
        | QpAttrMask::RNR_RETRY
        | QpAttrMask::SQ_PSN
        | QpAttrMask::MAX_QP_RD_ATOMIC;
    dev.modify_qp(qpn, &a, m)
        .map_err(|e| format!("RTS: {e:?}"))?;
    Ok(qpn)
}

fn run(o: &Opts) -> Result<(), String> {
    let role = if o.server { "server" } else { "client" };
    let vdev = if o.both {
        format!(
            "--vdev=net_memif0,role=server,id=0,socket={s},socket-abstract=no \
             --vdev=net_memif1,role=client,id=0,socket={s},socket-abstract=no",
            s = o.socket
        )
    } else {
        format!(
            "--vdev=net_memif0,role={role},id=0,socket={},socket-abstract=no",
            o.socket
        )
    };
    let args: Vec<String> = [
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level=*:error",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("-l{}", o.lcore),
        format!("--file-prefix={}", o.file_prefix),
    ])
    .chain(vdev.split(' ').map(str::to_string))
    .collect();
    let eal = Eal::init(&args).map_err(|e| e.to_string())?;
    if o.both {
        return both(o, &eal);
    }
    let id = eal.port_by_name("net_memif0").map_err(|e| e.to_string())?;
    let pool = Mempool::new("perf", 8191, 256, DEFAULT_DATA_ROOM).map_err(|e| e.to_string())?;
    let port = Port::configure(id, 1, 1, &pool, 1500).map_err(|e| e.to_string())?;
    let mut io = DpdkPort::new(port).map_err(|e| e.to_string())?;
    let link_wait = Duration::from_secs(30);
    io.port()
        .wait_link_up(link_wait)
        .map_err(|e| format!("{e} (is the other side running on {}?)", o.socket))?;

    let me = usize::from(o.server);
    let mut dev = Device::new(test_config(me as u8, 1500));
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(o.window * 2 + 64);
    let qpn = setup_qp(&mut dev, me, cq, pd, o.window as u32)?;
    let clock = MonotonicClock::new();
    if o.server {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        dev.reg_mr_with_rkey(pd, vec![0; SERVER_MR_LEN], SERVER_IOVA, access, SERVER_RKEY)
            .map_err(|e| format!("reg_mr: {e:?}"))?;
        serve(o, &mut dev, &mut io, &clock)
    } else {
        let lkey = dev
            .reg_mr(pd, vec![0xAB; 65536], 0, AccessFlags::LOCAL_WRITE)
            .map_err(|e| format!("reg_mr: {e:?}"))?
            .lkey;
        client(o, &mut dev, &mut io, &clock, qpn, cq, lkey)
    }
}

/// Server and client in one process and one loop (one core): the stack's
/// own cost per message without cross-process scheduling.
fn both(o: &Opts, eal: &Eal) -> Result<(), String> {
    let mut io = Vec::new();
    for (i, name) in ["net_memif0", "net_memif1"].iter().enumerate() {
        let id = eal.port_by_name(name).map_err(|e| e.to_string())?;
        let pool = Mempool::new(&format!("perf{i}"), 8191, 256, DEFAULT_DATA_ROOM)
            .map_err(|e| e.to_string())?;
        let port = Port::configure(id, 1, 1, &pool, 1500).map_err(|e| e.to_string())?;
        io.push(DpdkPort::new(port).map_err(|e| e.to_string())?);
    }
    for p in &io {
        p.port()
            .wait_link_up(Duration::from_secs(30))
            .map_err(|e| e.to_string())?;
    }
    let mut server = Device::new(test_config(1, 1500));
    let pd = server.alloc_pd();
    let scq = server.create_cq(64);
    setup_qp(&mut server, 1, scq, pd, 16)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    server
        .reg_mr_with_rkey(pd, vec![0; SERVER_MR_LEN], SERVER_IOVA, access, SERVER_RKEY)
        .map_err(|e| format!("reg_mr: {e:?}"))?;
    let mut client = Device::new(test_config(0, 1500));
    let pd = client.alloc_pd();
    let cq = client.create_cq(o.window * 2 + 64);
    let qpn = setup_qp(&mut client, 0, cq, pd, o.window as u32)?;
    let lkey = client
        .reg_mr(pd, vec![0xAB; 65536], 0, AccessFlags::LOCAL_WRITE)
        .map_err(|e| format!("reg_mr: {e:?}"))?
        .lkey;
    let clock = MonotonicClock::new();
    let (ci, si) = io.split_at_mut(1);
    let (cio, sio) = (&mut ci[0], &mut si[0]);
    let mut step = |dev: &mut Device, io: &mut DpdkPort| -> Result<(), String> {
        pump(&mut server, sio, clock.now(), o.burst).map_err(|e| e.to_string())?;
        pump(dev, io, clock.now(), o.burst)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    client_loop(o, &mut client, cio, qpn, cq, lkey, &mut step)
}

fn serve(
    o: &Opts,
    dev: &mut Device,
    io: &mut DpdkPort,
    clock: &MonotonicClock,
) -> Result<(), String> {
    let mut first: Option<Instant> = None;
    let mut last_rx = Instant::now();
    let start = Instant::now();
    loop {
        let s = pump(dev, io, clock.now(), o.burst).map_err(|e| e.to_string())?;
        if s.rx > 0 {
            last_rx = Instant::now();
            first.get_or_insert(last_rx);
        }
        let idle = last_rx.elapsed() > Duration::from_secs(3);
        match first {
            Some(f) if f.elapsed().as_secs_f64() > o.seconds + o.warmup + 5.0 || idle => break,
            None if start.elapsed() > Duration::from_secs(120) => {
                return Err("no traffic from the client in 120 s".to_string())
            }
            _ => {}
        }
    }
    let c = dev.counters();
    println!(
        "RESULT role=server rcvd_pkts={} sent_pkts={} rx_write_requests={} duplicate_request={} \
         out_of_sequence={} tx_ring_full={}",
        c.rcvd_pkts,
        c.sent_pkts,
        c.rx_write_requests,
        c.duplicate_request,
        c.out_of_sequence,
        io.counters().tx_ring_full
    );
    Ok(())
}

fn client(
    o: &Opts,
    dev: &mut Device,
    io: &mut DpdkPort,
    clock: &MonotonicClock,
    qpn: u32,
    cq: u32,
    lkey: u32,
) -> Result<(), String> {
    let mut step = |dev: &mut Device, io: &mut DpdkPort| -> Result<(), String> {
        pump(dev, io, clock.now(), o.burst)
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    client_loop(o, dev, io, qpn, cq, lkey, &mut step)
}

/// Keep `--window` WRITEs outstanding, counting completions per second.
fn client_loop(
    o: &Opts,
    dev: &mut Device,
    io: &mut DpdkPort,
    qpn: u32,
    cq: u32,
    lkey: u32,
    step: &mut dyn FnMut(&mut Device, &mut DpdkPort) -> Result<(), String>,
) -> Result<(), String> {
    let mut wcs = vec![Wc::EMPTY; 256];
    let mut outstanding = 0usize;
    let mut posted: u64 = 0;
    let mut completed: u64 = 0;
    let slots = (SERVER_MR_LEN / o.size.max(1) as usize).max(1) as u64;
    let start = Instant::now();
    let warm_end = start + Duration::from_secs_f64(o.warmup);
    let end = warm_end + Duration::from_secs_f64(o.seconds);
    let mut measured_from: Option<(Instant, u64)> = None;
    let mut tick = start;
    let mut tick_done = 0u64;
    loop {
        while outstanding < o.window {
            let sge = [Sge {
                addr: 0,
                length: o.size,
                lkey,
            }];
            let mut wr = SendWr::new(posted, WrOpcode::RdmaWrite, &sge);
            wr.remote_addr = SERVER_IOVA + (posted % slots) * u64::from(o.size);
            wr.rkey = SERVER_RKEY;
            dev.post_send(qpn, &wr)
                .map_err(|e| format!("post_send: {e:?}"))?;
            posted += 1;
            outstanding += 1;
        }
        step(dev, io)?;
        let n = dev.poll_cq(cq, &mut wcs);
        for w in &wcs[..n] {
            if w.status != WcStatus::Success {
                return Err(format!(
                    "completion error: {w:?} (counters {:?})",
                    dev.counters()
                ));
            }
        }
        outstanding -= n;
        completed += n as u64;
        let now = Instant::now();
        if measured_from.is_none() && now >= warm_end {
            measured_from = Some((now, completed));
        }
        if now.duration_since(tick) >= Duration::from_secs(1) {
            let rate = (completed - tick_done) as f64 / now.duration_since(tick).as_secs_f64();
            let c = dev.counters();
            eprintln!(
                "client: {:.3} Mmsg/s (retries so far {})",
                rate / 1e6,
                c.local_ack_timeout_err + c.packet_seq_err + c.implied_nak_seq_err
            );
            tick = now;
            tick_done = completed;
        }
        if now >= end {
            break;
        }
    }
    let (t0, c0) = measured_from.unwrap_or((start, 0));
    let secs = t0.elapsed().as_secs_f64();
    let msgs = completed - c0;
    let c = dev.counters();
    println!(
        "RESULT role={} size={} window={} seconds={secs:.3} msgs={msgs} mpps={:.4} \
         sent_pkts={} rcvd_pkts={} retries={} tx_ring_full={}",
        if o.both { "both" } else { "client" },
        o.size,
        o.window,
        msgs as f64 / secs / 1e6,
        c.sent_pkts,
        c.rcvd_pkts,
        c.local_ack_timeout_err + c.packet_seq_err + c.implied_nak_seq_err,
        io.counters().tx_ring_full
    );
    Ok(())
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("memif_perf: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o) {
        eprintln!("memif_perf: {e}");
        std::process::exit(1);
    }
}
