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
//!
//! One file per protocol: `arp` (ARP), `ndp` (ICMPv6: Neighbor Discovery
//! and echo), `icmp` (ICMPv4 echo), `cache` (the resolution state); this
//! module routes frames, queues replies and sends requests.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::collections::VecDeque;
use std::time::Duration;

use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, Icmpv6Repr, NdiscNeighborFlags, NdiscRepr,
    RawHardwareAddress, ETHERNET_HEADER_LEN,
};

mod arp;
mod cache;
mod icmp;
mod ndp;

use cache::Entry;

use ndp::{emit_icmpv6, ipv6_multicast_mac, solicited_node};

use crate::time::Instant;
use crate::verbs::DeviceConfig;
use crate::wire::arp::ArpRepr;
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
}

/// A frame of `len` bytes padded to the Ethernet minimum.
fn frame_len(len: usize) -> usize {
    len.max(ETH_MIN_FRAME_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{EthernetRepr, Icmpv6Packet, Ipv6Packet, Ipv6Repr};

    pub(super) const OURS: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    pub(super) const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];
    pub(super) const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    pub(super) const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 9);
    pub(super) const IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
    pub(super) const PEER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0x12, 0x3456);

    pub(super) fn neigh() -> Neighbors {
        Neighbors::new(NeighConfig {
            mac: OURS,
            ipv4: vec![IP],
            ipv6: vec![IP6],
            ..NeighConfig::default()
        })
    }

    /// An ARP packet laid out by hand after RFC 826 (Ethernet/IPv4: htype 1,
    /// ptype 0x0800, hlen 6, plen 4), in a 60-byte frame.
    pub(super) fn arp_frame(
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

    pub(super) fn poll(n: &mut Neighbors, now: Instant) -> Option<Vec<u8>> {
        let mut buf = [0u8; 2048];
        n.poll_transmit(now, &mut buf)
            .map(|len| buf[..len].to_vec())
    }

    pub(super) fn parse6(f: &[u8]) -> (EthernetRepr, Ipv6Repr, Icmpv6Repr<'_>) {
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
}
