//! The device honours received PFC and PAUSE frames (IEEE 802.1Qbb clause 36,
//! 802.3 Annex 31B; CASES R33, R34): a paused priority sends nothing until the
//! pause expires (quanta × 512 bit times at the link speed) or an XON arrives,
//! and the expiry is a deadline `poll_timeout` reports.
//!
//! Times worked by hand: at 100 Gbit/s one quantum is 512 bits / 100 bit/ns =
//! 5.12 ns, so 1000 quanta = 5120 ns and 65535 quanta = 335,539.2 ns (335,540
//! ns rounded up: a port never resumes early).

mod common;

use common::{post_write, setup};
use roce_stack::pfc::pause::PauseConfig;
use roce_stack::testing::{test_config, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::verbs::{Device, Mtu};
use roce_stack::wire::pfc::{MacControl, PauseRepr, PfcRepr};

/// A MAC control frame from the switch.
fn mac_control(m: MacControl) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    assert_eq!(m.emit([0x02, 0xAA, 0, 0, 0, 9], &mut f).unwrap(), 60);
    f
}

fn pfc(priority: u8, quanta: u16) -> Vec<u8> {
    mac_control(MacControl::Pfc(PfcRepr::xoff(priority, quanta)))
}

fn counter(dev: &Device, name: &str) -> u64 {
    dev.pause_counters()
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn opts() -> ConnOpts {
    ConnOpts {
        mtu: Mtu::Mtu4096,
        ..ConnOpts::default()
    }
}

#[test]
fn pfc_xoff_on_the_data_priority_stops_writes_until_expiry() {
    let mut s = setup(9000, &opts(), 64 * 1024);
    post_write(&mut s, 1, 0, 3 * 4096, 0);
    let dev = &mut s.p.dev[0];
    let mut buf = vec![0u8; 16384];
    // Data is DSCP 26 -> priority 3 (trust DSCP, DSCP >> 3).
    dev.handle_frame(Instant::ZERO, &pfc(3, 1000));
    assert_eq!(dev.paused_priorities(Instant::ZERO), 1 << 3);
    assert_eq!(counter(dev, "rx_prio3_pause"), 1);
    assert_eq!(dev.poll_transmit(Instant::ZERO, &mut buf), None);
    assert_eq!(dev.poll_timeout(), Some(Instant(5120)));
    assert_eq!(dev.poll_transmit(Instant(5119), &mut buf), None);
    // WRITE FIRST: 4096 payload + 14 + 20 + 8 + 12 + 16 + 4 = 4170 bytes.
    assert_eq!(dev.poll_transmit(Instant(5120), &mut buf), Some(4170));
    assert_eq!(dev.paused_priorities(Instant(5120)), 0);
    dev.handle_timeout(Instant(5120));
    // 5120 ns paused: the counter reports whole microseconds, like mlx5.
    assert_eq!(counter(dev, "rx_prio3_pause_duration"), 5);
}

#[test]
fn r34_xon_resumes_at_once_and_a_refresh_restarts_the_timer() {
    let mut s = setup(9000, &opts(), 64 * 1024);
    post_write(&mut s, 1, 0, 3 * 4096, 0);
    let dev = &mut s.p.dev[0];
    let mut buf = vec![0u8; 16384];
    dev.handle_frame(Instant::ZERO, &pfc(3, 65535));
    assert_eq!(dev.poll_timeout(), Some(Instant(335_540)));
    // A refresh at 100 µs replaces the running timer: 100,000 + 335,540.
    dev.handle_frame(Instant(100_000), &pfc(3, 65535));
    assert_eq!(dev.poll_timeout(), Some(Instant(435_540)));
    assert_eq!(dev.poll_transmit(Instant(335_540), &mut buf), None);
    // XON (enable bit set, quanta 0) at 200 µs: sends at once.
    dev.handle_frame(Instant(200_000), &pfc(3, 0));
    assert_eq!(dev.paused_priorities(Instant(200_000)), 0);
    assert_eq!(dev.poll_transmit(Instant(200_000), &mut buf), Some(4170));
}

#[test]
fn r33_other_priorities_and_8023x_pause_do_not_stop_pfc_data() {
    let mut s = setup(9000, &opts(), 64 * 1024);
    post_write(&mut s, 1, 0, 3 * 4096, 0);
    let dev = &mut s.p.dev[0];
    let mut buf = vec![0u8; 16384];
    // Priority 4 paused: data (priority 3) still flows.
    dev.handle_frame(Instant::ZERO, &pfc(4, 65535));
    assert_eq!(dev.paused_priorities(Instant::ZERO), 1 << 4);
    assert_eq!(dev.poll_transmit(Instant::ZERO, &mut buf), Some(4170));
    // An 802.3x PAUSE on a PFC port is ignored (the modes exclude each other).
    let pause = mac_control(MacControl::Pause(PauseRepr { quanta: 65535 }));
    dev.handle_frame(Instant::ZERO, &pause);
    assert_eq!(dev.paused_priorities(Instant::ZERO) & (1 << 3), 0);
    assert_eq!(dev.poll_transmit(Instant::ZERO, &mut buf), Some(4154));
}

#[test]
fn pause_mode_stops_all_traffic() {
    let mut cfg = [test_config(0, 9000), test_config(1, 9000)];
    for c in &mut cfg {
        c.flow_control.pause = PauseConfig::pause(100_000);
    }
    let [c0, c1] = cfg;
    let p = Pair::with_devices([Device::new(c0), Device::new(c1)], Faults::default(), 7);
    let mut s = common::setup_with(p, &opts(), 64 * 1024);
    post_write(&mut s, 1, 0, 3 * 4096, 0);
    let dev = &mut s.p.dev[0];
    let mut buf = vec![0u8; 16384];
    let pause = mac_control(MacControl::Pause(PauseRepr { quanta: 2 }));
    dev.handle_frame(Instant::ZERO, &pause);
    assert_eq!(dev.paused_priorities(Instant::ZERO), 0xFF);
    assert_eq!(counter(dev, "rx_pause_ctrl_phy"), 1);
    // 2 quanta = 10.24 ns -> 11 ns (rounded up).
    assert_eq!(dev.poll_transmit(Instant(10), &mut buf), None);
    assert_eq!(dev.poll_timeout(), Some(Instant(11)));
    assert_eq!(dev.poll_transmit(Instant(11), &mut buf), Some(4170));
}
