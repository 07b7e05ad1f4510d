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

use super::opcode::Opcode;
use super::view::{self, header_view, Field};
use super::Error;

mod field {
    use super::Field;
    pub const OPCODE: usize = 0;
    /// SE (bit 7), M (bit 6), PadCnt (bits 5:4), TVer (bits 3:0).
    pub const FLAGS: usize = 1;
    pub const PKEY: Field = 2..4;
    /// FECN (bit 7), BECN (bit 6), Resv6a (bits 5:0).
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: Field = 5..8;
    /// AckReq (bit 7), Resv7 (bits 6:0).
    pub const ACK_REQ: usize = 8;
    pub const PSN: Field = 9..12;
}

/// Length of the BTH, bytes.
pub const HEADER_LEN: usize = field::PSN.end;

/// Mask of 24-bit fields (QPN, PSN, MSN): values are taken modulo 2^24.
pub const MASK_24: u32 = 0x00FF_FFFF;

/// The multicast destination QPN (IBTA §9.2.6).
pub const QPN_MULTICAST: u32 = 0x00FF_FFFF;

/// Default partition key (full member of the default partition).
pub const PKEY_DEFAULT: u16 = 0xFFFF;

header_view!(
    /// A BTH in a buffer (12 bytes; the buffer may go on with the extension
    /// headers).
    "a BTH",
    Error::BthTruncated
);

impl<T: AsRef<[u8]>> Packet<T> {
    fn byte(&self, i: usize) -> u8 {
        self.buffer.as_ref()[i]
    }
    /// The opcode.
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode(self.byte(field::OPCODE))
    }
    /// SE: solicited event.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.byte(field::FLAGS) & 0x80 != 0
    }
    /// M: migration request (ConnectX sends 1, rxe 0).
    #[inline]
    pub fn migreq(&self) -> bool {
        self.byte(field::FLAGS) & 0x40 != 0
    }
    /// PadCnt: 0..=3 pad bytes before the ICRC.
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.byte(field::FLAGS) >> 4) & 3
    }
    /// TVer: transport header version, must be 0.
    #[inline]
    pub fn tver(&self) -> u8 {
        self.byte(field::FLAGS) & 0x0F
    }
    /// P_Key.
    #[inline]
    pub fn pkey(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::PKEY)
    }
    /// FECN: forward explicit congestion notification.
    #[inline]
    pub fn fecn(&self) -> bool {
        self.byte(field::FECN_BECN) & 0x80 != 0
    }
    /// BECN: backward explicit congestion notification (set in CNPs).
    #[inline]
    pub fn becn(&self) -> bool {
        self.byte(field::FECN_BECN) & 0x40 != 0
    }
    /// The six reserved bits of byte 4.
    #[inline]
    pub fn resv6a(&self) -> u8 {
        self.byte(field::FECN_BECN) & 0x3F
    }
    /// Destination QPN (24 bits).
    #[inline]
    pub fn dest_qp(&self) -> u32 {
        view::get_u24(self.buffer.as_ref(), field::DEST_QP)
    }
    /// AckReq.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.byte(field::ACK_REQ) & 0x80 != 0
    }
    /// The seven reserved bits of byte 8.
    #[inline]
    pub fn resv7(&self) -> u8 {
        self.byte(field::ACK_REQ) & 0x7F
    }
    /// PSN (24 bits).
    #[inline]
    pub fn psn(&self) -> u32 {
        view::get_u24(self.buffer.as_ref(), field::PSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_bits(&mut self, i: usize, mask: u8, v: u8) {
        let b = &mut self.buffer.as_mut()[i];
        *b = (*b & !mask) | (v & mask);
    }
    /// Set the opcode.
    #[inline]
    pub fn set_opcode(&mut self, op: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = op.0;
    }
    /// Set SE.
    #[inline]
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bits(field::FLAGS, 0x80, (v as u8) << 7);
    }
    /// Set M.
    #[inline]
    pub fn set_migreq(&mut self, v: bool) {
        self.set_bits(field::FLAGS, 0x40, (v as u8) << 6);
    }
    /// Set PadCnt (0..=3).
    #[inline]
    pub fn set_pad_count(&mut self, pad: u8) {
        self.set_bits(field::FLAGS, 0x30, pad << 4);
    }
    /// Set TVer.
    #[inline]
    pub fn set_tver(&mut self, tver: u8) {
        self.set_bits(field::FLAGS, 0x0F, tver);
    }
    /// Set the P_Key.
    #[inline]
    pub fn set_pkey(&mut self, pkey: u16) {
        view::set_u16(self.buffer.as_mut(), field::PKEY, pkey);
    }
    /// Set FECN.
    #[inline]
    pub fn set_fecn(&mut self, v: bool) {
        self.set_bits(field::FECN_BECN, 0x80, (v as u8) << 7);
    }
    /// Set BECN.
    #[inline]
    pub fn set_becn(&mut self, v: bool) {
        self.set_bits(field::FECN_BECN, 0x40, (v as u8) << 6);
    }
    /// Set the reserved bits of byte 4.
    #[inline]
    pub fn set_resv6a(&mut self, v: u8) {
        self.set_bits(field::FECN_BECN, 0x3F, v);
    }
    /// Set the destination QPN (modulo 2^24).
    #[inline]
    pub fn set_dest_qp(&mut self, qpn: u32) {
        view::set_u24(self.buffer.as_mut(), field::DEST_QP, qpn);
    }
    /// Set AckReq.
    #[inline]
    pub fn set_ack_req(&mut self, v: bool) {
        self.set_bits(field::ACK_REQ, 0x80, (v as u8) << 7);
    }
    /// Set the reserved bits of byte 8.
    #[inline]
    pub fn set_resv7(&mut self, v: u8) {
        self.set_bits(field::ACK_REQ, 0x7F, v);
    }
    /// Set the PSN (modulo 2^24).
    #[inline]
    pub fn set_psn(&mut self, psn: u32) {
        view::set_u24(self.buffer.as_mut(), field::PSN, psn);
    }
}

/// The receive check of a BTH.
///
/// Errors: [`Error::BadTver`] (TVer not 0).
#[inline(always)]
pub fn check<T: AsRef<[u8]>>(b: &Packet<T>) -> Result<(), Error> {
    //= IBTA 1.7 §9.2, as ROCEV2-DIGEST §2 states it (table row)
    //# byte 1, bits 3:0: TVer (must be 0; rxe drops others)
    if b.tver() != 0 {
        return Err(Error::BadTver);
    }
    Ok(())
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

    /// Parse a received BTH ([`check`], then every field).
    ///
    /// Errors: [`Error::BadTver`] (TVer not 0).
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(b: &Packet<T>) -> Result<BthRepr, Error> {
        check(b)?;
        Ok(BthRepr::decode(b))
    }

    /// Every field of `b` as it is, TVer included.
    #[inline(always)]
    pub fn decode<T: AsRef<[u8]>>(b: &Packet<T>) -> BthRepr {
        // Three big-endian words instead of twelve byte reads: this runs
        // once per received packet.
        let d = b.buffer.as_ref();
        let w0 = view::get_u32(d, 0..4);
        let w1 = view::get_u32(d, 4..8);
        let w2 = view::get_u32(d, 8..12);
        BthRepr {
            opcode: Opcode((w0 >> 24) as u8),
            solicited: w0 & 0x0080_0000 != 0,
            migreq: w0 & 0x0040_0000 != 0,
            pad_count: (w0 >> 20) as u8 & 3,
            tver: (w0 >> 16) as u8 & 0x0F,
            pkey: w0 as u16,
            fecn: w1 & 0x8000_0000 != 0,
            becn: w1 & 0x4000_0000 != 0,
            resv6a: (w1 >> 24) as u8 & 0x3F,
            dest_qp: w1 & MASK_24,
            ack_req: w2 & 0x8000_0000 != 0,
            resv7: (w2 >> 24) as u8 & 0x7F,
            psn: w2 & MASK_24,
        }
    }

    /// Write the 12 bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, b: &mut Packet<T>) {
        let out = b.buffer.as_mut();
        out[field::OPCODE] = self.opcode.0;
        out[field::FLAGS] = (self.solicited as u8) << 7
            | (self.migreq as u8) << 6
            | (self.pad_count & 3) << 4
            | (self.tver & 0x0F);
        view::set_u16(out, field::PKEY, self.pkey);
        out[field::FECN_BECN] =
            (self.fecn as u8) << 7 | (self.becn as u8) << 6 | (self.resv6a & 0x3F);
        view::set_u24(out, field::DEST_QP, self.dest_qp);
        out[field::ACK_REQ] = (self.ack_req as u8) << 7 | (self.resv7 & 0x7F);
        view::set_u24(out, field::PSN, self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BTH of vector v1_rc_send_only_ipv4 in
    /// ../shared/reference/vectors.txt: SEND_ONLY, P_Key 0xFFFF, QP 0x12,
    /// AckReq, PSN 0x100.
    #[test]
    fn vector_v1_bth() {
        let wire = [
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x00, 0x01, 0x00,
        ];
        let p = Packet::new_checked(&wire[..]).unwrap();
        let r = BthRepr::parse(&p).unwrap();
        let want = BthRepr {
            ack_req: true,
            ..BthRepr::new(Opcode::RC_SEND_ONLY, 0x12, 0x100)
        };
        assert_eq!(r, want);
        let mut out = [0xAAu8; 12];
        r.emit(&mut Packet::new_unchecked(&mut out));
        assert_eq!(out, wire);
        assert_eq!(
            Packet::new_checked(&wire[..11]).err(),
            Some(Error::BthTruncated)
        );
    }

    /// Each setter changes its own bits only; the getters read them back.
    #[test]
    fn setters_touch_their_field_only() {
        let mut b = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut b);
        p.set_opcode(Opcode(0x81));
        p.set_solicited(true);
        p.set_migreq(true);
        p.set_pad_count(3);
        p.set_tver(5);
        p.set_pkey(0x8001);
        p.set_fecn(true);
        p.set_becn(true);
        p.set_resv6a(0x3F);
        p.set_dest_qp(0x1_23_45_67);
        p.set_ack_req(true);
        p.set_resv7(0x7F);
        p.set_psn(0xFF_FF_FF_FF);
        assert_eq!(
            b,
            [0x81, 0xF5, 0x80, 0x01, 0xFF, 0x23, 0x45, 0x67, 0xFF, 0xFF, 0xFF, 0xFF]
        );
        let mut p = Packet::new_unchecked(&mut b);
        p.set_ack_req(false);
        p.set_pad_count(0);
        p.set_becn(false);
        assert_eq!(p.resv7(), 0x7F);
        assert_eq!((p.pad_count(), p.tver(), p.solicited()), (0, 5, true));
        assert_eq!((p.fecn(), p.becn(), p.resv6a()), (true, false, 0x3F));
        assert_eq!(BthRepr::parse(&p), Err(Error::BadTver));
        assert_eq!(BthRepr::decode(&p).tver, 5);
    }
}
