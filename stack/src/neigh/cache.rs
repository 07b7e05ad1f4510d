//! The neighbour cache: resolution state per address, on the caller's clock
//! (a simplified RFC 4861 §7.3 state machine, shared by ARP and NDP).

use core::net::IpAddr;

use super::{Neighbors, Resolution};
use crate::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Incomplete {
        next_probe: Instant,
        probes_sent: u8,
    },
    Reachable {
        mac: [u8; 6],
        expires: Instant,
    },
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub ip: IpAddr,
    pub state: State,
}

impl Neighbors {
    /// The MAC of `ip` if it is resolved and its entry has not expired at
    /// `now`.
    pub fn lookup(&self, now: Instant, ip: IpAddr) -> Option<[u8; 6]> {
        match self.status(now, ip) {
            Resolution::Reachable(mac) => Some(mac),
            _ => None,
        }
    }

    /// Where the resolution of `ip` stands at `now`.
    pub fn status(&self, now: Instant, ip: IpAddr) -> Resolution {
        match self.cache.iter().find(|e| e.ip == ip).map(|e| e.state) {
            None => Resolution::Unknown,
            Some(State::Incomplete { .. }) => Resolution::Resolving,
            Some(State::Reachable { mac, expires }) if expires > now => Resolution::Reachable(mac),
            Some(State::Reachable { .. }) => Resolution::Unknown,
            Some(State::Failed) => Resolution::Failed,
        }
    }

    /// Start resolving `ip` (ARP for IPv4, a neighbour solicitation for
    /// IPv6) unless it is resolved or already resolving; the first request
    /// goes out at the next [`Neighbors::poll_transmit`]. Returns the MAC
    /// when it is already known.
    pub fn request(&mut self, now: Instant, ip: IpAddr) -> Option<[u8; 6]> {
        match self.status(now, ip) {
            Resolution::Reachable(mac) => return Some(mac),
            Resolution::Resolving => return None,
            Resolution::Unknown | Resolution::Failed => {}
        }
        let state = State::Incomplete {
            next_probe: now,
            probes_sent: 0,
        };
        if let Some(e) = self.cache.iter_mut().find(|e| e.ip == ip) {
            e.state = state;
        } else {
            self.insert(now, ip, state);
        }
        None
    }

    /// Forget every entry.
    pub fn flush(&mut self) {
        self.cache.clear();
    }

    /// When [`Neighbors::poll_transmit`] next has work: `now`-or-earlier
    /// ([`Instant::ZERO`]) while replies wait, else the next request or
    /// resolution failure, or `None` when idle.
    pub fn poll_at(&self) -> Option<Instant> {
        if !self.queue.is_empty() {
            return Some(Instant::ZERO);
        }
        self.cache
            .iter()
            .filter_map(|e| match e.state {
                State::Incomplete { next_probe, .. } => Some(next_probe),
                _ => None,
            })
            .min()
    }

    pub(super) fn poll_probes(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let retrans = self.cfg.retrans_time;
        let max_probes = self.cfg.max_probes;
        for i in 0..self.cache.len() {
            let Some(e) = self.cache.get(i).copied() else {
                break;
            };
            let State::Incomplete {
                next_probe,
                probes_sent,
            } = e.state
            else {
                continue;
            };
            if next_probe > now {
                continue;
            }
            if probes_sent >= max_probes {
                self.set_state(i, State::Failed);
                self.counters.resolve_failed += 1;
                continue;
            }
            let Some(n) = self.emit_request(e.ip, buf) else {
                // No source address of that family, or `buf` too small.
                self.set_state(i, State::Failed);
                self.counters.resolve_failed += 1;
                continue;
            };
            self.set_state(
                i,
                State::Incomplete {
                    next_probe: now + retrans,
                    probes_sent: probes_sent.saturating_add(1),
                },
            );
            return Some(n);
        }
        None
    }

    fn set_state(&mut self, i: usize, state: State) {
        if let Some(e) = self.cache.get_mut(i) {
            e.state = state;
        }
    }

    /// Record `mac` for `ip`: update an existing entry (any state), or add
    /// one when `create`.
    pub(super) fn learn(&mut self, now: Instant, ip: IpAddr, mac: [u8; 6], create: bool) {
        let state = State::Reachable {
            mac,
            expires: now + self.cfg.reachable_time,
        };
        if let Some(e) = self.cache.iter_mut().find(|e| e.ip == ip) {
            e.state = state;
        } else if create {
            self.insert(now, ip, state);
        }
    }

    /// Add an entry, evicting (in order) a failed one, an expired one, or
    /// the reachable one closest to expiry; counted and dropped when every
    /// entry is resolving.
    fn insert(&mut self, now: Instant, ip: IpAddr, state: State) {
        let entry = Entry { ip, state };
        if self.cache.len() < self.cfg.max_entries {
            self.cache.push(entry);
            return;
        }
        let victim = self
            .cache
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e.state {
                State::Failed => Some((Instant::ZERO, i)),
                State::Reachable { expires, .. } => Some((expires.min(now), i)),
                State::Incomplete { .. } => None,
            })
            .min()
            .map(|(_, i)| i);
        match victim.and_then(|i| self.cache.get_mut(i)) {
            Some(slot) => *slot = entry,
            None => self.counters.cache_full += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

    #[test]
    fn cache_evicts_the_oldest_reachable_entry() {
        let mut n = Neighbors::new(NeighConfig {
            max_entries: 2,
            ..neigh().cfg.clone()
        });
        for (i, last) in [1u8, 2, 3].into_iter().enumerate() {
            let ip = Ipv4Addr::new(10, 0, 0, 100 + last);
            let req = arp_frame([0xff; 6], 1, [2, 0, 0, 0, 1, last], ip, [0; 6], IP);
            n.handle_frame(Instant::from_millis(i as u64), &req);
        }
        let t = Instant::from_millis(5);
        assert_eq!(n.lookup(t, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 101))), None);
        assert_eq!(
            n.lookup(t, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 102))),
            Some([2, 0, 0, 0, 1, 2])
        );
        assert_eq!(
            n.lookup(t, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 103))),
            Some([2, 0, 0, 0, 1, 3])
        );
    }
}
