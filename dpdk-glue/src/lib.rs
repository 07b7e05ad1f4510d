//! Safe layer over DPDK for the RoCEv2 stack.
//!
//! All of the project's `unsafe` DPDK use lives here and in `dpdk-sys`, each
//! block with a `// SAFETY:` comment. The pieces:
//!
//! - [`Eal`]: `rte_eal_init` once per process, run-time vdevs
//!   ([`Eal::probe_vdev`]), and the checks the EAL only logs (a vdev that did
//!   not probe, no ports);
//! - [`Mempool`] and [`Mbuf`]: pools and owned packet buffers (drop frees,
//!   transmit moves; no double free, no leak);
//! - [`Port`]: configure, start/stop, link, stats, `rx_burst`/`tx_burst`;
//! - [`DpdkPort`]: a [`roce_stack::backend::FrameIo`] backend, receiving in
//!   place from mbuf data and transmitting into mbuf data rooms;
//! - [`extbuf`]: zero-copy transmit of payloads from caller memory
//!   (`rte_pktmbuf_attach_extbuf`);
//! - [`MonotonicClock`]: the stack's [`roce_stack::time::Instant`] from a
//!   monotonic clock.
//!
//! Errors are [`DpdkError`]; nothing here panics on DPDK failures.
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod eal;
mod error;
pub mod extbuf;
mod frame_io;
mod mbuf;
mod mempool;
mod port;

pub use eal::{Eal, IovaMode};
pub use error::DpdkError;
pub use frame_io::{DpdkPort, DpdkPortCounters};
pub use mbuf::{free_bulk, Mbuf, Segments};
pub use mempool::{Mempool, DEFAULT_DATA_ROOM, HEADROOM};
pub use port::{Link, Port, PortConfig, PortStats, FRAME_OVERHEAD, MAX_BURST};

/// Nanoseconds since the clock was made, as the stack's
/// [`roce_stack::time::Instant`] (the stack never reads a clock itself).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    start: std::time::Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl MonotonicClock {
    /// A clock reading zero now.
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            start: std::time::Instant::now(),
        }
    }

    /// The time now.
    pub fn now(&self) -> roce_stack::time::Instant {
        let ns = self.start.elapsed().as_nanos();
        roce_stack::time::Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}
