//! Wire formats: zero-copy parsers and in-place builders for every frame the
//! stack sends or receives.
//!
//! One module per header, each with its checked view (`Packet<T:
//! AsRef<[u8]>>`: `new_checked`, field getters, setters when the buffer is
//! `AsMut`), its `Repr` (`parse`, `emit`) and the receive checks of that
//! header:
//!
//! | Layer | Modules |
//! |---|---|
//! | Ethernet, 802.1Q | [`ethernet`] |
//! | network | [`ipv4`], [`ipv6`], RoCEv1's [`grh`] |
//! | UDP | [`udp`] (and the checksum policy) |
//! | transport | [`bth`]; extension headers [`rdeth`], [`deth`], [`xrceth`], [`feth`], [`reth`], [`atmeth`], [`aeth`], [`atmack`], [`immdt`], [`ieth`] (together: [`ext`]); [`cnp`] |
//! | other frames | [`pfc`] (802.1Qbb PFC, 802.3x PAUSE), [`arp`] (through `smoltcp::wire`) |
//! | shared | [`opcode`] (the opcode table), [`checksum`] (RFC 1071/1624) |
//!
//! [`packet::RocePacket::parse`] reads a whole frame by composing the views,
//! [`builder::PacketRepr`] writes one by composing the `Repr`s, and
//! [`frame::classify`] sorts any frame for tools. None allocates. Every
//! malformed input gives an [`Error`], never a panic, and every `Error` names
//! the drop counter it increments ([`Error::counter_name`]).
//!
//! Each check carries its source s2n-quic style: a `//=` line naming the
//! spec and section, then `//#` lines quoting it. Where the spec text is not
//! at hand here (IBTA, IEEE), the `//=` line says so and the quote is
//! ROCEV2-DIGEST's statement of the rule (../shared/reference).

pub mod aeth;
pub mod arp;
pub mod atmack;
pub mod atmeth;
pub mod bth;
pub mod builder;
pub mod checksum;
pub mod cnp;
pub mod deth;
pub mod ethernet;
pub mod ext;
pub mod feth;
pub mod frame;
pub mod grh;
pub mod ieth;
pub mod immdt;
pub mod ipv4;
pub mod ipv6;
pub mod opcode;
pub mod packet;
pub mod pfc;
pub mod rdeth;
pub mod reth;
pub mod udp;
mod view;
pub mod xrceth;

pub use bth::{BthRepr, Packet as BthPacket};
pub use builder::{NetRepr, PacketRepr};
pub use ethernet::{EthRepr, EthernetFrame, L2Info, VlanTag};
pub use ext::{AethSyndrome, ExtHeaders, ExtView, NakCode};
pub use frame::{classify, Frame};
pub use grh::Packet as GrhPacket;
pub use ipv4::{patch_ipv4_ident, Ipv4Info, Ipv4Repr, Packet as Ipv4Packet};
pub use ipv6::{Ipv6Info, Ipv6Repr, Packet as Ipv6Packet};
pub use opcode::{ExtHeader, HdrMask, Opcode, OpcodeInfo, Position, Transport};
pub use packet::{IcrcStatus, NetInfo, ParseMode, RocePacket};
pub use udp::{Packet as UdpPacket, UdpChecksum, UdpInfo, UdpRepr};

use core::fmt;

/// UDP destination port of RoCEv2 (IANA), Annex A17.2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// EtherType of RoCEv1 (a GRH directly after the Ethernet header), Annex A16.
pub const ETHERTYPE_ROCEV1: u16 = 0x8915;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// TPID of an IEEE 802.1Q tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of MAC control frames (802.3 Annex 31B PAUSE, 802.1Qbb PFC).
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;
/// Minimum Ethernet frame length without the FCS, bytes (IEEE 802.3 §3.2.7).
pub const ETH_MIN_FRAME_LEN: usize = 60;
/// Length of the ICRC, bytes.
pub const ICRC_LEN: usize = 4;

/// Why a frame could not be parsed or built. Each variant is one drop reason with
/// its own counter name ([`Error::counter_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// Shorter than an Ethernet header (14 bytes).
    EthTruncated,
    /// An 802.1Q TPID without the 4 tag bytes and inner EtherType.
    VlanTruncated,
    /// Not RoCE: another EtherType, IP protocol or UDP destination port.
    NotRoce,
    /// Fewer than 20 bytes where an IPv4 header should be.
    Ipv4Truncated,
    /// IPv4 version field is not 4.
    Ipv4BadVersion,
    /// IPv4 IHL below 5, or larger than the captured bytes (CASES R01 a, b).
    Ipv4BadIhl,
    /// IPv4 options (IHL > 5). Rejected by rule: RoCEv2 senders never emit them
    /// (rxe builds IHL 5), Annex A17.4's ICRC recipe covers a 20-byte header, and
    /// accepting them would shift the UD GRH layout (CASES R01, R27 c).
    Ipv4Options,
    /// IPv4 total length smaller than header + UDP header (CASES R01 c).
    Ipv4BadTotalLen,
    /// IPv4 fragment (MF set or offset non-zero): RoCEv2 is never fragmented
    /// (CASES R01 e).
    Ipv4Fragment,
    /// IPv4 header checksum wrong.
    Ipv4BadChecksum,
    /// Fewer than 40 bytes where an IPv6 header should be.
    Ipv6Truncated,
    /// IPv6 version field is not 6.
    Ipv6BadVersion,
    /// Fewer than 8 bytes for the UDP header.
    UdpTruncated,
    /// UDP length below 8 or beyond the IP payload (CASES R02).
    UdpBadLen,
    /// The IP or UDP (or GRH) length runs past the captured bytes: the ICRC is not
    /// in the frame, or the IP length is bogus (CASES R04 c, R01 d).
    Truncated,
    /// Fewer than 40 bytes for a RoCEv1 GRH.
    GrhTruncated,
    /// GRH IPVer is not 6 or its next header is not 0x1B (IBTA §8.3).
    GrhBadHeader,
    /// The transport payload is shorter than BTH + ICRC.
    BthTruncated,
    /// BTH TVer is not 0 (IBTA §9.2; rxe drops these).
    BadTver,
    /// The transport payload is shorter than the opcode's extension headers plus
    /// the ICRC (CASES R02).
    ExtTruncated,
    /// PadCnt larger than the payload that precedes the ICRC (CASES R02).
    PadTooLarge,
    /// A reserved or manufacturer-specific opcode (strict mode only).
    UnsupportedOpcode(u8),
    /// The ICRC does not match (CASES R06: silent drop, counted).
    IcrcMismatch,
    /// MAC control frame shorter than its fields.
    MacControlTruncated,
    /// MAC control frame sent to a destination other than 01:80:C2:00:00:01
    /// (CASES R33 e).
    MacControlBadDst,
    /// MAC control opcode other than PAUSE (0x0001) or PFC (0x0101).
    MacControlUnknownOpcode(u16),
    /// ARP packet smoltcp cannot parse.
    ArpMalformed,
    /// Builder: the output buffer is too small.
    BufferTooSmall,
    /// Builder: the extension headers given do not match the opcode's.
    ExtHeaderMismatch,
    /// Builder: the packet does not fit the 16-bit IP/UDP length fields. (Whether
    /// an opcode may carry payload is the transports' business: the builder writes
    /// what it is given, so captured oddities can be rebuilt.)
    BadPayloadLen,
}

impl Error {
    /// Name of the drop counter this error increments. Names follow rxe/mlx5
    /// where one exists (`rx_icrc_err` is mlx5's ICRC error counter name in
    /// spirit; the kernel's rxe only logs).
    pub fn counter_name(&self) -> &'static str {
        match self {
            Error::EthTruncated => "rx_eth_truncated",
            Error::VlanTruncated => "rx_vlan_truncated",
            Error::NotRoce => "rx_not_roce",
            Error::Ipv4Truncated => "rx_ipv4_truncated",
            Error::Ipv4BadVersion => "rx_ipv4_bad_version",
            Error::Ipv4BadIhl => "rx_ipv4_bad_ihl",
            Error::Ipv4Options => "rx_ipv4_options",
            Error::Ipv4BadTotalLen => "rx_ipv4_bad_total_len",
            Error::Ipv4Fragment => "rx_ipv4_fragment",
            Error::Ipv4BadChecksum => "rx_ipv4_bad_checksum",
            Error::Ipv6Truncated => "rx_ipv6_truncated",
            Error::Ipv6BadVersion => "rx_ipv6_bad_version",
            Error::UdpTruncated => "rx_udp_truncated",
            Error::UdpBadLen => "rx_udp_bad_len",
            Error::Truncated => "rx_truncated",
            Error::GrhTruncated => "rx_grh_truncated",
            Error::GrhBadHeader => "rx_grh_bad_header",
            Error::BthTruncated => "rx_bth_truncated",
            Error::BadTver => "rx_bad_tver",
            Error::ExtTruncated => "rx_ext_truncated",
            Error::PadTooLarge => "rx_pad_too_large",
            Error::UnsupportedOpcode(_) => "rx_unsupported_opcode",
            Error::IcrcMismatch => "rx_icrc_err",
            Error::MacControlTruncated => "rx_mac_control_truncated",
            Error::MacControlBadDst => "rx_mac_control_bad_dst",
            Error::MacControlUnknownOpcode(_) => "rx_mac_control_unknown_opcode",
            Error::ArpMalformed => "rx_arp_malformed",
            Error::BufferTooSmall => "tx_buffer_too_small",
            Error::ExtHeaderMismatch => "tx_ext_header_mismatch",
            Error::BadPayloadLen => "tx_bad_payload_len",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::UnsupportedOpcode(op) => write!(f, "unsupported opcode 0x{op:02x}"),
            Error::MacControlUnknownOpcode(op) => {
                write!(f, "unknown MAC control opcode 0x{op:04x}")
            }
            e => f.write_str(e.counter_name()),
        }
    }
}

impl std::error::Error for Error {}

/// Counters of dropped frames, one per [`Error`] kind, named by
/// [`Error::counter_name`].
#[derive(Debug, Clone, Default)]
pub struct DropCounters {
    counts: std::collections::BTreeMap<&'static str, u64>,
}

impl DropCounters {
    /// Count one drop.
    pub fn record(&mut self, e: &Error) {
        *self.counts.entry(e.counter_name()).or_insert(0) += 1;
    }
    /// Value of a counter (0 if never incremented).
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }
    /// Every non-zero counter, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }
}
