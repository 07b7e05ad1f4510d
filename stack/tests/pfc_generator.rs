//! PFC / PAUSE generation (`roce_stack::pfc::ingress`): XOFF at the threshold,
//! refresh timing, XON on drain, frame sharing, PAUSE mode, counters.
//!
//! Expected frames are written out from CASES R32 (the hex given there) and the
//! layout of ROCEV2-DIGEST §7, not from our builder; times are worked by hand:
//! one quantum = 512 bit times = 5.12 ns at 100 Gbit/s, 20.48 ns at 25 Gbit/s.
//! 0xFFFF quanta at 100 Gbit/s = 65535 × 5.12 = 335,539.2 ns; the generator
//! refreshes after half of that, floored to whole ns at each step:
//! 335,539 / 2 = 167,769 ns.

use roce_stack::pfc::ingress::{refresh_interval, ConfigError};
use roce_stack::pfc::{FlowControlMode, GeneratorConfig, PfcGenerator, Thresholds};
use roce_stack::testing::unhex;
use roce_stack::time::Instant;

const MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
const G100: u64 = 100_000;

/// A PFC frame from MAC, written out by hand: header, opcode 0x0101, vector,
/// eight big-endian timers, 26 zero bytes.
fn pfc_hex(vector: u16, timers: [u16; 8]) -> Vec<u8> {
    let mut s = format!("0180c2000001 020000000001 8808 0101 {vector:04x}");
    for t in timers {
        s.push_str(&format!(" {t:04x}"));
    }
    let mut v = unhex(&s);
    v.resize(60, 0);
    v
}

/// An 802.3x PAUSE frame from MAC: opcode 0x0001, one timer, 42 zero bytes.
fn pause_hex(quanta: u16) -> Vec<u8> {
    let mut v = unhex(&format!("0180c2000001 020000000001 8808 0001 {quanta:04x}"));
    v.resize(60, 0);
    v
}

fn t(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// PFC on `lossless`, XOFF 1000 B, XON 500 B, 100 Gbit/s.
fn pfc_gen(lossless: u8) -> PfcGenerator {
    PfcGenerator::new(GeneratorConfig::pfc(
        MAC,
        G100,
        lossless,
        Thresholds::new(1000, 500),
    ))
    .unwrap()
}

fn poll(g: &mut PfcGenerator, now: Instant) -> Option<Vec<u8>> {
    let mut buf = [0xAAu8; 128];
    g.poll_transmit(now, &mut buf).map(|n| buf[..n].to_vec())
}

/// CASES R32: XOFF for priority 3, quanta 0xFFFF, from 02:00:00:00:00:01 is
/// exactly the 60 bytes given in the case, all eight timers present.
#[test]
fn r32_xoff_prio3_frame_is_byte_exact() {
    let mut g = pfc_gen(1 << 3);
    g.on_enqueue(t(0), 3, 1000);
    let f = poll(&mut g, t(0)).expect("XOFF due");
    let mut want =
        unhex("0180c2000001 020000000001 8808 0101 0008 0000 0000 0000 ffff 0000 0000 0000 0000");
    want.extend_from_slice(&[0u8; 26]);
    assert_eq!(want.len(), 60);
    assert_eq!(f, want);
    assert_eq!(poll(&mut g, t(0)), None, "one XOFF, not two");
}

/// CASES R32: priorities 3 and 4 congested together share one frame, vector
/// 0x0018 with both timers set.
#[test]
fn r32_prio3_and_prio4_share_one_frame() {
    let mut g = pfc_gen(0x18);
    g.on_enqueue(t(0), 3, 1500);
    g.on_enqueue(t(10), 4, 1000);
    let f = poll(&mut g, t(20)).unwrap();
    assert_eq!(f, pfc_hex(0x0018, [0, 0, 0, 0xFFFF, 0xFFFF, 0, 0, 0]));
    assert_eq!(poll(&mut g, t(20)), None);
    assert_eq!(g.counters().tx_prio_pause[3], 1);
    assert_eq!(g.counters().tx_prio_pause[4], 1);
    assert_eq!(g.counters().tx_mac_control_phy, 1);
}

/// XOFF when the queue *reaches* the threshold, not before.
#[test]
fn xoff_exactly_at_threshold() {
    let mut g = pfc_gen(1 << 3);
    g.on_enqueue(t(0), 3, 999);
    assert_eq!(g.poll_timeout(), None);
    assert_eq!(poll(&mut g, t(0)), None);
    assert!(!g.is_xoff(3));
    g.on_enqueue(t(5), 3, 1);
    assert_eq!(g.queue_bytes(3), 1000);
    assert!(g.is_xoff(3));
    assert_eq!(g.poll_timeout(), Some(t(5)), "due at the crossing");
    assert_eq!(
        poll(&mut g, t(5)).unwrap(),
        pfc_hex(0x0008, [0, 0, 0, 0xFFFF, 0, 0, 0, 0])
    );
}

/// Refresh at half the pause time while still congested: 0xFFFF quanta at
/// 100 Gbit/s = 335,539.2 ns -> 335,539 -> half 167,769 ns after the XOFF went
/// out; then every 167,769 ns from each refresh.
#[test]
fn refresh_at_half_the_pause_time_100g() {
    assert_eq!(refresh_interval(0xFFFF, G100).as_nanos(), 167_769);
    let mut g = pfc_gen(1 << 3);
    g.on_enqueue(t(0), 3, 4000);
    let xoff = poll(&mut g, t(0)).unwrap();
    assert_eq!(g.poll_timeout(), Some(t(167_769)));
    assert_eq!(
        poll(&mut g, t(167_768)),
        None,
        "not before the refresh point"
    );
    assert_eq!(
        poll(&mut g, t(167_769)).as_deref(),
        Some(&xoff[..]),
        "a refresh is the same XOFF"
    );
    assert_eq!(g.poll_timeout(), Some(t(335_538)));
    // A late poll: the next refresh counts from when the frame really went out.
    assert_eq!(poll(&mut g, t(400_000)).as_deref(), Some(&xoff[..]));
    assert_eq!(g.poll_timeout(), Some(t(400_000 + 167_769)));
    assert_eq!(g.counters().tx_prio_pause[3], 3);
}

/// At 25 Gbit/s: 65535 × 20.48 ns = 1,342,156.8 ns -> 1,342,156 -> refresh after
/// 671,078 ns. A smaller configured quanta refreshes sooner: 0x1000 = 4096 ×
/// 20.48 = 83,886.08 ns -> 83,886 -> 41,943 ns.
#[test]
fn refresh_interval_25g_and_configured_quanta() {
    assert_eq!(refresh_interval(0xFFFF, 25_000).as_nanos(), 671_078);
    assert_eq!(refresh_interval(0x1000, 25_000).as_nanos(), 41_943);
    let mut cfg = GeneratorConfig::pfc(MAC, 25_000, 1 << 3, Thresholds::new(1000, 500));
    cfg.priority[3].quanta = 0x1000;
    let mut g = PfcGenerator::new(cfg).unwrap();
    g.on_enqueue(t(1_000), 3, 1000);
    assert_eq!(
        poll(&mut g, t(1_000)).unwrap(),
        pfc_hex(0x0008, [0, 0, 0, 0x1000, 0, 0, 0, 0])
    );
    assert_eq!(g.poll_timeout(), Some(t(1_000 + 41_943)));
}

/// CASES R34 (d): XON (bit 3, timer 0) as soon as the queue drops *below* XON,
/// without waiting for the pause timer; no refresh afterwards.
#[test]
fn r34_xon_as_soon_as_queue_drops_below_xon() {
    let mut g = pfc_gen(1 << 3);
    g.on_enqueue(t(0), 3, 1200);
    poll(&mut g, t(0)).unwrap();
    g.on_dequeue(t(10_000), 3, 700); // 500 left: not below XON
    assert!(g.is_xoff(3));
    assert_eq!(poll(&mut g, t(10_000)), None);
    g.on_dequeue(t(20_000), 3, 1); // 499 < 500
    assert!(!g.is_xoff(3));
    assert_eq!(g.poll_timeout(), Some(t(20_000)));
    assert_eq!(poll(&mut g, t(20_000)).unwrap(), pfc_hex(0x0008, [0; 8]));
    assert_eq!(g.poll_timeout(), None, "no refresh after XON");
    assert_eq!(poll(&mut g, t(1_000_000)), None);
    // XONs are not counted as pauses; the XOFF lasted 20 µs.
    assert_eq!(g.counters().tx_prio_pause[3], 1);
    assert_eq!(g.counters().tx_prio_pause_duration_ns[3], 20_000);
    assert_eq!(g.counters().get("tx_prio3_pause_duration"), Some(20));
    assert_eq!(g.counters().tx_mac_control_phy, 2);
}

/// Hysteresis: between XON and XOFF nothing is sent in either direction.
#[test]
fn hysteresis_between_xon_and_xoff() {
    let mut g = pfc_gen(1 << 3);
    g.on_enqueue(t(0), 3, 700);
    assert_eq!(poll(&mut g, t(0)), None);
    g.on_enqueue(t(1), 3, 300);
    poll(&mut g, t(1)).unwrap();
    g.on_dequeue(t(2), 3, 300); // 700: still XOFF
    g.on_enqueue(t(3), 3, 100); // 800
    assert_eq!(poll(&mut g, t(3)), None);
    assert!(g.is_xoff(3));
}

/// A queue that crosses XOFF and drains below XON before the caller polls sends
/// nothing (no XON for an XOFF the partner never saw).
#[test]
fn no_frame_when_congestion_ends_before_the_poll() {
    let mut g = pfc_gen(1 << 3);
    g.on_enqueue(t(0), 3, 1000);
    g.on_dequeue(t(1), 3, 1000);
    assert_eq!(g.poll_timeout(), None);
    assert_eq!(poll(&mut g, t(2)), None);
}

/// A priority whose XON is pending and a newly congested one go in one frame;
/// a priority that is not due is left out (its refresh point is kept).
#[test]
fn frames_carry_only_the_priorities_due() {
    let mut g = pfc_gen(0x0B); // priorities 0, 1, 3
    g.on_enqueue(t(0), 0, 1000);
    g.on_enqueue(t(0), 1, 1000);
    poll(&mut g, t(0)).unwrap(); // XOFF 0 and 1
    g.on_enqueue(t(5_000), 3, 1000);
    g.on_dequeue(t(5_000), 1, 1000);
    assert_eq!(
        poll(&mut g, t(5_000)).unwrap(),
        pfc_hex(0x000A, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]),
        "XON for 1 and XOFF for 3 together; 0 is not due"
    );
    assert_eq!(g.poll_timeout(), Some(t(167_769)), "0 refreshes first");
    assert_eq!(
        poll(&mut g, t(167_769)).unwrap(),
        pfc_hex(0x0001, [0xFFFF, 0, 0, 0, 0, 0, 0, 0])
    );
    assert_eq!(g.poll_timeout(), Some(t(5_000 + 167_769)));
}

/// Lossy priorities are accounted but never generate frames.
#[test]
fn lossy_priorities_only_account() {
    let mut g = pfc_gen(1 << 3);
    g.on_enqueue(t(0), 0, 1_000_000);
    g.on_enqueue(t(0), 7, 5_000);
    assert_eq!(g.queue_bytes(0), 1_000_000);
    assert_eq!(g.total_bytes(), 1_005_000);
    assert!(!g.is_xoff(0));
    assert_eq!(g.poll_timeout(), None);
    assert_eq!(poll(&mut g, t(0)), None);
}

/// 802.3x PAUSE mode: one class, the sum over all priorities, PAUSE frames
/// (opcode 0x0001) for XOFF 0xFFFF and XON 0.
#[test]
fn pause_mode_uses_the_port_total() {
    let mut g = PfcGenerator::new(GeneratorConfig::pause(
        MAC,
        G100,
        Thresholds::new(1000, 500),
    ))
    .unwrap();
    g.on_enqueue(t(0), 0, 600);
    assert_eq!(poll(&mut g, t(0)), None);
    g.on_enqueue(t(1), 5, 400);
    assert!(
        g.is_xoff(0) && g.is_xoff(7),
        "the port state, for every priority"
    );
    assert_eq!(poll(&mut g, t(1)).unwrap(), pause_hex(0xFFFF));
    assert_eq!(g.poll_timeout(), Some(t(1 + 167_769)));
    g.on_dequeue(t(100), 0, 600); // 400 < 500
    assert_eq!(poll(&mut g, t(100)).unwrap(), pause_hex(0));
    let c = g.counters();
    assert_eq!(c.tx_pause_ctrl_phy, 2);
    assert_eq!(c.tx_global_pause, 1);
    assert_eq!(c.tx_global_pause_duration_ns, 99);
    assert_eq!(c.tx_prio_pause, [0; 8], "PAUSE is not PFC");
}

/// Flow control off: accounting only.
#[test]
fn off_mode_never_sends() {
    let mut g = PfcGenerator::new(GeneratorConfig::off(MAC, G100)).unwrap();
    assert_eq!(g.config().mode, FlowControlMode::Off);
    g.on_enqueue(t(0), 3, u64::MAX);
    assert_eq!(g.queue_bytes(3), u64::MAX);
    assert_eq!(poll(&mut g, t(0)), None);
    assert_eq!(g.poll_timeout(), None);
}

/// Invalid configurations are rejected with the reason.
#[test]
fn config_is_validated() {
    let th = Thresholds::new(1000, 500);
    let bad = |cfg: GeneratorConfig| PfcGenerator::new(cfg).unwrap_err();
    let mut cfg = GeneratorConfig::pfc(MAC, G100, 1 << 2, th);
    cfg.priority[2].xon = 1000;
    assert_eq!(
        bad(cfg),
        ConfigError::BadThresholds {
            prio: Some(2),
            xoff: 1000,
            xon: 1000
        }
    );
    cfg.priority[2].xon = 0;
    assert!(matches!(bad(cfg), ConfigError::BadThresholds { .. }));
    cfg.priority[2] = th;
    cfg.priority[2].quanta = 0;
    assert_eq!(bad(cfg), ConfigError::ZeroQuanta { prio: Some(2) });
    // Thresholds of lossy priorities are not checked.
    cfg.priority[2] = th;
    cfg.priority[5].xon = 5000;
    assert!(PfcGenerator::new(cfg).is_ok());
    assert_eq!(
        bad(GeneratorConfig::pfc(MAC, 0, 1, th)),
        ConfigError::ZeroLinkSpeed
    );
    assert!(matches!(
        bad(GeneratorConfig::pause(MAC, G100, Thresholds::new(5, 6))),
        ConfigError::BadThresholds { prio: None, .. }
    ));
}

/// Polling again at the same `now` always ends; a short buffer keeps the frame
/// due; dequeues saturate at 0; priorities above 7 are ignored.
#[test]
fn poll_terminates_and_inputs_saturate() {
    let mut g = pfc_gen(0xFF);
    for p in 0..8 {
        g.on_enqueue(t(0), p, 1000);
    }
    let mut frames = 0;
    while poll(&mut g, t(0)).is_some() {
        frames += 1;
        assert!(frames < 10);
    }
    assert_eq!(frames, 1, "all eight in one frame");
    g.on_dequeue(t(1), 3, 1_000_000);
    assert_eq!(g.queue_bytes(3), 0);
    g.on_enqueue(t(1), 8, 1000);
    g.on_enqueue(t(1), 255, 1000);
    assert_eq!(g.queue_bytes(8), 0);
    let mut short = [0u8; 59];
    assert_eq!(g.poll_transmit(t(1), &mut short), None);
    assert_eq!(g.poll_timeout(), Some(t(1)), "XON for 3 still due");
    assert_eq!(
        poll(&mut g, t(1)).unwrap(),
        pfc_hex(0x0008, [0; 8]),
        "then sent whole"
    );
}

/// Counter names are mlx5's and unique.
#[test]
fn tx_counter_names() {
    let g = pfc_gen(1);
    let names: Vec<&str> = g.counters().iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 8 * 2 + 4);
    for want in [
        "tx_prio0_pause",
        "tx_prio7_pause_duration",
        "tx_global_pause",
        "tx_global_pause_duration",
        "tx_pause_ctrl_phy",
        "tx_mac_control_phy",
    ] {
        assert!(names.contains(&want), "{want}");
    }
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
}
