//! The requester's window of unacknowledged PSNs is rxe's
//! (`RXE_MAX_UNACKED_PSNS` = 128): a 1 MiB WRITE to a peer that does not
//! answer puts 128 packets on the wire, then waits for an ACK or its local
//! ACK timer; the retry re-sends those 128 from the oldest unacknowledged
//! PSN. With the former 1024, every retry re-sent 1024 packets, which
//! the kernel's rxe in an emulated guest could not work through before the
//! next timeout (docs/kernel-peer.md).

mod common;

use std::time::Duration;

use common::*;
use roce_stack::testing::ConnOpts;
use roce_stack::wire::Opcode;

#[test]
fn a_silent_responder_sees_128_packets_then_a_retry_of_the_same_128() {
    let opts = ConnOpts::default();
    let mut s = setup(1500, &opts, 1 << 20);
    mute(&mut s.p, 1);
    // PMTU 1024: 1024 packets.
    post_write(&mut s, 1, 0, 1 << 20, 0);
    assert!(run_until_sent(&mut s.p, 0, 128));
    // Less than the local ACK timeout: nothing more may leave.
    s.p.advance(Duration::from_micros(500));
    let data = |s: &Setup| -> Vec<u32> {
        seen_from(&s.p, 0)
            .iter()
            .filter(|f| f.opcode != Opcode::RC_ACKNOWLEDGE.0)
            .map(|f| f.psn)
            .collect()
    };
    let first = data(&s);
    assert_eq!(first.len(), 128, "the window: 128 PSNs");
    // The local ACK timer expires: the same 128 PSNs again, no further.
    assert!(run_until_sent(&mut s.p, 0, 256));
    s.p.advance(Duration::from_micros(500));
    let all = data(&s);
    assert_eq!(all.len(), 256, "one retry of the window");
    assert_eq!(all[128..], first[..], "the retry starts at the oldest PSN");
}
