//! PFC / PAUSE honouring (`roce_stack::pfc::pause`), priority classification
//! (`roce_stack::pfc::classify`) and robustness.
//!
//! Frames are written out by hand from the layout in ROCEV2-DIGEST §7 and the
//! scenarios of CASES R33 and R34. Times are worked by hand: one quantum = 512
//! bit times = 5.12 ns at 100 Gbit/s; 0xFFFF quanta = 335,539.2 ns, which the
//! receiver rounds **up** to 335,540 ns (it never resumes early); at 25 Gbit/s
//! 65535 × 20.48 = 1,342,156.8 -> 1,342,157 ns.

use proptest::prelude::*;
use roce_stack::pfc::{
    Disposition, FlowControlMode, GeneratorConfig, PauseConfig, PauseState, PfcGenerator, PrioMap,
    Thresholds, Trust,
};
use roce_stack::time::Instant;
use roce_stack::wire::Error;

const G100: u64 = 100_000;
const SRC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];

fn t(ns: u64) -> Instant {
    Instant::from_nanos(ns)
}

/// A MAC control frame by hand: DA, SA, 0x8808, opcode, then `body` words,
/// zero-padded to 60 bytes.
fn mac_control(dst: [u8; 6], opcode: u16, body: &[u16]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&SRC);
    f.extend_from_slice(&[0x88, 0x08]);
    f.extend_from_slice(&opcode.to_be_bytes());
    for w in body {
        f.extend_from_slice(&w.to_be_bytes());
    }
    f.resize(60, 0);
    f
}

const DA: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];

fn pfc(vector: u16, timers: [u16; 8]) -> Vec<u8> {
    let mut body = vec![vector];
    body.extend_from_slice(&timers);
    mac_control(DA, 0x0101, &body)
}

fn timers_for(prio: usize, q: u16) -> [u16; 8] {
    let mut t = [0u16; 8];
    t[prio] = q;
    t
}

fn xoff(prio: usize) -> Vec<u8> {
    pfc(1 << prio, timers_for(prio, 0xFFFF))
}

fn xon(prio: usize) -> Vec<u8> {
    pfc(1 << prio, [0; 8])
}

fn pause(q: u16) -> Vec<u8> {
    mac_control(DA, 0x0001, &[q])
}

/// Priority 3 lossless on a 100 Gbit/s PFC port.
fn pfc_port() -> PauseState {
    PauseState::new(PauseConfig::pfc(G100, 1 << 3))
}

fn rx_prio_counters_all_zero(s: &PauseState) -> bool {
    s.counters()
        .iter()
        .filter(|(n, _)| n.starts_with("rx_prio"))
        .all(|(_, v)| v == 0)
}

/// CASES R33 (a): opcode 0x0101, vector 0x0000, timer[3] = 0xFFFF: priority 3
/// keeps sending and no per-priority counter moves.
#[test]
fn r33a_unset_class_enable_bit_is_neither_obeyed_nor_counted() {
    let mut s = pfc_port();
    let d = s.handle_frame(t(0), &pfc(0x0000, timers_for(3, 0xFFFF)));
    assert_eq!(d, Disposition::Ignored);
    assert!(!s.is_paused(3, t(0)));
    assert!(!s.is_paused(3, t(1)));
    assert_eq!(s.resume_at(3), None);
    assert_eq!(s.poll_timeout(), None);
    assert!(rx_prio_counters_all_zero(&s));
    assert_eq!(s.counters().rx_pause_ignored, 1);
    assert_eq!(s.counters().rx_mac_control_phy, 1);
}

/// CASES R33 (b): an 802.3x PAUSE frame is not PFC: a PFC-mode port ignores it
/// and counts it only as `rx_pause_ctrl_phy`, never per priority; a PAUSE-mode
/// port stops every priority and ignores PFC frames.
#[test]
fn r33b_pause_frame_is_never_pfc() {
    let mut s = pfc_port();
    assert_eq!(s.handle_frame(t(0), &pause(0xFFFF)), Disposition::Ignored);
    assert_eq!(s.paused_mask(t(1)), 0);
    assert!(rx_prio_counters_all_zero(&s));
    assert_eq!(s.counters().rx_pause_ctrl_phy, 1);
    assert_eq!(s.counters().rx_global_pause, 0);

    let mut p = PauseState::new(PauseConfig::pause(G100));
    assert_eq!(
        p.handle_frame(t(0), &pause(0xFFFF)),
        Disposition::Applied {
            paused: 0xFF,
            resumed: 0
        }
    );
    assert_eq!(p.paused_mask(t(335_539)), 0xFF);
    assert!(p.is_paused(200, t(0)), "PAUSE stops all traffic");
    assert_eq!(p.resume_at(0), Some(t(335_540)));
    assert_eq!(p.paused_mask(t(335_540)), 0);
    assert!(rx_prio_counters_all_zero(&p));
    assert_eq!(p.counters().rx_global_pause, 1);
    assert_eq!(p.counters().rx_pause_ctrl_phy, 1);
    // PFC on a PAUSE port: ignored, even with a valid vector.
    assert_eq!(p.handle_frame(t(10), &xon(3)), Disposition::Ignored);
    assert!(
        p.is_paused(3, t(10)),
        "a PFC XON does not end an 802.3x pause"
    );
    // An 802.3x XON does.
    assert_eq!(
        p.handle_frame(t(20), &pause(0)),
        Disposition::Applied {
            paused: 0,
            resumed: 0xFF
        }
    );
    assert_eq!(p.paused_mask(t(20)), 0);
    assert_eq!(p.counters().rx_global_pause_transition, 1);
    assert_eq!(p.counters().rx_global_pause_duration_ns, 20);
    assert_eq!(p.counters().rx_pause_ctrl_phy, 2);

    // Flow control off: both ignored.
    let mut o = PauseState::new(PauseConfig::off(G100));
    assert_eq!(o.config().mode, FlowControlMode::Off);
    assert_eq!(o.handle_frame(t(0), &pause(0xFFFF)), Disposition::Ignored);
    assert_eq!(o.handle_frame(t(0), &xoff(3)), Disposition::Ignored);
    assert_eq!(o.paused_mask(t(0)), 0);
}

/// CASES R33 (c): vector 0x0008, timer[3] = 0xFFFF: priority 3 pauses,
/// priorities 0-2 and 4-7 keep going.
#[test]
fn r33c_vector_0x0008_pauses_priority_3_only() {
    let mut s = PauseState::new(PauseConfig::pfc(G100, 0xFF));
    assert_eq!(
        s.handle_frame(t(0), &xoff(3)),
        Disposition::Applied {
            paused: 0x08,
            resumed: 0
        }
    );
    for p in 0..8 {
        assert_eq!(s.is_paused(p, t(1)), p == 3, "priority {p}");
    }
    assert_eq!(s.paused_mask(t(1)), 0x08);
    assert_eq!(s.counters().rx_prio_pause, [0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(s.counters().get("rx_prio3_pause"), Some(1));
}

/// CASES R33 (d): a pause for a priority not PFC-enabled here (lossy) is
/// ignored; in a frame naming both, only the enabled one pauses.
#[test]
fn r33d_lossy_priority_ignores_pause() {
    let mut s = pfc_port();
    assert_eq!(s.handle_frame(t(0), &xoff(4)), Disposition::Ignored);
    assert!(!s.is_paused(4, t(1)));
    assert!(rx_prio_counters_all_zero(&s));
    let both = pfc(0x0018, [0, 0, 0, 0xFFFF, 0xFFFF, 0, 0, 0]);
    assert_eq!(
        s.handle_frame(t(0), &both),
        Disposition::Applied {
            paused: 0x08,
            resumed: 0
        }
    );
    assert!(s.is_paused(3, t(1)));
    assert!(!s.is_paused(4, t(1)));
    assert_eq!(s.counters().rx_prio_pause[4], 0);
}

/// CASES R33 (e): EtherType 0x8808 to a destination other than
/// 01:80:C2:00:00:01 is dropped.
#[test]
fn r33e_other_destination_is_dropped() {
    let mut s = pfc_port();
    let mut f = xoff(3);
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x09]);
    assert_eq!(
        s.handle_frame(t(0), &f),
        Disposition::Dropped(Error::MacControlBadDst)
    );
    assert!(!s.is_paused(3, t(1)));
    assert_eq!(s.counters().get("rx_mac_control_bad_dst"), Some(1));
    assert_eq!(s.counters().rx_mac_control_phy, 0);
    assert!(rx_prio_counters_all_zero(&s));
}

/// CASES R34 (a): XOFF for priority 3 at t = 0, XON at t = 50 µs: priority 3
/// resumes at once (at 50 µs, not at 335.54 µs).
#[test]
fn r34a_xon_ends_the_pause_at_once() {
    let mut s = pfc_port();
    s.handle_frame(t(0), &xoff(3));
    assert!(s.is_paused(3, t(49_999)));
    assert_eq!(
        s.handle_frame(t(50_000), &xon(3)),
        Disposition::Applied {
            paused: 0,
            resumed: 0x08
        }
    );
    assert!(!s.is_paused(3, t(50_000)));
    assert_eq!(s.resume_at(3), None);
    assert_eq!(s.poll_timeout(), None);
    let c = s.counters();
    assert_eq!(c.rx_prio_pause[3], 1, "XON is not counted as a pause");
    assert_eq!(c.rx_prio_pause_transition[3], 1);
    assert_eq!(c.rx_prio_pause_duration_ns[3], 50_000);
    assert_eq!(c.get("rx_prio3_pause_duration"), Some(50), "µs");
}

/// CASES R34 (b): XOFF 0xFFFF at t = 0 and again at t = 200 µs: the second
/// replaces the first, so the pause ends at 200,000 + 335,540 = 535,540 ns; not
/// at 335,540 (the first timer) and not at 671,080 (the two added).
#[test]
fn r34b_refresh_replaces_the_running_timer() {
    let mut s = pfc_port();
    s.handle_frame(t(0), &xoff(3));
    assert_eq!(s.resume_at(3), Some(t(335_540)));
    s.handle_frame(t(200_000), &xoff(3));
    assert_eq!(s.resume_at(3), Some(t(535_540)));
    assert_eq!(s.poll_timeout(), Some(t(535_540)));
    assert!(s.is_paused(3, t(335_540)));
    assert!(s.is_paused(3, t(535_539)));
    assert!(!s.is_paused(3, t(535_540)));
    assert!(!s.is_paused(3, t(671_080)));
    // A refresh is not a transition; the expiry is.
    assert_eq!(s.counters().rx_prio_pause_transition[3], 0);
    s.handle_timeout(t(600_000));
    let c = s.counters();
    assert_eq!(c.rx_prio_pause_transition[3], 1);
    assert_eq!(c.rx_prio_pause_duration_ns[3], 535_540);
    assert_eq!(c.rx_prio_pause[3], 2);
    assert_eq!(s.resume_at(3), None);
    assert_eq!(s.poll_timeout(), None);
}

/// A shorter pause also replaces a longer one (replace, not max).
#[test]
fn a_shorter_pause_replaces_a_longer_one() {
    let mut s = pfc_port();
    s.handle_frame(t(0), &xoff(3));
    // 100 quanta at 100 Gbit/s = 512 ns.
    s.handle_frame(t(1_000), &pfc(0x0008, timers_for(3, 100)));
    assert_eq!(s.resume_at(3), Some(t(1_512)));
    // 1 quantum = 5.12 ns, rounded up to 6 ns.
    s.handle_frame(t(2_000), &pfc(0x0008, timers_for(3, 1)));
    assert_eq!(s.resume_at(3), Some(t(2_006)));
}

/// CASES R34 (c): at 25 Gbit/s 0xFFFF quanta is about 1342 µs:
/// 65535 × 20.48 ns = 1,342,156.8 ns -> 1,342,157 ns.
#[test]
fn r34c_pause_length_at_25g() {
    let mut s = PauseState::new(PauseConfig::pfc(25_000, 1 << 3));
    s.handle_frame(t(0), &xoff(3));
    assert_eq!(s.resume_at(3), Some(t(1_342_157)));
    assert!(s.is_paused(3, t(1_342_156)));
    assert!(!s.is_paused(3, t(1_342_157)));
    // The expiry is accounted by handle_timeout (or the next frame).
    s.handle_frame(t(2_000_000), &xoff(3));
    assert_eq!(s.counters().rx_prio_pause_transition[3], 1);
    assert_eq!(s.counters().rx_prio_pause_duration_ns[3], 1_342_157);
}

/// Each priority has its own timer; poll_timeout is the earliest; the
/// reserved high byte of the vector is ignored.
#[test]
fn per_priority_timers_and_reserved_vector_bits() {
    let mut s = PauseState::new(PauseConfig::pfc(G100, 0xFF));
    s.handle_frame(t(0), &pfc(0x0003, [0xFFFF, 100, 0, 0, 0, 0, 0, 0]));
    assert_eq!(s.resume_at(0), Some(t(335_540)));
    assert_eq!(s.resume_at(1), Some(t(512)));
    assert_eq!(s.poll_timeout(), Some(t(512)));
    assert_eq!(s.paused_mask(t(511)), 0x03);
    assert_eq!(s.paused_mask(t(512)), 0x01);
    // High byte set: bit 3 still counts, bits 8-15 are nothing.
    assert_eq!(
        s.handle_frame(t(0), &pfc(0x0108, timers_for(3, 0xFFFF))),
        Disposition::Applied {
            paused: 0x08,
            resumed: 0
        }
    );
    assert_eq!(
        s.handle_frame(t(0), &pfc(0xFF00, [0xFFFF; 8])),
        Disposition::Ignored
    );
}

/// Frames that are not MAC control pass through untouched; malformed MAC
/// control frames are dropped and counted.
#[test]
fn non_mac_control_and_malformed_frames() {
    let mut s = pfc_port();
    let mut arp = vec![0xFF; 6];
    arp.extend_from_slice(&SRC);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.resize(60, 0);
    assert_eq!(s.handle_frame(t(0), &arp), Disposition::NotMacControl);
    assert_eq!(s.handle_frame(t(0), &[]), Disposition::NotMacControl);
    assert_eq!(s.handle_frame(t(0), &[0u8; 13]), Disposition::NotMacControl);
    let f = xoff(3);
    assert_eq!(
        s.handle_frame(t(0), &f[..20]),
        Disposition::Dropped(Error::MacControlTruncated)
    );
    assert_eq!(
        s.handle_frame(t(0), &mac_control(DA, 0x0002, &[])),
        Disposition::Dropped(Error::MacControlUnknownOpcode(0x0002))
    );
    let c = s.counters();
    assert_eq!(c.rx_mac_control_truncated, 1);
    assert_eq!(c.rx_unsupported_op_phy, 1);
    assert_eq!(c.rx_mac_control_phy, 1);
    assert!(!s.is_paused(3, t(0)));
}

/// A tagged PFC frame (not what senders emit, but parseable) is obeyed.
#[test]
fn vlan_tagged_pfc_frame_is_obeyed() {
    let mut s = pfc_port();
    let f = xoff(3);
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0xE0, 0x00]);
    tagged.extend_from_slice(&f[12..]);
    assert!(matches!(
        s.handle_frame(t(0), &tagged),
        Disposition::Applied { paused: 0x08, .. }
    ));
}

/// Counter names are mlx5's and unique.
#[test]
fn rx_counter_names() {
    let s = pfc_port();
    let names: Vec<&str> = s.counters().iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 8 * 3 + 9);
    for want in [
        "rx_prio0_pause",
        "rx_prio3_pause_duration",
        "rx_prio7_pause_transition",
        "rx_global_pause",
        "rx_global_pause_duration",
        "rx_global_pause_transition",
        "rx_pause_ctrl_phy",
        "rx_mac_control_phy",
        "rx_unsupported_op_phy",
    ] {
        assert!(names.contains(&want), "{want}");
    }
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
}

/// Generator (switch ingress) and honouring (NIC egress) together: with the
/// refresh at half the pause time, priority 3 stays paused without a gap for
/// as long as the switch queue stays above XON, and resumes at the XON.
#[test]
fn generator_refresh_keeps_the_partner_paused_without_a_gap() {
    let mac = [0x02, 0, 0, 0, 0, 0x10];
    let mut sw = PfcGenerator::new(GeneratorConfig::pfc(
        mac,
        G100,
        1 << 3,
        Thresholds::new(10_000, 5_000),
    ))
    .unwrap();
    let mut nic = pfc_port();
    let mut buf = [0u8; 60];
    let mut deliver = |sw: &mut PfcGenerator, nic: &mut PauseState, now: Instant| {
        while let Some(n) = sw.poll_transmit(now, &mut buf) {
            nic.handle_frame(now, &buf[..n]);
        }
    };
    sw.on_enqueue(t(0), 3, 10_000);
    deliver(&mut sw, &mut nic, t(0));
    // Step through 1 ms in 10 µs steps, waking at every refresh point too.
    let mut now = 0u64;
    while now < 1_000_000 {
        let next = sw.poll_timeout().map_or(u64::MAX, |d| d.as_nanos());
        now = (now + 10_000).min(next).min(1_000_000);
        deliver(&mut sw, &mut nic, t(now));
        assert!(nic.is_paused(3, t(now)), "paused at {now} ns");
    }
    sw.on_dequeue(t(now), 3, 6_000);
    deliver(&mut sw, &mut nic, t(now));
    assert!(!nic.is_paused(3, t(now)));
    // XOFF at 0, refreshes every 167,769 ns: 167,769, 335,538, 503,307,
    // 671,076, 838,845; the next (1,006,614) would come after the XON at 1 ms.
    assert_eq!(sw.counters().tx_prio_pause[3], 6);
    assert_eq!(nic.counters().rx_prio_pause[3], 6);
    assert_eq!(nic.counters().rx_prio_pause_transition[3], 1);
    assert_eq!(now, 1_000_000);
    assert_eq!(nic.counters().rx_prio_pause_duration_ns[3], 1_000_000);
}

fn ipv4_frame(tag: Option<u16>, tos: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    if let Some(tci) = tag {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&[0x08, 0x00, 0x45, tos]);
    f.resize(f.len() + 18, 0);
    f
}

fn ipv6_frame(tclass: u8) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xDD];
    f.extend_from_slice(&[0x60 | (tclass >> 4), (tclass & 0x0F) << 4]);
    f.resize(14 + 40, 0);
    f
}

/// Trust DSCP with the default map DSCP >> 3: RoCE data on DSCP 26 (ToS 0x68,
/// 0x6A with ECT(0)) is priority 3, CNPs on DSCP 48 (ToS 0xC0) priority 6
/// (ROCEV2-DIGEST §7); the table is configurable; non-IP and short frames get
/// the default priority.
#[test]
fn classify_trust_dscp() {
    let mut m = PrioMap::trust_dscp();
    assert_eq!(m.trust, Trust::Dscp);
    assert_eq!(m.classify(&ipv4_frame(None, 0x68)), 3);
    assert_eq!(m.classify(&ipv4_frame(None, 0x6A)), 3);
    assert_eq!(m.classify(&ipv4_frame(None, 0xC0)), 6);
    assert_eq!(
        m.classify(&ipv4_frame(Some(0xA000), 0xC0)),
        6,
        "PCP 5 ignored"
    );
    assert_eq!(m.classify(&ipv6_frame(0x68)), 3);
    assert_eq!(m.classify(&ipv6_frame(0xFF)), 7);
    assert_eq!(
        roce_stack::pfc::classify::frame_dscp(&ipv6_frame(0x68)),
        Some(26)
    );
    m.set_dscp(26, 5);
    assert_eq!(m.classify(&ipv4_frame(None, 0x68)), 5);
    m.default_prio = 2;
    assert_eq!(m.classify(&xoff(3)), 2, "not IP");
    assert_eq!(m.classify(&ipv4_frame(None, 0x68)[..20]), 2, "short");
    let mut bad_version = ipv4_frame(None, 0x68);
    bad_version[14] = 0x65;
    assert_eq!(m.classify(&bad_version), 2);
}

/// Trust PCP: the tag's PCP, the default priority when untagged.
#[test]
fn classify_trust_pcp() {
    let mut m = PrioMap::trust_pcp();
    assert_eq!(
        m.classify(&ipv4_frame(Some(0x6064), 0xC0)),
        3,
        "PCP 3 VID 100"
    );
    assert_eq!(m.classify(&ipv4_frame(Some(0xE000), 0x00)), 7);
    assert_eq!(m.classify(&ipv4_frame(None, 0xC0)), 0, "untagged");
    m.default_prio = 4;
    assert_eq!(m.classify(&ipv4_frame(None, 0xC0)), 4);
}

fn any_mode() -> impl Strategy<Value = PauseConfig> {
    (
        0u8..3,
        any::<u8>(),
        prop_oneof![Just(0u64), Just(10_000), Just(100_000), any::<u64>()],
    )
        .prop_map(|(m, mask, mbps)| match m {
            0 => PauseConfig::off(mbps),
            1 => PauseConfig::pause(mbps),
            _ => PauseConfig::pfc(mbps, mask),
        })
}

proptest! {
    /// No input panics the honouring side or the classifier: arbitrary bytes,
    /// and MAC control frames with the right header and arbitrary body and
    /// length (truncations included), at arbitrary times.
    #[test]
    fn no_frame_panics(
        cfg in any_mode(),
        frames in prop::collection::vec(
            (any::<u64>(), any::<bool>(), prop::collection::vec(any::<u8>(), 0..80)),
            1..20,
        ),
    ) {
        let mut s = PauseState::new(cfg);
        let m = PrioMap::trust_dscp();
        let p = PrioMap::trust_pcp();
        for (now, mac_control, bytes) in frames {
            let f = if mac_control {
                let mut f = DA.to_vec();
                f.extend_from_slice(&SRC);
                f.extend_from_slice(&[0x88, 0x08]);
                f.extend_from_slice(&bytes);
                f
            } else {
                bytes
            };
            for len in [f.len(), f.len() / 2, 14.min(f.len()), 15.min(f.len())] {
                let _ = s.handle_frame(t(now), &f[..len]);
                prop_assert!(m.classify(&f[..len]) < 8);
                prop_assert!(p.classify(&f[..len]) < 8);
            }
            s.handle_timeout(t(now));
            let _ = (s.poll_timeout(), s.paused_mask(t(now)), s.resume_at(3));
        }
    }

    /// No sequence of queue events panics the generator, and polling at one
    /// instant always ends.
    #[test]
    fn no_generator_sequence_panics(
        mode in 0u8..3,
        quanta in 1u16..,
        ops in prop::collection::vec((any::<u32>(), any::<u8>(), any::<bool>(), any::<u64>()), 1..50),
    ) {
        let th = Thresholds { xoff: 10_000, xon: 4_000, quanta };
        let mac = [2, 0, 0, 0, 0, 3];
        let cfg = match mode {
            0 => GeneratorConfig::off(mac, G100),
            1 => GeneratorConfig::pause(mac, G100, th),
            _ => GeneratorConfig::pfc(mac, 400_000, 0xA5, th),
        };
        let mut g = PfcGenerator::new(cfg).unwrap();
        let mut now = 0u64;
        let mut buf = [0u8; 60];
        for (dt, prio, enq, bytes) in ops {
            now = now.saturating_add(dt as u64);
            let bytes = bytes % 20_000;
            if enq { g.on_enqueue(t(now), prio, bytes) } else { g.on_dequeue(t(now), prio, bytes) }
            let mut n = 0;
            while g.poll_transmit(t(now), &mut buf).is_some() {
                n += 1;
                prop_assert!(n <= 1, "one frame per instant at most");
            }
            if let Some(d) = g.poll_timeout() {
                prop_assert!(d > t(now), "nothing left due at now");
            }
        }
    }
}
