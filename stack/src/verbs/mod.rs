//! The verbs API (IBTA 1.7 chapter 11; names mirror ibverbs): device, protection
//! domains, memory regions, completion queues, queue pairs, work requests.

pub mod device;
pub mod qp;

// The objects below the transports, under their verbs paths
// (`roce_stack::verbs::types::AccessFlags`, ...).
pub use crate::resources::{cq, mr, types, wr};

pub use cq::Cq;
pub use device::{AsyncEvent, Device, DeviceConfig, FlowControlConfig, MrKeys};
pub use mr::{Mr, MrBuffer};
pub use qp::{Qp, QpAttr, QpCap, QpInfo, QpInitAttr, VerbsError};
pub use types::{AccessFlags, Mtu, QpAttrMask, QpState, QpType, WcStatus};
pub use wr::{
    NetworkHdrType, RecvWr, SendFlags, SendWr, Sge, UdDest, Wc, WcFlags, WcOpcode, WrOpcode,
};
