//! Raw FFI bindings to the system's DPDK (>= 22.11, found with pkg-config).
//!
//! Two parts:
//! - bindgen output for the EAL, ethdev, mbuf and mempool API (an allowlist:
//!   `rte_eal_*`, `rte_eth_*`, `rte_pktmbuf_*`, `rte_mempool_*`, `rte_dev_*`,
//!   and the types they use);
//! - `shim_*`: out-of-line copies of DPDK's `static inline` functions
//!   (`rte_eth_rx_burst`, `rte_pktmbuf_alloc`, `rte_pktmbuf_attach_extbuf`,
//!   `rte_errno`, ...), compiled from `shim.c`, which bindgen cannot bind.
//!
//! Everything here is `unsafe` and documented by DPDK's own API reference;
//! the safe layer is the `dpdk-glue` crate.
#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(dead_code)]
#![allow(missing_docs)]
#![allow(rustdoc::all)]
#![allow(clippy::all)]
#![allow(clippy::pedantic)]
#![allow(unnecessary_transmutes)]
#![allow(unsafe_op_in_unsafe_fn)]
#![allow(improper_ctypes)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

/// `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` (`RTE_BIT64(15)`, rte_ethdev.h): the
/// driver transmits chained (multi-segment) mbufs. bindgen cannot expand
/// `RTE_BIT64`; `shim.c` checks this value at compile time.
pub const RTE_ETH_TX_OFFLOAD_MULTI_SEGS: u64 = 1 << 15;

/// `RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE` (`RTE_BIT64(16)`, rte_ethdev.h);
/// checked in `shim.c` like [`RTE_ETH_TX_OFFLOAD_MULTI_SEGS`].
pub const RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE: u64 = 1 << 16;
