//! Collectives on small leaf-spine fabrics against hand-worked times.

use roce_sim::clos::ClosOpts;
use roce_sim::collective::{rank_hosts, run, CollectiveOpts, Kind, Placement};
use roce_sim::scenario::Mode;
use roce_sim::topo::{ClosSpec, LinkSpec};

const L100: LinkSpec = LinkSpec {
    gbps: 100.0,
    delay_ns: 1000,
};

fn clos(spines: usize, leaves: usize, hpl: usize) -> ClosSpec {
    ClosSpec {
        spines,
        leaves,
        hosts_per_leaf: hpl,
        host: L100,
        uplink: L100,
    }
}

fn table(r: &roce_sim::collective::CollectiveReport) -> String {
    let mut t = Vec::new();
    r.write_table(&mut t).unwrap();
    String::from_utf8(t).unwrap()
}

/// One 64 KiB WRITE at PMTU 4096: a FIRST of 4194 wire bytes and 15
/// packets of 4178, at 100 Gbit/s: 5,349.12 ns on the sender's link.
/// Its payload at the link's payload rate (100 x 4096 / 4178 Gbit/s):
/// 65,536 x 8 x 4178 / 409,600 = 5,347.84 ns.
const CHUNK_IDEAL_PS: u64 = 5_347_840;

#[test]
fn ring_allreduce_of_four_hosts_on_two_leaves_takes_the_hand_worked_time() {
    // 4 ranks, 256 KiB each: 6 steps of one 64 KiB chunk per rank. Ring
    // h0 -> h1 (leaf 0), h1 -> h2 (across the spine), h2 -> h3 (leaf 1),
    // h3 -> h0 (across). The two crossing transfers set each step:
    //  - alone, a 64 KiB WRITE across a spine completes at 14,383.20 ns
    //    (tests/clos.rs works it out);
    //  - here h3's ACK for h2 -> h3 (86 wire bytes, at leaf 1 at 8.69 µs)
    //    slips in between h1 -> h2's data frames on leaf 1's port to h2,
    //    which has no gap between them (every hop at the same rate), and
    //    delays the rest by 86 x 8 / 100 = 6.88 ns;
    //  - every host has finished its own 16 frames (5.35 µs) before it
    //    ACKs, so no ACK waits at a NIC:
    //  - a step takes 14,383.20 + 6.88 = 14,390.08 ns; six: 86,340.48 ns.
    let o = CollectiveOpts::new(ClosOpts::new(Mode::None, clos(1, 2, 2)), 4 * 65_536);
    let r = run(Kind::AllReduce, &o, None).unwrap();
    let t = table(&r);
    assert!(r.delivered, "{t}");
    assert_eq!(r.steps.len(), 6, "2(N-1) steps");
    for s in &r.steps {
        assert_eq!(s.time_ps, 14_390_080, "{s:?}\n{t}");
    }
    assert_eq!(r.comm_ps(), 6 * 14_390_080);
    // Ideal: one chunk per step over the host link's payload rate.
    assert_eq!(r.ideal_ps, 6 * CHUNK_IDEAL_PS);
    assert_eq!((r.net.drops, r.net.pfc_frames.0, r.net.cnps.0), (0, 0, 0));
    assert_eq!(r.net.buffer_cycle, None);
}

#[test]
fn all_to_all_is_bound_by_the_oversubscribed_uplink() {
    // 2 leaves x 2 hosts, one 100 Gbit/s spine link per leaf (2:1): each
    // host writes 64 KiB to each of the three others. Host links carry 3
    // chunks each way; each leaf's uplink carries the 4 chunks its two
    // hosts send to the other leaf: the ideal is 4 chunk times.
    let o = CollectiveOpts::new(ClosOpts::new(Mode::Pfc, clos(1, 2, 2)), 4 * 65_536);
    let r = run(Kind::AllToAll, &o, None).unwrap();
    let t = table(&r);
    assert!(r.delivered, "{t}");
    assert_eq!(r.flows, 12);
    assert_eq!(r.ideal_ps, 4 * CHUNK_IDEAL_PS);
    assert!(r.comm_ps() > r.ideal_ps, "{t}");
    assert!(r.slowdown() < 2.0, "{t}");
    assert_eq!(r.net.drops, 0, "PFC: lossless\n{t}");
    assert!(r.net.lossless.iter().all(|l| l.ok()), "{t}");
}

#[test]
fn training_iterations_wait_on_the_network_for_the_all_reduce_share() {
    let mut o = CollectiveOpts::new(ClosOpts::new(Mode::None, clos(1, 2, 2)), 4 * 65_536);
    o.iterations = 3;
    o.compute_us = 50;
    let r = run(Kind::AllReduce, &o, None).unwrap();
    assert!(r.delivered);
    assert_eq!(r.steps.len(), 18);
    // Each iteration: 50 µs of compute, then the all-reduce of the test
    // above (the fabric is idle again when it starts): 86,340.48 ns.
    assert_eq!(r.iterations, vec![(50_000_000, 86_340_480); 3]);
    let f = 86_340_480.0 / (50_000_000.0 + 86_340_480.0);
    assert!((r.network_fraction() - f).abs() < 1e-9);
}

#[test]
fn random_placement_is_a_seeded_permutation_and_runs_are_deterministic() {
    let p = rank_hosts(16, Placement::Random, 1);
    let mut s = p.clone();
    s.sort_unstable();
    assert_eq!(s, (0..16).collect::<Vec<_>>());
    assert_ne!(p, s, "shuffled");
    assert_eq!(p, rank_hosts(16, Placement::Random, 1));
    assert_ne!(p, rank_hosts(16, Placement::Random, 2));
    let mut o = CollectiveOpts::new(ClosOpts::new(Mode::DcqcnPfc, clos(2, 2, 4)), 8 << 20);
    o.placement = Placement::Random;
    let a = run(Kind::AllReduce, &o, None).unwrap();
    let b = run(Kind::AllReduce, &o, None).unwrap();
    assert!(a.delivered, "{}", table(&a));
    assert_eq!(a, b);
}
