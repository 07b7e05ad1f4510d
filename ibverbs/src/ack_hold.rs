//! ACKs held back until the application's answer has gone out.
//!
//! A ping-pong program (`ib_write_lat`, `ib_send_lat`, the pingpongs)
//! answers each message it receives with one of its own, then waits for
//! the completion of its answer, which is the peer's ACK. If the peer's
//! ACK for message *n* leaves before the peer's answer to *n*, this side's
//! `ibv_poll_cq` returns on the ACK and the program goes to wait for the
//! answer where nothing pumps the backend for it (`ib_write_lat` spins on
//! its buffer): the answer waits for the progress thread, which on a
//! machine with fewer cores than busy threads waits for a CPU. Sent after
//! the answer, the ACK reaches the peer's `ibv_poll_cq` behind it: the
//! answer is handled in the same poll, and the application threads of the
//! two processes move every frame themselves.
//!
//! So a plain ACK (opcode ACKNOWLEDGE, syndrome ACK) the device produces is
//! held for at most [`ACK_HOLD`], and goes out right after the next request
//! this process transmits (a post), or when it is that old or has absorbed
//! [`ACK_HOLD_MESSAGES`] newer ones, or when the program has polled an
//! empty CQ [`FLUSH_AFTER_EMPTY_POLLS`] times in a row (it waits, and may
//! wait for the peer's answer to these ACKs: two programs whose send
//! windows are full would otherwise wait out the hold on each other), or
//! before the progress thread sleeps, or at `ibv_destroy_qp`, device close
//! and process exit (a program done with the connection must not leave its
//! peer's last send unacknowledged). A process that has not posted a send
//! for [`RECENT_POST`] (a bandwidth test's receiver) holds nothing. A newer
//! plain ACK of the same connection replaces a held one. Any other response
//! of the device (a NAK, an RNR NAK, a READ response, an ATOMIC
//! ACKNOWLEDGE) sends the held ACKs first, so the responses of a connection
//! keep their order.
//!
//! The requester sees what a responder that coalesces acknowledgements
//! sends: ACKs are cumulative, and a responder need not acknowledge every
//! request at once.
//!
//! ```text
//! //= ROCEV2-DIGEST §5 "ACKs / coalescing" (IBTA 1.7 §9.7.5.1, rxe)
//! //# an ACK/NAK acknowledges every earlier PSN (cumulative)
//! ```
//! Nothing but plain ACKs is ever delayed, and a delay is bounded (the
//! requester's retransmission timer is milliseconds at the least).

use std::collections::VecDeque;
use std::time::Duration;

use roce_stack::time::Instant;
use roce_stack::wire::{AethSyndrome, Opcode, ParseMode, RocePacket};

/// The longest a plain ACK is held ([`Held`]): far longer than a
/// ping-pong program takes to answer (a few microseconds), so that the
/// hold does not run out when the program loses its CPU for a moment; far
/// shorter than any requester's retransmission timer.
pub const ACK_HOLD: Duration = Duration::from_micros(50);
/// ACKs are held only by a process that posted a send this recently: one
/// that answers what it receives.
pub const RECENT_POST: Duration = Duration::from_millis(1);
/// After this many empty `ibv_poll_cq` calls in a row the held ACKs go out.
/// More than the one or two a ping-pong's answer can take to arrive behind
/// its first frame.
pub const FLUSH_AFTER_EMPTY_POLLS: u32 = 8;
/// How many newer ACKs of its connection a held ACK absorbs before it is
/// due: a receiver that polls and never answers (a bandwidth test's) still
/// sends an ACK per this many messages, not one per [`ACK_HOLD`].
pub const ACK_HOLD_MESSAGES: u32 = 16;

/// A connection, for replacing a held ACK: destination address and QPN.
type Key = ([u8; 16], u32);

/// One frame waiting: a plain ACK (`key` set, replaceable) or a response
/// queued behind held ACKs (`key` None, sent as it is).
#[derive(Debug)]
struct Frame {
    key: Option<Key>,
    since: Instant,
    /// Due now: a response, or an ACK a response was queued behind.
    now: bool,
    /// Newer ACKs this one was replaced by.
    replaced: u32,
    bytes: Vec<u8>,
}

/// What a frame the device produced is, for holding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A plain ACK of this connection.
    PlainAck(Key),
    /// Any other response (NAK, READ response, ATOMIC ACKNOWLEDGE).
    Response,
    /// A request, or not a RoCE frame.
    Other,
}

/// Classify `frame` (a whole Ethernet frame as the device built it).
pub fn classify(frame: &[u8]) -> Kind {
    // The common frame (no VLAN tag, IPv4 without options, IBTA Annex
    // A17.4's header order): the BTH opcode at 14 + 20 + 8, looked up in
    // the opcode table; only an ACKNOWLEDGE needs a parse (for its AETH
    // and connection).
    if frame.len() > 42 && frame[12..14] == [0x08, 0x00] && frame[14] == 0x45 {
        let op = Opcode(frame[42]);
        let info = op.info();
        if info.supported && info.is_request {
            return Kind::Other;
        }
        if info.supported && op != Opcode::RC_ACKNOWLEDGE {
            return Kind::Response;
        }
    }
    let Ok(p) = RocePacket::parse_with(frame, ParseMode::Strict) else {
        return Kind::Other;
    };
    let info = p.opcode().info();
    if info.is_request {
        return Kind::Other;
    }
    if p.opcode() == Opcode::RC_ACKNOWLEDGE {
        if let Some(a) = p.ext().aeth() {
            if matches!(a.kind(), AethSyndrome::Ack { .. }) {
                let dst = match p.net().dst() {
                    std::net::IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                    std::net::IpAddr::V6(a) => a.octets(),
                };
                return Kind::PlainAck((dst, p.bth().dest_qp));
            }
        }
    }
    Kind::Response
}

/// The held frames, oldest first.
#[derive(Debug, Default)]
pub struct Held {
    q: VecDeque<Frame>,
    spare: Vec<Vec<u8>>,
}

impl Held {
    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Hold the plain ACK `frame` of connection `key`, replacing a held
    /// ACK of that connection.
    pub fn hold_ack(&mut self, key: Key, now: Instant, frame: &[u8]) {
        if let Some(f) = self.q.iter_mut().find(|f| f.key == Some(key)) {
            // Cumulative: the newer ACK says all the older one did. It
            // keeps the older one's place and age.
            f.bytes.clear();
            f.bytes.extend_from_slice(frame);
            f.replaced += 1;
            f.now |= f.replaced >= ACK_HOLD_MESSAGES;
            return;
        }
        let bytes = self.copy(frame);
        self.q.push_back(Frame {
            key: Some(key),
            since: now,
            now: false,
            replaced: 0,
            bytes,
        });
    }

    /// Queue `frame`, a response other than a plain ACK, behind the held
    /// ACKs, due at once.
    pub fn queue_behind(&mut self, frame: &[u8]) {
        // The ACKs ahead of it are due with it.
        for f in &mut self.q {
            f.now = true;
        }
        let bytes = self.copy(frame);
        self.q.push_back(Frame {
            key: None,
            since: Instant::ZERO,
            now: true,
            replaced: 0,
            bytes,
        });
    }

    /// `frame` in a buffer of the spare list (or a new one).
    fn copy(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(frame);
        bytes
    }

    /// Whether the oldest frame is due at `now`: a response queued behind
    /// ACKs, or an ACK held [`ACK_HOLD`].
    pub fn due(&self, now: Instant) -> bool {
        self.q
            .front()
            .is_some_and(|f| f.now || now.saturating_since(f.since) >= ACK_HOLD)
    }

    /// Copy the oldest frame into `buf` and forget it; its length, or None
    /// when nothing is held (or `buf` is too short, which a backend's
    /// buffer never is: the device built the frame for it).
    pub fn pop_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        let f = self.q.front()?;
        let n = f.bytes.len();
        buf.get_mut(..n)?.copy_from_slice(&f.bytes);
        if let Some(f) = self.q.pop_front() {
            self.spare.push(f.bytes);
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames from the public rxe capture would be the oracle here, but
    /// what matters is the BTH opcode and AETH syndrome bytes at their IBTA
    /// offsets (Ethernet 14 + IPv4 20 + UDP 8; AETH right after the 12-byte
    /// BTH), which the stack's own parser is checked against elsewhere.
    fn frame(opcode: u8, syndrome: u8, dest_qp: u32) -> Vec<u8> {
        let mut f = vec![0u8; 42 + 12 + 4 + 4];
        f[12] = 0x08;
        f[13] = 0x00;
        f[14] = 0x45;
        let total = (f.len() - 14) as u16;
        f[16..18].copy_from_slice(&total.to_be_bytes());
        f[22] = 64;
        f[23] = 17;
        f[26..30].copy_from_slice(&[10, 0, 0, 1]);
        f[30..34].copy_from_slice(&[10, 0, 0, 2]);
        // IPv4 header checksum (RFC 791).
        let mut sum = 0u32;
        for i in (14..34).step_by(2) {
            sum += u32::from(u16::from_be_bytes([f[i], f[i + 1]]));
        }
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f[34..36].copy_from_slice(&49152u16.to_be_bytes());
        f[36..38].copy_from_slice(&4791u16.to_be_bytes());
        let udp_len = (f.len() - 34) as u16;
        f[38..40].copy_from_slice(&udp_len.to_be_bytes());
        f[42] = opcode;
        f[43] = 0x40; // PadCnt 0, TVer 0; MigReq set
        f[44..46].copy_from_slice(&0xFFFFu16.to_be_bytes());
        f[47..50].copy_from_slice(&dest_qp.to_be_bytes()[1..]);
        f[54] = syndrome;
        f
    }

    #[test]
    fn an_ack_that_absorbed_enough_newer_ones_is_due() {
        let mut h = Held::default();
        let k = ([0; 16], 7);
        let t0 = Instant::from_nanos(1_000);
        // The first ACK, then ACK_HOLD_MESSAGES newer ones.
        for i in 0..=ACK_HOLD_MESSAGES {
            assert!(!h.due(t0), "{i}");
            h.hold_ack(k, t0, &[i as u8]);
        }
        assert!(h.due(t0));
    }

    #[test]
    fn only_plain_acks_are_held() {
        let ack = frame(0x11, 0x1F, 0x12);
        assert_eq!(
            classify(&ack),
            Kind::PlainAck((
                std::net::Ipv4Addr::new(10, 0, 0, 2)
                    .to_ipv6_mapped()
                    .octets(),
                0x12
            ))
        );
        // NAK (PSN sequence error, 0x60) and RNR NAK (0x20): responses.
        assert_eq!(classify(&frame(0x11, 0x60, 0x12)), Kind::Response);
        assert_eq!(classify(&frame(0x11, 0x20, 0x12)), Kind::Response);
        // RDMA READ RESPONSE ONLY (0x10), ATOMIC ACKNOWLEDGE (0x12).
        assert_eq!(classify(&frame(0x10, 0x1F, 0x12)), Kind::Response);
        assert_eq!(classify(&frame(0x12, 0x1F, 0x12)), Kind::Response);
        // SEND ONLY (0x04), RDMA WRITE ONLY (0x0A): requests.
        assert_eq!(classify(&frame(0x04, 0, 0x12)), Kind::Other);
        assert_eq!(classify(&frame(0x0A, 0, 0x12)), Kind::Other);
        assert_eq!(classify(&[0u8; 10]), Kind::Other);
    }

    #[test]
    fn a_newer_ack_replaces_the_held_one_and_keeps_its_age() {
        let mut h = Held::default();
        let k = ([0; 16], 7);
        let t0 = Instant::from_nanos(1_000);
        h.hold_ack(k, t0, &[1, 2, 3]);
        h.hold_ack(k, Instant::from_nanos(5_000), &[4, 5, 6, 7]);
        h.hold_ack(([0; 16], 8), Instant::from_nanos(6_000), &[9]);
        assert_eq!(h.q.len(), 2);
        assert!(!h.due(Instant::from_nanos(1_000 + 49_999)));
        assert!(h.due(Instant::from_nanos(1_000 + 50_000)));
        let mut b = [0u8; 16];
        assert_eq!(h.pop_into(&mut b), Some(4));
        assert_eq!(&b[..4], &[4, 5, 6, 7]);
        // A response queued behind a held ACK makes it due, and follows it.
        h.queue_behind(&[0xAA]);
        assert!(h.due(Instant::from_nanos(6_000)));
        assert_eq!(h.pop_into(&mut b), Some(1));
        assert_eq!(b[0], 9);
        assert_eq!(h.pop_into(&mut b), Some(1));
        assert_eq!(b[0], 0xAA);
        assert!(h.is_empty() && h.pop_into(&mut b).is_none());
    }
}
