//! The reference vectors (`../shared/reference/vectors.txt`, ICRC agreed by three
//! independent implementations) and the published frames of
//! `../shared/reference/public-vectors.md`: every field parses to the value the
//! source states, the ICRC verifies, and the builder rebuilds each frame byte for
//! byte from the parsed fields.

mod common;

use roce_stack::wire::{
    AethSyndrome, IcrcStatus, NakCode, NetInfo, Opcode, PacketRepr, ParseMode, RocePacket,
};

fn rebuild(frame: &[u8]) -> Vec<u8> {
    let p = RocePacket::parse_with(frame, ParseMode::Lenient).expect("parse");
    let repr = PacketRepr::from_packet(&p);
    let mut buf = vec![0u8; frame.len() + 64];
    let n = repr.emit(&mut buf, p.payload()).expect("emit");
    buf.truncate(n);
    buf
}

#[test]
fn reference_vectors_parse_verify_and_rebuild() {
    let vectors = common::reference_vectors();
    // 10 RoCE frames and 3 MAC control frames.
    assert_eq!(vectors.len(), 13, "vectors.txt frames");
    let mut roce = 0;
    for (name, frame) in &vectors {
        if name.contains("PAUSE") || name.contains("PFC") {
            continue;
        }
        roce += 1;
        let p = RocePacket::parse(frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.icrc_status(), IcrcStatus::Ok, "{name}");
        assert_eq!(rebuild(frame), *frame, "{name}: rebuild");
    }
    assert_eq!(roce, 10);
}

fn vector(name: &str) -> Vec<u8> {
    common::reference_vectors()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no vector {name}"))
        .1
}

#[test]
fn reference_vector_fields_match_tshark_columns() {
    // Values from the tshark table at the end of vectors.txt.
    let f = vector("v1_rc_send_only_ipv4");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.bth().opcode, Opcode(4));
    assert_eq!(p.bth().pad_count, 0);
    assert_eq!(p.bth().pkey, 65535);
    assert_eq!(p.bth().dest_qp, 0x12);
    assert!(p.bth().ack_req);
    assert_eq!(p.bth().psn, 256);
    assert_eq!(p.payload().len(), 16);
    assert_eq!(p.icrc(), Some([0x64, 0x90, 0x03, 0xe4]));

    let f = vector("v1b_same_with_vlan_pcp3");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.l2().vlan.map(|v| v.pcp), Some(3));
    assert_eq!(p.l2().vlan.map(|v| v.vid), Some(100));

    let f = vector("v1c_same_but_CE_ttl7_realudpcsum_fecn");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.net().ecn(), 3);
    assert_eq!(p.net().ttl(), 7);
    assert!(p.bth().fecn);
    assert_eq!(p.udp().unwrap().checksum, 0x03ca);

    let f = vector("v2_rc_write_only_reth_ipv6_pad3");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.bth().opcode, Opcode(10));
    assert_eq!(p.bth().pad_count, 3);
    assert_eq!(p.bth().dest_qp, 0x34);
    assert_eq!(p.bth().psn, 43981);
    let reth = p.ext().reth().unwrap();
    assert_eq!(reth.va, 0x00007f0012345000);
    assert_eq!(reth.rkey, 0x00abcdef);
    assert_eq!(reth.dma_len, 13);
    assert_eq!(p.payload(), b"Hello, RoCE!!");
    match p.net() {
        NetInfo::Ipv6(i) => {
            assert_eq!(i.flow_label, 0x12345);
            assert_eq!((i.dscp << 2) | i.ecn, 0x6a);
        }
        other => panic!("{other:?}"),
    }

    for (name, syn, psn) in [
        ("v3_rc_ack_aeth_ipv4", 31u8, 256u32),
        ("v3b_rc_rnr_nak_ipv4", 46, 257),
        ("v3c_rc_nak_seq_err_ipv4", 96, 258),
    ] {
        let f = vector(name);
        let p = RocePacket::parse(&f).unwrap();
        assert_eq!(p.bth().opcode, Opcode(17), "{name}");
        assert_eq!(p.bth().psn, psn);
        let aeth = p.ext().aeth().unwrap();
        assert_eq!(aeth.syndrome, syn);
        assert_eq!(aeth.msn, 5);
    }
    let f = vector("v3b_rc_rnr_nak_ipv4");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(
        p.ext().aeth().unwrap().kind(),
        AethSyndrome::RnrNak { timer: 14 }
    );
    let f = vector("v3c_rc_nak_seq_err_ipv4");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(
        p.ext().aeth().unwrap().kind(),
        AethSyndrome::Nak(NakCode::PsnSeqErr)
    );

    let f = vector("v4_ud_send_imm_deth_ipv4");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.bth().opcode, Opcode(101));
    assert_eq!(p.bth().dest_qp, 0x77);
    let deth = p.ext().deth().unwrap();
    assert_eq!(deth.qkey, 0x11111111);
    assert_eq!(deth.src_qp, 0xabc);
    assert_eq!(p.ext().immdt(), Some(0xcafef00d));
    assert_eq!(p.payload().len(), 8);

    let f = vector("v5_rc_cmp_swap_ipv4");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.bth().opcode, Opcode(19));
    let a = p.ext().atomic_eth().unwrap();
    assert_eq!(a.va, 0x10000000);
    assert_eq!(a.rkey, 0x1234);
    assert_eq!(a.swap_add, 1229782938247303441);
    assert_eq!(a.compare, 2459565876494606882);

    let f = vector("v6_cnp_mellanox_example_ipv4");
    let p = RocePacket::parse(&f).unwrap();
    assert_eq!(p.bth().opcode, Opcode(129));
    assert!(p.bth().becn);
    assert_eq!(p.bth().dest_qp, 0xd2);
    assert_eq!(p.icrc(), Some([0xda, 0xfc, 0x1b, 0xef]));
}

#[test]
fn public_vectors_parse_verify_and_rebuild() {
    let mut checked = 0;
    for (heading, frame) in common::public_vectors() {
        if heading.starts_with("A6") {
            // UDP payload only, no IP/UDP headers: BTH-parsing vector.
            assert_eq!(frame.len(), 36);
            continue;
        }
        let p = RocePacket::parse_with(&frame, ParseMode::Lenient)
            .unwrap_or_else(|e| panic!("{heading}: {e}"));
        let status = p.icrc_status();
        if heading.starts_with("QUIRK") {
            // Mellanox sniffer rewrote the UDP source port to 4791: the ICRC only
            // verifies with the original port the heading names.
            assert!(matches!(status, IcrcStatus::Bad { .. }), "{heading}");
            let sport: u16 = heading
                .rsplit("sport ")
                .next()
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|s| s.parse().ok())
                .expect("sport in heading");
            let mut fixed = frame.clone();
            fixed[34..36].copy_from_slice(&sport.to_be_bytes());
            let p2 = RocePacket::parse_with(&fixed, ParseMode::Lenient).unwrap();
            assert_eq!(
                p2.icrc_status(),
                IcrcStatus::Ok,
                "{heading} with sport {sport}"
            );
            assert_eq!(rebuild(&fixed), fixed, "{heading}: rebuild");
        } else {
            assert_eq!(status, IcrcStatus::Ok, "{heading}");
            assert_eq!(rebuild(&frame), frame, "{heading}: rebuild");
        }
        checked += 1;
    }
    assert_eq!(checked, 21);
}
