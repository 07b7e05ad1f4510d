//! PFC headroom (`roce_stack::pfc::headroom`) against examples worked by hand
//! from ROCEV2-DIGEST §7.
//!
//! Mellanox's 100 GbE / 100 m example: `MTU_S + MTU_R + 2 × 100 Gb/s × 476 ns +
//! 512 × 60 bits`. By hand: 2 × 100 bit/ns × 476 ns = 95,200 bits = 11,900
//! bytes; 512 × 60 = 30,720 bits = 3,840 bytes. With MTU 1500 on both sides:
//! 1500 + 1500 + 11,900 + 3,840 = 18,740 bytes; with 9216: 34,172 bytes.

use roce_stack::pfc::headroom::{
    delay_upper_bounds, HeadroomParams, CABLE_PS_PER_M, PAUSE_FRAME_BITS,
};

#[test]
fn mellanox_100g_100m_example() {
    let h = HeadroomParams::mellanox_example(100_000, 1500, 1500, 100).compute();
    assert_eq!(h.cable_bits, 95_200);
    assert_eq!(h.response_bits, 30_720);
    assert_eq!(h.mtu_sender_bits, 12_000);
    assert_eq!(h.mtu_receiver_bits, 12_000);
    assert_eq!(h.pause_frame_bits, 0);
    assert_eq!(h.interface_bits, 0);
    assert_eq!(h.total_bits(), 149_920);
    assert_eq!(h.bytes(), 18_740);
    let jumbo = HeadroomParams::mellanox_example(100_000, 9216, 9216, 100).compute();
    assert_eq!(jumbo.bytes(), 34_172);
    // The cable term alone scales with length: 0 m leaves MTUs + 3,840 bytes.
    let short = HeadroomParams::mellanox_example(100_000, 1500, 1500, 0).compute();
    assert_eq!(short.bytes(), 1500 + 1500 + 3_840);
}

/// The full formula at 100 Gbit/s over 100 m, MTU 1500, by hand:
/// MTU frames (1500 + 20) × 8 = 12,160 bits each; PAUSE 84 × 8 = 672 bits;
/// cable 2 × 100 m × 5 ns/m = 1,000 ns × 100 bit/ns = 100,000 bits; interface
/// 122,880 and response 201,728 bit times (the table's 100 GbE bounds).
/// 12,160 + 672 + 100,000 + 122,880 + 201,728 + 12,160 = 449,600 bits
/// = 56,200 bytes.
#[test]
fn full_formula_100g_100m() {
    assert_eq!(PAUSE_FRAME_BITS, 672);
    assert_eq!(CABLE_PS_PER_M, 5_000);
    let h = HeadroomParams::ieee(100_000, 1500, 1500, 100)
        .unwrap()
        .compute();
    assert_eq!(h.mtu_receiver_bits, 12_160);
    assert_eq!(h.pause_frame_bits, 672);
    assert_eq!(h.cable_bits, 100_000);
    assert_eq!(h.interface_bits, 122_880);
    assert_eq!(h.response_bits, 201_728);
    assert_eq!(h.total_bits(), 449_600);
    assert_eq!(h.bytes(), 56_200);
}

/// 10 Gbit/s over 3 m, MTU 1024 sender / 4096 receiver, by hand:
/// (1024 + 20) × 8 = 8,352; (4096 + 20) × 8 = 32,928; PAUSE 672; cable
/// 2 × 3 × 5 ns × 10 bit/ns = 300; interface 8,192; response 30,720.
/// Sum 81,164 bits = 10,145.5 -> 10,146 bytes (rounded up).
#[test]
fn full_formula_10g_3m_rounds_up() {
    let h = HeadroomParams::ieee(10_000, 1024, 4096, 3)
        .unwrap()
        .compute();
    assert_eq!(h.cable_bits, 300);
    assert_eq!(h.total_bits(), 81_164);
    assert_eq!(h.bytes(), 10_146);
}

#[test]
fn unknown_speed_has_no_delay_bounds() {
    assert!(delay_upper_bounds(50_000).is_none());
    assert!(HeadroomParams::ieee(50_000, 1500, 1500, 10).is_none());
    assert_eq!(delay_upper_bounds(25_000).unwrap().response_bits, 40_960);
}

/// Thresholds from a buffer: XOFF = buffer − headroom, XON = XOFF − hysteresis.
#[test]
fn thresholds_from_buffer() {
    let h = HeadroomParams::mellanox_example(100_000, 1500, 1500, 100).compute();
    let th = h.thresholds(100_000, 2_000).unwrap();
    assert_eq!(th.xoff, 81_260);
    assert_eq!(th.xon, 79_260);
    assert_eq!(th.quanta, 0xFFFF);
    assert!(h.thresholds(18_740, 0).is_none(), "no room above headroom");
    assert!(h.thresholds(20_740, 2_000).is_none(), "XON would be 0");
    assert_eq!(h.thresholds(20_741, 2_000).unwrap().xon, 1);
}
