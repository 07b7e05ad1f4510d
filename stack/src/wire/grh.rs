//! Global Route Header (GRH), 40 bytes, IBTA 1.7 §8.3: the network header of
//! RoCEv1 (EtherType 0x8915, Annex A16), shaped like an IPv6 header.
//!
//! ```text
//! IPVer(4) TClass(8) FlowLabel(20) | PayLen(16) NxtHdr(8) HopLmt(8) | SGID(128) | DGID(128)
//! ```
//! PayLen counts the bytes after the GRH up to and including the ICRC. NxtHdr is
//! 0x1B (IBA transport) for RoCEv1.

use core::net::Ipv6Addr;

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const PAYLEN: Field = 4..6;
    pub const NXTHDR: usize = 6;
    pub const HOPLMT: usize = 7;
    pub const SGID: Field = 8..24;
    pub const DGID: Field = 24..40;
}

/// Length of the GRH, bytes.
pub const HEADER_LEN: usize = field::DGID.end;
/// GRH next header for an IBA transport header.
pub const NXTHDR_IBA: u8 = 0x1B;

header_view!(
    /// A GRH in a buffer (40 bytes).
    "a GRH",
    Error::GrhTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn word0(&self) -> u32 {
        view::get_u32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// IPVer (6).
    #[inline]
    pub fn ip_ver(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// TClass.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// FlowLabel (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xF_FFFF
    }
    /// PayLen: BTH through ICRC, bytes.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::PAYLEN)
    }
    /// NxtHdr.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXTHDR]
    }
    /// HopLmt.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOPLMT]
    }
    /// SGID.
    #[inline]
    pub fn sgid(&self) -> Ipv6Addr {
        Ipv6Addr::from(view::get::<16>(self.buffer.as_ref(), field::SGID))
    }
    /// DGID.
    #[inline]
    pub fn dgid(&self) -> Ipv6Addr {
        Ipv6Addr::from(view::get::<16>(self.buffer.as_ref(), field::DGID))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set IPVer, TClass and FlowLabel (the first 32 bits).
    #[inline]
    pub fn set_ver_tclass_flow(&mut self, ip_ver: u8, tclass: u8, flow_label: u32) {
        let w = u32::from(ip_ver) << 28 | u32::from(tclass) << 20 | (flow_label & 0xF_FFFF);
        view::set_u32(self.buffer.as_mut(), field::VER_TC_FLOW, w);
    }
    /// Set PayLen.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        view::set_u16(self.buffer.as_mut(), field::PAYLEN, len);
    }
    /// Set NxtHdr.
    #[inline]
    pub fn set_next_header(&mut self, nh: u8) {
        self.buffer.as_mut()[field::NXTHDR] = nh;
    }
    /// Set HopLmt.
    #[inline]
    pub fn set_hop_limit(&mut self, hl: u8) {
        self.buffer.as_mut()[field::HOPLMT] = hl;
    }
    /// Set the SGID.
    #[inline]
    pub fn set_sgid(&mut self, gid: Ipv6Addr) {
        self.buffer.as_mut()[field::SGID].copy_from_slice(&gid.octets());
    }
    /// Set the DGID.
    #[inline]
    pub fn set_dgid(&mut self, gid: Ipv6Addr) {
        self.buffer.as_mut()[field::DGID].copy_from_slice(&gid.octets());
    }
}

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

/// Whether `grh` is a RoCEv1 GRH.
///
/// Errors: [`Error::GrhBadHeader`] (IPVer not 6 or NxtHdr not 0x1B).
fn check_header<T: AsRef<[u8]>>(grh: &Packet<T>) -> Result<(), Error> {
    //= IBTA 1.7 §8.3, as ROCEV2-DIGEST §1 states it
    //# GRH (40 B, IPv6-shaped: IPVer 6, TClass, FlowLabel, PayLen, NxtHdr
    //# 0x1B, HopLmt, SGID, DGID) directly followed by BTH
    if grh.ip_ver() != 6 || grh.next_header() != NXTHDR_IBA {
        return Err(Error::GrhBadHeader);
    }
    Ok(())
}

/// The RoCEv1 receive checks of the GRH at the start of `l3`. Returns the end
/// of the packet within `l3` (40 + PayLen).
///
/// Errors: [`Error::GrhTruncated`], [`Error::GrhBadHeader`].
pub(crate) fn check(l3: &[u8]) -> Result<usize, Error> {
    let Some(h) = l3.first_chunk::<HEADER_LEN>() else {
        return Err(Error::GrhTruncated);
    };
    let grh = Packet::new_unchecked(h);
    check_header(&grh)?;
    Ok(HEADER_LEN + usize::from(grh.payload_len()))
}

impl GrhRepr {
    /// Parse a GRH.
    ///
    /// Errors: [`Error::GrhBadHeader`] (IPVer not 6 or next header not
    /// 0x1B).
    pub fn parse<T: AsRef<[u8]>>(grh: &Packet<T>) -> Result<GrhRepr, Error> {
        check_header(grh)?;
        Ok(GrhRepr {
            traffic_class: grh.traffic_class(),
            flow_label: grh.flow_label(),
            payload_len: grh.payload_len(),
            next_header: grh.next_header(),
            hop_limit: grh.hop_limit(),
            sgid: grh.sgid(),
            dgid: grh.dgid(),
        })
    }

    /// Write the 40 bytes (IPVer 6, the rest as given).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, grh: &mut Packet<T>) {
        grh.set_ver_tclass_flow(6, self.traffic_class, self.flow_label);
        grh.set_payload_len(self.payload_len);
        grh.set_next_header(self.next_header);
        grh.set_hop_limit(self.hop_limit);
        grh.set_sgid(self.sgid);
        grh.set_dgid(self.dgid);
    }
}
