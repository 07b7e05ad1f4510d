//! The `udp` backend on loopback: two devices, each on its own kernel UDP
//! socket (127.0.0.1 and 127.0.0.2, free ports), run RC WRITE, READ, SEND,
//! ATOMIC and UD SEND with their data checked against what was posted; and
//! the ECN / DSCP bits a datagram arrives with (set by the sender's
//! `IP_TOS`, here a plain socket of the test) reach the device in the
//! synthesised frame, whose ICRC still verifies (ROCEV2-DIGEST §4: TOS is
//! masked).

#[path = "support/udp_pair.rs"]
mod udp_pair;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use roce_io::udp::{UdpConfig, UdpIo};
use roce_stack::backend::FrameIo;
use roce_stack::testing::{connect, net_repr, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::verbs::{AccessFlags, Device, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
use roce_stack::wire::{
    BthRepr, EthRepr, ExtHeaders, Opcode, PacketRepr, RocePacket, UdpChecksum, UdpRepr,
    ROCEV2_UDP_PORT,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use udp_pair::{device, exchange, pattern, poll, run_until, sockets};

#[test]
fn rc_write_read_send_atomic_and_ud_send_over_loopback_udp() {
    let ips: [IpAddr; 2] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    ];
    let mut io = sockets(ips[0], ips[1]).expect("bind 127.0.0.1 and 127.0.0.2");
    exchange(ips, &mut io);
}

/// A RoCEv2 SEND_ONLY to QPN `dqpn` as the UDP backend would put it on the
/// wire from `from` to `to` (identification 0, DF, destination port 4791),
/// returned as the UDP payload (BTH .. ICRC).
fn roce_payload(from: SocketAddr, to: SocketAddr, dqpn: u32, psn: u32) -> Vec<u8> {
    assert_eq!(from.is_ipv4(), to.is_ipv4(), "mixed families");
    let net = net_repr(from.ip(), to.ip());
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
