//! Two devices on `udp` backends, for the tests that run them over
//! loopback (`tests/udp_backend.rs`, `tests/udp_wire.rs`, which include
//! this file with `#[path]`).
#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};

use roce_io::mac_for_ip;
use roce_io::pump;
use roce_io::udp::{UdpConfig, UdpIo};
pub use roce_stack::testing::pattern;
use roce_stack::testing::{connect, Conn, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, Mtu, QpType, RecvWr, SendWr, Sge, UdDest, Wc, WcOpcode,
    WcStatus, WrOpcode,
};

pub fn device(ip: IpAddr) -> Device {
    Device::new(DeviceConfig {
        mac: mac_for_ip(ip),
        gids: vec![Gid::from_ip(ip)],
        netdev_mtu: 1500,
        ..DeviceConfig::default()
    })
}

/// Two UDP backends routed to each other.
pub fn sockets(a: IpAddr, b: IpAddr) -> Option<(UdpIo, UdpIo)> {
    let x = UdpIo::bind(UdpConfig::new(SocketAddr::new(a, 0))).ok()?;
    let y = UdpIo::bind(UdpConfig::new(SocketAddr::new(b, 0))).ok()?;
    // Both may share an IP (IPv6 test): route by IP to the other socket.
    x.routes().set(b, y.local_addr());
    y.routes().set(a, x.local_addr());
    Some((x, y))
}

/// Pump both devices until `done` holds (a bounded number of passes; the
/// loopback delivers within microseconds, the sleep only yields the CPU).
pub fn run_until(
    dev: &mut [Device; 2],
    io: &mut (UdpIo, UdpIo),
    mut done: impl FnMut(&mut [Device; 2]) -> bool,
) -> bool {
    let start = std::time::Instant::now();
    for pass in 0..200_000u32 {
        let now = Instant::from_nanos(start.elapsed().as_nanos() as u64);
        let a = pump(&mut dev[0], &mut io.0, now, 32).expect("pump a");
        let b = pump(&mut dev[1], &mut io.1, now, 32).expect("pump b");
        if done(dev) {
            return true;
        }
        if a.rx + a.tx + b.rx + b.tx == 0 && pass % 16 == 15 {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
    false
}

pub fn poll(dev: &mut Device, cq: u32, out: &mut Vec<Wc>) {
    let mut wc = [Wc::EMPTY; 16];
    loop {
        let n = dev.poll_cq(cq, &mut wc);
        if n == 0 {
            return;
        }
        out.extend_from_slice(&wc[..n]);
    }
}

/// What [`exchange`] ran: the devices, and the RC and UD connections.
pub struct Exchanged {
    pub dev: [Device; 2],
    pub rc: Conn,
    pub ud: Conn,
}

/// Between the devices at `ips` on the backends `io` (routed to each
/// other): RC WRITE (10000 bytes, PMTU 1024), READ (7000), SEND (3000),
/// FETCH_ADD and CMP_SWAP, then a 700-byte UD SEND, each checked against
/// what was posted.
pub fn exchange(ips: [IpAddr; 2], io: &mut (UdpIo, UdpIo)) -> Exchanged {
    let mut pair = Pair::with_devices([device(ips[0]), device(ips[1])], Faults::default(), 1);
    let rc = connect(
        &mut pair,
        &ConnOpts {
            mtu: Mtu::Mtu1024,
            ..ConnOpts::default()
        },
    );
    let ud = connect(
        &mut pair,
        &ConnOpts {
            qp_type: QpType::Ud,
            ..ConnOpts::default()
        },
    );
    let mut dev = pair.dev;
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    // Client memory: WRITE source (10000), READ sink (7000), SEND source
    // (3000), atomic results (16).
    let wsrc = pattern(10_000, 1);
    let rsrc = pattern(7_000, 2);
    let ssrc = pattern(3_000, 3);
    let mut cmem = vec![0u8; 0x8000];
    cmem[..10_000].copy_from_slice(&wsrc);
    cmem[0x5000..0x5000 + 3_000].copy_from_slice(&ssrc);
    let cmr = dev[0].reg_mr(rc.pd[0], cmem, 0x10_0000, all).unwrap();
    // Server memory: WRITE target at 0, READ source at 0x4000, atomic
    // cell at 0x7000 (holding 40), receive buffer at 0x8000.
    let mut smem = vec![0u8; 0x9000];
    smem[0x4000..0x4000 + 7_000].copy_from_slice(&rsrc);
    smem[0x7000..0x7008].copy_from_slice(&40u64.to_ne_bytes());
    let smr = dev[1].reg_mr(rc.pd[1], smem, 0x20_0000, all).unwrap();
    let rsge = [Sge {
        addr: 0x20_8000,
        length: 0x1000,
        lkey: smr.lkey,
    }];
    dev[1]
        .post_recv(
            rc.qpn[1],
            &RecvWr {
                wr_id: 100,
                sg_list: &rsge,
            },
        )
        .unwrap();

    let sge = |addr: u64, length: u32| Sge {
        addr,
        length,
        lkey: cmr.lkey,
    };
    let w = [sge(0x10_0000, 10_000)];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &w);
    wr.remote_addr = 0x20_0000;
    wr.rkey = smr.rkey;
    dev[0].post_send(rc.qpn[0], &wr).unwrap();
    let r = [sge(0x10_2800, 7_000)];
    let mut wr = SendWr::new(2, WrOpcode::RdmaRead, &r);
    wr.remote_addr = 0x20_4000;
    wr.rkey = smr.rkey;
    dev[0].post_send(rc.qpn[0], &wr).unwrap();
    let s = [sge(0x10_5000, 3_000)];
    dev[0]
        .post_send(rc.qpn[0], &SendWr::new(3, WrOpcode::Send, &s))
        .unwrap();
    let a = [sge(0x10_7000, 8)];
    let mut wr = SendWr::new(4, WrOpcode::AtomicFetchAndAdd, &a);
    wr.remote_addr = 0x20_7000;
    wr.rkey = smr.rkey;
    wr.compare_add = 2;
    dev[0].post_send(rc.qpn[0], &wr).unwrap();
    let c = [sge(0x10_7008, 8)];
    let mut wr = SendWr::new(5, WrOpcode::AtomicCmpAndSwp, &c);
    wr.remote_addr = 0x20_7000;
    wr.rkey = smr.rkey;
    wr.compare_add = 42;
    wr.swap = 1000;
    dev[0].post_send(rc.qpn[0], &wr).unwrap();

    let (mut cwc, mut swc) = (Vec::new(), Vec::new());
    let ok = run_until(&mut dev, io, |d| {
        poll(&mut d[0], rc.cq[0], &mut cwc);
        poll(&mut d[1], rc.cq[1], &mut swc);
        cwc.len() == 5 && swc.len() == 1
    });
    assert!(
        ok,
        "RC: client {cwc:?} server {swc:?}; udp {:?} {:?}; counters {:?} {:?}",
        io.0.stats(),
        io.1.stats(),
        dev[0].counters(),
        dev[1].counters()
    );
    let ids: Vec<(u64, WcStatus)> = cwc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        (1..=5).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert_eq!(
        (swc[0].wr_id, swc[0].status, swc[0].opcode, swc[0].byte_len),
        (100, WcStatus::Success, WcOpcode::Recv, 3_000)
    );
    let sm = dev[1].mr(smr.lkey).unwrap().as_slice();
    assert!(sm[..10_000] == wsrc[..], "WRITE data");
    assert!(sm[0x8000..0x8000 + 3_000] == ssrc[..], "SEND data");
    // 40 + 2 = 42, then CMP_SWAP(42 -> 1000) succeeds.
    assert_eq!(
        u64::from_ne_bytes(sm[0x7000..0x7008].try_into().unwrap()),
        1000
    );
    let cm = dev[0].mr(cmr.lkey).unwrap().as_slice();
    assert!(cm[0x2800..0x2800 + 7_000] == rsrc[..], "READ data");
    assert_eq!(
        u64::from_ne_bytes(cm[0x7000..0x7008].try_into().unwrap()),
        40
    );
    assert_eq!(
        u64::from_ne_bytes(cm[0x7008..0x7010].try_into().unwrap()),
        42
    );

    // UD SEND, 700 bytes, into a buffer with the 40-byte GRH area.
    let msg = pattern(700, 9);
    let umr0 = dev[0]
        .reg_mr(ud.pd[0], msg.clone(), 0x30_0000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let umr1 = dev[1]
        .reg_mr(ud.pd[1], vec![0; 1024], 0x40_0000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let rs = [Sge {
        addr: 0x40_0000,
        length: 1024,
        lkey: umr1.lkey,
    }];
    dev[1]
        .post_recv(
            ud.qpn[1],
            &RecvWr {
                wr_id: 7,
                sg_list: &rs,
            },
        )
        .unwrap();
    let ss = [Sge {
        addr: 0x30_0000,
        length: 700,
        lkey: umr0.lkey,
    }];
    let mut wr = SendWr::new(8, WrOpcode::Send, &ss);
    wr.ud = Some(UdDest {
        av: AddressVector {
            dgid: Gid::from_ip(ips[1]),
            dmac: mac_for_ip(ips[1]),
            hop_limit: 64,
            ..AddressVector::default()
        },
        remote_qpn: ud.qpn[1],
        remote_qkey: ConnOpts::default().qkey,
    });
    dev[0].post_send(ud.qpn[0], &wr).unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let ok = run_until(&mut dev, io, |d| {
        poll(&mut d[0], ud.cq[0], &mut a);
        poll(&mut d[1], ud.cq[1], &mut b);
        !a.is_empty() && !b.is_empty()
    });
    assert!(ok, "UD: {a:?} {b:?}");
    assert_eq!((a[0].wr_id, a[0].status), (8, WcStatus::Success));
    assert_eq!(
        (b[0].wr_id, b[0].status, b[0].byte_len, b[0].src_qp),
        (7, WcStatus::Success, 740, ud.qpn[0])
    );
    let got = dev[1].mr(umr1.lkey).unwrap().as_slice();
    assert!(got[40..740] == msg[..], "UD payload after the GRH area");
    // The GRH area holds the IPv4 header (its last 20 bytes) or the IPv6
    // header: the source and destination.
    match (ips[0], ips[1]) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            assert_eq!(&got[20 + 12..20 + 16], &s.octets());
            assert_eq!(&got[20 + 16..20 + 20], &d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            assert_eq!(&got[8..24], &s.octets());
            assert_eq!(&got[24..40], &d.octets());
        }
        _ => panic!("mixed families"),
    }
    assert_eq!(io.0.stats().tx_not_udp + io.1.stats().tx_not_udp, 0);
    assert_eq!(
        dev[0].counters().rx_parse_drops + dev[1].counters().rx_parse_drops,
        0
    );
    Exchanged { dev, rc, ud }
}
