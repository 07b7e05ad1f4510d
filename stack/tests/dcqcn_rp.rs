//! The DCQCN reaction point on its own (`roce_stack::cc::ReactionPoint`),
//! driven with a virtual clock. Every expected value is worked out by hand
//! from the equations of ROCEV2-DIGEST §6 and CASES R29/R30 (the arithmetic
//! is in the comments); all of them are dyadic fractions, so `f64` holds them
//! exactly and the comparisons are exact.
//!
//! Notation: R_C current rate, R_T target rate (Mbit/s), α, g the α gain,
//! F = rpg_threshold, T = rpg_time_reset, B = rpg_byte_reset, P =
//! rate_reduce_monitor_period, K = dce_tcp_rtt. Line rate 100 000 Mbit/s.

use core::time::Duration;

use roce_stack::cc::{AlphaGain, CutOrder, DcqcnParams, ReactionPoint};
use roce_stack::time::Instant;

const LINE: u64 = 100_000;

fn us(n: u64) -> Instant {
    Instant::from_micros(n)
}

/// The R29 setting: α starts at 0.5 (512/1024), g = 1/16 (Complement
/// reading: (1024 − 960)/1024 = 64/1024), K = 55 µs; the other values the
/// mlx5 defaults (gd 11 → cut by α/2, min_dec_fac 50 %, P = 4 µs, T = 300 µs).
fn r29_params(order: CutOrder) -> DcqcnParams {
    DcqcnParams {
        initial_alpha_value: 512,
        dce_tcp_g: 960,
        dce_tcp_rtt: Duration::from_micros(55),
        cut_order: order,
        ..DcqcnParams::mlx5()
    }
}

// ---------------------------------------------------------------------------
// R29: order of α update and cut; coalescing; α decay.
// ---------------------------------------------------------------------------

#[test]
fn r29_paper_order_cuts_with_the_old_alpha() {
    let mut rp = ReactionPoint::new(r29_params(CutOrder::CutThenAlpha), LINE);
    rp.on_cnp(Instant::ZERO);
    // R_T ← 100 000; R_C ← 100 000·(1 − 0.5/2) = 75 000;
    // then α ← (15/16)·0.5 + 1/16 = 15/32 + 2/32 = 17/32 = 0.53125.
    assert_eq!(rp.target_rate(), 100_000.0);
    assert_eq!(rp.rate(), 75_000.0);
    assert_eq!(rp.alpha(), 0.53125);
    assert_eq!(rp.cuts(), 1);
}

#[test]
fn r29_simulator_order_cuts_with_the_new_alpha() {
    let mut rp = ReactionPoint::new(r29_params(CutOrder::AlphaThenCut), LINE);
    rp.on_cnp(Instant::ZERO);
    // α ← 0.53125 first; R_C ← 100 000·(1 − 0.53125/2) = 100 000·0.734375
    // = 73 437.5 (R29: 73.4375 Gb/s).
    assert_eq!(rp.alpha(), 0.53125);
    assert_eq!(rp.rate(), 73_437.5);
    assert_eq!(rp.target_rate(), 100_000.0);
}

#[test]
fn r29_alpha_gain_readings() {
    // The Direct reading with G = 64 is the same g = 64/1024 = 1/16, so the
    // same 75 000 and 17/32.
    let p = DcqcnParams {
        dce_tcp_g: 64,
        alpha_gain: AlphaGain::Direct,
        ..r29_params(CutOrder::CutThenAlpha)
    };
    assert_eq!(p.g(), 0.0625);
    let mut rp = ReactionPoint::new(p, LINE);
    rp.on_cnp(Instant::ZERO);
    assert_eq!((rp.rate(), rp.alpha()), (75_000.0, 0.53125));
    // The shipping default G = 1019 under the Complement reading:
    // g = (1024 − 1019)/1024 = 5/1024; under Direct it would be 1019/1024.
    assert_eq!(DcqcnParams::mlx5().g(), 5.0 / 1024.0);
    let direct = DcqcnParams {
        alpha_gain: AlphaGain::Direct,
        ..DcqcnParams::mlx5()
    };
    assert_eq!(direct.g(), 1019.0 / 1024.0);
    // The paper's g = 1/256 = (1024 − 1020)/1024.
    assert_eq!(DcqcnParams::paper().g(), 1.0 / 256.0);
}

#[test]
fn r29_alpha_decays_once_per_period_without_cnp() {
    let mut rp = ReactionPoint::new(r29_params(CutOrder::CutThenAlpha), LINE);
    rp.on_cnp(Instant::ZERO); // α = 17/32
                              // K = 55 µs: nothing before 55 µs.
    assert_eq!(rp.alpha_at(Instant(54_999)), 0.53125);
    // At 55 µs: α ← (15/16)·17/32 = 255/512 = 0.498046875.
    assert_eq!(rp.alpha_at(us(55)), 0.498046875);
    // At 110 µs: α ← (15/16)·255/512 = 3825/8192 = 0.4669189453125.
    assert_eq!(rp.alpha_at(us(110)), 0.466_918_945_312_5);
    rp.handle_timeout(us(110));
    assert_eq!(rp.alpha(), 0.466_918_945_312_5);
    // The rate did not move (T = 300 µs, no bytes sent).
    assert_eq!(rp.rate(), 75_000.0);
    // A CNP at 110 µs (P = 4 µs long over) cuts with α = 3825/8192:
    // R_C ← 75 000·(1 − 3825/16384) = 75 000·12559/16384 = 117 740 625/2048;
    // no clamp (no increase since the last cut), R_T stays 100 000;
    // α ← (15/16)·3825/8192 + 1/16 = 57375/131072 + 8192/131072 = 65567/131072.
    rp.on_cnp(us(110));
    assert_eq!(rp.rate(), 117_740_625.0 / 2048.0);
    assert_eq!(rp.target_rate(), 100_000.0);
    assert_eq!(rp.alpha(), 65_567.0 / 131_072.0);
    // The α timer restarted at the cut: the next decay is at 165 µs.
    assert_eq!(rp.alpha_at(Instant(164_999)), 65_567.0 / 131_072.0);
    assert_eq!(rp.alpha_at(us(165)), 65_567.0 / 131_072.0 * 15.0 / 16.0);
}

#[test]
fn r29_two_cnps_in_one_monitor_period_make_one_cut() {
    // P = 4 µs (mlx5 default).
    let mut rp = ReactionPoint::new(r29_params(CutOrder::CutThenAlpha), LINE);
    rp.on_cnp(Instant::ZERO); // cut 1: R_C = 75 000, α = 17/32
    rp.on_cnp(us(1));
    rp.on_cnp(us(3));
    // Both inside [0, 4 µs): remembered, not yet applied.
    assert_eq!(rp.cuts(), 1);
    assert!(rp.cut_pending());
    assert_eq!(rp.rate(), 75_000.0);
    assert_eq!(rp.poll_timeout(), Some(us(4)));
    rp.handle_timeout(Instant(3_999));
    assert_eq!(rp.cuts(), 1);
    // One cut at 4 µs for both, α still 17/32 (4 µs < K):
    // R_C ← 75 000·(1 − 17/64) = 75 000·47/64 = 55 078.125; R_T unchanged
    // (no increase since the last cut); α ← (15/16)·17/32 + 1/16 = 287/512.
    rp.handle_timeout(us(4));
    assert_eq!(rp.cuts(), 2);
    assert!(!rp.cut_pending());
    assert_eq!(rp.rate(), 55_078.125);
    assert_eq!(rp.target_rate(), 100_000.0);
    assert_eq!(rp.alpha(), 287.0 / 512.0);
    // Next event: the increase timer, T = 300 µs after the cut.
    assert_eq!(rp.poll_timeout(), Some(us(304)));

    // Without a monitor period every CNP cuts: a third cut at 3 µs with
    // α = 287/512: R_C ← 55 078.125·(1 − 287/1024) = 324 740 625/8192.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            rate_reduce_monitor_period: Duration::ZERO,
            ..r29_params(CutOrder::CutThenAlpha)
        },
        LINE,
    );
    for t in [0, 1, 3] {
        rp.on_cnp(us(t));
    }
    assert_eq!(rp.cuts(), 3);
    assert_eq!(rp.rate(), 324_740_625.0 / 8192.0);
}

// ---------------------------------------------------------------------------
// R30: the first CNP, and parameters whose value is 0.
// ---------------------------------------------------------------------------

#[test]
fn r30_idle_until_the_first_cnp() {
    let rp = ReactionPoint::new(DcqcnParams::mlx5(), LINE);
    assert!(!rp.is_active());
    assert_eq!(rp.rate(), 100_000.0);
    assert_eq!(rp.limit(), None);
    assert_eq!(rp.poll_timeout(), None);
}

#[test]
fn r30_first_cnp_with_shipping_defaults() {
    let mut rp = ReactionPoint::new(DcqcnParams::mlx5(), LINE);
    let t0 = us(10);
    rp.on_cnp(t0);
    // (a) A CC context with α = initial_alpha_value/1024 = 1023/1024, its
    // timer running (T = 300 µs).
    assert!(rp.is_active());
    assert_eq!(rp.poll_timeout(), Some(us(310)));
    // (b) rate_to_set_on_first_cnp = 0 → R_C = R_T = line rate, then the cut
    // with the old α (paper order), rpg_gd 11 → α/2:
    // R_C = 100 000·(1 − 1023/2048) = 100 000·1025/2048 = 50 048.828125
    // (above the 50 % rpg_min_dec_fac bound of 50 000).
    assert_eq!(rp.rate(), 50_048.828125);
    assert_eq!(rp.limit(), Some(50_048.828125));
    assert_eq!(rp.target_rate(), 100_000.0);
    // α ← (1019/1024)·(1023/1024) + 5/1024 = (1 042 437 + 5 120)/1 048 576.
    assert_eq!(rp.alpha(), 1_047_557.0 / 1_048_576.0);
}

#[test]
fn r30_first_cnp_alpha_one_halves_the_line_rate() {
    // The paper's α = 1: R_C = 100 000·(1 − 1/2) = 50 000; α stays
    // (255/256)·1 + 1/256 = 1.
    let mut rp = ReactionPoint::new(DcqcnParams::paper(), LINE);
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 50_000.0);
    assert_eq!(rp.target_rate(), 100_000.0);
    assert_eq!(rp.alpha(), 1.0);
}

#[test]
fn r30_rate_to_set_on_first_cnp() {
    // R_C = R_T = 40 000 on the first CNP, then the cut:
    // α = 1 → 20 000; α = 1023/1024 → 40 000·1025/2048 = 20 019.53125.
    for (alpha, want) in [(1024, 20_000.0), (1023, 20_019.531_25)] {
        let mut rp = ReactionPoint::new(
            DcqcnParams {
                rate_to_set_on_first_cnp: 40_000,
                initial_alpha_value: alpha,
                ..DcqcnParams::mlx5()
            },
            LINE,
        );
        rp.on_cnp(Instant::ZERO);
        assert_eq!(rp.target_rate(), 40_000.0);
        assert_eq!(rp.rate(), want);
    }
}

#[test]
fn r30_zero_valued_parameters() {
    let zero = DcqcnParams {
        rpg_max_rate: 0,
        rpg_min_rate: 0,
        rpg_byte_reset: 0,
        rpg_time_reset: Duration::ZERO,
        dce_tcp_rtt: Duration::ZERO,
        rate_reduce_monitor_period: Duration::ZERO,
        rate_to_set_on_first_cnp: 0,
        rpg_min_dec_fac: 0,
        initial_alpha_value: 1024,
        ..DcqcnParams::mlx5()
    };
    let mut rp = ReactionPoint::new(zero, LINE);
    // rpg_max_rate 0 = line rate; rpg_min_rate 0 = the 1 Mbit/s floor.
    assert_eq!(rp.max_rate(), 100_000.0);
    assert_eq!(rp.min_rate(), 1.0);
    // rate_to_set_on_first_cnp 0 = line rate: 100 000·(1 − 1/2) = 50 000.
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 50_000.0);
    // T = 0: no timer; P = 0: nothing pending either.
    assert_eq!(rp.poll_timeout(), None);
    // B = 0: bytes never raise the rate.
    rp.on_bytes_sent(us(1), 10_000_000);
    assert_eq!(rp.byte_stage(), 0);
    assert_eq!(rp.rate(), 50_000.0);
    // K = 0: α never decays (α = 1 after the cut: (1019/1024)·1 + 5/1024).
    assert_eq!(rp.alpha_at(Instant::from_millis(10)), 1.0);
    // P = 0: a second CNP right away cuts again: 25 000.
    rp.on_cnp(us(1));
    assert_eq!(rp.rate(), 25_000.0);
    // rpg_min_dec_fac 0 and rpg_gd 10 (cut by α·1 = everything): the
    // floor of 1 Mbit/s, never 0.
    let mut rp = ReactionPoint::new(DcqcnParams { rpg_gd: 10, ..zero }, LINE);
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 1.0);
    // A max above the line rate is the line rate; a lower one is kept.
    let big = ReactionPoint::new(
        DcqcnParams {
            rpg_max_rate: 400_000,
            ..zero
        },
        LINE,
    );
    assert_eq!(big.max_rate(), 100_000.0);
    let small = ReactionPoint::new(
        DcqcnParams {
            rpg_max_rate: 60_000,
            ..zero
        },
        LINE,
    );
    assert_eq!(small.max_rate(), 60_000.0);
}

#[test]
fn r30_fifty_cnps_clamp_at_min_rate_then_recovery() {
    // Paper parameters (α = 1, g = 1/256, a cut per CNP, R_T ← R_C on every
    // cut, F = 5, T = K = 55 µs, R_AI = 40, B = 10^7) with rpg_min_rate 10.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            rpg_min_rate: 10,
            ..DcqcnParams::paper()
        },
        LINE,
    );
    // (d) α stays 1 ((255/256)·1 + 1/256), so each CNP halves R_C:
    // 100 000/2^13 = 12.2 > 10, 100 000/2^14 = 6.1 < 10 → clamped at 10 from
    // the 14th CNP on. 50 CNPs 1 µs apart (each restarts the 55 µs timer).
    for t in 0..50 {
        rp.on_cnp(us(t));
    }
    assert_eq!(rp.cuts(), 50);
    assert_eq!(rp.rate(), 10.0);
    assert_eq!(rp.target_rate(), 10.0);
    // (e) CNPs stop (last at 49 µs). Timer events every 55 µs: 104, 159,
    // 214, 269 µs are fast recovery with R_T = 10: R_C stays 10.
    rp.handle_timeout(us(269));
    assert_eq!(rp.timer_stage(), 4);
    assert_eq!(rp.rate(), 10.0);
    // 324 µs: timer stage 5 ≥ F, byte stage 0 < F → additive:
    // R_T = 10 + 40 = 50, R_C = (50 + 10)/2 = 30.
    rp.handle_timeout(us(324));
    assert_eq!((rp.target_rate(), rp.rate()), (50.0, 30.0));
    // 379 µs: additive again: R_T = 90, R_C = (90 + 30)/2 = 60.
    rp.handle_timeout(us(379));
    assert_eq!((rp.target_rate(), rp.rate()), (90.0, 60.0));
    // 10^7 bytes at 380 µs: byte stage 1 (timer stage 6) → additive:
    // R_T = 130, R_C = (130 + 60)/2 = 95.
    rp.on_bytes_sent(us(380), 10_000_000);
    assert_eq!(rp.byte_stage(), 1);
    assert_eq!((rp.target_rate(), rp.rate()), (130.0, 95.0));
}

// ---------------------------------------------------------------------------
// Cut bounds.
// ---------------------------------------------------------------------------

#[test]
fn rpg_min_dec_fac_bounds_one_cut() {
    // α = 1: an unbounded cut halves (50 000); min_dec_fac 80 % keeps 80 000.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            initial_alpha_value: 1024,
            rpg_min_dec_fac: 80,
            ..DcqcnParams::mlx5()
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 80_000.0);
    // rpg_gd 10 would cut by α·1 = 100 %: the default 50 % bound gives 50 000.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            initial_alpha_value: 1024,
            rpg_gd: 10,
            ..DcqcnParams::mlx5()
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 50_000.0);
    // 100 % forbids any reduction.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            rpg_min_dec_fac: 100,
            ..DcqcnParams::mlx5()
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 100_000.0);
}

#[test]
fn rpg_min_rate_bounds_the_rate() {
    // α = 1: 50 000 unbounded, but rpg_min_rate = 60 000.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            initial_alpha_value: 1024,
            rpg_min_rate: 60_000,
            ..DcqcnParams::mlx5()
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO);
    assert_eq!(rp.rate(), 60_000.0);
}

// ---------------------------------------------------------------------------
// Increases: fast recovery, additive, hyper.
// ---------------------------------------------------------------------------

/// First CNP at 40 000 with α = 1 (→ R_C 20 000, R_T 40 000), F = 5,
/// R_AI = 40, R_HAI = 200, T = 55 µs, B = 10 000 bytes, P = 4 µs.
fn recovery_params() -> DcqcnParams {
    DcqcnParams {
        rate_to_set_on_first_cnp: 40_000,
        initial_alpha_value: 1024,
        rpg_threshold: 5,
        rpg_ai_rate: 40,
        rpg_hai_rate: 200,
        rpg_time_reset: Duration::from_micros(55),
        rpg_byte_reset: 10_000,
        ..DcqcnParams::mlx5()
    }
}

#[test]
fn fast_recovery_then_additive_by_timer() {
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            rpg_byte_reset: 0,
            ..recovery_params()
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO);
    assert_eq!((rp.target_rate(), rp.rate()), (40_000.0, 20_000.0));
    // Stages 1..4 < F: R_C ← (R_T + R_C)/2 with R_T = 40 000:
    // 30 000, 35 000, 37 500, 38 750.
    for (k, want) in [(1, 30_000.0), (2, 35_000.0), (3, 37_500.0), (4, 38_750.0)] {
        assert_eq!(rp.poll_timeout(), Some(us(55 * k)));
        rp.handle_timeout(us(55 * k));
        assert_eq!(rp.timer_stage(), k as u32);
        assert_eq!(rp.rate(), want, "timer event {k}");
        assert_eq!(rp.target_rate(), 40_000.0);
    }
    // Stage 5 = F (byte counter off, stage 0 < F): additive:
    // R_T = 40 040, R_C = (40 040 + 38 750)/2 = 39 395.
    rp.handle_timeout(us(275));
    assert_eq!((rp.target_rate(), rp.rate()), (40_040.0, 39_395.0));
    // Stage 6: R_T = 40 080, R_C = (40 080 + 39 395)/2 = 39 737.5.
    rp.handle_timeout(us(330));
    assert_eq!((rp.target_rate(), rp.rate()), (40_080.0, 39_737.5));
}

#[test]
fn fast_recovery_then_additive_by_byte_counter() {
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            rpg_time_reset: Duration::ZERO,
            ..recovery_params()
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO);
    // B = 10 000: 10 000 bytes → byte stage 1: R_C = (40 000 + 20 000)/2.
    rp.on_bytes_sent(us(1), 10_000);
    assert_eq!(rp.rate(), 30_000.0);
    // 25 000 bytes: two events (stages 2, 3: 35 000, 37 500), 5 000 left.
    rp.on_bytes_sent(us(2), 25_000);
    assert_eq!(rp.byte_stage(), 3);
    assert_eq!(rp.rate(), 37_500.0);
    // 5 000 more complete the fourth: 38 750.
    rp.on_bytes_sent(us(3), 5_000);
    assert_eq!(rp.rate(), 38_750.0);
    // Fifth (= F, timer stage 0): additive, R_T 40 040, R_C 39 395.
    rp.on_bytes_sent(us(4), 10_000);
    assert_eq!((rp.target_rate(), rp.rate()), (40_040.0, 39_395.0));
    // No timer at all.
    assert_eq!(rp.poll_timeout(), None);
}

#[test]
fn hyper_increase_when_both_counters_reach_f() {
    // F = 1 (mlx5), R_AI = 5, R_HAI = 50.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            rpg_threshold: 1,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            ..recovery_params()
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO); // R_T 40 000, R_C 20 000
                              // 1 µs, bytes: (timer 0, byte 1): one ≥ F → additive:
                              // R_T = 40 005, R_C = (40 005 + 20 000)/2 = 30 002.5.
    rp.on_bytes_sent(us(1), 10_000);
    assert_eq!((rp.target_rate(), rp.rate()), (40_005.0, 30_002.5));
    // 55 µs, timer: (1, 1) both ≥ F → hyper, i = min − F + 1 = 1:
    // R_T = 40 055, R_C = (40 055 + 30 002.5)/2 = 35 028.75.
    rp.handle_timeout(us(55));
    assert_eq!((rp.target_rate(), rp.rate()), (40_055.0, 35_028.75));
    // 60 µs, bytes: (1, 2), i = 1: R_T = 40 105,
    // R_C = (40 105 + 35 028.75)/2 = 37 566.875.
    rp.on_bytes_sent(us(60), 10_000);
    assert_eq!((rp.target_rate(), rp.rate()), (40_105.0, 37_566.875));
    // 110 µs, timer: (2, 2), i = 2: R_T = 40 205,
    // R_C = (40 205 + 37 566.875)/2 = 38 885.9375.
    rp.handle_timeout(us(110));
    assert_eq!((rp.target_rate(), rp.rate()), (40_205.0, 38_885.937_5));
    // 111 µs, 20 000 bytes = two events: (2, 3) i = 2: R_T 40 305,
    // R_C (40 305 + 38 885.9375)/2 = 39 595.46875; (2, 4) i = 2: R_T 40 405,
    // R_C (40 405 + 39 595.46875)/2 = 40 000.234375.
    rp.on_bytes_sent(us(111), 20_000);
    assert_eq!((rp.target_rate(), rp.rate()), (40_405.0, 40_000.234_375));
}

// ---------------------------------------------------------------------------
// Target clamping.
// ---------------------------------------------------------------------------

/// `recovery_params` with P = 0, K = 0 and the given clamp flags. α = 1 and
/// stays 1 (a cut: (1019/1024)·1 + 5/1024 = 1; K = 0: no decay), so every
/// cut halves R_C.
fn clamp_params(always: bool, after_time: bool) -> DcqcnParams {
    DcqcnParams {
        rate_reduce_monitor_period: Duration::ZERO,
        dce_tcp_rtt: Duration::ZERO,
        clamp_tgt_rate: always,
        clamp_tgt_rate_after_time_inc: after_time,
        ..recovery_params()
    }
}

#[test]
fn clamp_tgt_rate_variants() {
    // Timer increase at 55 µs (fast recovery: R_C 30 000), CNP at 60 µs.
    // Without clamp_tgt_rate_after_time_inc, R_T keeps 40 000; with it,
    // R_T ← R_C = 30 000. R_C = 30 000/2 = 15 000 either way.
    for (after_time, want_rt) in [(false, 40_000.0), (true, 30_000.0)] {
        let mut rp = ReactionPoint::new(clamp_params(false, after_time), LINE);
        rp.on_cnp(Instant::ZERO);
        rp.handle_timeout(us(55));
        assert_eq!(rp.rate(), 30_000.0);
        rp.on_cnp(us(60));
        assert_eq!((rp.target_rate(), rp.rate()), (want_rt, 15_000.0));
    }
    // A byte-counter increase since the last cut always clamps: 30 000.
    let mut rp = ReactionPoint::new(clamp_params(false, false), LINE);
    rp.on_cnp(Instant::ZERO);
    rp.on_bytes_sent(us(1), 10_000);
    rp.on_cnp(us(2));
    assert_eq!((rp.target_rate(), rp.rate()), (30_000.0, 15_000.0));
    // Two cuts with no increase between: only clamp_tgt_rate moves R_T
    // (to 20 000); otherwise it keeps 40 000. R_C = 10 000 both ways.
    for (always, want_rt) in [(true, 20_000.0), (false, 40_000.0)] {
        let mut rp = ReactionPoint::new(clamp_params(always, true), LINE);
        rp.on_cnp(Instant::ZERO);
        rp.on_cnp(us(1));
        assert_eq!((rp.target_rate(), rp.rate()), (want_rt, 10_000.0));
    }
}

// ---------------------------------------------------------------------------
// Back to idle.
// ---------------------------------------------------------------------------

#[test]
fn recovers_to_line_rate_and_goes_idle() {
    // α = 1: R_C 50 000, R_T 100 000. F = 1, byte counter off, T = 55 µs:
    // every timer event is additive, R_T stays capped at 100 000 and
    // R_C ← (100 000 + R_C)/2, so after n events 100 000 − R_C = 50 000/2^n:
    // n = 15 leaves 1.53 Mbit/s (still active), n = 16 leaves 0.76 < 1 →
    // idle at 16·55 = 880 µs.
    let p = DcqcnParams {
        initial_alpha_value: 1024,
        rpg_byte_reset: 0,
        rpg_time_reset: Duration::from_micros(55),
        ..DcqcnParams::mlx5()
    };
    let mut rp = ReactionPoint::new(p, LINE);
    rp.on_cnp(Instant::ZERO);
    rp.handle_timeout(us(55));
    assert_eq!(rp.rate(), 75_000.0);
    rp.handle_timeout(us(825));
    assert!(rp.is_active());
    assert_eq!(rp.rate(), 100_000.0 - 50_000.0 / 32_768.0);
    rp.handle_timeout(us(880));
    assert!(!rp.is_active());
    assert_eq!(rp.limit(), None);
    assert_eq!(rp.poll_timeout(), None);
    // The next CNP is a first CNP again.
    rp.on_cnp(us(900));
    assert_eq!(rp.rate(), 50_000.0);

    // With rpg_max_rate below the line rate the RP stays active at the max.
    let mut rp = ReactionPoint::new(
        DcqcnParams {
            rpg_max_rate: 60_000,
            ..p
        },
        LINE,
    );
    rp.on_cnp(Instant::ZERO);
    // First CNP: R_C = R_T = 60 000 (the max) → 30 000.
    assert_eq!(rp.rate(), 30_000.0);
    rp.handle_timeout(Instant::from_millis(100));
    assert!(rp.is_active());
    assert_eq!(rp.target_rate(), 60_000.0);
    assert!(rp.rate() <= 60_000.0 && rp.rate() > 59_999.0);
}
