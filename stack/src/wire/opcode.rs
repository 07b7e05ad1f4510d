//! The BTH opcode table: every fact about an opcode in one place.
//!
//! An opcode is `transport (bits 7:5) | operation (bits 4:0)` (IBTA 1.7 §9.2.1,
//! Table 36). For each of the 256 values [`OPCODE_INFO`] records its name, its
//! transport, the extension headers that follow the BTH (in wire order, with
//! their offsets), whether it carries payload, and its position in a message
//! (first/middle/last/only). Parsers, builders and the transports read this table
//! instead of matching on opcodes (the rxe `rxe_opcode.c` design).
//!
//! Reserved opcodes and the manufacturer-specific range 0xE0..=0xFF have
//! [`Transport::Reserved`] / [`Transport::Manufacturer`] and `supported == false`:
//! the frame parser still returns their BTH and ICRC (so tools can show them), and
//! the receive path drops them with the `unsupported_opcode` counter.

use core::fmt;

pub use super::ext::{ExtHeader, HdrMask};

/// Transport service of an opcode (BTH opcode bits 7:5), IBTA 1.7 §9.2.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected, 0x00..=0x1F.
    Rc,
    /// Unreliable Connected, 0x20..=0x3F.
    Uc,
    /// Reliable Datagram, 0x40..=0x5F.
    Rd,
    /// Unreliable Datagram, 0x60..=0x7F.
    Ud,
    /// Congestion Notification Packet, 0x80..=0x9F (RoCEv2 uses 0x81; 0x80 is the
    /// native-IB CNP that Linux names `IB_OPCODE_CNP`).
    Cnp,
    /// Extended Reliable Connected, 0xA0..=0xBF.
    Xrc,
    /// Reserved by the IBTA (0xC0..=0xDF, and unassigned operations elsewhere).
    Reserved,
    /// Manufacturer-specific, 0xE0..=0xFF.
    Manufacturer,
}

impl Transport {
    /// Short name as used in opcode names (`RC`, `UC`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Reserved => "RESERVED",
            Transport::Manufacturer => "MANUFACTURER",
        }
    }
}

/// Position of a packet within a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Middle packet.
    Middle,
    /// Last packet of a multi-packet message.
    Last,
    /// The only packet of a message (also every non-data packet: ACKs, READ
    /// requests, atomics, CNPs).
    Only,
}

/// What kind of operation an opcode belongs to (the rxe `RXE_*_MASK` families).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// SEND (all variants).
    Send,
    /// RDMA WRITE (all variants).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE.
    Ack,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAck,
    /// COMPARE_SWAP or FETCH_ADD.
    Atomic,
    /// RD RESYNC.
    Resync,
    /// FLUSH.
    Flush,
    /// ATOMIC WRITE.
    AtomicWrite,
    /// Congestion notification.
    Cnp,
    /// Reserved or manufacturer-specific: nothing is known.
    Unknown,
}

/// Everything the table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name in the Wireshark/rxe style, e.g. `RC_RDMA_WRITE_FIRST`; reserved
    /// opcodes are named `RESERVED`/`MANUFACTURER`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation family.
    pub kind: OpKind,
    /// Extension headers after the BTH.
    pub hdrs: HdrMask,
    /// Total length of those headers, bytes.
    pub hdr_len: u8,
    /// Whether the packet carries payload (data after the extension headers).
    /// ATOMIC WRITE carries exactly 8 bytes.
    pub payload: bool,
    /// Position in a message.
    pub position: Position,
    /// Whether a request carrying this opcode immediately marks the end of a
    /// message for the MSN and completion rules (LAST or ONLY).
    pub ends_message: bool,
    /// Whether the packet is a request (sent by a requester) rather than a
    /// response (ACK, READ response, ATOMIC ACK).
    pub is_request: bool,
    /// Whether this table describes the opcode (false for reserved and
    /// manufacturer-specific values).
    pub supported: bool,
}

const UNKNOWN: OpcodeInfo = OpcodeInfo {
    name: "RESERVED",
    transport: Transport::Reserved,
    kind: OpKind::Unknown,
    hdrs: HdrMask::EMPTY,
    hdr_len: 0,
    payload: true,
    position: Position::Only,
    ends_message: false,
    is_request: false,
    supported: false,
};

/// One operation of the RC/UC/RD/XRC family (operation code = low 5 bits).
struct Op {
    code: u8,
    /// Operation name without the transport prefix (checked against the
    /// per-transport name arrays in the tests).
    #[cfg_attr(not(test), allow(dead_code))]
    name: &'static str,
    kind: OpKind,
    hdrs: HdrMask,
    payload: bool,
    position: Position,
}

const fn m(list: &[ExtHeader]) -> HdrMask {
    let mut mask = HdrMask::EMPTY;
    let mut i = 0;
    while i < list.len() {
        mask = mask.with(list[i]);
        i += 1;
    }
    mask
}

use ExtHeader as H;
use OpKind as K;
use Position as P;

const fn op(
    code: u8,
    name: &'static str,
    kind: OpKind,
    hdrs: HdrMask,
    payload: bool,
    position: Position,
) -> Op {
    Op {
        code,
        name,
        kind,
        hdrs,
        payload,
        position,
    }
}

/// The operations of IBTA 1.7 Table 36 for the connected/datagram-reliable
/// transports, with their RC header layout.
#[rustfmt::skip]
const OPS: [Op; 25] = [
    // code, name,                            kind,            headers after the BTH,          payload, position
    op(0x00, "SEND_FIRST",                     K::Send,         HdrMask::EMPTY,                 true,  P::First),
    op(0x01, "SEND_MIDDLE",                    K::Send,         HdrMask::EMPTY,                 true,  P::Middle),
    op(0x02, "SEND_LAST",                      K::Send,         HdrMask::EMPTY,                 true,  P::Last),
    op(0x03, "SEND_LAST_WITH_IMMEDIATE",       K::Send,         m(&[H::ImmDt]),                 true,  P::Last),
    op(0x04, "SEND_ONLY",                      K::Send,         HdrMask::EMPTY,                 true,  P::Only),
    op(0x05, "SEND_ONLY_WITH_IMMEDIATE",       K::Send,         m(&[H::ImmDt]),                 true,  P::Only),
    op(0x06, "RDMA_WRITE_FIRST",               K::Write,        m(&[H::Reth]),                  true,  P::First),
    op(0x07, "RDMA_WRITE_MIDDLE",              K::Write,        HdrMask::EMPTY,                 true,  P::Middle),
    op(0x08, "RDMA_WRITE_LAST",                K::Write,        HdrMask::EMPTY,                 true,  P::Last),
    op(0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", K::Write,        m(&[H::ImmDt]),                 true,  P::Last),
    op(0x0A, "RDMA_WRITE_ONLY",                K::Write,        m(&[H::Reth]),                  true,  P::Only),
    op(0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", K::Write,        m(&[H::Reth, H::ImmDt]),        true,  P::Only),
    op(0x0C, "RDMA_READ_REQUEST",              K::ReadRequest,  m(&[H::Reth]),                  false, P::Only),
    op(0x0D, "RDMA_READ_RESPONSE_FIRST",       K::ReadResponse, m(&[H::Aeth]),                  true,  P::First),
    op(0x0E, "RDMA_READ_RESPONSE_MIDDLE",      K::ReadResponse, HdrMask::EMPTY,                 true,  P::Middle),
    op(0x0F, "RDMA_READ_RESPONSE_LAST",        K::ReadResponse, m(&[H::Aeth]),                  true,  P::Last),
    op(0x10, "RDMA_READ_RESPONSE_ONLY",        K::ReadResponse, m(&[H::Aeth]),                  true,  P::Only),
    op(0x11, "ACKNOWLEDGE",                    K::Ack,          m(&[H::Aeth]),                  false, P::Only),
    op(0x12, "ATOMIC_ACKNOWLEDGE",             K::AtomicAck,    m(&[H::Aeth, H::AtomicAckEth]), false, P::Only),
    op(0x13, "COMPARE_SWAP",                   K::Atomic,       m(&[H::AtomicEth]),             false, P::Only),
    op(0x14, "FETCH_ADD",                      K::Atomic,       m(&[H::AtomicEth]),             false, P::Only),
    op(0x16, "SEND_LAST_WITH_INVALIDATE",      K::Send,         m(&[H::Ieth]),                  true,  P::Last),
    op(0x17, "SEND_ONLY_WITH_INVALIDATE",      K::Send,         m(&[H::Ieth]),                  true,  P::Only),
    op(0x1C, "FLUSH",                          K::Flush,        m(&[H::Feth, H::Reth]),         false, P::Only),
    op(0x1D, "ATOMIC_WRITE",                   K::AtomicWrite,  m(&[H::Reth]),                  true,  P::Only),
];

const fn is_response(kind: OpKind) -> bool {
    matches!(kind, K::ReadResponse | K::Ack | K::AtomicAck)
}

const fn info_for(transport: Transport, o: &Op, name: &'static str) -> OpcodeInfo {
    let hdrs = match transport {
        // RD requests: RDETH, DETH, then as RC; RD responses: RDETH then as RC
        // (IBTA 1.7 §9.2, rxe_opcode.c).
        Transport::Rd => {
            if is_response(o.kind) {
                o.hdrs.with(H::Rdeth)
            } else {
                o.hdrs.with(H::Rdeth).with(H::Deth)
            }
        }
        // XRC requests carry an XRCETH right after the BTH; responses do not.
        Transport::Xrc => {
            if is_response(o.kind) {
                o.hdrs
            } else {
                o.hdrs.with(H::Xrceth)
            }
        }
        _ => o.hdrs,
    };
    OpcodeInfo {
        name,
        transport,
        kind: o.kind,
        hdrs,
        hdr_len: hdrs.total_len() as u8,
        payload: o.payload,
        position: o.position,
        ends_message: matches!(o.position, P::Last | P::Only),
        is_request: !is_response(o.kind),
        supported: true,
    }
}

/// Names `<transport>_<operation>` for every supported opcode, as string
/// constants (const code cannot concatenate strings).
macro_rules! names {
    ($($t:ident: [$($n:literal),* $(,)?]),* $(,)?) => {
        $(const $t: [&str; 25] = [$($n),*];)*
    };
}

names! {
    RC_NAMES: [
        "RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST", "RC_SEND_LAST_WITH_IMMEDIATE",
        "RC_SEND_ONLY", "RC_SEND_ONLY_WITH_IMMEDIATE", "RC_RDMA_WRITE_FIRST",
        "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "RC_RDMA_WRITE_ONLY", "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RC_RDMA_READ_REQUEST",
        "RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE",
        "RC_RDMA_READ_RESPONSE_LAST", "RC_RDMA_READ_RESPONSE_ONLY", "RC_ACKNOWLEDGE",
        "RC_ATOMIC_ACKNOWLEDGE", "RC_COMPARE_SWAP", "RC_FETCH_ADD",
        "RC_SEND_LAST_WITH_INVALIDATE", "RC_SEND_ONLY_WITH_INVALIDATE", "RC_FLUSH",
        "RC_ATOMIC_WRITE",
    ],
    UC_NAMES: [
        "UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST", "UC_SEND_LAST_WITH_IMMEDIATE",
        "UC_SEND_ONLY", "UC_SEND_ONLY_WITH_IMMEDIATE", "UC_RDMA_WRITE_FIRST",
        "UC_RDMA_WRITE_MIDDLE", "UC_RDMA_WRITE_LAST", "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "UC_RDMA_WRITE_ONLY", "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "", "", "", "", "", "",
        "", "", "", "", "", "", "",
    ],
    RD_NAMES: [
        "RD_SEND_FIRST", "RD_SEND_MIDDLE", "RD_SEND_LAST", "RD_SEND_LAST_WITH_IMMEDIATE",
        "RD_SEND_ONLY", "RD_SEND_ONLY_WITH_IMMEDIATE", "RD_RDMA_WRITE_FIRST",
        "RD_RDMA_WRITE_MIDDLE", "RD_RDMA_WRITE_LAST", "RD_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "RD_RDMA_WRITE_ONLY", "RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RD_RDMA_READ_REQUEST",
        "RD_RDMA_READ_RESPONSE_FIRST", "RD_RDMA_READ_RESPONSE_MIDDLE",
        "RD_RDMA_READ_RESPONSE_LAST", "RD_RDMA_READ_RESPONSE_ONLY", "RD_ACKNOWLEDGE",
        "RD_ATOMIC_ACKNOWLEDGE", "RD_COMPARE_SWAP", "RD_FETCH_ADD", "", "", "RD_FLUSH",
        "RD_ATOMIC_WRITE",
    ],
    XRC_NAMES: [
        "XRC_SEND_FIRST", "XRC_SEND_MIDDLE", "XRC_SEND_LAST", "XRC_SEND_LAST_WITH_IMMEDIATE",
        "XRC_SEND_ONLY", "XRC_SEND_ONLY_WITH_IMMEDIATE", "XRC_RDMA_WRITE_FIRST",
        "XRC_RDMA_WRITE_MIDDLE", "XRC_RDMA_WRITE_LAST", "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "XRC_RDMA_WRITE_ONLY", "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "XRC_RDMA_READ_REQUEST",
        "XRC_RDMA_READ_RESPONSE_FIRST", "XRC_RDMA_READ_RESPONSE_MIDDLE",
        "XRC_RDMA_READ_RESPONSE_LAST", "XRC_RDMA_READ_RESPONSE_ONLY", "XRC_ACKNOWLEDGE",
        "XRC_ATOMIC_ACKNOWLEDGE", "XRC_COMPARE_SWAP", "XRC_FETCH_ADD",
        "XRC_SEND_LAST_WITH_INVALIDATE", "XRC_SEND_ONLY_WITH_INVALIDATE", "", "",
    ],
}

const fn build_table() -> [OpcodeInfo; 256] {
    let mut t = [UNKNOWN; 256];
    // Reserved ranges keep UNKNOWN; the manufacturer range is marked as such.
    let mut i = 0xE0;
    while i < 0x100 {
        t[i] = OpcodeInfo {
            name: "MANUFACTURER",
            transport: Transport::Manufacturer,
            ..UNKNOWN
        };
        i += 1;
    }
    let mut i = 0;
    while i < OPS.len() {
        let o = &OPS[i];
        let c = o.code as usize;
        // RC: every operation.
        t[c] = info_for(Transport::Rc, o, RC_NAMES[i]);
        // UC: SEND and WRITE, 0x00..=0x0B (IBTA Table 36).
        if o.code <= 0x0B {
            t[0x20 | c] = info_for(Transport::Uc, o, UC_NAMES[i]);
        }
        // RD: everything but the INVALIDATE sends.
        if o.code != 0x16 && o.code != 0x17 {
            t[0x40 | c] = info_for(Transport::Rd, o, RD_NAMES[i]);
        }
        // XRC: 0x00..=0x17.
        if o.code <= 0x17 {
            t[0xA0 | c] = info_for(Transport::Xrc, o, XRC_NAMES[i]);
        }
        i += 1;
    }
    // RD RESYNC (0x55): RDETH, DETH, no payload.
    t[0x55] = OpcodeInfo {
        name: "RD_RESYNC",
        transport: Transport::Rd,
        kind: K::Resync,
        hdrs: m(&[H::Rdeth, H::Deth]),
        hdr_len: 12,
        payload: false,
        position: P::Only,
        ends_message: true,
        is_request: true,
        supported: true,
    };
    // UD: SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE with a DETH (IBTA §9.2).
    t[0x64] = OpcodeInfo {
        name: "UD_SEND_ONLY",
        transport: Transport::Ud,
        kind: K::Send,
        hdrs: m(&[H::Deth]),
        hdr_len: 8,
        payload: true,
        position: P::Only,
        ends_message: true,
        is_request: true,
        supported: true,
    };
    t[0x65] = OpcodeInfo {
        name: "UD_SEND_ONLY_WITH_IMMEDIATE",
        hdrs: m(&[H::Deth, H::ImmDt]),
        hdr_len: 12,
        ..t[0x64]
    };
    // CNP: RoCEv2 0x81 (Annex A17.9.3); 0x80 is the native-IB CNP code, given
    // the same layout so captures using it decode.
    let cnp = OpcodeInfo {
        name: "CNP",
        transport: Transport::Cnp,
        kind: K::Cnp,
        hdrs: m(&[H::CnpPad]),
        hdr_len: 16,
        payload: false,
        position: P::Only,
        ends_message: false,
        is_request: false,
        supported: true,
    };
    t[0x81] = cnp;
    t[0x80] = OpcodeInfo {
        name: "CNP_IB",
        ..cnp
    };
    t
}

/// The table, indexed by opcode byte.
pub static OPCODE_INFO: [OpcodeInfo; 256] = build_table();

/// The table as a constant, for lookups at compile time ([`Opcode::find`]).
const TABLE: [OpcodeInfo; 256] = build_table();

/// A BTH opcode. Every `u8` is a valid `Opcode`; whether the table describes it is
/// [`OpcodeInfo::supported`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

impl Opcode {
    /// Table entry for this opcode.
    #[inline]
    pub fn info(self) -> &'static OpcodeInfo {
        &OPCODE_INFO[self.0 as usize]
    }

    /// Name, e.g. `RC_SEND_ONLY`.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether the table describes this opcode.
    pub fn is_supported(self) -> bool {
        self.info().supported
    }

    /// Look an opcode up by its name (`RC_SEND_ONLY`, case-sensitive).
    pub fn from_name(name: &str) -> Option<Opcode> {
        (0..=255u8)
            .map(Opcode)
            .find(|o| o.is_supported() && o.name() == name)
    }

    /// Every supported opcode, ascending.
    pub fn all_supported() -> impl Iterator<Item = Opcode> {
        (0..=255u8).map(Opcode).filter(|o| o.is_supported())
    }

    /// The opcode of operation `kind` on `transport` at `position` in its
    /// message, whose extension headers include exactly `extra` of ImmDt
    /// and IETH (ImmDt: "with immediate", IETH: "with invalidate"; empty:
    /// the plain operation). E.g. (UC, WRITE, LAST, ImmDt) is
    /// `UC_RDMA_WRITE_LAST_WITH_IMMEDIATE`. The lowest such opcode when
    /// several match (COMPARE_SWAP and FETCH_ADD are both atomics: name
    /// those by their constants); `None` when the table has none.
    ///
    /// A `const fn` scanning the table, for building lookup tables at
    /// compile time rather than for per-packet use.
    pub const fn find(
        transport: Transport,
        kind: OpKind,
        position: Position,
        extra: HdrMask,
    ) -> Option<Opcode> {
        let variants = HdrMask::EMPTY.with(H::ImmDt).with(H::Ieth).0;
        let mut i = 0;
        while i < TABLE.len() {
            let e = &TABLE[i];
            if e.supported
                && e.transport as u8 == transport as u8
                && e.kind as u8 == kind as u8
                && e.position as u8 == position as u8
                && (e.hdrs.0 & variants) == extra.0
            {
                return Some(Opcode(i as u8));
            }
            i += 1;
        }
        None
    }
}

/// Named constants for the opcodes used by the stack (IBTA 1.7 Table 36).
#[allow(missing_docs)]
impl Opcode {
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    /// Native-IB CNP code (Linux `IB_OPCODE_CNP`).
    pub const CNP_IB: Opcode = Opcode(0x80);
    /// RoCEv2 CNP (Annex A17.9.3).
    pub const CNP: Opcode = Opcode(0x81);
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_supported() {
            f.write_str(self.name())
        } else {
            write!(f, "{}(0x{:02x})", self.name(), self.0)
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opcode(0x{:02x} {})", self.0, self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_iterates_in_wire_order() {
        // HdrMask::iter relies on bit i being ExtHeader::ALL[i].
        for (i, h) in ExtHeader::ALL.iter().enumerate() {
            assert_eq!(h.bit(), 1 << i);
        }
        let all = HdrMask(u16::MAX);
        assert!(all.iter().eq(ExtHeader::ALL));
        let reth_imm = HdrMask::EMPTY.with(ExtHeader::ImmDt).with(ExtHeader::Reth);
        assert!(reth_imm.iter().eq([ExtHeader::Reth, ExtHeader::ImmDt]));
        assert_eq!(HdrMask::EMPTY.iter().count(), 0);
    }

    #[test]
    fn digest_table_rows() {
        // Rows of ROCEV2-DIGEST.md §3 (RC form).
        let o = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info();
        assert_eq!(o.hdrs, m(&[H::Reth, H::ImmDt]));
        assert_eq!(o.hdr_len, 20);
        assert_eq!(o.hdrs.offset_of(H::ImmDt), Some(16));
        let o = Opcode::RC_ATOMIC_ACKNOWLEDGE.info();
        assert_eq!(o.hdr_len, 12);
        assert!(!o.payload);
        assert!(!o.is_request);
        assert!(!Opcode(0x15).info().supported);
        assert!(!Opcode(0x2C).info().supported);
        assert_eq!(Opcode(0xC0).info().transport, Transport::Reserved);
        assert_eq!(Opcode(0xE5).info().transport, Transport::Manufacturer);
        // FLUSH: FETH then RETH.
        let o = Opcode::RC_FLUSH.info();
        assert_eq!(o.hdrs.offset_of(H::Feth), Some(0));
        assert_eq!(o.hdrs.offset_of(H::Reth), Some(4));
        // RD request: RDETH, DETH, RETH.
        let o = Opcode(0x4A).info();
        assert_eq!(o.name, "RD_RDMA_WRITE_ONLY");
        assert_eq!(o.hdrs.offset_of(H::Rdeth), Some(0));
        assert_eq!(o.hdrs.offset_of(H::Deth), Some(4));
        assert_eq!(o.hdrs.offset_of(H::Reth), Some(12));
        // RD ACK: RDETH, AETH.
        assert_eq!(Opcode(0x51).info().hdr_len, 8);
        // XRC request has XRCETH first; XRC ACK has none.
        let o = Opcode(0xA6).info();
        assert_eq!(o.hdrs.offset_of(H::Xrceth), Some(0));
        assert_eq!(o.hdrs.offset_of(H::Reth), Some(4));
        assert_eq!(Opcode(0xB1).info().hdr_len, 4);
        assert_eq!(Opcode::CNP.info().hdr_len, 16);
        assert_eq!(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().hdr_len, 12);
    }

    #[test]
    fn find_by_transport_operation_position() {
        let imm = HdrMask::EMPTY.with(ExtHeader::ImmDt);
        let inv = HdrMask::EMPTY.with(ExtHeader::Ieth);
        let e = HdrMask::EMPTY;
        let find = Opcode::find;
        assert_eq!(
            find(Transport::Rc, OpKind::Send, Position::First, e),
            Some(Opcode::RC_SEND_FIRST)
        );
        assert_eq!(
            find(Transport::Rc, OpKind::Send, Position::Only, inv),
            Some(Opcode::RC_SEND_ONLY_WITH_INVALIDATE)
        );
        assert_eq!(
            find(Transport::Uc, OpKind::Write, Position::Last, imm).map(|o| o.0),
            Some(0x29)
        );
        assert_eq!(find(Transport::Uc, OpKind::Send, Position::Last, inv), None);
        assert_eq!(
            find(Transport::Ud, OpKind::Send, Position::Only, imm),
            Some(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE)
        );
        assert_eq!(
            find(Transport::Rc, OpKind::ReadRequest, Position::Only, e),
            Some(Opcode::RC_RDMA_READ_REQUEST)
        );
        // Every supported RC/UC SEND and WRITE opcode is found from its own
        // table facts.
        for o in Opcode::all_supported() {
            let i = o.info();
            if matches!(i.transport, Transport::Rc | Transport::Uc)
                && matches!(i.kind, OpKind::Send | OpKind::Write)
            {
                let extra = HdrMask(i.hdrs.0 & (imm.0 | inv.0));
                assert_eq!(find(i.transport, i.kind, i.position, extra), Some(o), "{o}");
            }
        }
    }

    #[test]
    fn names_unique_and_consistent() {
        let mut seen = std::collections::HashSet::new();
        for o in Opcode::all_supported() {
            let i = o.info();
            assert!(!i.name.is_empty(), "{o:?}");
            assert!(seen.insert(i.name), "duplicate {}", i.name);
            assert!(i.name.starts_with(i.transport.as_str()), "{o:?}");
            assert_eq!(Opcode::from_name(i.name), Some(o));
        }
        for (i, o) in OPS.iter().enumerate() {
            assert_eq!(RC_NAMES[i], format!("RC_{}", o.name));
        }
        // 25 RC + 12 UC + 24 RD (+RESYNC) + 2 UD + 2 CNP + 23 XRC.
        assert_eq!(seen.len(), 25 + 12 + 24 + 2 + 2 + 23);
    }
}
