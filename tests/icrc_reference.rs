//! An independent ICRC reference, written from ROCEV2-DIGEST.md §4 on top of the
//! `crc` crate's catalogue CRC-32 (CRC_32_ISO_HDLC = the Ethernet/zlib CRC:
//! polynomial 0x04C11DB7, reflected, init and final XOR all-ones), checked
//! against `roce_stack::icrc::compute` and the parser's verification on the
//! reference vectors, the public vectors, the CASES vectors, every frame of the
//! public captures (counts from their MANIFEST) and random frames.
//!
//! The reference assembles the pseudo-packet explicitly:
//! `FF x 8 | IP header (or GRH) | UDP header | BTH | ext headers | payload | pad`
//! with the variant fields forced to all-ones (IPv4: TOS, TTL, header checksum;
//! IPv6/GRH: traffic class, flow label, hop limit; UDP: checksum; BTH: byte 4),
//! and puts the CRC value on the wire least-significant byte first.

#[path = "../stack/tests/common/arb.rs"]
mod arb;
mod common;

use arb::{arb_net, cases};
use proptest::prelude::*;
use roce_stack::icrc::{self, IcrcForm};
use roce_stack::wire::bth::BthRepr;
use roce_stack::wire::{
    EthRepr, ExtHeaders, IcrcStatus, Opcode, PacketRepr, ParseMode, RocePacket, UdpChecksum,
    UdpRepr, VlanTag,
};

use common::icrc_ref::{locate, pseudo_packet, reference_icrc, Form, CRC32};
use common::read_pcap;

fn our_form(form: Form) -> IcrcForm {
    match form {
        Form::V2Ipv4 => IcrcForm::Ipv4,
        Form::V2Ipv6 => IcrcForm::Ipv6,
        Form::V1Grh => IcrcForm::Grh,
    }
}

/// Check one frame whose ICRC is known to be right: the reference reproduces
/// the wire bytes, and so do `icrc::compute` and the strict parser.
fn check_good_frame(name: &str, frame: &[u8]) {
    let loc = locate(frame).unwrap_or_else(|| panic!("{name}: not a whole RoCE frame"));
    let want = reference_icrc(loc.form, loc.covered);
    assert_eq!(want.to_le_bytes(), loc.wire, "{name}: reference vs wire");
    assert_eq!(
        icrc::compute(our_form(loc.form), loc.covered),
        Ok(want),
        "{name}: icrc::compute"
    );
    assert_eq!(
        icrc::verify(our_form(loc.form), loc.covered, loc.wire),
        Ok(true),
        "{name}"
    );
    let p = RocePacket::parse_with(frame, ParseMode::Lenient)
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(p.icrc(), Some(loc.wire), "{name}: parser's ICRC bytes");
    assert_eq!(
        p.icrc_region(),
        loc.covered,
        "{name}: parser's covered bytes"
    );
    assert_eq!(p.computed_icrc(), Some(want), "{name}");
    assert_eq!(p.icrc_status(), IcrcStatus::Ok, "{name}");
}

#[test]
fn seed_is_the_crc_of_eight_ones() {
    assert_eq!(CRC32.checksum(&[0xFF; 8]), icrc::SEED);
    // The digest's raw-register form: 0xDEBB20E3.
    assert_eq!(!CRC32.checksum(&[0xFF; 8]), 0xDEBB_20E3);
    // The catalogue CRC is the zlib one: its check value.
    assert_eq!(CRC32.checksum(b"123456789"), 0xCBF4_3926);
}

/// `(name, wire ICRC bytes)` from the "ICRC wire bytes:" lines of vectors.txt.
fn vectors_txt_icrc_lines() -> Vec<(String, [u8; 4])> {
    let text = std::fs::read_to_string(common::shared_dir().join("reference/vectors.txt"))
        .expect("vectors.txt");
    let mut name = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("## ") {
            name = n.trim().to_string();
        } else if let Some(rest) = line.strip_prefix("ICRC wire bytes: ") {
            let hex = rest.split_whitespace().next().unwrap();
            out.push((name.clone(), common::unhex(hex).try_into().unwrap()));
        }
    }
    out
}

#[test]
fn reference_agrees_on_reference_vectors() {
    let stated = vectors_txt_icrc_lines();
    assert_eq!(stated.len(), 10);
    let frames = common::reference_vectors();
    for (name, wire) in &stated {
        let frame = &frames.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(&frame[frame.len() - 4..], wire, "{name}: stated ICRC");
        check_good_frame(name, frame);
        assert!(RocePacket::parse(frame).is_ok(), "{name}");
    }
}

#[test]
fn reference_agrees_on_public_vectors() {
    let mut checked = 0;
    for (heading, frame) in common::public_vectors() {
        if heading.starts_with("A6") {
            // Only a UDP payload: the reference needs the IP header.
            continue;
        }
        if heading.starts_with("QUIRK") {
            // The sniffer rewrote the source port to 4791: the reference (like
            // the parser) rejects the frame as captured, and accepts it with
            // the per-flow port the heading names.
            let loc = locate(&frame).unwrap();
            assert_ne!(
                reference_icrc(loc.form, loc.covered).to_le_bytes(),
                loc.wire,
                "{heading}"
            );
            assert!(RocePacket::parse(&frame).is_err(), "{heading}");
            let sport: u16 = heading
                .rsplit("sport ")
                .next()
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|s| s.parse().ok())
                .unwrap();
            let mut fixed = frame.clone();
            fixed[34..36].copy_from_slice(&sport.to_be_bytes());
            check_good_frame(&heading, &fixed);
        } else {
            check_good_frame(&heading, &frame);
        }
        checked += 1;
    }
    assert_eq!(checked, 21);
}

#[test]
fn reference_agrees_on_cases_vectors() {
    // CASES R05 A and B, R07 (with an Ethernet header).
    let a = common::unhex("e41d2dab2bc27cfe90643b32080045c2003c718c4000401191610a0011010a001201000012b7002800008100ffff40000118000000000000000000000000000000000000000082fd002a");
    let b = common::unhex("248a07a8fa22248a07a8fa22080045010040047840004011b4d5c0a80007c0a80007c00012b7002caca22460ffff000000d300cf17104630818be28935d90e9a95505401be885e50000078f353f3");
    let mut c = common::unhex("02000000000202000000000186dd");
    c.extend(common::unhex("60012345001c114020010db800000000000000000000000120010db8000000000000000000000002c13212b7001c00000400ffff00000012800000014142434478677a6c"));
    for (name, f, wire) in [
        ("R05 A", &a, [0x82, 0xFD, 0x00, 0x2A]),
        ("R05 B", &b, [0x78, 0xF3, 0x53, 0xF3]),
        ("R07", &c, [0x78, 0x67, 0x7A, 0x6C]),
    ] {
        assert_eq!(&f[f.len() - 4..], &wire, "{name}");
        check_good_frame(name, f);
    }
    // R06: without the 0xFF prefix vector A gives 0xFDDAD1C3.
    let loc = locate(&a).unwrap();
    assert_eq!(
        CRC32.checksum(&pseudo_packet(Form::V2Ipv4, loc.covered)[8..]),
        0xFDDA_D1C3
    );
}

#[test]
fn reference_and_parser_agree_on_every_capture_frame() {
    // MANIFEST.md: "ok" frames per capture (the rc-small file is all
    // "ok-if-sport", 21 frames; no frame is truncated in these files).
    let manifest_ok = [
        ("linlinw5__pingpong_rc.pcap", 20usize),
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
        ("magnate3__dc__rc-small.pcap", 0),
        ("magnate3__doc__ib_send_bw_over_roce.pcap", 10),
        ("magnate3__doc__rocev1.pcap", 2468),
        ("magnate3__doc__rocev2_test.pcap", 708),
        ("phdddddd__rdma1.pcap", 4000),
    ];
    let dir = common::shared_dir().join("captures");
    for (file, want_ok) in manifest_ok {
        let mut ok = 0;
        let mut bad = 0;
        for (i, frame) in read_pcap(&dir.join(file)).iter().enumerate() {
            let name = format!("{file} frame {}", i + 1);
            let Some(loc) = locate(frame) else {
                // Not RoCE for the reference: not a RoCE packet the parser
                // accepts either.
                assert!(RocePacket::parse(frame).is_err(), "{name}");
                continue;
            };
            let reference = reference_icrc(loc.form, loc.covered);
            assert_eq!(
                icrc::compute(our_form(loc.form), loc.covered),
                Ok(reference),
                "{name}"
            );
            let strict = RocePacket::parse(frame);
            if reference.to_le_bytes() == loc.wire {
                ok += 1;
                let p = strict.unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(p.icrc(), Some(loc.wire), "{name}");
            } else {
                bad += 1;
                assert_eq!(
                    strict.err(),
                    Some(roce_stack::wire::Error::IcrcMismatch),
                    "{name}"
                );
            }
        }
        assert_eq!(ok, want_ok, "{file}: ICRC ok per MANIFEST");
        if file == "magnate3__dc__rc-small.pcap" {
            assert_eq!(bad, 21, "{file}: sniffer-rewritten source ports");
        } else {
            assert_eq!(bad, 0, "{file}");
        }
    }
}

// ---------------------------------------------------------------------------
// Random frames.
// ---------------------------------------------------------------------------

/// Opcodes without extension headers, so any `ExtHeaders::default()` fits.
fn plain_opcodes() -> Vec<Opcode> {
    Opcode::all_supported()
        .filter(|o| o.info().hdr_len == 0)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    /// Frames our builder writes carry the reference ICRC.
    #[test]
    fn reference_agrees_on_random_built_frames(
        net in arb_net(),
        op in prop::sample::select(plain_opcodes()),
        sport in any::<u16>(),
        bth in (any::<u16>(), any::<u8>(), 0u32..(1 << 24), any::<u8>(), 0u32..(1 << 24)),
        vlan in prop::option::of((0u8..8, any::<bool>(), 0u16..4096)),
        payload in prop::collection::vec(any::<u8>(), 0..=1500),
    ) {
        let (pkey, b4, qp, b8, psn) = bth;
        let r = PacketRepr {
            eth: EthRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: vlan.map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
            },
            net,
            udp: UdpRepr { src_port: sport, dst_port: 4791, checksum: UdpChecksum::Default },
            bth: BthRepr {
                pkey,
                fecn: b4 & 0x80 != 0,
                becn: b4 & 0x40 != 0,
                resv6a: b4 & 0x3F,
                ack_req: b8 & 0x80 != 0,
                resv7: b8 & 0x7F,
                ..BthRepr::new(op, qp, psn)
            },
            ext: ExtHeaders::default(),
        };
        let mut buf = vec![0u8; r.frame_len(payload.len())];
        let n = r.emit(&mut buf, &payload).unwrap();
        let frame = &buf[..n];
        let loc = locate(frame).expect("whole RoCE frame");
        prop_assert_eq!(reference_icrc(loc.form, loc.covered).to_le_bytes(), loc.wire);
        prop_assert!(RocePacket::parse(frame).is_ok());
    }

    /// `icrc::compute` equals the reference on arbitrary bytes, in every form.
    #[test]
    fn compute_agrees_with_reference_on_random_regions(
        form in prop::sample::select(vec![Form::V2Ipv4, Form::V2Ipv6, Form::V1Grh]),
        bytes in prop::collection::vec(any::<u8>(), 0..=2048),
    ) {
        let need = our_form(form).masked_len();
        let mut region = bytes;
        if region.len() < need {
            // Too short for the masked headers: an error, not a panic.
            prop_assert!(icrc::compute(our_form(form), &region).is_err());
            region.resize(need + region.len(), 0x5A);
        }
        prop_assert_eq!(
            icrc::compute(our_form(form), &region),
            Ok(reference_icrc(form, &region))
        );
    }
}
