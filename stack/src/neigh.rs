//! Neighbour handling for one Ethernet port: everything a host on a LAN must
//! answer besides RoCE, sans-IO like [`crate::verbs::Device`].
//!
//! - ARP (RFC 826): answer requests for our IPv4 addresses with our MAC; send
//!   requests for next hops we are asked to resolve ([`Neighbors::request`]),
//!   retried every [`NeighConfig::retrans_time`] up to
//!   [`NeighConfig::max_probes`] times; learn from requests addressed to us
//!   and from replies (RFC 826 "Packet Reception": a sender already in the
//!   cache is updated by any ARP packet).
//! - ICMPv4 echo (RFC 792, RFC 1122 §3.2.2.6): answer echo requests for our
//!   addresses, so `ping` works against the stack.
//! - IPv6 Neighbor Discovery (RFC 4861 §4.3, §4.4, §7): answer neighbour
//!   solicitations for our IPv6 addresses with an advertisement carrying our
//!   MAC, send solicitations to the solicited-node multicast group (RFC 4291
//!   §2.7.1), learn from both; and ICMPv6 echo (RFC 4443 §4.1, §4.2).
//!
//! The cache runs on the caller's clock ([`Instant`], virtual in tests): a
//! learned entry is usable for [`NeighConfig::reachable_time`] and then
//! treated as unknown (a simplified RFC 4861 §7.3 state machine: no STALE or
//! DELAY state; a caller that keeps using a neighbour re-requests it).
//!
//! Every format is read and written through `smoltcp::wire` (and our
//! [`crate::wire::arp`] wrapper over it). Only untagged frames are handled: a
//! VLAN-tagged ARP or ICMP frame is reported as not consumed.
//!
//! Steady state allocates nothing: replies wait in a bounded queue
//! ([`NeighConfig::max_pending`]) of frame buffers that are recycled, and the
//! cache holds at most [`NeighConfig::max_entries`] entries.
//!
//! `roce_io::adapt::NeighIo` puts a `Neighbors` in front of any Ethernet
//! backend (TAP, DPDK), so that the device only sees the rest.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::VecDeque;
use std::time::Duration;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv4Packet, Icmpv4Repr,
    Icmpv6Packet, Icmpv6Repr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr,
    NdiscNeighborFlags, NdiscRepr, RawHardwareAddress, ETHERNET_HEADER_LEN,
};

use crate::time::Instant;
use crate::verbs::DeviceConfig;
use crate::wire::arp::{ArpOp, ArpRepr};
use crate::wire::ETH_MIN_FRAME_LEN;

/// IP protocol number of ICMPv4 (RFC 792).
const PROTO_ICMPV4: u8 = 1;
/// IPv6 next-header value of ICMPv6 (RFC 4443).
const PROTO_ICMPV6: u8 = 58;
/// Hop limit every Neighbor Discovery message carries and requires (RFC 4861
/// §7.1.1, §7.1.2).
const NDISC_HOP_LIMIT: u8 = 255;
/// TTL / hop limit of our echo replies.
const ECHO_HOP_LIMIT: u8 = 64;

/// Settings of a [`Neighbors`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighConfig {
    /// Our MAC address.
    pub mac: [u8; 6],
    /// The IPv4 addresses we answer ARP and echo requests for.
    pub ipv4: Vec<Ipv4Addr>,
    /// The IPv6 addresses we answer neighbour solicitations and echo requests
    /// for.
    pub ipv6: Vec<Ipv6Addr>,
    /// How long a learned neighbour is used before it counts as unknown
    /// again (RFC 4861 §10 REACHABLE_TIME, 30 s; Linux `base_reachable_time`).
    pub reachable_time: Duration,
    /// Interval between two requests for an unresolved neighbour (RFC 4861
    /// §10 RETRANS_TIMER, 1 s).
    pub retrans_time: Duration,
    /// Requests sent before resolution fails (RFC 4861 §10
    /// MAX_MULTICAST_SOLICIT, 3; Linux `mcast_solicit`).
    pub max_probes: u8,
    /// Cache capacity, entries.
    pub max_entries: usize,
    /// Replies that may wait for [`Neighbors::poll_transmit`]; more are
    /// dropped and counted in [`NeighCounters::tx_queue_full`].
    pub max_pending: usize,
    /// Largest reply frame built, bytes without FCS (an echo request whose
    /// reply would be larger is dropped and counted). The link MTU + 14.
    pub max_frame_len: usize,
}

impl Default for NeighConfig {
    fn default() -> Self {
        NeighConfig {
            mac: [0x02, 0, 0, 0, 0, 1],
            ipv4: Vec::new(),
            ipv6: Vec::new(),
            reachable_time: Duration::from_secs(30),
            retrans_time: Duration::from_secs(1),
            max_probes: 3,
            max_entries: 64,
            max_pending: 16,
            max_frame_len: 1514,
        }
    }
}

impl NeighConfig {
    /// The settings for a RoCE device: its MAC, the IPv4 addresses of its
    /// IPv4-mapped GIDs and the other GIDs as IPv6 addresses, frames up to
    /// its netdev MTU + 14.
    pub fn for_device(cfg: &DeviceConfig) -> NeighConfig {
        let mut ipv4 = Vec::new();
        let mut ipv6 = Vec::new();
        for g in &cfg.gids {
            match g.to_ip() {
                IpAddr::V4(a) => ipv4.push(a),
                IpAddr::V6(a) => ipv6.push(a),
            }
        }
        NeighConfig {
            mac: cfg.mac,
            ipv4,
            ipv6,
            max_frame_len: cfg.netdev_mtu + ETHERNET_HEADER_LEN,
            ..NeighConfig::default()
        }
    }
}

/// Event and drop counters of a [`Neighbors`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NeighCounters {
    /// ARP requests received for one of our addresses.
    pub arp_requests_rx: u64,
    /// ARP replies received.
    pub arp_replies_rx: u64,
    /// ARP replies sent.
    pub arp_replies_tx: u64,
    /// ARP requests sent (resolution and announcements).
    pub arp_requests_tx: u64,
    /// Neighbour solicitations received for one of our addresses.
    pub ns_rx: u64,
    /// Neighbour advertisements received.
    pub na_rx: u64,
    /// Neighbour advertisements sent.
    pub na_tx: u64,
    /// Neighbour solicitations sent.
    pub ns_tx: u64,
    /// ICMPv4 and ICMPv6 echo requests received for one of our addresses.
    pub echo_requests_rx: u64,
    /// Echo replies sent.
    pub echo_replies_tx: u64,
    /// ARP or ICMP frames that did not parse, or whose checksum was wrong
    /// (RFC 1122 §3.2.2, RFC 4443 §2.3: silently discarded).
    pub rx_malformed: u64,
    /// ARP or ICMP frames not addressed to us (another MAC or IP address,
    /// flooded by a bridge), other ICMP types, and ND messages failing the
    /// RFC 4861 §7.1 validity checks; ignored.
    pub rx_ignored: u64,
    /// ARP or ND messages claiming one of our own addresses from another
    /// MAC (RFC 5227 §2.4 conflict); ignored.
    pub addr_conflicts: u64,
    /// Replies dropped because [`NeighConfig::max_pending`] were waiting, or
    /// because the reply was larger than [`NeighConfig::max_frame_len`] or
    /// the transmit buffer.
    pub tx_queue_full: u64,
    /// Learned neighbours dropped because every cache entry was resolving.
    pub cache_full: u64,
    /// Resolutions that got no answer after [`NeighConfig::max_probes`]
    /// requests.
    pub resolve_failed: u64,
}

/// Where the resolution of one address stands ([`Neighbors::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resolution {
    /// Not in the cache (never requested, or the entry expired).
    Unknown,
    /// Requests are being sent.
    Resolving,
    /// Resolved to this MAC.
    Reachable([u8; 6]),
    /// No answer after [`NeighConfig::max_probes`] requests;
    /// [`Neighbors::request`] starts over.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
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
struct Entry {
    ip: IpAddr,
    state: State,
}

/// ARP/NDP responder and resolver and ICMP echo responder for one port (see
/// the module docs).
#[derive(Debug)]
pub struct Neighbors {
    cfg: NeighConfig,
    cache: Vec<Entry>,
    /// Built reply frames waiting for `poll_transmit`.
    queue: VecDeque<Vec<u8>>,
    /// Recycled frame buffers.
    pool: Vec<Vec<u8>>,
    counters: NeighCounters,
}

impl Neighbors {
    /// A responder/resolver with `cfg` and an empty cache.
    pub fn new(cfg: NeighConfig) -> Neighbors {
        let queue = VecDeque::with_capacity(cfg.max_pending);
        let cache = Vec::with_capacity(cfg.max_entries);
        let pool = Vec::with_capacity(cfg.max_pending);
        Neighbors {
            cfg,
            cache,
            queue,
            pool,
            counters: NeighCounters::default(),
        }
    }

    /// [`Neighbors::new`] with [`NeighConfig::for_device`].
    pub fn for_device(cfg: &DeviceConfig) -> Neighbors {
        Neighbors::new(NeighConfig::for_device(cfg))
    }

    /// The settings.
    pub fn config(&self) -> &NeighConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &NeighCounters {
        &self.counters
    }

    /// Whether `ip` is one of our addresses.
    pub fn is_ours(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => self.cfg.ipv4.contains(&a),
            IpAddr::V6(a) => self.cfg.ipv6.contains(&a),
        }
    }

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

    /// Queue an announcement of each of our addresses: a gratuitous ARP
    /// request (RFC 5227 §2.3) per IPv4 address and an unsolicited neighbour
    /// advertisement to all nodes (RFC 4861 §7.2.6) per IPv6 address, so
    /// neighbours and bridges learn our MAC.
    pub fn announce(&mut self) {
        let mac = self.cfg.mac;
        for i in 0..self.cfg.ipv4.len() {
            let Some(&ip) = self.cfg.ipv4.get(i) else {
                break;
            };
            let arp = ArpRepr::request(mac, ip, ip);
            if self.queue_frame(|buf| arp.emit_frame(buf).ok()) {
                self.counters.arp_requests_tx += 1;
            }
        }
        for i in 0..self.cfg.ipv6.len() {
            let Some(&ip) = self.cfg.ipv6.get(i) else {
                break;
            };
            let na = NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::OVERRIDE,
                target_addr: ip,
                lladdr: Some(RawHardwareAddress::from(EthernetAddress(mac))),
            };
            let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
            let sent = self.queue_frame(|buf| {
                emit_icmpv6(
                    buf,
                    mac,
                    ipv6_multicast_mac(all_nodes),
                    ip,
                    all_nodes,
                    NDISC_HOP_LIMIT,
                    &Icmpv6Repr::Ndisc(na),
                )
            });
            if sent {
                self.counters.na_tx += 1;
            }
        }
    }

    /// Handle one received Ethernet frame at `now`. Returns `true` when the
    /// frame was ARP, ICMPv4 or ICMPv6 (consumed here, answered or ignored),
    /// `false` for anything else (RoCE, other IP traffic, tagged frames),
    /// which the caller hands to the device.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) -> bool {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return false;
        };
        let payload = eth.payload();
        match eth.ethertype() {
            EthernetProtocol::Arp => {
                self.handle_arp(now, payload);
                true
            }
            EthernetProtocol::Ipv4 if payload.get(9) == Some(&PROTO_ICMPV4) => {
                if self.for_us(eth.dst_addr()) {
                    self.handle_icmpv4(eth.src_addr().0, payload);
                } else {
                    self.counters.rx_ignored += 1;
                }
                true
            }
            EthernetProtocol::Ipv6 if payload.get(6) == Some(&PROTO_ICMPV6) => {
                if self.for_us(eth.dst_addr()) {
                    self.handle_icmpv6(now, eth.src_addr().0, payload);
                } else {
                    self.counters.rx_ignored += 1;
                }
                true
            }
            _ => false,
        }
    }

    /// Write the next frame to send into `buf` (a queued reply first, then a
    /// due request) and return its length, or `None` when nothing is due at
    /// `now`. Resolutions whose last request went unanswered for
    /// [`NeighConfig::retrans_time`] fail here.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        while let Some(frame) = self.queue.pop_front() {
            let n = frame.len();
            let out = buf.get_mut(..n);
            let sent = out.map(|o| o.copy_from_slice(&frame)).is_some();
            self.pool.push(frame);
            if sent {
                return Some(n);
            }
            self.counters.tx_queue_full += 1;
        }
        self.poll_probes(now, buf)
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

    fn poll_probes(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
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

    /// Write a request for `ip` into `buf`.
    fn emit_request(&mut self, ip: IpAddr, buf: &mut [u8]) -> Option<usize> {
        let mac = self.cfg.mac;
        match ip {
            IpAddr::V4(target) => {
                let src = *self.cfg.ipv4.first()?;
                let n = ArpRepr::request(mac, src, target).emit_frame(buf).ok()?;
                self.counters.arp_requests_tx += 1;
                Some(n)
            }
            IpAddr::V6(target) => {
                let src = *self.cfg.ipv6.first()?;
                let group = solicited_node(target);
                let ns = NdiscRepr::NeighborSolicit {
                    target_addr: target,
                    lladdr: Some(RawHardwareAddress::from(EthernetAddress(mac))),
                };
                let n = emit_icmpv6(
                    buf,
                    mac,
                    ipv6_multicast_mac(group),
                    src,
                    group,
                    NDISC_HOP_LIMIT,
                    &Icmpv6Repr::Ndisc(ns),
                )?;
                self.counters.ns_tx += 1;
                Some(n)
            }
        }
    }

    /// Unicast to our MAC, broadcast or multicast.
    fn for_us(&self, dst: EthernetAddress) -> bool {
        dst.0 == self.cfg.mac || dst.is_broadcast() || dst.is_multicast()
    }

    /// Record `mac` for `ip`: update an existing entry (any state), or add
    /// one when `create`.
    fn learn(&mut self, now: Instant, ip: IpAddr, mac: [u8; 6], create: bool) {
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

    /// Take a buffer, let `emit` write one frame into it, and queue it.
    /// Returns whether it was queued.
    fn queue_frame(&mut self, emit: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        if self.queue.len() >= self.cfg.max_pending {
            self.counters.tx_queue_full += 1;
            return false;
        }
        let mut frame = self
            .pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(self.cfg.max_frame_len));
        frame.clear();
        frame.resize(self.cfg.max_frame_len.max(ETH_MIN_FRAME_LEN), 0);
        match emit(&mut frame) {
            Some(n) => {
                frame.truncate(n);
                self.queue.push_back(frame);
                true
            }
            None => {
                self.pool.push(frame);
                self.counters.tx_queue_full += 1;
                false
            }
        }
    }

    fn handle_arp(&mut self, now: Instant, payload: &[u8]) {
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

    fn handle_icmpv4(&mut self, src_mac: [u8; 6], payload: &[u8]) {
        let caps = ChecksumCapabilities::default();
        let Ok(ip) = Ipv4Packet::new_checked(payload) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(ip_repr) = Ipv4Repr::parse(&ip, &caps) else {
            self.counters.rx_malformed += 1;
            return;
        };
        if !self.cfg.ipv4.contains(&ip_repr.dst_addr) {
            self.counters.rx_ignored += 1;
            return;
        }
        let Ok(icmp) = Icmpv4Packet::new_checked(ip.payload()) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(repr) = Icmpv4Repr::parse(&icmp, &caps) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        } = repr
        else {
            self.counters.rx_ignored += 1;
            return;
        };
        self.counters.echo_requests_rx += 1;
        let reply = Icmpv4Repr::EchoReply {
            ident,
            seq_no,
            data,
        };
        let ip_reply = Ipv4Repr {
            src_addr: ip_repr.dst_addr,
            dst_addr: ip_repr.src_addr,
            next_header: IpProtocol::Icmp,
            payload_len: reply.buffer_len(),
            hop_limit: ECHO_HOP_LIMIT,
        };
        let mac = self.cfg.mac;
        let queued = self.queue_frame(|buf| {
            let ip_len = ip_reply.buffer_len() + reply.buffer_len();
            let n = frame_len(ETHERNET_HEADER_LEN + ip_len);
            let out = buf.get_mut(..n)?;
            out.fill(0);
            let mut f = EthernetFrame::new_checked(out).ok()?;
            EthernetRepr {
                src_addr: EthernetAddress(mac),
                dst_addr: EthernetAddress(src_mac),
                ethertype: EthernetProtocol::Ipv4,
            }
            .emit(&mut f);
            let l3 = f.payload_mut().get_mut(..ip_len)?;
            let mut ipp = Ipv4Packet::new_unchecked(l3);
            ip_reply.emit(&mut ipp, &caps);
            let mut icmp = Icmpv4Packet::new_unchecked(ipp.payload_mut());
            reply.emit(&mut icmp, &caps);
            Some(n)
        });
        if queued {
            self.counters.echo_replies_tx += 1;
        }
    }

    fn handle_icmpv6(&mut self, now: Instant, src_mac: [u8; 6], payload: &[u8]) {
        let caps = ChecksumCapabilities::default();
        let Ok(ip) = Ipv6Packet::new_checked(payload) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(ip_repr) = Ipv6Repr::parse(&ip) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let (src, dst) = (ip_repr.src_addr, ip_repr.dst_addr);
        let Ok(icmp) = Icmpv6Packet::new_checked(ip.payload()) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let Ok(repr) = Icmpv6Repr::parse(&src, &dst, &icmp, &caps) else {
            self.counters.rx_malformed += 1;
            return;
        };
        let mac = self.cfg.mac;
        match repr {
            Icmpv6Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } if self.cfg.ipv6.contains(&dst) => {
                self.counters.echo_requests_rx += 1;
                let reply = Icmpv6Repr::EchoReply {
                    ident,
                    seq_no,
                    data,
                };
                let queued = self.queue_frame(|buf| {
                    emit_icmpv6(buf, mac, src_mac, dst, src, ECHO_HOP_LIMIT, &reply)
                });
                if queued {
                    self.counters.echo_replies_tx += 1;
                }
            }
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr,
                lladdr,
            }) => {
                // RFC 4861 §7.1.1: hop limit 255, target not multicast; from
                // the unspecified address (DAD) only to a solicited-node
                // group and without a link-layer option.
                let dad = src.is_unspecified();
                if ip_repr.hop_limit != NDISC_HOP_LIMIT
                    || target_addr.is_multicast()
                    || (dad && (lladdr.is_some() || !is_solicited_node(dst)))
                {
                    self.counters.rx_ignored += 1;
                    return;
                }
                if !self.cfg.ipv6.contains(&target_addr) {
                    self.counters.rx_ignored += 1;
                    return;
                }
                self.counters.ns_rx += 1;
                let peer_mac = lladdr.and_then(eth_of).unwrap_or(src_mac);
                if peer_mac == mac {
                    self.counters.rx_ignored += 1;
                    return;
                }
                if self.is_ours(IpAddr::V6(src)) {
                    self.counters.addr_conflicts += 1;
                    return;
                }
                // §7.2.3: a solicitation with a source address creates or
                // updates the sender's entry and is answered to it; a DAD
                // probe is answered to all nodes, without the S flag.
                let (flags, to_ip, to_mac) = if dad {
                    let all = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
                    (NdiscNeighborFlags::OVERRIDE, all, ipv6_multicast_mac(all))
                } else {
                    self.learn(now, IpAddr::V6(src), peer_mac, true);
                    (
                        NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                        src,
                        peer_mac,
                    )
                };
                let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                    flags,
                    target_addr,
                    lladdr: Some(RawHardwareAddress::from(EthernetAddress(mac))),
                });
                let queued = self.queue_frame(|buf| {
                    emit_icmpv6(buf, mac, to_mac, target_addr, to_ip, NDISC_HOP_LIMIT, &na)
                });
                if queued {
                    self.counters.na_tx += 1;
                }
            }
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                target_addr,
                lladdr,
                ..
            }) => {
                // RFC 4861 §7.1.2 validity, §7.2.5: update an entry we have;
                // an advertisement for an unknown target is discarded.
                if ip_repr.hop_limit != NDISC_HOP_LIMIT || target_addr.is_multicast() {
                    self.counters.rx_ignored += 1;
                    return;
                }
                self.counters.na_rx += 1;
                let peer_mac = lladdr.and_then(eth_of).unwrap_or(src_mac);
                if self.is_ours(IpAddr::V6(target_addr)) {
                    if peer_mac != mac {
                        self.counters.addr_conflicts += 1;
                    }
                    return;
                }
                self.learn(now, IpAddr::V6(target_addr), peer_mac, false);
            }
            _ => self.counters.rx_ignored += 1,
        }
    }
}

/// A frame of `len` bytes padded to the Ethernet minimum.
fn frame_len(len: usize) -> usize {
    len.max(ETH_MIN_FRAME_LEN)
}

/// The MAC of an Ethernet link-layer address option.
fn eth_of(hw: RawHardwareAddress) -> Option<[u8; 6]> {
    hw.as_bytes().try_into().ok()
}

/// The solicited-node multicast group of `a`: `ff02::1:ffXX:XXXX` with the
/// low 24 bits of `a` (RFC 4291 §2.7.1).
fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// Whether `a` is a solicited-node multicast group (RFC 4291 §2.7.1).
fn is_solicited_node(a: Ipv6Addr) -> bool {
    a.octets()
        .starts_with(&[0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff])
}

/// The Ethernet group address of IPv6 multicast group `a`: 33:33 and its low
/// 32 bits (RFC 2464 §7).
fn ipv6_multicast_mac(a: Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Write an Ethernet + IPv6 + ICMPv6 frame into `buf`; returns its length
/// (padded to 60 bytes), or `None` when `buf` is too small.
fn emit_icmpv6(
    buf: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    hop_limit: u8,
    repr: &Icmpv6Repr<'_>,
) -> Option<usize> {
    let caps = ChecksumCapabilities::default();
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: repr.buffer_len(),
        hop_limit,
    };
    let ip_len = ip.buffer_len() + repr.buffer_len();
    let n = frame_len(ETHERNET_HEADER_LEN + ip_len);
    let out = buf.get_mut(..n)?;
    out.fill(0);
    let mut f = EthernetFrame::new_checked(out).ok()?;
    EthernetRepr {
        src_addr: EthernetAddress(src_mac),
        dst_addr: EthernetAddress(dst_mac),
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut f);
    let l3 = f.payload_mut().get_mut(..ip_len)?;
    let mut ipp = Ipv6Packet::new_unchecked(l3);
    ip.emit(&mut ipp);
    // Unchecked: the length is the repr's own, and `check_len` reads the
    // (not yet written) message type.
    let mut icmp = Icmpv6Packet::new_unchecked(ipp.payload_mut());
    repr.emit(&src, &dst, &mut icmp, &caps);
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
    const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
    const IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x12, 0x3456);

    fn neigh() -> Neighbors {
        Neighbors::new(NeighConfig {
            mac: OURS,
            ipv4: vec![IP],
            ipv6: vec![IP6],
            ..NeighConfig::default()
        })
    }

    /// An ARP packet laid out by hand after RFC 826 (Ethernet/IPv4: htype 1,
    /// ptype 0x0800, hlen 6, plen 4), in a 60-byte frame.
    fn arp_frame(
        dst: [u8; 6],
        op: u16,
        sha: [u8; 6],
        spa: Ipv4Addr,
        tha: [u8; 6],
        tpa: Ipv4Addr,
    ) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&dst);
        f.extend_from_slice(&sha);
        f.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 6, 4]);
        f.extend_from_slice(&op.to_be_bytes());
        f.extend_from_slice(&sha);
        f.extend_from_slice(&spa.octets());
        f.extend_from_slice(&tha);
        f.extend_from_slice(&tpa.octets());
        f.resize(60, 0);
        f
    }

    fn poll(n: &mut Neighbors, now: Instant) -> Option<Vec<u8>> {
        let mut buf = [0u8; 2048];
        n.poll_transmit(now, &mut buf)
            .map(|len| buf[..len].to_vec())
    }

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

    /// An ICMPv4 echo request frame, built with smoltcp.
    fn echo4(dst_mac: [u8; 6], dst: Ipv4Addr, data: &[u8]) -> Vec<u8> {
        let caps = ChecksumCapabilities::default();
        let icmp = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 7,
            data,
        };
        let ip = Ipv4Repr {
            src_addr: PEER_IP,
            dst_addr: dst,
            next_header: IpProtocol::Icmp,
            payload_len: icmp.buffer_len(),
            hop_limit: 64,
        };
        let mut f = vec![0u8; 14 + 20 + icmp.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src_addr: EthernetAddress(PEER),
            dst_addr: EthernetAddress(dst_mac),
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut eth);
        let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
        ip.emit(&mut ipp, &caps);
        icmp.emit(&mut Icmpv4Packet::new_unchecked(ipp.payload_mut()), &caps);
        f
    }

    #[test]
    fn icmpv4_echo_request_is_answered() {
        let mut n = neigh();
        let data: Vec<u8> = (0..56u8).collect();
        assert!(n.handle_frame(Instant::ZERO, &echo4(OURS, IP, &data)));
        let r = poll(&mut n, Instant::ZERO).expect("echo reply");
        let eth = EthernetFrame::new_checked(&r[..]).expect("eth");
        assert_eq!(eth.dst_addr().0, PEER);
        assert_eq!(eth.src_addr().0, OURS);
        let ip = Ipv4Packet::new_checked(eth.payload()).expect("ip");
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (IP, PEER_IP));
        let icmp = Icmpv4Packet::new_checked(ip.payload()).expect("icmp");
        assert!(icmp.verify_checksum());
        assert_eq!(
            Icmpv4Repr::parse(&icmp, &ChecksumCapabilities::default()),
            Ok(Icmpv4Repr::EchoReply {
                ident: 0x1234,
                seq_no: 7,
                data: &data
            })
        );
        assert_eq!(n.counters().echo_replies_tx, 1);
    }

    #[test]
    fn icmpv4_not_for_us_or_corrupt_is_consumed_silently() {
        let mut n = neigh();
        assert!(n.handle_frame(
            Instant::ZERO,
            &echo4(OURS, Ipv4Addr::new(10, 0, 0, 5), b"x")
        ));
        assert!(n.handle_frame(Instant::ZERO, &echo4(PEER, IP, b"x")));
        let mut bad = echo4(OURS, IP, b"abcd");
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(n.handle_frame(Instant::ZERO, &bad));
        assert_eq!(poll(&mut n, Instant::ZERO), None);
        assert_eq!(n.counters().rx_ignored, 2);
        assert_eq!(n.counters().rx_malformed, 1);
    }

    #[test]
    fn other_frames_are_not_consumed() {
        let mut n = neigh();
        // IPv4/UDP (protocol 17 at IP byte 9), IPv6/UDP (next header 17 at
        // byte 6), RoCEv1 EtherType 0x8915, a runt.
        let mut udp4 = [0u8; 60];
        udp4[12..14].copy_from_slice(&[0x08, 0x00]);
        udp4[14] = 0x45;
        udp4[23] = 17;
        let mut udp6 = [0u8; 80];
        udp6[12..14].copy_from_slice(&[0x86, 0xdd]);
        udp6[14] = 0x60;
        udp6[20] = 17;
        let mut v1 = [0u8; 80];
        v1[12..14].copy_from_slice(&[0x89, 0x15]);
        for f in [&udp4[..], &udp6[..], &v1[..], &[0u8; 10][..]] {
            assert!(!n.handle_frame(Instant::ZERO, f));
        }
    }

    fn icmpv6_frame(
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop: u8,
        repr: &Icmpv6Repr<'_>,
    ) -> Vec<u8> {
        let mut buf = vec![0u8; 2048];
        let n = emit_icmpv6(&mut buf, src_mac, dst_mac, src, dst, hop, repr).expect("emit");
        buf.truncate(n);
        buf
    }

    fn parse6(f: &[u8]) -> (EthernetRepr, Ipv6Repr, Icmpv6Repr<'_>) {
        let eth = EthernetFrame::new_checked(f).expect("eth");
        let er = EthernetRepr::parse(&eth).expect("eth repr");
        let ip = Ipv6Packet::new_checked(&f[14..]).expect("ip6");
        let ir = Ipv6Repr::parse(&ip).expect("ip6 repr");
        let icmp = Icmpv6Packet::new_checked(&f[54..54 + ir.payload_len]).expect("icmp6");
        let r = Icmpv6Repr::parse(
            &ir.src_addr,
            &ir.dst_addr,
            &icmp,
            &ChecksumCapabilities::default(),
        )
        .expect("icmpv6 checksum and format");
        (er, ir, r)
    }

    #[test]
    fn solicited_node_group_and_mac() {
        // RFC 4291 §2.7.1: ff02::1:ff plus the low 24 bits; RFC 2464 §7:
        // 33:33 plus the low 32 bits.
        let g = solicited_node(PEER_IP6);
        assert_eq!(g, "ff02::1:ff12:3456".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ipv6_multicast_mac(g), [0x33, 0x33, 0xff, 0x12, 0x34, 0x56]);
        assert!(is_solicited_node(g));
        assert!(!is_solicited_node(PEER_IP6));
    }

    #[test]
    fn neighbour_solicitation_is_answered_and_learned() {
        let mut n = neigh();
        let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: IP6,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(PEER))),
        });
        let g = solicited_node(IP6);
        let f = icmpv6_frame(PEER, ipv6_multicast_mac(g), PEER_IP6, g, 255, &ns);
        assert!(n.handle_frame(Instant::ZERO, &f));
        let r = poll(&mut n, Instant::ZERO).expect("advertisement");
        let (er, ir, icmp) = parse6(&r);
        assert_eq!((er.src_addr.0, er.dst_addr.0), (OURS, PEER));
        assert_eq!(
            (ir.src_addr, ir.dst_addr, ir.hop_limit),
            (IP6, PEER_IP6, 255)
        );
        assert_eq!(
            icmp,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
                target_addr: IP6,
                lladdr: Some(RawHardwareAddress::from(EthernetAddress(OURS))),
            })
        );
        assert_eq!(n.lookup(Instant::ZERO, IpAddr::V6(PEER_IP6)), Some(PEER));
        // Hop limit other than 255: invalid (RFC 4861 §7.1.1), ignored.
        let f = icmpv6_frame(PEER, ipv6_multicast_mac(g), PEER_IP6, g, 64, &ns);
        assert!(n.handle_frame(Instant::ZERO, &f));
        assert_eq!(poll(&mut n, Instant::ZERO), None);
    }

    #[test]
    fn neighbour_resolution_by_solicitation() {
        let mut n = neigh();
        let target = IpAddr::V6(PEER_IP6);
        n.request(Instant::ZERO, target);
        let s = poll(&mut n, Instant::ZERO).expect("solicitation");
        let (er, ir, icmp) = parse6(&s);
        let g = solicited_node(PEER_IP6);
        assert_eq!(
            (er.src_addr.0, er.dst_addr.0),
            (OURS, [0x33, 0x33, 0xff, 0x12, 0x34, 0x56])
        );
        assert_eq!((ir.src_addr, ir.dst_addr, ir.hop_limit), (IP6, g, 255));
        assert_eq!(
            icmp,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: PEER_IP6,
                lladdr: Some(RawHardwareAddress::from(EthernetAddress(OURS))),
            })
        );
        let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::OVERRIDE,
            target_addr: PEER_IP6,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(PEER))),
        });
        assert!(n.handle_frame(
            Instant::ZERO,
            &icmpv6_frame(PEER, OURS, PEER_IP6, IP6, 255, &na)
        ));
        assert_eq!(n.lookup(Instant::ZERO, target), Some(PEER));
        // An unsolicited advertisement for an unknown target is not learned
        // (RFC 4861 §7.2.5).
        let other = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x77);
        let na = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::OVERRIDE,
            target_addr: other,
            lladdr: Some(RawHardwareAddress::from(EthernetAddress(PEER))),
        });
        assert!(n.handle_frame(
            Instant::ZERO,
            &icmpv6_frame(PEER, OURS, other, IP6, 255, &na)
        ));
        assert_eq!(
            n.status(Instant::ZERO, IpAddr::V6(other)),
            Resolution::Unknown
        );
    }

    #[test]
    fn icmpv6_echo_request_is_answered() {
        let mut n = neigh();
        let data = [0x5a; 100];
        let req = Icmpv6Repr::EchoRequest {
            ident: 9,
            seq_no: 1,
            data: &data,
        };
        assert!(n.handle_frame(
            Instant::ZERO,
            &icmpv6_frame(PEER, OURS, PEER_IP6, IP6, 64, &req)
        ));
        let r = poll(&mut n, Instant::ZERO).expect("echo reply");
        let (er, ir, icmp) = parse6(&r);
        assert_eq!((er.src_addr.0, er.dst_addr.0), (OURS, PEER));
        assert_eq!((ir.src_addr, ir.dst_addr), (IP6, PEER_IP6));
        assert_eq!(
            icmp,
            Icmpv6Repr::EchoReply {
                ident: 9,
                seq_no: 1,
                data: &data
            }
        );
    }

    #[test]
    fn reply_queue_is_bounded_and_buffers_are_recycled() {
        let mut n = neigh();
        let req = arp_frame([0xff; 6], 1, PEER, PEER_IP, [0; 6], IP);
        for _ in 0..40 {
            n.handle_frame(Instant::ZERO, &req);
        }
        assert_eq!(n.counters().tx_queue_full, 40 - 16);
        let mut sent = 0;
        while poll(&mut n, Instant::ZERO).is_some() {
            sent += 1;
        }
        assert_eq!(sent, 16);
        assert_eq!(n.pool.len(), 16);
        for _ in 0..16 {
            n.handle_frame(Instant::ZERO, &req);
        }
        assert!(n.pool.is_empty(), "queued replies reuse the pooled buffers");
        // A transmit buffer too small for the frame drops it, counted.
        let mut tiny = [0u8; 10];
        assert_eq!(n.poll_transmit(Instant::ZERO, &mut tiny), None);
        assert_eq!(n.counters().tx_queue_full, 40 - 16 + 16);
    }

    #[test]
    fn announce_queues_gratuitous_arp_and_unsolicited_na() {
        let mut n = neigh();
        n.announce();
        let garp = poll(&mut n, Instant::ZERO).expect("gratuitous ARP");
        // RFC 5227 §2.3 announcement: sender and target IP both ours.
        assert_eq!(garp, arp_frame([0xff; 6], 1, OURS, IP, [0; 6], IP));
        let na = poll(&mut n, Instant::ZERO).expect("unsolicited NA");
        let (er, ir, icmp) = parse6(&na);
        assert_eq!(er.dst_addr.0, [0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(ir.dst_addr, "ff02::1".parse::<Ipv6Addr>().unwrap());
        assert!(
            matches!(icmp, Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert { flags, .. }) if flags == NdiscNeighborFlags::OVERRIDE)
        );
    }

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
