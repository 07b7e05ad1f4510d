//! The objects the verbs create and the device state the transports share,
//! below both: [`crate::transport`] and [`crate::verbs`] build on this module
//! and nothing here imports either of them.
//!
//! - [`types`], [`wr`], [`attr`], [`config`]: access flags, MTUs, QP types
//!   and states, work requests and completions, QP attributes, the device
//!   configuration and its events (all re-exported from [`crate::verbs`]);
//! - [`mr`], [`cq`]: memory regions and completion queues;
//! - [`av`]: GIDs, address vectors and UDP source ports (re-exported as
//!   [`crate::transport::av`]);
//! - the state a device shares with its transport engines (crate-private):
//!   the MR and CQ tables, counters, events, the timer table (one table per
//!   QP indexed by kind, one ordered index per device) and header building
//!   (one cache per QP, one IPv4 identification counter per device).

pub mod attr;
pub mod av;
pub mod config;
pub mod cq;
pub(crate) mod headers;
pub(crate) mod inner;
pub(crate) mod keymap;
pub mod mr;
pub(crate) mod timers;
pub mod types;
pub mod wr;
