//! The receive side of a whole host: arbitrary frames into `neigh::Neighbors`
//! (ARP, NDP, ICMP echo), the `Device` (RoCE, CNPs, PFC/PAUSE) and back out
//! through `poll_transmit`, with a connected RC QP pair behind it. No input
//! may panic.
//!
//! Input: frames, each as a big-endian u16 length then that many bytes. A
//! frame that parses leniently as RoCE gets its ICRC fixed up (so the bytes
//! reach the transport, not just the ICRC check), and when the first byte of
//! its length prefix is odd its destination QP is set to the connected QP.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_stack::icrc;
use roce_stack::neigh::Neighbors;
use roce_stack::testing::{connect, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::wire::{ParseMode, RocePacket};

/// Recompute the ICRC of a RoCE frame in place; `qpn` rewrites the BTH
/// destination QP first.
fn fix_up(frame: &mut [u8], qpn: Option<u32>) {
    let (bth, region, form, has_icrc) = {
        let Ok(p) = RocePacket::parse_with(frame, ParseMode::Lenient) else {
            return;
        };
        let base = frame.as_ptr() as usize;
        let bth = p.bth_offset();
        let r = p.icrc_region();
        let start = r.as_ptr() as usize - base;
        (
            bth,
            start..start + r.len(),
            p.icrc_form(),
            p.icrc().is_some(),
        )
    };
    if let Some(q) = qpn {
        frame[bth + 5..bth + 8].copy_from_slice(&q.to_be_bytes()[1..]);
    }
    if !has_icrc {
        return;
    }
    if let Ok(crc) = icrc::compute(form, &frame[region.clone()]) {
        frame[region.end..region.end + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

fuzz_target!(|data: &[u8]| {
    let mut p = Pair::new(4200, Faults::default(), 1);
    let c = connect(&mut p, &ConnOpts::default());
    let mut neigh = Neighbors::for_device(p.dev[1].config());
    let mut out = vec![0u8; 8192];
    let mut frame = Vec::with_capacity(4200);
    let mut now = Instant::ZERO;
    let mut rest = data;
    while let [a, b, tail @ ..] = rest {
        let n = (usize::from(*a) << 8 | usize::from(*b)).min(tail.len());
        let (f, tail) = tail.split_at(n);
        rest = tail;
        frame.clear();
        frame.extend_from_slice(f);
        fix_up(&mut frame, (a & 1 == 1).then_some(c.qpn[1]));
        now = Instant(now.0 + 1_000);
        if !neigh.handle_frame(now, &frame) {
            p.dev[1].handle_frame(now, &frame);
        }
        if p.dev[1].poll_timeout().is_some_and(|t| t <= now) {
            p.dev[1].handle_timeout(now);
        }
        for _ in 0..256 {
            if p.dev[1].poll_transmit(now, &mut out).is_none() {
                break;
            }
        }
        for _ in 0..64 {
            if neigh.poll_transmit(now, &mut out).is_none() {
                break;
            }
        }
    }
});
