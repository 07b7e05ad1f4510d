//! A drop-in libibverbs over the user-space RoCEv2 stack.
//!
//! `libroce_ibverbs.so` exports rdma-core's ibverbs C ABI with rdma-core's
//! symbol versions (`IBVERBS_1.0` ... `IBVERBS_1.14`, `libibverbs.map`), so
//! unmodified RDMA programs (perftest, rdma-core's pingpong examples) run on
//! the stack, over a kernel UDP socket (no RDMA NIC, no kernel RDMA, no
//! root), a TAP interface or a DPDK port:
//!
//! ```text
//! LD_PRELOAD=target/release/libroce_ibverbs.so ROCE_LOCAL_IP=127.0.0.1 ibv_rc_pingpong -g 0
//! ```
//!
//! - [`config`]: the environment variables (`ROCE_BACKEND`, `ROCE_LOCAL_IP`, ...);
//! - [`engine`]: the device, the backend and the progress thread, safe Rust;
//! - [`ffi`]: the C structures and the exported verbs, the crate's only
//!   `unsafe` code;
//! - `backend` (private): the one module that names where the backends live.
//!
//! What is provided: one device with one port (RoCEv2, Ethernet link layer,
//! GID 0 = the configured address), PDs, MRs over the application's memory,
//! CQs with completion channels, RC/UC/UD QPs with SEND (with immediate /
//! invalidate), RDMA WRITE (with immediate), RDMA READ and the two atomics,
//! SRQs, address handles, async events. Not provided: the extended verbs
//! (`abi_compat` is NULL, so the inline wrappers fall back to the exported
//! functions), the `ibv_wr_*` API, memory windows, multicast, XRC, flow
//! steering, resizing CQs, re-registering MRs.

pub mod ack_hold;
pub mod backend;
pub mod config;
pub mod engine;
pub mod ffi;
