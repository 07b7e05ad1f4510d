//! Sans-IO RoCEv2 protocol core.
//!
//! - [`wire`]: zero-copy parsers and in-place builders for every frame (one
//!   opcode table, BTH and extension headers, RoCEv1 GRH, CNP, PFC/PAUSE, ARP).
//! - [`icrc`]: the invariant CRC (IBTA 1.7 §7.8.1, RoCEv2 Annex A17.4).
//! - [`verbs`]: the ibverbs-shaped API; [`verbs::Device`] is the entry point:
//!   frames and the current time in, frames, completions and deadlines out.
//! - [`transport`]: the queue pair and its engines: the RC requester,
//!   completer and responder, UC and UD.
//! - [`resources`]: below the transports and the verbs: the objects the verbs
//!   create (work requests, completions, MRs, CQs, QP attributes, the device
//!   configuration) and the state a device shares with its engines.
//! - [`cc`]: congestion control: ECN, CNPs, the DCQCN reaction point and
//!   the per-QP pacer.
//! - [`backend`]: the burst interface every frame mover implements (the
//!   movers themselves, and the pump, are the `roce-io` crate).
//! - [`pfc`]: 802.1Qbb PFC / 802.3x PAUSE generation (XOFF/XON thresholds),
//!   honouring (per-priority pause timers), headroom and priority mapping.
//! - [`neigh`]: ARP/NDP responder and resolver and ICMP echo responder for an
//!   Ethernet port.
//! - [`testing`]: a deterministic two-device wire with fault injection.
//!
//! The core never does I/O and never reads a clock ([`time::Instant`] is
//! whatever the caller passes in), and nothing here uses `unsafe`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod cc;
pub mod counters;
pub mod icrc;
pub mod neigh;
pub mod pfc;
pub mod resources;
pub mod testing;
pub mod time;
pub mod transport;
pub mod verbs;
pub mod wire;
