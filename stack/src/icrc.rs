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
//! hashed in one call; longer ones copy and mask only the 48 or 64 bytes
//! (whole 16-byte blocks) that hold the masked fields and hash the rest in
//! place. Nothing allocates.

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
/// longer ones hash a masked copy of the 16-byte blocks that hold their
/// header prefix ([`IcrcForm::masked_len`] bytes), then the rest in place.
///
/// For short inputs a hasher call costs mostly its fixed setup and final
/// reduction, so one call over a copy beats two calls: on the Zen 3 guests of
/// PERF-NOTES.md, for a 104-byte region (64-byte payload), the copy took
/// 25 ns against 28 ns for the two-call form (`crc32fast` alone, unmasked and
/// in place: 21 ns). Beyond 512 bytes, copying costs more than the second
/// call saves.
pub const SMALL_REGION_LEN: usize = 512;

/// The longest masked header prefix (60 bytes, IPv6) rounded up to whole
/// 16-byte blocks: the extent of the mask tables.
const PREFIX_LEN: usize = 64;

/// One 16-byte block, the unit `crc32fast` loads.
type Block = [u8; 16];

/// Whole blocks in [`PREFIX_LEN`].
const PREFIX_BLOCKS: usize = PREFIX_LEN / 16;

/// OR mask of the first [`PREFIX_LEN`] bytes of a region, in 16-byte blocks:
/// the variant fields forced to ones (table in the module docs).
const fn or_mask(form: IcrcForm) -> [Block; PREFIX_BLOCKS] {
    let mut m = [0u8; PREFIX_LEN];
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
    let mut b = [[0u8; 16]; PREFIX_BLOCKS];
    let mut i = 0;
    while i < PREFIX_LEN {
        b[i / 16][i % 16] = m[i];
        i += 1;
    }
    b
}

/// The mask tables, indexed by form.
static MASKS: [[Block; PREFIX_BLOCKS]; 3] = [
    or_mask(IcrcForm::Ipv4),
    or_mask(IcrcForm::Ipv6),
    or_mask(IcrcForm::Grh),
];

impl IcrcForm {
    /// Index of this form's mask table in `MASKS`, and the number of
    /// 16-byte blocks that hold masked bytes (the masked prefix rounded up).
    #[inline(always)]
    const fn mask_index(self) -> (usize, usize) {
        match self {
            IcrcForm::Ipv4 => (0, 3),
            IcrcForm::Ipv6 => (1, 4),
            IcrcForm::Grh => (2, 4),
        }
    }

    /// The mask blocks of this form, and how many of them hold masked bytes
    /// (the masked prefix rounded up to whole blocks: 3 for IPv4, 4 otherwise).
    ///
    /// The table is reached through [`core::hint::black_box`]: with the mask
    /// bytes visible as constants, LLVM turns the 16-byte ORs into byte and
    /// word stores, and `crc32fast`'s 16-byte loads that follow at once cannot
    /// be forwarded from several narrower stores (a stall of some 10 ns per
    /// packet measured, nearly half the hash). Opaque, the masks are loaded and
    /// OR-ed as vectors and stored whole.
    #[inline(always)]
    fn masks(self) -> (&'static [Block; PREFIX_BLOCKS], usize) {
        let (i, n) = self.mask_index();
        let m = core::hint::black_box(&MASKS);
        (m.get(i).unwrap_or(&MASKS[0]), n)
    }
}

/// `s | m`, bytewise (one vector OR once LLVM has unrolled it).
///
/// A plain loop over `get`, not iterator adaptors or `array::from_fn`: in the
/// bench build those stayed out-of-line calls (`Zip::new`, `try_from_fn`) on
/// the receive hot path.
#[inline(always)]
fn or_block(s: &Block, m: &Block) -> Block {
    let mut o = [0u8; 16];
    let mut k = 0;
    while k < 16 {
        if let (Some(o), Some(s), Some(m)) = (o.get_mut(k), s.get(k), m.get(k)) {
            *o = s | m;
        }
        k += 1;
    }
    o
}

/// Block `i` of `src` OR-ed with block `i` of `mask`, stored as block `i` of
/// `dst` by one 16-byte store; nothing if either slice is too short.
#[inline(always)]
fn mask_block(dst: &mut [u8], src: &[u8], mask: &[Block; PREFIX_BLOCKS], i: usize) {
    let d = dst.get_mut(16 * i..16 * i + 16);
    let s = src.get(16 * i..16 * i + 16);
    if let (Some(d), Some(s), Some(m)) = (d, s, mask.get(i)) {
        if let (Ok(d), Ok(s)) = (<&mut Block>::try_from(d), <&Block>::try_from(s)) {
            *d = or_block(s, m);
        }
    }
}

/// Copy `src` to the start of `dst` (at least as long), OR-ing its first
/// `blocks` 16-byte blocks with `mask`: those are written by one 16-byte store
/// each, the rest by `copy_from_slice`, so every load of the hash that follows
/// is forwarded from a single store. Returns the copied bytes.
#[inline(always)]
fn copy_masked<'b>(
    dst: &'b mut [u8],
    src: &[u8],
    mask: &[Block; PREFIX_BLOCKS],
    blocks: usize,
) -> &'b [u8] {
    let n = src.len();
    let split = 16 * blocks;
    if let (Some(d), Some(s)) = (dst.get_mut(split..n), src.get(split..)) {
        d.copy_from_slice(s);
        for i in 0..blocks {
            mask_block(dst, src, mask, i);
        }
    } else if let Some(d) = dst.get_mut(..n) {
        // A region that ends inside the last masked block (an IPv6 or GRH
        // packet with less than 4 bytes after the BTH): byte by byte.
        d.copy_from_slice(src);
        for (d, m) in d.iter_mut().zip(mask.iter().flatten()) {
            *d |= m;
        }
    }
    dst.get(..n).unwrap_or(&[])
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
    // One copy of the body per form, so that the masked-block count and the
    // minimum length are constants in each.
    match form {
        IcrcForm::Ipv4 => compute_ipv4(region),
        IcrcForm::Ipv6 | IcrcForm::Grh => compute_other(form, region),
    }
}

/// [`compute`] for RoCEv2 over IPv6 and RoCEv1 (one copy for both).
#[inline(never)]
fn compute_other(form: IcrcForm, region: &[u8]) -> Result<u32, Error> {
    compute_form(form, region)
}

/// [`compute`] for RoCEv2 over IPv4, the common case, kept out of line so the
/// parser that calls it stays small.
#[inline(never)]
fn compute_ipv4(region: &[u8]) -> Result<u32, Error> {
    compute_form(IcrcForm::Ipv4, region)
}

/// The body of [`compute`].
#[inline(always)]
fn compute_form(form: IcrcForm, region: &[u8]) -> Result<u32, Error> {
    if region.len() < form.masked_len() {
        return Err(Error::BthTruncated);
    }
    let (mask, blocks) = form.masks();
    let mut h = seeded_hasher();
    if region.len() <= 128 {
        // The stack buffer is zeroed first: keep it small for small packets.
        let mut buf = [0u8; 128];
        h.update(copy_masked(&mut buf, region, mask, blocks));
    } else if region.len() <= SMALL_REGION_LEN {
        let mut buf = [0u8; SMALL_REGION_LEN];
        h.update(copy_masked(&mut buf, region, mask, blocks));
    } else if let Some((head, rest)) = region.split_at_checked(16 * blocks) {
        // The masked blocks from a copy, then the rest in place.
        let mut buf = [0u8; PREFIX_LEN];
        for i in 0..blocks {
            mask_block(&mut buf, head, mask, i);
        }
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
    let (mask, blocks) = form.masks();
    // Mask whole 16-byte blocks from the region's start, one store each, so
    // the hasher's loads that follow are forwarded from single stores.
    let head = region.get_mut(..16 * blocks).ok_or(Error::BthTruncated)?;
    let mut saved = [0u8; PREFIX_LEN];
    if let Some(sv) = saved.get_mut(..head.len()) {
        sv.copy_from_slice(head);
    }
    for i in 0..blocks {
        mask_block(head, &saved, mask, i);
    }
    let mut h = seeded_hasher();
    h.update(region);
    let crc = h.finalize();
    if let (Some(head), Some(sv)) = (region.get_mut(..16 * blocks), saved.get(..16 * blocks)) {
        head.copy_from_slice(sv);
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
            // Both sides of the copying/in-place switch.
            for len in form.masked_len()..SMALL_REGION_LEN + 100 {
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
