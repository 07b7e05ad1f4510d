//! Fabric topologies: which host hangs off which switch port, which switch
//! ports are cabled together, at what speed and cable delay, and the
//! forwarding tables (ECMP groups) every switch uses.
//!
//! A [`Topology`] is a description (switches, host attachments, switch-to-
//! switch links); [`Wiring::new`] turns it into numbered ports and routes.
//! Port numbering is global: switch `s` owns a contiguous range of port
//! ids, host ports first (in host order), then its switch-to-switch ports in
//! link order. For [`Topology::single`] port `i` faces host `i`, as the
//! single-switch scenarios have always numbered them.
//!
//! Routing is shortest path over the switch graph with equal-cost multipath:
//! a switch's group for a destination host holds every port on a shortest
//! path toward it, and the switch picks one by hashing the frame's
//! five-tuple ([`crate::net::ecmp_index`]). In a two-tier leaf-spine this is
//! up-down routing: a leaf spreads traffic for another leaf over all its
//! uplinks, a spine has one way down. [`Topology::ring`] with
//! [`Routing::Clockwise`] is the textbook topology whose routes form a
//! cyclic buffer dependency (see [`Wiring::buffer_dependency_cycle`]).

use std::collections::VecDeque;
use std::fmt;

/// Speed and one-way delay of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkSpec {
    /// Rate, Gbit/s.
    pub gbps: f64,
    /// One-way propagation delay, nanoseconds (cable plus the receiving
    /// switch's pipeline latency folded in).
    pub delay_ns: u64,
}

/// What a switch is in the fabric (for per-tier reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// The only switch of a single-switch fabric.
    Single,
    /// Top-of-rack / leaf: hosts below, spines above.
    Leaf,
    /// Spine: leaves below.
    Spine,
    /// A switch of a ring (deadlock experiments).
    Ring,
}

impl Tier {
    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Single => "switch",
            Tier::Leaf => "leaf",
            Tier::Spine => "spine",
            Tier::Ring => "ring",
        }
    }
}

/// How switches choose among next hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// Every port on a shortest path, chosen per flow by the ECMP hash.
    #[default]
    ShortestPath,
    /// Ring only: always forward to the next switch (index + 1 mod n)
    /// unless the destination is local.
    Clockwise,
}

/// A switch-to-switch cable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwitchLink {
    /// One end (switch index).
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// Speed and delay (both directions).
    pub spec: LinkSpec,
}

/// A fabric description.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Tier of each switch.
    pub switches: Vec<Tier>,
    /// Per host: its switch and the link to it.
    pub hosts: Vec<(usize, LinkSpec)>,
    /// Switch-to-switch links.
    pub links: Vec<SwitchLink>,
    /// Next-hop choice.
    pub routing: Routing,
}

/// Shape of a two-tier leaf-spine (folded Clos) fabric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClosSpec {
    /// Spine switches.
    pub spines: usize,
    /// Leaf switches.
    pub leaves: usize,
    /// Hosts per leaf.
    pub hosts_per_leaf: usize,
    /// Host-to-leaf links.
    pub host: LinkSpec,
    /// Leaf-to-spine links (one per leaf and spine).
    pub uplink: LinkSpec,
}

impl ClosSpec {
    /// Hosts in the fabric.
    pub fn hosts(&self) -> usize {
        self.leaves * self.hosts_per_leaf
    }

    /// Downlink over uplink capacity of a leaf (1 = non-blocking).
    pub fn oversubscription(&self) -> f64 {
        let up = self.spines as f64 * self.uplink.gbps;
        if up <= 0.0 {
            return f64::INFINITY;
        }
        self.hosts_per_leaf as f64 * self.host.gbps / up
    }
}

impl Topology {
    /// `n` hosts on one switch, host `i` on port `i`.
    pub fn single(n: usize, link: LinkSpec) -> Topology {
        Topology {
            switches: vec![Tier::Single],
            hosts: vec![(0, link); n],
            links: Vec::new(),
            routing: Routing::ShortestPath,
        }
    }

    /// A leaf-spine fabric: switches 0..leaves are the leaves, then the
    /// spines; host `l * hosts_per_leaf + i` is host `i` of leaf `l`; every
    /// leaf has one uplink to every spine. A leaf's ports are its hosts,
    /// then its uplinks in spine order; a spine's ports face the leaves in
    /// order.
    pub fn clos(c: &ClosSpec) -> Topology {
        let mut switches = vec![Tier::Leaf; c.leaves];
        switches.extend(std::iter::repeat(Tier::Spine).take(c.spines));
        let hosts = (0..c.hosts())
            .map(|h| (h / c.hosts_per_leaf.max(1), c.host))
            .collect();
        let mut links = Vec::new();
        for l in 0..c.leaves {
            for s in 0..c.spines {
                links.push(SwitchLink {
                    a: l,
                    b: c.leaves + s,
                    spec: c.uplink,
                });
            }
        }
        Topology {
            switches,
            hosts,
            links,
            routing: Routing::ShortestPath,
        }
    }

    /// `switches` switches in a ring (switch `i` cabled to `i + 1 mod n`),
    /// `hosts_per_switch` hosts on each, every link `link`.
    pub fn ring(
        switches: usize,
        hosts_per_switch: usize,
        link: LinkSpec,
        routing: Routing,
    ) -> Topology {
        let hosts = (0..switches * hosts_per_switch)
            .map(|h| (h / hosts_per_switch.max(1), link))
            .collect();
        let links = (0..switches)
            .map(|i| SwitchLink {
                a: i,
                b: (i + 1) % switches,
                spec: link,
            })
            .collect();
        Topology {
            switches: vec![Tier::Ring; switches],
            hosts,
            links,
            routing,
        }
    }
}

/// The far end of a switch port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A host NIC.
    Host(usize),
    /// Another switch's port (global port id).
    Port(usize),
}

/// One switch port as wired.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PortWire {
    /// The switch owning the port.
    pub switch: usize,
    /// What the port's cable leads to.
    pub peer: Peer,
    /// The cable.
    pub link: LinkSpec,
}

/// A topology turned into numbered ports and forwarding tables.
#[derive(Debug, Clone, PartialEq)]
pub struct Wiring {
    /// Tier of each switch.
    pub tiers: Vec<Tier>,
    /// Every switch port, by global id.
    pub ports: Vec<PortWire>,
    /// Port ids of each switch.
    pub switch_ports: Vec<std::ops::Range<usize>>,
    /// The switch port facing each host.
    pub host_port: Vec<usize>,
    /// The link of each host.
    pub host_link: Vec<LinkSpec>,
    /// Forwarding: `groups[s * hosts + h]` = range into `hops` of switch
    /// `s`'s ECMP group for host `h` (empty: unreachable).
    groups: Vec<(u32, u32)>,
    hops: Vec<u32>,
}

/// Why a topology cannot be wired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyError {
    /// A host or link names a switch that does not exist.
    NoSuchSwitch(usize),
    /// A link joins a switch to itself.
    SelfLink(usize),
    /// A link has a non-positive rate.
    BadRate,
    /// Clockwise routing on a topology that is not a ring.
    NotARing,
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::NoSuchSwitch(s) => write!(f, "no switch {s}"),
            TopologyError::SelfLink(s) => write!(f, "link from switch {s} to itself"),
            TopologyError::BadRate => write!(f, "link rate must be positive"),
            TopologyError::NotARing => write!(f, "clockwise routing needs a ring"),
        }
    }
}

impl std::error::Error for TopologyError {}

impl Wiring {
    /// Number the ports of `t` and compute every switch's ECMP groups.
    pub fn new(t: &Topology) -> Result<Wiring, TopologyError> {
        let ns = t.switches.len();
        let nh = t.hosts.len();
        for &(s, l) in &t.hosts {
            if s >= ns {
                return Err(TopologyError::NoSuchSwitch(s));
            }
            if l.gbps.is_nan() || l.gbps <= 0.0 {
                return Err(TopologyError::BadRate);
            }
        }
        for l in &t.links {
            if l.a >= ns || l.b >= ns {
                return Err(TopologyError::NoSuchSwitch(l.a.max(l.b)));
            }
            if l.a == l.b {
                return Err(TopologyError::SelfLink(l.a));
            }
            if l.spec.gbps.is_nan() || l.spec.gbps <= 0.0 {
                return Err(TopologyError::BadRate);
            }
        }
        // Ports per switch: hosts first, then links in order.
        let mut per_switch: Vec<Vec<(Peer, LinkSpec, Option<usize>)>> = vec![Vec::new(); ns];
        for (h, &(s, l)) in t.hosts.iter().enumerate() {
            per_switch[s].push((Peer::Host(h), l, None));
        }
        for (i, l) in t.links.iter().enumerate() {
            per_switch[l.a].push((Peer::Port(usize::MAX), l.spec, Some(i)));
            per_switch[l.b].push((Peer::Port(usize::MAX), l.spec, Some(i)));
        }
        let mut ports = Vec::new();
        let mut switch_ports = Vec::with_capacity(ns);
        let mut host_port = vec![0; nh];
        // link index -> (port at a, port at b)
        let mut link_ports = vec![(usize::MAX, usize::MAX); t.links.len()];
        for (s, list) in per_switch.iter().enumerate() {
            let start = ports.len();
            for &(peer, link, li) in list {
                let id = ports.len();
                if let Peer::Host(h) = peer {
                    host_port[h] = id;
                }
                if let Some(li) = li {
                    let e = &mut link_ports[li];
                    if t.links[li].a == s && e.0 == usize::MAX {
                        e.0 = id;
                    } else {
                        e.1 = id;
                    }
                }
                ports.push(PortWire {
                    switch: s,
                    peer,
                    link,
                });
            }
            switch_ports.push(start..ports.len());
        }
        for &(pa, pb) in &link_ports {
            ports[pa].peer = Peer::Port(pb);
            ports[pb].peer = Peer::Port(pa);
        }
        let mut w = Wiring {
            tiers: t.switches.clone(),
            ports,
            switch_ports,
            host_port,
            host_link: t.hosts.iter().map(|&(_, l)| l).collect(),
            groups: Vec::new(),
            hops: Vec::new(),
        };
        match t.routing {
            Routing::ShortestPath => w.shortest_paths(t),
            Routing::Clockwise => w.clockwise(t)?,
        }
        Ok(w)
    }

    /// Number of switches.
    pub fn switches(&self) -> usize {
        self.switch_ports.len()
    }

    /// Number of hosts.
    pub fn hosts(&self) -> usize {
        self.host_port.len()
    }

    /// The switch host `h` is attached to.
    pub fn host_switch(&self, h: usize) -> usize {
        self.ports[self.host_port[h]].switch
    }

    /// Switch `s`'s ECMP group (global port ids) toward host `h`.
    pub fn group(&self, s: usize, h: usize) -> &[u32] {
        let (a, n) = self.groups[s * self.hosts() + h];
        &self.hops[a as usize..(a + n) as usize]
    }

    fn set_groups(&mut self, groups: Vec<Vec<u32>>) {
        self.groups.clear();
        self.hops.clear();
        for g in groups {
            self.groups.push((self.hops.len() as u32, g.len() as u32));
            self.hops.extend(g);
        }
    }

    fn shortest_paths(&mut self, t: &Topology) {
        let ns = self.switches();
        let nh = self.hosts();
        // Hop distance between switches (BFS from each).
        let mut adj: Vec<Vec<(usize, usize)>> = vec![Vec::new(); ns]; // (port, peer switch)
        for (id, p) in self.ports.iter().enumerate() {
            if let Peer::Port(q) = p.peer {
                adj[p.switch].push((id, self.ports[q].switch));
            }
        }
        let mut dist = vec![vec![usize::MAX; ns]; ns];
        for (src, row) in dist.iter_mut().enumerate() {
            row[src] = 0;
            let mut q = VecDeque::from([src]);
            while let Some(u) = q.pop_front() {
                for &(_, v) in &adj[u] {
                    if row[v] == usize::MAX {
                        row[v] = row[u] + 1;
                        q.push_back(v);
                    }
                }
            }
        }
        let mut groups = Vec::with_capacity(ns * nh);
        for s in 0..ns {
            for h in 0..nh {
                let d = t.hosts[h].0;
                if d == s {
                    groups.push(vec![self.host_port[h] as u32]);
                    continue;
                }
                let here = dist[d][s];
                let g = if here == usize::MAX {
                    Vec::new()
                } else {
                    adj[s]
                        .iter()
                        .filter(|&&(_, v)| dist[d][v].saturating_add(1) == here)
                        .map(|&(port, _)| port as u32)
                        .collect()
                };
                groups.push(g);
            }
        }
        self.set_groups(groups);
    }

    fn clockwise(&mut self, t: &Topology) -> Result<(), TopologyError> {
        let ns = self.switches();
        let nh = self.hosts();
        let mut next = vec![None; ns];
        for (id, p) in self.ports.iter().enumerate() {
            if let Peer::Port(q) = p.peer {
                if self.ports[q].switch == (p.switch + 1) % ns {
                    next[p.switch] = Some(id as u32);
                }
            }
        }
        let mut groups = Vec::with_capacity(ns * nh);
        for (s, n) in next.iter().enumerate() {
            let n = n.ok_or(TopologyError::NotARing)?;
            for h in 0..nh {
                groups.push(if t.hosts[h].0 == s {
                    vec![self.host_port[h] as u32]
                } else {
                    vec![n]
                });
            }
        }
        self.set_groups(groups);
        Ok(())
    }

    /// A cyclic buffer dependency of the lossless class, if the routes
    /// allow one (the precondition of a PFC deadlock; Hu et al., "Deadlocks
    /// in Datacenter Networks: Why Do They Form, and How to Avoid Them",
    /// HotNets 2016): the switch-to-switch egress queues as nodes, an edge
    /// from queue a (into switch s) to queue b (out of s) when some packet
    /// that can reach s through a is routed out through b. Only states a
    /// packet from some host to some other host can reach are considered.
    /// Returns the ports of one cycle in order, or `None` (e.g. for every
    /// leaf-spine fabric under shortest-path routing: packets go up, then
    /// down, never up again).
    pub fn buffer_dependency_cycle(&self) -> Option<Vec<usize>> {
        let nh = self.hosts();
        let np = self.ports.len();
        // Reachable (egress port, destination) pairs: start at each source
        // host's switch with every other destination, follow the groups.
        let mut seen = vec![false; np * nh];
        let mut stack = Vec::new();
        for dst in 0..nh {
            let mut starts = vec![false; self.switches()];
            for src in 0..nh {
                if src != dst {
                    starts[self.host_switch(src)] = true;
                }
            }
            for (s, go) in starts.iter().enumerate() {
                if *go {
                    for &p in self.group(s, dst) {
                        let k = p as usize * nh + dst;
                        if !seen[k] {
                            seen[k] = true;
                            stack.push((p as usize, dst));
                        }
                    }
                }
            }
        }
        let mut edges: Vec<Vec<usize>> = vec![Vec::new(); np];
        while let Some((p, dst)) = stack.pop() {
            let Peer::Port(q) = self.ports[p].peer else {
                continue;
            };
            let s = self.ports[q].switch;
            for &b in self.group(s, dst) {
                let b = b as usize;
                if matches!(self.ports[b].peer, Peer::Port(_)) && !edges[p].contains(&b) {
                    edges[p].push(b);
                }
                let k = b * nh + dst;
                if !seen[k] {
                    seen[k] = true;
                    stack.push((b, dst));
                }
            }
        }
        find_cycle(&edges)
    }
}

/// One cycle of a directed graph given as adjacency lists (iterative DFS
/// with white/grey/black colours), or `None`.
pub(crate) fn find_cycle(edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    let n = edges.len();
    let mut colour = vec![0u8; n]; // 0 white, 1 grey (on the stack), 2 black
    let mut parent = vec![usize::MAX; n];
    for root in 0..n {
        if colour[root] != 0 {
            continue;
        }
        let mut stack = vec![(root, 0usize)];
        colour[root] = 1;
        while let Some(&mut (u, ref mut i)) = stack.last_mut() {
            if *i < edges[u].len() {
                let v = edges[u][*i];
                *i += 1;
                match colour[v] {
                    0 => {
                        colour[v] = 1;
                        parent[v] = u;
                        stack.push((v, 0));
                    }
                    1 => {
                        let mut cycle = vec![u];
                        let mut x = u;
                        while x != v {
                            x = parent[x];
                            cycle.push(x);
                        }
                        cycle.reverse();
                        return Some(cycle);
                    }
                    _ => {}
                }
            } else {
                colour[u] = 2;
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: LinkSpec = LinkSpec {
        gbps: 100.0,
        delay_ns: 1000,
    };

    #[test]
    fn single_switch_numbering() {
        let w = Wiring::new(&Topology::single(3, L)).unwrap();
        assert_eq!(w.host_port, vec![0, 1, 2]);
        assert_eq!(w.group(0, 2), &[2]);
        assert_eq!(w.buffer_dependency_cycle(), None);
    }

    #[test]
    fn clos_groups_are_up_down() {
        let c = ClosSpec {
            spines: 2,
            leaves: 3,
            hosts_per_leaf: 2,
            host: L,
            uplink: L,
        };
        let w = Wiring::new(&Topology::clos(&c)).unwrap();
        // Leaf 0: ports 0, 1 (hosts 0, 1), 2, 3 (spines); leaf 1: 4..8 ...
        assert_eq!(w.switch_ports[0], 0..4);
        assert_eq!(w.host_port[2], 4);
        // Leaf 0 toward host 2 (leaf 1): both uplinks.
        assert_eq!(w.group(0, 2), &[2, 3]);
        // Leaf 0 toward its own host 1: the host port.
        assert_eq!(w.group(0, 1), &[1]);
        // Spine 0 (switch 3) toward host 5 (leaf 2): its third port.
        let spine0 = w.switch_ports[3].clone();
        assert_eq!(w.group(3, 5), &[spine0.start as u32 + 2]);
        let Peer::Port(q) = w.ports[spine0.start + 2].peer else {
            panic!()
        };
        assert_eq!(w.ports[q].switch, 2);
        assert_eq!(c.oversubscription(), 1.0);
        assert_eq!(w.buffer_dependency_cycle(), None);
    }

    #[test]
    fn clockwise_ring_has_a_cycle_and_shortest_ring_of_three_has_none() {
        // Ring of 4, clockwise: s0->s1->s2 (hosts of s2) and s2->s3->s0 ...
        // every inter-switch queue waits on the next: one cycle of 4.
        let w = Wiring::new(&Topology::ring(4, 1, L, Routing::Clockwise)).unwrap();
        let c = w.buffer_dependency_cycle().expect("cycle");
        assert_eq!(c.len(), 4);
        let switches: Vec<usize> = c.iter().map(|&p| w.ports[p].switch).collect();
        let mut sorted = switches.clone();
        sorted.sort();
        assert_eq!(sorted, vec![0, 1, 2, 3]);
        // Ring of 3 by shortest path: every destination is one hop away, no
        // packet crosses two switch-to-switch links.
        let w = Wiring::new(&Topology::ring(3, 1, L, Routing::ShortestPath)).unwrap();
        assert_eq!(w.buffer_dependency_cycle(), None);
    }
}
