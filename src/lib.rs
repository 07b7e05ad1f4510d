//! The `roce` tool: the command-line front end of the user-space RoCEv2 stack.
//!
//! Subcommands live in their own modules; `main.rs` only parses arguments.

pub mod backend;
pub mod decode;
pub mod pcap_io;
pub mod perf;
pub mod replay;
mod sys;
