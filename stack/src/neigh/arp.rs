//! ARP (RFC 826): answer requests for our IPv4 addresses, learn senders.

use super::Neighbors;
use crate::time::Instant;
use crate::wire::arp::{ArpOp, ArpRepr};
use core::net::IpAddr;

impl Neighbors {
    pub(super) fn handle_arp(&mut self, now: Instant, payload: &[u8]) {
        let Ok(arp) = ArpRepr::parse(payload) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let sender = IpAddr::V4(arp.sender_ip);
        if arp.sender_mac == self.cfg.mac {
            // Our own frame, looped back by the medium.
            self.counters.rx_ignored += 1;
            return;
        }
        if self.is_ours(sender) {
            self.counters.addr_conflicts += 1;
            return;
        }
        let for_us = self.cfg.ipv4.contains(&arp.target_ip);
        // RFC 826: update a sender we know; add it when we are the target.
        // A probe's sender address 0.0.0.0 (RFC 5227 §2.1.1) is never learned.
        if !arp.sender_ip.is_unspecified() {
            self.learn(now, sender, arp.sender_mac, for_us);
        }
        match arp.op {
            ArpOp::Request if for_us => {
                self.counters.arp_requests_rx += 1;
                let reply = arp.reply_from(self.cfg.mac);
                if self.queue_frame(|buf| reply.emit_frame(buf).ok()) {
                    self.counters.arp_replies_tx += 1;
                }
            }
            ArpOp::Reply => self.counters.arp_replies_rx += 1,
            _ => self.counters.rx_ignored += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;

    #[test]
    fn arp_request_for_us_is_answered_and_sender_learned() {
        let mut n = neigh();
        let t = Instant::from_millis(5);
        let req = arp_frame([0xff; 6], 1, PEER, PEER_IP, [0; 6], IP);
        assert!(n.handle_frame(t, &req));
        let reply = poll(&mut n, t).expect("reply");
        // RFC 826 reply: unicast to the requester, op 2, our MAC/IP as
        // sender, the requester as target.
        assert_eq!(reply, arp_frame(PEER, 2, OURS, IP, PEER, PEER_IP));
        assert_eq!(poll(&mut n, t), None);
        assert_eq!(n.lookup(t, IpAddr::V4(PEER_IP)), Some(PEER));
        assert_eq!(n.counters().arp_requests_rx, 1);
        assert_eq!(n.counters().arp_replies_tx, 1);
    }

    #[test]
    fn arp_for_another_address_is_consumed_but_neither_answered_nor_learned() {
        let mut n = neigh();
        let req = arp_frame(
            [0xff; 6],
            1,
            PEER,
            PEER_IP,
            [0; 6],
            Ipv4Addr::new(10, 0, 0, 7),
        );
        assert!(n.handle_frame(Instant::ZERO, &req));
        assert_eq!(poll(&mut n, Instant::ZERO), None);
        assert_eq!(n.lookup(Instant::ZERO, IpAddr::V4(PEER_IP)), None);
    }

    #[test]
    fn arp_resolution_retries_then_fails() {
        let mut n = neigh();
        let target = IpAddr::V4(PEER_IP);
        assert_eq!(n.request(Instant::ZERO, target), None);
        assert_eq!(n.status(Instant::ZERO, target), Resolution::Resolving);
        let mut t = Instant::ZERO;
        for probe in 0..3 {
            let req = poll(&mut n, t).unwrap_or_else(|| panic!("probe {probe}"));
            // Broadcast request: who has 10.0.0.9, tell 10.0.0.1 (RFC 826).
            assert_eq!(req, arp_frame([0xff; 6], 1, OURS, IP, [0; 6], PEER_IP));
            assert_eq!(poll(&mut n, t), None, "one request per interval");
            t = t + Duration::from_secs(1);
            assert_eq!(n.poll_at(), Some(t));
        }
        assert_eq!(poll(&mut n, t), None);
        assert_eq!(n.status(t, target), Resolution::Failed);
        assert_eq!(n.counters().resolve_failed, 1);
        assert_eq!(n.counters().arp_requests_tx, 3);
        assert_eq!(n.poll_at(), None);
        // A new request starts over.
        n.request(t, target);
        assert!(poll(&mut n, t).is_some());
    }

    #[test]
    fn arp_reply_resolves_and_the_entry_expires() {
        let mut n = neigh();
        let target = IpAddr::V4(PEER_IP);
        n.request(Instant::ZERO, target);
        assert!(poll(&mut n, Instant::ZERO).is_some());
        let t = Instant::from_millis(3);
        let reply = arp_frame(OURS, 2, PEER, PEER_IP, OURS, IP);
        assert!(n.handle_frame(t, &reply));
        assert_eq!(n.lookup(t, target), Some(PEER));
        assert_eq!(n.request(t, target), Some(PEER));
        assert_eq!(n.poll_at(), None);
        let later = t + Duration::from_secs(30);
        assert_eq!(
            n.lookup(later, target),
            None,
            "expired after reachable_time"
        );
        assert_eq!(n.status(later, target), Resolution::Unknown);
    }

    #[test]
    fn arp_conflict_and_probe_are_not_learned() {
        let mut n = neigh();
        // Someone else claims our address (RFC 5227 §2.4).
        let claim = arp_frame([0xff; 6], 1, PEER, IP, [0; 6], IP);
        assert!(n.handle_frame(Instant::ZERO, &claim));
        assert_eq!(n.counters().addr_conflicts, 1);
        assert_eq!(poll(&mut n, Instant::ZERO), None);
        // An RFC 5227 probe (sender 0.0.0.0) for our address is answered
        // but nothing is learned.
        let probe = arp_frame([0xff; 6], 1, PEER, Ipv4Addr::UNSPECIFIED, [0; 6], IP);
        assert!(n.handle_frame(Instant::ZERO, &probe));
        assert!(poll(&mut n, Instant::ZERO).is_some());
        assert_eq!(
            n.status(Instant::ZERO, IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            Resolution::Unknown
        );
    }
}
