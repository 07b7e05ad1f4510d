//! Invariant CRC (ICRC), IBTA 1.7 §7.8.1 and RoCEv2 Annex A17.4.
//!
//! The ICRC is the Ethernet CRC-32 (polynomial 0x04C11DB7, reflected, initial
//! value and final XOR all-ones, i.e. `zlib.crc32`) over a pseudo packet:
//!
//! ```text
//! FF x 8 (stands in for the LRH) | IP header or GRH | UDP header (RoCEv2 only)
//!        | BTH | extension headers | payload | pad
//! ```
//!
//! with the fields that change in flight forced to all-ones:
//!
//! | Header | Masked |
//! |---|---|
//! | IPv4 | TOS (DSCP+ECN), TTL, header checksum |
//! | IPv6 / GRH | Traffic Class, Flow Label, Hop Limit |
//! | UDP | checksum |
//! | BTH | byte 4 (FECN, BECN, Resv6a) |
//!
//! The Ethernet and VLAN headers and the FCS are not covered. On the wire the
//! 32-bit value goes least-significant byte first (like the Ethernet FCS), so
//! [`compute`] returns the value and callers store `crc.to_le_bytes()`.
//!
//! The data path uses `crc32fast`'s streaming hasher, in one call over the
//! region **in place**: the masking is folded into the hasher's initial value
//! instead of into a copy of the bytes. The CRC register is linear in the data
//! and the initial value, so forcing a byte at offset `j` of the region from
//! `b` to `b | m` changes the result exactly as XOR-ing the register, before
//! the first byte, with `U_j[!b & m]`, where `U_j[d]` is the one-byte CRC step
//! of `d` shifted back by `j + 1` zero bytes (the inverse of the CRC's
//! multiplication by `x^8` modulo the polynomial). The tables `U_j` for the
//! masked offsets are built at compile time; per packet the correction costs
//! one table load per masked byte (7 for IPv4), so an ICRC costs what a bare
//! `crc32fast::hash` of the same bytes costs, plus those loads. The eight 0xFF
//! bytes are folded into [`SEED`]. Nothing allocates and nothing is copied.

use crate::wire::{bth, Error};

/// Which network header precedes the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcForm {
    /// RoCEv2 over IPv4: 20-byte IPv4 header (no options), UDP, BTH.
    Ipv4,
    /// RoCEv2 over IPv6: 40-byte IPv6 header, UDP, BTH.
    Ipv6,
    /// RoCEv1: 40-byte GRH, BTH (no UDP).
    Grh,
}

impl IcrcForm {
    /// Bytes of network (+ UDP) header before the BTH.
    pub const fn net_len(self) -> usize {
        match self {
            IcrcForm::Ipv4 => 20 + 8,
            IcrcForm::Ipv6 => 40 + 8,
            IcrcForm::Grh => 40,
        }
    }

    /// Bytes of the header prefix that gets masked: network header (+ UDP) + BTH.
    pub const fn masked_len(self) -> usize {
        self.net_len() + bth::HEADER_LEN
    }
}

/// `crc32fast::hash(&[0xFF; 8])`: the CRC state after the eight all-ones bytes
/// that replace the LRH, used as the hasher's initial value. (Its raw register,
/// before the final inversion, is 0xDEBB20E3, the seed rxe uses.)
pub const SEED: u32 = 0x2144_DF1C;

/// The reflected CRC-32 polynomial (0x04C11DB7 bit-reversed).
const POLY: u32 = 0xEDB8_8320;

/// One bit of the reflected CRC register's update with a zero data bit.
const fn step_bit(r: u32) -> u32 {
    if r & 1 != 0 {
        (r >> 1) ^ POLY
    } else {
        r >> 1
    }
}

/// The inverse of [`step_bit`]: the register one zero bit earlier. `POLY` has
/// its top bit set and `r >> 1` never does, so the top bit tells which branch
/// `step_bit` took.
const fn unstep_bit(r: u32) -> u32 {
    if r & 0x8000_0000 != 0 {
        ((r ^ POLY) << 1) | 1
    } else {
        r << 1
    }
}

/// The masked bytes of the region (offset from the start of the IP header or
/// GRH, OR mask), per form: the table in the module docs.
const IPV4_MASKED: [(usize, u8); 7] = [
    (1, 0xFF),  // TOS: DSCP + ECN
    (8, 0xFF),  // TTL
    (10, 0xFF), // header checksum
    (11, 0xFF),
    (26, 0xFF), // UDP checksum
    (27, 0xFF),
    (28 + 4, 0xFF), // BTH byte 4: FECN, BECN, Resv6a
];
const IPV6_MASKED: [(usize, u8); 8] = [
    (0, 0x0F), // version nibble kept; traffic class (8) and flow label (20) forced
    (1, 0xFF),
    (2, 0xFF),
    (3, 0xFF),
    (7, 0xFF),  // hop limit
    (46, 0xFF), // UDP checksum
    (47, 0xFF),
    (48 + 4, 0xFF), // BTH byte 4
];
const GRH_MASKED: [(usize, u8); 6] = [
    (0, 0x0F),
    (1, 0xFF),
    (2, 0xFF),
    (3, 0xFF),
    (7, 0xFF),      // hop limit
    (40 + 4, 0xFF), // BTH byte 4
];

/// One masked byte: its offset in the region, its OR mask, and `table[d]`, the
/// change to the initial register that equals XOR-ing `d` into that byte.
struct Fix {
    pos: usize,
    mask: u8,
    table: [u32; 256],
}

/// The [`Fix`] of the byte at offset `pos`: `table[d]` is the CRC step of `d`
/// from a zero register (the classic table entry), unstepped by `8 * (pos + 1)`
/// zero bits. Built from the eight single-bit values, the map being linear.
const fn fix(pos: usize, mask: u8) -> Fix {
    let mut basis = [0u32; 8];
    let mut k = 0;
    while k < 8 {
        let mut r = 1u32 << k;
        let mut i = 0;
        while i < 8 {
            r = step_bit(r);
            i += 1;
        }
        let mut i = 0;
        while i < 8 * (pos + 1) {
            r = unstep_bit(r);
            i += 1;
        }
        basis[k] = r;
        k += 1;
    }
    let mut table = [0u32; 256];
    let mut d = 0;
    while d < 256 {
        let mut v = 0;
        let mut k = 0;
        while k < 8 {
            if d & (1 << k) != 0 {
                v ^= basis[k];
            }
            k += 1;
        }
        table[d] = v;
        d += 1;
    }
    Fix { pos, mask, table }
}

/// The [`Fix`]es of a form's masked bytes.
const fn fixes<const K: usize>(masked: [(usize, u8); K]) -> [Fix; K] {
    let mut out = [const {
        Fix {
            pos: 0,
            mask: 0,
            table: [0; 256],
        }
    }; K];
    let mut i = 0;
    while i < K {
        out[i] = fix(masked[i].0, masked[i].1);
        i += 1;
    }
    out
}

static IPV4_FIX: [Fix; 7] = fixes(IPV4_MASKED);
static IPV6_FIX: [Fix; 8] = fixes(IPV6_MASKED);
static GRH_FIX: [Fix; 6] = fixes(GRH_MASKED);

/// The hasher's initial value for `head` (the region's first `N` bytes, `N` at
/// least the form's masked prefix): [`SEED`] corrected for every masked byte.
#[inline(always)]
fn initial<const N: usize>(head: &[u8; N], fixes: &[Fix]) -> u32 {
    let mut c = SEED;
    for f in fixes {
        let b = head.get(f.pos).copied().unwrap_or(0xFF);
        c ^= f.table[usize::from(!b & f.mask)];
    }
    c
}

/// The CRC of `region` in place from `init`.
#[inline(always)]
fn hash(init: u32, region: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(init);
    h.update(region);
    h.finalize()
}

/// Compute the ICRC of `region`: the bytes from the start of the IP header (or
/// GRH) up to, not including, the ICRC field (so it ends after the pad bytes).
///
/// Returns the CRC value; the wire bytes are `value.to_le_bytes()`. The result
/// can seed a `crc32fast::Hasher` (`new_with_initial`) to go on over bytes
/// that follow the region (a payload hashed where it lies).
///
/// Errors: [`Error::BthTruncated`] if `region` is shorter than the masked
/// header prefix ([`IcrcForm::masked_len`]).
#[inline]
pub fn compute(form: IcrcForm, region: &[u8]) -> Result<u32, Error> {
    match form {
        IcrcForm::Ipv4 => compute_ipv4(region),
        IcrcForm::Ipv6 | IcrcForm::Grh => compute_other(form, region),
    }
}

/// [`compute`] for RoCEv2 over IPv4, the common case, kept out of line so the
/// parser that calls it stays small.
#[inline(never)]
fn compute_ipv4(region: &[u8]) -> Result<u32, Error> {
    let head = region
        .first_chunk::<{ IcrcForm::Ipv4.masked_len() }>()
        .ok_or(Error::BthTruncated)?;
    Ok(hash(initial(head, &IPV4_FIX), region))
}

/// [`compute`] for RoCEv2 over IPv6 and RoCEv1.
#[inline(never)]
fn compute_other(form: IcrcForm, region: &[u8]) -> Result<u32, Error> {
    let init = if form == IcrcForm::Ipv6 {
        let head = region
            .first_chunk::<{ IcrcForm::Ipv6.masked_len() }>()
            .ok_or(Error::BthTruncated)?;
        initial(head, &IPV6_FIX)
    } else {
        let head = region
            .first_chunk::<{ IcrcForm::Grh.masked_len() }>()
            .ok_or(Error::BthTruncated)?;
        initial(head, &GRH_FIX)
    };
    Ok(hash(init, region))
}

/// Check the ICRC of `region` (as for [`compute`]) against the 4 wire bytes.
pub fn verify(form: IcrcForm, region: &[u8], wire: [u8; 4]) -> Result<bool, Error> {
    Ok(compute(form, region)? == u32::from_le_bytes(wire))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_is_crc_of_eight_ones() {
        assert_eq!(SEED, crc32fast::hash(&[0xFF; 8]));
        // The raw register (before final inversion) is the rxe seed.
        assert_eq!(!SEED, 0xDEBB_20E3);
    }

    /// The pseudo-packet of Annex A17.4 built byte by byte from the table in
    /// the module docs, hashed by the `crc` crate's catalogue CRC-32 (an
    /// independent implementation of the Ethernet CRC).
    fn reference(form: IcrcForm, region: &[u8]) -> u32 {
        let mut p = vec![0xFF; 8];
        p.extend_from_slice(region);
        let h = &mut p[8..];
        let bth = form.net_len();
        match form {
            IcrcForm::Ipv4 => {
                for i in [1, 8, 10, 11, 26, 27] {
                    h[i] = 0xFF;
                }
            }
            IcrcForm::Ipv6 | IcrcForm::Grh => {
                h[0] |= 0x0F;
                for i in [1, 2, 3, 7] {
                    h[i] = 0xFF;
                }
                if form == IcrcForm::Ipv6 {
                    h[46] = 0xFF;
                    h[47] = 0xFF;
                }
            }
        }
        h[bth + 4] = 0xFF;
        crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(&p)
    }

    /// Every value of every masked byte (and of its unmasked neighbours), in
    /// every form, on a short and a long region: the correction tables agree
    /// with masking the bytes themselves.
    #[test]
    fn every_value_of_every_masked_byte() {
        for form in [IcrcForm::Ipv4, IcrcForm::Ipv6, IcrcForm::Grh] {
            for len in [form.masked_len(), 1500] {
                let mut region: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(29)).collect();
                for pos in 0..form.masked_len() {
                    let keep = region[pos];
                    for b in 0..=255u8 {
                        region[pos] = b;
                        assert_eq!(
                            compute(form, &region),
                            Ok(reference(form, &region)),
                            "{form:?} len {len} byte {pos} = {b:#04x}"
                        );
                    }
                    region[pos] = keep;
                }
            }
        }
    }

    /// Every region length from the masked prefix to 700 bytes (every tail
    /// length of `crc32fast`'s 16- and 64-byte blocks, both of its kernels),
    /// for each form, with bytes that differ at every offset.
    #[test]
    fn compute_matches_reference_for_every_length() {
        for form in [IcrcForm::Ipv4, IcrcForm::Ipv6, IcrcForm::Grh] {
            let data: Vec<u8> = (0..700)
                .map(|i| (i as u8).wrapping_mul(151).wrapping_add(7))
                .collect();
            for len in form.masked_len()..data.len() {
                let region = &data[..len];
                assert_eq!(
                    compute(form, region),
                    Ok(reference(form, region)),
                    "{form:?} len {len}"
                );
            }
            assert_eq!(
                compute(form, &data[..form.masked_len() - 1]),
                Err(Error::BthTruncated)
            );
        }
    }
}
