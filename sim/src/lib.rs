//! A deterministic, discrete-event simulation of a RoCEv2 fabric: hosts that
//! run the real stack ([`roce_stack::verbs::Device`], RC QPs doing RDMA
//! WRITEs) behind NICs with a line rate, a propagation delay and PFC
//! honouring, connected by output-queued switches with shared buffers,
//! RED/ECN marking, ECMP and PFC generated per ingress port and honoured
//! between switches ([`topo`]: one switch, a leaf-spine Clos, a ring).
//!
//! Virtual time only (picoseconds); no wall clock, no threads, seeded
//! generators: the same configuration gives the same run. [`scenario`]
//! builds the single-switch experiments of `roce sim` (incast with DCQCN,
//! PFC head-of-line blocking, lossy fabric, flow churn); [`collective`] the
//! AI-training collectives on a leaf-spine fabric ([`clos`]: ring
//! all-reduce, all-to-all, training iterations); [`fct`] background flows
//! and their FCT slowdown; `plot` (feature `plot`, plotters) draws them.
//! The crate uses the stack only through its public API.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod clos;
pub mod collective;
pub mod fabric;
pub mod fct;
pub mod metrics;
pub mod net;
pub mod pfc;
#[cfg(feature = "plot")]
pub mod plot;
pub mod scenario;
pub mod topo;
