//! Ports for test processes that bind them themselves (a `roce perf` pair,
//! perftest's side channel, the ibverbs library's UDP backend).
//!
//! A port taken from `bind(…:0)` and released is in the kernel's ephemeral
//! range, where any other process's `connect()` or `bind(0)` may take it
//! before the program under test binds it: CI saw `ib_atomic_lat`'s UDP
//! backend refused with "Address already in use" while the other test
//! binaries ran. The ports here come from below that range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), which the kernel never hands
//! out by itself, so only another test choosing the same number can collide;
//! the number is drawn from the process id, a counter and the clock, and
//! checked by binding it.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The lowest port this module hands out.
const LOW: u16 = 10_000;

/// The first port of the kernel's ephemeral range (32768 if unreadable).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// splitmix64: spreads (pid, counter, clock) over the range.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A port below the ephemeral range that is free now for TCP on 127.0.0.1
/// and for UDP on 127.0.0.1 and 127.0.0.2.
pub fn free_port() -> u16 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let high = ephemeral_start().max(LOW + 1_000);
    let span = u64::from(high - LOW);
    let clock = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..10_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let seed = (u64::from(std::process::id()) << 32) ^ (n << 8) ^ clock;
        let port = LOW + (mix(seed) % span) as u16;
        let free = TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.2", port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("no free port between {LOW} and {high}");
}

/// Whether a program's output says it could not bind its address (another
/// test drew the same port at the same moment): worth one more try with
/// fresh ports, nothing else is.
pub fn lost_port_race(out: &str) -> bool {
    out.contains("Address already in use")
}
