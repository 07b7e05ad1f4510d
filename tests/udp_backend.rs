//! The `udp` backend on loopback: two devices, each on its own kernel UDP
//! socket (127.0.0.1 and 127.0.0.2, free ports), run RC WRITE, READ, SEND,
//! ATOMIC and UD SEND with their data checked against what was posted; and
//! the ECN / DSCP bits a datagram arrives with (set by the sender's
//! `IP_TOS`, here a plain socket of the test) reach the device in the
//! synthesised frame, whose ICRC still verifies (ROCEV2-DIGEST §4: TOS is
//! masked).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use roce::backend::mac_for_ip;
use roce::backend::udp::{UdpConfig, UdpIo};
use roce_stack::backend::{pump, FrameIo};
use roce_stack::testing::{connect, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, Mtu, QpType, RecvWr, SendWr, Sge, UdDest, Wc, WcOpcode,
    WcStatus, WrOpcode,
};
use roce_stack::wire::{
    BthRepr, EthRepr, ExtHeaders, Ipv4Repr, Ipv6Repr, NetRepr, Opcode, PacketRepr, RocePacket,
    UdpChecksum, UdpRepr, ROCEV2_UDP_PORT,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

fn device(ip: IpAddr) -> Device {
    Device::new(DeviceConfig {
        mac: mac_for_ip(ip),
        gids: vec![Gid::from_ip(ip)],
        netdev_mtu: 1500,
        ..DeviceConfig::default()
    })
}

/// Two UDP backends routed to each other.
fn sockets(a: IpAddr, b: IpAddr) -> Option<(UdpIo, UdpIo)> {
    let x = UdpIo::bind(UdpConfig::new(SocketAddr::new(a, 0))).ok()?;
    let y = UdpIo::bind(UdpConfig::new(SocketAddr::new(b, 0))).ok()?;
    // Both may share an IP (IPv6 test): route by IP to the other socket.
    x.routes().set(b, y.local_addr());
    y.routes().set(a, x.local_addr());
    Some((x, y))
}

/// Pump both devices until `done` holds (a bounded number of passes; the
/// loopback delivers within microseconds, the sleep only yields the CPU).
fn run_until(
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

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn poll(dev: &mut Device, cq: u32, out: &mut Vec<Wc>) {
    let mut wc = [Wc::EMPTY; 16];
    loop {
        let n = dev.poll_cq(cq, &mut wc);
        if n == 0 {
            return;
        }
        out.extend_from_slice(&wc[..n]);
    }
}

#[test]
fn rc_write_read_send_atomic_and_ud_send_over_loopback_udp() {
    let ips: [IpAddr; 2] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    ];
    let mut io = sockets(ips[0], ips[1]).expect("bind 127.0.0.1 and 127.0.0.2");
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
    let ok = run_until(&mut dev, &mut io, |d| {
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
    let ok = run_until(&mut dev, &mut io, |d| {
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
    // The GRH area holds the IPv4 header (its last 20 bytes): source
    // 127.0.0.1, destination 127.0.0.2.
    assert_eq!(&got[20 + 12..20 + 16], &[127, 0, 0, 1]);
    assert_eq!(&got[20 + 16..20 + 20], &[127, 0, 0, 2]);
    assert_eq!(io.0.stats().tx_not_udp + io.1.stats().tx_not_udp, 0);
    assert_eq!(
        dev[0].counters().rx_parse_drops + dev[1].counters().rx_parse_drops,
        0
    );
}

/// A RoCEv2 SEND_ONLY to QPN `dqpn` as the UDP backend would put it on the
/// wire from `from` to `to` (identification 0, DF, destination port 4791),
/// returned as the UDP payload (BTH .. ICRC).
fn roce_payload(from: SocketAddr, to: SocketAddr, dqpn: u32, psn: u32) -> Vec<u8> {
    let net = match (from.ip(), to.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => NetRepr::Ipv4(Ipv4Repr {
            src: s,
            dst: d,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => NetRepr::Ipv6(Ipv6Repr {
            src: s,
            dst: d,
            dscp: 0,
            ecn: 0,
            flow_label: 0,
            hop_limit: 64,
        }),
        _ => panic!("mixed families"),
    };
    let repr = PacketRepr {
        eth: EthRepr::default(),
        net,
        udp: UdpRepr {
            src_port: from.port(),
            dst_port: ROCEV2_UDP_PORT,
            checksum: UdpChecksum::Zero,
        },
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode::RC_SEND_ONLY, dqpn, psn)
        },
        ext: ExtHeaders::default(),
    };
    let body = b"ECN marked on the way";
    let mut buf = vec![0u8; repr.frame_len(body.len())];
    repr.emit(&mut buf, body).expect("emit");
    let udp = 14 + if from.is_ipv4() { 20 } else { 40 };
    let udp_len = usize::from(u16::from_be_bytes([buf[udp + 4], buf[udp + 5]]));
    buf[udp + 8..udp + udp_len].to_vec()
}

/// A device at `ip` with an RC QP in RTR at QPN 0x11 expecting PSN 0x100.
fn receiver(ip: IpAddr, peer: IpAddr) -> (Device, u32, u32) {
    let mut pair = Pair::with_devices([device(peer), device(ip)], Faults::default(), 1);
    let c = connect(&mut pair, &ConnOpts::default());
    let [_, d] = pair.dev;
    (d, c.qpn[1], c.cq[1])
}

/// Send `payload` from a plain socket bound to `from`, with IP TOS /
/// traffic class `tos`, to `to`.
fn send_marked(from: &Socket, to: SocketAddr, tos: u8, payload: &[u8]) {
    if to.is_ipv4() {
        from.set_tos_v4(u32::from(tos)).expect("IP_TOS");
    } else {
        from.set_tclass_v6(u32::from(tos)).expect("IPV6_TCLASS");
    }
    from.send_to(payload, &SockAddr::from(to)).expect("sendto");
}

/// Receive one frame (a bounded wait: the loopback delivers at once).
fn recv_frame(io: &mut UdpIo) -> Vec<u8> {
    for _ in 0..10_000 {
        let mut got = None;
        io.rx_burst(1, &mut |f| got = Some(f.to_vec())).expect("rx");
        if let Some(f) = got {
            return f;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    panic!("no datagram arrived");
}

fn check_marks(ip: IpAddr, sender_ip: IpAddr) {
    let Ok(mut io) = UdpIo::bind(UdpConfig::new(SocketAddr::new(ip, 0))) else {
        eprintln!("cannot bind {ip}: skipped");
        return;
    };
    let domain = if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let raw = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).expect("socket");
    raw.bind(&SockAddr::from(SocketAddr::new(sender_ip, 0)))
        .expect("bind sender");
    let from = raw.local_addr().unwrap().as_socket().unwrap();
    let to = io.local_addr();
    let (mut dev, qpn, cq) = receiver(ip, sender_ip);
    // ECN CE (0b11), DSCP 0; then DSCP 26 (AF31) with ECT(0) (0b10).
    for (k, (tos, dscp, ecn)) in [(0x03u8, 0u8, 3u8), (26 << 2 | 0b10, 26, 2)]
        .into_iter()
        .enumerate()
    {
        let psn = 0x100 + k as u32;
        send_marked(&raw, to, tos, &roce_payload(from, to, qpn, psn));
        let f = recv_frame(&mut io);
        let p = RocePacket::parse(&f).expect("the synthesised frame parses, ICRC valid");
        assert_eq!((p.net().dscp(), p.net().ecn()), (dscp, ecn), "TOS {tos:#x}");
        assert_eq!(p.net().src(), sender_ip);
        assert_eq!(p.net().dst(), ip);
        assert_eq!(
            p.udp().map(|u| (u.src_port, u.dst_port)),
            Some((from.port(), 4791))
        );
        assert_eq!(p.bth().psn, psn);
        let before = dev.counters().rcvd_pkts;
        let ce_before = dev.counters().get("np_ecn_marked_roce_packets");
        dev.handle_frame(Instant::ZERO, &f);
        assert_eq!(
            dev.counters().rcvd_pkts,
            before + 1,
            "accepted by the device"
        );
        // With DCQCN's notification-point counter present, CE is counted.
        if let (Some(a), Some(b)) = (ce_before, dev.counters().get("np_ecn_marked_roce_packets")) {
            assert_eq!(b - a, u64::from(ecn == 3), "np_ecn_marked_roce_packets");
        }
    }
    let mut wc = Vec::new();
    poll(&mut dev, cq, &mut wc);
    assert_eq!(dev.counters().rx_parse_drops, 0);
    let _ = wc;
}

#[test]
fn ecn_and_dscp_set_by_the_sender_reach_the_device_ipv4() {
    check_marks(
        Ipv4Addr::new(127, 0, 0, 2).into(),
        Ipv4Addr::new(127, 0, 0, 1).into(),
    );
}

#[test]
fn ecn_and_dscp_set_by_the_sender_reach_the_device_ipv6() {
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback: skipped");
        return;
    }
    check_marks(Ipv6Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into());
}

#[test]
fn rc_send_over_ipv6_loopback_udp() {
    let ip: IpAddr = Ipv6Addr::LOCALHOST.into();
    let Some(mut io) = sockets(ip, ip) else {
        eprintln!("no IPv6 loopback: skipped");
        return;
    };
    let mut pair = Pair::with_devices([device(ip), device(ip)], Faults::default(), 1);
    let c = connect(&mut pair, &ConnOpts::default());
    let mut dev = pair.dev;
    let msg = pattern(2500, 5);
    let m0 = dev[0]
        .reg_mr(c.pd[0], msg.clone(), 0x1000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let m1 = dev[1]
        .reg_mr(c.pd[1], vec![0; 4096], 0x9000, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let r = [Sge {
        addr: 0x9000,
        length: 4096,
        lkey: m1.lkey,
    }];
    dev[1]
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 1,
                sg_list: &r,
            },
        )
        .unwrap();
    let s = [Sge {
        addr: 0x1000,
        length: 2500,
        lkey: m0.lkey,
    }];
    dev[0]
        .post_send(c.qpn[0], &SendWr::new(2, WrOpcode::Send, &s))
        .unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let ok = run_until(&mut dev, &mut io, |d| {
        poll(&mut d[0], c.cq[0], &mut a);
        poll(&mut d[1], c.cq[1], &mut b);
        !a.is_empty() && !b.is_empty()
    });
    assert!(ok, "{a:?} {b:?}");
    assert_eq!(
        (a[0].status, b[0].status, b[0].byte_len),
        (WcStatus::Success, WcStatus::Success, 2500)
    );
    assert!(dev[1].mr(m1.lkey).unwrap().as_slice()[..2500] == msg[..]);
}
