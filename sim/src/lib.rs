//! A deterministic, discrete-event simulation of a RoCEv2 fabric: hosts that
//! run the real stack ([`roce_stack::verbs::Device`], RC QPs doing RDMA
//! WRITEs) behind NICs with a line rate, a propagation delay and PFC
//! honouring, connected to one output-queued switch with a shared buffer,
//! RED/ECN marking and PFC generation.
//!
//! Virtual time only (picoseconds); no wall clock, no threads, a seeded
//! generator for ECN marking: the same configuration gives the same run.
//! [`scenario`] builds the experiments of `roce sim` (incast with DCQCN,
//! PFC head-of-line blocking, lossy fabric, flow churn); [`plot`] draws
//! their time series.
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
