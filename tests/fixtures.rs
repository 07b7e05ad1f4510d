//! The committed fixture pcaps (`pcap-fixtures/pcaps/`): they are exactly what
//! the generator produces now, they are well-formed classic pcap files, every
//! frame in them parses strictly (RoCE frames with a valid ICRC), and each file
//! holds what the fixture list promises (the opcode families, PadCnt 0..=3,
//! PMTU-sized segments). Field values are cross-checked against tshark in
//! `tests/tshark.rs`.

mod common;

use std::collections::BTreeSet;

use roce_stack::wire::arp::ArpRepr;
use roce_stack::wire::pfc::MacControl;
use roce_stack::wire::{
    Frame, IcrcStatus, L2Info, NetInfo, PacketRepr, ParseMode, RocePacket, ETHERTYPE_ARP,
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MAC_CONTROL, ETHERTYPE_ROCEV1,
};

const REGEN: &str = "cargo run -p pcap-fixtures --bin gen-fixtures";

#[test]
fn committed_files_equal_the_generator_output() {
    let generated = pcap_fixtures::generate();
    let names: Vec<&str> = generated.iter().map(|f| f.name).collect();
    assert_eq!(names, pcap_fixtures::names(), "generate() order vs names()");
    let mut stale = Vec::new();
    for f in &generated {
        let path = pcap_fixtures::path(f.name);
        match std::fs::read(&path) {
            Ok(bytes) if bytes == f.pcap => {}
            Ok(_) => stale.push(format!("{} differs", path.display())),
            Err(e) => stale.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "fixtures out of date (regenerate with `{REGEN}`):\n{}",
        stale.join("\n")
    );
    // No leftover pcaps that the generator no longer makes.
    let on_disk: BTreeSet<String> = std::fs::read_dir(pcap_fixtures::dir())
        .expect("read pcap-fixtures/pcaps")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    let expected: BTreeSet<String> = generated.iter().map(|f| f.file_name()).collect();
    assert_eq!(on_disk, expected, "pcap files in pcap-fixtures/pcaps");
}

#[test]
fn generator_is_deterministic() {
    assert_eq!(pcap_fixtures::generate(), pcap_fixtures::generate());
}

#[test]
fn files_are_classic_pcap_ethernet_microseconds() {
    for name in pcap_fixtures::names() {
        let bytes = std::fs::read(pcap_fixtures::path(name)).expect("read fixture");
        // libpcap file format: magic 0xa1b2c3d4 (microsecond timestamps), here
        // little-endian; version 2.4; snaplen 65535; link type 1 (LINKTYPE_ETHERNET).
        assert_eq!(bytes[0..4], [0xd4, 0xc3, 0xb2, 0xa1], "{name}: magic");
        assert_eq!(bytes[4..8], [2, 0, 4, 0], "{name}: version");
        assert_eq!(bytes[16..20], 65535u32.to_le_bytes(), "{name}: snaplen");
        assert_eq!(bytes[20..24], 1u32.to_le_bytes(), "{name}: link type");
        // Record headers: timestamps strictly increasing, caplen == origlen ==
        // frame length >= 60 (no FCS, padded to the Ethernet minimum).
        let mut off = 24;
        let mut last = (0u32, 0u32);
        let mut n = 0;
        while off < bytes.len() {
            let word =
                |i: usize| u32::from_le_bytes(bytes[off + i..off + i + 4].try_into().unwrap());
            let (sec, usec, incl, orig) = (word(0), word(4), word(8), word(12));
            assert!(usec < 1_000_000, "{name}: microseconds field {usec}");
            assert!(
                (sec, usec) > last,
                "{name}: record {n} timestamp not increasing"
            );
            assert_eq!(incl, orig, "{name}: record {n} truncated");
            assert!(incl >= 60, "{name}: record {n} is {incl} bytes");
            last = (sec, usec);
            off += 16 + incl as usize;
            n += 1;
        }
        assert_eq!(off, bytes.len(), "{name}: trailing bytes");
        assert_eq!(n, pcap_fixtures::frames(name).len(), "{name}: frame count");
        assert!(n > 0, "{name}: empty");
    }
}

/// Every frame of every fixture parses strictly: RoCE frames with
/// `RocePacket::parse` (which verifies the ICRC) and rebuild byte for byte,
/// MAC control frames with `MacControl::parse`, ARP with `ArpRepr::parse`.
#[test]
fn every_frame_parses_strictly_and_verifies() {
    for (name, frames) in pcap_fixtures::all_frames() {
        for (i, f) in frames.iter().enumerate() {
            let at = format!("{name} frame {}", i + 1);
            let l2 = L2Info::parse(f).unwrap_or_else(|e| panic!("{at}: {e}"));
            match l2.ethertype {
                ETHERTYPE_IPV4 | ETHERTYPE_IPV6 | ETHERTYPE_ROCEV1 => {
                    let p = RocePacket::parse(f).unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert_eq!(p.icrc_status(), IcrcStatus::Ok, "{at}");
                    assert!(p.bth().opcode.is_supported(), "{at}");
                    assert_eq!(p.declared_payload_len(), p.payload().len(), "{at}");
                    let repr = PacketRepr::from_packet(&p);
                    let mut buf = vec![0u8; f.len() + 64];
                    let n = repr
                        .emit(&mut buf, p.payload())
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert_eq!(&buf[..n], &f[..], "{at}: rebuild");
                    assert!(
                        matches!(roce_stack::wire::classify(f), Frame::Roce(_)),
                        "{at}"
                    );
                }
                ETHERTYPE_MAC_CONTROL => {
                    MacControl::parse(f).unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert_eq!(f.len(), 60, "{at}: MAC control frames are 60 bytes");
                }
                ETHERTYPE_ARP => {
                    ArpRepr::parse(&f[l2.header_len()..]).unwrap_or_else(|e| panic!("{at}: {e}"));
                }
                t => panic!("{at}: unexpected EtherType 0x{t:04x}"),
            }
        }
    }
}

/// The ICRC of a RoCE frame by the recipe of RoCEv2 Annex A17.4 / IBTA 1.7
/// §7.8.1, written out here independently of `roce_stack::icrc`: CRC-32
/// (zlib) over 8 bytes of 0xFF, then the IP header (or GRH) through the pad
/// bytes with IPv4 TOS/TTL/checksum, IPv6/GRH traffic class/flow label/hop
/// limit, the UDP checksum and BTH byte 4 set to ones. Returns the computed
/// value and the 4 wire bytes read least-significant first, or `None` for a
/// frame that is not RoCE.
fn reference_icrc(frame: &[u8]) -> Option<(u32, u32)> {
    let be16 = |i: usize| u16::from_be_bytes([frame[i], frame[i + 1]]);
    let (mut l3, mut ethertype) = (14, be16(12));
    if ethertype == 0x8100 {
        (l3, ethertype) = (18, be16(16));
    }
    let (mut region, masks): (Vec<u8>, &[usize]) = match ethertype {
        0x0800 => (
            frame[l3..l3 + be16(l3 + 2) as usize].to_vec(),
            &[1, 8, 10, 11, 26, 27, 28 + 4],
        ),
        0x86DD => (
            frame[l3..l3 + 40 + be16(l3 + 4) as usize].to_vec(),
            &[1, 2, 3, 7, 46, 47, 48 + 4],
        ),
        0x8915 => (
            frame[l3..l3 + 40 + be16(l3 + 4) as usize].to_vec(),
            &[1, 2, 3, 7, 40 + 4],
        ),
        _ => return None,
    };
    if ethertype != 0x0800 {
        region[0] |= 0x0F;
    }
    for &i in masks {
        region[i] = 0xFF;
    }
    let (covered, wire) = region.split_at(region.len() - 4);
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    let mut d = crc.digest();
    d.update(&[0xFF; 8]);
    d.update(covered);
    Some((d.finalize(), u32::from_le_bytes(wire.try_into().unwrap())))
}

/// The ICRC written into each committed RoCE frame equals the one computed by
/// the independent recipe above (so a builder ICRC bug that the parser shares
/// cannot slip into the fixtures).
#[test]
fn every_icrc_matches_an_independent_computation() {
    let mut checked = 0;
    for (name, frames) in pcap_fixtures::all_frames() {
        for (i, f) in frames.iter().enumerate() {
            if let Some((computed, wire)) = reference_icrc(f) {
                assert_eq!(
                    wire,
                    computed,
                    "{name} frame {}: ICRC on the wire 0x{wire:08x}, recipe gives 0x{computed:08x}",
                    i + 1
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked} RoCE frames");
}

/// The RoCE packets of a fixture (ICRCs are checked by the tests above).
fn packets(frames: &[Vec<u8>]) -> Vec<RocePacket<'_>> {
    frames
        .iter()
        .filter_map(|f| RocePacket::parse_with(f, ParseMode::Strict).ok())
        .collect()
}

fn opcodes(name: &str) -> BTreeSet<u8> {
    packets(&pcap_fixtures::frames(name))
        .iter()
        .map(|p| p.bth().opcode.0)
        .collect()
}

fn assert_has(name: &str, wanted: &[u8]) {
    let have = opcodes(name);
    for op in wanted {
        assert!(
            have.contains(op),
            "{name}: no opcode 0x{op:02x} (has {have:02x?})"
        );
    }
}

/// The opcode families each file must hold. Opcode values: IBTA 1.7 §9.2.1,
/// Table 36 (RC 0x00.., UC 0x20.., UD 0x60..), RoCEv2 Annex A17.9.3 (CNP 0x81).
#[test]
fn each_fixture_holds_its_opcode_families() {
    // RC SEND FIRST/MIDDLE/LAST, LAST_IMM, ONLY, ONLY_IMM, LAST_INV, ONLY_INV.
    assert_has("rc_send", &[0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x16, 0x17]);
    // UC SEND FIRST..ONLY_IMM and UC RDMA WRITE FIRST..ONLY_IMM.
    assert_has("uc_send", &(0x20..=0x2B).collect::<Vec<u8>>());
    assert_has("ud_send", &[0x64, 0x65]);
    assert_has("rc_write", &[0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B]);
    assert_has("rc_read", &[0x0C, 0x0D, 0x0E, 0x0F, 0x10]);
    assert_has("rc_atomic", &[0x12, 0x13, 0x14]);
    assert_has("rc_ack", &[0x11]);
    assert_has("cnp", &[0x81]);
    assert_has("ipv6", &[0x04, 0x0A, 0x11, 0x64, 0x0C]);
    assert_has("rocev1", &[0x04, 0x11]);
    assert_has(
        "rc_mix",
        &[
            0x06, 0x07, 0x08, 0x11, 0x0C, 0x0D, 0x0E, 0x0F, 0x04, 0x12, 0x14,
        ],
    );
}

#[test]
fn ack_fixture_covers_credit_rnr_and_nak_syndromes() {
    let frames = pcap_fixtures::frames("rc_ack");
    let syndromes: BTreeSet<u8> = packets(&frames)
        .iter()
        .filter_map(|p| p.ext().aeth().map(|a| a.syndrome))
        .collect();
    // AETH syndrome: 0b000ccccc ACK (credit code c), 0b001ttttt RNR NAK (timer t),
    // 0b011nnnnn NAK (IBTA 1.7 §9.7.5.2, Table 44).
    let acks = syndromes.iter().filter(|s| *s >> 5 == 0).count();
    let rnr = syndromes.iter().filter(|s| *s >> 5 == 1).count();
    assert!(acks >= 3, "ACK credit codes: {syndromes:02x?}");
    assert!(rnr >= 3, "RNR NAK timer codes: {syndromes:02x?}");
    for nak in 0x60..=0x63 {
        assert!(syndromes.contains(&nak), "NAK 0x{nak:02x}");
    }
}

#[test]
fn every_pad_count_appears_and_segments_are_pmtu_sized() {
    let mut pads = BTreeSet::new();
    for (name, frames) in pcap_fixtures::all_frames() {
        for p in packets(&frames) {
            pads.insert(p.pad());
            // PadCnt makes payload + pad a multiple of 4 (IBTA 1.7 §9.2.3).
            assert_eq!((p.payload().len() + p.pad() as usize) % 4, 0, "{name}");
            // FIRST and MIDDLE packets carry exactly one PMTU (1024 here).
            use roce_stack::wire::Position;
            if matches!(
                p.bth().opcode.info().position,
                Position::First | Position::Middle
            ) {
                assert_eq!(p.payload().len(), 1024, "{name}: {}", p.bth().opcode.name());
            }
        }
    }
    assert_eq!(pads, BTreeSet::from([0, 1, 2, 3]));
}

#[test]
fn network_flavours_are_where_the_names_say() {
    let all_nets = |name: &str, pred: fn(&NetInfo) -> bool| {
        let frames = pcap_fixtures::frames(name);
        let ps = packets(&frames);
        assert!(!ps.is_empty(), "{name}");
        assert!(ps.iter().all(|p| pred(&p.net())), "{name}");
        ps.iter().map(|p| p.l2().vlan).collect::<Vec<_>>()
    };
    all_nets("ipv6", |n| matches!(n, NetInfo::Ipv6(_)));
    all_nets("rocev1", |n| matches!(n, NetInfo::Grh(_)));
    let tags = all_nets("vlan", |n| matches!(n, NetInfo::Ipv4(_)));
    assert!(tags.iter().all(|t| t.is_some()), "vlan: untagged frame");
    assert!(tags
        .iter()
        .any(|t| t.is_some_and(|t| t.pcp == 3 && t.vid == 100)));
    for name in ["rc_send", "rc_mix", "cnp"] {
        let tags = all_nets(name, |n| matches!(n, NetInfo::Ipv4(_)));
        assert!(tags.iter().all(|t| t.is_none()), "{name}: tagged frame");
    }
    // The IPv6 frames carry a real UDP checksum (the builder's IPv6 default).
    for f in pcap_fixtures::frames("ipv6") {
        let p = RocePacket::parse_with(&f, ParseMode::Strict).unwrap();
        assert_ne!(p.udp().unwrap().checksum, 0);
    }
}

#[test]
fn mac_control_fixtures_hold_the_promised_frames() {
    use roce_stack::wire::pfc::{PauseRepr, PfcRepr};
    let pfc: Vec<MacControl> = pcap_fixtures::frames("pfc")
        .iter()
        .map(|f| MacControl::parse(f).unwrap())
        .collect();
    // XOFF priority 3 for 0xFFFF quanta, XON priority 3 (802.1Qbb: enable bit
    // set, time 0), and a frame with two priorities enabled.
    assert!(pfc.contains(&MacControl::Pfc(PfcRepr {
        class_enable: 0x0008,
        quanta: [0, 0, 0, 0xFFFF, 0, 0, 0, 0],
    })));
    assert!(pfc.contains(&MacControl::Pfc(PfcRepr {
        class_enable: 0x0008,
        quanta: [0; 8],
    })));
    assert!(pfc
        .iter()
        .any(|m| matches!(m, MacControl::Pfc(p) if p.class_enable.count_ones() == 2)));
    let pause: Vec<MacControl> = pcap_fixtures::frames("pause")
        .iter()
        .map(|f| MacControl::parse(f).unwrap())
        .collect();
    assert!(pause.contains(&MacControl::Pause(PauseRepr { quanta: 0xFFFF })));
    // The PFC XOFF/XON and PAUSE frames equal the reference vectors of
    // ../shared/reference/vectors.txt byte for byte, but for the source MAC.
    let reference = common::reference_vectors();
    let vector = |needle: &str| {
        reference
            .iter()
            .find(|(n, _)| n.contains(needle))
            .unwrap_or_else(|| panic!("no reference vector {needle}"))
            .1
            .clone()
    };
    let same = |ours: &[u8], theirs: &[u8]| ours[..6] == theirs[..6] && ours[12..] == theirs[12..];
    let pfc_frames = pcap_fixtures::frames("pfc");
    assert!(same(&pfc_frames[0], &vector("PFC XOFF prio 3")), "PFC XOFF");
    assert!(same(&pfc_frames[1], &vector("PFC XON prio 3")), "PFC XON");
    let pause_frames = pcap_fixtures::frames("pause");
    assert!(
        same(&pause_frames[0], &vector("PAUSE (quanta 0xFFFF)")),
        "PAUSE"
    );
}
