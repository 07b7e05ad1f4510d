//! PFC / PAUSE frames against the reference capture `../shared/reference/pfc.pcap`
//! and tshark's MAC Control dissector (`macc`).
//!
//! - Every frame of pfc.pcap is rebuilt byte for byte, once by the builder from
//!   the values tshark decodes, and once by the state machine
//!   (`roce_stack::pfc::PfcGenerator`) driven through the matching scenario.
//! - A capture written from the generator's output is decoded by tshark, which
//!   must report the intended opcode, class-enable vector, timers and addresses,
//!   and no malformed frame or expert message.
//!
//! Fields compared: `eth.dst`, `eth.src`, `eth.type`, `vlan.id` (absent),
//! `frame.len`, `macc.opcode`, `macc.pause_time`, `macc.cbfc.enbv`,
//! `macc.cbfc.pause_time.c0` … `c7`, `_ws.malformed`, `_ws.expert.message`.
//!
//! tshark is required unless `ROCE_SKIP_TSHARK=1` (then only the tshark-free
//! checks run); `TSHARK` overrides the binary.

mod common;

use std::collections::HashMap;
use std::path::Path;

use roce_stack::pfc::{GeneratorConfig, PfcGenerator, Thresholds};
use roce_stack::time::Instant;
use roce_stack::wire::pfc::{MacControl, PauseRepr, PfcRepr, OPCODE_PAUSE, OPCODE_PFC};
use roce_stack::wire::{classify, Frame};

const FIELDS: &[&str] = &[
    "frame.number",
    "frame.len",
    "eth.dst",
    "eth.src",
    "eth.type",
    "vlan.id",
    "macc.opcode",
    "macc.pause_time",
    "macc.cbfc.enbv",
    "macc.cbfc.pause_time.c0",
    "macc.cbfc.pause_time.c1",
    "macc.cbfc.pause_time.c2",
    "macc.cbfc.pause_time.c3",
    "macc.cbfc.pause_time.c4",
    "macc.cbfc.pause_time.c5",
    "macc.cbfc.pause_time.c6",
    "macc.cbfc.pause_time.c7",
    "_ws.malformed",
    "_ws.expert.message",
];

/// The source MAC of every frame in pfc.pcap (tshark: `02:00:00:00:00:01`).
const PCAP_SRC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// One frame as tshark printed it: field -> value (absent when empty).
struct Row(HashMap<&'static str, String>);

impl Row {
    fn get(&self, f: &str) -> Option<&str> {
        self.0.get(f).map(String::as_str)
    }
    /// A number printed in decimal or as `0x..` hex.
    fn num(&self, f: &str) -> Option<u64> {
        self.get(f).map(|v| {
            let r = match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            };
            r.unwrap_or_else(|_| panic!("{f}: {v:?}"))
        })
    }
    fn mac(&self, f: &str) -> [u8; 6] {
        let v = self.get(f).unwrap_or_else(|| panic!("{f} missing"));
        let b: Vec<u8> = v
            .split(':')
            .map(|x| u8::from_str_radix(x, 16).unwrap_or_else(|_| panic!("{f}: {v:?}")))
            .collect();
        b.try_into().unwrap_or_else(|_| panic!("{f}: {v:?}"))
    }
    /// The MAC control frame tshark decoded.
    fn mac_control(&self) -> MacControl {
        let op = self.num("macc.opcode").expect("macc.opcode") as u16;
        match op {
            OPCODE_PAUSE => MacControl::Pause(PauseRepr {
                quanta: self.num("macc.pause_time").expect("macc.pause_time") as u16,
            }),
            OPCODE_PFC => {
                let mut quanta = [0u16; 8];
                for (i, q) in quanta.iter_mut().enumerate() {
                    let f = FIELDS[9 + i];
                    *q = self.num(f).unwrap_or_else(|| panic!("{f} missing")) as u16;
                }
                MacControl::Pfc(PfcRepr {
                    class_enable: self.num("macc.cbfc.enbv").expect("macc.cbfc.enbv") as u16,
                    quanta,
                })
            }
            op => panic!("tshark opcode 0x{op:04x}"),
        }
    }
}

fn tshark_rows(bin: &str, file: &Path) -> Vec<Row> {
    common::tshark_fields(bin, file, &[], FIELDS)
        .into_iter()
        .map(Row)
        .collect()
}

fn pcap_path() -> std::path::PathBuf {
    common::shared_dir().join("reference/pfc.pcap")
}

fn write_pcap(path: &Path, frames: &[(Instant, Vec<u8>)]) {
    let bytes = roce_io::pcap::write::to_vec(
        frames
            .iter()
            .map(|(t, f)| (std::time::Duration::from_nanos(t.as_nanos()), f.as_slice())),
        roce_io::pcap::Resolution::Micro,
    );
    std::fs::write(path, bytes).expect("write pcap");
}

fn emit(mc: &MacControl, src: [u8; 6]) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let n = mc.emit(src, &mut buf).expect("emit");
    buf[..n].to_vec()
}

fn poll(g: &mut PfcGenerator, now: Instant) -> Vec<u8> {
    let mut buf = [0u8; 60];
    let n = g.poll_transmit(now, &mut buf).expect("a frame is due");
    buf[..n].to_vec()
}

/// pfc.pcap holds (tshark, `-V`): 1 PAUSE 65535 quanta, 2 PFC XOFF priority 3
/// 65535 quanta, 3 PFC XON priority 3; all from 02:00:00:00:00:01, 60 bytes.
/// The generator reproduces each from its scenario; the builder reproduces each
/// from our parser's decode.
#[test]
fn pfc_pcap_frames_rebuilt_byte_exact() {
    let frames = common::read_pcap(&pcap_path());
    assert_eq!(frames.len(), 3);
    for f in &frames {
        assert_eq!(f.len(), 60);
        let mc = MacControl::parse(f).expect("our parser reads the reference frame");
        assert_eq!(&emit(&mc, PCAP_SRC), f, "builder round trip");
    }

    // Frame 1: a PAUSE-mode port reaching XOFF.
    let th = Thresholds::new(1000, 500);
    let mut pause = PfcGenerator::new(GeneratorConfig::pause(PCAP_SRC, 100_000, th)).unwrap();
    pause.on_enqueue(Instant::ZERO, 0, 1000);
    assert_eq!(poll(&mut pause, Instant::ZERO), frames[0], "PAUSE XOFF");

    // Frames 2 and 3: priority 3 reaches XOFF, then drains below XON.
    let mut g = PfcGenerator::new(GeneratorConfig::pfc(PCAP_SRC, 100_000, 1 << 3, th)).unwrap();
    g.on_enqueue(Instant::ZERO, 3, 1000);
    assert_eq!(
        poll(&mut g, Instant::ZERO),
        frames[1],
        "PFC XOFF priority 3"
    );
    g.on_dequeue(Instant::from_micros(67), 3, 1000);
    assert_eq!(
        poll(&mut g, Instant::from_micros(67)),
        frames[2],
        "PFC XON priority 3"
    );
}

/// tshark's decode of pfc.pcap equals our parser's, and building each frame
/// from tshark's values (opcode, vector, timers, source MAC) gives the
/// captured bytes.
#[test]
fn pfc_pcap_tshark_decode_rebuilds_the_frames() {
    let Some(bin) = common::tshark() else { return };
    let path = pcap_path();
    let frames = common::read_pcap(&path);
    let rows = tshark_rows(&bin, &path);
    assert_eq!(rows.len(), frames.len());
    let expected = [
        MacControl::Pause(PauseRepr { quanta: 0xFFFF }),
        MacControl::Pfc(PfcRepr::xoff(3, 0xFFFF)),
        MacControl::Pfc(PfcRepr::xon(3)),
    ];
    for ((row, frame), want) in rows.iter().zip(&frames).zip(expected) {
        let at = format!("pfc.pcap frame {}", row.get("frame.number").unwrap_or("?"));
        assert_eq!(row.get("eth.dst"), Some("01:80:c2:00:00:01"), "{at}");
        assert_eq!(row.num("eth.type"), Some(0x8808), "{at}");
        assert_eq!(row.get("vlan.id"), None, "{at}: untagged");
        let decoded = row.mac_control();
        assert_eq!(decoded, want, "{at}: tshark decode");
        assert_eq!(
            MacControl::parse(frame).unwrap(),
            decoded,
            "{at}: ours vs tshark"
        );
        assert_eq!(&emit(&decoded, row.mac("eth.src")), frame, "{at}: rebuilt");
    }
}

/// A capture of the generator's output (a PFC scenario, then a PAUSE one) as
/// tshark reads it: each frame carries the intended opcode, vector and timers
/// (all eight timer fields present), 60 bytes, untagged, to
/// 01:80:C2:00:00:01 from the port MAC, with no malformed or expert report.
#[test]
fn generator_output_decodes_in_tshark() {
    let Some(bin) = common::tshark() else { return };
    let mac = [0x02, 0x00, 0x00, 0x00, 0x00, 0x2a];
    let th = Thresholds::new(4096, 2048);
    let us = Instant::from_micros;
    let mut cfg = GeneratorConfig::pfc(mac, 100_000, 0x38, th);
    cfg.priority[5].quanta = 0x1234;
    let mut g = PfcGenerator::new(cfg).unwrap();
    let mut out: Vec<(Instant, Vec<u8>)> = Vec::new();
    let mut want: Vec<MacControl> = Vec::new();
    let pfc = |set: &[(u8, u16)]| {
        let mut r = PfcRepr::default();
        for &(p, q) in set {
            r.set(p, q);
        }
        MacControl::Pfc(r)
    };

    // XOFF 3; then 4 and 5 together (vector 0x0030, 5 with its own quanta).
    g.on_enqueue(us(0), 3, 5000);
    out.push((us(0), poll(&mut g, us(0))));
    want.push(pfc(&[(3, 0xFFFF)]));
    g.on_enqueue(us(10), 4, 4096);
    g.on_enqueue(us(10), 5, 9000);
    out.push((us(10), poll(&mut g, us(10))));
    want.push(pfc(&[(4, 0xFFFF), (5, 0x1234)]));
    // Priority 5's refresh comes first: 0x1234 = 4660 quanta × 5.12 ns =
    // 23,859.2 ns -> 23,859 -> half 11,929 ns after 10 µs.
    let t5 = g.poll_timeout().unwrap();
    assert_eq!(t5, Instant::from_nanos(10_000 + 11_929));
    out.push((t5, poll(&mut g, t5)));
    want.push(pfc(&[(5, 0x1234)]));
    // XON 3 and 4 together; 5 stays paused.
    g.on_dequeue(us(30), 3, 5000);
    g.on_dequeue(us(30), 4, 4096);
    out.push((us(30), poll(&mut g, us(30))));
    want.push(pfc(&[(3, 0), (4, 0)]));

    // 802.3x: XOFF then XON.
    let mut p = PfcGenerator::new(GeneratorConfig::pause(mac, 100_000, th)).unwrap();
    p.on_enqueue(us(40), 6, 4096);
    out.push((us(40), poll(&mut p, us(40))));
    want.push(MacControl::Pause(PauseRepr { quanta: 0xFFFF }));
    p.on_dequeue(us(50), 6, 4096);
    out.push((us(50), poll(&mut p, us(50))));
    want.push(MacControl::Pause(PauseRepr { quanta: 0 }));

    let dir = std::env::temp_dir().join(format!("roce-pfc-reference-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("generator.pcap");
    write_pcap(&file, &out);
    let rows = tshark_rows(&bin, &file);
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(rows.len(), want.len());
    for (i, (row, want)) in rows.iter().zip(&want).enumerate() {
        let at = format!("generator frame {}", i + 1);
        assert_eq!(row.get("_ws.malformed"), None, "{at}");
        assert_eq!(row.get("_ws.expert.message"), None, "{at}");
        assert_eq!(row.num("frame.len"), Some(60), "{at}");
        assert_eq!(row.get("eth.dst"), Some("01:80:c2:00:00:01"), "{at}");
        assert_eq!(row.mac("eth.src"), mac, "{at}");
        assert_eq!(row.num("eth.type"), Some(0x8808), "{at}");
        assert_eq!(row.get("vlan.id"), None, "{at}");
        if let MacControl::Pfc(_) = want {
            for f in &FIELDS[9..17] {
                assert!(row.get(f).is_some(), "{at}: {f} present");
            }
        }
        assert_eq!(&row.mac_control(), want, "{at}: tshark decode");
        assert_eq!(
            MacControl::parse(&out[i].1).unwrap(),
            *want,
            "{at}: our parser"
        );
    }
}

#[test]
/// CASES R32: the builder's PAUSE, PFC XOFF and PFC XON frames equal
/// pfc.pcap's and the hex lines of vectors.txt.
fn r32_pfc_pause_match_reference_pcap_and_vectors() {
    // pfc.pcap, as tshark 4.0 decodes it: (1) PAUSE pause_time 65535,
    // (2) PFC enable 0x0008 (C3) C3 time 65535, (3) PFC enable 0x0008 C3 time 0;
    // all from 02:00:00:00:00:01, 60 bytes.
    let frames = common::read_pcap(&pcap_path());
    assert_eq!(frames.len(), 3);
    let ours = [
        emit(&MacControl::Pause(PauseRepr { quanta: 0xFFFF }), PCAP_SRC),
        emit(&MacControl::Pfc(PfcRepr::xoff(3, 0xFFFF)), PCAP_SRC),
        emit(&MacControl::Pfc(PfcRepr::xon(3)), PCAP_SRC),
    ];
    for (i, (theirs, ours)) in frames.iter().zip(&ours).enumerate() {
        assert_eq!(theirs, ours, "pfc.pcap frame {}", i + 1);
    }
    // The same three as hex lines at the end of vectors.txt.
    let vectors: Vec<(String, Vec<u8>)> = common::reference_vectors()
        .into_iter()
        .filter(|(n, _)| n.contains("PAUSE") || n.contains("PFC"))
        .collect();
    assert_eq!(vectors.len(), 3);
    for (name, hex) in &vectors {
        let want = if name.contains("PAUSE") {
            &ours[0]
        } else if name.contains("XOFF") {
            &ours[1]
        } else {
            assert!(name.contains("XON"), "{name}");
            &ours[2]
        };
        assert_eq!(hex, want, "{name}");
    }
    // And they parse to what tshark shows.
    assert_eq!(
        MacControl::parse(&frames[0]),
        Ok(MacControl::Pause(PauseRepr { quanta: 65535 }))
    );
    assert_eq!(
        MacControl::parse(&frames[1]),
        Ok(MacControl::Pfc(PfcRepr {
            class_enable: 0x0008,
            quanta: [0, 0, 0, 65535, 0, 0, 0, 0],
        }))
    );
    assert!(matches!(classify(&frames[0]), Frame::Pause(_, _)));
    assert!(matches!(classify(&frames[2]), Frame::Pfc(_, _)));
}
