//! Frame movers for the RoCEv2 stack, as a library.
//!
//! Every backend implements [`FrameIo`] (defined by the sans-IO core,
//! `roce_stack::backend`, and re-exported here), so a program that wants
//! the UDP backend gets the UDP backend, not the `roce` CLI.
//!
//! | Backend | Module | Feature | What it moves frames over | Needs |
//! |---|---|---|---|---|
//! | `mem` | [`mem`] | `mem` | in-memory queues between two endpoints in one process | nothing |
//! | `udp` | [`udp`] | `udp` | a kernel UDP socket (port 4791 by default) | nothing (unprivileged) |
//! | `tap` | [`tap`] | `tap` | a Linux TAP interface | `CAP_NET_ADMIN` (root) |
//! | `pcap` | [`pcap`] | `pcap` | a capture file in, a capture file out | nothing |
//! | `dpdk` | `dpdk-glue` | `dpdk` (off by default) | a DPDK poll-mode driver | libdpdk-dev, hugepages, root |
//!
//! The default features are every backend that needs no system library
//! (`mem`, `udp`, `tap`, `pcap`).
//!
//! - [`mod@pump`]: the loop step joining a backend and a
//!   [`Device`](roce_stack::verbs::Device) (receive, timers, transmit).
//! - [`adapt`]: wrappers that work over any backend: seeded faults
//!   ([`adapt::FaultIo`]), a capture tee ([`adapt::TeeIo`]), ARP/NDP/ping
//!   ([`adapt::NeighIo`]).
//! - [`mod@open`]: a backend chosen at run time ([`BackendKind`]), boxed as an
//!   [`AnyIo`] with the addresses the local device must use ([`Opened`]).
//! - [`sys`]: the OS calls the backends need that neither `std` nor a
//!   dependency wraps; every `unsafe` block of this crate is there.
//! - [`pcap::read`]: the capture reader (pcap and pcapng, streamed, bounded).
//!
//! A loop is a device, a backend (with adapters around it) and the pump:
//!
//! ```
//! use roce_io::adapt::{FaultConfig, FaultIo};
//! use roce_io::mem::{pair, MemConfig};
//! use roce_stack::testing::test_device;
//! use roce_stack::time::Instant;
//!
//! // Two devices joined by the in-memory wire, 1 % seeded loss each way.
//! let (a, b) = pair(&MemConfig::default());
//! let mut io = [
//!     FaultIo::new(a, FaultConfig::loss(0.01, 7)),
//!     FaultIo::new(b, FaultConfig::loss(0.01, 8)),
//! ];
//! let mut dev = [test_device(0, 1500), test_device(1, 1500)];
//! for (d, io) in dev.iter_mut().zip(&mut io) {
//!     let st = roce_io::pump(d, io, Instant::ZERO, 32).unwrap();
//!     assert!(st.is_idle(), "nothing posted, nothing moves");
//! }
//! ```
#![warn(missing_docs)]
// `unsafe` is for the OS calls of `sys` only, each with a `// SAFETY:` note.
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub use roce_stack::backend::{FrameIo, TxFrame};

pub mod adapt;
pub mod open;
pub mod pump;
#[allow(unsafe_code)]
pub mod sys;

#[cfg(feature = "mem")]
pub mod mem;
#[cfg(feature = "pcap")]
pub mod pcap;
#[cfg(feature = "tap")]
pub mod tap;
#[cfg(feature = "udp")]
pub mod udp;

pub use pump::{pump, pump_gather, PumpStats};

pub use open::{
    mac_for_ip, open, open_dpdk, open_dpdk_unlinked, AnyIo, BackendError, BackendKind,
    BackendOptions, Opened, DPDK_LINK_TIMEOUT, NO_DPDK,
};
