//! Classifying any Ethernet frame, for tools that look at every frame
//! (`roce decode`, the fuzz targets): RoCE, malformed RoCE, PFC, PAUSE,
//! other MAC control, ARP, or anything else. Lenient, and never panics.

use super::ethernet::L2Info;
use super::packet::{ParseMode, RocePacket};
use super::{arp, ipv4, ipv6, pfc, Error};
use super::{
    ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MAC_CONTROL, ETHERTYPE_ROCEV1,
    ROCEV2_UDP_PORT,
};

/// What a frame is, for tools that look at every frame (`roce decode`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Frame<'a> {
    /// A RoCE packet (parsed leniently; check [`RocePacket::icrc_status`]).
    Roce(RocePacket<'a>),
    /// Looked like RoCE (RoCEv1 EtherType, or IP/UDP to port 4791) but is
    /// malformed.
    BadRoce(L2Info, Error),
    /// An 802.1Qbb PFC frame.
    Pfc(L2Info, pfc::PfcRepr),
    /// An 802.3x PAUSE frame.
    Pause(L2Info, pfc::PauseRepr),
    /// A MAC control frame that is neither (or is malformed).
    BadMacControl(L2Info, Error),
    /// ARP.
    Arp(L2Info, arp::ArpRepr),
    /// Anything else (including IP traffic that is not RoCE).
    Other(Option<L2Info>),
}

/// Classify and parse any Ethernet frame, leniently. Never panics.
pub fn classify(frame: &[u8]) -> Frame<'_> {
    let Ok(l2) = L2Info::parse(frame) else {
        return Frame::Other(None);
    };
    let l3 = frame.get(l2.header_len()..).unwrap_or(&[]);
    match l2.ethertype {
        ETHERTYPE_MAC_CONTROL => match pfc::MacControl::parse(frame) {
            Ok(pfc::MacControl::Pfc(p)) => Frame::Pfc(l2, p),
            Ok(pfc::MacControl::Pause(p)) => Frame::Pause(l2, p),
            Err(e) => Frame::BadMacControl(l2, e),
        },
        ETHERTYPE_ARP => match arp::ArpRepr::parse(l3) {
            Ok(a) => Frame::Arp(l2, a),
            Err(_) => Frame::Other(Some(l2)),
        },
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 | ETHERTYPE_ROCEV1 => {
            match RocePacket::parse_with(frame, ParseMode::Lenient) {
                Ok(p) => Frame::Roce(p),
                Err(Error::NotRoce) => Frame::Other(Some(l2)),
                Err(e) if looks_like_roce(&l2, l3) => Frame::BadRoce(l2, e),
                Err(_) => Frame::Other(Some(l2)),
            }
        }
        _ => Frame::Other(Some(l2)),
    }
}

/// RoCEv1 EtherType, or an IP header naming UDP whose destination port reads
/// 4791 at the position the IHL gives.
fn looks_like_roce(l2: &L2Info, l3: &[u8]) -> bool {
    // Byte offsets, not views: the headers may be cut short or malformed
    // (two bytes of the UDP destination port are enough).
    const IPV4_PROTOCOL: usize = 9;
    const IPV6_NEXT_HEADER: usize = 6;
    const UDP_DST_PORT: usize = 2;
    let port_at = |off: usize| {
        let p = l3
            .get(off + UDP_DST_PORT..)
            .and_then(|p| p.first_chunk::<2>());
        p.is_some_and(|p| u16::from_be_bytes(*p) == ROCEV2_UDP_PORT)
    };
    match l2.ethertype {
        ETHERTYPE_ROCEV1 => true,
        ETHERTYPE_IPV4 => {
            let ihl = l3.first().map_or(0, |b| usize::from(b & 0x0F) * 4);
            l3.get(IPV4_PROTOCOL) == Some(&ipv4::PROTOCOL_UDP) && port_at(ihl.max(ipv4::HEADER_LEN))
        }
        ETHERTYPE_IPV6 => {
            l3.get(IPV6_NEXT_HEADER) == Some(&ipv4::PROTOCOL_UDP) && port_at(ipv6::HEADER_LEN)
        }
        _ => false,
    }
}
