//! Global Route Header (GRH), 40 bytes, IBTA 1.7 §8.3: the network header of
//! RoCEv1 (EtherType 0x8915, Annex A16), shaped like an IPv6 header.
//!
//! ```text
//! IPVer(4) TClass(8) FlowLabel(20) | PayLen(16) NxtHdr(8) HopLmt(8) | SGID(128) | DGID(128)
//! ```
//! PayLen counts the bytes after the GRH up to and including the ICRC. NxtHdr is
//! 0x1B (IBA transport) for RoCEv1.

use core::net::Ipv6Addr;

use super::Error;

/// Length of the GRH, bytes.
pub const HEADER_LEN: usize = 40;
/// GRH next header for an IBA transport header.
pub const NXTHDR_IBA: u8 = 0x1B;

/// The meaning of a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// Traffic class (8 bits).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length: BTH through ICRC, bytes.
    pub payload_len: u16,
    /// Next header (0x1B).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: Ipv6Addr,
    /// Destination GID.
    pub dgid: Ipv6Addr,
}

impl GrhRepr {
    /// Parse the first 40 bytes of `buf`.
    ///
    /// Errors: [`Error::GrhTruncated`], [`Error::GrhBadHeader`] (IPVer not 6 or
    /// next header not 0x1B).
    pub fn parse(buf: &[u8]) -> Result<GrhRepr, Error> {
        let b: &[u8; HEADER_LEN] = buf
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(Error::GrhTruncated)?;
        let w0 = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        if w0 >> 28 != 6 || b[6] != NXTHDR_IBA {
            return Err(Error::GrhBadHeader);
        }
        let mut sgid = [0u8; 16];
        sgid.copy_from_slice(&b[8..24]);
        let mut dgid = [0u8; 16];
        dgid.copy_from_slice(&b[24..40]);
        Ok(GrhRepr {
            traffic_class: (w0 >> 20) as u8,
            flow_label: w0 & 0xF_FFFF,
            payload_len: u16::from_be_bytes([b[4], b[5]]),
            next_header: b[6],
            hop_limit: b[7],
            sgid: Ipv6Addr::from(sgid),
            dgid: Ipv6Addr::from(dgid),
        })
    }

    /// Write the 40 bytes.
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        let w0 = 6u32 << 28 | (self.traffic_class as u32) << 20 | (self.flow_label & 0xF_FFFF);
        out[0..4].copy_from_slice(&w0.to_be_bytes());
        out[4..6].copy_from_slice(&self.payload_len.to_be_bytes());
        out[6] = self.next_header;
        out[7] = self.hop_limit;
        out[8..24].copy_from_slice(&self.sgid.octets());
        out[24..40].copy_from_slice(&self.dgid.octets());
    }
}
