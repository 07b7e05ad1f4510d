//! Two shards of one RoCE address (docs/scaling.md): two devices in one
//! process, each on its own `udp` backend, share 127.0.0.1 and one UDP port
//! (`SO_REUSEPORT`, `UdpConfig::shard`); the kernel's classic-BPF selector
//! hands each datagram to the shard that owns its BTH destination QP
//! (QPN mod 2). A peer device on 127.0.0.2, one socket, runs RC WRITEs and
//! SENDs with two QPs on each shard, over one path (same address and port
//! for all four). The oracle is the kernel's steering and the data: every
//! operation completes with the right bytes, each shard received only
//! frames for its own QPs (no `rx_qp_not_found`, and the datagrams each
//! shard got add up to what the peer sent), and both shards got traffic.
//! No root needed (loopback only).

#[path = "support/udp_pair.rs"]
mod udp_pair;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use roce_io::pump;
use roce_io::udp::{Shard, UdpConfig, UdpIo};
use roce_stack::testing::{connect_with, pattern, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::verbs::{AccessFlags, RecvWr, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode};
use udp_pair::{device, poll};

const SHARD_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// The shards' QPNs: even ones on shard 0, odd ones on shard 1.
const QPNS: [u32; 4] = [0x100, 0x101, 0x102, 0x103];
const WRITE_LEN: usize = 20_000;
const SEND_LEN: usize = 3_000;

/// One connection: its QPNs, CQs and MR keys on both ends.
struct Link {
    shard: usize,
    qpn: [u32; 2],
    cq: [u32; 2],
    /// Peer MR (WRITE source at 0, SEND sink at 0x8000); shard MR (WRITE
    /// target at 0, SEND source at 0x8000).
    lkey: [u32; 2],
    rkey_shard: u32,
    va: [u64; 2],
}

#[test]
fn two_shards_share_a_port_and_each_gets_only_its_own_qps() {
    // The shard group: shard 0 binds first (a free port), shard 1 joins.
    let cfg = |port: u16, index: u16| UdpConfig {
        gso: true,
        shard: Some(Shard { index, count: 2 }),
        ..UdpConfig::new(SocketAddr::new(IpAddr::V4(SHARD_IP), port))
    };
    let Ok(s0) = UdpIo::bind(cfg(0, 0)) else {
        eprintln!("cannot bind {SHARD_IP}: skipped");
        return;
    };
    let port = s0.local_addr().port();
    let s1 = UdpIo::bind(cfg(port, 1)).expect("shard 1 joins the port");
    let peer_io = UdpIo::bind(UdpConfig {
        gso: true,
        ..UdpConfig::new(SocketAddr::new(IpAddr::V4(PEER_IP), 0))
    })
    .expect("bind the peer");
    let shard_addr = s0.local_addr();
    peer_io.routes().set(IpAddr::V4(SHARD_IP), shard_addr);
    for s in [&s0, &s1] {
        s.routes().set(IpAddr::V4(PEER_IP), peer_io.local_addr());
    }
    let mut io = [peer_io, s0, s1];

    // Devices: the peer, and one per shard with the same address.
    let mut peer = device(IpAddr::V4(PEER_IP));
    let mut shards = [device(IpAddr::V4(SHARD_IP)), device(IpAddr::V4(SHARD_IP))];
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut links = Vec::new();
    for (k, &q) in QPNS.iter().enumerate() {
        let shard = usize::from(Shard::of_qpn(q, 2));
        assert_eq!(shard, k % 2);
        let s = std::mem::replace(&mut shards[shard], device(IpAddr::V4(SHARD_IP)));
        let mut pair = Pair::with_devices([peer, s], Faults::default(), 1);
        let c = connect_with(&mut pair, &ConnOpts::default(), Some([0x300 + k as u32, q]))
            .expect("connect");
        let [p, s] = pair.dev;
        peer = p;
        shards[shard] = s;
        let va = [0x10_0000 * (k as u64 + 1), 0x20_0000 * (k as u64 + 1)];
        let mut pmem = vec![0u8; 0x9000];
        pmem[..WRITE_LEN].copy_from_slice(&pattern(WRITE_LEN, k as u8));
        let pmr = peer.reg_mr(c.pd[0], pmem, va[0], all).unwrap();
        let mut smem = vec![0u8; 0x9000];
        smem[0x8000..0x8000 + SEND_LEN].copy_from_slice(&pattern(SEND_LEN, 0x80 + k as u8));
        let smr = shards[shard].reg_mr(c.pd[1], smem, va[1], all).unwrap();
        links.push(Link {
            shard,
            qpn: c.qpn,
            cq: c.cq,
            lkey: [pmr.lkey, smr.lkey],
            rkey_shard: smr.rkey,
            va,
        });
    }

    // Each link: the peer WRITEs 20000 bytes (20 packets at PMTU 1024) to
    // the shard QP and receives a 3000-byte SEND from it.
    for l in &links {
        let rsge = [Sge {
            addr: l.va[0] + 0x8000,
            length: 0x1000,
            lkey: l.lkey[0],
        }];
        peer.post_recv(
            l.qpn[0],
            &RecvWr {
                wr_id: 10,
                sg_list: &rsge,
            },
        )
        .unwrap();
        let w = [Sge {
            addr: l.va[0],
            length: WRITE_LEN as u32,
            lkey: l.lkey[0],
        }];
        let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &w);
        wr.remote_addr = l.va[1];
        wr.rkey = l.rkey_shard;
        peer.post_send(l.qpn[0], &wr).unwrap();
        let s = [Sge {
            addr: l.va[1] + 0x8000,
            length: SEND_LEN as u32,
            lkey: l.lkey[1],
        }];
        shards[l.shard]
            .post_send(l.qpn[1], &SendWr::new(2, WrOpcode::Send, &s))
            .unwrap();
    }

    let mut pwc: Vec<Vec<Wc>> = vec![Vec::new(); links.len()];
    let mut swc: Vec<Vec<Wc>> = vec![Vec::new(); links.len()];
    let start = std::time::Instant::now();
    let mut done = false;
    for pass in 0..200_000u32 {
        let now = Instant::from_nanos(start.elapsed().as_nanos() as u64);
        let mut moved = 0;
        let st = pump(&mut peer, &mut io[0], now, 32).expect("pump the peer");
        moved += st.rx + st.tx;
        for (d, b) in shards.iter_mut().zip(&mut io[1..]) {
            let st = pump(d, b, now, 32).expect("pump a shard");
            moved += st.rx + st.tx;
        }
        for (i, l) in links.iter().enumerate() {
            poll(&mut peer, l.cq[0], &mut pwc[i]);
            poll(&mut shards[l.shard], l.cq[1], &mut swc[i]);
        }
        if pwc.iter().all(|w| w.len() == 2) && swc.iter().all(|w| w.len() == 1) {
            done = true;
            break;
        }
        if moved == 0 && pass % 16 == 15 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    let stats: Vec<_> = io.iter().map(|b| b.stats()).collect();
    assert!(
        done,
        "peer {pwc:?} shards {swc:?}; udp {stats:?}; counters {:?} {:?} {:?}",
        peer.counters(),
        shards[0].counters(),
        shards[1].counters()
    );

    for (i, l) in links.iter().enumerate() {
        let mut got: Vec<(u64, WcStatus, WcOpcode)> = pwc[i]
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect();
        got.sort_by_key(|g| g.0);
        assert_eq!(
            got,
            [
                (1, WcStatus::Success, WcOpcode::RdmaWrite),
                (10, WcStatus::Success, WcOpcode::Recv)
            ],
            "link {i}"
        );
        assert_eq!(pwc[i][0].qp_num.max(pwc[i][1].qp_num), l.qpn[0]);
        assert_eq!(
            (swc[i][0].wr_id, swc[i][0].status, swc[i][0].qp_num),
            (2, WcStatus::Success, l.qpn[1]),
            "link {i}"
        );
        let sm = shards[l.shard].mr(l.lkey[1]).unwrap().as_slice();
        assert!(
            sm[..WRITE_LEN] == pattern(WRITE_LEN, i as u8)[..],
            "link {i}: WRITE data"
        );
        let pm = peer.mr(l.lkey[0]).unwrap().as_slice();
        assert!(
            pm[0x8000..0x8000 + SEND_LEN] == pattern(SEND_LEN, 0x80 + i as u8)[..],
            "link {i}: SEND data"
        );
    }
    // Steering: no shard saw a frame for a QP it does not have, both got
    // traffic, and together they got everything the peer sent.
    for (s, d) in shards.iter().enumerate() {
        assert_eq!(d.counters().get("rx_qp_not_found"), Some(0), "shard {s}");
        assert!(
            stats[1 + s].rx_datagrams > 0,
            "shard {s}: {:?}",
            stats[1 + s]
        );
    }
    assert_eq!(
        stats[1].rx_datagrams + stats[2].rx_datagrams,
        stats[0].tx_datagrams,
        "{stats:?}"
    );
    assert_eq!(
        stats[0].tx_errors + stats[1].tx_errors + stats[2].tx_errors,
        0
    );
    assert!(
        stats[0].tx_gso_sends > 0,
        "the peer's GSO sends: {:?}",
        stats[0]
    );
}
