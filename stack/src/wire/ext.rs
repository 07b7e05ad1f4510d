//! Extension transport headers that follow the BTH (IBTA 1.7 §9.3): their
//! identities ([`ExtHeader`], sets of them: [`HdrMask`]), which ones a
//! packet has ([`ExtHeaders`], [`ExtView`]) and, re-exported here,
//! each header's meaning. Each header has its own module with its checked
//! view and `Repr`:
//!
//! | Header | Bytes | Layout | Module |
//! |---|---|---|---|
//! | RDETH | 4 | rsvd(1) EE-context(3) | [`rdeth`] |
//! | DETH | 8 | Q_Key(4) rsvd(1) SrcQP(3) | [`deth`] |
//! | XRCETH | 4 | rsvd(1) XRC SRQ(3) | [`xrceth`] |
//! | FETH | 4 | rsvd, selectivity level (bits 5:4), placement type (bits 3:0) | [`feth`] |
//! | RETH | 16 | VA(8) R_Key(4) DMA length(4) | [`reth`] |
//! | AtomicETH | 28 | VA(8) R_Key(4) swap/add(8) compare(8) | [`atmeth`] |
//! | AETH | 4 | syndrome(1) MSN(3) | [`aeth`] |
//! | AtomicAckETH | 8 | original remote data(8) | [`atmack`] |
//! | ImmDt | 4 | opaque | [`immdt`] |
//! | IETH | 4 | R_Key to invalidate | [`ieth`] |
//! | CNP padding | 16 | reserved, zero | [`cnp`] |
//!
//! All fields are big-endian.

use core::fmt;

use super::{aeth, atmack, atmeth, cnp, deth, feth, ieth, immdt, rdeth, reth, xrceth, Error};

pub use super::aeth::{credit_count, rnr_timer, AethRepr, AethSyndrome, NakCode};
pub use super::atmack::AtomicAckEthRepr;
pub use super::atmeth::AtomicEthRepr;
pub use super::deth::DethRepr;
pub use super::feth::FethRepr;
pub use super::rdeth::RdethRepr;
pub use super::reth::RethRepr;
pub use super::xrceth::XrcethRepr;

/// The extension headers that may follow a BTH. The discriminant order is the
/// order in which they appear on the wire when several are present
/// (IBTA 1.7 §9.2, Figure 96; FETH precedes RETH in FLUSH, §9.4.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ExtHeader {
    /// Reliable Datagram ETH, 4 bytes (§9.3.1).
    Rdeth = 0,
    /// Datagram ETH, 8 bytes (§9.3.2).
    Deth = 1,
    /// XRC ETH, 4 bytes (§9.3.7, XRC annex).
    Xrceth = 2,
    /// Flush ETH, 4 bytes (IBTA 1.5 memory placement extensions).
    Feth = 3,
    /// RDMA ETH, 16 bytes (§9.3.3).
    Reth = 4,
    /// Atomic ETH, 28 bytes (§9.3.4).
    AtomicEth = 5,
    /// ACK ETH, 4 bytes (§9.3.5).
    Aeth = 6,
    /// Atomic ACK ETH, 8 bytes (§9.3.6).
    AtomicAckEth = 7,
    /// Immediate data, 4 bytes (§9.3.8).
    ImmDt = 8,
    /// Invalidate ETH, 4 bytes (§9.3.9).
    Ieth = 9,
    /// The 16 reserved bytes that follow the BTH of a RoCEv2 CNP
    /// (RoCEv2 Annex A17.9.3).
    CnpPad = 10,
}

impl ExtHeader {
    /// Every header, in wire order.
    pub const ALL: [ExtHeader; 11] = [
        ExtHeader::Rdeth,
        ExtHeader::Deth,
        ExtHeader::Xrceth,
        ExtHeader::Feth,
        ExtHeader::Reth,
        ExtHeader::AtomicEth,
        ExtHeader::Aeth,
        ExtHeader::AtomicAckEth,
        ExtHeader::ImmDt,
        ExtHeader::Ieth,
        ExtHeader::CnpPad,
    ];

    /// Length on the wire, bytes.
    #[allow(clippy::len_without_is_empty)] // a header's size; never empty
    pub const fn len(self) -> usize {
        match self {
            ExtHeader::Rdeth => 4,
            ExtHeader::Deth => 8,
            ExtHeader::Xrceth => 4,
            ExtHeader::Feth => 4,
            ExtHeader::Reth => 16,
            ExtHeader::AtomicEth => 28,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::ImmDt => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::CnpPad => 16,
        }
    }

    /// Bit of this header in a [`HdrMask`].
    pub const fn bit(self) -> u16 {
        1 << (self as u8)
    }

    /// Name as Wireshark and the IBTA spell it.
    pub const fn name(self) -> &'static str {
        match self {
            ExtHeader::Rdeth => "RDETH",
            ExtHeader::Deth => "DETH",
            ExtHeader::Xrceth => "XRCETH",
            ExtHeader::Feth => "FETH",
            ExtHeader::Reth => "RETH",
            ExtHeader::AtomicEth => "AtomicETH",
            ExtHeader::Aeth => "AETH",
            ExtHeader::AtomicAckEth => "AtomicAckETH",
            ExtHeader::ImmDt => "ImmDt",
            ExtHeader::Ieth => "IETH",
            ExtHeader::CnpPad => "CNP-reserved",
        }
    }
}

/// A set of [`ExtHeader`]s, one bit each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HdrMask(pub u16);

impl HdrMask {
    /// The empty set.
    pub const EMPTY: HdrMask = HdrMask(0);

    /// Whether `h` is in the set.
    pub const fn contains(self, h: ExtHeader) -> bool {
        self.0 & h.bit() != 0
    }

    /// The set plus `h`.
    pub const fn with(self, h: ExtHeader) -> HdrMask {
        HdrMask(self.0 | h.bit())
    }

    /// Headers in the set, in wire order.
    pub fn iter(self) -> impl Iterator<Item = ExtHeader> {
        // Bit i is `ExtHeader::ALL[i]`, so lowest set bit first is wire
        // order; only the set bits are visited.
        let mut bits = self.0 & ((1 << ExtHeader::ALL.len()) - 1);
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            ExtHeader::ALL.get(i).copied()
        })
    }

    /// Total length of the headers in the set, bytes.
    #[inline]
    pub const fn total_len(self) -> usize {
        Self::sum_len(self.0)
    }

    /// The summed lengths of the headers whose bits are set in `bits`
    /// (only the set bits are visited: a packet has zero to three).
    #[inline(always)]
    const fn sum_len(bits: u16) -> usize {
        let mut bits = bits & ((1 << ExtHeader::ALL.len()) - 1);
        let mut len = 0;
        while bits != 0 {
            len += ExtHeader::ALL[bits.trailing_zeros() as usize].len();
            bits &= bits - 1;
        }
        len
    }

    /// Byte offset of `h` from the end of the BTH, if present: the lengths
    /// of the headers before it in wire order (bit order).
    #[inline]
    pub const fn offset_of(self, h: ExtHeader) -> Option<usize> {
        if !self.contains(h) {
            return None;
        }
        Some(Self::sum_len(self.0 & (h.bit() - 1)))
    }
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
        let total = mask.total_len();
        let out = out.get_mut(..total).ok_or(Error::BufferTooSmall)?;
        // Straight-line, in wire order (ExtHeader::ALL): one bit test per
        // header kind, then the bytes of the present ones. This runs once
        // per packet sent.
        let mut off = 0usize;
        // The bytes of header `h`, zeroed, if the mask has it.
        macro_rules! slot {
            ($h:expr) => {
                if mask.contains($h) {
                    let b = out
                        .get_mut(off..off + $h.len())
                        .ok_or(Error::BufferTooSmall)?;
                    off += $h.len();
                    b.fill(0);
                    Some(b)
                } else {
                    None
                }
            };
        }
        if let Some(b) = slot!(ExtHeader::Rdeth) {
            if let Some(r) = &self.rdeth {
                r.emit(&mut rdeth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::Deth) {
            if let Some(r) = &self.deth {
                r.emit(&mut deth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::Xrceth) {
            if let Some(r) = &self.xrceth {
                r.emit(&mut xrceth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::Feth) {
            if let Some(r) = &self.feth {
                r.emit(&mut feth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::Reth) {
            if let Some(r) = &self.reth {
                r.emit(&mut reth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::AtomicEth) {
            if let Some(r) = &self.atomic_eth {
                r.emit(&mut atmeth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::Aeth) {
            if let Some(r) = &self.aeth {
                r.emit(&mut aeth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::AtomicAckEth) {
            if let Some(r) = &self.atomic_ack_eth {
                r.emit(&mut atmack::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::ImmDt) {
            if let Some(imm) = self.immdt {
                immdt::ImmDtRepr { imm }.emit(&mut immdt::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::Ieth) {
            if let Some(rkey) = self.ieth {
                ieth::IethRepr { rkey }.emit(&mut ieth::Packet::new_unchecked(b));
            }
        }
        if let Some(b) = slot!(ExtHeader::CnpPad) {
            if let Some(pad) = &self.cnp_pad {
                b.copy_from_slice(pad);
            }
        }
        debug_assert_eq!(off, total);
        Ok(total)
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
    /// The bytes of `h`, if present.
    pub fn get(&self, h: ExtHeader) -> Option<&'a [u8]> {
        let off = self.mask.offset_of(h)?;
        self.bytes.get(off..off + h.len())
    }
    /// RDETH.
    pub fn rdeth(&self) -> Option<RdethRepr> {
        let p = rdeth::Packet::new_checked(self.get(ExtHeader::Rdeth)?).ok()?;
        Some(RdethRepr::parse(&p))
    }
    /// DETH.
    pub fn deth(&self) -> Option<DethRepr> {
        let p = deth::Packet::new_checked(self.get(ExtHeader::Deth)?).ok()?;
        Some(DethRepr::parse(&p))
    }
    /// XRCETH.
    pub fn xrceth(&self) -> Option<XrcethRepr> {
        let p = xrceth::Packet::new_checked(self.get(ExtHeader::Xrceth)?).ok()?;
        Some(XrcethRepr::parse(&p))
    }
    /// FETH.
    pub fn feth(&self) -> Option<FethRepr> {
        let p = feth::Packet::new_checked(self.get(ExtHeader::Feth)?).ok()?;
        Some(FethRepr::parse(&p))
    }
    /// RETH.
    pub fn reth(&self) -> Option<RethRepr> {
        let p = reth::Packet::new_checked(self.get(ExtHeader::Reth)?).ok()?;
        Some(RethRepr::parse(&p))
    }
    /// AtomicETH.
    pub fn atomic_eth(&self) -> Option<AtomicEthRepr> {
        let p = atmeth::Packet::new_checked(self.get(ExtHeader::AtomicEth)?).ok()?;
        Some(AtomicEthRepr::parse(&p))
    }
    /// AETH.
    pub fn aeth(&self) -> Option<AethRepr> {
        let p = aeth::Packet::new_checked(self.get(ExtHeader::Aeth)?).ok()?;
        Some(AethRepr::parse(&p))
    }
    /// AtomicAckETH.
    pub fn atomic_ack_eth(&self) -> Option<AtomicAckEthRepr> {
        let p = atmack::Packet::new_checked(self.get(ExtHeader::AtomicAckEth)?).ok()?;
        Some(AtomicAckEthRepr::parse(&p))
    }
    /// Immediate data, as the big-endian value of its 4 bytes.
    pub fn immdt(&self) -> Option<u32> {
        let p = immdt::Packet::new_checked(self.get(ExtHeader::ImmDt)?).ok()?;
        Some(p.imm())
    }
    /// IETH: the R_Key to invalidate.
    pub fn ieth(&self) -> Option<u32> {
        let p = ieth::Packet::new_checked(self.get(ExtHeader::Ieth)?).ok()?;
        Some(p.rkey())
    }
    /// The 16 reserved bytes of a CNP.
    pub fn cnp_pad(&self) -> Option<[u8; 16]> {
        self.get(ExtHeader::CnpPad)?
            .first_chunk::<{ cnp::PAD_LEN }>()
            .copied()
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
