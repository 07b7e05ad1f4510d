//! Transport-header parsing for every opcode. The first input byte is the BTH
//! opcode; the rest is what follows the BTH (extension headers, payload, pad,
//! ICRC).
//!
//! 1. `ExtHeaders::parse(opcode.info().hdrs, rest)`: no panic; on success the
//!    length is the table's, the headers present are the table's, and
//!    `ExtHeaders::emit` writes the same bytes back.
//! 2. The BTH + rest wrapped in valid Ethernet / IPv4 / UDP 4791 headers
//!    (consistent lengths, correct IPv4 checksum) so the fuzzer reaches the
//!    transport layer: strict and lenient parse and `classify`, once as given
//!    and once with the last 4 bytes replaced by the correct ICRC (so strict
//!    parsing can succeed), and the ICRC-fixed transport also behind an IPv6
//!    header and a RoCEv1 GRH. A strict success must report this opcode, the
//!    headers of step 1 and a payload that accounts for every byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_stack::icrc::{self, IcrcForm};
use roce_stack::wire::{classify, ExtHeaders, Opcode, ParseMode, RocePacket};

const ETH_LEN: usize = 14;
/// Longest transport (BTH .. ICRC) that fits the 16-bit IPv4 total length.
const MAX_TRANSPORT: usize = 65_535 - 20 - 8;

fuzz_target!(|data: &[u8]| {
    let Some((&op, rest)) = data.split_first() else {
        return;
    };
    let opcode = Opcode(op);
    let info = opcode.info();

    let ext = ExtHeaders::parse(info.hdrs, rest);
    if let Ok((e, len)) = &ext {
        assert_eq!(*len, info.hdr_len as usize);
        assert_eq!(e.mask(), info.hdrs);
        let mut out = vec![0u8; *len];
        let n = e.emit(info.hdrs, &mut out).expect("emit of parsed headers");
        assert_eq!(n, *len);
        assert_eq!(
            &out[..],
            &rest[..*len],
            "extension headers do not round-trip"
        );
    }

    // BTH: this opcode, PadCnt from the input length (so every value occurs),
    // TVer 0, P_Key 0xFFFF, QPN 0x12, AckReq, PSN 1.
    let pad = (rest.len() & 3) as u8;
    let bth = [op, pad << 4, 0xFF, 0xFF, 0, 0, 0, 0x12, 0x80, 0, 0, 1];
    let mut transport = Vec::with_capacity(12 + rest.len());
    transport.extend_from_slice(&bth);
    transport.extend_from_slice(rest);
    transport.truncate(MAX_TRANSPORT);

    let v4 = wrap_ipv4(&transport);
    check(&v4);
    for mut frame in [v4, wrap_ipv6(&transport), wrap_grh(&transport)] {
        if fix_icrc(&mut frame) {
            check(&frame);
            if let Ok(p) = RocePacket::parse(&frame) {
                assert_eq!(p.bth().opcode, opcode);
                let (e, len) = ext.expect("strict parse succeeded without the extension headers");
                assert_eq!(p.ext().to_headers(), e);
                assert_eq!(
                    12 + len + p.payload().len() + p.pad() as usize + 4,
                    transport.len(),
                    "payload does not account for every byte"
                );
            }
        }
    }
});

fn check(frame: &[u8]) {
    let _ = RocePacket::parse(frame);
    if let Ok(p) = RocePacket::parse_with(frame, ParseMode::Lenient) {
        let _ = p.icrc_status();
        let _ = p.declared_payload_len();
    }
    let _ = classify(frame);
}

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn wrap_ipv4(transport: &[u8]) -> Vec<u8> {
    let udp_len = (8 + transport.len()) as u16;
    let total = 20 + udp_len;
    let mut ip = [
        0x45, 0x00, 0, 0, 0x12, 0x34, 0x40, 0x00, 64, 17, 0, 0, 192, 168, 1, 1, 192, 168, 1, 2,
    ];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let mut sum: u32 = ip
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xFFFF {
        sum = (sum >> 16) + (sum & 0xFFFF);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let mut f = eth(0x0800);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&udp(udp_len));
    f.extend_from_slice(transport);
    f
}

fn wrap_ipv6(transport: &[u8]) -> Vec<u8> {
    let udp_len = (8 + transport.len()) as u16;
    let mut f = eth(0x86DD);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(&udp(udp_len));
    f.extend_from_slice(transport);
    f
}

fn wrap_grh(transport: &[u8]) -> Vec<u8> {
    let mut f = eth(0x8915);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(transport.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0x1B, 64]);
    f.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    f.extend_from_slice(&[0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    f.extend_from_slice(transport);
    f
}

fn udp(len: u16) -> [u8; 8] {
    let l = len.to_be_bytes();
    [0xC0, 0x00, 0x12, 0xB7, l[0], l[1], 0, 0]
}

/// Overwrite the last 4 bytes with the correct ICRC. False if the frame is too
/// short to hold the masked headers and an ICRC.
fn fix_icrc(frame: &mut [u8]) -> bool {
    let form = match u16::from_be_bytes([frame[12], frame[13]]) {
        0x0800 => IcrcForm::Ipv4,
        0x86DD => IcrcForm::Ipv6,
        _ => IcrcForm::Grh,
    };
    let Some(end) = frame.len().checked_sub(4) else {
        return false;
    };
    let Ok(crc) = icrc::compute(form, &frame[ETH_LEN..end]) else {
        return false;
    };
    frame[end..].copy_from_slice(&crc.to_le_bytes());
    true
}
