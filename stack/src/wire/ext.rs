//! Extension transport headers that follow the BTH (IBTA 1.7 §9.3), as zero-copy
//! views (`zerocopy`) and their meanings (`*Repr`).
//!
//! | Header | Bytes | Layout |
//! |---|---|---|
//! | RDETH | 4 | rsvd(1) EE-context(3) |
//! | DETH | 8 | Q_Key(4) rsvd(1) SrcQP(3) |
//! | XRCETH | 4 | rsvd(1) XRC SRQ(3) |
//! | FETH | 4 | rsvd, selectivity level (bits 5:4), placement type (bits 3:0) |
//! | RETH | 16 | VA(8) R_Key(4) DMA length(4) |
//! | AtomicETH | 28 | VA(8) R_Key(4) swap/add(8) compare(8) |
//! | AETH | 4 | syndrome(1) MSN(3) |
//! | AtomicAckETH | 8 | original remote data(8) |
//! | ImmDt | 4 | opaque |
//! | IETH | 4 | R_Key to invalidate |
//!
//! All fields are big-endian.

use core::fmt;
use core::time::Duration;

use zerocopy::byteorder::network_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::opcode::{ExtHeader, HdrMask};
use super::{u24, Error};

macro_rules! view {
    ($(#[$m:meta])* $name:ident { $($f:ident: $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
        #[repr(C)]
        #[allow(missing_docs)]
        pub struct $name { $(pub $f: $t),* }
    };
}

view!(
    /// RDETH view.
    Rdeth { rsvd: u8, ee_context: [u8; 3] }
);
view!(
    /// DETH view.
    Deth { qkey: U32, rsvd: u8, src_qp: [u8; 3] }
);
view!(
    /// XRCETH view.
    Xrceth { rsvd: u8, xrc_srq: [u8; 3] }
);
view!(
    /// FETH view.
    Feth { raw: U32 }
);
view!(
    /// RETH view.
    Reth { va: U64, rkey: U32, dma_len: U32 }
);
view!(
    /// AtomicETH view.
    AtomicEth { va: U64, rkey: U32, swap_add: U64, compare: U64 }
);
view!(
    /// AETH view.
    Aeth { syndrome: u8, msn: [u8; 3] }
);
view!(
    /// AtomicAckETH view.
    AtomicAckEth { orig: U64 }
);

/// RDETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RdethRepr {
    /// Reserved byte.
    pub rsvd: u8,
    /// EE context (24 bits).
    pub ee_context: u32,
}

/// DETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Q_Key.
    pub qkey: u32,
    /// Reserved byte.
    pub rsvd: u8,
    /// Source QPN (24 bits).
    pub src_qp: u32,
}

/// XRCETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct XrcethRepr {
    /// Reserved byte.
    pub rsvd: u8,
    /// XRC SRQ number (24 bits).
    pub xrc_srq: u32,
}

/// FETH meaning (FLUSH, IBTA 1.5 memory placement extensions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// The whole 32-bit field.
    pub raw: u32,
}

impl FethRepr {
    /// Selectivity level, bits 5:4.
    pub fn selectivity_level(&self) -> u8 {
        ((self.raw >> 4) & 3) as u8
    }
    /// Placement type, bits 3:0.
    pub fn placement_type(&self) -> u8 {
        (self.raw & 0xF) as u8
    }
}

/// RETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// DMA length of the whole message, bytes.
    pub dma_len: u32,
}

/// AtomicETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Remote virtual address (must be 8-byte aligned).
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// Swap value (COMPARE_SWAP) or add value (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (COMPARE_SWAP).
    pub compare: u64,
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
    /// Decoded syndrome.
    pub fn kind(&self) -> AethSyndrome {
        AethSyndrome::from_byte(self.syndrome)
    }
}

/// AtomicAckETH meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// Original value of the remote 64-bit word.
    pub orig: u64,
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

/// All extension headers of one packet; each is present exactly when the opcode
/// table says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    /// RDETH (RD only).
    pub rdeth: Option<RdethRepr>,
    /// DETH (UD, RD requests).
    pub deth: Option<DethRepr>,
    /// XRCETH (XRC requests).
    pub xrceth: Option<XrcethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// AtomicETH.
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data, as the big-endian value of its 4 bytes.
    pub immdt: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    /// The 16 reserved bytes of a CNP.
    pub cnp_pad: Option<[u8; 16]>,
}

fn arr<const N: usize>(b: &[u8]) -> Result<[u8; N], Error> {
    b.get(..N)
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .ok_or(Error::ExtTruncated)
}

impl ExtHeaders {
    /// The set of headers present.
    pub fn mask(&self) -> HdrMask {
        let mut m = HdrMask::EMPTY;
        let pairs = [
            (self.rdeth.is_some(), ExtHeader::Rdeth),
            (self.deth.is_some(), ExtHeader::Deth),
            (self.xrceth.is_some(), ExtHeader::Xrceth),
            (self.feth.is_some(), ExtHeader::Feth),
            (self.reth.is_some(), ExtHeader::Reth),
            (self.atomic_eth.is_some(), ExtHeader::AtomicEth),
            (self.aeth.is_some(), ExtHeader::Aeth),
            (self.atomic_ack_eth.is_some(), ExtHeader::AtomicAckEth),
            (self.immdt.is_some(), ExtHeader::ImmDt),
            (self.ieth.is_some(), ExtHeader::Ieth),
            (self.cnp_pad.is_some(), ExtHeader::CnpPad),
        ];
        for (present, h) in pairs {
            if present {
                m = m.with(h);
            }
        }
        m
    }

    /// Parse the headers of `mask` from the start of `buf` (the bytes after the
    /// BTH). Returns the headers and their total length.
    ///
    /// Errors: [`Error::ExtTruncated`] if `buf` is shorter than the headers.
    pub fn parse(mask: HdrMask, buf: &[u8]) -> Result<(ExtHeaders, usize), Error> {
        let v = ExtView::new(mask, buf)?;
        Ok((v.to_headers(), v.bytes().len()))
    }

    /// Write the headers of `mask`, in wire order, to the start of `out`; a header
    /// in `mask` that is `None` here is written as zeros. Returns the length.
    ///
    /// Errors: [`Error::BufferTooSmall`] if `out` is shorter than the headers.
    pub fn emit(&self, mask: HdrMask, out: &mut [u8]) -> Result<usize, Error> {
        // Straight-line, in wire order (ExtHeader::ALL): one bit test per
        // header kind, then the bytes of the present ones. This runs once
        // per packet sent.
        let mut off = 0usize;
        let mut put = |h: ExtHeader, bytes: Option<&[u8]>| -> Result<(), Error> {
            if !mask.contains(h) {
                return Ok(());
            }
            let b = out
                .get_mut(off..off + h.len())
                .ok_or(Error::BufferTooSmall)?;
            match bytes {
                Some(v) if v.len() == b.len() => b.copy_from_slice(v),
                Some(_) => return Err(Error::BufferTooSmall),
                None => b.fill(0),
            }
            off += h.len();
            Ok(())
        };
        put(
            ExtHeader::Rdeth,
            self.rdeth
                .map(|r| Rdeth {
                    rsvd: r.rsvd,
                    ee_context: be24(r.ee_context),
                })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::Deth,
            self.deth
                .map(|r| Deth {
                    qkey: r.qkey.into(),
                    rsvd: r.rsvd,
                    src_qp: be24(r.src_qp),
                })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::Xrceth,
            self.xrceth
                .map(|r| Xrceth {
                    rsvd: r.rsvd,
                    xrc_srq: be24(r.xrc_srq),
                })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::Feth,
            self.feth
                .map(|r| Feth { raw: r.raw.into() })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::Reth,
            self.reth
                .map(|r| Reth {
                    va: r.va.into(),
                    rkey: r.rkey.into(),
                    dma_len: r.dma_len.into(),
                })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::AtomicEth,
            self.atomic_eth
                .map(|r| AtomicEth {
                    va: r.va.into(),
                    rkey: r.rkey.into(),
                    swap_add: r.swap_add.into(),
                    compare: r.compare.into(),
                })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::Aeth,
            self.aeth
                .map(|r| Aeth {
                    syndrome: r.syndrome,
                    msn: be24(r.msn),
                })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::AtomicAckEth,
            self.atomic_ack_eth
                .map(|r| AtomicAckEth {
                    orig: r.orig.into(),
                })
                .as_ref()
                .map(|h| h.as_bytes()),
        )?;
        put(
            ExtHeader::ImmDt,
            self.immdt.map(u32::to_be_bytes).as_ref().map(|b| &b[..]),
        )?;
        put(
            ExtHeader::Ieth,
            self.ieth.map(u32::to_be_bytes).as_ref().map(|b| &b[..]),
        )?;
        put(ExtHeader::CnpPad, self.cnp_pad.as_ref().map(|b| &b[..]))?;
        Ok(off)
    }
}

fn be24(v: u32) -> [u8; 3] {
    let b = v.to_be_bytes();
    [b[1], b[2], b[3]]
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

/// The extension headers of a parsed packet, decoded on access: the parser
/// only checks their length, so packets that carry none (most data packets)
/// and callers that read one header pay nothing for the others.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtView<'a> {
    mask: HdrMask,
    bytes: &'a [u8],
}

macro_rules! read_view {
    ($self:ident, $h:expr, $ty:ty) => {
        <$ty>::read_from_bytes($self.get($h)?).ok()?
    };
}

impl<'a> ExtView<'a> {
    /// A view of the headers of `mask` at the start of `buf`.
    ///
    /// Errors: [`Error::ExtTruncated`] if `buf` is shorter than the headers.
    pub fn new(mask: HdrMask, buf: &'a [u8]) -> Result<ExtView<'a>, Error> {
        let bytes = buf.get(..mask.total_len()).ok_or(Error::ExtTruncated)?;
        Ok(ExtView { mask, bytes })
    }
    /// The headers present.
    pub fn mask(&self) -> HdrMask {
        self.mask
    }
    /// Their bytes, in wire order.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    fn get(&self, h: ExtHeader) -> Option<&'a [u8]> {
        let off = self.mask.offset_of(h)?;
        self.bytes.get(off..off + h.len())
    }
    /// RDETH.
    pub fn rdeth(&self) -> Option<RdethRepr> {
        let v = read_view!(self, ExtHeader::Rdeth, Rdeth);
        Some(RdethRepr {
            rsvd: v.rsvd,
            ee_context: u24(v.ee_context),
        })
    }
    /// DETH.
    pub fn deth(&self) -> Option<DethRepr> {
        let v = read_view!(self, ExtHeader::Deth, Deth);
        Some(DethRepr {
            qkey: v.qkey.get(),
            rsvd: v.rsvd,
            src_qp: u24(v.src_qp),
        })
    }
    /// XRCETH.
    pub fn xrceth(&self) -> Option<XrcethRepr> {
        let v = read_view!(self, ExtHeader::Xrceth, Xrceth);
        Some(XrcethRepr {
            rsvd: v.rsvd,
            xrc_srq: u24(v.xrc_srq),
        })
    }
    /// FETH.
    pub fn feth(&self) -> Option<FethRepr> {
        let v = read_view!(self, ExtHeader::Feth, Feth);
        Some(FethRepr { raw: v.raw.get() })
    }
    /// RETH.
    pub fn reth(&self) -> Option<RethRepr> {
        let v = read_view!(self, ExtHeader::Reth, Reth);
        Some(RethRepr {
            va: v.va.get(),
            rkey: v.rkey.get(),
            dma_len: v.dma_len.get(),
        })
    }
    /// AtomicETH.
    pub fn atomic_eth(&self) -> Option<AtomicEthRepr> {
        let v = read_view!(self, ExtHeader::AtomicEth, AtomicEth);
        Some(AtomicEthRepr {
            va: v.va.get(),
            rkey: v.rkey.get(),
            swap_add: v.swap_add.get(),
            compare: v.compare.get(),
        })
    }
    /// AETH.
    pub fn aeth(&self) -> Option<AethRepr> {
        let v = read_view!(self, ExtHeader::Aeth, Aeth);
        Some(AethRepr {
            syndrome: v.syndrome,
            msn: u24(v.msn),
        })
    }
    /// AtomicAckETH.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEthRepr> {
        let v = read_view!(self, ExtHeader::AtomicAckEth, AtomicAckEth);
        Some(AtomicAckEthRepr { orig: v.orig.get() })
    }
    /// Immediate data, as the big-endian value of its 4 bytes.
    pub fn immdt(&self) -> Option<u32> {
        Some(u32::from_be_bytes(
            arr::<4>(self.get(ExtHeader::ImmDt)?).ok()?,
        ))
    }
    /// IETH: the R_Key to invalidate.
    pub fn ieth(&self) -> Option<u32> {
        Some(u32::from_be_bytes(
            arr::<4>(self.get(ExtHeader::Ieth)?).ok()?,
        ))
    }
    /// The 16 reserved bytes of a CNP.
    pub fn cnp_pad(&self) -> Option<[u8; 16]> {
        arr::<16>(self.get(ExtHeader::CnpPad)?).ok()
    }
    /// Every header, decoded.
    pub fn to_headers(&self) -> ExtHeaders {
        ExtHeaders {
            rdeth: self.rdeth(),
            deth: self.deth(),
            xrceth: self.xrceth(),
            feth: self.feth(),
            reth: self.reth(),
            atomic_eth: self.atomic_eth(),
            aeth: self.aeth(),
            atomic_ack_eth: self.atomic_ack_eth(),
            immdt: self.immdt(),
            ieth: self.ieth(),
            cnp_pad: self.cnp_pad(),
        }
    }
}

impl fmt::Debug for ExtView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_headers().fmt(f)
    }
}
