//! What the `udp` backend puts on the wire, checked with tools we did not
//! write: two backends, each on port 4791 of its own loopback address, run
//! RC WRITE / READ / SEND / ATOMIC and a UD SEND (`support/udp_pair.rs`)
//! while tshark captures `lo`; then every captured frame's ICRC must verify
//! **as captured** with the independent `crc`-crate reference
//! (`common/icrc_ref.rs`), and tshark's InfiniBand dissector must read the
//! same BTH.
//!
//! - IPv4 datagram mode: the kernel sends identification 0 with DF (what
//!   `IP_PMTUDISC_DO` gives, `io/src/udp.rs`), UDP source port = the
//!   socket's.
//! - IPv6 datagram mode (::1 and a second loopback address): exact.
//! - Raw mode (`IP_HDRINCL`): the device's own identifications and per-QP
//!   UDP source ports reach the wire.
//! - Raw mode to datagram mode: the datagram receiver recovers every
//!   identification from the ICRC (`rx_icrc_ident_recovered`).
//! - UDP GSO (`UdpConfig::gso`), with `lo`'s `tx-udp-segmentation` off so
//!   the kernel cuts each send before the capture sees it, as a NIC
//!   without segmentation offload would: segment `i` of a send carries
//!   identification `i` with DF (what Linux does with `IP_PMTUDISC_DO`)
//!   and its ICRC verifies as captured; with the offload on (`lo`'s
//!   default) the receiver gets each send whole (UDP GRO) and splits it,
//!   every segment verifying with its index as identification, also with
//!   identification recovery off (and over IPv6).
//!
//! Each test runs in a network namespace of its own
//! (`support/udp_ns.rs`; root, `ROCE_SKIP_ROOT_TESTS=1` skips).

mod common;
#[path = "support/udp_ns.rs"]
mod udp_ns;
#[path = "support/udp_pair.rs"]
mod udp_pair;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use common::icrc_ref::{locate, reference_icrc, Form};
use roce_io::udp::{UdpConfig, UdpIo};
use udp_ns::{own_netns, sh, Capture};
use udp_pair::exchange;

const ROCE: u16 = 4791;

/// A backend on `ip:4791`.
fn bind(ip: IpAddr, raw: bool) -> UdpIo {
    UdpIo::bind(UdpConfig {
        raw,
        ..UdpConfig::new(SocketAddr::new(ip, ROCE))
    })
    .unwrap_or_else(|e| panic!("bind {ip}:4791 (raw {raw}): {e}"))
}

/// A datagram-mode backend on `ip:4791` with UDP GSO, and identification
/// recovery as `recovery` says.
fn bind_gso(ip: IpAddr, recovery: bool) -> UdpIo {
    let io = UdpIo::bind(UdpConfig {
        gso: true,
        ident_recovery: recovery,
        ..UdpConfig::new(SocketAddr::new(ip, ROCE))
    })
    .unwrap_or_else(|e| panic!("bind {ip}:4791: {e}"));
    assert!(io.gso(), "this kernel has no UDP GSO (Linux 4.18+)");
    io
}

/// One captured frame, read from its bytes.
#[derive(Debug)]
struct Seen {
    /// IPv4 identification and flags/fragment field.
    ident: u16,
    flags: u16,
    /// IPv4 source address (0 for IPv6).
    src: u32,
    sport: u16,
    dport: u16,
    opcode: u8,
    dqpn: u32,
    psn: u32,
}

/// Check every frame's ICRC as captured with the reference; return what
/// each frame holds.
fn verify(frames: &[Vec<u8>], form: Form) -> Vec<Seen> {
    assert!(!frames.is_empty(), "nothing captured");
    frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let loc =
                locate(f).unwrap_or_else(|| panic!("frame {i}: not RoCEv2 to 4791: {f:02x?}"));
            assert_eq!(loc.form, form, "frame {i}");
            assert_eq!(
                reference_icrc(loc.form, loc.covered).to_le_bytes(),
                loc.wire,
                "frame {i}: the ICRC does not verify as captured"
            );
            let ip = &f[14..];
            let (udp, ident, flags, src) = match form {
                Form::V2Ipv4 => (
                    &ip[20..],
                    u16::from_be_bytes([ip[4], ip[5]]),
                    u16::from_be_bytes([ip[6], ip[7]]),
                    u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]),
                ),
                _ => (&ip[40..], 0, 0, 0),
            };
            let bth = &udp[8..20];
            Seen {
                ident,
                flags,
                src,
                sport: u16::from_be_bytes([udp[0], udp[1]]),
                dport: u16::from_be_bytes([udp[2], udp[3]]),
                opcode: bth[0],
                dqpn: u32::from_be_bytes([0, bth[5], bth[6], bth[7]]),
                psn: u32::from_be_bytes([0, bth[9], bth[10], bth[11]]),
            }
        })
        .collect()
}

/// tshark's InfiniBand dissector reads the same opcode, destination QP and
/// PSN from every frame of the capture.
fn tshark_agrees(cap: &Capture, seen: &[Seen]) {
    let Some(bin) = common::tshark() else {
        return;
    };
    let rows = common::tshark_fields(
        &bin,
        &cap.path,
        &["-Y", "udp.dstport == 4791"],
        &[
            "infiniband.bth.opcode",
            "infiniband.bth.destqp",
            "infiniband.bth.psn",
        ],
    );
    assert_eq!(rows.len(), seen.len(), "tshark's RoCE frames");
    for (i, (r, s)) in rows.iter().zip(seen).enumerate() {
        let num = |k: &str| -> u64 {
            let v = r
                .get(k)
                .unwrap_or_else(|| panic!("frame {i}: tshark has no {k}: {r:?}"));
            let v = v.split('|').next().unwrap();
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).unwrap(),
                None => v.parse().unwrap(),
            }
        };
        assert_eq!(
            (
                num("infiniband.bth.opcode"),
                num("infiniband.bth.destqp"),
                num("infiniband.bth.psn")
            ),
            (u64::from(s.opcode), u64::from(s.dqpn), u64::from(s.psn)),
            "frame {i}"
        );
    }
}

/// Run the exchange between backends at `ips` while capturing port 4791.
fn capture_exchange(
    tag: &str,
    ips: [IpAddr; 2],
    mut io: (UdpIo, UdpIo),
) -> (Capture, Vec<Vec<u8>>, (UdpIo, UdpIo)) {
    let mut cap = Capture::start(tag, "udp port 4791");
    exchange(ips, &mut io);
    let frames = cap.stop();
    (cap, frames, io)
}

#[test]
fn ipv4_datagrams_verify_on_the_wire() {
    if !own_netns("ipv4_datagrams_verify_on_the_wire") {
        return;
    }
    let ips: [IpAddr; 2] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    ];
    let io = (bind(ips[0], false), bind(ips[1], false));
    let (cap, frames, io) = capture_exchange("v4", ips, io);
    let seen = verify(&frames, Form::V2Ipv4);
    eprintln!(
        "{} frames captured, every ICRC verifies as captured",
        seen.len()
    );
    // WRITE 10 + READ 1 + 7 + SEND 3 + 2 atomics + 2 atomic ACKs + UD 1,
    // plus the ACKs.
    assert!(seen.len() >= 26, "{} frames", seen.len());
    for (i, s) in seen.iter().enumerate() {
        // What Linux sends from an unconnected IP_PMTUDISC_DO socket.
        assert_eq!(
            (s.ident, s.flags),
            (0, 0x4000),
            "frame {i}: identification, flags"
        );
        assert_eq!((s.sport, s.dport), (ROCE, ROCE), "frame {i}: ports");
    }
    let rx = io.0.stats().rx_datagrams + io.1.stats().rx_datagrams;
    assert_eq!(
        rx,
        seen.len() as u64,
        "every frame on the wire was received"
    );
    assert_eq!(
        io.0.stats().rx_icrc_ident_recovered + io.1.stats().rx_icrc_ident_recovered,
        0
    );
    tshark_agrees(&cap, &seen);
}

#[test]
fn ipv6_datagrams_verify_on_the_wire() {
    if !own_netns("ipv6_datagrams_verify_on_the_wire") {
        return;
    }
    sh(&[
        "ip",
        "-6",
        "addr",
        "add",
        "fd00:5e::2/128",
        "dev",
        "lo",
        "nodad",
    ]);
    let ips: [IpAddr; 2] = [Ipv6Addr::LOCALHOST.into(), "fd00:5e::2".parse().unwrap()];
    let io = (bind(ips[0], false), bind(ips[1], false));
    let (cap, frames, io) = capture_exchange("v6", ips, io);
    let seen = verify(&frames, Form::V2Ipv6);
    assert!(seen.len() >= 26, "{} frames", seen.len());
    for (i, s) in seen.iter().enumerate() {
        assert_eq!((s.sport, s.dport), (ROCE, ROCE), "frame {i}: ports");
    }
    let rx = io.0.stats().rx_datagrams + io.1.stats().rx_datagrams;
    assert_eq!(
        rx,
        seen.len() as u64,
        "every frame on the wire was received"
    );
    tshark_agrees(&cap, &seen);
}

#[test]
fn raw_mode_puts_the_devices_headers_on_the_wire() {
    if !own_netns("raw_mode_puts_the_devices_headers_on_the_wire") {
        return;
    }
    let ips: [IpAddr; 2] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    ];
    let io = (bind(ips[0], true), bind(ips[1], true));
    assert!(io.0.is_raw() && io.1.is_raw());
    let mut cap = Capture::start("raw", "udp port 4791");
    let mut io = io;
    let ex = exchange(ips, &mut io);
    let frames = cap.stop();
    let seen = verify(&frames, Form::V2Ipv4);
    assert!(seen.len() >= 26, "{} frames", seen.len());
    // The device numbers its packets (never 0 before wrapping) and sets DF.
    let mut idents = BTreeSet::new();
    for (i, s) in seen.iter().enumerate() {
        assert_ne!(s.ident, 0, "frame {i}");
        assert_eq!(s.flags, 0x4000, "frame {i}");
        assert_eq!(s.dport, ROCE, "frame {i}");
        idents.insert(s.ident);
    }
    assert!(idents.len() > seen.len() / 2, "{idents:?}");
    // Per-QP UDP source ports (rxe's fold of the two QPNs, ROCEV2-DIGEST §1:
    // 0xC000 | 14 bits, the same in both directions of a connection), not
    // the sockets' 4791.
    let port_of = |qpns: [u32; 2]| -> BTreeSet<u16> {
        seen.iter()
            .filter(|s| qpns.contains(&s.dqpn))
            .map(|s| s.sport)
            .collect()
    };
    let rc = port_of(ex.rc.qpn);
    let ud = port_of(ex.ud.qpn);
    assert_eq!(rc.len(), 1, "one RC flow: {rc:?}");
    assert_eq!(ud.len(), 1, "one UD flow: {ud:?}");
    assert_ne!(rc, ud, "the QPs are separate flows");
    for p in rc.iter().chain(&ud) {
        assert_eq!(p & 0xC000, 0xC000, "{p:#x}");
    }
    assert_eq!(io.0.stats().rx_dropped + io.1.stats().rx_dropped, 0);
    tshark_agrees(&cap, &seen);
}

#[test]
fn datagram_mode_recovers_the_identifications_raw_mode_sends() {
    if !own_netns("datagram_mode_recovers_the_identifications_raw_mode_sends") {
        return;
    }
    let ips: [IpAddr; 2] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    ];
    let io = (bind(ips[0], true), bind(ips[1], false));
    let (cap, frames, io) = capture_exchange("mixed", ips, io);
    let seen = verify(&frames, Form::V2Ipv4);
    let from_raw = seen.iter().filter(|s| s.ident != 0).count() as u64;
    let from_dgram = seen.iter().filter(|s| s.ident == 0).count() as u64;
    assert!(
        from_raw >= 13 && from_dgram >= 10,
        "{from_raw} {from_dgram}"
    );
    // Every frame of the raw side carries a non-zero identification that
    // the datagram side never saw: all recovered, none unsolved.
    let s = io.1.stats();
    assert_eq!(s.rx_datagrams, from_raw);
    assert_eq!(s.rx_icrc_ident_recovered, from_raw);
    assert_eq!(s.rx_icrc_ident_unsolved, 0);
    assert_eq!(io.0.stats().rx_datagrams, from_dgram);
    tshark_agrees(&cap, &seen);
}

#[test]
fn gso_segments_verify_on_the_wire_with_consecutive_identifications() {
    if !own_netns("gso_segments_verify_on_the_wire_with_consecutive_identifications") {
        return;
    }
    // Without the offload `lo` cuts GSO sends in software before its
    // capture tap; with it, a capture shows each send as one packet.
    let ok = std::process::Command::new("ethtool")
        .args(["-K", "lo", "tx-udp-segmentation", "off"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "ethtool -K lo tx-udp-segmentation off failed (apt-get install ethtool)"
    );
    let ips: [IpAddr; 2] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    ];
    let io = (bind_gso(ips[0], true), bind_gso(ips[1], true));
    let (cap, frames, io) = capture_exchange("gso", ips, io);
    let seen = verify(&frames, Form::V2Ipv4);
    assert!(seen.len() >= 26, "{} frames", seen.len());
    // Per sender, in capture order: identification 0 starts a send, and
    // every other value follows its predecessor (the kernel's numbering of
    // a send's segments, inet_gso_segment()).
    let mut last: std::collections::BTreeMap<u32, u16> = Default::default();
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.flags, 0x4000, "frame {i}: DF, no fragment");
        assert_eq!((s.sport, s.dport), (ROCE, ROCE), "frame {i}: ports");
        let prev = last.insert(s.src, s.ident);
        assert!(
            s.ident == 0 || prev == Some(s.ident - 1),
            "frame {i}: identification {} after {prev:?}",
            s.ident
        );
    }
    let longest = seen.iter().map(|s| s.ident).max().unwrap_or(0);
    // The 10000-byte WRITE at PMTU 1024: FIRST + a MIDDLE (shorter, so it
    // ends the send), then 7 MIDDLEs and the LAST: identifications 0-7.
    assert!(longest >= 7, "longest send: {} segments", longest + 1);
    let (a, b) = (io.0.stats(), io.1.stats());
    assert!(a.tx_gso_sends > 0 && b.tx_gso_sends > 0, "{a:?} {b:?}");
    // Cut before delivery, each segment reached the receiver alone: it
    // found the non-zero identifications from the ICRC.
    let nonzero = seen.iter().filter(|s| s.ident != 0).count() as u64;
    assert_eq!(a.rx_datagrams + b.rx_datagrams, seen.len() as u64);
    assert_eq!(
        a.rx_icrc_ident_recovered + b.rx_icrc_ident_recovered,
        nonzero
    );
    assert_eq!(a.rx_icrc_ident_unsolved + b.rx_icrc_ident_unsolved, 0);
    eprintln!(
        "{} frames captured, {} GSO sends, every ICRC verifies as captured",
        seen.len(),
        a.tx_gso_sends + b.tx_gso_sends
    );
    tshark_agrees(&cap, &seen);
}

#[test]
fn gro_batches_are_split_and_verify_with_their_segment_index() {
    if !own_netns("gro_batches_are_split_and_verify_with_their_segment_index") {
        return;
    }
    let ips: [IpAddr; 2] = [
        Ipv4Addr::new(127, 0, 0, 1).into(),
        Ipv4Addr::new(127, 0, 0, 2).into(),
    ];
    for recovery in [true, false] {
        let mut io = (bind_gso(ips[0], recovery), bind_gso(ips[1], recovery));
        udp_pair::exchange(ips, &mut io);
        let (a, b) = (io.0.stats(), io.1.stats());
        assert!(a.tx_gso_sends > 0 && b.tx_gso_sends > 0, "{a:?} {b:?}");
        assert!(
            b.rx_gro_batches > 0 && a.rx_gro_batches > 0,
            "the sends arrived whole: {a:?} {b:?}"
        );
        // Segment i of a batch carries identification i: nothing to
        // recover, nothing unsolved, and without recovery it verifies too
        // (the exchange checked every byte).
        for s in [a, b] {
            assert_eq!(
                (s.rx_icrc_ident_recovered, s.rx_icrc_ident_unsolved),
                (0, 0),
                "recovery {recovery}: {s:?}"
            );
            assert_eq!(s.tx_errors + s.rx_dropped, 0, "{s:?}");
        }
        assert_eq!(a.rx_datagrams, b.tx_datagrams);
        assert_eq!(b.rx_datagrams, a.tx_datagrams);
    }
    // IPv6: no identification; the batches split the same way.
    sh(&[
        "ip",
        "-6",
        "addr",
        "add",
        "fd00:5e::2/128",
        "dev",
        "lo",
        "nodad",
    ]);
    let ips: [IpAddr; 2] = [Ipv6Addr::LOCALHOST.into(), "fd00:5e::2".parse().unwrap()];
    let mut io = (bind_gso(ips[0], true), bind_gso(ips[1], true));
    udp_pair::exchange(ips, &mut io);
    let (a, b) = (io.0.stats(), io.1.stats());
    assert!(a.tx_gso_sends > 0 && b.rx_gro_batches > 0, "{a:?} {b:?}");
    assert_eq!(a.rx_datagrams, b.tx_datagrams);
    assert_eq!(b.rx_datagrams, a.tx_datagrams);
}
