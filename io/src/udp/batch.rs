//! Datagram mode's batched paths (the parent module's "Batching" docs):
//! a transmit burst leaves in sendmmsg(2) calls, runs of same-sized frames
//! to one peer as one UDP GSO send each; a receive burst takes several
//! datagrams (each possibly a GRO batch) with one recvmmsg(2) and splits
//! them into frames in place.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;

use crate::sys::mmsg::{Mmsg, TxMsg, UDP_MAX_SEGMENTS};

use super::wire::{finish, header_len, inspect, recover_ident, synthesize, WireInfo};
use super::{UdpIo, IPV4_LEN, MAX_PAYLOAD, MIN_ROCE, UDP_LEN};

/// Bytes of frames a transmit burst collects before it sends them (then it
/// collects again, while the burst lasts).
const TX_ARENA: usize = 256 << 10;
/// Datagrams (each possibly a GRO batch) one recvmmsg(2) asks for at most.
const RX_SLOTS: usize = 16;
/// Most UDP payload bytes of one GSO send: what one IPv4 datagram carries
/// (also below IPv6's limit).
const GSO_MAX_BYTES: usize = 65535 - IPV4_LEN - UDP_LEN;

/// One datagram being planned: where it goes (socket address and QP),
/// with what TOS / TTL, its segment size and bytes so far, and whether a
/// short last segment closed it.
#[derive(Debug, Clone, Copy)]
struct Plan {
    to: SocketAddr,
    dqpn: u32,
    tos: u8,
    ttl: u8,
    segment: usize,
    bytes: usize,
    closed: bool,
}

/// A collected frame, inspected: where it is, what goes on the wire, and
/// its destination QP.
#[derive(Debug, Clone, Copy)]
struct Pending {
    off: usize,
    len: usize,
    w: WireInfo,
    to: SocketAddr,
    dqpn: u32,
}

/// The buffers and scratch of the batched paths.
pub(super) struct Batch {
    /// Frames of the current transmit burst, back to back (64-byte
    /// aligned), rewritten in place.
    tx: Vec<u8>,
    /// `(offset, length)` of each frame collected in `tx`.
    frames: Vec<(usize, usize)>,
    /// The UDP payloads to send, ranges of `tx`, in order.
    segs: Vec<(usize, usize)>,
    msgs: Vec<TxMsg>,
    plans: Vec<Plan>,
    pending: Vec<Pending>,
    tx_mm: Mmsg,
    /// `RX_SLOTS` slots of `rx_slot` bytes: room for the headers, then a
    /// datagram or GRO batch of up to 64 KiB.
    rx: Vec<u8>,
    rx_slot: usize,
    rx_room: usize,
    rx_mm: Mmsg,
    /// The next datagram of `rx_mm.meta` to deliver, and the offset of its
    /// next segment (a burst may end inside a GRO batch).
    rx_next: usize,
    rx_off: usize,
}

impl Batch {
    /// The buffers for datagram mode over IPv4 or (`v6`) IPv6; none when
    /// `empty` (raw mode, which has its own).
    pub(super) fn new(v6: bool, empty: bool) -> Batch {
        let room = header_len(v6);
        let slot = room + MAX_PAYLOAD;
        let (tx, rx) = if empty {
            (0, 0)
        } else {
            (TX_ARENA + room + 4 + MAX_PAYLOAD, RX_SLOTS * slot)
        };
        Batch {
            tx: vec![0; tx],
            frames: Vec::new(),
            segs: Vec::new(),
            msgs: Vec::new(),
            plans: Vec::new(),
            pending: Vec::new(),
            tx_mm: Mmsg::default(),
            rx: vec![0; rx],
            rx_slot: slot,
            rx_room: room,
            rx_mm: Mmsg::default(),
            rx_next: 0,
            rx_off: 0,
        }
    }
}

/// Whether a failed send is a lost datagram, as on a congested or broken
/// link (RC recovers), rather than a broken socket.
fn is_loss(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMSGSIZE)
            | Some(libc::ENOBUFS)
            | Some(libc::ECONNREFUSED)
            | Some(libc::EHOSTUNREACH)
            | Some(libc::ENETUNREACH)
    ) || e.kind() == io::ErrorKind::WouldBlock
}

/// Whether a failed GSO send says this socket cannot segment (an IPsec
/// policy on the route: `EIO`; `EINVAL`, `ENOPROTOOPT`, `EOPNOTSUPP` from
/// kernels or paths without UDP GSO): send one datagram per frame from
/// then on.
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::ENOPROTOOPT) | Some(libc::EOPNOTSUPP)
    )
}

impl UdpIo {
    /// Datagram mode's `rx_burst`: deliver what the last recvmmsg(2) left,
    /// then receive more while the burst has room.
    pub(super) fn rx_batch(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> io::Result<usize> {
        let mut n = 0;
        loop {
            while n < max && self.batch.rx_next < self.batch.rx_mm.meta.len() {
                if self.deliver_one(on_frame) {
                    n += 1;
                }
            }
            if n >= max {
                return Ok(n);
            }
            let want = (max - n).min(RX_SLOTS);
            let b = &mut *self.batch;
            b.rx_next = 0;
            b.rx_off = 0;
            let got = b
                .rx_mm
                .recv(self.sock.as_fd(), &mut b.rx, b.rx_slot, b.rx_room, want)?;
            if got == 0 {
                return Ok(n);
            }
        }
    }

    /// Deliver the next segment of datagram `rx_next` (or drop the whole
    /// datagram); returns whether a frame went to `on_frame`.
    fn deliver_one(&mut self, on_frame: &mut dyn FnMut(&[u8])) -> bool {
        let b = &mut *self.batch;
        let m = b.rx_mm.meta[b.rx_next];
        let from = match m.from {
            Some(f) if !m.truncated && m.len <= MAX_PAYLOAD => f,
            _ => {
                self.stats.rx_dropped += 1;
                b.rx_next += 1;
                b.rx_off = 0;
                return false;
            }
        };
        let seg = if m.segment > 0 {
            m.segment
        } else {
            m.len.max(1)
        };
        if b.rx_off == 0 && m.segment > 0 && m.len > m.segment {
            self.stats.rx_gro_batches += 1;
        }
        // Segment `index` of the datagram; its headers go in front of it,
        // over the end of the segments already delivered (or into the
        // slot's room, for the first).
        let index = b.rx_off / seg;
        let start = b.rx_next * b.rx_slot + b.rx_room + b.rx_off;
        let end = b.rx_next * b.rx_slot + b.rx_room + m.len.min(b.rx_off + seg);
        b.rx_off += seg;
        if b.rx_off >= m.len {
            b.rx_next += 1;
            b.rx_off = 0;
        }
        let frame = &mut b.rx[start - b.rx_room..end];
        let hint = (m.tos, m.ttl.unwrap_or(64));
        // The identification a Linux sender's segment `index` of one GSO
        // send carries with IP_PMTUDISC_DO (0 for a lone datagram).
        let ident = index as u16;
        let Some(len) = synthesize(frame, from, self.local.ip(), self.mac, hint, ident) else {
            self.stats.rx_dropped += 1;
            return false;
        };
        if !self.v6 && end - start >= MIN_ROCE {
            match recover_ident(frame, self.ident_recovery) {
                Some(true) if self.ident_recovery => self.stats.rx_icrc_ident_recovered += 1,
                None if self.ident_recovery => self.stats.rx_icrc_ident_unsolved += 1,
                _ => {}
            }
        }
        self.stats.rx_datagrams += 1;
        on_frame(&frame[..len]);
        true
    }

    /// Datagram mode's `tx_burst`: collect frames into the arena, then send
    /// them; again while the burst lasts and `fill` has frames.
    pub(super) fn tx_batch(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<usize> {
        let lend = header_len(self.v6) + 4 + MAX_PAYLOAD;
        let mut n = 0;
        let mut more = true;
        while more && n < max {
            let b = &mut *self.batch;
            b.frames.clear();
            let mut off = 0;
            while n < max && off + lend <= b.tx.len() {
                let Some(len) = fill(&mut b.tx[off..off + lend]) else {
                    more = false;
                    break;
                };
                let len = len.min(lend);
                b.frames.push((off, len));
                off += len.next_multiple_of(64);
                n += 1;
            }
            if b.frames.is_empty() {
                break;
            }
            self.plan()?;
            self.send_planned()?;
        }
        Ok(n)
    }

    /// Rewrite the collected frames for the wire and group them into
    /// datagrams: consecutive frames to one QP of one peer with one TOS and
    /// TTL and one payload size (the last may be shorter) form one GSO
    /// send (one QP per send, so a receiver that steers by QPN, a
    /// [`super::Shard`], gets each send whole where it belongs), each
    /// frame's ICRC computed with the identification the kernel gives its
    /// segment (its index in the send, with `IP_PMTUDISC_DO`).
    fn plan(&mut self) -> io::Result<()> {
        let sport = self.local.port();
        let mut pending = std::mem::take(&mut self.batch.pending);
        pending.clear();
        for i in 0..self.batch.frames.len() {
            let (off, len) = self.batch.frames[i];
            let Some(w) = inspect(&self.batch.tx[off..off + len]) else {
                self.stats.tx_not_udp += 1;
                continue;
            };
            if w.v6 != self.v6 {
                self.stats.tx_not_udp += 1;
                continue;
            }
            let to = self.dest(w.dst);
            // BTH bytes 5-7: the destination QP (`inspect` checked that a
            // BTH is there).
            let p0 = off + w.payload.0;
            let q = &self.batch.tx[p0 + 5..p0 + 8];
            let dqpn = u32::from_be_bytes([0, q[0], q[1], q[2]]);
            pending.push(Pending {
                off,
                len,
                w,
                to,
                dqpn,
            });
        }
        if self.gso {
            // Each QP's frames together, in their order (QPs are
            // independent flows: nothing orders one QP's packets against
            // another's), so a device that interleaves QPs still fills
            // GSO sends.
            pending.sort_by_key(|p| (p.to, p.dqpn));
        }
        let b = &mut *self.batch;
        b.segs.clear();
        b.msgs.clear();
        b.plans.clear();
        for &Pending {
            off,
            len,
            w,
            to,
            dqpn,
        } in &pending
        {
            let plen = w.payload_len();
            let join = match (b.plans.last(), b.msgs.last()) {
                (Some(p), Some(m)) => {
                    self.gso
                        && !p.closed
                        && (p.to, p.dqpn, p.tos, p.ttl) == (to, dqpn, w.tos, w.ttl)
                        && plen <= p.segment
                        && m.count < UDP_MAX_SEGMENTS
                        && p.bytes + plen <= GSO_MAX_BYTES
                }
                _ => false,
            };
            let ident = if join {
                b.msgs.last().map_or(0, |m| m.count)
            } else {
                0
            };
            if finish(&mut b.tx[off..off + len], &w, sport, ident as u16).is_none() {
                self.stats.tx_not_udp += 1;
                continue;
            }
            b.segs.push((off + w.payload.0, off + w.payload.1));
            if let (true, Some(p), Some(m)) = (join, b.plans.last_mut(), b.msgs.last_mut()) {
                m.count += 1;
                m.segment = p.segment as u16;
                p.bytes += plen;
                p.closed = plen < p.segment;
            } else {
                b.plans.push(Plan {
                    to,
                    dqpn,
                    tos: w.tos,
                    ttl: w.ttl,
                    segment: plen,
                    bytes: plen,
                    closed: false,
                });
                b.msgs.push(TxMsg {
                    to,
                    first: b.segs.len() - 1,
                    count: 1,
                    segment: 0,
                });
            }
        }
        b.pending = pending;
        Ok(())
    }

    /// Send the planned datagrams: one sendmmsg(2) per run of one TOS and
    /// TTL (set on the socket before the run when they change).
    fn send_planned(&mut self) -> io::Result<()> {
        let mut a = 0;
        while a < self.batch.msgs.len() {
            let p = self.batch.plans[a];
            let mut end = a + 1;
            while end < self.batch.plans.len()
                && (self.batch.plans[end].tos, self.batch.plans[end].ttl) == (p.tos, p.ttl)
            {
                end += 1;
            }
            self.set_tos_ttl(p.tos, p.ttl)?;
            while a < end {
                let b = &mut *self.batch;
                let r = b
                    .tx_mm
                    .send(self.sock.as_fd(), &b.tx, &b.segs, &b.msgs[a..end]);
                match r {
                    Ok(k) if k > 0 => {
                        for m in &b.msgs[a..a + k] {
                            self.stats.tx_datagrams += m.count as u64;
                            if m.count > 1 {
                                self.stats.tx_gso_sends += 1;
                            }
                        }
                        a += k;
                    }
                    Ok(_) => {
                        // Nothing taken and no error: count the rest lost.
                        for m in &b.msgs[a..end] {
                            self.stats.tx_errors += m.count as u64;
                        }
                        a = end;
                    }
                    Err(e) => {
                        let m = b.msgs[a];
                        if m.segment > 0 && gso_refused(&e) {
                            self.gso = false;
                        } else if !is_loss(&e) {
                            return Err(e);
                        }
                        self.stats.tx_errors += m.count as u64;
                        a += 1;
                    }
                }
            }
        }
        Ok(())
    }
}
