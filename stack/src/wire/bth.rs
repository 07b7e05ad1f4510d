//! Base Transport Header (BTH), 12 bytes, IBTA 1.7 §9.2.
//!
//! ```text
//!  0               1               2               3
//! +---------------+-+-+---+-------+-------------------------------+
//! |    OpCode     |S|M|Pad| TVer  |            P_Key              |
//! +-+-+-----------+---------------+-------------------------------+
//! |F|B|  Resv6a   |               Destination QP                  |
//! +-+-------------+-----------------------------------------------+
//! |A|   Resv7     |               PSN                             |
//! +-+-------------+-----------------------------------------------+
//! ```
//! Byte 4 (FECN, BECN, Resv6a) is masked to ones in the ICRC (Annex A17.3.3).

use zerocopy::byteorder::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::opcode::Opcode;
use super::{u24, Error};

/// Length of the BTH, bytes.
pub const HEADER_LEN: usize = 12;

/// Mask of 24-bit fields (QPN, PSN, MSN): values are taken modulo 2^24.
pub const MASK_24: u32 = 0x00FF_FFFF;

/// The multicast destination QPN (IBTA §9.2.6).
pub const QPN_MULTICAST: u32 = 0x00FF_FFFF;

/// Default partition key (full member of the default partition).
pub const PKEY_DEFAULT: u16 = 0xFFFF;

/// The BTH as it lies in the buffer (zero-copy view).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct Bth {
    opcode: u8,
    flags: u8,
    pkey: U16,
    becn: u8,
    dqpn: [u8; 3],
    ackreq: u8,
    psn: [u8; 3],
}

impl Bth {
    /// An all-zero BTH.
    pub const ZERO: Bth = Bth {
        opcode: 0,
        flags: 0,
        pkey: U16::ZERO,
        becn: 0,
        dqpn: [0; 3],
        ackreq: 0,
        psn: [0; 3],
    };

    /// View the first 12 bytes of `buf` as a BTH.
    pub fn ref_from(buf: &[u8]) -> Result<&Bth, Error> {
        Bth::ref_from_prefix(buf)
            .map(|(b, _)| b)
            .map_err(|_| Error::BthTruncated)
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.opcode)
    }
    /// SE: solicited event.
    pub fn solicited(&self) -> bool {
        self.flags & 0x80 != 0
    }
    /// M: migration request (ConnectX sends 1, rxe 0).
    pub fn migreq(&self) -> bool {
        self.flags & 0x40 != 0
    }
    /// PadCnt: 0..=3 pad bytes before the ICRC.
    pub fn pad_count(&self) -> u8 {
        (self.flags >> 4) & 3
    }
    /// TVer: transport header version, must be 0.
    pub fn tver(&self) -> u8 {
        self.flags & 0x0F
    }
    /// P_Key.
    pub fn pkey(&self) -> u16 {
        self.pkey.get()
    }
    /// FECN: forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.becn & 0x80 != 0
    }
    /// BECN: backward explicit congestion notification (set in CNPs).
    pub fn becn(&self) -> bool {
        self.becn & 0x40 != 0
    }
    /// The six reserved bits of byte 4.
    pub fn resv6a(&self) -> u8 {
        self.becn & 0x3F
    }
    /// Destination QPN (24 bits).
    pub fn dest_qp(&self) -> u32 {
        u24(self.dqpn)
    }
    /// AckReq.
    pub fn ack_req(&self) -> bool {
        self.ackreq & 0x80 != 0
    }
    /// The seven reserved bits of byte 8.
    pub fn resv7(&self) -> u8 {
        self.ackreq & 0x7F
    }
    /// PSN (24 bits).
    pub fn psn(&self) -> u32 {
        u24(self.psn)
    }
}

/// The meaning of a BTH, for building and comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// SE bit.
    pub solicited: bool,
    /// M bit.
    pub migreq: bool,
    /// PadCnt. The frame builder overwrites it from the payload length.
    pub pad_count: u8,
    /// TVer (0 for every packet we send).
    pub tver: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Reserved bits of byte 4 (0 when sending; kept for byte-exact rebuilds).
    pub resv6a: u8,
    /// Destination QPN, modulo 2^24.
    pub dest_qp: u32,
    /// AckReq.
    pub ack_req: bool,
    /// Reserved bits of byte 8 (0 when sending).
    pub resv7: u8,
    /// PSN, modulo 2^24.
    pub psn: u32,
}

impl BthRepr {
    /// A BTH with the given opcode, destination QPN and PSN, P_Key 0xFFFF and every
    /// flag clear.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: PKEY_DEFAULT,
            fecn: false,
            becn: false,
            resv6a: 0,
            dest_qp: dest_qp & MASK_24,
            ack_req: false,
            resv7: 0,
            psn: psn & MASK_24,
        }
    }

    /// The meaning of a BTH view.
    pub fn parse(b: &Bth) -> BthRepr {
        BthRepr {
            opcode: b.opcode(),
            solicited: b.solicited(),
            migreq: b.migreq(),
            pad_count: b.pad_count(),
            tver: b.tver(),
            pkey: b.pkey(),
            fecn: b.fecn(),
            becn: b.becn(),
            resv6a: b.resv6a(),
            dest_qp: b.dest_qp(),
            ack_req: b.ack_req(),
            resv7: b.resv7(),
            psn: b.psn(),
        }
    }

    /// Write the 12 bytes into `out` (which must be exactly [`HEADER_LEN`] long).
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        out[0] = self.opcode.0;
        out[1] = (self.solicited as u8) << 7
            | (self.migreq as u8) << 6
            | (self.pad_count & 3) << 4
            | (self.tver & 0x0F);
        out[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        out[4] = (self.fecn as u8) << 7 | (self.becn as u8) << 6 | (self.resv6a & 0x3F);
        out[5..8].copy_from_slice(&(self.dest_qp & MASK_24).to_be_bytes()[1..]);
        out[8] = (self.ack_req as u8) << 7 | (self.resv7 & 0x7F);
        out[9..12].copy_from_slice(&(self.psn & MASK_24).to_be_bytes()[1..]);
    }
}
