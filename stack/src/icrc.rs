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
//! eight 0xFF bytes ([`SEED`]); only the 48-60 header bytes are copied (to mask
//! them), payload bytes are hashed in place. Nothing allocates.

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

/// Copy the covered header prefix of `region` into `out` with the variant fields
/// forced to ones. `region` must be at least `form.masked_len()` bytes.
#[inline]
fn masked_prefix(form: IcrcForm, region: &[u8], out: &mut [u8; 60]) -> Result<usize, Error> {
    let n = form.masked_len();
    let src = region.get(..n).ok_or(Error::BthTruncated)?;
    let dst = out.get_mut(..n).ok_or(Error::BthTruncated)?;
    dst.copy_from_slice(src);
    match form {
        IcrcForm::Ipv4 => {
            dst[1] = 0xFF; // TOS: DSCP + ECN
            dst[8] = 0xFF; // TTL
            dst[10] = 0xFF; // header checksum
            dst[11] = 0xFF;
            dst[26] = 0xFF; // UDP checksum
            dst[27] = 0xFF;
            dst[28 + 4] = 0xFF; // BTH byte 4
        }
        IcrcForm::Ipv6 | IcrcForm::Grh => {
            // Version nibble kept; traffic class (8) and flow label (20) forced.
            dst[0] |= 0x0F;
            dst[1] = 0xFF;
            dst[2] = 0xFF;
            dst[3] = 0xFF;
            dst[7] = 0xFF; // hop limit
            if form == IcrcForm::Ipv6 {
                dst[46] = 0xFF; // UDP checksum
                dst[47] = 0xFF;
            }
            dst[form.net_len() + 4] = 0xFF; // BTH byte 4
        }
    }
    Ok(n)
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
    let mut hdr = [0u8; 60];
    let n = masked_prefix(form, region, &mut hdr)?;
    let mut h = crc32fast::Hasher::new_with_initial(SEED);
    h.update(&hdr[..n]);
    h.update(region.get(n..).unwrap_or(&[]));
    Ok(h.finalize())
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
}
