//! CASES.md scenarios about parsing, the ICRC, length fields and frame layout
//! (R01, R02, R04, R05, R06, R07, R25 b, R32, R33, R34, R37), one or more tests
//! each, named after the scenario id.
//!
//! Oracles: the hex vectors and expected values quoted in
//! `../shared/cases/CASES.md` (copied here as constants), the
//! opcode/extension-header table of `ROCEV2-DIGEST.md` §3, and checksums /
//! CRCs computed in this file from their RFC / digest definitions (never by
//! calling the code under test). R32's comparison with
//! `../shared/reference/pfc.pcap` and `vectors.txt` is in
//! `tests/pfc_reference.rs` (it reads the reference files).

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use roce_stack::icrc::{self, IcrcForm};
use roce_stack::wire::bth::BthRepr;
use roce_stack::wire::ext::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, FethRepr, RdethRepr, RethRepr, XrcethRepr,
};
use roce_stack::wire::grh::GrhRepr;
use roce_stack::wire::pfc::{self, MacControl, PauseRepr, PfcRepr};
use roce_stack::wire::{
    classify, cnp, DropCounters, Error, EthRepr, ExtHeader, ExtHeaders, Frame, IcrcStatus,
    Ipv4Repr, Ipv6Repr, NetInfo, NetRepr, Opcode, PacketRepr, ParseMode, RocePacket, UdpChecksum,
    UdpRepr, VlanTag,
};

// ---------------------------------------------------------------------------
// Oracles and helpers written from the RFCs / the digest, not from our code.
// ---------------------------------------------------------------------------

/// CASES R05 Vector A: a ConnectX-4 Lx CNP, 74 bytes.
const VECTOR_A: &str = "e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a001201000012b7002800008100ffff40000118000000000000000000000000000000000000000082fd002a";
/// CASES R05 Vector B: the scapy UC SEND_ONLY example, 78 bytes.
const VECTOR_B: &str = "248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf17104630818be28935d90e9a95505401be885e50000078f353f3";
/// CASES R07: the derived IPv6 vector, from the IPv6 header onward.
const VECTOR_R07: &str = "60012345001c114020010db800000000000000000000000120010db8000000000000000000000002c13212b7001c00000400ffff00000012800000014142434478677a6c";

const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

fn vector_a() -> Vec<u8> {
    common::unhex(VECTOR_A)
}

fn vector_b() -> Vec<u8> {
    common::unhex(VECTOR_B)
}

/// R07's IPv6 packet behind an Ethernet header of our choosing.
fn vector_r07() -> Vec<u8> {
    let mut f = common::unhex("020000000002020000000001 86dd");
    f.extend(common::unhex(VECTOR_R07));
    f
}

/// Whether the IPv4 header at `ip` (IHL from byte 0) has a valid checksum.
fn ipv4_checksum_ok(ip: &[u8]) -> bool {
    let ihl = (ip[0] & 0x0F) as usize * 4;
    common::ones_sum(&ip[..ihl]) == 0xFFFF
}

/// The RFC 768 / RFC 8200 §8.1 UDP checksum check: the one's-complement sum of
/// the pseudo-header and the whole UDP datagram (checksum field included) must
/// be 0xFFFF.
fn udp_checksum_ok(src: &[u8], dst: &[u8], udp: &[u8]) -> bool {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(src);
    pseudo.extend_from_slice(dst);
    if src.len() == 4 {
        // IPv4: zero, protocol, UDP length (16 bits).
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
    } else {
        // IPv6: upper-layer length (32 bits), 3 zero bytes, next header.
        pseudo.extend_from_slice(&(udp.len() as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 17]);
    }
    let a = common::ones_sum(&pseudo) as u32;
    let b = common::ones_sum(udp) as u32;
    let mut s = a + b;
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s == 0xFFFF
}

/// The ICRC recipe of ROCEV2-DIGEST §4 / CASES R06 on `region` (IP header or
/// GRH up to the ICRC): 8 x 0xFF, then the region with the variant fields forced
/// to ones, through the zlib CRC-32.
fn ref_icrc(ethertype: u16, region: &[u8]) -> u32 {
    let mut r = region.to_vec();
    let bth = match ethertype {
        0x0800 => {
            r[1] = 0xFF; // TOS
            r[8] = 0xFF; // TTL
            r[10] = 0xFF; // header checksum
            r[11] = 0xFF;
            r[26] = 0xFF; // UDP checksum
            r[27] = 0xFF;
            28
        }
        0x86DD | 0x8915 => {
            r[0] |= 0x0F; // traffic class, flow label
            r[1] = 0xFF;
            r[2] = 0xFF;
            r[3] = 0xFF;
            r[7] = 0xFF; // hop limit
            if ethertype == 0x86DD {
                r[46] = 0xFF; // UDP checksum
                r[47] = 0xFF;
                48
            } else {
                40
            }
        }
        e => panic!("ethertype {e:04x}"),
    };
    r[bth + 4] = 0xFF; // BTH FECN, BECN, Resv6a
    let mut d = CRC32.digest();
    d.update(&[0xFF; 8]);
    d.update(&r);
    d.finalize()
}

/// Extension-header bytes after the BTH for `op`, from the table in
/// ROCEV2-DIGEST.md §3 and its transport rules (RD: RDETH, + DETH on requests;
/// XRC requests: XRCETH; UD: DETH [+ ImmDt]; CNP: 16 reserved bytes).
fn digest_ext_len(op: u8) -> Option<usize> {
    let base = op & 0x1F;
    let rc = match base {
        0x00 | 0x01 | 0x02 | 0x04 | 0x07 | 0x08 | 0x0E => Some(0),
        0x03 | 0x05 | 0x09 | 0x0D | 0x0F | 0x10 | 0x11 | 0x16 | 0x17 => Some(4),
        0x06 | 0x0A | 0x0C | 0x1D => Some(16),
        0x0B | 0x1C => Some(20),
        0x12 => Some(12),
        0x13 | 0x14 => Some(28),
        _ => None,
    };
    let response = (0x0D..=0x12).contains(&base);
    match op >> 5 {
        // RC: every operation; UC: SEND and WRITE only (0x20..=0x2B).
        0 => rc,
        1 if base <= 0x0B => rc,
        // RD: RESYNC is RDETH + DETH; the INVALIDATE sends do not exist.
        2 if op == 0x55 => Some(12),
        2 if base == 0x16 || base == 0x17 => None,
        2 => rc.map(|n| n + 4 + if response { 0 } else { 8 }),
        3 => match op {
            0x64 => Some(8),
            0x65 => Some(12),
            _ => None,
        },
        4 if op <= 0x81 => Some(16),
        // XRC: 0xA0..=0xB7, requests with an XRCETH.
        5 if base <= 0x17 => rc.map(|n| n + if response { 0 } else { 4 }),
        _ => None,
    }
}

fn strict(frame: &[u8]) -> Result<RocePacket<'_>, Error> {
    RocePacket::parse(frame)
}

fn lenient(frame: &[u8]) -> Result<RocePacket<'_>, Error> {
    RocePacket::parse_with(frame, ParseMode::Lenient)
}

/// Extension headers for `op` with every field set to a recognisable value.
fn sample_ext(op: Opcode) -> ExtHeaders {
    let mut e = ExtHeaders::default();
    for h in op.info().hdrs.iter() {
        match h {
            ExtHeader::Rdeth => {
                e.rdeth = Some(RdethRepr {
                    rsvd: 0,
                    ee_context: 0x12_3456,
                })
            }
            ExtHeader::Deth => {
                e.deth = Some(DethRepr {
                    qkey: 0x1111_1111,
                    rsvd: 0,
                    src_qp: 0xABC,
                })
            }
            ExtHeader::Xrceth => {
                e.xrceth = Some(XrcethRepr {
                    rsvd: 0,
                    xrc_srq: 0x77,
                })
            }
            ExtHeader::Feth => e.feth = Some(FethRepr { raw: 0x21 }),
            ExtHeader::Reth => {
                e.reth = Some(RethRepr {
                    va: 0x7f00_1234_5000,
                    rkey: 0xABCDEF,
                    dma_len: 4096,
                })
            }
            ExtHeader::AtomicEth => {
                e.atomic_eth = Some(AtomicEthRepr {
                    va: 0x1000_0000,
                    rkey: 0x1234,
                    swap_add: 0x1111_1111_1111_1111,
                    compare: 0x2222_2222_2222_2222,
                })
            }
            ExtHeader::Aeth => {
                e.aeth = Some(AethRepr {
                    syndrome: 0x1F,
                    msn: 5,
                })
            }
            ExtHeader::AtomicAckEth => {
                e.atomic_ack_eth = Some(AtomicAckEthRepr {
                    orig: 0x0102_0304_0506_0708,
                })
            }
            ExtHeader::ImmDt => e.immdt = Some(0xCAFE_F00D),
            ExtHeader::Ieth => e.ieth = Some(0x2B8),
            ExtHeader::CnpPad => e.cnp_pad = Some([0; 16]),
        }
    }
    e
}

fn ipv4_net() -> NetRepr {
    NetRepr::Ipv4(Ipv4Repr {
        src: Ipv4Addr::new(192, 168, 1, 1),
        dst: Ipv4Addr::new(192, 168, 1, 2),
        dscp: 26,
        ecn: 2,
        ttl: 64,
        ident: 0x1234,
        dont_frag: true,
    })
}

fn ipv6_net() -> NetRepr {
    NetRepr::Ipv6(Ipv6Repr {
        src: "fd00::1".parse().unwrap(),
        dst: "fd00::2".parse().unwrap(),
        dscp: 26,
        ecn: 2,
        flow_label: 0x12345,
        hop_limit: 64,
    })
}

fn grh_net() -> NetRepr {
    NetRepr::Grh(GrhRepr {
        traffic_class: 0x6A,
        flow_label: 0x12345,
        payload_len: 0,
        next_header: 0x1B,
        hop_limit: 64,
        sgid: "::ffff:192.168.1.1".parse().unwrap(),
        dgid: "::ffff:192.168.1.2".parse().unwrap(),
    })
}

fn repr(op: Opcode, net: NetRepr, vlan: Option<VlanTag>) -> PacketRepr {
    PacketRepr {
        eth: EthRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan,
        },
        net,
        udp: UdpRepr {
            src_port: 0xC132,
            ..UdpRepr::default()
        },
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(op, 0x12, 0x100)
        },
        ext: sample_ext(op),
    }
}

const ETH: usize = 14;

/// An Ethernet + IPv4 + UDP(4791) frame around `udp_payload`, all lengths and
/// the IPv4 header checksum correct. If the payload is at least BTH + ICRC
/// long, its last 4 bytes are replaced by the correct ICRC.
fn raw_ipv4_frame(udp_payload: &[u8]) -> Vec<u8> {
    let mut f = common::unhex("020000000002 020000000001 0800");
    let total = 28 + udp_payload.len();
    f.extend_from_slice(&[0x45, 0x02]);
    f.extend_from_slice(&(total as u16).to_be_bytes());
    f.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0, 0]);
    f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    f.extend_from_slice(&0xC001u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&((8 + udp_payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(udp_payload);
    common::fix_ipv4_checksum(&mut f[ETH..]);
    if udp_payload.len() >= 16 {
        let end = f.len() - 4;
        let crc = ref_icrc(0x0800, &f[ETH..end]);
        f[end..].copy_from_slice(&crc.to_le_bytes());
    }
    f
}

/// The same over IPv6.
fn raw_ipv6_frame(udp_payload: &[u8]) -> Vec<u8> {
    let mut f = common::unhex("020000000002 020000000001 86dd");
    f.extend_from_slice(&[0x60, 0x00, 0x00, 0x00]);
    f.extend_from_slice(&((8 + udp_payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(&common::unhex("fd000000000000000000000000000001"));
    f.extend_from_slice(&common::unhex("fd000000000000000000000000000002"));
    f.extend_from_slice(&0xC001u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&((8 + udp_payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(udp_payload);
    if udp_payload.len() >= 16 {
        let end = f.len() - 4;
        let crc = ref_icrc(0x86DD, &f[ETH..end]);
        f[end..].copy_from_slice(&crc.to_le_bytes());
    }
    f
}

/// `len` bytes of UDP payload starting with a BTH for `op` (PadCnt `pad`).
fn udp_payload(op: u8, pad: u8, len: usize) -> Vec<u8> {
    let mut bth = vec![op, (pad & 3) << 4, 0xFF, 0xFF, 0, 0, 0, 0x12, 0x80, 0, 1, 0];
    bth.extend((0..len.saturating_sub(12)).map(|i| (i as u8) ^ 0x5A));
    bth.truncate(len);
    bth
}

/// Ethernet header length of a frame (one 802.1Q tag at most).
fn l2_len(f: &[u8]) -> usize {
    if f[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    }
}

// ---------------------------------------------------------------------------
// R01: IPv4 IHL and total-length sanity.
// ---------------------------------------------------------------------------

/// Vector B with `edit` applied to its IPv4 header, the header checksum
/// recomputed; also returns the same with a broken BTH (TVer 0xF), to show that
/// the IP error is found before the BTH is looked at.
fn r01_variant(edit: impl Fn(&mut Vec<u8>)) -> (Vec<u8>, Vec<u8>) {
    let mut f = vector_b();
    assert!(strict(&f).is_ok(), "vector B verifies");
    edit(&mut f);
    common::fix_ipv4_checksum(&mut f[ETH..]);
    let mut g = f.clone();
    // BTH byte 1 sits at 14 + 20 + 8 + 1 for a 20-byte header.
    if g.len() > 43 {
        g[43] |= 0x0F;
    }
    (f, g)
}

fn assert_r01_drop(edit: impl Fn(&mut Vec<u8>), want: Error, counter: &str) {
    assert_r01_drop_as(edit, want, counter, true)
}

fn assert_r01_drop_as(
    edit: impl Fn(&mut Vec<u8>),
    want: Error,
    counter: &str,
    tools_see_roce: bool,
) {
    let (f, g) = r01_variant(edit);
    for frame in [&f, &g] {
        assert_eq!(strict(frame).err(), Some(want));
        assert_eq!(lenient(frame).err(), Some(want), "lenient too");
        assert_eq!(want.counter_name(), counter);
    }
    // Tools see the drop reason as a malformed RoCE frame, unless it is not
    // UDP at all.
    match classify(&f) {
        Frame::BadRoce(_, e) => {
            assert!(tools_see_roce);
            assert_eq!(e, want)
        }
        Frame::Other(_) => assert!(!tools_see_roce || want == Error::NotRoce),
        other => panic!("{other:?}"),
    }
}

#[test]
fn r01a_ipv4_ihl_below_5() {
    assert_r01_drop(|f| f[ETH] = 0x44, Error::Ipv4BadIhl, "rx_ipv4_bad_ihl");
    // Every IHL below 5, including 0.
    for ihl in 0..5u8 {
        assert_r01_drop(
            |f| f[ETH] = 0x40 | ihl,
            Error::Ipv4BadIhl,
            "rx_ipv4_bad_ihl",
        );
    }
}

#[test]
fn r01b_ipv4_ihl_15_on_20_byte_header() {
    // IHL 15 (60 bytes) on vector B: the 60 bytes exist in the frame (its IPv4
    // datagram is 64 bytes), so the header reads as one with 40 bytes of
    // options; by our documented choice (Error::Ipv4Options) it is dropped
    // before anything after the IP header is read. (`classify` looks for port
    // 4791 where the IHL puts the UDP header, finds none, and calls the frame
    // "other".)
    assert_r01_drop_as(
        |f| f[ETH] = 0x4F,
        Error::Ipv4Options,
        "rx_ipv4_options",
        false,
    );
    // When the frame does not even hold 60 bytes after the Ethernet header,
    // the IHL itself is bad.
    let mut f = vector_b();
    f[ETH] = 0x4F;
    f.truncate(ETH + 56);
    assert_eq!(strict(&f).err(), Some(Error::Ipv4BadIhl));
    assert_eq!(lenient(&f).err(), Some(Error::Ipv4BadIhl));
}

#[test]
fn r01c_ipv4_total_len_19() {
    assert_r01_drop(
        |f| f[ETH + 2..ETH + 4].copy_from_slice(&19u16.to_be_bytes()),
        Error::Ipv4BadTotalLen,
        "rx_ipv4_bad_total_len",
    );
    // Anything below header + UDP header (28) as well.
    for total in [0u16, 20, 27] {
        assert_r01_drop(
            |f| f[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes()),
            Error::Ipv4BadTotalLen,
            "rx_ipv4_bad_total_len",
        );
    }
}

#[test]
fn r01d_ipv4_total_len_past_frame() {
    // Total length 100 bytes larger than the frame: the UDP datagram inside
    // still fits, but the IP length runs past the captured bytes. (Before the
    // fix this was only caught by the ICRC, after the BTH was parsed.)
    let (f, g) = r01_variant(|f| {
        let total = (f.len() - ETH + 100) as u16;
        f[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes());
    });
    for frame in [&f, &g] {
        assert_eq!(strict(frame).err(), Some(Error::Truncated));
    }
    assert_eq!(Error::Truncated.counter_name(), "rx_truncated");
    // Even when the sender computed the ICRC over the bogus length (before the
    // fix, this frame was accepted).
    let mut h = f.clone();
    let end = h.len() - 4;
    let crc = ref_icrc(0x0800, &h[ETH..end]);
    h[end..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(strict(&h).err(), Some(Error::Truncated));
    // Tools still show it, with a good ICRC.
    assert_eq!(lenient(&h).unwrap().icrc_status(), IcrcStatus::Ok);
    // The same over IPv6 (payload length past the frame), R07's vector.
    let mut f = vector_r07();
    let plen = (f.len() - ETH - 40 + 100) as u16;
    f[ETH + 4..ETH + 6].copy_from_slice(&plen.to_be_bytes());
    assert_eq!(strict(&f).err(), Some(Error::Truncated));
}

#[test]
fn r01e_ipv4_fragment() {
    // MF = 1 (with and without DF).
    for flags in [0x20u8, 0x60] {
        assert_r01_drop(
            |f| f[ETH + 6] = flags,
            Error::Ipv4Fragment,
            "rx_ipv4_fragment",
        );
    }
    // Fragment offset != 0 (1 and the largest, 8191 x 8 bytes).
    for (b6, b7) in [(0x40u8, 0x01u8), (0x1F, 0xFF), (0x00, 0x10)] {
        assert_r01_drop(
            |f| {
                f[ETH + 6] = b6;
                f[ETH + 7] = b7;
            },
            Error::Ipv4Fragment,
            "rx_ipv4_fragment",
        );
    }
}

#[test]
fn r01f_ipv4_protocol_tcp_with_port_4791() {
    // Protocol 6 while the bytes at the UDP position still say 4791.
    let (f, _) = r01_variant(|f| f[ETH + 9] = 6);
    assert_eq!(&f[ETH + 22..ETH + 24], &4791u16.to_be_bytes());
    assert_r01_drop(|f| f[ETH + 9] = 6, Error::NotRoce, "rx_not_roce");
    assert!(matches!(classify(&f), Frame::Other(Some(_))));
}

#[test]
fn r01_ipv4_options_rejected() {
    // Our documented choice (Error::Ipv4Options docs): IPv4 options are dropped.
    // A well-formed IHL 6 header (4 bytes of NOP options), every length and the
    // checksum consistent, the ICRC computed as if the options were not there.
    let b = vector_b();
    let mut f = b[..ETH + 20].to_vec();
    f.extend_from_slice(&[1, 1, 1, 1]);
    f.extend_from_slice(&b[ETH + 20..]);
    f[ETH] = 0x46;
    let total = (f.len() - ETH) as u16;
    f[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes());
    common::fix_ipv4_checksum(&mut f[ETH..]);
    assert!(ipv4_checksum_ok(&f[ETH..]));
    // The UDP header is at offset 24, and says 4791.
    assert_eq!(&f[ETH + 26..ETH + 28], &4791u16.to_be_bytes());
    assert_eq!(strict(&f).err(), Some(Error::Ipv4Options));
    assert_eq!(lenient(&f).err(), Some(Error::Ipv4Options));
    assert_eq!(Error::Ipv4Options.counter_name(), "rx_ipv4_options");
    match classify(&f) {
        Frame::BadRoce(_, e) => assert_eq!(e, Error::Ipv4Options),
        other => panic!("{other:?}"),
    }
}

#[test]
fn r01_variants_have_distinct_counters() {
    let errors = [
        Error::Ipv4BadIhl,      // a
        Error::Ipv4Options,     // b (and the options choice)
        Error::Ipv4BadTotalLen, // c
        Error::Truncated,       // d
        Error::Ipv4Fragment,    // e
        Error::NotRoce,         // f
    ];
    let mut c = DropCounters::default();
    for e in &errors {
        c.record(e);
    }
    for e in &errors {
        assert_eq!(c.get(e.counter_name()), 1, "{e:?}");
    }
    assert_eq!(c.iter().count(), errors.len());
}

// ---------------------------------------------------------------------------
// R02: truncated extension headers, for every opcode.
// ---------------------------------------------------------------------------

/// Minimum UDP payload (BTH + extension headers + ICRC) per opcode; for
/// unsupported opcodes BTH + ICRC.
fn min_udp_payload(op: u8) -> usize {
    12 + digest_ext_len(op).unwrap_or(0) + 4
}

#[test]
fn r02_conventions_minimum_lengths() {
    // The minimums listed in CASES.md's conventions (BTH 12 and ICRC 4 counted).
    for (op, min) in [
        (0x11u8, 20usize), // ACK
        (0x0C, 32),        // READ_REQ
        (0x06, 32),        // WRITE_FIRST
        (0x0A, 32),        // WRITE_ONLY
        (0x0B, 36),        // WRITE_ONLY_IMM
        (0x13, 44),        // CMP_SWAP
        (0x14, 44),        // FETCH_ADD
        (0x12, 28),        // ATOMIC_ACK
        (0x64, 24),        // UD SEND_ONLY
        (0x81, 32),        // CNP
    ] {
        assert_eq!(min_udp_payload(op), min, "opcode {op:#04x}");
        let info = Opcode(op).info();
        assert_eq!(12 + info.hdr_len as usize + 4, min, "table, {op:#04x}");
    }
    // And the digest table agrees with ours for every supported opcode.
    for op in Opcode::all_supported() {
        assert_eq!(
            Some(op.info().hdr_len as usize),
            digest_ext_len(op.0),
            "{op:?}"
        );
    }
    // ... and both know the same set of opcodes.
    for op in 0..=255u8 {
        assert_eq!(
            Opcode(op).is_supported(),
            digest_ext_len(op).is_some(),
            "{op:#04x}"
        );
    }
}

#[test]
fn r02_every_opcode_every_short_length() {
    for op in 0..=255u8 {
        let supported = Opcode(op).is_supported();
        let min = min_udp_payload(op);
        for len in 0..=min + 8 {
            let payload = udp_payload(op, 0, len);
            for ipv6 in [false, true] {
                let f = if ipv6 {
                    raw_ipv6_frame(&payload)
                } else {
                    raw_ipv4_frame(&payload)
                };
                // Also with Ethernet padding to 60 bytes (must never be read as
                // the ICRC) and with an FCS-like trailer.
                let mut padded = f.clone();
                if padded.len() < 60 {
                    padded.resize(60, 0);
                }
                let mut trailer = f.clone();
                trailer.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
                for frame in [&f, &padded, &trailer] {
                    let ctx = format!("op {op:#04x} len {len} ipv6 {ipv6} frame {}", frame.len());
                    let s = strict(frame);
                    let l = lenient(frame);
                    let _ = classify(frame);
                    if len < min {
                        let e = s.expect_err(&ctx);
                        if supported {
                            assert!(e.counter_name().contains("truncated"), "{ctx}: {e:?}");
                            let le = l.expect_err(&ctx);
                            assert!(le.counter_name().contains("truncated"), "{ctx}: {le:?}");
                            assert!(matches!(classify(frame), Frame::BadRoce(..)), "{ctx}");
                        } else if len < 16 {
                            assert!(l.is_err(), "{ctx}");
                        }
                    } else if supported {
                        let p = s.unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
                        assert_eq!(p.payload().len(), len - min, "{ctx}");
                        let icrc_at = ETH + if ipv6 { 48 } else { 28 } + len - 4;
                        assert_eq!(p.icrc().unwrap(), frame[icrc_at..icrc_at + 4], "{ctx}");
                    } else {
                        assert_eq!(s.err(), Some(Error::UnsupportedOpcode(op)), "{ctx}");
                        // Tools still see it, with the ICRC from its real place.
                        let p = l.unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
                        assert_eq!(p.icrc_status(), IcrcStatus::Ok, "{ctx}");
                    }
                }
                // The same lengths with a wrong ICRC are never accepted.
                if len >= 16 {
                    let mut bad = f.clone();
                    let n = bad.len();
                    bad[n - 1] ^= 0x01;
                    assert!(strict(&bad).is_err(), "op {op:#04x} len {len}");
                }
            }
        }
    }
}

#[test]
fn r02_udp_len_below_8() {
    let base = raw_ipv4_frame(&udp_payload(0x04, 0, 16));
    assert!(strict(&base).is_ok());
    for ulen in 0..8u16 {
        let mut f = base.clone();
        f[ETH + 24..ETH + 26].copy_from_slice(&ulen.to_be_bytes());
        assert_eq!(strict(&f).err(), Some(Error::UdpBadLen), "udp len {ulen}");
        assert_eq!(lenient(&f).err(), Some(Error::UdpBadLen), "udp len {ulen}");
        assert_eq!(Error::UdpBadLen.counter_name(), "rx_udp_bad_len");
    }
    let base6 = raw_ipv6_frame(&udp_payload(0x04, 0, 16));
    for ulen in 0..8u16 {
        let mut f = base6.clone();
        f[ETH + 44..ETH + 46].copy_from_slice(&ulen.to_be_bytes());
        assert_eq!(
            strict(&f).err(),
            Some(Error::UdpBadLen),
            "v6 udp len {ulen}"
        );
    }
}

#[test]
fn r02_udp_len_beyond_ip_payload() {
    let base = raw_ipv4_frame(&udp_payload(0x04, 0, 20));
    assert!(strict(&base).is_ok());
    // Extra bytes in the frame, so only the IP length says "too long".
    for extra in [1u16, 4, 100, 0xFFFF - 28] {
        let mut f = base.clone();
        f.resize(f.len() + 200, 0);
        let ulen = 28 + extra;
        f[ETH + 24..ETH + 26].copy_from_slice(&ulen.to_be_bytes());
        assert_eq!(strict(&f).err(), Some(Error::UdpBadLen), "+{extra}");
        assert_eq!(lenient(&f).err(), Some(Error::UdpBadLen), "+{extra}");
    }
    let base6 = raw_ipv6_frame(&udp_payload(0x04, 0, 20));
    let mut f = base6.clone();
    f.resize(f.len() + 200, 0);
    f[ETH + 44..ETH + 46].copy_from_slice(&29u16.to_be_bytes());
    assert_eq!(strict(&f).err(), Some(Error::UdpBadLen));
}

#[test]
fn r02_padcnt_larger_than_payload() {
    // SEND_ONLY with PadCnt = 3 and no data: the payload length would be -3.
    // Valid ICRC, so only the pad check can catch it.
    for (data, pad) in [(0usize, 3u8), (0, 1), (2, 3), (1, 2)] {
        let f = raw_ipv4_frame(&udp_payload(0x04, pad, 16 + data));
        assert_eq!(
            strict(&f).err(),
            Some(Error::PadTooLarge),
            "data {data} pad {pad}"
        );
        assert_eq!(lenient(&f).err(), Some(Error::PadTooLarge));
        assert_eq!(Error::PadTooLarge.counter_name(), "rx_pad_too_large");
    }
    // Exactly enough bytes is fine: 3 data bytes all pad -> 0 payload bytes.
    let f = raw_ipv4_frame(&udp_payload(0x04, 3, 19));
    let p = strict(&f).unwrap();
    assert_eq!(p.payload().len(), 0);
    assert_eq!(p.pad(), 3);
    // Opcodes with extension headers: pad may not eat into them.
    for op in [0x11u8, 0x0C, 0x13, 0x12, 0x64, 0x81] {
        let min = min_udp_payload(op);
        let f = raw_ipv4_frame(&udp_payload(op, 3, min));
        assert_eq!(strict(&f).err(), Some(Error::PadTooLarge), "{op:#04x}");
    }
}

#[test]
fn r02_valid_packet_last_byte_cut_off() {
    let mut frames: Vec<(String, Vec<u8>)> = common::reference_vectors()
        .into_iter()
        .filter(|(n, _)| !n.contains("PAUSE") && !n.contains("PFC"))
        .collect();
    frames.push(("R05 A".into(), vector_a()));
    frames.push(("R05 B".into(), vector_b()));
    frames.push(("R07".into(), vector_r07()));
    assert!(frames.len() >= 13);
    for (name, f) in &frames {
        assert!(strict(f).is_ok(), "{name}");
        for cut in 1..=f.len() {
            let g = &f[..f.len() - cut];
            let s = strict(g);
            assert!(s.is_err(), "{name} cut {cut}");
            if cut <= 4 {
                assert_eq!(s.err(), Some(Error::Truncated), "{name} cut {cut}");
            }
            // Lenient parsing may show the headers, never an ICRC.
            if let Ok(p) = lenient(g) {
                assert_eq!(p.icrc(), None, "{name} cut {cut}");
                assert_eq!(p.icrc_status(), IcrcStatus::Truncated);
                assert_eq!(p.computed_icrc(), None);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// R04: trailing bytes after the UDP datagram.
// ---------------------------------------------------------------------------

#[test]
fn r04a_trailing_deadbeef_is_not_the_icrc() {
    let mut f = vector_a();
    f.extend_from_slice(&[0xDE, 0xAD, 0xBE, 0xEF]);
    let p = strict(&f).expect("accepted");
    assert_eq!(p.icrc(), Some([0x82, 0xFD, 0x00, 0x2A]));
    assert_eq!(p.icrc_status(), IcrcStatus::Ok);
    assert!(p.payload().is_empty());
    // UDP start + UDP length - 4.
    assert_eq!(p.icrc_region().len(), 20 + 40 - 4);
}

#[test]
fn r04b_trailing_zero_bytes() {
    let mut f = vector_a();
    f.extend_from_slice(&[0; 10]);
    let p = strict(&f).expect("accepted");
    assert_eq!(p.icrc(), Some([0x82, 0xFD, 0x00, 0x2A]));
    // Same for vector B (payload with pad) and the IPv6 vector.
    for mut f in [vector_b(), vector_r07()] {
        let want = f[f.len() - 4..].to_vec();
        let plen = strict(&f).unwrap().payload().len();
        f.extend_from_slice(&[0; 10]);
        let p = strict(&f).expect("accepted");
        assert_eq!(p.icrc().unwrap().to_vec(), want);
        assert_eq!(p.payload().len(), plen);
    }
}

#[test]
fn r04c_udp_length_past_captured_bytes() {
    let f = vector_a();
    for len in ETH + 28..f.len() {
        assert_eq!(strict(&f[..len]).err(), Some(Error::Truncated), "len {len}");
    }
    // Also when Ethernet padding makes the frame long enough in total, but the
    // UDP length claims more than the IP datagram holds.
    let mut g = f.clone();
    g[ETH + 24..ETH + 26].copy_from_slice(&44u16.to_be_bytes());
    g.extend_from_slice(&[0; 8]);
    assert_eq!(strict(&g).err(), Some(Error::UdpBadLen));
}

/// Check one emitted frame against the length rules of R04 d.
fn check_r04d(f: &[u8], op: Opcode, payload_len: usize, ctx: &str) {
    let l2 = l2_len(f);
    let pad = (4 - payload_len % 4) % 4;
    let ext = digest_ext_len(op.0).expect("supported");
    let ethertype = u16::from_be_bytes([f[l2 - 2], f[l2 - 1]]);
    let l3 = &f[l2..];
    let (bth_off, l3_len) = match ethertype {
        0x0800 => {
            let total = u16::from_be_bytes([l3[2], l3[3]]) as usize;
            let udp = u16::from_be_bytes([l3[24], l3[25]]) as usize;
            assert_eq!(l3[0], 0x45, "{ctx}: IHL 5");
            assert_eq!(total, 20 + udp, "{ctx}: IP total = 20 + UDP");
            assert_eq!(udp, 8 + 12 + ext + payload_len + pad + 4, "{ctx}: UDP len");
            assert!(ipv4_checksum_ok(l3), "{ctx}: IPv4 header checksum");
            assert_eq!(l3[6] & 0x3F, 0, "{ctx}: not a fragment");
            assert_eq!(l3[7], 0, "{ctx}: not a fragment");
            // UDP checksum 0 by default over IPv4 (R37 c).
            assert_eq!(&l3[26..28], &[0, 0], "{ctx}: UDP checksum 0");
            (28, total)
        }
        0x86DD => {
            let plen = u16::from_be_bytes([l3[4], l3[5]]) as usize;
            let udp = u16::from_be_bytes([l3[44], l3[45]]) as usize;
            assert_eq!(plen, udp, "{ctx}: IPv6 payload = UDP");
            assert_eq!(udp, 8 + 12 + ext + payload_len + pad + 4, "{ctx}: UDP len");
            assert!(
                udp_checksum_ok(&l3[8..24], &l3[24..40], &l3[40..40 + udp]),
                "{ctx}: IPv6 UDP checksum"
            );
            (48, 40 + plen)
        }
        0x8915 => {
            let plen = u16::from_be_bytes([l3[4], l3[5]]) as usize;
            assert_eq!(plen, 12 + ext + payload_len + pad + 4, "{ctx}: GRH PayLen");
            (40, 40 + plen)
        }
        e => panic!("{ctx}: ethertype {e:04x}"),
    };
    assert_eq!((l3[bth_off + 1] >> 4) & 3, pad as u8, "{ctx}: PadCnt");
    // Pad bytes are zero.
    let pad_at = l2 + bth_off + 12 + ext + payload_len;
    assert!(
        f[pad_at..pad_at + pad].iter().all(|&b| b == 0),
        "{ctx}: pad"
    );
    // Frame = headers + ICRC, or 60 bytes zero-padded (no FCS).
    let end = l2 + l3_len;
    assert_eq!(f.len(), end.max(60), "{ctx}: frame length");
    assert!(f[end..].iter().all(|&b| b == 0), "{ctx}: Ethernet padding");
    // The ICRC sits at the end of the length fields, not of the frame.
    let crc = ref_icrc(ethertype, &l3[..l3_len - 4]);
    assert_eq!(&l3[l3_len - 4..l3_len], &crc.to_le_bytes(), "{ctx}: ICRC");
}

#[test]
fn r04d_tx_lengths_every_opcode() {
    let vlan = Some(VlanTag {
        pcp: 3,
        dei: false,
        vid: 100,
    });
    let mut checked = 0;
    let mut padded = 0;
    for op in Opcode::all_supported() {
        for net in [ipv4_net(), ipv6_net(), grh_net()] {
            for tag in [None, vlan] {
                for payload_len in [0usize, 1, 2, 3, 4, 5, 17, 256, 1024] {
                    let payload: Vec<u8> = (0..payload_len).map(|i| i as u8 | 1).collect();
                    let r = repr(op, net, tag);
                    let f = common::emit(&r, &payload);
                    let ctx = format!("{op:?} {net:?} vlan {} len {payload_len}", tag.is_some());
                    check_r04d(&f, op, payload_len, &ctx);
                    if f.len() == 60 && l2_len(&f) + 28 + 12 + payload_len + 4 < 60 {
                        padded += 1;
                    }
                    // And it parses back to what was built.
                    let p = strict(&f).unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
                    assert_eq!(p.payload(), &payload[..], "{ctx}");
                    assert_eq!(p.ext().to_headers(), r.ext, "{ctx}");
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 88 * 3 * 2 * 9);
    assert!(padded > 0, "some frames needed Ethernet padding");
}

#[test]
fn r04d_short_frames_zero_padded() {
    // RC SEND_ONLY over IPv4 without payload: 14 + 20 + 8 + 12 + 4 = 58 bytes,
    // sent as 60 with two zero bytes that no length counts.
    let r = repr(Opcode::RC_SEND_ONLY, ipv4_net(), None);
    let f = common::emit(&r, &[]);
    assert_eq!(f.len(), 60);
    assert_eq!(&f[58..], &[0, 0]);
    assert_eq!(u16::from_be_bytes([f[16], f[17]]), 44);
    assert_eq!(u16::from_be_bytes([f[38], f[39]]), 24);
    let p = strict(&f).unwrap();
    assert_eq!(p.icrc().unwrap(), f[54..58]);
    // The buffer had junk in it (emit() fills with 0xAA): all overwritten.
    // Control frames too: PAUSE, PFC, ARP are exactly 60 bytes.
    let mut buf = [0xAAu8; 80];
    let n = MacControl::Pause(PauseRepr { quanta: 1 })
        .emit([2, 0, 0, 0, 0, 1], &mut buf)
        .unwrap();
    assert_eq!(n, 60);
    assert!(buf[18..60].iter().all(|&b| b == 0));
    let mut buf = [0xAAu8; 80];
    let arp = roce_stack::wire::arp::ArpRepr::request(
        [2, 0, 0, 0, 0, 1],
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
    );
    let n = arp.emit_frame(&mut buf).unwrap();
    assert_eq!(n, 60);
    // Ethernet 14 + ARP 28 = 42, then 18 zero bytes.
    assert!(buf[42..60].iter().all(|&b| b == 0));
}

// ---------------------------------------------------------------------------
// R05: golden ICRC vectors from real hardware.
// ---------------------------------------------------------------------------

#[test]
fn r05_vector_a_cx4_cnp_verifies() {
    let f = vector_a();
    assert_eq!(f.len(), 74);
    let p = strict(&f).expect("vector A verifies");
    assert_eq!(p.icrc(), Some([0x82, 0xFD, 0x00, 0x2A]));
    assert_eq!(p.computed_icrc(), Some(0x2A00_FD82));
    // What the receiver must accept: source port 0, UDP checksum 0, DSCP 48
    // with ECT(0), BECN set.
    let udp = p.udp().unwrap();
    assert_eq!(udp.src_port, 0);
    assert_eq!(udp.checksum, 0);
    assert_eq!(p.net().dscp(), 48);
    assert_eq!(p.net().ecn(), 2);
    assert!(p.bth().becn);
    assert_eq!(p.bth().opcode, Opcode::CNP);
    assert_eq!(p.bth().dest_qp, 0x118);
    assert_eq!(cnp::cnp_target(&p), Some(0x118));
    // Our ICRC and the recipe agree.
    assert_eq!(icrc::compute(IcrcForm::Ipv4, &f[ETH..70]), Ok(0x2A00_FD82));
    assert_eq!(ref_icrc(0x0800, &f[ETH..70]), 0x2A00_FD82);
}

#[test]
fn r05_vector_a_generated_from_fields() {
    let f = vector_a();
    // From the parsed fields.
    let p = strict(&f).unwrap();
    let out = common::emit(&PacketRepr::from_packet(&p), p.payload());
    assert_eq!(out, f);
    assert_eq!(&out[70..], &[0x82, 0xFD, 0x00, 0x2A]);
    // From the fields as CASES / public-vectors A1 state them.
    let r = PacketRepr {
        eth: EthRepr {
            dst: [0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2],
            src: [0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32],
            vlan: None,
        },
        net: NetRepr::Ipv4(Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 17, 1),
            dst: Ipv4Addr::new(10, 0, 18, 1),
            dscp: 48,
            ecn: 2,
            ttl: 64,
            ident: 0x718c,
            dont_frag: true,
        }),
        udp: UdpRepr {
            src_port: 0,
            dst_port: 4791,
            checksum: UdpChecksum::Zero,
        },
        bth: cnp::bth(0x118),
        ext: cnp::ext(),
    };
    let out = common::emit(&r, &[]);
    assert_eq!(&out[70..], &[0x82, 0xFD, 0x00, 0x2A]);
    assert_eq!(out, f);
    // The default IPv4 policy is also checksum 0.
    let r2 = PacketRepr {
        udp: UdpRepr {
            checksum: UdpChecksum::Default,
            ..r.udp
        },
        ..r
    };
    assert_eq!(common::emit(&r2, &[]), f);
}

#[test]
fn r05_vector_b_scapy_uc_send_only() {
    let f = vector_b();
    assert_eq!(f.len(), 78);
    let p = strict(&f).expect("vector B verifies");
    assert_eq!(p.bth().opcode, Opcode::UC_SEND_ONLY);
    assert!(p.bth().migreq);
    assert_eq!(p.bth().pad_count, 2);
    assert_eq!(p.pad(), 2);
    assert_eq!(p.payload().len(), 18);
    assert_eq!(p.payload(), &f[54..72]);
    assert_eq!(p.bth().dest_qp, 211);
    assert_eq!(p.bth().psn, 13_571_856);
    assert_eq!(p.icrc(), Some([0x78, 0xF3, 0x53, 0xF3]));
    assert_eq!(
        ref_icrc(0x0800, &f[ETH..74]).to_le_bytes(),
        [0x78, 0xF3, 0x53, 0xF3]
    );
    // scapy asserts IP checksum 0xb4d5 and UDP checksum 0xaca2: both valid.
    assert!(ipv4_checksum_ok(&f[ETH..]));
    assert!(udp_checksum_ok(&f[26..30], &f[30..34], &f[34..78]));
    // Rebuilt from its fields, byte for byte (UDP checksum computed, not copied).
    let r = PacketRepr {
        udp: UdpRepr {
            checksum: UdpChecksum::Compute,
            ..PacketRepr::from_packet(&p).udp
        },
        ..PacketRepr::from_packet(&p)
    };
    assert_eq!(common::emit(&r, p.payload()), f);
}

/// Vector A with `edit` applied to the bytes after the Ethernet header, the
/// IPv4 header checksum recomputed.
fn edit_a(edit: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut f = vector_a();
    let mut l3 = f.split_off(ETH);
    edit(&mut l3);
    common::fix_ipv4_checksum(&mut l3);
    f.extend(l3);
    f
}

#[test]
fn r05_vector_a_icrc_invariant_under_masked_fields() {
    let want = Some([0x82, 0xFD, 0x00, 0x2A]);
    let mut variants: Vec<(&str, Vec<u8>)> = Vec::new();
    for tos in [0x00u8, 0x03, 0xC0, 0xFF, 0xC3] {
        variants.push(("TOS", edit_a(|l3| l3[1] = tos)));
    }
    for ttl in [1u8, 7, 255] {
        variants.push(("TTL", edit_a(|l3| l3[8] = ttl)));
    }
    for csum in [0x0000u16, 0x1234, 0xFFFF] {
        variants.push((
            "UDP checksum",
            edit_a(|l3| l3[26..28].copy_from_slice(&csum.to_be_bytes())),
        ));
    }
    for b4 in [0x00u8, 0x80, 0xC0, 0x3F, 0xFF] {
        variants.push(("BTH byte 4", edit_a(|l3| l3[32] = b4)));
    }
    for (what, f) in &variants {
        let p = strict(f).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(p.icrc(), want, "{what}");
        assert_eq!(p.computed_icrc(), Some(0x2A00_FD82), "{what}");
    }
    // The IPv4 header checksum is masked too (the parser checks it, so look at
    // the ICRC function alone).
    let mut l3 = vector_a()[ETH..70].to_vec();
    l3[10] ^= 0x5A;
    l3[11] ^= 0xA5;
    assert_eq!(icrc::compute(IcrcForm::Ipv4, &l3), Ok(0x2A00_FD82));
    assert_eq!(ref_icrc(0x0800, &l3), 0x2A00_FD82);
}

#[test]
fn r05_vector_a_icrc_changes_with_covered_fields() {
    let mut variants: Vec<(String, Vec<u8>)> = vec![
        // DestQP 0x000118 -> 0x000119.
        ("DestQP".into(), edit_a(|l3| l3[35] = 0x19)),
        ("PSN".into(), edit_a(|l3| l3[39] ^= 0x01)),
        ("PSN high".into(), edit_a(|l3| l3[37] ^= 0x80)),
        ("P_Key".into(), edit_a(|l3| l3[30] = 0x7F)),
        ("UDP source port".into(), edit_a(|l3| l3[21] = 0x01)),
        ("IP source".into(), edit_a(|l3| l3[15] ^= 0x01)),
        ("IP destination".into(), edit_a(|l3| l3[19] ^= 0x01)),
        // IP total length + 4, with 4 more bytes inside the IP datagram after
        // the UDP datagram (UDP length and ICRC position unchanged).
        (
            "IP total length".into(),
            edit_a(|l3| {
                l3[2..4].copy_from_slice(&64u16.to_be_bytes());
                l3.extend_from_slice(&[0; 4]);
            }),
        ),
    ];
    for i in 0..16 {
        variants.push((format!("payload byte {i}"), edit_a(|l3| l3[40 + i] ^= 0x01)));
    }
    for (what, f) in &variants {
        assert_eq!(strict(f).err(), Some(Error::IcrcMismatch), "{what}");
        let p = lenient(f).unwrap();
        assert_ne!(p.computed_icrc(), Some(0x2A00_FD82), "{what}");
    }
    // The UDP destination port is covered as well (the parser drops the frame
    // as not RoCE, so look at the ICRC function).
    let l3 = vector_a()[ETH..70].to_vec();
    for off in [22usize, 23] {
        let mut m = l3.clone();
        m[off] ^= 0x01;
        assert_ne!(icrc::compute(IcrcForm::Ipv4, &m), Ok(0x2A00_FD82));
        assert_ne!(ref_icrc(0x0800, &m), 0x2A00_FD82);
    }
}

// ---------------------------------------------------------------------------
// R06: ICRC recipe pitfalls ("tests of the test").
// ---------------------------------------------------------------------------

/// Vector A's covered bytes with the variant fields forced to `fill`.
fn vector_a_masked(fill: u8) -> Vec<u8> {
    let mut r = vector_a()[ETH..70].to_vec();
    for i in [1usize, 8, 10, 11, 26, 27, 32] {
        r[i] = fill;
    }
    r
}

#[test]
fn r06_no_ff_prefix_gives_fddad1c3() {
    assert_eq!(CRC32.checksum(&vector_a_masked(0xFF)), 0xFDDA_D1C3);
    // With the prefix: the right value.
    let mut with = vec![0xFF; 8];
    with.extend(vector_a_masked(0xFF));
    assert_eq!(CRC32.checksum(&with), 0x2A00_FD82);
}

#[test]
fn r06_zero_masking_differs() {
    let mut with = vec![0xFF; 8];
    with.extend(vector_a_masked(0x00));
    let v = CRC32.checksum(&with);
    assert_ne!(v, 0x2A00_FD82);
    // And a frame carrying that value is rejected.
    let mut f = vector_a();
    f[70..].copy_from_slice(&v.to_le_bytes());
    assert_eq!(strict(&f).err(), Some(Error::IcrcMismatch));
}

#[test]
fn r06_big_endian_icrc_rejected() {
    let mut f = vector_a();
    f[70..].copy_from_slice(&0x2A00_FD82u32.to_be_bytes());
    assert_eq!(&f[70..], &[0x2A, 0x00, 0xFD, 0x82]);
    let e = strict(&f).unwrap_err();
    assert_eq!(e, Error::IcrcMismatch);
    assert_eq!(e.counter_name(), "rx_icrc_err");
    let mut c = DropCounters::default();
    c.record(&e);
    assert_eq!(c.get("rx_icrc_err"), 1);
    // Lenient parsing reports both values.
    assert_eq!(
        lenient(&f).unwrap().icrc_status(),
        IcrcStatus::Bad {
            expected: 0x2A00_FD82,
            found: 0x82FD_002A,
        }
    );
}

// ---------------------------------------------------------------------------
// R07: IPv6 ICRC masking.
// ---------------------------------------------------------------------------

#[test]
fn r07_ipv6_derived_vector() {
    let f = vector_r07();
    let p = strict(&f).expect("R07 vector verifies");
    assert_eq!(p.icrc(), Some([0x78, 0x67, 0x7A, 0x6C]));
    match p.net() {
        NetInfo::Ipv6(i) => {
            assert_eq!(i.src, "2001:db8::1".parse::<Ipv6Addr>().unwrap());
            assert_eq!(i.dst, "2001:db8::2".parse::<Ipv6Addr>().unwrap());
            assert_eq!(i.flow_label, 0x12345);
            assert_eq!(i.hop_limit, 64);
            assert_eq!(i.payload_len, 28);
            assert_eq!((i.dscp, i.ecn), (0, 0));
        }
        other => panic!("{other:?}"),
    }
    let udp = p.udp().unwrap();
    assert_eq!((udp.src_port, udp.len, udp.checksum), (0xC132, 28, 0));
    assert_eq!(p.bth().opcode, Opcode::RC_SEND_ONLY);
    assert_eq!(p.bth().dest_qp, 0x12);
    assert_eq!(p.bth().psn, 1);
    assert!(p.bth().ack_req);
    assert_eq!(p.payload(), b"ABCD");
    assert_eq!(
        ref_icrc(0x86DD, &f[ETH..f.len() - 4]).to_le_bytes(),
        [0x78, 0x67, 0x7A, 0x6C]
    );
}

#[test]
fn r07_ipv6_built_from_fields() {
    let r = PacketRepr {
        eth: EthRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
        },
        net: NetRepr::Ipv6(Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            dscp: 0,
            ecn: 0,
            flow_label: 0x12345,
            hop_limit: 64,
        }),
        udp: UdpRepr {
            src_port: 0xC132,
            dst_port: 4791,
            checksum: UdpChecksum::Zero,
        },
        bth: BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode::RC_SEND_ONLY, 0x12, 1)
        },
        ext: ExtHeaders::default(),
    };
    assert_eq!(common::emit(&r, b"ABCD"), vector_r07());
}

/// R07's frame with `edit` applied to the bytes after the Ethernet header.
fn edit_r07(edit: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut f = vector_r07();
    let mut l3 = f.split_off(ETH);
    edit(&mut l3);
    f.extend(l3);
    f
}

#[test]
fn r07_ipv6_icrc_invariances() {
    let want = [0x78, 0x67, 0x7A, 0x6C];
    let unchanged = [
        // TC = 0x6B (DSCP 26 + CE).
        (
            "TC 0x6B",
            edit_r07(|l3| {
                l3[0] = 0x66;
                l3[1] = 0xB1;
            }),
        ),
        (
            "FL 0",
            edit_r07(|l3| {
                l3[1] &= 0xF0;
                l3[2] = 0;
                l3[3] = 0;
            }),
        ),
        ("HL 1", edit_r07(|l3| l3[7] = 1)),
        (
            "UDP checksum",
            edit_r07(|l3| l3[46..48].copy_from_slice(&[0x12, 0x34])),
        ),
        ("BTH byte 4", edit_r07(|l3| l3[52] = 0xC0)),
    ];
    for (what, f) in &unchanged {
        let p = strict(f).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(p.icrc(), Some(want), "{what}");
        assert_eq!(p.computed_icrc(), Some(u32::from_le_bytes(want)));
    }
    let p = strict(&unchanged[0].1).unwrap();
    assert_eq!((p.net().dscp(), p.net().ecn()), (26, 3));

    // Payload length +4 (4 bytes after the UDP datagram inside the IPv6
    // payload): covered, so the ICRC no longer matches.
    let f = edit_r07(|l3| {
        l3[4..6].copy_from_slice(&32u16.to_be_bytes());
        l3.extend_from_slice(&[0; 4]);
    });
    assert_eq!(strict(&f).err(), Some(Error::IcrcMismatch));
    // Next header: covered (the parser sees it is not UDP, so check the ICRC
    // functions on the region).
    let mut region = vector_r07()[ETH..ETH + 64].to_vec();
    region[6] = 0x3B;
    assert_ne!(ref_icrc(0x86DD, &region), 0x6C7A_6778);
    assert_ne!(icrc::compute(IcrcForm::Ipv6, &region), Ok(0x6C7A_6778));
    // The masked version nibble is *not* masked: version stays covered.
    let mut region = vector_r07()[ETH..ETH + 64].to_vec();
    region[0] = 0x70;
    assert_ne!(icrc::compute(IcrcForm::Ipv6, &region), Ok(0x6C7A_6778));
}

#[test]
fn r07_ipv6_short_datagram_dropped() {
    for len in 0..16 {
        let f = raw_ipv6_frame(&udp_payload(0x04, 0, len));
        let e = strict(&f).expect_err("short");
        assert_eq!(e, Error::BthTruncated, "len {len}");
        assert!(lenient(&f).is_err());
        assert!(matches!(
            classify(&f),
            Frame::BadRoce(_, Error::BthTruncated)
        ));
    }
    // An IPv6 header alone, or with half a UDP header.
    let f = raw_ipv6_frame(&[]);
    for cut in [ETH + 39, ETH + 40, ETH + 44] {
        assert!(strict(&f[..cut]).is_err());
        let _ = classify(&f[..cut]);
    }
}

// ---------------------------------------------------------------------------
// R25 b: any UDP source port is accepted; the parser does not use it.
// ---------------------------------------------------------------------------

#[test]
fn r25b_any_source_port_accepted() {
    // Vector A has source port 0.
    assert_eq!(strict(&vector_a()).unwrap().udp().unwrap().src_port, 0);
    let base = repr(Opcode::RC_SEND_ONLY, ipv4_net(), None);
    for sport in [0u16, 1, 72, 4791, 0xC000, 0xC132, 0xFFFF] {
        for net in [ipv4_net(), ipv6_net()] {
            let r = PacketRepr {
                net,
                udp: UdpRepr {
                    src_port: sport,
                    ..base.udp
                },
                ..base
            };
            let f = common::emit(&r, b"data");
            let p = strict(&f).unwrap_or_else(|e| panic!("sport {sport}: {e:?}"));
            assert_eq!(p.udp().unwrap().src_port, sport);
        }
    }
}

#[test]
fn r25b_source_port_not_used() {
    let base = repr(Opcode::RC_RDMA_WRITE_ONLY, ipv4_net(), None);
    let reference = common::emit(&base, b"payload!");
    let p0 = strict(&reference).unwrap();
    for sport in [0u16, 1, 4791, 0xFFFF] {
        let r = PacketRepr {
            udp: UdpRepr {
                src_port: sport,
                ..base.udp
            },
            ..base
        };
        let f = common::emit(&r, b"payload!");
        let p = strict(&f).unwrap();
        // Everything the parser reports is the same but the port itself (and
        // the ICRC, which covers it).
        assert_eq!(p.l2(), p0.l2());
        assert_eq!(p.net(), p0.net());
        assert_eq!(p.bth(), p0.bth());
        assert_eq!(p.ext(), p0.ext());
        assert_eq!(p.payload(), p0.payload());
        assert_eq!(p.pad(), p0.pad());
        let (u, u0) = (p.udp().unwrap(), p0.udp().unwrap());
        assert_eq!(
            (u.dst_port, u.len, u.checksum),
            (u0.dst_port, u0.len, u0.checksum)
        );
    }
}

// ---------------------------------------------------------------------------
// R32-R34: PFC / PAUSE frames.
// ---------------------------------------------------------------------------

const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

fn emit_mac_control(m: MacControl) -> Vec<u8> {
    let mut buf = vec![0xAAu8; 100];
    let n = m.emit(SRC_MAC, &mut buf).unwrap();
    assert_eq!(n, 60);
    buf.truncate(n);
    buf
}

#[test]
fn r32_pfc_xoff_priority3_exact_bytes() {
    let mut want = common::unhex(
        "0180c2000001 020000000001 8808 0101 0008 0000 0000 0000 ffff 0000 0000 0000 0000",
    );
    want.extend_from_slice(&[0; 26]);
    assert_eq!(want.len(), 60);
    let f = emit_mac_control(MacControl::Pfc(PfcRepr::xoff(3, 0xFFFF)));
    assert_eq!(f, want);
    // Parsed back: priority 3 only, all eight timers read.
    match MacControl::parse(&f).unwrap() {
        MacControl::Pfc(p) => {
            assert_eq!(p.class_enable, 0x0008);
            assert_eq!(p.quanta, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]);
            assert_eq!(p.time(3), Some(0xFFFF));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn r32_pfc_priorities_3_and_4() {
    let mut r = PfcRepr::xoff(3, 0xFFFF);
    r.set(4, 0x1234);
    let f = emit_mac_control(MacControl::Pfc(r));
    assert_eq!(&f[16..18], &[0x00, 0x18]);
    assert_eq!(&f[24..26], &[0xFF, 0xFF]); // time[3]
    assert_eq!(&f[26..28], &[0x12, 0x34]); // time[4]
    assert!(f[18..24].iter().all(|&b| b == 0));
    assert!(f[28..60].iter().all(|&b| b == 0));
    // Every timer has its slot, including priority 7 (the sonic-mgmt bug).
    let mut all = PfcRepr::default();
    for p in 0..8u8 {
        all.set(p, 0x0100 + p as u16);
    }
    let f = emit_mac_control(MacControl::Pfc(all));
    assert_eq!(&f[16..18], &[0x00, 0xFF]);
    for p in 0..8usize {
        assert_eq!(&f[18 + 2 * p..20 + 2 * p], &[0x01, p as u8], "time[{p}]");
    }
    assert!(f[34..60].iter().all(|&b| b == 0));
    assert_eq!(MacControl::parse(&f).unwrap(), MacControl::Pfc(all));
}

#[test]
fn r32_pfc_frame_always_60_bytes() {
    for m in [
        MacControl::Pfc(PfcRepr::default()),
        MacControl::Pfc(PfcRepr::xon(7)),
        MacControl::Pause(PauseRepr { quanta: 0 }),
        MacControl::Pause(PauseRepr { quanta: 0xFFFF }),
    ] {
        let f = emit_mac_control(m);
        assert_eq!(f.len(), 60);
        assert_eq!(f.len() + 4, 64, "with the FCS");
        // Untagged, to the MAC control address.
        assert_eq!(&f[0..6], &pfc::MAC_CONTROL_DST);
        assert_eq!(&f[12..14], &[0x88, 0x08]);
    }
    // A buffer that cannot hold 60 bytes is an error, not a short frame.
    let mut small = [0u8; 59];
    assert_eq!(
        MacControl::Pfc(PfcRepr::xon(3)).emit(SRC_MAC, &mut small),
        Err(Error::BufferTooSmall)
    );
}

/// A PFC frame with the given vector and timers.
fn pfc_frame(vector: u16, quanta: [u16; 8]) -> Vec<u8> {
    let mut f = common::unhex("0180c2000001 020000000001 8808 0101");
    f.extend_from_slice(&vector.to_be_bytes());
    for q in quanta {
        f.extend_from_slice(&q.to_be_bytes());
    }
    f.resize(60, 0);
    f
}

#[test]
fn r33a_zero_vector_enables_nothing() {
    let f = pfc_frame(0x0000, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]);
    match MacControl::parse(&f).unwrap() {
        MacControl::Pfc(p) => {
            assert!(!p.enabled(3));
            assert_eq!(p.time(3), None);
            for prio in 0..8 {
                assert!(!p.enabled(prio), "priority {prio}");
                assert_eq!(p.time(prio), None);
            }
            // The timer is still visible to tools.
            assert_eq!(p.quanta[3], 0xFFFF);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn r33b_pause_is_not_pfc() {
    let mut f = common::unhex("0180c2000001 020000000001 8808 0001 ffff");
    f.resize(60, 0);
    assert_eq!(
        MacControl::parse(&f),
        Ok(MacControl::Pause(PauseRepr { quanta: 0xFFFF }))
    );
    assert!(matches!(
        classify(&f),
        Frame::Pause(_, PauseRepr { quanta: 0xFFFF })
    ));
    // And a PFC frame is not a PAUSE.
    let g = pfc_frame(0x0008, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]);
    assert!(matches!(classify(&g), Frame::Pfc(..)));
    // Other MAC control opcodes are neither.
    let mut h = f.clone();
    h[14..16].copy_from_slice(&[0x01, 0x02]);
    assert_eq!(
        MacControl::parse(&h),
        Err(Error::MacControlUnknownOpcode(0x0102))
    );
}

#[test]
fn r33c_vector_8_enables_priority_3_only() {
    let f = pfc_frame(0x0008, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]);
    let MacControl::Pfc(p) = MacControl::parse(&f).unwrap() else {
        panic!("not PFC")
    };
    assert_eq!(p.time(3), Some(0xFFFF));
    for prio in (0..8).filter(|&x| x != 3) {
        assert_eq!(p.time(prio), None, "priority {prio}");
    }
}

#[test]
fn r33e_mac_control_to_other_destination_dropped() {
    for dst in [
        "ffffffffffff",
        "0180c2000002",
        "0180c2000000",
        "020000000002",
    ] {
        let mut f = pfc_frame(0x0008, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]);
        f[0..6].copy_from_slice(&common::unhex(dst));
        assert_eq!(MacControl::parse(&f), Err(Error::MacControlBadDst), "{dst}");
        assert_eq!(
            Error::MacControlBadDst.counter_name(),
            "rx_mac_control_bad_dst"
        );
        match classify(&f) {
            Frame::BadMacControl(_, e) => assert_eq!(e, Error::MacControlBadDst),
            other => panic!("{dst}: {other:?}"),
        }
    }
}

#[test]
fn r34_xon_parses_as_resume() {
    let f = pfc_frame(0x0008, [0; 8]);
    let MacControl::Pfc(p) = MacControl::parse(&f).unwrap() else {
        panic!("not PFC")
    };
    assert!(p.enabled(3));
    assert_eq!(p.time(3), Some(0));
    assert_eq!(p, PfcRepr::xon(3));
    assert_eq!(emit_mac_control(MacControl::Pfc(PfcRepr::xon(3))), f);
}

#[test]
fn r34_quanta_durations() {
    // One quantum = 512 bit times: 0xFFFF x 512 / 100e9 s = 335.5392 us, and
    // at 25 Gb/s 1342.1568 us.
    let d100 = pfc::quanta_to_duration(0xFFFF, 100_000);
    let want100 = Duration::from_nanos(65_535 * 512 / 100);
    assert!(
        d100.abs_diff(want100) <= Duration::from_nanos(1),
        "{d100:?}"
    );
    assert!(d100.abs_diff(Duration::from_nanos(335_540)) < Duration::from_nanos(10));
    let d25 = pfc::quanta_to_duration(0xFFFF, 25_000);
    assert!(
        d25.abs_diff(Duration::from_micros(1342)) < Duration::from_micros(1),
        "{d25:?}"
    );
    assert!(d25.abs_diff(Duration::from_nanos(1_342_157)) <= Duration::from_nanos(1));
    // One quantum at 100 Gb/s is 5.12 ns (R34's premise).
    assert_eq!(
        pfc::quanta_to_duration(100, 100_000),
        Duration::from_nanos(512)
    );
    // XON: zero quanta is zero time.
    assert_eq!(pfc::quanta_to_duration(0, 100_000), Duration::ZERO);
}

// ---------------------------------------------------------------------------
// R37: UDP checksums (parser and TX parts).
// ---------------------------------------------------------------------------

/// The partial checksum a virtual device leaves in the UDP checksum field:
/// the folded pseudo-header sum only (not complemented, data not included).
fn partial_checksum(src: &[u8], dst: &[u8], udp_len: u16) -> u16 {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(src);
    pseudo.extend_from_slice(dst);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&udp_len.to_be_bytes());
    common::ones_sum(&pseudo)
}

#[test]
fn r37a_partial_udp_checksum_accepted() {
    // Vector B carries a real UDP checksum; replace it with the partial one.
    let mut f = vector_b();
    let partial = partial_checksum(&f[26..30], &f[30..34], 44);
    f[40..42].copy_from_slice(&partial.to_be_bytes());
    assert!(!udp_checksum_ok(&f[26..30], &f[30..34], &f[34..78]));
    let p = strict(&f).expect("accepted: the ICRC protects the packet");
    assert_eq!(p.udp().unwrap().checksum, partial);
    // Any garbage value too.
    for v in [0x0001u16, 0xBEEF, 0xFFFF] {
        let mut g = vector_b();
        g[40..42].copy_from_slice(&v.to_be_bytes());
        assert!(strict(&g).is_ok(), "{v:#06x}");
    }
    // Over IPv6 as well (R07's vector).
    let mut g = vector_r07();
    g[ETH + 46..ETH + 48].copy_from_slice(&[0xAB, 0xCD]);
    assert!(strict(&g).is_ok());
}

#[test]
fn r37b_zero_udp_checksum_accepted() {
    let mut f = vector_b();
    f[40..42].copy_from_slice(&[0, 0]);
    assert!(strict(&f).is_ok());
    // Vector A and the IPv6 vector already carry 0.
    assert!(strict(&vector_a()).is_ok());
    assert!(strict(&vector_r07()).is_ok());
}

#[test]
fn r37c_ipv4_tx_header_checksum_and_zero_udp_checksum() {
    for op in Opcode::all_supported() {
        for len in [0usize, 3, 100] {
            let payload = vec![0x5Au8; len];
            let f = common::emit(&repr(op, ipv4_net(), None), &payload);
            assert!(ipv4_checksum_ok(&f[ETH..]), "{op:?}");
            assert_eq!(&f[40..42], &[0, 0], "{op:?}: UDP checksum 0");
            // Explicit Compute gives a fully correct checksum, never partial.
            let mut r = repr(op, ipv4_net(), None);
            r.udp.checksum = UdpChecksum::Compute;
            let f = common::emit(&r, &payload);
            let ulen = u16::from_be_bytes([f[38], f[39]]) as usize;
            assert!(
                udp_checksum_ok(&f[26..30], &f[30..34], &f[34..34 + ulen]),
                "{op:?}"
            );
            assert_ne!(&f[40..42], &[0, 0]);
        }
    }
}

#[test]
fn r37_ipv6_tx_default_udp_checksum_correct() {
    let mut seen = std::collections::HashSet::new();
    for op in Opcode::all_supported() {
        for len in [0usize, 1, 2, 3, 4, 7, 64, 1001] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + op.0 as usize) as u8).collect();
            for vlan in [None, Some(VlanTag::default())] {
                let f = common::emit(&repr(op, ipv6_net(), vlan), &payload);
                let l3 = &f[l2_len(&f)..];
                let ulen = u16::from_be_bytes([l3[44], l3[45]]) as usize;
                let udp = &l3[40..40 + ulen];
                let csum = u16::from_be_bytes([udp[6], udp[7]]);
                assert_ne!(csum, 0, "{op:?}: zero is not allowed over IPv6 by default");
                assert!(
                    udp_checksum_ok(&l3[8..24], &l3[24..40], udp),
                    "{op:?} len {len}"
                );
                seen.insert(csum);
            }
        }
    }
    assert!(seen.len() > 100, "checksums depend on the data");
    // UdpChecksum::Zero is the explicit opt-out (what rxe sends).
    let mut r = repr(Opcode::RC_SEND_ONLY, ipv6_net(), None);
    r.udp.checksum = UdpChecksum::Zero;
    let f = common::emit(&r, b"abc");
    assert_eq!(&f[ETH + 46..ETH + 48], &[0, 0]);
}

#[test]
fn r04d_tx_payload_length_limits() {
    // The largest IPv4 RC SEND_ONLY: payload + pad is a multiple of 4, so the
    // total length 20 + 8 + 12 + payload + pad + 4 peaks at 65532 (0xFFFC).
    let r = repr(Opcode::RC_SEND_ONLY, ipv4_net(), None);
    let max = 65532 - 20 - 8 - 12 - 4;
    let f = common::emit(&r, &vec![7u8; max]);
    check_r04d(&f, Opcode::RC_SEND_ONLY, max, "max IPv4");
    assert_eq!(&f[16..18], &[0xFF, 0xFC]);
    assert!(strict(&f).is_ok());
    // One byte more no longer fits the 16-bit length fields (4 with the pad).
    let mut buf = vec![0u8; 70_000];
    assert_eq!(
        r.emit(&mut buf, &vec![7u8; max + 1]),
        Err(Error::BadPayloadLen)
    );
    // A nonsense length is an error, not an overflow or a short frame.
    for len in [usize::MAX, usize::MAX - 3, usize::MAX / 2, 1 << 20] {
        assert_eq!(
            r.emit_headers(&mut buf, len),
            Err(Error::BadPayloadLen),
            "{len}"
        );
        assert!(r.finalize(&mut buf, len).is_err(), "{len}");
        assert!(r.frame_len(len) > 65535, "{len}");
    }
}

#[test]
fn r32_pfc_priority_out_of_range_ignored() {
    // Priorities are 0..=7; 8 must not alias priority 0 (or 11 priority 3).
    let mut r = PfcRepr::default();
    r.set(8, 0xFFFF);
    r.set(11, 0xFFFF);
    assert_eq!(r, PfcRepr::default());
    assert_eq!(PfcRepr::xoff(8, 0xFFFF).class_enable, 0);
    assert!(!PfcRepr::xoff(8, 1).enabled(0));
    assert_eq!(PfcRepr::xoff(8, 1).time(8), None);
}

#[test]
fn r34_quanta_conversion_never_overflows() {
    // Durations as long as they come, at speeds beyond today's links.
    for mbps in [1u64, 100_000, 800_000, u64::MAX] {
        assert_eq!(pfc::duration_to_quanta(Duration::MAX, mbps), 0xFFFF);
        let _ = pfc::quanta_to_duration(0xFFFF, mbps);
    }
    assert_eq!(pfc::duration_to_quanta(Duration::ZERO, u64::MAX), 0);
}
