//! Background flows: an isolated flow completes in its ideal time, and a
//! loaded fabric delivers every flow with slowdowns of the expected shape.

use roce_sim::clos::ClosOpts;
use roce_sim::fct::{run, FctOpts, SizeDist};
use roce_sim::scenario::Mode;
use roce_sim::topo::{ClosSpec, LinkSpec};

fn clos() -> ClosSpec {
    let l = LinkSpec {
        gbps: 100.0,
        delay_ns: 1000,
    };
    ClosSpec {
        spines: 1,
        leaves: 2,
        hosts_per_leaf: 2,
        host: l,
        uplink: l,
    }
}

#[test]
fn a_lone_flow_takes_its_ideal_time() {
    // Ideal = size over the host link's payload rate (100 x 4096 / 4178
    // Gbit/s) + the base round trip of its path (clos::base_rtt_ps). On an
    // empty fabric only the FIRST packet's 16-byte RETH (1.28 ns per hop)
    // and the ACK's last-packet rounding are missing from it: the slowdown
    // is 1 to within 0.1 %.
    let o = FctOpts::new(
        ClosOpts::new(Mode::DcqcnPfc, clos()),
        SizeDist::WebSearch,
        0.5,
        1,
    );
    let r = run(&o, None).unwrap();
    assert!(r.delivered);
    assert_eq!(r.records.len(), 1);
    let f = r.records[0];
    let s = f.fct_ps as f64 / f.ideal_ps as f64;
    assert!((0.999..1.001).contains(&s), "{f:?} {s}");
    assert_eq!(r.net.drops, 0);
}

#[test]
fn loaded_fabric_delivers_every_flow() {
    let o = FctOpts::new(
        ClosOpts::new(Mode::DcqcnPfc, clos()),
        SizeDist::Hadoop,
        0.4,
        300,
    );
    let r = run(&o, None).unwrap();
    let mut t = Vec::new();
    r.write_table(&mut t).unwrap();
    let t = String::from_utf8(t).unwrap();
    assert!(r.delivered, "{t}");
    assert_eq!(r.records.len(), 300);
    assert_eq!(r.net.drops, 0, "{t}");
    let all = r.slowdown("all", 0).unwrap();
    assert!((1.0..3.0).contains(&all), "{t}");
    // Deterministic for the seed.
    assert_eq!(run(&o, None).unwrap().records, r.records);
}
