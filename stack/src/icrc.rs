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
//! The data path uses `crc32fast`'s streaming hasher, started from the CRC of the
//! eight 0xFF bytes ([`SEED`]). Short packets (a region of at most
//! [`SMALL_REGION_LEN`] bytes) are copied whole to a stack buffer, masked and
//! hashed in one call; longer ones copy and mask only the 40-60 header bytes
//! and hash the payload in place. Nothing allocates.

use std::sync::OnceLock;

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

/// Regions (IP header or GRH through the pad bytes) of at most this many bytes
/// are copied whole to the stack, masked and hashed in one `crc32fast` call;
/// longer ones hash a masked copy of their header prefix
/// ([`IcrcForm::masked_len`] bytes), then the rest in place.
///
/// For short inputs a hasher call costs mostly its fixed setup and final
/// reduction, so one call over a copy beats two calls: on the Zen 3 guests of
/// PERF-NOTES.md the copy path was faster up to 512 bytes (a 104-byte region,
/// 64-byte payload: 25 ns against 45 ns for the two-call form; `crc32fast`
/// alone, unmasked and in place: 21 ns). Beyond that, copying costs more than
/// the second call saves.
pub const SMALL_REGION_LEN: usize = 512;

/// The longest masked header prefix (60 bytes, IPv6) rounded up to whole
/// 16-byte blocks: the extent of the mask tables.
const PREFIX_LEN: usize = 64;

/// One 16-byte block, the unit `crc32fast` loads.
type Block = [u8; 16];

/// Length of a mask table: [`PREFIX_LEN`] mask bytes and one all-zero block,
/// so that any 16 bytes starting before [`PREFIX_LEN`] can be read from it.
const MASK_LEN: usize = PREFIX_LEN + 16;

/// OR mask of the first [`PREFIX_LEN`] bytes of a region (then zeros): the
/// variant fields forced to ones (table in the module docs).
const fn or_mask(form: IcrcForm) -> [u8; MASK_LEN] {
    let mut m = [0u8; MASK_LEN];
    match form {
        IcrcForm::Ipv4 => {
            m[1] = 0xFF; // TOS: DSCP + ECN
            m[8] = 0xFF; // TTL
            m[10] = 0xFF; // header checksum
            m[11] = 0xFF;
            m[26] = 0xFF; // UDP checksum
            m[27] = 0xFF;
        }
        IcrcForm::Ipv6 | IcrcForm::Grh => {
            // Version nibble kept; traffic class (8) and flow label (20) forced.
            m[0] = 0x0F;
            m[1] = 0xFF;
            m[2] = 0xFF;
            m[3] = 0xFF;
            m[7] = 0xFF; // hop limit
            if matches!(form, IcrcForm::Ipv6) {
                m[46] = 0xFF; // UDP checksum
                m[47] = 0xFF;
            }
        }
    }
    m[form.net_len() + 4] = 0xFF; // BTH byte 4: FECN, BECN, Resv6a
    m
}

const MASK_IPV4: [u8; MASK_LEN] = or_mask(IcrcForm::Ipv4);
const MASK_IPV6: [u8; MASK_LEN] = or_mask(IcrcForm::Ipv6);
const MASK_GRH: [u8; MASK_LEN] = or_mask(IcrcForm::Grh);

/// Copy `src` into the start of `dst` (at least as long as `src` and 16 bytes),
/// OR-ing byte `i` with `mask[i]` (zero beyond the table).
///
/// Every byte is written by 16-byte stores, and `crc32fast`'s loads, which
/// follow at once, each find one store that holds all their bytes, so the CPU
/// forwards them from the store queue. (A `memcpy` followed by byte-sized mask
/// stores, or a tail assembled with a short copy, made loads span several
/// stores: a store-forwarding stall on the hash's dependency chain each.) The
/// last, partial block is written first as the last 16 bytes of `src`; the
/// whole blocks then overwrite its front.
#[inline(always)]
fn copy_masked(dst: &mut [u8], src: &[u8], mask: &[u8; MASK_LEN]) {
    const ZERO: Block = [0; 16];
    #[inline(always)]
    fn or_into(d: Option<&mut [u8]>, s: &Block, m: &[u8; MASK_LEN], off: usize) {
        let m = m
            .get(off..)
            .and_then(|m| m.first_chunk::<16>())
            .unwrap_or(&ZERO);
        // One 128-bit OR (a single vector instruction), not 16 byte ORs.
        let b: Block = (u128::from_ne_bytes(*s) | u128::from_ne_bytes(*m)).to_ne_bytes();
        if let Some(d) = d {
            d.copy_from_slice(&b);
        }
    }
    let n = src.len();
    if n % 16 != 0 {
        let off = n.saturating_sub(16);
        let last: Block = match src.last_chunk::<16>() {
            Some(last) => *last,
            None => {
                // Shorter than a block (not reached from `compute`).
                let mut b: Block = [0; 16];
                for (o, x) in b.iter_mut().zip(src) {
                    *o = *x;
                }
                b
            }
        };
        or_into(dst.get_mut(off..off + 16), &last, mask, off);
    }
    for (i, (s, d)) in src
        .chunks_exact(16)
        .zip(dst.chunks_exact_mut(16))
        .enumerate()
    {
        if let Ok(s) = <&Block>::try_from(s) {
            or_into(Some(d), s, mask, 16 * i);
        }
    }
}

/// A `crc32fast` hasher started at [`SEED`]. The CPU-feature detection that
/// picks its kernel runs once per process, not once per packet.
#[inline(always)]
fn seeded_hasher() -> crc32fast::Hasher {
    static HASHER: OnceLock<crc32fast::Hasher> = OnceLock::new();
    HASHER
        .get_or_init(|| crc32fast::Hasher::new_with_initial(SEED))
        .clone()
}

/// Compute the ICRC of `region`: the bytes from the start of the IP header (or
/// GRH) up to, not including, the ICRC field (so it ends after the pad bytes).
///
/// Returns the CRC value; the wire bytes are `value.to_le_bytes()`.
///
/// Errors: [`Error::BthTruncated`] if `region` is shorter than the masked
/// header prefix.
#[inline]
pub fn compute(form: IcrcForm, region: &[u8]) -> Result<u32, Error> {
    if region.len() < form.masked_len() {
        return Err(Error::BthTruncated);
    }
    let mask = match form {
        IcrcForm::Ipv4 => &MASK_IPV4,
        IcrcForm::Ipv6 => &MASK_IPV6,
        IcrcForm::Grh => &MASK_GRH,
    };
    let mut h = seeded_hasher();
    if region.len() <= 128 {
        // The stack buffer is zeroed first: keep it small for small packets.
        let mut buf = [0u8; 128];
        copy_masked(&mut buf, region, mask);
        h.update(buf.get(..region.len()).unwrap_or(&[]));
    } else if region.len() <= SMALL_REGION_LEN {
        let mut buf = [0u8; SMALL_REGION_LEN];
        copy_masked(&mut buf, region, mask);
        h.update(buf.get(..region.len()).unwrap_or(&[]));
    } else if let Some((head, rest)) = region.split_at_checked(form.masked_len()) {
        // The shortest prefix that holds the masked fields: its hash is on the
        // dependency chain of the payload's first fold.
        let mut buf = [0u8; PREFIX_LEN];
        copy_masked(&mut buf, head, mask);
        h.update(buf.get(..head.len()).unwrap_or(&[]));
        h.update(rest);
    }
    Ok(h.finalize())
}

/// As [`compute`], for a region the caller may write: the variant fields are
/// forced to ones in place, the whole region is hashed in one pass (no copy,
/// one hasher call: the cost of a bare `crc32fast::hash`), and the original
/// bytes are put back before returning. The builder uses it on its own
/// buffer; short regions take the copying path of [`compute`].
///
/// Errors: [`Error::BthTruncated`] if `region` is shorter than the masked
/// header prefix.
#[inline]
pub fn compute_in_place(form: IcrcForm, region: &mut [u8]) -> Result<u32, Error> {
    if region.len() <= SMALL_REGION_LEN {
        // Short packets: the masked copy costs less than the in-place dance.
        return compute(form, region);
    }
    let mask = match form {
        IcrcForm::Ipv4 => &MASK_IPV4,
        IcrcForm::Ipv6 => &MASK_IPV6,
        IcrcForm::Grh => &MASK_GRH,
    };
    // Mask whole 16-byte blocks from the region's start, one store each, so
    // the hasher's loads that follow are forwarded from single stores.
    let head = region.get_mut(..PREFIX_LEN).ok_or(Error::BthTruncated)?;
    let mut saved = [0u8; PREFIX_LEN];
    saved.copy_from_slice(head);
    for (blk, m) in head.chunks_exact_mut(16).zip(mask.chunks_exact(16)) {
        let mut b = [0u8; 16];
        b.copy_from_slice(blk);
        for (x, y) in b.iter_mut().zip(m) {
            *x |= y;
        }
        blk.copy_from_slice(&b);
    }
    let mut h = seeded_hasher();
    h.update(region);
    let crc = h.finalize();
    if let Some(head) = region.get_mut(..PREFIX_LEN) {
        head.copy_from_slice(&saved);
    }
    Ok(crc)
}

/// Check the ICRC of `region` (as for [`compute`]) against the 4 wire bytes.
pub fn verify(form: IcrcForm, region: &[u8], wire: [u8; 4]) -> Result<bool, Error> {
    Ok(compute(form, region)? == u32::from_le_bytes(wire))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_equals_copying_and_restores_the_bytes() {
        for form in [IcrcForm::Ipv4, IcrcForm::Ipv6, IcrcForm::Grh] {
            for len in form.masked_len()..form.masked_len() + 300 {
                let region: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
                let mut copy = region.clone();
                let a = compute(form, &region).ok();
                let b = compute_in_place(form, &mut copy).ok();
                assert_eq!(a, b, "{form:?} {len}");
                assert_eq!(copy, region);
            }
        }
    }

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

    /// Every region length from the masked prefix to past the small-region
    /// threshold (so every tail length, both code paths and the switch between
    /// them), for each form, with bytes that differ at every offset.
    #[test]
    fn compute_matches_reference_for_every_length() {
        for form in [IcrcForm::Ipv4, IcrcForm::Ipv6, IcrcForm::Grh] {
            let data: Vec<u8> = (0..SMALL_REGION_LEN + 100)
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
