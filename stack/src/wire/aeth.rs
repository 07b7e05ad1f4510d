//! ACK Extended Transport Header, 4 bytes, IBTA 1.7 §9.3.5: in ACKs, READ
//! responses (first, last, only) and ATOMIC ACKNOWLEDGE.
//!
//! ```text
//! | syndrome (1) | MSN (3) |
//! ```
//! Syndrome: bit 7 reserved (0), bits 6:5 type (00 ACK, 01 RNR NAK, 10
//! reserved, 11 NAK), bits 4:0 the credit code, RNR timer or NAK code
//! (IBTA 1.7 §9.7.5.2, Table 44).

use core::fmt;
use core::time::Duration;

use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const SYNDROME: Field = 0..1;
    pub const MSN: Field = 1..4;
}

/// Length of the AETH, bytes.
pub const HEADER_LEN: usize = field::MSN.end;

header_view!(
    /// An AETH in a buffer.
    "an AETH",
    Error::ExtTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    /// The raw syndrome byte; see [`AethRepr::kind`].
    #[inline]
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME.start]
    }
    /// MSN (24 bits).
    #[inline]
    pub fn msn(&self) -> u32 {
        view::get_u24(self.buffer.as_ref(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the field `syndrome`.
    #[inline]
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[field::SYNDROME.start] = v;
    }
    /// Set the field `msn` (modulo 2^24).
    #[inline]
    pub fn set_msn(&mut self, v: u32) {
        view::set_u24(self.buffer.as_mut(), field::MSN, v);
    }
}

/// AETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AethRepr {
    /// The raw syndrome byte; see [`AethRepr::kind`].
    pub syndrome: u8,
    /// MSN (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// The meaning of a AETH.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(h: &Packet<T>) -> AethRepr {
        AethRepr {
            syndrome: h.syndrome(),
            msn: h.msn(),
        }
    }

    /// Write the header.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Packet<T>) {
        h.set_syndrome(self.syndrome);
        h.set_msn(self.msn);
    }
}

impl AethRepr {
    /// Decoded syndrome.
    pub fn kind(&self) -> AethSyndrome {
        AethSyndrome::from_byte(self.syndrome)
    }
}

/// NAK codes (AETH syndrome `0b11x_xxxx`), IBTA 1.7 §9.7.5.2.2, Table 45.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSeqErr,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessErr,
    /// 3: remote operational error.
    RemoteOpErr,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved.
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub fn code(self) -> u8 {
        match self {
            NakCode::PsnSeqErr => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessErr => 2,
            NakCode::RemoteOpErr => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1F,
        }
    }
    fn from_code(c: u8) -> NakCode {
        match c & 0x1F {
            0 => NakCode::PsnSeqErr,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessErr,
            3 => NakCode::RemoteOpErr,
            4 => NakCode::InvalidRdRequest,
            c => NakCode::Reserved(c),
        }
    }
}

/// A decoded AETH syndrome (IBTA 1.7 §9.7.5.2, Table 44): bit 7 reserved,
/// bits 6:5 the type, bits 4:0 the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// `0b000_nnnnn`: ACK with credit code `n` (31 = credits invalid/unlimited).
    Ack {
        /// Credit code 0..=31; see [`credit_count`].
        credit: u8,
    },
    /// `0b001_ttttt`: RNR NAK with RNR timer code `t`; see [`rnr_timer`].
    RnrNak {
        /// RNR timer code 0..=31.
        timer: u8,
    },
    /// `0b011_ccccc`: NAK.
    Nak(NakCode),
    /// `0b010_xxxxx` (reserved type) or bit 7 set: the raw byte.
    Reserved(u8),
}

impl AethSyndrome {
    /// Decode a syndrome byte.
    pub fn from_byte(b: u8) -> AethSyndrome {
        if b & 0x80 != 0 {
            return AethSyndrome::Reserved(b);
        }
        match (b >> 5) & 3 {
            0 => AethSyndrome::Ack { credit: b & 0x1F },
            1 => AethSyndrome::RnrNak { timer: b & 0x1F },
            3 => AethSyndrome::Nak(NakCode::from_code(b)),
            _ => AethSyndrome::Reserved(b),
        }
    }

    /// Encode as a syndrome byte.
    pub fn to_byte(self) -> u8 {
        match self {
            AethSyndrome::Ack { credit } => credit & 0x1F,
            AethSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            AethSyndrome::Nak(c) => 0x60 | c.code(),
            AethSyndrome::Reserved(b) => b,
        }
    }

    /// ACK with credits invalid (syndrome 0x1F), what rxe always sends.
    pub const ACK_NO_CREDIT: AethSyndrome = AethSyndrome::Ack { credit: 31 };
}

impl fmt::Display for AethSyndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AethSyndrome::Ack { credit: 31 } => write!(f, "ACK(credit=invalid)"),
            AethSyndrome::Ack { credit } => {
                write!(f, "ACK(credit={})", credit_count(*credit).unwrap_or(0))
            }
            AethSyndrome::RnrNak { timer } => write!(f, "RNR_NAK(timer={timer})"),
            AethSyndrome::Nak(NakCode::PsnSeqErr) => write!(f, "NAK(PSN_SEQ_ERR)"),
            AethSyndrome::Nak(NakCode::InvalidRequest) => write!(f, "NAK(INV_REQ)"),
            AethSyndrome::Nak(NakCode::RemoteAccessErr) => write!(f, "NAK(REM_ACCESS_ERR)"),
            AethSyndrome::Nak(NakCode::RemoteOpErr) => write!(f, "NAK(REM_OP_ERR)"),
            AethSyndrome::Nak(NakCode::InvalidRdRequest) => write!(f, "NAK(INV_RD_REQ)"),
            AethSyndrome::Nak(NakCode::Reserved(c)) => write!(f, "NAK(reserved {c})"),
            AethSyndrome::Reserved(b) => write!(f, "RESERVED(0x{b:02x})"),
        }
    }
}

/// Number of credits for an ACK credit code 0..=30 (IBTA 1.7 §9.7.7.2.1,
/// Table 46; the same table as rdmavt's `credit_table`). Code 31 means "invalid"
/// and returns `None`, as do codes above 31.
pub fn credit_count(code: u8) -> Option<u32> {
    const TABLE: [u32; 31] = [
        0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
        2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
    ];
    TABLE.get(code as usize).copied()
}

/// RNR NAK timer: the minimum delay encoded by a 5-bit RNR timer code
/// (IBTA 1.7 §9.7.5.2.8, Table 45). Code 0 is the longest, 655.36 ms.
pub fn rnr_timer(code: u8) -> Duration {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760,
        327680, 491520,
    ];
    Duration::from_micros(US[(code & 0x1F) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_from_digest() {
        assert_eq!(
            AethSyndrome::from_byte(0x1F),
            AethSyndrome::Ack { credit: 31 }
        );
        assert_eq!(
            AethSyndrome::from_byte(0x2E),
            AethSyndrome::RnrNak { timer: 14 }
        );
        assert_eq!(
            AethSyndrome::from_byte(0x60),
            AethSyndrome::Nak(NakCode::PsnSeqErr)
        );
        assert_eq!(
            AethSyndrome::from_byte(0x62),
            AethSyndrome::Nak(NakCode::RemoteAccessErr)
        );
        assert_eq!(AethSyndrome::from_byte(0x40), AethSyndrome::Reserved(0x40));
        assert_eq!(AethSyndrome::from_byte(0x80), AethSyndrome::Reserved(0x80));
        for b in 0..=0x7Fu8 {
            if (b >> 5) != 2 {
                assert_eq!(AethSyndrome::from_byte(b).to_byte(), b);
            }
        }
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(30), Some(32768));
        assert_eq!(credit_count(31), None);
    }

    #[test]
    fn rnr_timer_table_from_cases() {
        // CASES.md conventions: 0 -> 655.36 ms, 1 -> 0.01 ms, 14 -> 1.28 ms,
        // 20 -> 10.24 ms, 31 -> 491.52 ms; rxe's typo for 25 is not copied.
        assert_eq!(rnr_timer(0), Duration::from_micros(655_360));
        assert_eq!(rnr_timer(1), Duration::from_micros(10));
        assert_eq!(rnr_timer(14), Duration::from_micros(1_280));
        assert_eq!(rnr_timer(20), Duration::from_micros(10_240));
        assert_eq!(rnr_timer(25), Duration::from_micros(61_440));
        assert_eq!(rnr_timer(31), Duration::from_micros(491_520));
    }
}
