//! Frame-level helpers of the fabric: priority classification, RED/ECN
//! marking (with the IPv4 header checksum fixed up), serialisation times.
//!
//! None of these parse more than the fixed header fields they need; they never
//! panic on short or malformed frames (such frames get priority 0 and are never
//! marked).

use roce_stack::wire::{L2Info, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MAC_CONTROL};

/// Ethernet FCS, bytes: not part of the frames the stack builds, but on the
/// wire.
pub const FCS_LEN: u64 = 4;
/// Preamble + start-of-frame delimiter (8 B) + minimum inter-frame gap (12 B):
/// the per-frame overhead on the wire besides the frame and its FCS
/// (IEEE 802.3 §4.4.2, §3.2.1).
pub const PREAMBLE_IFG_LEN: u64 = 20;
/// Minimum Ethernet frame without FCS (802.3 §3.2.8): shorter frames are
/// padded to it.
pub const MIN_FRAME_LEN: u64 = 60;

/// Bytes a frame of `len` bytes (without FCS, as the stack builds it) occupies
/// on the wire: padded to 60, plus FCS, preamble/SFD and inter-frame gap.
/// A 4096-byte-payload RC WRITE MIDDLE (4154 B) takes 4178 B; a PFC frame
/// (60 B) takes 84 B.
pub fn wire_bytes(len: usize) -> u64 {
    (len as u64).max(MIN_FRAME_LEN) + FCS_LEN + PREAMBLE_IFG_LEN
}

/// Serialisation time, picoseconds, of `wire_bytes` bytes at `gbps` Gbit/s
/// (rounded up to the picosecond).
pub fn serialisation_ps(wire_bytes: u64, gbps: f64) -> u64 {
    if gbps <= 0.0 {
        return 0;
    }
    // bits / (Gbit/s) = ns; ×1000 = ps.
    (wire_bytes as f64 * 8.0 * 1000.0 / gbps).ceil() as u64
}

/// Offset of the IP header and the EtherType, if the frame is IPv4 or IPv6.
fn ip_header(frame: &[u8]) -> Option<(usize, u16)> {
    let l2 = L2Info::parse(frame).ok()?;
    match l2.ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Some((l2.header_len(), l2.ethertype)),
        _ => None,
    }
}

/// The IP traffic class byte (IPv4 TOS, IPv6 traffic class): DSCP << 2 | ECN.
pub fn traffic_class(frame: &[u8]) -> Option<u8> {
    let (off, et) = ip_header(frame)?;
    match et {
        ETHERTYPE_IPV4 => frame.get(off + 1).copied(),
        _ => {
            let b = frame.get(off..off + 2)?;
            Some((b[0] << 4) | (b[1] >> 4))
        }
    }
}

/// The PFC priority of a frame as a port classifies it: the 802.1Q PCP when
/// the frame is tagged (trust PCP), else DSCP >> 3 (trust DSCP with the
/// default DSCP→priority map, ROCEV2-DIGEST §7: DSCP 26 → 3, DSCP 48 → 6);
/// anything else (MAC control, ARP, malformed) is priority 0.
pub fn priority(frame: &[u8]) -> u8 {
    let Ok(l2) = L2Info::parse(frame) else {
        return 0;
    };
    if let Some(tag) = l2.vlan {
        return tag.pcp & 7;
    }
    traffic_class(frame).map_or(0, |tc| tc >> 5)
}

/// Whether `frame` is a MAC control frame (PAUSE/PFC, EtherType 0x8808).
pub fn is_mac_control(frame: &[u8]) -> bool {
    L2Info::parse(frame).is_ok_and(|l2| l2.ethertype == ETHERTYPE_MAC_CONTROL)
}

/// The ECN field of an IP frame (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE; RFC 3168 §5).
pub fn ecn(frame: &[u8]) -> Option<u8> {
    traffic_class(frame).map(|tc| tc & 3)
}

/// What a switch reads from a frame, from one parse of its Ethernet header:
/// whether it is MAC control (PAUSE/PFC), its PFC priority (as
/// [`priority`]), and its destination MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    /// EtherType 0x8808.
    pub mac_control: bool,
    /// PFC priority (0 for MAC control, ARP and malformed frames).
    pub prio: u8,
    /// Destination MAC (zeros if the frame is shorter than 6 bytes).
    pub dst: [u8; 6],
}

/// Classify `frame` in one pass (same answers as [`is_mac_control`] and
/// [`priority`]).
pub fn classify(frame: &[u8]) -> FrameInfo {
    let mut dst = [0u8; 6];
    if let Some(d) = frame.get(..6) {
        dst.copy_from_slice(d);
    }
    let Ok(l2) = L2Info::parse(frame) else {
        return FrameInfo {
            mac_control: false,
            prio: 0,
            dst,
        };
    };
    let mac_control = l2.ethertype == ETHERTYPE_MAC_CONTROL;
    let prio = if let Some(tag) = l2.vlan {
        tag.pcp & 7
    } else {
        let off = l2.header_len();
        match l2.ethertype {
            ETHERTYPE_IPV4 => frame.get(off + 1).map_or(0, |tc| tc >> 5),
            ETHERTYPE_IPV6 => frame
                .get(off..off + 2)
                .map_or(0, |b| ((b[0] << 4) | (b[1] >> 4)) >> 5),
            _ => 0,
        }
    };
    FrameInfo {
        mac_control,
        prio,
        dst,
    }
}

/// The bytes ECMP hashes: source address, destination address, IP protocol,
/// source port, destination port, in network byte order (13 bytes for IPv4,
/// 37 for IPv6; the ports are 0 for protocols other than UDP and TCP).
/// Written to `out`; returns the length, or `None` for a frame that is not
/// IP or too short. For RoCEv2 the destination port is 4791 and the source
/// port is the per-QP entropy (ROCEV2-DIGEST §1).
pub fn five_tuple(frame: &[u8], out: &mut [u8; 37]) -> Option<usize> {
    let (off, et) = ip_header(frame)?;
    let (n, proto, l4) = match et {
        ETHERTYPE_IPV4 => {
            let h = frame.get(off..off + 20)?;
            let ihl = usize::from(h[0] & 0x0F) * 4;
            out[..4].copy_from_slice(&h[12..16]);
            out[4..8].copy_from_slice(&h[16..20]);
            (8, h[9], off + ihl.max(20))
        }
        _ => {
            let h = frame.get(off..off + 40)?;
            out[..32].copy_from_slice(&h[8..40]);
            (32, h[6], off + 40)
        }
    };
    out[n] = proto;
    let ports = match proto {
        6 | 17 => frame.get(l4..l4 + 4).unwrap_or(&[0; 4]),
        _ => &[0; 4],
    };
    out[n + 1..n + 5].copy_from_slice(ports);
    Some(n + 5)
}

/// The ECMP hash of a frame: CRC-32 (IEEE 802.3 polynomial, reflected, as
/// zlib's `crc32`) over its [`five_tuple`] bytes; 0 for non-IP frames.
/// Switch ASICs hash the same fields with CRC-based functions (the exact
/// polynomial and seeding are vendor-specific; this one is documented so a
/// path can be worked out by hand: `zlib.crc32(bytes) % group size`).
pub fn ecmp_hash(frame: &[u8]) -> u32 {
    let mut key = [0u8; 37];
    match five_tuple(frame, &mut key) {
        Some(n) => crc32fast::hash(&key[..n]),
        None => 0,
    }
}

/// [`ecmp_hash`] of an IPv4 five-tuple given by its fields.
pub fn ecmp_hash_v4(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    proto: u8,
    sport: u16,
    dport: u16,
) -> u32 {
    let mut key = [0u8; 13];
    key[..4].copy_from_slice(&src.octets());
    key[4..8].copy_from_slice(&dst.octets());
    key[8] = proto;
    key[9..11].copy_from_slice(&sport.to_be_bytes());
    key[11..13].copy_from_slice(&dport.to_be_bytes());
    crc32fast::hash(&key)
}

/// Which of `n` equal-cost next hops `frame` takes: [`ecmp_hash`] mod `n`.
pub fn ecmp_index(frame: &[u8], n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    (ecmp_hash(frame) % n as u32) as usize
}

/// RFC 1071 Internet checksum of `data` (an even number of bytes).
pub fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for w in data.chunks(2) {
        let hi = u32::from(w[0]) << 8;
        let lo = u32::from(w.get(1).copied().unwrap_or(0));
        sum += hi | lo;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Set the ECN field of an ECT frame (ECT(0) or ECT(1)) to CE (11), as a
/// RED/ECN switch does (RFC 3168 §5), and for IPv4 recompute the header
/// checksum (RFC 1071 over the IHL·4 header bytes). The ICRC needs no change:
/// the IP ECN bits are masked out of it (IBTA RoCEv2 Annex A17.4.1).
/// Returns whether the frame was marked; Not-ECT and already-CE frames, and
/// anything that is not IP, are left alone.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    let Some((off, et)) = ip_header(frame) else {
        return false;
    };
    match et {
        ETHERTYPE_IPV4 => {
            let Some(&vihl) = frame.get(off) else {
                return false;
            };
            let ihl = usize::from(vihl & 0x0F) * 4;
            if ihl < 20 || frame.len() < off + ihl {
                return false;
            }
            let tos = frame[off + 1];
            if !matches!(tos & 3, 1 | 2) {
                return false;
            }
            frame[off + 1] = tos | 3;
            frame[off + 10] = 0;
            frame[off + 11] = 0;
            let c = internet_checksum(&frame[off..off + ihl]);
            frame[off + 10..off + 12].copy_from_slice(&c.to_be_bytes());
            true
        }
        _ => {
            // IPv6: traffic class spans bytes 0..2; ECN = bits 4..5 of byte 1.
            let Some(b1) = frame.get(off + 1).copied() else {
                return false;
            };
            let ecn = (b1 >> 4) & 3;
            if !matches!(ecn, 1 | 2) {
                return false;
            }
            frame[off + 1] = b1 | 0x30;
            true
        }
    }
}

/// RED-style ECN marking at a switch egress queue (the DCQCN congestion
/// point, ROCEV2-DIGEST §6; Zhu et al., SIGCOMM 2015 §3.1): the marking
/// probability is 0 up to `kmin_bytes`, rises linearly to `pmax` at
/// `kmax_bytes`, and is 1 above `kmax_bytes`. It is applied to the
/// instantaneous queue depth (no averaging), as DCQCN recommends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedEcn {
    /// Queue depth where marking starts, bytes (Kmin).
    pub kmin_bytes: u64,
    /// Queue depth where the probability reaches `pmax`, bytes (Kmax).
    pub kmax_bytes: u64,
    /// Marking probability at Kmax (Pmax), 0..=1.
    pub pmax: f64,
}

impl RedEcn {
    /// Marking probability at a queue depth of `queue_bytes`.
    pub fn probability(&self, queue_bytes: u64) -> f64 {
        if queue_bytes <= self.kmin_bytes {
            0.0
        } else if queue_bytes > self.kmax_bytes {
            1.0
        } else {
            let span = (self.kmax_bytes - self.kmin_bytes).max(1) as f64;
            self.pmax * (queue_bytes - self.kmin_bytes) as f64 / span
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_textbook_header() {
        // The classic worked example (e.g. RFC 1071 §3 style / Wikipedia
        // "IPv4 header checksum"): 4500 0073 0000 4000 4011 [b861] c0a8 0001
        // c0a8 00c7 → checksum 0xb861.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&h), 0xb861);
        h[10] = 0xb8;
        h[11] = 0x61;
        assert_eq!(internet_checksum(&h), 0);
    }

    #[test]
    fn red_probability_shape() {
        let r = RedEcn {
            kmin_bytes: 100,
            kmax_bytes: 300,
            pmax: 0.2,
        };
        assert_eq!(r.probability(0), 0.0);
        assert_eq!(r.probability(100), 0.0);
        assert!((r.probability(200) - 0.1).abs() < 1e-12);
        assert!((r.probability(300) - 0.2).abs() < 1e-12);
        assert_eq!(r.probability(301), 1.0);
    }

    #[test]
    fn ecmp_hash_is_zlib_crc32_of_the_five_tuple() {
        // python3: zlib.crc32(bytes([10,0,0,1, 10,0,0,2, 17]) +
        //   struct.pack('>HH', 0xC121, 4791)) == 0x85002d75
        let h = ecmp_hash_v4(
            std::net::Ipv4Addr::new(10, 0, 0, 1),
            std::net::Ipv4Addr::new(10, 0, 0, 2),
            17,
            0xC121,
            4791,
        );
        assert_eq!(h, 0x8500_2d75);
    }

    #[test]
    fn wire_overheads() {
        assert_eq!(wire_bytes(60), 84);
        assert_eq!(wire_bytes(10), 84);
        assert_eq!(wire_bytes(4154), 4178);
        // 84 B at 100 Gbit/s = 6.72 ns.
        assert_eq!(serialisation_ps(84, 100.0), 6720);
    }
}
