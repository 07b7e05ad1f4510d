//! Ethernet II header with at most one IEEE 802.1Q tag.
//!
//! ```text
//! +-------------------+-------------------+---------+
//! | destination (6)   | source (6)        | type(2) |                 untagged, 14 bytes
//! +-------------------+-------------------+---------+---------+---------+
//! | destination (6)   | source (6)        | 0x8100  | TCI (2) | type(2) |  tagged, 18 bytes
//! +-------------------+-------------------+---------+---------+---------+
//! TCI: PCP (bits 15:13) | DEI (bit 12) | VID (bits 11:0)
//! ```
//! The tag lies outside the ICRC (RoCEv2 Annex A17.4). smoltcp models the
//! untagged header only, hence this view.

use super::view::{self, Field};
use super::{Error, ETHERTYPE_VLAN};

mod field {
    use super::Field;
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const TCI: Field = 14..16;
    pub const INNER_ETHERTYPE: Field = 16..18;
}

/// Length of an untagged Ethernet header, bytes.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// Length of an Ethernet header with one 802.1Q tag, bytes.
pub const VLAN_HEADER_LEN: usize = field::INNER_ETHERTYPE.end;

/// An IEEE 802.1Q tag (PCP = the PFC priority when the port trusts PCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    /// Decode a TCI.
    pub fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0FFF,
        }
    }
    /// Encode as a TCI.
    pub fn tci(&self) -> u16 {
        (self.pcp as u16 & 7) << 13 | (self.dei as u16) << 12 | (self.vid & 0x0FFF)
    }
}

/// An Ethernet header (and tag) in a buffer. Checked: 14 bytes, 18 when the
/// type field is the 802.1Q TPID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap `buffer` without checking it: the accessors panic if it is
    /// shorter than the header. For writing; on input use
    /// [`EthernetFrame::new_checked`].
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> EthernetFrame<T> {
        EthernetFrame { buffer }
    }

    /// Wrap `buffer` after [`EthernetFrame::check_len`].
    ///
    /// Errors: as [`EthernetFrame::check_len`].
    #[inline]
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>, Error> {
        let f = EthernetFrame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Whether the whole header is in the buffer.
    ///
    /// Errors: [`Error::EthTruncated`] (under 14 bytes),
    /// [`Error::VlanTruncated`] (an 802.1Q TPID without the tag and inner
    /// type).
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(Error::EthTruncated)
        } else if len < self.header_len() {
            Err(Error::VlanTruncated)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        view::get(self.buffer.as_ref(), field::DESTINATION)
    }
    /// Source MAC.
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        view::get(self.buffer.as_ref(), field::SOURCE)
    }
    /// The type field after the source address (0x8100 when tagged).
    #[inline]
    pub fn outer_ethertype(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::ETHERTYPE)
    }
    /// Whether an 802.1Q tag follows the source address.
    #[inline]
    pub fn is_tagged(&self) -> bool {
        self.outer_ethertype() == ETHERTYPE_VLAN
    }
    /// The 802.1Q tag, if any.
    #[inline]
    pub fn vlan(&self) -> Option<VlanTag> {
        self.is_tagged()
            .then(|| VlanTag::from_tci(view::get_u16(self.buffer.as_ref(), field::TCI)))
    }
    /// The EtherType of the payload (after the tag, if any).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        if self.is_tagged() {
            view::get_u16(self.buffer.as_ref(), field::INNER_ETHERTYPE)
        } else {
            self.outer_ethertype()
        }
    }
    /// Length of the header with its tag, bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Set the destination MAC.
    #[inline]
    pub fn set_dst_addr(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&mac);
    }
    /// Set the source MAC.
    #[inline]
    pub fn set_src_addr(&mut self, mac: [u8; 6]) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&mac);
    }
    /// Write the type field(s): `ethertype` alone, or the 802.1Q TPID, the
    /// tag and `ethertype` (the buffer must then hold 18 bytes).
    #[inline]
    pub fn set_ethertype(&mut self, vlan: Option<VlanTag>, ethertype: u16) {
        let b = self.buffer.as_mut();
        match vlan {
            Some(tag) => {
                view::set_u16(b, field::ETHERTYPE, ETHERTYPE_VLAN);
                view::set_u16(b, field::TCI, tag.tci());
                view::set_u16(b, field::INNER_ETHERTYPE, ethertype);
            }
            None => view::set_u16(b, field::ETHERTYPE, ethertype),
        }
    }
}

/// Ethernet fields of a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct L2Info {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// EtherType after the tag.
    pub ethertype: u16,
}

impl L2Info {
    /// Length of the Ethernet header including the tag, bytes.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Parse the Ethernet header (and one 802.1Q tag) of `frame`.
    ///
    /// Errors: [`Error::EthTruncated`], [`Error::VlanTruncated`].
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<L2Info, Error> {
        // Fixed-size views: no bounds checks on the receive hot path.
        let Some(eth) = frame.first_chunk::<HEADER_LEN>() else {
            return Err(Error::EthTruncated);
        };
        let eth = EthernetFrame::new_unchecked(eth);
        let (vlan, ethertype) = if eth.is_tagged() {
            let Some(tagged) = frame.first_chunk::<VLAN_HEADER_LEN>() else {
                return Err(Error::VlanTruncated);
            };
            let tagged = EthernetFrame::new_unchecked(tagged);
            (tagged.vlan(), tagged.ethertype())
        } else {
            (None, eth.outer_ethertype())
        };
        Ok(L2Info {
            dst: eth.dst_addr(),
            src: eth.src_addr(),
            vlan,
            ethertype,
        })
    }
}

/// Ethernet header to write (the EtherType comes from what follows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EthRepr {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// Optional 802.1Q tag (outside the ICRC).
    pub vlan: Option<VlanTag>,
}

impl EthRepr {
    /// The header of a received frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> EthRepr {
        EthRepr {
            dst: frame.dst_addr(),
            src: frame.src_addr(),
            vlan: frame.vlan(),
        }
    }

    /// Length of the header, bytes: 14, or 18 with a tag.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Write the header, with `ethertype` after the tag, into the first
    /// [`EthRepr::header_len`] bytes of `frame`.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>, ethertype: u16) {
        frame.set_dst_addr(self.dst);
        frame.set_src_addr(self.src);
        frame.set_ethertype(self.vlan, ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round trip with and without a tag, checked against smoltcp's view of
    /// the untagged header.
    #[test]
    fn emit_parse_round_trip() {
        for vlan in [
            None,
            Some(VlanTag {
                pcp: 3,
                dei: true,
                vid: 0x123,
            }),
        ] {
            let r = EthRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan,
            };
            let mut b = [0u8; 18];
            r.emit(&mut EthernetFrame::new_unchecked(&mut b[..]), 0x0800);
            let f = EthernetFrame::new_checked(&b[..]).unwrap();
            assert_eq!(EthRepr::parse(&f), r);
            assert_eq!(f.ethertype(), 0x0800);
            assert_eq!(f.header_len(), r.header_len());
            let l2 = L2Info::parse(&b).unwrap();
            assert_eq!(
                (l2.vlan, l2.ethertype, l2.header_len()),
                (vlan, 0x0800, r.header_len())
            );
            let s = smoltcp::wire::EthernetFrame::new_unchecked(&b[..]);
            assert_eq!(s.dst_addr().0, r.dst);
            assert_eq!(s.src_addr().0, r.src);
            let outer = if vlan.is_some() { 0x8100 } else { 0x0800 };
            assert_eq!(u16::from(s.ethertype()), outer);
            if let Some(t) = vlan {
                assert_eq!(&b[14..16], &[0x71, 0x23], "PCP 3, DEI, VID 0x123: {t:?}");
            }
        }
        assert_eq!(L2Info::parse(&[0; 13]), Err(Error::EthTruncated));
        let mut tagged = [0u8; 17];
        tagged[12..14].copy_from_slice(&[0x81, 0x00]);
        assert_eq!(L2Info::parse(&tagged), Err(Error::VlanTruncated));
        assert_eq!(
            EthernetFrame::new_checked(&tagged[..]).err(),
            Some(Error::VlanTruncated)
        );
    }
}
