//! Unreliable Connected transport (IBTA 1.7 §9.8.4): the RC requester and
//! responder without acknowledgements. Send WQEs complete when their last packet
//! is handed to the wire; the responder drops a message broken by a PSN gap, a
//! missing receive WQE, a bad R_Key or a bad length, and resynchronises on the
//! next FIRST/ONLY packet.

use crate::resources::inner::DeviceInner;
use crate::time::Instant;
use crate::transport::qp::Qp;
use crate::transport::rc::responder;
use crate::wire::RocePacket;

/// Handle an inbound UC request. Never produces a response.
pub(crate) fn handle_request(qp: &mut Qp, ctx: &mut DeviceInner, pkt: &RocePacket<'_>) -> bool {
    responder::handle_request(qp, ctx, Instant::ZERO, pkt);
    false
}
