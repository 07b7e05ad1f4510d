//! Scenario (b): PFC on, DCQCN off: lossless, pauses counted, and a victim
//! flow that shares its sender's uplink (same priority) with incast traffic
//! but goes to an idle host is slowed by the pauses.

use roce_sim::scenario::{incast, lossless_buffer, pfc_hol, Mode, Opts};

#[test]
fn pfc_incast_is_lossless_and_pauses() {
    let o = Opts::new(Mode::Pfc);
    // The shared buffer covers XOFF plus the computed headroom on every
    // ingress port, so the switch can never drop.
    let (headroom, need) = lossless_buffer(&o.fabric, 9).unwrap();
    assert!(need <= o.fabric.switch_buffer_bytes);
    let r = incast(8, &o);
    assert_eq!(r.drops, 0);
    assert!(r.pfc_xoff > 0 && r.pfc_xon > 0, "{r:?}");
    assert!(r.paused_us > 0.0);
    assert_eq!(r.ecn_marked, 0);
    assert_eq!(r.cnp_sent, 0);
    assert!(r.utilisation >= 0.95);
    assert!(r.delivered_all());
    // The egress queue is the sum of the 8 ingress counts, each held below
    // XOFF + headroom: far below the 8 MB the windows could fill.
    let xoff = o.fabric.pfc.as_ref().unwrap().xoff_bytes;
    assert!(r.queue_max <= 8 * (xoff + headroom), "{}", r.queue_max);
}

#[test]
fn pfc_head_of_line_blocks_the_victim() {
    let o = Opts::new(Mode::Pfc);
    let r = pfc_hol(4, &o);
    let with = r.figure("victim goodput [Gb/s]").unwrap();
    let without = r.figure("victim goodput, PFC off [Gb/s]").unwrap();
    assert_eq!(r.drops, 0);
    assert!(r.pfc_xoff > 0);
    assert!(r.delivered_all());
    // Host 0's uplink is idle most of the time it is paused: the victim
    // gets at most its incast sibling's share (~1/4 of the bottleneck)
    // instead of most of the uplink.
    assert!(with < 0.5 * without, "with PFC {with}, without {without}");
    assert!(
        with < 35.0 && without > 50.0,
        "with {with}, without {without}"
    );
}
