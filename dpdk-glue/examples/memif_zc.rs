//! Goodput of large RDMA WRITEs over a `net_memif` pair with zero-copy
//! transmit (`pump_gather`: each data packet's payload is an mbuf attached to
//! the shared MR, `rte_pktmbuf_attach_extbuf`) against copying (`pump`: the
//! payload is copied into the mbuf), in one process and one loop (both
//! devices on one core, so the figure is the whole stack's cost per byte,
//! receiver included).
//!
//! The two modes alternate in blocks within one run (copy, zero-copy, copy,
//! ...), from the same devices, QPs and MRs, so that the machine's noise
//! hits both alike; per-block goodput and the median per mode are printed,
//! the last line being `RESULT key=value ...`.
//!
//! ```text
//! memif_zc [--size 65536] [--mtu 1500] [--window 4] [--blocks 10]
//!          [--block-seconds 0.5] [--region-mib 16] [--lcore 0] [--zc-min 1024]
//! ```
//!
//! `net_memif` in DPDK 22.11 accepts frames of at most 1518 bytes, so the
//! path MTU is 1024 and the sender's `zero_copy_min_bytes` is `--zc-min`
//! (default 1024, so that every full packet goes by reference).
//! Needs root (EAL).

use std::sync::Arc;
use std::time::{Duration, Instant};

use dpdk_glue::{DpdkPort, Eal, Mempool, MonotonicClock, Port, DEFAULT_DATA_ROOM};
use roce_io::{pump, pump_gather};
use roce_stack::testing::{connect, test_config, ConnOpts, Faults, Pair};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, Mtu, SendWr, Sge, Wc, WcStatus, WrOpcode,
};

struct Opts {
    size: usize,
    mtu: u16,
    window: usize,
    blocks: usize,
    block_seconds: f64,
    region_mib: usize,
    lcore: u32,
    zc_min: usize,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        size: 65536,
        mtu: 1500,
        window: 4,
        blocks: 10,
        block_seconds: 0.5,
        region_mib: 16,
        lcore: 0,
        zc_min: 1024,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().ok_or(format!("{a} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{a}: {e}");
        match a.as_str() {
            "--size" => o.size = v.parse().map_err(|e| bad(&e))?,
            "--mtu" => o.mtu = v.parse().map_err(|e| bad(&e))?,
            "--window" => o.window = v.parse().map_err(|e| bad(&e))?,
            "--blocks" => o.blocks = v.parse().map_err(|e| bad(&e))?,
            "--block-seconds" => o.block_seconds = v.parse().map_err(|e| bad(&e))?,
            "--region-mib" => o.region_mib = v.parse().map_err(|e| bad(&e))?,
            "--lcore" => o.lcore = v.parse().map_err(|e| bad(&e))?,
            "--zc-min" => o.zc_min = v.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.size == 0 || o.window == 0 || o.size > (o.region_mib << 20) {
        return Err("bad --size, --window or --region-mib".to_string());
    }
    Ok(o)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn run(o: &Opts) -> Result<(), String> {
    let pid = std::process::id();
    let args: Vec<String> = [
        "--no-huge",
        "-m",
        "512",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level=*:error",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("-l{}", o.lcore),
        format!("--file-prefix=memif-zc-{pid}"),
    ])
    .collect();
    let eal = Eal::init(&args).map_err(|e| e.to_string())?;
    let dir = std::env::temp_dir().join(format!("memif-zc-{pid}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let sock = dir.join("memif.sock");
    let room = DEFAULT_DATA_ROOM.max(
        u16::try_from(usize::from(o.mtu) + dpdk_glue::FRAME_OVERHEAD + dpdk_glue::HEADROOM)
            .unwrap_or(u16::MAX),
    );
    let mut io = Vec::new();
    for (i, role) in ["server", "client"].iter().enumerate() {
        let devargs = format!(
            "net_memif{i},role={role},id=0,socket={},socket-abstract=no",
            sock.display()
        );
        let id = eal.probe_vdev(&devargs).map_err(|e| e.to_string())?;
        let pool = Mempool::new(&format!("zc{i}"), 8191, 256, room).map_err(|e| e.to_string())?;
        let port = Port::configure(id, 1, 1, &pool, o.mtu).map_err(|e| e.to_string())?;
        io.push(DpdkPort::new(port).map_err(|e| e.to_string())?);
    }
    for p in &io {
        p.port()
            .wait_link_up(Duration::from_secs(30))
            .map_err(|e| e.to_string())?;
    }
    let netdev = usize::from(o.mtu);
    let dev0 = Device::new(DeviceConfig {
        zero_copy_min_bytes: o.zc_min,
        ..test_config(0, netdev)
    });
    let mut p = Pair::with_devices(
        [dev0, Device::new(test_config(1, netdev))],
        Faults::default(),
        1,
    );
    let mtu = if netdev >= 4096 + 80 {
        Mtu::Mtu4096
    } else {
        Mtu::Mtu1024
    };
    let c = connect(
        &mut p,
        &ConnOpts {
            mtu,
            ..ConnOpts::default()
        },
    );
    let region = o.region_mib << 20;
    let mem: Arc<[u8]> = (0..region).map(|i| (i % 251) as u8).collect();
    let a = p.dev[0]
        .reg_mr_shared(c.pd[0], Arc::clone(&mem), 0, AccessFlags::empty())
        .map_err(|e| format!("{e:?}"))?;
    let b = p.dev[1]
        .reg_mr(
            c.pd[1],
            vec![0; region],
            0,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .map_err(|e| format!("{e:?}"))?;
    let Pair { mut dev, .. } = p;
    let mut io: [DpdkPort; 2] = io.try_into().map_err(|_| "two ports".to_string())?;
    let clock = MonotonicClock::new();
    let slots = (region / o.size).max(1);
    let mut next = 0usize;
    let mut wcs = [Wc::EMPTY; 64];
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    println!(
        "size={} mtu={} pmtu={} window={} blocks={}x{}s (alternating copy / zero-copy)",
        o.size,
        o.mtu,
        mtu.bytes(),
        o.window,
        o.blocks,
        o.block_seconds
    );
    // One warm-up block of each mode, then the measured ones.
    for block in 0..2 * (o.blocks + 1) {
        let zc = block % 2 == 1;
        let start = Instant::now();
        let len = Duration::from_secs_f64(o.block_seconds);
        let mut outstanding = 0usize;
        let mut done = 0u64;
        let mut posting = true;
        while posting || outstanding > 0 {
            if posting && start.elapsed() >= len {
                posting = false;
            }
            while posting && outstanding < o.window {
                let off = (next % slots) * o.size;
                next += 1;
                let sge = [Sge {
                    addr: off as u64,
                    length: o.size as u32,
                    lkey: a.lkey,
                }];
                let mut wr = SendWr::new(next as u64, WrOpcode::RdmaWrite, &sge);
                wr.remote_addr = off as u64;
                wr.rkey = b.rkey;
                dev[0]
                    .post_send(c.qpn[0], &wr)
                    .map_err(|e| format!("post_send: {e:?}"))?;
                outstanding += 1;
            }
            let now = clock.now();
            if zc {
                pump_gather(&mut dev[0], &mut io[0], now, 32).map_err(|e| e.to_string())?;
            } else {
                pump(&mut dev[0], &mut io[0], now, 32).map_err(|e| e.to_string())?;
            }
            pump(&mut dev[1], &mut io[1], now, 32).map_err(|e| e.to_string())?;
            let n = dev[0].poll_cq(c.cq[0], &mut wcs);
            for w in &wcs[..n] {
                if w.status != WcStatus::Success {
                    return Err(format!("completion {w:?}"));
                }
            }
            outstanding -= n;
            done += n as u64;
        }
        let secs = start.elapsed().as_secs_f64();
        let gbps = (done * o.size as u64 * 8) as f64 / secs / 1e9;
        let mode = if zc { "zero-copy" } else { "copy" };
        if block >= 2 {
            rates[usize::from(zc)].push(gbps);
            println!(
                "block {:2} {mode:9} {gbps:7.3} Gbit/s ({done} WRITEs)",
                block - 2
            );
        }
    }
    let (mut cp, mut zcr) = (rates[0].clone(), rates[1].clone());
    let (mc, mz) = (median(&mut cp), median(&mut zcr));
    let ctr = io[0].counters();
    println!(
        "RESULT size={} mtu={} copy_gbps_median={mc:.3} zc_gbps_median={mz:.3} ratio={:.3} tx_zero_copy_frames={} tx_zero_copy_fallback={} rx_linearized={}",
        o.size,
        o.mtu,
        if mc > 0.0 { mz / mc } else { 0.0 },
        ctr.tx_zero_copy_frames,
        ctr.tx_zero_copy_fallback,
        io[1].counters().rx_linearized
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn main() {
    match parse().and_then(|o| run(&o)) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("memif_zc: {e}");
            std::process::exit(1);
        }
    }
}
