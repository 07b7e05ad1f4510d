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
//!
//! # Recovering the IPv4 identification
//!
//! The same linearity lets a receiver that never saw the IPv4 identification
//! and DF flag (a kernel UDP socket does not report them, and they are not
//! masked) find them: [`recover_ipv4_ident`] solves the 17 unknown bits from
//! the 32-bit ICRC over GF(2), against a basis reduced at compile time. The
//! map is injective (the 17 bits lie within a 24-bit burst, and CRC-32
//! detects every burst up to 32 bits), so a solution is unique; using 17 of
//! the 32 bits to solve leaves 15 to detect corruption.

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

/// The change to the hasher's initial register that equals flipping bit `k`
/// (value `1 << k`) of the byte at offset `pos` of the region: the CRC step
/// of that byte from a zero register (the classic table entry), unstepped by
/// `8 * (pos + 1)` zero bits.
const fn bit_fix(pos: usize, k: u32) -> u32 {
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
    r
}

/// The [`Fix`] of the byte at offset `pos`: `table[d]` is the CRC step of `d`
/// from a zero register (the classic table entry), unstepped by `8 * (pos + 1)`
/// zero bits. Built from the eight single-bit values, the map being linear.
const fn fix(pos: usize, mask: u8) -> Fix {
    let mut basis = [0u32; 8];
    let mut k = 0;
    while k < 8 {
        basis[k] = bit_fix(pos, k as u32);
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

/// `a · b` modulo the CRC polynomial, both in the reflected register's
/// representation (bit 31 holds the coefficient of x^0): zlib's `multmodp`.
/// Advancing the register over `n` zero bits multiplies it by x^n.
const fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = step_bit(b);
    }
    p
}

/// `UNSHIFT[k]` = x^(-8·2^k) modulo the polynomial: multiplying by it undoes
/// advancing the register over 2^k zero bytes (x is invertible: the
/// polynomial's constant term is 1).
static UNSHIFT: [u32; usize::BITS as usize] = {
    let mut t = [0u32; usize::BITS as usize];
    let mut r = 1u32 << 31; // x^0
    let mut i = 0;
    while i < 8 {
        r = unstep_bit(r);
        i += 1;
    }
    t[0] = r;
    let mut k = 1;
    while k < t.len() {
        t[k] = mul_mod(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// A difference `e` of the CRC after `len` bytes, traced back to the
/// register before them: `e · x^(-8·len)` (one multiplication per set bit
/// of `len`).
fn unshift(mut e: u32, len: usize) -> u32 {
    let mut n = len;
    let mut k = 0;
    while n != 0 {
        if n & 1 != 0 {
            e = mul_mod(e, UNSHIFT[k]);
        }
        n >>= 1;
        k += 1;
    }
    e
}

/// One row of the reduced basis of the identification/DF unknowns: `vec`,
/// a change to the initial register, is the change made by flipping the
/// unknowns in `label` (bit `k < 16`: bit `k` of the identification; bit
/// 16: DF); `pivot` is a bit set in `vec` and in no other row's.
#[derive(Clone, Copy)]
struct IdentRow {
    vec: u32,
    label: u32,
    pivot: u32,
}

/// The 17 unknowns' register changes ([`bit_fix`]: identification bit `k`
/// is bit `k % 8` of byte 5 (`k < 8`) or byte 4 of the IPv4 header, DF is
/// bit 6 of byte 6) in reduced row echelon form, by Gauss-Jordan
/// elimination over GF(2) at compile time. The build fails if the 17 are
/// not linearly independent; they are, since CRC-32 detects every error
/// burst of at most 32 bits and these 17 bits lie within 24.
static IDENT_ROWS: [IdentRow; 17] = {
    let mut vec = [0u32; 17];
    let mut label = [0u32; 17];
    let mut k = 0;
    while k < 16 {
        vec[k] = if k < 8 {
            bit_fix(5, k as u32)
        } else {
            bit_fix(4, (k - 8) as u32)
        };
        label[k] = 1 << k;
        k += 1;
    }
    vec[16] = bit_fix(6, 6);
    label[16] = 1 << 16;
    let mut rows = [IdentRow {
        vec: 0,
        label: 0,
        pivot: 0,
    }; 17];
    let mut i = 0;
    while i < 17 {
        assert!(
            vec[i] != 0,
            "the identification/DF map into the ICRC is not injective"
        );
        let p = vec[i].trailing_zeros();
        let mut j = 0;
        while j < 17 {
            if j != i && vec[j] & (1 << p) != 0 {
                vec[j] ^= vec[i];
                label[j] ^= label[i];
            }
            j += 1;
        }
        rows[i].pivot = p;
        i += 1;
    }
    let mut i = 0;
    while i < 17 {
        rows[i].vec = vec[i];
        rows[i].label = label[i];
        i += 1;
    }
    rows
};

/// Recover the IPv4 identification and DF flag a RoCEv2-over-IPv4 packet
/// was sent with, from its ICRC.
///
/// `region` is as for [`compute`] ([`IcrcForm::Ipv4`]: the IPv4 header
/// through the pad bytes) with every field as it was sent except the
/// identification (bytes 4-5) and the DF bit (byte 6, `0x40`), which may
/// hold anything (a kernel UDP socket does not report them); `wire` is the
/// packet's 4 ICRC bytes. Returns `Some((identification, df))`, the values
/// with which the ICRC verifies, or `None` when no values do (the packet
/// was corrupted, or another covered field is not as sent). The other
/// flag bits and the fragment offset are taken from `region`.
///
/// The ICRC is linear over GF(2) in the covered bits (IBTA 1.7 §7.8.1,
/// RoCEv2 Annex A17.4: the identification and flags are not masked), and
/// the 17 unknown bits map injectively into its 32 bits, so the answer is
/// unique when it exists. The cost of solving for them is integrity: of
/// the ICRC's 32 bits, 15 are left to detect corruption, so a random error
/// passes with probability 2^-15 instead of 2^-32.
///
/// Cost: one [`compute`] over the region, then (when the identification
/// and DF in `region` are not already right) at most 33 multiplications
/// modulo the polynomial and 17 row reductions against a basis reduced at
/// compile time. Nothing allocates.
///
/// # Errors
/// [`Error::BthTruncated`] if `region` is shorter than the masked prefix
/// ([`IcrcForm::masked_len`]).
pub fn recover_ipv4_ident(region: &[u8], wire: [u8; 4]) -> Result<Option<(u16, bool)>, Error> {
    let head = region
        .first_chunk::<{ IcrcForm::Ipv4.masked_len() }>()
        .ok_or(Error::BthTruncated)?;
    let ip = crate::wire::Ipv4Packet::new_unchecked(&head[..]);
    let (ident, df) = (ip.ident(), ip.dont_frag());
    let e = compute_ipv4(region)? ^ u32::from_le_bytes(wire);
    if e == 0 {
        return Ok(Some((ident, df)));
    }
    // hash(init ^ u, region) = hash(init, region) ^ u·x^(8·len): the
    // unknowns' change to the initial register must be e·x^(-8·len).
    let mut w = unshift(e, region.len());
    let mut d = 0u32;
    for r in &IDENT_ROWS {
        if w & (1 << r.pivot) != 0 {
            w ^= r.vec;
            d ^= r.label;
        }
    }
    if w != 0 {
        return Ok(None);
    }
    Ok(Some((ident ^ (d & 0xFFFF) as u16, df ^ (d >> 16 != 0))))
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

    /// A small deterministic generator (xorshift64*) for the tests below.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    fn set_ident(region: &mut [u8], ident: u16, df: bool) {
        region[4..6].copy_from_slice(&ident.to_be_bytes());
        region[6] = (region[6] & !0x40) | if df { 0x40 } else { 0 };
    }

    #[test]
    fn mul_mod_and_unshift_undo_zero_bytes() {
        // x^0 is the identity; x^8·x^-8 = 1.
        let one = 1u32 << 31;
        assert_eq!(mul_mod(one, 0xDEAD_BEEF), 0xDEAD_BEEF);
        let mut x8 = one;
        for _ in 0..8 {
            x8 = step_bit(x8);
        }
        assert_eq!(mul_mod(x8, UNSHIFT[0]), one);
        // Advancing any register over n zero bytes, then unshifting by n,
        // gives it back.
        for (r, n) in [(0x1234_5678u32, 1usize), (0xFFFF_FFFF, 1500), (7, 65_531)] {
            let mut a = r;
            for _ in 0..8 * n {
                a = step_bit(a);
            }
            assert_eq!(unshift(a, n), r, "n = {n}");
        }
    }

    /// Every one of the 2^17 identification/DF values of a short packet is
    /// recovered, from an ICRC computed by the independent `crc`-crate
    /// [`reference`] and a region holding other values: the map is
    /// injective and the solver exact.
    #[test]
    fn every_identification_and_df_is_recovered() {
        let len = IcrcForm::Ipv4.masked_len() + 8;
        let mut region: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(83) ^ 0x5A)
            .collect();
        region[6] &= 0x40; // MF 0, fragment offset 0, reserved 0
        region[7] = 0;
        for v in 0..1u32 << 17 {
            let (ident, df) = (v as u16, v >> 16 != 0);
            set_ident(&mut region, ident, df);
            let wire = reference(IcrcForm::Ipv4, &region).to_le_bytes();
            // What a UDP receiver rebuilds: identification 0 with DF.
            set_ident(&mut region, 0, true);
            assert_eq!(
                recover_ipv4_ident(&region, wire),
                Ok(Some((ident, df))),
                "ident {ident:#06x} df {df}"
            );
        }
    }

    /// Long packets (every PMTU, the largest IPv4 packet) with random
    /// bytes, identifications and DF bits, and random guesses.
    #[test]
    fn recovery_on_long_packets() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for len in [256usize, 1024 + 60, 4096 + 60, 65_535 - 4] {
            let mut region: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            region[0] = 0x45;
            region[6] &= 0x40;
            region[7] = 0;
            for _ in 0..64 {
                let r = rng.next();
                let (ident, df) = (r as u16, r & 1 << 20 != 0);
                set_ident(&mut region, ident, df);
                let wire = reference(IcrcForm::Ipv4, &region).to_le_bytes();
                set_ident(&mut region, (r >> 32) as u16, r & 1 << 40 != 0);
                assert_eq!(
                    recover_ipv4_ident(&region, wire),
                    Ok(Some((ident, df))),
                    "len {len}"
                );
            }
        }
    }

    /// Corruption outside the unknowns is caught unless it happens to look
    /// like a change of them: with 15 bits of check left, about one random
    /// error in 2^15 passes. 2^16 random one-byte errors of a 100-byte
    /// packet: expect 2, and a correct solver cannot pass many more.
    #[test]
    fn recovery_leaves_fifteen_bits_of_check() {
        let mut rng = Rng(42);
        let len = 100;
        let mut region: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        region[6] = 0x40;
        region[7] = 0;
        let wire = reference(IcrcForm::Ipv4, &region).to_le_bytes();
        let mut passed = 0;
        for _ in 0..1 << 16 {
            let r = rng.next();
            // Any byte but the identification and flags, not masked ones.
            let pos = 12 + (r as usize % (len - 12));
            let flip = ((r >> 16) as u8).max(1);
            if [26, 27, 32].contains(&pos) {
                continue;
            }
            region[pos] ^= flip;
            if recover_ipv4_ident(&region, wire).unwrap().is_some() {
                passed += 1;
            }
            region[pos] ^= flip;
        }
        assert!(passed <= 12, "{passed} corrupted packets of 65536 passed");
        let ident = u16::from_be_bytes([region[4], region[5]]);
        set_ident(&mut region, 0, true);
        assert_eq!(recover_ipv4_ident(&region, wire), Ok(Some((ident, true))));
        assert_eq!(
            recover_ipv4_ident(&region[..IcrcForm::Ipv4.masked_len() - 1], wire),
            Err(Error::BthTruncated)
        );
    }
}
