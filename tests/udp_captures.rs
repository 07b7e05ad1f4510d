//! Frames captured from Linux rxe and ConnectX NICs
//! (`../shared/captures`, see its MANIFEST.md) received by the `udp`
//! backend. Those peers send DF with a per-packet IPv4 identification; a
//! UDP socket never reports it, and the ICRC covers it, so the backend
//! recovers it from the ICRC (`roce_stack::icrc::recover_ipv4_ident`). The
//! oracle is the capture: the recovered identification and DF bit must be
//! the captured ones, and the rebuilt frame the captured frame.
//!
//! - Offline (no privileges): every IPv4 RoCEv2 frame of the rxe and
//!   ConnectX captures, with its identification replaced by 0 + DF (what a
//!   UDP receiver rebuilds without recovery), fails the ICRC (the
//!   independent `crc`-crate reference), and the solver gives back the
//!   captured identification and DF.
//! - Over real sockets (root, a network namespace of the test's own): each
//!   frame's UDP payload is sent from a UDP socket bound to the captured
//!   source address and port, with the captured TOS and TTL, to a backend
//!   on the captured destination address, port 4791. The frame the backend
//!   rebuilds must equal the captured one byte for byte (the UDP checksum
//!   aside: rxe and ConnectX send 0, the backend rebuilds 0), its ICRC
//!   verify, and every frame be counted `rx_icrc_ident_recovered`. For one
//!   rxe and one ConnectX connection, a device whose QP has the captured
//!   QPN, PSN, R_Key and VA executes the captured WRITEs: its memory ends
//!   as the captured data says, and its ACKs carry the PSNs and MSNs of the
//!   ACKs the real responder sent. With recovery off, the same frames fail
//!   the ICRC. In raw mode, sent with their captured IPv4 headers (a raw
//!   `IP_HDRINCL` socket), they arrive exactly as captured.

mod common;
#[path = "support/udp_ns.rs"]
mod udp_ns;
#[path = "support/udp_pair.rs"]
mod udp_pair;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use common::icrc_ref::{locate, reference_icrc, Form};
use common::read_pcap;
use roce_io::udp::{UdpConfig, UdpIo, UdpStats};
use roce_stack::backend::FrameIo;
use roce_stack::icrc;
use roce_stack::testing::{connect_with, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::verbs::{AccessFlags, Device, Mtu};
use roce_stack::wire::{Opcode, RocePacket};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use udp_ns::{own_netns, sh};
use udp_pair::device;

/// The rxe and ConnectX captures with IPv4 RoCEv2 frames, and how many
/// frames MANIFEST.md says verify ("ok"). Left out: the RoCEv1 capture (no
/// IP header) and `magnate3__dc__rc-small.pcap`, whose sniffer rewrote the
/// UDP source port (checked apart, below).
const CAPTURES: [(&str, usize); 14] = [
    ("linlinw5__pingpong_rc.pcap", 20),
    ("linlinw5__pingpong_uc.pcap", 10),
    ("linlinw5__pingpong_ud.pcap", 10),
    ("linlinw5__rdma_atomic_bw.pcap", 10),
    ("linlinw5__rdma_cm.pcap", 96),
    ("linlinw5__rdma_read_bw.pcap", 20),
    ("linlinw5__rdma_read_lat.pcap", 10),
    ("linlinw5__rdma_send_bw.pcap", 20),
    ("linlinw5__rdma_write_bw.pcap", 20),
    ("linlinw5__rdma_write_lat.pcap", 20),
    ("linlinw5__rping.pcap", 65),
    ("magnate3__doc__ib_send_bw_over_roce.pcap", 10),
    ("magnate3__doc__rocev2_test.pcap", 708),
    ("phdddddd__rdma1.pcap", 4000),
];

/// A captured IPv4 RoCEv2 frame: its IP packet (header through ICRC, no
/// Ethernet padding) and where the ICRC is.
struct Captured {
    ip: Vec<u8>,
}

impl Captured {
    fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.ip[12], self.ip[13], self.ip[14], self.ip[15])
    }
    fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.ip[16], self.ip[17], self.ip[18], self.ip[19])
    }
    fn sport(&self) -> u16 {
        u16::from_be_bytes([self.ip[20], self.ip[21]])
    }
    fn ident(&self) -> (u16, bool) {
        (
            u16::from_be_bytes([self.ip[4], self.ip[5]]),
            self.ip[6] & 0x40 != 0,
        )
    }
    /// The UDP payload: BTH through ICRC.
    fn payload(&self) -> &[u8] {
        &self.ip[28..]
    }
    /// The IP packet with its UDP checksum zeroed (what the backend
    /// rebuilds).
    fn rebuilt(&self) -> Vec<u8> {
        let mut p = self.ip.clone();
        p[26..28].fill(0);
        p
    }
}

/// The IPv4 RoCEv2 frames of `file` whose ICRC verifies as captured
/// (the reference).
fn captured(file: &str) -> Vec<Captured> {
    let path = common::shared_dir().join("captures").join(file);
    read_pcap(&path)
        .iter()
        .filter_map(|f| {
            let loc = locate(f)?;
            if loc.form != Form::V2Ipv4 {
                return None;
            }
            assert_eq!(
                reference_icrc(loc.form, loc.covered).to_le_bytes(),
                loc.wire,
                "{file}: a frame MANIFEST.md says verifies"
            );
            let l3 = loc.covered.as_ptr() as usize - f.as_ptr() as usize;
            let end = l3 + loc.covered.len() + 4;
            Some(Captured {
                ip: f[l3..end].to_vec(),
            })
        })
        .collect()
}

#[test]
fn identifications_of_captured_frames_are_recovered_from_the_icrc() {
    let mut total = 0;
    for (file, ok) in CAPTURES {
        let frames = captured(file);
        assert_eq!(frames.len(), ok, "{file}: MANIFEST.md's ok count");
        for (i, c) in frames.iter().enumerate() {
            let (ident, df) = c.ident();
            assert!(
                ident != 0 && df,
                "{file} #{i}: rxe/ConnectX send DF and an identification"
            );
            let n = c.ip.len();
            let wire: [u8; 4] = c.ip[n - 4..].try_into().unwrap();
            // What a UDP receiver rebuilds without recovery: identification
            // 0 with DF. The ICRC does not verify.
            let mut region = c.ip[..n - 4].to_vec();
            region[4..6].fill(0);
            assert_ne!(
                reference_icrc(Form::V2Ipv4, &region).to_le_bytes(),
                wire,
                "{file} #{i}"
            );
            assert_eq!(
                icrc::recover_ipv4_ident(&region, wire),
                Ok(Some((ident, df))),
                "{file} #{i}"
            );
            // Whatever the guess, DF included.
            region[4..6].copy_from_slice(&[0xA5, 0x5A]);
            region[6] &= !0x40;
            assert_eq!(
                icrc::recover_ipv4_ident(&region, wire),
                Ok(Some((ident, df))),
                "{file} #{i}"
            );
        }
        total += frames.len();
    }
    assert_eq!(total, 5019);
}

/// The Mellanox sniffer's frames carry a rewritten UDP source port
/// (MANIFEST.md: the ICRC verifies only with the per-flow port 53427):
/// another covered field is wrong, so no identification makes the ICRC
/// verify, and the solver says so; with the real port it finds the
/// captured identification.
#[test]
fn a_wrong_covered_field_is_not_hidden_by_recovery() {
    let path = common::shared_dir()
        .join("captures")
        .join("magnate3__dc__rc-small.pcap");
    let mut n = 0;
    for f in read_pcap(&path) {
        let Some(loc) = locate(&f) else { continue };
        let mut region = loc.covered.to_vec();
        let ident = u16::from_be_bytes([region[4], region[5]]);
        region[4..6].fill(0);
        assert_eq!(icrc::recover_ipv4_ident(&region, loc.wire), Ok(None));
        region[20..22].copy_from_slice(&53427u16.to_be_bytes());
        assert_eq!(
            icrc::recover_ipv4_ident(&region, loc.wire),
            Ok(Some((ident, true)))
        );
        n += 1;
    }
    assert_eq!(n, 21);
}

/// Wait for one frame from `io` (the loopback delivers at once; bounded).
fn recv_frame(io: &mut UdpIo) -> Vec<u8> {
    for _ in 0..20_000 {
        let mut got = None;
        io.rx_burst(1, &mut |f| got = Some(f.to_vec())).expect("rx");
        if let Some(f) = got {
            return f;
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
    panic!("no datagram arrived");
}

/// A UDP socket bound to `at`, sending with TOS `tos` and TTL `ttl`.
struct Sender {
    sock: Socket,
    tos: u8,
    ttl: u8,
}

impl Sender {
    fn new(at: SocketAddr) -> Sender {
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        sock.bind(&SockAddr::from(at))
            .unwrap_or_else(|e| panic!("bind {at}: {e}"));
        Sender {
            sock,
            tos: 0,
            ttl: 64,
        }
    }
    fn send(&mut self, c: &Captured, to: SocketAddr) {
        if self.tos != c.ip[1] {
            self.sock.set_tos_v4(u32::from(c.ip[1])).unwrap();
            self.tos = c.ip[1];
        }
        if self.ttl != c.ip[8] {
            self.sock.set_ttl_v4(u32::from(c.ip[8])).unwrap();
            self.ttl = c.ip[8];
        }
        self.sock.send_to(c.payload(), &SockAddr::from(to)).unwrap();
    }
}

/// A device standing in for the responder of the first RDMA WRITE of a
/// capture: its RC QP has the captured QPN and expects the captured first
/// PSN, addressed to the captured requester's QP; its MR has the captured
/// R_Key and VA. It is fed the requests sent to it; `acks` keeps the PSN,
/// syndrome and MSN of each ACK it sends, and `memory` what the captured
/// WRITEs must leave in the MR (applied by the test from the captured
/// payloads).
struct Responder {
    ip: Ipv4Addr,
    dev: Device,
    lkey: u32,
    va: u64,
    memory: Vec<u8>,
    /// Where the next WRITE packet's payload goes.
    next_va: u64,
    acks: Vec<(u32, u8, u32)>,
    now: u64,
}

/// The parser's view of a captured frame (requests' fields for the set-up).
fn parse(f: &[u8]) -> RocePacket<'_> {
    RocePacket::parse(f).expect("a captured frame parses")
}

impl Responder {
    fn new(frames: &[Captured]) -> Responder {
        let eth: Vec<Vec<u8>> = frames.iter().map(Captured::eth).collect();
        let (c, reth, qpn, psn) = frames
            .iter()
            .zip(&eth)
            .find_map(|(c, f)| {
                let p = parse(f);
                matches!(
                    p.opcode(),
                    Opcode::RC_RDMA_WRITE_FIRST | Opcode::RC_RDMA_WRITE_ONLY
                )
                .then(|| (c, p.ext().reth().unwrap(), p.bth().dest_qp, p.bth().psn))
            })
            .expect("an RC WRITE");
        let (ip, peer) = (c.dst(), c.src());
        let peer_qpn = frames
            .iter()
            .zip(&eth)
            .find_map(|(c, f)| (c.src() == ip && c.dst() == peer).then(|| parse(f).bth().dest_qp))
            .expect("a frame back to the requester");
        let mut pair = Pair::with_devices(
            [device(IpAddr::V4(ip)), device(IpAddr::V4(peer))],
            Faults::default(),
            1,
        );
        let conn = connect_with(
            &mut pair,
            &ConnOpts {
                mtu: Mtu::Mtu1024,
                sq_psn: [0x10, psn],
                ..ConnOpts::default()
            },
            Some([qpn, peer_qpn]),
        )
        .expect("QPs with the captured QPNs");
        let [mut dev, _] = pair.dev;
        let len = reth.dma_len.max(64) as usize;
        let mr = dev
            .reg_mr_with_rkey(
                conn.pd[0],
                vec![0; len],
                reth.va,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                reth.rkey,
            )
            .expect("the captured R_Key");
        Responder {
            ip,
            dev,
            lkey: mr.lkey,
            va: reth.va,
            memory: vec![0; len],
            next_va: reth.va,
            acks: Vec::new(),
            now: 0,
        }
    }

    /// Give the device a frame the backend delivered (a request to it:
    /// requests only, the capture's ACKs are for the other side's QP), and
    /// apply a WRITE's captured payload to the expected memory.
    fn feed(&mut self, rebuilt: &[u8]) {
        let p = parse(rebuilt);
        let op = p.opcode();
        if op.0 > 0x0B {
            return;
        }
        if let Some(r) = p.ext().reth() {
            self.next_va = r.va;
        }
        let at = (self.next_va - self.va) as usize;
        self.memory[at..at + p.payload().len()].copy_from_slice(p.payload());
        self.next_va += p.payload().len() as u64;
        self.now += 1_000;
        let now = Instant::from_nanos(self.now);
        self.dev.handle_frame(now, rebuilt);
        let mut buf = vec![0u8; 9000];
        while let Some(n) = self.dev.poll_transmit(now, &mut buf) {
            let q = parse(&buf[..n]);
            let a = q.ext().aeth().expect("the responder sends ACKs");
            self.acks.push((q.bth().psn, a.syndrome, a.msn));
        }
    }

    /// The device's MR holds what the captured WRITEs wrote, and every ACK
    /// the real responder sent (`captured_acks`: PSN, syndrome, MSN) was
    /// sent by ours too (same PSN, an ACK, same MSN; we ACK every packet
    /// that asks, a NIC may coalesce). No NAK.
    fn check(&self, file: &str, captured_acks: &[(u32, u8, u32)]) {
        assert!(
            self.dev.mr(self.lkey).unwrap().as_slice() == &self.memory[..],
            "{file}: the MR after the captured WRITEs"
        );
        assert!(self.memory.iter().any(|&b| b != 0), "{file}: data written");
        for (psn, syn, _) in &self.acks {
            assert_eq!(syn >> 5, 0, "{file}: our response to PSN {psn:#x} is a NAK");
        }
        let ours: BTreeSet<(u32, u32)> = self.acks.iter().map(|&(p, _, m)| (p, m)).collect();
        assert!(!captured_acks.is_empty());
        for &(psn, syn, msn) in captured_acks {
            assert_eq!(syn >> 5, 0, "{file}: the capture's ACKs");
            assert!(
                ours.contains(&(psn, msn)),
                "{file}: the captured ACK of PSN {psn:#x} MSN {msn} is not among ours {:?}",
                &self.acks[..self.acks.len().min(8)]
            );
        }
        assert_eq!(self.dev.counters().rx_parse_drops, 0, "{file}");
    }
}

impl Captured {
    /// The packet as an Ethernet frame (MACs zero) for the parser.
    fn eth(&self) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&self.ip);
        f
    }
}

/// Send every frame of `file` from its captured source address and port
/// to a backend (datagram mode, recovery `recovery`) on its destination
/// address, port 4791; check what arrives. Returns the backends' counts.
fn play(file: &str, recovery: bool, responder: bool) -> UdpStats {
    let frames = captured(file);
    let ips: BTreeSet<Ipv4Addr> = frames.iter().flat_map(|c| [c.src(), c.dst()]).collect();
    for ip in &ips {
        // Already there from another capture: fine.
        let _ = std::process::Command::new("ip")
            .args(["addr", "add", &format!("{ip}/32"), "dev", "lo"])
            .output();
    }
    let mut backends: BTreeMap<Ipv4Addr, UdpIo> = BTreeMap::new();
    let mut senders: BTreeMap<(Ipv4Addr, u16), Sender> = BTreeMap::new();
    let mut host = responder.then(|| Responder::new(&frames));
    for (i, c) in frames.iter().enumerate() {
        let io = backends.entry(c.dst()).or_insert_with(|| {
            UdpIo::bind(UdpConfig {
                ident_recovery: recovery,
                ..UdpConfig::new(SocketAddr::new(IpAddr::V4(c.dst()), 4791))
            })
            .unwrap_or_else(|e| panic!("bind {}:4791: {e}", c.dst()))
        });
        let to = io.local_addr();
        senders
            .entry((c.src(), c.sport()))
            .or_insert_with(|| Sender::new(SocketAddr::new(IpAddr::V4(c.src()), c.sport())))
            .send(c, to);
        let got = recv_frame(io);
        if !recovery {
            assert!(
                RocePacket::parse(&got).is_err(),
                "{file} #{i}: verified without recovery"
            );
            continue;
        }
        assert!(
            got[14..] == c.rebuilt()[..],
            "{file} #{i}: rebuilt\n{:02x?}\ncaptured\n{:02x?}",
            &got[14..14 + 28],
            &c.ip[..28]
        );
        RocePacket::parse(&got).unwrap_or_else(|e| panic!("{file} #{i}: {e:?}"));
        assert_eq!(u16::from_be_bytes([got[18], got[19]]), c.ident().0);

        if let Some(h) = host.as_mut().filter(|h| h.ip == c.dst()) {
            h.feed(&got);
        }
    }
    if let Some(h) = &host {
        let acks: Vec<(u32, u8, u32)> = frames
            .iter()
            .filter(|c| c.src() == h.ip)
            .map(|c| (c, c.eth()))
            .filter_map(|(_, f)| {
                let p = parse(&f);
                (p.opcode() == Opcode::RC_ACKNOWLEDGE).then(|| {
                    let a = p.ext().aeth().unwrap();
                    (p.bth().psn, a.syndrome, a.msn)
                })
            })
            .collect();
        h.check(file, &acks);
    }
    let mut sum = UdpStats::default();
    for io in backends.values() {
        let s = io.stats();
        sum.rx_datagrams += s.rx_datagrams;
        sum.rx_dropped += s.rx_dropped;
        sum.rx_icrc_ident_recovered += s.rx_icrc_ident_recovered;
        sum.rx_icrc_ident_unsolved += s.rx_icrc_ident_unsolved;
    }
    assert_eq!(sum.rx_datagrams, frames.len() as u64, "{file}");
    sum
}

#[test]
fn captured_frames_sent_over_udp_are_accepted_and_reach_a_qp() {
    if !own_netns("captured_frames_sent_over_udp_are_accepted_and_reach_a_qp") {
        return;
    }
    let mut total = 0;
    for (file, ok) in CAPTURES {
        let qp = matches!(
            file,
            "linlinw5__rdma_write_bw.pcap" | "phdddddd__rdma1.pcap"
        );
        let s = play(file, true, qp);
        assert_eq!(
            (
                s.rx_icrc_ident_recovered,
                s.rx_icrc_ident_unsolved,
                s.rx_dropped
            ),
            (ok as u64, 0, 0),
            "{file}"
        );
        total += s.rx_icrc_ident_recovered;
    }
    assert_eq!(total, 5019);
    eprintln!("{total} captured frames recovered and accepted");
    // Recovery off: no rxe/ConnectX frame verifies.
    let s = play("linlinw5__rdma_write_bw.pcap", false, false);
    assert_eq!(
        (s.rx_icrc_ident_recovered, s.rx_icrc_ident_unsolved),
        (0, 0)
    );
}

/// Raw mode: the captured IPv4 packets, sent whole through a raw
/// `IP_HDRINCL` socket (their identifications on the wire), arrive at a
/// raw-mode backend exactly as captured and verify without recovery.
#[test]
fn captured_frames_arrive_exactly_in_raw_mode() {
    if !own_netns("captured_frames_arrive_exactly_in_raw_mode") {
        return;
    }
    let raw = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP)).unwrap();
    raw.set_header_included_v4(true).unwrap();
    let mut n = 0;
    for file in [
        "linlinw5__rdma_read_bw.pcap",
        "magnate3__doc__ib_send_bw_over_roce.pcap",
    ] {
        let frames = captured(file);
        let mut backends: BTreeMap<Ipv4Addr, UdpIo> = BTreeMap::new();
        for c in &frames {
            sh(&[
                "ip",
                "addr",
                "replace",
                &format!("{}/32", c.dst()),
                "dev",
                "lo",
            ]);
            sh(&[
                "ip",
                "addr",
                "replace",
                &format!("{}/32", c.src()),
                "dev",
                "lo",
            ]);
        }
        for (i, c) in frames.iter().enumerate() {
            let io = backends.entry(c.dst()).or_insert_with(|| {
                UdpIo::bind(UdpConfig {
                    raw: true,
                    ..UdpConfig::new(SocketAddr::new(IpAddr::V4(c.dst()), 4791))
                })
                .expect("raw mode")
            });
            let to = SockAddr::from(SocketAddr::new(IpAddr::V4(c.dst()), 0));
            raw.send_to(&c.ip, &to).unwrap();
            let got = recv_frame(io);
            assert!(got[14..] == c.ip[..], "{file} #{i}");
            RocePacket::parse(&got).unwrap_or_else(|e| panic!("{file} #{i}: {e:?}"));
            n += 1;
        }
        for io in backends.values() {
            assert_eq!(io.stats().rx_icrc_ident_recovered, 0);
        }
    }
    assert_eq!(n, 30);
}
