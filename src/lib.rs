//! The `roce` tool: the command-line front end of the user-space RoCEv2 stack.
//!
//! Subcommands live in their own modules; `main.rs` only parses arguments.
//! The backends they move frames with are the `roce-io` crate (whose
//! `sys` module holds the OS calls), so nothing here is `unsafe`.
#![forbid(unsafe_code)]

pub mod capture;
pub mod decode;
pub mod perf;
pub mod replay;
