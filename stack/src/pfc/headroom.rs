//! PFC headroom: the buffer a lossless priority needs *above* its XOFF
//! threshold to absorb what still arrives after XOFF is decided.
//!
//! Formula (ROCEV2-DIGEST §7 "Thresholds"; Cisco white paper "Priority Flow
//! Control: Build Reliable Layer 2 Infrastructure"; Mellanox community note
//! "HowTo tune receive buffers on Mellanox adapter cards"), in bits:
//!
//! ```text
//! headroom = MTU_R              frame R is already sending when XOFF trips
//!                                (a PAUSE frame does not pre-empt it)
//!          + PAUSE              the XOFF itself: 64 B + 8 B preamble/SFD
//!                                + 12 B IFG = 672 bit times
//!          + 2 × cable × rate   XOFF travelling to S, and the bits S already
//!                                put on the cable travelling back (≈5 ns/m)
//!          + D_intf             interface (PHY/MAC) delays
//!          + D_resp             S's response time to the PFC frame
//!          + MTU_S              frame S is already sending when it reacts
//! ```
//!
//! Each term is a time × the link rate, i.e. a number of bit times; the sum is
//! rounded up to whole bytes. The MTUs are frame sizes in bytes; with
//! [`HeadroomParams::ieee`] each also carries the 20 bytes of preamble, SFD and
//! inter-frame gap that occupy the wire with it.
//!
//! **Mellanox's 100 GbE / 100 m example** (third-party notes quoted in the
//! digest; copper at 0.7 c = 476 ns per 100 m; response time 60 quanta =
//! 512 × 60 bits; no separate PAUSE or interface term; MTUs without overhead):
//! `MTU_S + MTU_R + 2 × 100 Gb/s × 476 ns + 512 × 60 bits`, i.e.
//! `MTU_S + MTU_R + 11,900 B + 3,840 B`; [`HeadroomParams::mellanox_example`].
//!
//! The per-speed upper bounds of D_intf and D_resp in [`DELAY_UPPER_BOUNDS`]
//! are IEEE 802.3 / 802.1Qbb (Annex N) values as summarised by a third party
//! (Cisco Press's storage-networking chapter on PFC headroom, "D-Intf" and
//! "D-Resp"); they are **not verified** against the standards here.

use super::ingress::Thresholds;

/// Bits on the wire for one PAUSE/PFC frame: 64 bytes (60 + FCS) + 8 bytes
/// preamble/SFD + 12 bytes inter-frame gap = 84 bytes = 672 bit times.
pub const PAUSE_FRAME_BITS: u64 = 84 * 8;
/// Bytes of preamble, SFD and inter-frame gap around each frame (8 + 12).
pub const FRAME_OVERHEAD_BYTES: u64 = 20;
/// Default cable propagation delay, picoseconds per metre (≈5 ns/m,
/// ROCEV2-DIGEST §7).
pub const CABLE_PS_PER_M: u64 = 5_000;
/// Propagation in twin-ax copper at 0.7 c: 476 ns per 100 m (Cisco white paper,
/// used in Mellanox's example), picoseconds per metre.
pub const COPPER_PS_PER_M: u64 = 4_760;

/// Upper bounds of the interface and PFC-response delays at one link speed,
/// bit times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DelayBounds {
    /// Link speed, Mbit/s.
    pub link_mbps: u64,
    /// Interface delay (802.3 PHY/MAC), bit times.
    pub interface_bits: u64,
    /// Response delay of the paused sender (802.1Qbb Annex N), bit times.
    pub response_bits: u64,
}

/// Per-speed delay upper bounds, bit times (see the module docs for the
/// source and its caveat): 10, 25, 40 and 100 Gbit/s.
pub const DELAY_UPPER_BOUNDS: [DelayBounds; 4] = [
    DelayBounds {
        link_mbps: 10_000,
        interface_bits: 8_192,
        response_bits: 30_720,
    },
    DelayBounds {
        link_mbps: 25_000,
        interface_bits: 6_144,
        response_bits: 40_960,
    },
    DelayBounds {
        link_mbps: 40_000,
        interface_bits: 24_576,
        response_bits: 60_416,
    },
    DelayBounds {
        link_mbps: 100_000,
        interface_bits: 122_880,
        response_bits: 201_728,
    },
];

/// The delay bounds for `link_mbps`, if the table has that speed.
pub fn delay_upper_bounds(link_mbps: u64) -> Option<DelayBounds> {
    DELAY_UPPER_BOUNDS
        .iter()
        .find(|d| d.link_mbps == link_mbps)
        .copied()
}

/// Inputs of the headroom formula (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeadroomParams {
    /// Link speed, Mbit/s.
    pub link_mbps: u64,
    /// Largest frame the sender S may be transmitting when it reacts, bytes.
    pub mtu_sender: u64,
    /// Largest frame the receiver R may be transmitting when XOFF trips, bytes.
    pub mtu_receiver: u64,
    /// Bytes added to each MTU frame on the wire (preamble, SFD, IFG): 20, or 0
    /// to follow the Mellanox example.
    pub frame_overhead: u64,
    /// Cable length, metres.
    pub cable_m: u64,
    /// Propagation delay, picoseconds per metre.
    pub cable_ps_per_m: u64,
    /// The XOFF frame's own time on the wire, bit times (672, or 0).
    pub pause_frame_bits: u64,
    /// Interface delays, bit times.
    pub interface_delay_bits: u64,
    /// Sender response delay, bit times.
    pub response_delay_bits: u64,
}

impl HeadroomParams {
    /// The full formula: 20 bytes of overhead per MTU frame, 5 ns/m, the
    /// PAUSE frame time, and the delay bounds of [`DELAY_UPPER_BOUNDS`]
    /// (interface delay counted once, as the digest lists it). `None` if the
    /// table has no entry for `link_mbps`.
    pub fn ieee(
        link_mbps: u64,
        mtu_sender: u64,
        mtu_receiver: u64,
        cable_m: u64,
    ) -> Option<HeadroomParams> {
        let d = delay_upper_bounds(link_mbps)?;
        Some(HeadroomParams {
            link_mbps,
            mtu_sender,
            mtu_receiver,
            frame_overhead: FRAME_OVERHEAD_BYTES,
            cable_m,
            cable_ps_per_m: CABLE_PS_PER_M,
            pause_frame_bits: PAUSE_FRAME_BITS,
            interface_delay_bits: d.interface_bits,
            response_delay_bits: d.response_bits,
        })
    }

    /// The terms of Mellanox's example: MTUs without overhead, copper at
    /// 476 ns / 100 m, response 512 × 60 bits, no PAUSE or interface term.
    pub fn mellanox_example(
        link_mbps: u64,
        mtu_sender: u64,
        mtu_receiver: u64,
        cable_m: u64,
    ) -> HeadroomParams {
        HeadroomParams {
            link_mbps,
            mtu_sender,
            mtu_receiver,
            frame_overhead: 0,
            cable_m,
            cable_ps_per_m: COPPER_PS_PER_M,
            pause_frame_bits: 0,
            interface_delay_bits: 0,
            response_delay_bits: 512 * 60,
        }
    }

    /// Evaluate the formula. Saturates instead of overflowing.
    pub fn compute(&self) -> Headroom {
        let frame_bits = |mtu: u64| mtu.saturating_add(self.frame_overhead).saturating_mul(8);
        // bits = 2 × m × ps/m × Mbit/s × 1e-6, rounded up.
        let cable =
            2u128 * self.cable_m as u128 * self.cable_ps_per_m as u128 * self.link_mbps as u128;
        let cable_bits = cable.div_ceil(1_000_000).min(u64::MAX as u128) as u64;
        Headroom {
            mtu_receiver_bits: frame_bits(self.mtu_receiver),
            pause_frame_bits: self.pause_frame_bits,
            cable_bits,
            interface_bits: self.interface_delay_bits,
            response_bits: self.response_delay_bits,
            mtu_sender_bits: frame_bits(self.mtu_sender),
        }
    }
}

/// The headroom formula's terms, bit times (= bits at the link rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Headroom {
    /// The receiver's frame in progress.
    pub mtu_receiver_bits: u64,
    /// The XOFF frame itself.
    pub pause_frame_bits: u64,
    /// Round trip on the cable.
    pub cable_bits: u64,
    /// Interface delays.
    pub interface_bits: u64,
    /// Sender response delay.
    pub response_bits: u64,
    /// The sender's frame in progress.
    pub mtu_sender_bits: u64,
}

impl Headroom {
    /// Sum of the terms, bits.
    pub fn total_bits(&self) -> u64 {
        [
            self.mtu_receiver_bits,
            self.pause_frame_bits,
            self.cable_bits,
            self.interface_bits,
            self.response_bits,
            self.mtu_sender_bits,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// The headroom, bytes (total bits / 8, rounded up).
    pub fn bytes(&self) -> u64 {
        self.total_bits().div_ceil(8)
    }

    /// XOFF/XON thresholds for a lossless priority given `buffer` bytes for it:
    /// XOFF = buffer − headroom, XON = XOFF − `hysteresis` (at least 1 byte).
    /// `None` if the buffer does not exceed the headroom plus the hysteresis.
    pub fn thresholds(&self, buffer: u64, hysteresis: u64) -> Option<Thresholds> {
        let xoff = buffer.checked_sub(self.bytes())?;
        let xon = xoff.checked_sub(hysteresis.max(1)).filter(|x| *x > 0)?;
        Some(Thresholds::new(xoff, xon))
    }
}
