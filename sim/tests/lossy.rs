//! Scenario (c): neither ECN nor PFC and a small buffer: the switch drops,
//! and RC retransmission (go-back-N on sequence NAKs and ACK timeouts)
//! still completes every WRITE with the right data at the receivers.

use roce_sim::scenario::{lossy, Mode, Opts};

#[test]
fn drops_are_repaired_by_rc_retransmission() {
    let mut o = Opts::new(Mode::None);
    o.duration_us = 2_000;
    o.measure_from_us = 1_000;
    o.fabric.qp_timeout = 8; // 1 ms local ACK timeout
    let r = lossy(8, 1 << 20, &o);
    assert!(r.drops > 0, "the buffer must overflow");
    assert!(r.seq_naks > 0, "receivers NAK the gaps");
    // Every WRITE completed successfully and every receive slot holds the
    // pattern of the last WRITE into it (checked byte for byte).
    assert!(r.drained);
    assert!(r.bad_data.is_empty());
    assert!(r.flows.iter().all(|f| f.errors == 0 && f.completed > 0));
    assert!(r.delivered_all());
}
