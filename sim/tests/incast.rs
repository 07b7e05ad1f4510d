//! Scenario (a): N:1 incast at 100 Gbit/s with ECN + DCQCN and PFC off.
//! Thresholds are the acceptance figures (utilisation >= 90 %,
//! Jain >= 0.95 after convergence, no drops, bounded queue); the run is
//! deterministic (virtual time, seeded marking), so these are exact
//! properties of the code, not timing-dependent measurements.

use roce_sim::scenario::{incast, Mode, Opts, DEFAULT_RED};

fn check(n: usize) {
    let o = Opts::new(Mode::Dcqcn);
    assert!(o.fabric.pfc.is_none(), "PFC is off in this scenario");
    let r = incast(n, &o);
    let mut table = Vec::new();
    r.write_table(&mut table).unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(r.utilisation >= 0.90, "n={n}: utilisation\n{table}");
    assert!(r.jain >= 0.95, "n={n}: fairness\n{table}");
    assert_eq!(r.drops, 0, "n={n}: drops\n{table}");
    // Bounded: the p99 of the bottleneck queue stays within 2 x Kmax, far
    // below what the flows' windows could queue (n x 1 MB).
    assert!(
        r.queue_p99 <= 2 * DEFAULT_RED.kmax_bytes,
        "n={n}: queue p99\n{table}"
    );
    assert!(
        r.ecn_marked > 0 && r.cnp_handled > 0,
        "n={n}: DCQCN ran\n{table}"
    );
    assert_eq!(r.cnp_sent, r.cnp_handled, "every CNP reached its sender");
    assert_eq!(r.pfc_xoff, 0);
    assert!(r.delivered_all(), "n={n}: delivery\n{table}");
    assert_eq!(r.flows.len(), n);
}

#[test]
fn incast_2_to_1_dcqcn_converges() {
    check(2);
}

#[test]
fn incast_4_to_1_dcqcn_converges() {
    check(4);
}

#[test]
fn incast_8_to_1_dcqcn_converges() {
    check(8);
}

#[test]
fn incast_16_to_1_dcqcn_converges() {
    check(16);
}

#[test]
fn incast_with_pfc_backstop_is_lossless_and_fair() {
    let o = Opts::new(Mode::DcqcnPfc);
    let r = incast(8, &o);
    assert_eq!(r.drops, 0);
    assert!(r.utilisation >= 0.90, "{r:?}");
    assert!(r.jain >= 0.95);
    assert!(r.delivered_all());
    assert!(r.figure("PFC headroom per port [B]").is_some());
}

#[test]
fn runs_are_deterministic() {
    let mut o = Opts::new(Mode::Dcqcn);
    o.duration_us = 400;
    o.measure_from_us = 200;
    assert_eq!(incast(3, &o), incast(3, &o));
}
