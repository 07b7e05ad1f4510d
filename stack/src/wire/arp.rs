//! ARP (RFC 826) for Ethernet/IPv4 through `smoltcp::wire` (its `ArpPacket` is
//! the checked view, its `ArpRepr` the meaning), so backends can answer for
//! the stack's address and resolve neighbours.

use core::net::Ipv4Addr;

use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr as SArp, EthernetAddress};

use super::ethernet::{self, EthRepr, EthernetFrame};
use super::{Error, ETHERTYPE_ARP, ETH_MIN_FRAME_LEN};

/// ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// Request (1).
    Request,
    /// Reply (2).
    Reply,
    /// Anything else.
    Other(u16),
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Operation.
    pub op: ArpOp,
    /// Sender MAC.
    pub sender_mac: [u8; 6],
    /// Sender IPv4 address.
    pub sender_ip: Ipv4Addr,
    /// Target MAC (zero in requests).
    pub target_mac: [u8; 6],
    /// Target IPv4 address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parse the ARP packet that follows the Ethernet header.
    ///
    /// Errors: [`Error::ArpMalformed`] for anything but Ethernet/IPv4 ARP.
    pub fn parse(buf: &[u8]) -> Result<ArpRepr, Error> {
        let pkt = ArpPacket::new_checked(buf).map_err(|_| Error::ArpMalformed)?;
        match SArp::parse(&pkt).map_err(|_| Error::ArpMalformed)? {
            SArp::EthernetIpv4 {
                operation,
                source_hardware_addr,
                source_protocol_addr,
                target_hardware_addr,
                target_protocol_addr,
            } => Ok(ArpRepr {
                op: match operation {
                    ArpOperation::Request => ArpOp::Request,
                    ArpOperation::Reply => ArpOp::Reply,
                    ArpOperation::Unknown(v) => ArpOp::Other(v),
                },
                sender_mac: source_hardware_addr.0,
                sender_ip: source_protocol_addr,
                target_mac: target_hardware_addr.0,
                target_ip: target_protocol_addr,
            }),
            #[allow(unreachable_patterns)]
            _ => Err(Error::ArpMalformed),
        }
    }

    /// A request from `mac`/`ip` asking who has `target`.
    pub fn request(mac: [u8; 6], ip: Ipv4Addr, target: Ipv4Addr) -> ArpRepr {
        ArpRepr {
            op: ArpOp::Request,
            sender_mac: mac,
            sender_ip: ip,
            target_mac: [0; 6],
            target_ip: target,
        }
    }

    /// The reply to this request from the owner of its target address.
    pub fn reply_from(&self, mac: [u8; 6]) -> ArpRepr {
        ArpRepr {
            op: ArpOp::Reply,
            sender_mac: mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }

    /// Write a whole Ethernet frame (broadcast for requests, unicast to the
    /// target for replies), zero-padded to 60 bytes. Returns its length.
    ///
    /// Errors: [`Error::BufferTooSmall`].
    pub fn emit_frame(&self, buf: &mut [u8]) -> Result<usize, Error> {
        let out = buf
            .get_mut(..ETH_MIN_FRAME_LEN)
            .ok_or(Error::BufferTooSmall)?;
        out.fill(0);
        let (eth, body) = out.split_at_mut(ethernet::HEADER_LEN);
        let eth_repr = EthRepr {
            dst: match self.op {
                ArpOp::Request => [0xFF; 6],
                _ => self.target_mac,
            },
            src: self.sender_mac,
            vlan: None,
        };
        eth_repr.emit(&mut EthernetFrame::new_unchecked(eth), ETHERTYPE_ARP);
        let repr = SArp::EthernetIpv4 {
            operation: match self.op {
                ArpOp::Request => ArpOperation::Request,
                ArpOp::Reply => ArpOperation::Reply,
                ArpOp::Other(v) => ArpOperation::Unknown(v),
            },
            source_hardware_addr: EthernetAddress(self.sender_mac),
            source_protocol_addr: self.sender_ip,
            target_hardware_addr: EthernetAddress(self.target_mac),
            target_protocol_addr: self.target_ip,
        };
        let mut pkt = ArpPacket::new_unchecked(&mut body[..repr.buffer_len()]);
        repr.emit(&mut pkt);
        Ok(ETH_MIN_FRAME_LEN)
    }
}
