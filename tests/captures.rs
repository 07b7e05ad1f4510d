//! `roce decode` (the library entry point, `roce::decode::decode_bytes`) over the
//! public captures in `../shared/captures`.
//!
//! The captures are read from `../shared/captures` (or `$ROCE_SHARED_DIR/captures`)
//! and are never copied into the repository (their licences do not allow it; see
//! `../shared/captures/MANIFEST.md`). The oracle is MANIFEST.md's table, written
//! with tshark 4.0 and an independent ICRC implementation: for every file it lists,
//! the decode must give exactly its frame count, its RoCE frame count, its
//! per-opcode counts and its ICRC status counts, and no frame may be `bad_roce`.
//! Frames marked `ok-if-sport=X` (a Mellanox sniffer rewrote the UDP source port)
//! must decode as `bad` and verify once the source port that MANIFEST.md and
//! `public-vectors.md` name is put back.
//!
//! A synthetic test cuts a captured frame so that its IP/UDP lengths run past the
//! captured bytes (the pcap record keeping the full original length) and checks
//! that it decodes as `truncated`. A property test feeds damaged copies of a
//! capture (pcap, and the same frames rewritten as pcapng) to the decoder: it
//! must return a result or a typed error, never panic.

mod common;

use std::collections::BTreeMap;

use roce::decode::{decode_bytes, DecodeOptions, FrameKind, RoceVersion, Summary};
use roce_io::pcap::read::Frames;
use roce_stack::wire::{classify, Frame, IcrcStatus, NetInfo, Opcode};

/// MANIFEST.md's short opcode names and their BTH opcode numbers, from the IBTA
/// opcode table (IBTA 1.7 §9.2.1, Table 36; RoCEv2 CNP: Annex A17.9.3). Written
/// out here rather than taken from `roce_stack`'s table, so that the table is
/// checked too.
const MANIFEST_OPCODES: &[(&str, u8)] = &[
    ("RC_SEND_FIRST", 0x00),
    ("RC_SEND_MIDDLE", 0x01),
    ("RC_SEND_LAST", 0x02),
    ("RC_SEND_LAST_IMM", 0x03),
    ("RC_SEND_ONLY", 0x04),
    ("RC_SEND_ONLY_IMM", 0x05),
    ("RC_WRITE_FIRST", 0x06),
    ("RC_WRITE_MIDDLE", 0x07),
    ("RC_WRITE_LAST", 0x08),
    ("RC_WRITE_LAST_IMM", 0x09),
    ("RC_WRITE_ONLY", 0x0A),
    ("RC_WRITE_ONLY_IMM", 0x0B),
    ("RC_READ_REQ", 0x0C),
    ("RC_READ_RESP_FIRST", 0x0D),
    ("RC_READ_RESP_MIDDLE", 0x0E),
    ("RC_READ_RESP_LAST", 0x0F),
    ("RC_READ_RESP_ONLY", 0x10),
    ("RC_ACK", 0x11),
    ("RC_ATOMIC_ACK", 0x12),
    ("RC_CMP_SWAP", 0x13),
    ("RC_FETCH_ADD", 0x14),
    ("RC_SEND_LAST_INV", 0x16),
    ("RC_SEND_ONLY_INV", 0x17),
    ("UC_SEND_FIRST", 0x20),
    ("UC_SEND_MIDDLE", 0x21),
    ("UC_SEND_LAST", 0x22),
    ("UC_SEND_ONLY", 0x24),
    ("UC_WRITE_ONLY", 0x2A),
    ("UD_SEND_ONLY", 0x64),
    ("UD_SEND_ONLY_IMM", 0x65),
    ("CNP", 0x81),
];

/// One row of MANIFEST.md's table.
#[derive(Debug)]
struct Row {
    file: String,
    pkts: u64,
    roce_pkts: u64,
    /// (version, opcode byte) -> count.
    opcodes: BTreeMap<(RoceVersion, u8), u64>,
    icrc_ok: u64,
    icrc_bad: u64,
    icrc_truncated: u64,
    /// Frames whose ICRC verifies only with the original UDP source port.
    icrc_ok_if_sport: u64,
    notes: String,
}

/// `NAME×N` -> (NAME, N).
fn split_count(item: &str) -> (&str, u64) {
    let (name, n) = item
        .trim()
        .rsplit_once('×')
        .unwrap_or_else(|| panic!("MANIFEST entry without ×count: {item:?}"));
    (
        name.trim(),
        n.trim()
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {item:?}")),
    )
}

fn manifest() -> Vec<Row> {
    let text = std::fs::read_to_string(common::shared_dir().join("captures/MANIFEST.md"))
        .expect("read ../shared/captures/MANIFEST.md");
    let cells = |line: &str| -> Vec<String> {
        let t = line.trim();
        let t = t.strip_prefix('|').unwrap_or(t);
        let t = t.strip_suffix('|').unwrap_or(t);
        t.split('|').map(|c| c.trim().to_string()).collect()
    };
    let mut lines = text.lines().skip_while(|l| !l.starts_with("| file "));
    let header = cells(lines.next().expect("MANIFEST table header"));
    let col = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("MANIFEST column {name:?} missing: {header:?}"))
    };
    let (c_file, c_pkts, c_roce, c_ops, c_icrc, c_notes) = (
        col("file"),
        col("pkts"),
        col("RoCE pkts"),
        col("opcodes"),
        col("ICRC (independent check)"),
        col("notes"),
    );
    let mut rows = Vec::new();
    for line in lines.skip(1) {
        if !line.starts_with('|') {
            break;
        }
        let c = cells(line);
        assert_eq!(c.len(), header.len(), "MANIFEST row shape: {line}");
        let mut opcodes = BTreeMap::new();
        for item in c[c_ops].split(',') {
            let (name, n) = split_count(item);
            let (version, name) = match name.strip_prefix("v1:") {
                Some(n) => (RoceVersion::V1, n),
                None => (RoceVersion::V2, name),
            };
            let op = MANIFEST_OPCODES
                .iter()
                .find(|(m, _)| *m == name)
                .unwrap_or_else(|| panic!("opcode {name:?} not in MANIFEST_OPCODES"))
                .1;
            *opcodes.entry((version, op)).or_insert(0) += n;
        }
        let mut row = Row {
            file: c[c_file].trim_matches('`').to_string(),
            pkts: c[c_pkts].parse().expect("pkts"),
            roce_pkts: c[c_roce].parse().expect("RoCE pkts"),
            opcodes,
            icrc_ok: 0,
            icrc_bad: 0,
            icrc_truncated: 0,
            icrc_ok_if_sport: 0,
            notes: c[c_notes].clone(),
        };
        for item in c[c_icrc].split(',') {
            let (status, n) = split_count(item);
            match status {
                "ok" => row.icrc_ok += n,
                "bad" => row.icrc_bad += n,
                "truncated" => row.icrc_truncated += n,
                s if s.starts_with("ok-if-sport=") => row.icrc_ok_if_sport += n,
                s => panic!("unknown ICRC status {s:?} in MANIFEST"),
            }
        }
        rows.push(row);
    }
    assert!(!rows.is_empty(), "no rows in MANIFEST.md");
    rows
}

/// The source port an `ok-if-sport` file's ICRC verifies with: MANIFEST.md's
/// notes say "ICRC ok with sport N", and `public-vectors.md` gives the same port
/// as `ok-if-sport=N` for a frame of that file.
fn original_sport(row: &Row) -> u16 {
    let (_, rest) = row
        .notes
        .split_once("ok with sport ")
        .unwrap_or_else(|| panic!("{}: notes name no original sport", row.file));
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let sport: u16 = digits.parse().expect("sport");
    let pv = std::fs::read_to_string(common::shared_dir().join("reference/public-vectors.md"))
        .expect("read public-vectors.md");
    let named =
        pv.lines().any(|l| l.contains(&row.file)) && pv.contains(&format!("ok-if-sport={sport}"));
    assert!(
        named,
        "{}: public-vectors.md does not confirm sport {sport}",
        row.file
    );
    sport
}

fn read_capture(file: &str) -> Vec<u8> {
    let path = common::shared_dir().join("captures").join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn summarize(data: &[u8]) -> Summary {
    decode_bytes(data, &DecodeOptions::default(), &mut std::io::sink()).expect("decode")
}

/// Offset of the UDP source port in a RoCEv2 frame.
fn sport_offset(f: &[u8]) -> usize {
    let l2 = if f[12..14] == [0x81, 0x00] { 18 } else { 14 };
    match f[l2 - 2..l2] {
        [0x08, 0x00] => l2 + 20,
        [0x86, 0xDD] => l2 + 40,
        _ => panic!("not RoCEv2"),
    }
}

#[test]
fn manifest_captures_decode_as_listed() {
    let rows = manifest();
    let (mut frames, mut roce, mut ok, mut bad, mut recovered, mut truncated) = (0, 0, 0, 0, 0, 0);
    for row in &rows {
        let data = read_capture(&row.file);
        let s = summarize(&data);
        let f = &row.file;
        assert_eq!(s.frames, row.pkts, "{f}: frames");
        assert_eq!(
            s.kinds.get(FrameKind::Roce),
            row.roce_pkts,
            "{f}: RoCE frames"
        );
        assert_eq!(s.kinds.get(FrameKind::BadRoce), 0, "{f}: bad_roce frames");
        for (&(v, op), &n) in &row.opcodes {
            assert_eq!(s.opcode(v, Opcode(op)), n, "{f}: {v:?} opcode 0x{op:02x}");
        }
        for (v, op, n) in s.opcodes() {
            assert!(
                row.opcodes.contains_key(&(v, op.0)),
                "{f}: {n} unexpected {v:?} {op} frames"
            );
        }
        assert_eq!(
            row.opcodes.values().sum::<u64>(),
            row.roce_pkts,
            "{f}: MANIFEST sums"
        );
        assert_eq!(s.icrc.ok, row.icrc_ok, "{f}: ICRC ok");
        assert_eq!(
            s.icrc.bad,
            row.icrc_bad + row.icrc_ok_if_sport,
            "{f}: ICRC bad"
        );
        assert_eq!(s.icrc.truncated, row.icrc_truncated, "{f}: ICRC truncated");

        // Frame by frame: every bad ICRC is an ok-if-sport frame that verifies
        // with the original source port.
        let mut fixed = 0;
        if s.icrc.bad > 0 {
            let sport = original_sport(row);
            for cf in Frames::new(&data).expect("capture") {
                let cf = cf.expect("frame");
                let Frame::Roce(p) = classify(cf.data) else {
                    continue;
                };
                if !matches!(p.icrc_status(), IcrcStatus::Bad { .. }) {
                    continue;
                }
                assert!(
                    matches!(p.net(), NetInfo::Ipv4(_) | NetInfo::Ipv6(_)),
                    "{f}: frame {}",
                    cf.number
                );
                let mut b = cf.data.to_vec();
                let off = sport_offset(&b);
                b[off..off + 2].copy_from_slice(&sport.to_be_bytes());
                let Frame::Roce(q) = classify(&b) else {
                    panic!("{f}: frame {} no longer RoCE", cf.number);
                };
                assert_eq!(
                    q.icrc_status(),
                    IcrcStatus::Ok,
                    "{f}: frame {} with sport {sport}",
                    cf.number
                );
                fixed += 1;
            }
        }
        assert_eq!(
            fixed, row.icrc_ok_if_sport,
            "{f}: frames verified with the original sport"
        );

        // The JSON Lines agree with the counts and are valid JSON.
        let mut out = Vec::new();
        let opts = DecodeOptions {
            stats: false,
            json: true,
        };
        decode_bytes(&data, &opts, &mut out).expect("json decode");
        let text = String::from_utf8(out).expect("utf-8");
        let mut statuses = BTreeMap::<String, u64>::new();
        let mut n = 0;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            n += 1;
            assert_eq!(v["frame"], n, "{f}: frame numbers");
            if v["kind"] == "roce" {
                *statuses
                    .entry(v["icrc_status"].as_str().expect("icrc_status").to_string())
                    .or_insert(0) += 1;
            }
        }
        assert_eq!(n, row.pkts, "{f}: JSON lines");
        assert_eq!(statuses.get("ok").copied().unwrap_or(0), s.icrc.ok, "{f}");
        assert_eq!(statuses.get("bad").copied().unwrap_or(0), s.icrc.bad, "{f}");

        frames += s.frames;
        roce += s.kinds.get(FrameKind::Roce);
        ok += s.icrc.ok;
        bad += s.icrc.bad;
        recovered += fixed;
        truncated += s.icrc.truncated;
    }
    eprintln!(
        "captures: {} files, {frames} frames, {roce} RoCE frames: ICRC ok {ok}, bad {bad} \
         ({recovered} verify with the original UDP source port), truncated {truncated}",
        rows.len()
    );
}

/// Write a one-frame pcap (link type Ethernet) whose record keeps `orig_len`.
fn one_frame_pcap(data: &[u8], orig_len: u32) -> Vec<u8> {
    let mut w =
        roce_io::pcap::FrameWriter::with_resolution(Vec::new(), roce_io::pcap::Resolution::Micro)
            .expect("pcap header");
    w.write_record(std::time::Duration::from_secs(1), data, orig_len)
        .expect("pcap record");
    w.into_inner()
}

fn json_lines(data: &[u8]) -> (Summary, Vec<serde_json::Value>) {
    let mut out = Vec::new();
    let opts = DecodeOptions {
        stats: false,
        json: true,
    };
    let s = decode_bytes(data, &opts, &mut out).expect("decode");
    let v = String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    (s, v)
}

#[test]
fn frame_cut_short_by_snaplen_is_truncated() {
    // The first RoCE frame of the rxe pingpong capture: an RC SEND ONLY.
    let data = read_capture("linlinw5__pingpong_rc.pcap");
    let frame = Frames::new(&data)
        .expect("capture")
        .map(|f| f.expect("frame"))
        .find(|f| matches!(classify(f.data), Frame::Roce(_)))
        .expect("a RoCE frame");
    let full = frame.data;
    // The IPv4 total length and UDP length of the frame, read from the bytes.
    let ip_total = u16::from_be_bytes([full[16], full[17]]) as usize;
    let udp_len = u16::from_be_bytes([full[38], full[39]]) as usize;
    assert_eq!(full.len(), 14 + ip_total, "whole frame captured");
    assert_eq!(udp_len + 20, ip_total);
    // Keep the headers (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12) and 4 payload
    // bytes: the IP and UDP lengths now run past the captured bytes.
    let cut = &full[..14 + 20 + 8 + 12 + 4];
    assert!(14 + ip_total > cut.len());

    let (s_full, v_full) = json_lines(&one_frame_pcap(full, full.len() as u32));
    let (s, v) = json_lines(&one_frame_pcap(cut, full.len() as u32));
    assert_eq!(s_full.icrc.ok, 1);
    assert_eq!(s.frames, 1);
    assert_eq!(s.kinds.get(FrameKind::Roce), 1, "still RoCE: {}", v[0]);
    assert_eq!(s.icrc.truncated, 1);
    assert_eq!(s.icrc.ok + s.icrc.bad, 0);
    let j = &v[0];
    assert_eq!(j["kind"], "roce");
    assert_eq!(j["icrc_status"], "truncated");
    assert!(j["icrc"].is_null(), "no ICRC captured: {j}");
    // The BTH fields are still there, and the payload length comes from the
    // length fields: UDP length - UDP 8 - BTH 12 - ICRC 4 - pad.
    for k in ["opcode", "dest_qp", "psn", "ack_req", "sport", "src", "dst"] {
        assert_eq!(j[k], v_full[0][k], "{k}");
    }
    let pad = j["pad"].as_u64().expect("pad") as usize;
    assert_eq!(
        j["payload_len"].as_u64().expect("payload_len") as usize,
        udp_len - 8 - 12 - 4 - pad
    );

    // Cut inside the BTH: not enough left to be a RoCE packet.
    let (s, v) = json_lines(&one_frame_pcap(&full[..14 + 20 + 8 + 6], full.len() as u32));
    assert_eq!(s.kinds.get(FrameKind::BadRoce), 1, "{}", v[0]);
    assert_eq!(v[0]["error"], "rx_truncated");
}

/// The frames of `pcap` rewritten as pcapng (Section Header, one Ethernet
/// Interface Description, Enhanced Packet Blocks), little-endian.
fn to_pcapng(pcap: &[u8]) -> Vec<u8> {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
    use pcap_file::pcapng::PcapNgWriter;
    let mut w = PcapNgWriter::with_endianness(Vec::new(), pcap_file::Endianness::Little)
        .expect("pcapng writer");
    w.write_pcapng_block(InterfaceDescriptionBlock::new(
        pcap_file::DataLink::ETHERNET,
        0,
    ))
    .expect("IDB");
    for f in Frames::new(pcap).expect("capture") {
        let f = f.expect("frame");
        w.write_pcapng_block(EnhancedPacketBlock {
            interface_id: 0,
            timestamp: std::time::Duration::from_micros(f.number),
            original_len: f.orig_len,
            data: std::borrow::Cow::Borrowed(f.data),
            options: vec![],
        })
        .expect("EPB");
    }
    w.into_inner()
}

#[test]
fn pcapng_decodes_like_pcap() {
    let pcap = read_capture("linlinw5__rdma_atomic_bw.pcap");
    let ng = to_pcapng(&pcap);
    assert_eq!(&ng[..4], &[0x0A, 0x0D, 0x0D, 0x0A]);
    let (a, la) = json_lines(&pcap);
    let (b, lb) = json_lines(&ng);
    assert_eq!(a, b);
    assert_eq!(la, lb);
}

mod damaged {
    use super::*;
    use proptest::prelude::*;

    fn seeds() -> &'static [Vec<u8>; 2] {
        static SEEDS: std::sync::OnceLock<[Vec<u8>; 2]> = std::sync::OnceLock::new();
        SEEDS.get_or_init(|| {
            let pcap = read_capture("linlinw5__rdma_atomic_bw.pcap");
            let ng = to_pcapng(&pcap);
            [pcap, ng]
        })
    }

    proptest! {
        // 256 cases by default; more with PROPTEST_CASES=N.

        /// Overwrite a few bytes and cut the file anywhere: the decoder returns
        /// counts or a typed error, and never panics, in every output mode.
        #[test]
        fn damaged_captures_never_panic(
            which in 0usize..2,
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
            cut in any::<prop::sample::Index>(),
            mode in 0u8..4,
        ) {
            let mut data = seeds()[which].clone();
            for (at, byte) in edits {
                let i = at.index(data.len());
                data[i] = byte;
            }
            let keep = cut.index(data.len() + 1);
            data.truncate(keep.max(data.len() * 3 / 4));
            let opts = DecodeOptions { stats: mode & 1 != 0, json: mode & 2 != 0 };
            let mut out = Vec::new();
            if let Ok(s) = decode_bytes(&data, &opts, &mut out) {
                // One line per frame (plus the header line in text mode).
                let lines = String::from_utf8(out).expect("utf-8").lines().count() as u64;
                if !opts.stats {
                    let header = u64::from(!opts.json && s.frames > 0);
                    prop_assert_eq!(lines, s.frames + header);
                }
            }
        }

        /// Arbitrary bytes behind each magic number.
        #[test]
        fn random_bytes_never_panic(
            magic in prop::sample::select(vec![
                [0xD4u8, 0xC3, 0xB2, 0xA1],
                [0xA1, 0xB2, 0xC3, 0xD4],
                [0x0A, 0x0D, 0x0D, 0x0A],
            ]),
            body in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let mut data = magic.to_vec();
            data.extend_from_slice(&body);
            let mut out = Vec::new();
            let _ = decode_bytes(&data, &DecodeOptions::default(), &mut out);
        }
    }
}
