//! Leaf-spine fabrics, small enough to work out by hand: the time one
//! transfer takes across a spine, the uplink ECMP picks for a given RoCEv2
//! source port, and PFC pause propagating hop by hop.

use roce_sim::clos::{flow_path, ClosOpts};
use roce_sim::fabric::{ConnSpec, Fabric, FlowSpec, PS_PER_NS, PS_PER_US};
use roce_sim::scenario::Mode;
use roce_sim::topo::{ClosSpec, LinkSpec, Peer};

const L100: LinkSpec = LinkSpec {
    gbps: 100.0,
    delay_ns: 1000,
};

fn clos(spines: usize, leaves: usize, hpl: usize, uplink_gbps: f64) -> ClosSpec {
    ClosSpec {
        spines,
        leaves,
        hosts_per_leaf: hpl,
        host: L100,
        uplink: LinkSpec {
            gbps: uplink_gbps,
            delay_ns: 1000,
        },
    }
}

fn conn(fab: &mut Fabric, src: usize, dst: usize) -> usize {
    fab.add_connection(ConnSpec {
        label: format!("h{src}->h{dst}"),
        src,
        dst,
        msg_bytes: 65_536,
        window: 1,
    })
    .unwrap()
}

#[test]
fn one_transfer_across_a_spine_takes_the_hand_worked_time() {
    // h0 (leaf 0) -> h1 (leaf 1) through the one spine, every link
    // 100 Gbit/s with 1 µs of delay, no ECN, no PFC. One 64 KiB WRITE at
    // PMTU 4096 is 16 packets: the FIRST carries a RETH (14 + 20 + 8 + 12
    // + 16 + 4096 + 4 ICRC = 4170 B, 4194 B on the wire with FCS,
    // preamble and IFG), the 15 others 4154 B (4178 B on the wire).
    //  - the sender's NIC puts 4194 + 15 x 4178 = 66,864 B on its link:
    //    66,864 x 8 / 100 Gbit/s = 5,349.12 ns;
    //  - the last packet then crosses the host link (1,000 ns) and three
    //    store-and-forward hops (leaf, spine, leaf), each 4178 x 8 / 100 =
    //    334.24 ns of serialisation + 1,000 ns;
    //  - at each switch the longer FIRST packet is still leaving when the
    //    second has arrived, so from the second on every packet waits
    //    (4194 - 4178) x 8 / 100 = 1.28 ns more per switch: 3.84 ns;
    //  - so the last packet is at h1 at 5,349.12 + 1,000 + 3 x 1,334.24
    //    + 3.84 = 10,355.68 ns;
    //  - its ACK (14 + 20 + 8 + 12 + AETH 4 + ICRC 4 = 62 B, 86 B on the
    //    wire: 6.88 ns per hop) takes 4 x 1,006.88 = 4,027.52 ns back;
    //  - the sender completes the WRITE at 14,383.20 ns.
    let o = ClosOpts::new(Mode::None, clos(1, 2, 1, 100.0));
    let mut fab = o.build().unwrap();
    let f = conn(&mut fab, 0, 1);
    fab.start_transfer(f, 65_536, 7);
    let d = fab.run_until_done(PS_PER_US * 1000).expect("transfer done");
    assert_eq!((d.flow, d.tag, d.failed), (f, 7, false));
    assert_eq!(d.start_ps, 0);
    assert_eq!(d.end_ps, 14_383_200, "{} ps", d.end_ps);
    assert!(fab.verify().is_empty());
    // 16 data frames one way, one ACK back.
    assert_eq!(fab.hosts[0].tx_frames(), 16);
    assert_eq!(fab.hosts[0].tx_wire_bytes(), 4194 + 15 * 4178);
    assert_eq!(fab.hosts[1].tx_frames(), 1);
    assert_eq!(fab.hosts[1].tx_wire_bytes(), 86);
}

#[test]
fn ecmp_picks_the_uplink_the_source_port_hashes_to() {
    // Two leaves with one host each, two spines. Four QP pairs h0 -> h1
    // get QPNs 0x11..0x14 on both hosts (the devices number from 0x11);
    // the stack derives the UDP source port from the QPN pair as Linux
    // does (rdma_calc_flow_label, rdma_flow_label_to_udp_sport):
    // 0x11 x 0x11 = 0x121 -> 0xC121, then 0xC144, 0xC169, 0xC190.
    // The leaf hashes (10.0.0.1, 10.0.0.2, 17, sport, 4791) with CRC-32
    // and takes uplink hash % 2; worked out with python3's zlib.crc32:
    //   0xC121 -> 0x85002d75 -> spine 1     0xC144 -> 0xcb1c24be -> spine 0
    //   0xC169 -> 0xfb89f10d -> spine 1     0xC190 -> 0x419cb952 -> spine 0
    // The ACKs go back from 10.0.0.2 to 10.0.0.1 with the same port:
    //   0xe8a3e4d8 -> 0, 0xa6bfed13 -> 1, 0x962a38a0 -> 0, 0x2c3f70ff -> 1.
    let o = ClosOpts::new(Mode::None, clos(2, 2, 1, 100.0));
    let mut fab = o.build().unwrap();
    let flows: Vec<usize> = (0..4).map(|_| conn(&mut fab, 0, 1)).collect();
    let sports: Vec<u16> = flows.iter().map(|&f| fab.flows[f].udp_sport).collect();
    for (i, &f) in flows.iter().enumerate() {
        assert_eq!(fab.flows[f].qpn, [0x11 + i as u32; 2], "QPN plan");
    }
    assert_eq!(sports, vec![0xC121, 0xC144, 0xC169, 0xC190]);
    let data_spine = [1, 0, 1, 0];
    let ack_spine = [0, 1, 0, 1];
    // Leaf 0's ports: host 0, then the uplinks to spine 0 and spine 1;
    // leaf 1's likewise.
    let up = |leaf: usize, spine: usize| fab.wiring.switch_ports[leaf].start + 1 + spine;
    let (l0, l1) = ([up(0, 0), up(0, 1)], [up(1, 0), up(1, 1)]);
    for (i, &f) in flows.iter().enumerate() {
        let before: Vec<u64> = l0
            .iter()
            .chain(&l1)
            .map(|&p| fab.port_stats(p).tx_frames)
            .collect();
        fab.start_transfer(f, 65_536, i as u64);
        let d = fab.run_until_done(fab.now_ps() + PS_PER_US * 1000).unwrap();
        assert!(!d.failed);
        let after: Vec<u64> = l0
            .iter()
            .chain(&l1)
            .map(|&p| fab.port_stats(p).tx_frames)
            .collect();
        let delta: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let mut want = [0u64; 4];
        want[data_spine[i]] = 16;
        want[2 + ack_spine[i]] = 1;
        assert_eq!(delta, want, "flow {i} (sport {:#x})", sports[i]);
        // The static path agrees: h0's leaf, the chosen uplink, the spine's
        // port down to leaf 1, leaf 1's port to h1.
        let path = flow_path(&fab, f);
        assert_eq!(path.len(), 3);
        assert_eq!(path[0], l0[data_spine[i]]);
        assert_eq!(fab.wiring.ports[path[2]].peer, Peer::Host(1));
    }
    assert!(fab.verify().is_empty());
}

#[test]
fn pause_propagates_hop_by_hop_from_the_congested_leaf_to_the_senders() {
    // Leaf 0: h0, h1; leaf 1: h2, h3; one spine; hosts at 100 Gbit/s,
    // uplinks at 200 Gbit/s, 1 µs per link; PFC on priority 3, XOFF at
    // 100 KB per ingress port, no ECN. h0 and h1 both write to h2: 200
    // Gbit/s arrive at leaf 1 for a 100 Gbit/s port.
    //  1. Leaf 1's queue to h2 grows at 200 - 100 = 100 Gbit/s (12.5 B/ns)
    //     from when the first frames arrive (~3.8 µs: 1.34 µs to leaf 0,
    //     then 1.17 µs per 200 Gbit/s hop); every byte of it came in on
    //     leaf 1's spine port, which reaches XOFF after 100,000 / 12.5 =
    //     8 µs: leaf 1 pauses the spine at ~11.8 µs.
    //  2. The XOFF reaches the spine ~1.2 µs later (the frame in progress,
    //     then 1 µs) and the spine stops. Leaf 1 resumes it only when its
    //     count is back below XON (8.4 KB under XOFF) after absorbing
    //     what was in flight (~1.2 µs x 25 B/ns = 30 KB): a first pause of
    //     ~4 µs, during which the spine's queue to leaf 1 grows at the full
    //     200 Gbit/s (25 B/ns): its leaf-0 ingress count crosses 100 KB
    //     ~1.2 + 4 = 5.2 µs after step 1.
    //  3. Leaf 0's uplink stops ~1.2 µs later and its two host ports gain
    //     12.5 B/ns each through the spine's first pause (~4 µs, as in
    //     step 2): 50 KB each. From then on every paused hop forwards at
    //     the bottleneck's 100 Gbit/s on average (XOFF/XON cycles), so
    //     leaf 0's queue grows at 200 - 100 = 100 Gbit/s, 6.25 B/ns per
    //     host port, and the other 50 KB take 8 µs: leaf 0 pauses its
    //     first host ~1.2 + 4 + 8 = 13 µs after step 2, the other one
    //     later (the first one's bytes stop arriving, so the shared queue
    //     drains them while the other port's count still grows).
    // Meanwhile h3 writes to h0 (leaf 1 -> spine -> leaf 0), which no
    // congested queue carries: its ingress port is never paused and it
    // keeps its line rate (per-ingress accounting).
    let mut o = ClosOpts::new(Mode::Pfc, clos(1, 2, 2, 200.0));
    o.fabric.bin_ns = 10_000;
    let mut fab = o.build().unwrap();
    for (src, dst) in [(0, 2), (1, 2), (3, 0)] {
        fab.add_flow(FlowSpec {
            label: format!("h{src}->h{dst}"),
            src,
            dst,
            msg_bytes: 65_536,
            window: 16,
            start_ns: 0,
            stop_ns: None,
        })
        .unwrap();
    }
    let end = 300 * PS_PER_US;
    fab.run_until(end);
    let w = &fab.wiring;
    let leaf1_up = w.switch_ports[1].start + 2; // after h2, h3
    let spine_to_leaf0 = w.switch_ports[2].start;
    let first = |p: usize| {
        fab.pfc_log
            .iter()
            .find(|&&(_, q)| q as usize == p)
            .map(|&(t, _)| t as f64 / PS_PER_NS as f64 / 1000.0)
    };
    let t1 = first(leaf1_up).expect("leaf 1 pauses the spine");
    let t2 = first(spine_to_leaf0).expect("the spine pauses leaf 0");
    let t3a = first(w.host_port[0]).expect("leaf 0 pauses h0");
    let t3b = first(w.host_port[1]).expect("leaf 0 pauses h1");
    let msg = format!(
        "first XOFF: leaf1->spine {t1:.3} us, spine->leaf0 {t2:.3}, leaf0->h0 {t3a:.3}, ->h1 {t3b:.3}"
    );
    assert!((10.8..=12.8).contains(&t1), "{msg}");
    assert!((4.2..=6.2).contains(&(t2 - t1)), "{msg}");
    let (t3, t4) = (t3a.min(t3b), t3a.max(t3b));
    assert!((11.0..=15.5).contains(&(t3 - t2)), "{msg}");
    assert!(t4 - t3 < 10.0, "{msg}");
    // The very first XOFF of the run is leaf 1's; h3's port never pauses.
    assert_eq!(fab.pfc_log[0].1 as usize, leaf1_up);
    assert!(first(w.host_port[3]).is_none());
    let st = fab.totals();
    assert_eq!(st.drops, 0);
    // Hosts 0 and 1 share h2's 100 Gbit/s; h3 -> h0 runs at line goodput.
    let from = 100 * PS_PER_US;
    let gbps =
        |f: usize| fab.flows[f].rx_bins.sum(from, end) * 8.0 / ((end - from) as f64 / 1000.0);
    let (g0, g1, g3) = (gbps(0), gbps(1), gbps(2));
    assert!(g0 + g1 > 96.0 && (g0 - g1).abs() < 10.0, "{g0} {g1}");
    assert!(g3 > 96.0, "{g3}");
    assert!(fab.drain(10_000 * PS_PER_US));
    assert!(fab.verify().is_empty());
}

#[test]
fn a_wrong_byte_is_caught_where_it_is_placed() {
    // Corrupt one byte of the sender's region as the simulator writes it
    // (just before the stack reads it): the stack sends it faithfully, and
    // the check of the receiver's memory as the packet lands flags the
    // WRITE.
    let o = ClosOpts::new(Mode::None, clos(1, 2, 1, 100.0));
    let mut fab = o.build().unwrap();
    let f = conn(&mut fab, 0, 1);
    fab.corrupt_source_byte(f, 0, 40_000);
    fab.start_transfer(f, 65_536, 0);
    let d = fab.run_until_done(PS_PER_US * 1000).unwrap();
    assert!(!d.failed, "the transport delivered it");
    assert_eq!(fab.flows[f].bad_msgs, 1);
    assert_eq!(fab.verify(), vec![f]);
    // The next WRITE into the same slot is clean again.
    fab.start_transfer(f, 65_536, 1);
    fab.run_until_done(fab.now_ps() + PS_PER_US * 1000).unwrap();
    assert_eq!(fab.flows[f].bad_msgs, 1);
}

#[test]
fn clockwise_ring_deadlocks_under_pfc_and_the_cycle_is_found() {
    // Four switches in a ring, one host each, every link 100 Gbit/s;
    // every switch forwards clockwise. Each host writes to the host two
    // switches on: every ring link carries two flows (200 Gbit/s offered
    // into 100), so every switch pauses its upstream neighbour, and the
    // frames each one holds wait for the next link, which waits for the
    // next: a cyclic buffer dependency (Hu et al., HotNets 2016). The
    // static check finds it in the routes, and once traffic stops moving
    // the engine finds the cycle of paused ports.
    use roce_sim::fabric::FabricConfig;
    use roce_sim::pfc::PfcConfig;
    use roce_sim::topo::{Routing, Topology};
    let cfg = FabricConfig {
        pfc: Some(PfcConfig::lossless_prio3(50_000)),
        ..FabricConfig::default()
    };
    let topo = Topology::ring(4, 1, L100, Routing::Clockwise);
    let mut fab = Fabric::with_topology(cfg.clone(), &topo, usize::MAX).unwrap();
    assert_eq!(
        fab.wiring.buffer_dependency_cycle().map(|c| c.len()),
        Some(4)
    );
    for h in 0..4 {
        fab.add_flow(FlowSpec {
            label: format!("h{h}"),
            src: h,
            dst: (h + 2) % 4,
            msg_bytes: 65_536,
            window: 16,
            start_ns: 0,
            stop_ns: None,
        })
        .unwrap();
    }
    fab.run_until(2_000 * PS_PER_US);
    let cycle = fab.pause_deadlock().expect("PFC deadlock");
    assert_eq!(cycle.len(), 4);
    let mut sw: Vec<usize> = cycle.iter().map(|&p| fab.wiring.ports[p].switch).collect();
    sw.sort_unstable();
    assert_eq!(sw, vec![0, 1, 2, 3]);
    // Nothing arrives any more.
    let moved: f64 = (0..4)
        .map(|f| {
            fab.flows[f]
                .rx_bins
                .sum(1_500 * PS_PER_US, 2_000 * PS_PER_US)
        })
        .sum();
    assert_eq!(moved, 0.0);
    assert_eq!(fab.totals().drops, 0, "lossless, and stuck");
    // The same traffic by shortest paths on a ring of three (every
    // destination one switch-to-switch hop away) has no dependency cycle
    // and completes.
    let topo = Topology::ring(3, 1, L100, Routing::ShortestPath);
    let mut fab = Fabric::with_topology(cfg, &topo, usize::MAX).unwrap();
    assert_eq!(fab.wiring.buffer_dependency_cycle(), None);
    for h in 0..3 {
        fab.add_flow(FlowSpec {
            label: format!("h{h}"),
            src: h,
            dst: (h + 1) % 3,
            msg_bytes: 65_536,
            window: 16,
            start_ns: 0,
            stop_ns: Some(1_000_000),
        })
        .unwrap();
    }
    fab.run_until(1_000 * PS_PER_US);
    assert!(fab.drain(10_000 * PS_PER_US));
    assert!(fab.pause_deadlock().is_none());
    assert!(fab.verify().is_empty());
}
