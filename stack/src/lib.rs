//! Sans-IO RoCEv2 protocol core.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod counters;
pub mod icrc;
pub mod testing;
pub mod time;
pub mod transport;
pub mod verbs;
pub mod wire;
