//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624):
//! the IPv4 header checksum (RFC 791) and the UDP checksum (RFC 768,
//! RFC 8200 §8.1). The one implementation in the workspace.
//!
//! The sum is accumulated in native-endian 32-bit words and swapped once at
//! the end:
//!
//! ```text
//! //= RFC 1071 §2 (B)
//! //# The sum of 16-bit integers can be computed in either byte order.
//! //= RFC 1071 §2 (C)
//! //# On machines that have word-sizes that are multiples of 16 bits, it is
//! //# possible to develop even more efficient implementations.
//! ```

/// A running one's-complement sum over a byte stream given in pieces of any
/// length (a piece may end on an odd byte; the stream is padded with one
/// zero byte at the end if its length is odd, RFC 768).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checksum {
    /// Sum of native-endian 16-bit words (as halves of 32-bit ones), unfolded.
    acc: u64,
    /// The last byte of an odd-length piece, waiting for its partner.
    odd: Option<u8>,
}

/// Add `data` to `acc` as native-endian words; returns the new sum and a
/// trailing odd byte. No overflow below 2^32 words (16 GiB).
#[inline(always)]
fn add_ne(mut acc: u64, data: &[u8]) -> (u64, Option<u8>) {
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        if let &[a, b, c, d] = w {
            acc += u64::from(u32::from_ne_bytes([a, b, c, d]));
        }
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        if let &[a, b] = p {
            acc += u64::from(u16::from_ne_bytes([a, b]));
        }
    }
    (acc, pairs.remainder().first().copied())
}

/// Fold a native-endian sum to 16 bits with end-around carries and put it
/// in network order (RFC 1071 §2 (B): the fold of byte-swapped words is the
/// byte-swapped fold).
#[inline(always)]
fn fold(mut acc: u64) -> u16 {
    acc = (acc >> 32) + (acc & 0xFFFF_FFFF);
    acc = (acc >> 32) + (acc & 0xFFFF_FFFF);
    acc = (acc >> 16) + (acc & 0xFFFF);
    acc = (acc >> 16) + (acc & 0xFFFF);
    u16::from_be(acc as u16)
}

impl Checksum {
    /// An empty sum.
    pub const fn new() -> Checksum {
        Checksum { acc: 0, odd: None }
    }

    /// Add the next bytes of the stream.
    #[inline]
    pub fn add(&mut self, mut data: &[u8]) {
        if let Some(hi) = self.odd.take() {
            let Some((lo, rest)) = data.split_first() else {
                self.odd = Some(hi);
                return;
            };
            self.acc += u64::from(u16::from_ne_bytes([hi, *lo]));
            data = rest;
        }
        let (acc, odd) = add_ne(self.acc, data);
        self.acc = acc;
        self.odd = odd;
    }

    /// The one's-complement sum of the stream so far, folded to 16 bits (an
    /// odd final byte padded with zero).
    #[inline]
    pub fn sum(&self) -> u16 {
        let mut acc = self.acc;
        if let Some(hi) = self.odd {
            acc += u64::from(u16::from_ne_bytes([hi, 0]));
        }
        fold(acc)
    }

    /// The checksum: the one's complement of [`Checksum::sum`].
    #[inline]
    pub fn finish(&self) -> u16 {
        !self.sum()
    }
}

/// The one's-complement sum of `data`, folded to 16 bits (an odd final byte
/// padded with zero).
#[inline(always)]
pub fn sum(data: &[u8]) -> u16 {
    let (mut acc, odd) = add_ne(0, data);
    if let Some(hi) = odd {
        acc += u64::from(u16::from_ne_bytes([hi, 0]));
    }
    fold(acc)
}

/// The checksum of `data` (its checksum field zero): `!sum(data)`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// Whether `data`, checksum field included, sums to all ones: what a
/// receiver checks (RFC 1071 §1 (3)).
#[inline(always)]
pub fn verify(data: &[u8]) -> bool {
    sum(data) == 0xFFFF
}

/// The checksum `hc` after one 16-bit word of the data changes from `old`
/// to `new`, without summing the data again.
pub fn update(hc: u16, old: u16, new: u16) -> u16 {
    //= RFC 1624 §3
    //# HC' = ~(~HC + ~m + m') -- [Eqn. 3]
    let mut s = u32::from(!hc) + u32::from(!old) + u32::from(new);
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    !(s as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 1071 §3's example: the words 0001 f203 f4f5 f6f7 sum to ddf2.
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
        // In pieces, odd ones included.
        let mut c = Checksum::new();
        for piece in [&data[..1], &data[1..4], &[], &data[4..7], &data[7..]] {
            c.add(piece);
        }
        assert_eq!(c.sum(), 0xddf2);
    }

    /// A textbook IPv4 header (checksum 0xb861, the worked example of
    /// Wikipedia's "IPv4 header checksum" article).
    #[test]
    fn ipv4_header_example() {
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&h), 0xb861);
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert!(verify(&h));
        assert_eq!(checksum(&h), 0);
        h[11] ^= 1;
        assert!(!verify(&h));
    }

    fn smoltcp_ipv4_ok(h: &[u8; 20]) -> bool {
        smoltcp::wire::Ipv4Packet::new_unchecked(&h[..]).verify_checksum()
    }

    /// The checksum of a UDP datagram as smoltcp computes it (an
    /// independent RFC 768 implementation).
    fn smoltcp_udp(src: [u8; 4], dst: [u8; 4], udp: &[u8]) -> u16 {
        use smoltcp::wire::{IpAddress, Ipv4Address, UdpPacket};
        let mut b = udp.to_vec();
        let mut p = UdpPacket::new_unchecked(&mut b[..]);
        p.fill_checksum(
            &IpAddress::Ipv4(Ipv4Address::from(src)),
            &IpAddress::Ipv4(Ipv4Address::from(dst)),
        );
        p.checksum()
    }

    proptest! {
        /// The IPv4 header check agrees with smoltcp's RFC 1071 code on
        /// arbitrary headers, half of them with a valid checksum.
        #[test]
        fn ipv4_verify_matches_smoltcp(h in any::<[u8; 20]>(), fix in any::<bool>()) {
            let mut h = h;
            h[0] = 0x45;
            if fix {
                h[10] = 0;
                h[11] = 0;
                smoltcp::wire::Ipv4Packet::new_unchecked(&mut h[..]).fill_checksum();
            }
            prop_assert_eq!(verify(&h), smoltcp_ipv4_ok(&h));
        }

        /// A pseudo header plus a datagram of any length, summed in pieces
        /// cut anywhere, gives smoltcp's UDP checksum.
        #[test]
        fn streamed_udp_checksum_matches_smoltcp(
            src in any::<[u8; 4]>(),
            dst in any::<[u8; 4]>(),
            body in proptest::collection::vec(any::<u8>(), 0..200),
            cuts in proptest::collection::vec(0usize..208, 0..5),
        ) {
            let len = 8 + body.len();
            let mut udp = vec![0x12, 0x34, 0x12, 0xb7, (len >> 8) as u8, len as u8, 0, 0];
            udp.extend_from_slice(&body);
            let mut c = Checksum::new();
            c.add(&src);
            c.add(&dst);
            c.add(&[0, 17]);
            c.add(&(len as u16).to_be_bytes());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for cut in cuts.into_iter().chain([len]) {
                c.add(&udp[at..cut]);
                at = cut;
            }
            let ours = match c.finish() {
                0 => 0xFFFF,
                v => v,
            };
            prop_assert_eq!(ours, smoltcp_udp(src, dst, &udp));
        }

        /// The incremental update equals summing again (RFC 1624 eqn. 3),
        /// whatever word changes.
        #[test]
        fn update_equals_recompute(h in any::<[u8; 20]>(), word in 0usize..10, new in any::<u16>()) {
            let mut h = h;
            h[10] = 0;
            h[11] = 0;
            let hc = checksum(&h);
            h[10..12].copy_from_slice(&hc.to_be_bytes());
            // Any word but the checksum itself.
            let at = if word == 5 { 4 } else { 2 * word };
            let old = u16::from_be_bytes([h[at], h[at + 1]]);
            let patched = update(hc, old, new);
            h[at..at + 2].copy_from_slice(&new.to_be_bytes());
            h[10..12].copy_from_slice(&patched.to_be_bytes());
            prop_assert!(verify(&h), "word {} := {:#x}", at / 2, new);
        }
    }
}
