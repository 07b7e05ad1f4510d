//! PFC (IEEE 802.1Qbb) in the fabric, on top of the stack's sans-IO PFC
//! machines ([`roce_stack::pfc`]): each switch port runs a
//! [`PfcGenerator`] over the bytes received on it and still buffered (per
//! ingress port and priority), which sends XOFF toward the port's host,
//! refreshes it at half the pause time and sends XON; each host NIC runs a
//! [`PauseState`] that honours what it receives (ROCEV2-DIGEST §7).
//!
//! This module adds the fabric's configuration, the headroom that makes the
//! shared buffer lossless, and the bookkeeping of pause episodes for the
//! time series.

use roce_stack::pfc::{
    GeneratorConfig, HeadroomParams, PauseConfig, PauseState, PfcGenerator, RxPauseCounters,
    Thresholds,
};
use roce_stack::time::Instant;

use crate::fabric::{Ps, PS_PER_NS};
use crate::metrics::Bins;

/// Switch PFC settings (one set for every port).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PfcConfig {
    /// Lossless priorities, bit n = priority n (RoCE data on 3: 0x08).
    pub priorities: u8,
    /// Ingress bytes (per port and priority) at which XOFF is sent
    /// (`queue >= xoff`).
    pub xoff_bytes: u64,
    /// Ingress bytes below which XON is sent (`queue < xon`).
    pub xon_bytes: u64,
    /// Pause time carried by XOFF, quanta of 512 bit times (0xFFFF =
    /// 335.5 µs at 100 Gbit/s); refreshed at half of it while congested.
    pub quanta: u16,
}

impl PfcConfig {
    /// Priority 3 lossless, XOFF at `xoff_bytes`, XON two 4 KB-MTU frames
    /// (8400 bytes) lower, the maximum quanta.
    pub fn lossless_prio3(xoff_bytes: u64) -> PfcConfig {
        PfcConfig {
            priorities: 1 << 3,
            xoff_bytes,
            xon_bytes: xoff_bytes.saturating_sub(2 * 4200).max(1),
            quanta: u16::MAX,
        }
    }

    /// The generator configuration for a switch port with MAC `mac` on a
    /// link of `link_mbps`.
    pub fn generator(&self, mac: [u8; 6], link_mbps: u64) -> GeneratorConfig {
        let mut th = Thresholds::new(self.xoff_bytes, self.xon_bytes);
        th.quanta = self.quanta;
        GeneratorConfig::pfc(mac, link_mbps, self.priorities, th)
    }
}

/// A switch port's PFC generator: `cfg`'s, or one that only counts (PFC off).
/// A configuration the generator rejects (XON not below XOFF, zero quanta)
/// also gives the counting one.
pub fn port_generator(cfg: Option<&PfcConfig>, mac: [u8; 6], link_mbps: u64) -> PfcGenerator {
    cfg.and_then(|c| PfcGenerator::new(c.generator(mac, link_mbps)).ok())
        .or_else(|| PfcGenerator::new(GeneratorConfig::off(mac, link_mbps)).ok())
        .unwrap_or_else(|| unreachable_generator(mac, link_mbps))
}

fn unreachable_generator(mac: [u8; 6], link_mbps: u64) -> PfcGenerator {
    // GeneratorConfig::off always validates; keep a total function anyway.
    let th = Thresholds::new(2, 1);
    match PfcGenerator::new(GeneratorConfig::pfc(mac, link_mbps.max(1), 0, th)) {
        Ok(g) => g,
        Err(e) => panic!("PFC generator config rejected: {e}"),
    }
}

/// PFC headroom per lossless ingress port and priority, bytes: what still
/// arrives after XOFF trips (IEEE formula of [`HeadroomParams::ieee`]: both
/// link ends' frames in progress, the XOFF frame, the interface and response
/// delay bounds, and the cable round trip for a propagation delay of
/// `prop_delay_ns` at 5 ns/m). Falls back to the Mellanox-example terms for a
/// speed the IEEE table lacks.
pub fn headroom_bytes(link_gbps: f64, max_frame_bytes: u64, prop_delay_ns: u64) -> u64 {
    let mbps = (link_gbps * 1000.0).round() as u64;
    let cable_m = prop_delay_ns.div_ceil(5);
    HeadroomParams::ieee(mbps, max_frame_bytes, max_frame_bytes, cable_m)
        .unwrap_or_else(|| {
            HeadroomParams::mellanox_example(mbps, max_frame_bytes, max_frame_bytes, cable_m)
        })
        .compute()
        .bytes()
}

/// A transmitter's PFC honouring ([`PauseState`]) plus the pause episodes
/// for the time series: a host NIC's, or a switch egress port's toward
/// another switch.
#[derive(Debug, Clone)]
pub struct HostPause {
    state: PauseState,
    since: [Option<Ps>; 8],
    until: [Ps; 8],
    total: [Ps; 8],
    /// Pause episodes (a priority went from running to paused).
    pub episodes: u64,
    /// This link's own paused time per bin (ps, summed over priorities).
    own: Bins,
}

/// Default width of a link's own pause bins (10 µs).
const OWN_BIN_PS: Ps = 10 * 1_000_000;

fn inst(ps: Ps) -> Instant {
    Instant::from_nanos(ps / PS_PER_NS)
}

impl HostPause {
    /// Honouring PFC on `priorities` (bit n = priority n; 0 = PFC off, every
    /// PFC frame ignored) on a link of `link_gbps`.
    pub fn new(link_gbps: f64, priorities: u8) -> HostPause {
        let mbps = (link_gbps * 1000.0).round() as u64;
        let cfg = if priorities == 0 {
            PauseConfig::off(mbps)
        } else {
            PauseConfig::pfc(mbps, priorities)
        };
        HostPause {
            state: PauseState::new(cfg),
            since: [None; 8],
            until: [0; 8],
            total: [0; 8],
            episodes: 0,
            own: Bins::new(OWN_BIN_PS),
        }
    }

    /// Width of this link's own pause bins, ps (default 10 µs).
    pub fn set_bin_ps(&mut self, width_ps: Ps) {
        self.own = Bins::new(width_ps);
    }

    /// This link's paused time per bin, ps (closed episodes).
    pub fn bins(&self) -> &Bins {
        &self.own
    }

    /// When the pause of `prio` ends, ps (as of the last frame or settle),
    /// or `None`.
    pub fn resume_at_ps(&self, prio: u8) -> Option<Ps> {
        self.state.resume_at(prio).map(|t| t.as_nanos() * PS_PER_NS)
    }

    /// Whether any priority is paused at `now`.
    #[inline]
    pub fn any_paused(&self, now: Ps) -> bool {
        self.state.poll_timeout().is_some() && self.state.paused_mask(inst(now)) != 0
    }

    /// The stack's receive-side pause counters (mlx5 names:
    /// `rx_prio3_pause`, `rx_prio3_pause_duration`, ...).
    pub fn counters(&self) -> &RxPauseCounters {
        self.state.counters()
    }

    /// Whether `prio` may not start a frame at `now`.
    pub fn is_paused(&self, prio: u8, now: Ps) -> bool {
        self.state.is_paused(prio, inst(now))
    }

    /// Close the episodes whose pause ran out by `now` (into the totals and
    /// `bins`).
    pub fn settle(&mut self, now: Ps, bins: &mut Bins) {
        self.state.handle_timeout(inst(now));
        for p in 0..8u8 {
            let i = p as usize;
            if let Some(s) = self.since[i] {
                if !self.is_paused(p, now) {
                    let end = self.until[i].clamp(s, now);
                    self.total[i] += end - s;
                    bins.add_interval(s, end);
                    self.own.add_interval(s, end);
                    self.since[i] = None;
                }
            }
        }
    }

    /// Process a MAC control frame received at `now`. Returns when to try
    /// transmitting again if a priority is paused (its resume time), and
    /// whether anything resumed now.
    pub fn on_frame(&mut self, frame: &[u8], now: Ps, bins: &mut Bins) -> (Option<Ps>, bool) {
        self.settle(now, bins);
        let before: [bool; 8] = std::array::from_fn(|p| self.is_paused(p as u8, now));
        self.state.handle_frame(inst(now), frame);
        let mut wake = None;
        let mut resumed = false;
        for p in 0..8u8 {
            let i = p as usize;
            let paused = self.is_paused(p, now);
            if paused {
                let until = self
                    .state
                    .resume_at(p)
                    .map_or(now, |t| t.as_nanos() * PS_PER_NS);
                self.until[i] = until;
                wake = Some(wake.map_or(until, |w: Ps| w.max(until)));
                if !before[i] {
                    self.since[i] = Some(now);
                    self.episodes += 1;
                }
            } else if before[i] {
                resumed = true;
                if let Some(s) = self.since[i].take() {
                    self.total[i] += now - s;
                    bins.add_interval(s, now);
                    self.own.add_interval(s, now);
                }
            }
        }
        (wake, resumed)
    }

    /// Total time paused up to `now`, ps, summed over priorities (open
    /// episodes counted up to `now`).
    pub fn total_ps(&self, now: Ps) -> Ps {
        (0..8)
            .map(|p| {
                self.total[p]
                    + self.since[p].map_or(0, |s| self.until[p].min(now).saturating_sub(s))
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_stack::wire::pfc::{MacControl, PfcRepr};

    fn pfc(r: PfcRepr) -> Vec<u8> {
        let mut b = vec![0u8; 60];
        MacControl::Pfc(r).emit([2, 0, 0, 0, 0, 9], &mut b).unwrap();
        b
    }

    #[test]
    fn host_pause_episode_bookkeeping() {
        // 1000 quanta at 100 Gbit/s = 5.12 µs (ROCEV2-DIGEST §7: 5.12 ns each).
        let mut h = HostPause::new(100.0, 1 << 3);
        let mut bins = Bins::new(1_000_000);
        let (w, _) = h.on_frame(&pfc(PfcRepr::xoff(3, 1000)), 0, &mut bins);
        assert_eq!(w, Some(5_120_000));
        assert!(h.is_paused(3, 5_119_000));
        assert!(!h.is_paused(3, 5_120_000));
        assert!(!h.is_paused(0, 0));
        // A refresh before the end extends the episode; XON ends it at once.
        h.on_frame(&pfc(PfcRepr::xoff(3, 1000)), 4_000_000, &mut bins);
        assert!(h.is_paused(3, 6_000_000));
        let (_, resumed) = h.on_frame(&pfc(PfcRepr::xon(3)), 7_000_000, &mut bins);
        assert!(resumed);
        assert!(!h.is_paused(3, 7_000_000));
        assert_eq!(h.total_ps(10_000_000), 7_000_000);
        assert_eq!(bins.sum(0, 10_000_000), 7_000_000.0);
        assert_eq!(h.episodes, 1);
        // A second episode that simply runs out.
        h.on_frame(&pfc(PfcRepr::xoff(3, 1000)), 20_000_000, &mut bins);
        h.settle(30_000_000, &mut bins);
        assert_eq!(h.total_ps(30_000_000), 7_000_000 + 5_120_000);
        assert_eq!(h.episodes, 2);
        // Priority 0 is not enabled: ignored.
        let (w, _) = h.on_frame(&pfc(PfcRepr::xoff(0, 1000)), 40_000_000, &mut bins);
        assert_eq!(w, None);
    }

    #[test]
    fn headroom_covers_the_digest_terms() {
        // ROCEV2-DIGEST §7: at least MTU_R + PAUSE (84 B) + 2 x cable x rate
        // + MTU_S; 1 µs of propagation = 200 m at 5 ns/m, and 2 x 1 µs x
        // 100 Gbit/s = 25,000 bytes; each 4154-byte frame with 20 bytes of
        // preamble/IFG. The interface and response bounds come on top.
        let h = headroom_bytes(100.0, 4154, 1000);
        assert!(h >= 2 * 4174 + 84 + 25_000, "{h}");
        let ieee = HeadroomParams::ieee(100_000, 4154, 4154, 200)
            .unwrap()
            .compute()
            .bytes();
        assert_eq!(h, ieee);
    }
}
