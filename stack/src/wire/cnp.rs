//! Congestion Notification Packets (RoCEv2 Annex A17.9.3).
//!
//! A RoCEv2 CNP is an ordinary IP/UDP(4791) packet whose BTH has opcode 0x81,
//! SE/M/PadCnt/TVer 0, P_Key 0xFFFF, FECN 0, **BECN 1**, DestQP = the QPN of the
//! congested flow's sender, AckReq 0, PSN 0, followed by 16 reserved zero bytes
//! and the ICRC (UDP length 40). The notification point sends it to the source of
//! a CE-marked packet; the reaction point cuts that QP's rate.

use super::bth::BthRepr;
use super::ext::ExtHeaders;
use super::opcode::Opcode;
use super::packet::RocePacket;

/// Length of the reserved bytes after a CNP's BTH.
pub const PAD_LEN: usize = 16;

/// UDP length of a RoCEv2 CNP, bytes.
pub const CNP_UDP_LEN: u16 = 8 + 12 + PAD_LEN as u16 + 4;

/// The BTH of a CNP to `dest_qp`.
pub fn bth(dest_qp: u32) -> BthRepr {
    BthRepr {
        becn: true,
        ..BthRepr::new(Opcode::CNP, dest_qp, 0)
    }
}

/// The extension headers of a CNP: the 16 reserved bytes, zero.
pub fn ext() -> ExtHeaders {
    ExtHeaders {
        cnp_pad: Some([0; PAD_LEN]),
        ..ExtHeaders::default()
    }
}

/// Whether `p` is a CNP (opcode 0x81, or the native-IB code 0x80). Returns the
/// QPN it is addressed to (the QP whose rate must be cut).
pub fn cnp_target(p: &RocePacket<'_>) -> Option<u32> {
    (p.bth().opcode == Opcode::CNP || p.bth().opcode == Opcode::CNP_IB).then_some(p.bth().dest_qp)
}
