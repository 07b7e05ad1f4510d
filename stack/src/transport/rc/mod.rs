//! Reliable Connected transport (IBTA 1.7 §9.7), after rxe's three engines:
//! the [`requester`] turns send WQEs into request packets, the [`completer`]
//! handles ACKs, NAKs, READ responses and timers, and the [`responder`] executes
//! inbound requests and generates their responses. UC reuses the requester and
//! responder without acknowledgements.

pub mod completer;
pub mod requester;
pub mod responder;
