//! Whole-frame parser: `classify`, `RocePacket::parse` (strict, ICRC checked)
//! and `parse_with(.., Lenient)` on arbitrary bytes, none of which may panic.
//! A frame that parses strictly is rebuilt with `PacketRepr::from_packet` +
//! `emit` and re-parsed: every field the builder takes from the repr must come
//! back equal (lengths, checksums, PadCnt and the ICRC are recomputed), and a
//! second rebuild must be byte-identical to the first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_stack::wire::{
    classify, BthRepr, Error, Frame, NetInfo, PacketRepr, ParseMode, RocePacket,
};

fuzz_target!(|data: &[u8]| {
    let lenient = RocePacket::parse_with(data, ParseMode::Lenient);
    if let Ok(p) = &lenient {
        // Tool-side accessors must not panic either.
        let _ = p.icrc_status();
        let _ = p.computed_icrc();
        let _ = p.declared_payload_len();
    }
    let frame = classify(data);
    let _ = RocePacket::parse_with(data, ParseMode::Strict);

    let Ok(p) = RocePacket::parse(data) else {
        return;
    };
    // A strictly valid packet is valid leniently, with the same fields, and is
    // what `classify` reports.
    assert_eq!(lenient.as_ref().ok(), Some(&p), "lenient parse differs");
    assert_eq!(frame, Frame::Roce(p), "classify differs");

    let Some(first) = rebuild(&p) else {
        return;
    };
    let q = match RocePacket::parse(&first) {
        Ok(q) => q,
        Err(e) => panic!("re-parse of the rebuilt frame failed: {e:?}"),
    };
    assert_eq!(q.l2(), p.l2());
    assert_eq!(norm_net(&q.net()), norm_net(&p.net()));
    match (q.udp(), p.udp()) {
        (Some(a), Some(b)) => {
            assert_eq!(
                (a.src_port, a.dst_port, a.checksum),
                (b.src_port, b.dst_port, b.checksum)
            )
        }
        (None, None) => {}
        (a, b) => panic!("UDP header presence differs: {a:?} vs {b:?}"),
    }
    assert_eq!(norm_bth(q.bth()), norm_bth(p.bth()));
    assert_eq!(q.ext(), p.ext());
    assert_eq!(q.payload(), p.payload());
    assert_eq!(q.pad() as usize, p.payload().len().wrapping_neg() & 3);
    // Rebuilding is idempotent after one round.
    let second = rebuild(&q).expect("second rebuild");
    assert_eq!(first, second, "rebuild is not idempotent");
});

/// Rebuild `p` from its repr. `None` only when the canonical pad would push a
/// packet already at the 16-bit length limit past it.
fn rebuild(p: &RocePacket<'_>) -> Option<Vec<u8>> {
    let repr = PacketRepr::from_packet(p);
    let mut buf = vec![0u8; repr.frame_len(p.payload().len())];
    match repr.emit(&mut buf, p.payload()) {
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
        Err(Error::BadPayloadLen) if p.payload().len() > 65_000 => None,
        Err(e) => panic!("emit of a parsed packet failed: {e:?}"),
    }
}

/// Network header fields the repr carries (lengths and checksums zeroed).
fn norm_net(n: &NetInfo) -> NetInfo {
    let mut n = *n;
    match &mut n {
        NetInfo::Ipv4(i) => {
            i.total_len = 0;
            i.checksum = 0;
        }
        NetInfo::Ipv6(i) => i.payload_len = 0,
        NetInfo::Grh(g) => g.payload_len = 0,
    }
    n
}

/// BTH without PadCnt (the builder derives it from the payload length).
fn norm_bth(b: BthRepr) -> BthRepr {
    BthRepr { pad_count: 0, ..b }
}
