//! The TAP backend end to end through the Linux kernel (needs root).
//!
//! Each test opens two TAP interfaces (`rtap{pid}{tag}a`, `…b`) in this
//! process, moves them into a network namespace of its own
//! (`roce{pid}{tag}`) and enslaves both to a bridge there, which also has an
//! address in the stacks' subnet (10.99.0.254/24, fd99::fe/64) so the
//! kernel can ping them. Two [`TapHost`]s (two devices in this process,
//! MACs 02:00:00:99:00:0{1,2}, 10.99.0.{1,2} and fd99::{1,2}) then talk
//! through the kernel's bridge. Everything is removed by a guard's `Drop`,
//! on panic too (deleting the namespace deletes the bridge; the TAP
//! interfaces vanish with their descriptors).
//!
//! Oracles: the data the verbs move; Linux's `ping`; tshark's decode of
//! what crossed host 0's bridge port, captured with tshark in the
//! namespace (BTH opcodes against the IBTA opcode numbers,
//! ICRC bytes, IPv4 header checksum status, UDP checksum field); the ICRC
//! recomputed from ROCEV2-DIGEST §4 with the `crc` crate's CRC-32; and
//! `roce decode --json` agreeing with tshark frame by frame.
//!
//! A third test opens the interface the way `roce perf --backend tap` does
//! (`roce_io::tap::open`) and pings it, and resolves the kernel's
//! address (the bridge's MAC, read from sysfs, is the oracle).
//!
//! Needs root (or `CAP_NET_ADMIN` + `CAP_SYS_ADMIN`), `/dev/net/tun`, `ip`
//! (iproute2), `ping` (iputils-ping) and tshark. Without them the tests
//! fail and say what is missing, unless `ROCE_SKIP_ROOT_TESTS=1`.
//!
//! The loops below are bounded by generous wall-clock limits (hang guards,
//! not timing assertions).

#[path = "support/netns.rs"]
mod netns;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as WallClock};

use netns::Netns;

use roce_io::tap::{TapHost, TapIo};
use roce_stack::backend::FrameIo;
use roce_stack::neigh::Resolution;
use roce_stack::testing::{all_access, modify_to_rts, pattern, ConnOpts};
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    Device, DeviceConfig, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, UdDest, Wc, WcOpcode,
    WcStatus, WrOpcode,
};
use roce_stack::wire::{
    BthRepr, EthRepr, ExtHeaders, Ipv4Repr, NetRepr, Opcode, PacketRepr, UdpChecksum, UdpRepr,
    ROCEV2_UDP_PORT,
};
use serde_json::Value;

const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// Hang guard for each phase.
const LIMIT: Duration = Duration::from_secs(30);

const QKEY: u32 = 0x1111_1111;

/// What the tests run besides `ip`: `(binary, version flag, Debian package)`.
const TOOLS: &[(&str, &str, &str)] = &[("ping", "-V", "iputils-ping"), ("tshark", "-v", "tshark")];

fn mac(i: u8) -> [u8; 6] {
    [0x02, 0, 0, 0x99, 0, i]
}
fn ipv4(i: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, i)
}
fn ipv6(i: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, i)
}

/// A host: device `i` (1 or 2) on `io`.
fn host(i: u8, io: TapIo, netdev_mtu: usize) -> TapHost {
    let dev = Device::new(DeviceConfig {
        mac: mac(i),
        gids: vec![Gid::from_ipv4(ipv4(i)), Gid::from_ipv6(ipv6(u16::from(i)))],
        netdev_mtu,
        ..DeviceConfig::default()
    });
    TapHost::new(dev, io)
}

/// Write one frame into `io` (as if the stack had sent it).
fn inject(io: &mut TapIo, frame: &[u8]) {
    let mut pending = Some(frame);
    let n = io
        .tx_burst(1, &mut |buf| {
            let f = pending.take()?;
            buf[..f.len()].copy_from_slice(f);
            Some(f.len())
        })
        .expect("write");
    assert_eq!(n, 1);
}

/// Poll both hosts until `done` or the hang guard; returns `done`'s value.
fn run(h: &mut [TapHost; 2], mut done: impl FnMut(&mut [TapHost; 2]) -> bool) -> bool {
    let start = WallClock::now();
    loop {
        if done(h) {
            return true;
        }
        let mut moved = 0;
        for x in h.iter_mut() {
            let s = x.poll(64).expect("poll");
            moved += s.rx + s.tx;
        }
        if start.elapsed() > LIMIT {
            return done(h);
        }
        if moved == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Poll both hosts while `child` runs; returns its output.
fn run_child(h: &mut [TapHost; 2], mut child: Child) -> std::process::Output {
    let ok = run(h, |_| child.try_wait().ok().flatten().is_some());
    if !ok {
        let _ = child.kill();
    }
    child.wait_with_output().expect("child output")
}

/// QPs connected as `testing::connect` does, with the given address
/// vectors (side `s` sends to `av[s]`).
struct Conn {
    pd: [u32; 2],
    cq: [u32; 2],
    qpn: [u32; 2],
}

fn connect(h: &mut [TapHost; 2], qp_type: QpType, av: [AddressVector; 2]) -> Conn {
    let mut c = Conn {
        pd: [0; 2],
        cq: [0; 2],
        qpn: [0; 2],
    };
    for (s, x) in h.iter_mut().enumerate() {
        let d = &mut x.dev;
        c.pd[s] = d.alloc_pd();
        c.cq[s] = d.create_cq(1024);
        c.qpn[s] = d
            .create_qp(
                c.pd[s],
                &QpInitAttr {
                    qp_type,
                    send_cq: c.cq[s],
                    recv_cq: c.cq[s],
                    cap: QpCap {
                        max_send_wr: 64,
                        max_recv_wr: 64,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    sq_sig_all: false,
                },
            )
            .expect("create_qp");
    }
    let o = ConnOpts {
        qp_type,
        qkey: QKEY,
        ..ConnOpts::default()
    };
    for s in 0..2 {
        let peer = 1 - s;
        let (sq_psn, rq_psn) = (o.sq_psn[s], o.sq_psn[peer]);
        modify_to_rts(
            &mut h[s].dev,
            c.qpn[s],
            av[s],
            c.qpn[peer],
            sq_psn,
            rq_psn,
            &o,
        )
        .expect("RTS");
    }
    c
}

/// Poll both hosts until side `s`'s CQ holds `n` completions; return them.
fn completions(h: &mut [TapHost; 2], s: usize, cq: u32, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    let ok = run(h, |h| {
        let mut buf = [Wc::EMPTY; 16];
        let k = h[s].dev.poll_cq(cq, &mut buf);
        got.extend_from_slice(&buf[..k]);
        got.len() >= n
    });
    assert!(
        ok,
        "side {s}: {} of {n} completions; counters {:?} / {:?}",
        got.len(),
        h[s].dev.counters(),
        h[1 - s].dev.counters()
    );
    got
}

/// Resolve each host's peer: host 0 resolves host 1's IPv4 and IPv6
/// addresses by ARP and neighbour solicitation; host 1 must have learned
/// host 0 from the ARP request (RFC 826) without asking. Returns the
/// address vectors `[0 -> 1, 1 -> 0]`.
fn resolve(h: &mut [TapHost; 2]) -> [AddressVector; 2] {
    let (b4, b6) = (IpAddr::V4(ipv4(2)), IpAddr::V6(ipv6(2)));
    assert_eq!(h[0].start_resolve(b4), None);
    assert_eq!(h[0].start_resolve(b6), None);
    let ok = run(h, |h| {
        matches!(h[0].resolution(b4), Resolution::Reachable(_))
            && matches!(h[0].resolution(b6), Resolution::Reachable(_))
    });
    assert!(ok, "resolution: {:?}", h[0].neigh().counters());
    assert_eq!(h[0].resolution(b4), Resolution::Reachable(mac(2)));
    assert_eq!(h[0].resolution(b6), Resolution::Reachable(mac(2)));
    let a4 = IpAddr::V4(ipv4(1));
    assert_eq!(
        h[1].resolution(a4),
        Resolution::Reachable(mac(1)),
        "host 1 learns host 0 from its ARP request"
    );
    let av = |ip: IpAddr, dmac| AddressVector {
        dgid: Gid::from_ip(ip),
        dmac,
        hop_limit: 64,
        ..AddressVector::default()
    };
    let to_b = h[0].neigh().lookup(h[0].now(), b4).expect("resolved");
    let to_a = h[1].neigh().lookup(h[1].now(), a4).expect("learned");
    [av(b4, to_b), av(a4, to_a)]
}

/// IBTA 1.7 Table 38 opcode numbers the run below must produce.
const EXPECTED_OPCODES: &[(u8, &str)] = &[
    (0x00, "RC SEND First"),
    (0x01, "RC SEND Middle"),
    (0x03, "RC SEND Last with Immediate"),
    (0x06, "RC RDMA WRITE First"),
    (0x07, "RC RDMA WRITE Middle"),
    (0x08, "RC RDMA WRITE Last"),
    (0x0C, "RC RDMA READ Request"),
    (0x0D, "RC RDMA READ response First"),
    (0x0E, "RC RDMA READ response Middle"),
    (0x0F, "RC RDMA READ response Last"),
    (0x11, "RC Acknowledge"),
    (0x12, "RC ATOMIC Acknowledge"),
    (0x13, "RC CmpSwap"),
    (0x14, "RC FetchAdd"),
    (0x64, "UD SEND Only"),
];

/// RC WRITE, READ, SEND with immediate, FETCH_ADD and CMP_SWAP from host 0
/// to host 1, data checked at the far end.
fn rc_traffic(h: &mut [TapHost; 2], av: [AddressVector; 2]) {
    let c = connect(h, QpType::Rc, av);
    const LEN: usize = 64 * 1024;
    let src = pattern(LEN, 7);
    let a = h[0]
        .dev
        .reg_mr(c.pd[0], src.clone(), 0x1_0000, all_access())
        .unwrap();
    let b = h[1]
        .dev
        .reg_mr(c.pd[1], vec![0; 2 * LEN], 0x8000_0000, all_access())
        .unwrap();

    // RDMA WRITE 64 KiB: 64 packets at PMTU 1024 (First, Middle…, Last).
    let sge = [Sge {
        addr: 0x1_0000,
        length: LEN as u32,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 0x8000_0000;
    wr.rkey = b.rkey;
    h[0].dev.post_send(c.qpn[0], &wr).unwrap();
    let w = completions(h, 0, c.cq[0], 1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(&h[1].dev.mr(b.lkey).unwrap().as_slice()[..LEN], &src[..]);

    // RDMA READ it back into host 0's zeroed buffer.
    h[0].dev.mr_mut(a.lkey).unwrap().as_mut_slice().fill(0);
    let mut wr = SendWr::new(2, WrOpcode::RdmaRead, &sge);
    wr.remote_addr = 0x8000_0000;
    wr.rkey = b.rkey;
    h[0].dev.post_send(c.qpn[0], &wr).unwrap();
    let w = completions(h, 0, c.cq[0], 1);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].opcode),
        (2, WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(h[0].dev.mr(a.lkey).unwrap().as_slice(), &src[..]);

    // SEND with immediate, 5000 bytes (First, Middle…, Last with Immediate).
    let rsge = [Sge {
        addr: 0x8000_0000 + LEN as u64,
        length: 8192,
        lkey: b.lkey,
    }];
    h[1].dev
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 77,
                sg_list: &rsge,
            },
        )
        .unwrap();
    let ssge = [Sge {
        addr: 0x1_0000 + 1000,
        length: 5000,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(3, WrOpcode::SendWithImm, &ssge);
    wr.imm_data = 0xdead_beef;
    h[0].dev.post_send(c.qpn[0], &wr).unwrap();
    let r = completions(h, 1, c.cq[1], 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].byte_len, r[0].imm_data),
        (77, WcStatus::Success, 5000, 0xdead_beef)
    );
    assert_eq!(
        &h[1].dev.mr(b.lkey).unwrap().as_slice()[LEN..LEN + 5000],
        &src[1000..6000]
    );
    completions(h, 0, c.cq[0], 1);

    // FETCH_ADD then CMP_SWAP on an 8-byte word of host 1.
    h[1].dev.mr_mut(b.lkey).unwrap().as_mut_slice()[0x100..0x108]
        .copy_from_slice(&5u64.to_ne_bytes());
    let res = [Sge {
        addr: 0x1_0000,
        length: 8,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(4, WrOpcode::AtomicFetchAndAdd, &res);
    wr.remote_addr = 0x8000_0100;
    wr.rkey = b.rkey;
    wr.compare_add = 10;
    h[0].dev.post_send(c.qpn[0], &wr).unwrap();
    let w = completions(h, 0, c.cq[0], 1);
    assert_eq!((w[0].wr_id, w[0].status), (4, WcStatus::Success));
    assert_eq!(
        &h[0].dev.mr(a.lkey).unwrap().as_slice()[..8],
        &5u64.to_ne_bytes(),
        "FETCH_ADD returns the original"
    );
    let mut wr = SendWr::new(5, WrOpcode::AtomicCmpAndSwp, &res);
    wr.remote_addr = 0x8000_0100;
    wr.rkey = b.rkey;
    wr.compare_add = 15;
    wr.swap = 99;
    h[0].dev.post_send(c.qpn[0], &wr).unwrap();
    let w = completions(h, 0, c.cq[0], 1);
    assert_eq!((w[0].wr_id, w[0].status), (5, WcStatus::Success));
    assert_eq!(
        &h[0].dev.mr(a.lkey).unwrap().as_slice()[..8],
        &15u64.to_ne_bytes()
    );
    assert_eq!(
        &h[1].dev.mr(b.lkey).unwrap().as_slice()[0x100..0x108],
        &99u64.to_ne_bytes()
    );
}

/// A UD SEND from host 0 to host 1 addressed with the resolved MAC.
fn ud_traffic(h: &mut [TapHost; 2], av: [AddressVector; 2]) {
    let c = connect(h, QpType::Ud, av);
    let data = pattern(1000, 3);
    let a = h[0]
        .dev
        .reg_mr(c.pd[0], data.clone(), 0, all_access())
        .unwrap();
    let b = h[1]
        .dev
        .reg_mr(c.pd[1], vec![0; 1040], 0, all_access())
        .unwrap();
    let rsge = [Sge {
        addr: 0,
        length: 1040,
        lkey: b.lkey,
    }];
    h[1].dev
        .post_recv(
            c.qpn[1],
            &RecvWr {
                wr_id: 9,
                sg_list: &rsge,
            },
        )
        .unwrap();
    let sge = [Sge {
        addr: 0,
        length: 1000,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::Send, &sge);
    wr.ud = Some(UdDest {
        av: av[0],
        remote_qpn: c.qpn[1],
        remote_qkey: QKEY,
    });
    h[0].dev.post_send(c.qpn[0], &wr).unwrap();
    let r = completions(h, 1, c.cq[1], 1);
    assert_eq!(
        (r[0].status, r[0].byte_len, r[0].src_qp),
        (WcStatus::Success, 1040, c.qpn[0])
    );
    let got = h[1].dev.mr(b.lkey).unwrap().as_slice();
    // The 40-byte GRH area holds the IPv4 header in its last 20 bytes.
    assert_eq!(&got[32..36], &ipv4(1).octets());
    assert_eq!(&got[40..], &data[..]);
    completions(h, 0, c.cq[0], 1);
}

/// `ping` (or `ping -6`) one of the stacks from the bridge's address.
fn ping(n: &Netns, h: &mut [TapHost; 2], target: &str, v6: bool) {
    let mut args = vec!["ping"];
    if v6 {
        args.push("-6");
    }
    args.extend(["-c", "1", "-W", "5", target]);
    let child = n
        .exec(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ping");
    let out = run_child(h, child);
    assert!(
        out.status.success(),
        "ping {target}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 received"));
}

/// One frame as tshark decoded it.
#[derive(Debug, Default)]
struct TsharkFrame {
    opcode: Option<u8>,
    icrc: Option<String>,
    ip_checksum_status: Option<String>,
    udp_checksum: Option<String>,
    icmp_type: Option<String>,
    icmpv6_type: Option<String>,
    arp_opcode: Option<String>,
}

/// tshark's view of `pcap`, by frame number, with IPv4 header checksum
/// validation on.
fn tshark_frames(pcap: &std::path::Path) -> BTreeMap<u64, TsharkFrame> {
    let fields = [
        "frame.number",
        "infiniband.bth.opcode",
        "infiniband.invariant.crc",
        "ip.checksum.status",
        "udp.checksum",
        "icmp.type",
        "icmpv6.type",
        "arp.opcode",
    ];
    let mut cmd = Command::new("tshark");
    cmd.args([
        "-r",
        pcap.to_str().unwrap(),
        "-o",
        "ip.check_checksum:TRUE",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=f",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark -r");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut frames = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Vec<Option<String>> = line
            .split('\t')
            .map(|s| (!s.is_empty()).then(|| s.to_string()))
            .collect();
        let get = |i: usize| v.get(i).cloned().flatten();
        let num: u64 = get(0).expect("frame.number").parse().expect("frame number");
        frames.insert(
            num,
            TsharkFrame {
                opcode: get(1).map(|s| s.parse().expect("opcode")),
                icrc: get(2),
                ip_checksum_status: get(3),
                udp_checksum: get(4),
                icmp_type: get(5),
                icmpv6_type: get(6),
                arp_opcode: get(7),
            },
        );
    }
    frames
}

/// The records of a pcap (classic format, as tshark -F pcap writes it).
fn pcap_records(pcap: &std::path::Path) -> Vec<Vec<u8>> {
    let data = std::fs::read(pcap).expect("read pcap");
    assert!(data.len() >= 24, "pcap too short");
    let le = match &data[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        m => panic!("not a pcap: magic {m:02x?}"),
    };
    let u32_at = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    assert_eq!(u32_at(&data[20..24]), 1, "link type Ethernet");
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= data.len() {
        let incl = u32_at(&data[at + 8..at + 12]) as usize;
        at += 16;
        out.push(data[at..at + incl].to_vec());
        at += incl;
    }
    out
}

/// The ICRC of an IPv4 RoCEv2 frame recomputed per ROCEV2-DIGEST §4 (8
/// bytes of ones, then IP header through pad with TOS, TTL, IP checksum,
/// UDP checksum and BTH byte 4 forced to ones; CRC-32 sent LSB first),
/// and the 4 bytes on the wire.
fn reference_icrc_ipv4(frame: &[u8]) -> ([u8; 4], [u8; 4]) {
    let l3 = &frame[14..];
    let end = 20 + usize::from(u16::from_be_bytes([l3[24], l3[25]]));
    let mut p = vec![0xFFu8; 8];
    p.extend_from_slice(&l3[..end - 4]);
    let hdr = &mut p[8..];
    hdr[1] = 0xFF;
    hdr[8] = 0xFF;
    hdr[10..12].fill(0xFF);
    hdr[26..28].fill(0xFF);
    hdr[28 + 4] = 0xFF;
    let wire = [l3[end - 4], l3[end - 3], l3[end - 2], l3[end - 1]];
    (CRC32.checksum(&p).to_le_bytes(), wire)
}

/// Check the capture: every RoCE frame is RoCEv2/IPv4 with a correct ICRC
/// (recomputed here, and as `roce decode` says), a correct IPv4 header
/// checksum (tshark) and UDP checksum 0 (CASES R37 c); tshark and `roce
/// decode --json` agree on which frames are RoCE and on their opcodes and
/// ICRC bytes; every expected opcode is there; ARP and echo replies of
/// both IP versions crossed the bridge.
fn check_capture(pcap: &std::path::Path) {
    let ts = tshark_frames(pcap);
    let records = pcap_records(pcap);
    assert_eq!(
        records.len(),
        ts.len(),
        "tshark and the pcap reader count the same frames"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "--json", pcap.to_str().unwrap()])
        .output()
        .expect("roce decode");
    assert!(
        out.status.success(),
        "roce decode: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ours: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(
        ours.len(),
        ts.len(),
        "roce decode prints one object per frame"
    );

    let mut seen = BTreeMap::<u8, usize>::new();
    let mut roce = 0;
    for (j, frame) in ours.iter().zip(&records) {
        let num = j["frame"].as_u64().expect("frame");
        let t = &ts[&num];
        let kind = j["kind"].as_str().expect("kind");
        assert_ne!(kind, "bad_roce", "frame {num}: {j}");
        if kind != "roce" {
            assert_eq!(
                t.opcode, None,
                "frame {num}: tshark sees RoCE, roce decode sees {kind}"
            );
            continue;
        }
        roce += 1;
        let op = t
            .opcode
            .unwrap_or_else(|| panic!("frame {num}: tshark sees no BTH"));
        assert_eq!(
            j["opcode"].as_u64(),
            Some(u64::from(op)),
            "frame {num}: opcode"
        );
        assert_eq!(j["version"], 2, "frame {num}");
        assert_eq!(j["icrc_status"], "ok", "frame {num}: {j}");
        let (want, wire) = reference_icrc_ipv4(frame);
        assert_eq!(want, wire, "frame {num}: ICRC against the reference");
        let hex: String = wire.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(j["icrc"].as_str(), Some(hex.as_str()), "frame {num}");
        assert_eq!(
            t.icrc.as_deref(),
            Some(format!("0x{hex}").as_str()),
            "frame {num}: tshark's ICRC"
        );
        // tshark's ip.checksum.status: 1 = good.
        assert_eq!(
            t.ip_checksum_status.as_deref(),
            Some("1"),
            "frame {num}: IPv4 header checksum"
        );
        assert_eq!(
            t.udp_checksum.as_deref(),
            Some("0x0000"),
            "frame {num}: UDP checksum (R37 c)"
        );
        *seen.entry(op).or_default() += 1;
    }
    for (op, name) in EXPECTED_OPCODES {
        assert!(
            seen.contains_key(op),
            "no {name} (0x{op:02x}) on the bridge: {seen:x?}"
        );
    }
    assert!(roce >= 64 + 64 + 5, "{roce} RoCE frames");
    let arp_replies = ts
        .values()
        .filter(|t| t.arp_opcode.as_deref() == Some("2"))
        .count();
    let echo_replies = ts
        .values()
        .filter(|t| t.icmp_type.as_deref() == Some("0"))
        .count();
    let echo6_replies = ts
        .values()
        .filter(|t| t.icmpv6_type.as_deref() == Some("129"))
        .count();
    let na = ts
        .values()
        .filter(|t| t.icmpv6_type.as_deref() == Some("136"))
        .count();
    assert!(arp_replies >= 2, "ARP replies: {arp_replies}");
    assert!(echo_replies >= 1, "ICMP echo replies: {echo_replies}");
    assert!(echo6_replies >= 1, "ICMPv6 echo replies: {echo6_replies}");
    assert!(na >= 1, "neighbour advertisements: {na}");
}

/// Two stacks on two TAP interfaces bridged in a namespace: ARP and NDP
/// resolution between them, RC WRITE/READ/SEND/ATOMIC and UD SEND with the
/// data checked, `ping` and `ping -6` from the kernel answered, and the
/// capture on the bridge port valid RoCEv2 by tshark, the ICRC reference and `roce
/// decode`.
#[test]
fn tap_bridge_rc_ud_ping_and_capture() {
    if !netns::preconditions("tests/tap_netns.rs", TOOLS) {
        return;
    }
    let mut n = Netns::new("m");
    let ta = n.tap(0, 1500);
    let tb = n.tap(1, 1500);
    // On host 0's port: every frame between the stacks, and the kernel's
    // ARP, NDP and pings to host 0 (see `Netns::start_capture`).
    let port = n.taps[0].clone();
    n.start_capture(&port);
    let mut h = [host(1, ta, 1500), host(2, tb, 1500)];
    n.sync_capture(|f| inject(h[0].tap_mut(), f));

    let av = resolve(&mut h);
    rc_traffic(&mut h, av);
    ud_traffic(&mut h, av);
    ping(&n, &mut h, "10.99.0.1", false);
    ping(&n, &mut h, "10.99.0.2", false);
    ping(&n, &mut h, "fd99::1", true);
    for (i, x) in h.iter().enumerate() {
        let c = x.neigh().counters();
        assert!(c.arp_replies_tx >= 1, "host {i}: {c:?}");
        assert!(c.echo_replies_tx >= 1, "host {i}: {c:?}");
        assert_eq!(x.tap().stats().rx_oversize, 0);
        assert_eq!(
            x.dev.counters().rx_parse_drops,
            0,
            "host {i}: {:?}",
            x.dev.drop_counters()
        );
    }
    // Everything sent so far is in the file once the marker is.
    n.sync_capture(|f| inject(h[0].tap_mut(), f));
    n.stop_capture();
    check_capture(&n.pcap);
}

/// CASES R37 (a), (b) through the kernel: UD SENDs whose UDP checksum
/// field holds a partial-looking value (what a sender leaving the checksum
/// to an offload writes: here the pseudo-header sum) or 0 are written into
/// one TAP interface, cross the bridge and are accepted by the device
/// behind the other: the ICRC, not the UDP checksum, protects RoCE.
#[test]
fn r37_tap_rx_accepts_partial_and_zero_udp_checksums() {
    if !netns::preconditions("tests/tap_netns.rs", TOOLS) {
        return;
    }
    let n = Netns::new("r");
    let ta = n.tap(0, 1500);
    let tb = n.tap(1, 1500);
    let mut h = [host(1, ta, 1500), host(2, tb, 1500)];
    let av = resolve(&mut h);
    let c = connect(&mut h, QpType::Ud, av);
    let b = h[1]
        .dev
        .reg_mr(c.pd[1], vec![0; 4 * 1040], 0, all_access())
        .unwrap();
    for i in 0..2u64 {
        let rsge = [Sge {
            addr: i * 1040,
            length: 1040,
            lkey: b.lkey,
        }];
        h[1].dev
            .post_recv(
                c.qpn[1],
                &RecvWr {
                    wr_id: i,
                    sg_list: &rsge,
                },
            )
            .unwrap();
    }
    // Pseudo-header sum of src, dst, protocol 17 and UDP length: the value
    // a CHECKSUM_PARTIAL frame carries (Linux `udp4_hwcsum`), not a valid
    // checksum.
    let payload = pattern(256, 9);
    let udp_len = 8 + 12 + 8 + payload.len() + 4;
    let mut sum: u32 = 0;
    for w in [ipv4(1).octets(), ipv4(2).octets()] {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]))
            + u32::from(u16::from_be_bytes([w[2], w[3]]));
    }
    sum += 17 + udp_len as u32;
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    let partial = sum as u16;
    for (i, csum) in [UdpChecksum::Value(partial), UdpChecksum::Zero]
        .into_iter()
        .enumerate()
    {
        let repr = PacketRepr {
            eth: EthRepr {
                dst: mac(2),
                src: mac(1),
                vlan: None,
            },
            net: NetRepr::Ipv4(Ipv4Repr {
                src: ipv4(1),
                dst: ipv4(2),
                dscp: 0,
                ecn: 0,
                ttl: 64,
                ident: i as u16,
                dont_frag: true,
            }),
            udp: UdpRepr {
                src_port: 0xC000,
                dst_port: ROCEV2_UDP_PORT,
                checksum: csum,
            },
            bth: BthRepr::new(Opcode::UD_SEND_ONLY, c.qpn[1], i as u32),
            ext: ExtHeaders {
                deth: Some(roce_stack::wire::ext::DethRepr {
                    qkey: QKEY,
                    rsvd: 0,
                    src_qp: c.qpn[0],
                }),
                ..ExtHeaders::default()
            },
        };
        let mut frame = vec![0u8; repr.frame_len(payload.len())];
        let len = repr.emit(&mut frame, &payload).expect("emit");
        frame.truncate(len);
        let at = 14 + 20 + 6;
        assert_eq!(
            u16::from_be_bytes([frame[at], frame[at + 1]]),
            if i == 0 { partial } else { 0 }
        );
        inject(h[0].tap_mut(), &frame);
        let r = completions(&mut h, 1, c.cq[1], 1);
        assert_eq!(
            (r[0].wr_id, r[0].status, r[0].byte_len),
            (i as u64, WcStatus::Success, 40 + 256)
        );
        let got = &h[1].dev.mr(b.lkey).unwrap().as_slice()[i * 1040..];
        assert_eq!(&got[40..40 + 256], &payload[..]);
    }
}

/// What `roce perf --backend tap` opens (`roce_io::tap::open`): the
/// stack's MAC derived from its IP, and ARP and pings answered by the
/// `NeighIo` in front of the interface without the caller seeing them; and
/// a `TapHost` resolving the kernel's own address by ARP, checked against
/// the bridge's MAC as the kernel reports it.
#[test]
fn tap_open_answers_ping_and_tap_host_resolves_the_kernel() {
    if !netns::preconditions("tests/tap_netns.rs", TOOLS) {
        return;
    }
    let n = Netns::new("o");
    let ip = Ipv4Addr::new(10, 99, 0, 3);
    let mut opened = roce_io::tap::open(&roce_io::BackendOptions {
        local_ip: Some(IpAddr::V4(ip)),
        ifname: Some(n.taps[0].clone()),
        ..Default::default()
    })
    .expect("tap::open");
    n.enslave(&n.taps[0]);
    assert_eq!(opened.mac, [0x02, 0, 10, 99, 0, 3]);
    assert_eq!(opened.ip, IpAddr::V4(ip));
    assert_eq!(opened.io.max_frame_len(), 1500 + 18);

    let mut child = n
        .exec(&["ping", "-c", "1", "-W", "5", "10.99.0.3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ping");
    let start = WallClock::now();
    let mut passed = Vec::new();
    while child.try_wait().expect("ping").is_none() && start.elapsed() < LIMIT {
        opened
            .io
            .rx_burst(32, &mut |f| passed.push(f.to_vec()))
            .expect("rx");
        opened.io.tx_burst(32, &mut |_| None).expect("tx");
        std::thread::sleep(Duration::from_micros(100));
    }
    let out = child.wait_with_output().expect("ping output");
    assert!(
        out.status.success(),
        "ping 10.99.0.3: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Whatever reached the caller is neither ARP (0x0806) nor ICMP.
    for f in &passed {
        assert_ne!(&f[12..14], &[0x08, 0x06]);
        assert!(
            !(f[12..14] == [0x08, 0x00] && f[23] == 1),
            "ICMP passed through"
        );
    }

    let tb = n.tap(1, 1500);
    let mut h = host(2, tb, 1500);
    let kernel = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 254));
    let av = h
        .address_vector(kernel, Duration::from_secs(10))
        .expect("resolve the bridge's address");
    assert_eq!(av.dmac, n.bridge_mac());
    assert_eq!(av.dgid, Gid::from_ip(kernel));
    // Nobody has 10.99.0.77: three requests, then a clear error.
    let err = h
        .resolve(IpAddr::V4(Ipv4Addr::new(10, 99, 0, 77)), LIMIT)
        .expect_err("nobody answers");
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    assert_eq!(h.neigh().counters().resolve_failed, 1);
}
