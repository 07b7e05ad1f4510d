//! Sans-IO RoCEv2 protocol core.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod icrc;
pub mod wire;
