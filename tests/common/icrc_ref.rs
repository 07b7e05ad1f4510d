//! An independent ICRC reference, written from ROCEV2-DIGEST.md §4 on top of the
//! `crc` crate's catalogue CRC-32 (CRC_32_ISO_HDLC = the Ethernet/zlib CRC:
//! polynomial 0x04C11DB7, reflected, init and final XOR all-ones); checked
//! against our ICRC by `tests/icrc_reference.rs`, used by the tests that need
//! to verify frames with something we did not write (`tests/udp_wire.rs`).

pub const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// The network header forms the ICRC knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    V2Ipv4,
    V2Ipv6,
    V1Grh,
}

/// What the reference found in a frame: the form, the covered bytes as they
/// are in the frame (IP header or GRH through the pad bytes), and the 4 ICRC
/// bytes, or `None` if the frame is not RoCE or does not hold the whole packet.
pub struct Located<'a> {
    pub form: Form,
    pub covered: &'a [u8],
    pub wire: [u8; 4],
}

pub fn be16(b: &[u8], at: usize) -> usize {
    u16::from_be_bytes([b[at], b[at + 1]]) as usize
}

/// Find the ICRC of an Ethernet frame from its length fields (ROCEV2-DIGEST §1:
/// IP/UDP/GRH lengths include BTH..ICRC; trailing bytes are not the packet).
pub fn locate(frame: &[u8]) -> Option<Located<'_>> {
    if frame.len() < 14 {
        return None;
    }
    let (mut ethertype, mut l2) = (be16(frame, 12), 14);
    if ethertype == 0x8100 {
        if frame.len() < 18 {
            return None;
        }
        ethertype = be16(frame, 16);
        l2 = 18;
    }
    let l3 = &frame[l2..];
    let (form, end) = match ethertype {
        0x0800 => {
            // IPv4, 20-byte header (the recipe covers exactly that), UDP 4791.
            if l3.len() < 28 || l3[0] != 0x45 || l3[9] != 17 || be16(l3, 22) != 4791 {
                return None;
            }
            (Form::V2Ipv4, 20 + be16(l3, 24))
        }
        0x86DD => {
            if l3.len() < 48 || l3[0] >> 4 != 6 || l3[6] != 17 || be16(l3, 42) != 4791 {
                return None;
            }
            (Form::V2Ipv6, 40 + be16(l3, 44))
        }
        0x8915 => {
            if l3.len() < 40 {
                return None;
            }
            (Form::V1Grh, 40 + be16(l3, 4))
        }
        _ => return None,
    };
    let bth_at = match form {
        Form::V2Ipv4 => 28,
        Form::V2Ipv6 => 48,
        Form::V1Grh => 40,
    };
    if end > l3.len() || end < bth_at + 12 + 4 {
        return None;
    }
    Some(Located {
        form,
        covered: &l3[..end - 4],
        wire: l3[end - 4..end].try_into().unwrap(),
    })
}

/// The pseudo-packet of ROCEV2-DIGEST §4 for `covered` (IP header or GRH through
/// the pad bytes).
pub fn pseudo_packet(form: Form, covered: &[u8]) -> Vec<u8> {
    // The LRH RoCE does not have: 8 bytes of ones.
    let mut p = vec![0xFFu8; 8];
    let start = p.len();
    p.extend_from_slice(covered);
    let hdr = &mut p[start..];
    let bth = match form {
        Form::V2Ipv4 => {
            // IPv4: version/IHL(0) TOS(1) total length(2-3) ID(4-5)
            // flags/fragment(6-7) TTL(8) protocol(9) checksum(10-11) src(12-15)
            // dst(16-19); then UDP: sport(20-21) dport(22-23) length(24-25)
            // checksum(26-27).
            hdr[1] = 0xFF;
            hdr[8] = 0xFF;
            hdr[10..12].fill(0xFF);
            hdr[26..28].fill(0xFF);
            28
        }
        Form::V2Ipv6 | Form::V1Grh => {
            // IPv6/GRH word 0: version(4) traffic class(8) flow label(20); the
            // version is kept, the other 28 bits forced to ones.
            let w0 = u32::from_be_bytes(hdr[0..4].try_into().unwrap()) | 0x0FFF_FFFF;
            hdr[0..4].copy_from_slice(&w0.to_be_bytes());
            // Payload length(4-5) and next header(6) kept; hop limit(7) forced.
            hdr[7] = 0xFF;
            if form == Form::V2Ipv6 {
                // UDP checksum at 40 + 6.
                hdr[46..48].fill(0xFF);
                48
            } else {
                40
            }
        }
    };
    // BTH byte 4: FECN, BECN, Resv6a.
    hdr[bth + 4] = 0xFF;
    p
}

/// The reference ICRC value of `covered`.
pub fn reference_icrc(form: Form, covered: &[u8]) -> u32 {
    CRC32.checksum(&pseudo_packet(form, covered))
}
