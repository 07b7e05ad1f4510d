//! Captured RoCEv2 frames (classic pcap, Ethernet): their BTH fields and
//! the retransmissions of one sender.

use std::collections::HashSet;
use std::path::Path;

/// A captured frame: its bytes (possibly cut at the snap length) and its
/// length on the wire.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The bytes captured.
    pub data: Vec<u8>,
    /// The frame's length on the wire.
    pub wire_len: usize,
}

/// Every record of a classic pcap file (either byte order).
///
/// # Errors
/// A line saying what is malformed.
pub fn read_pcap(path: &Path) -> Result<Vec<Captured>, String> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if b.len() < 24 {
        return Err(format!("{}: shorter than a pcap header", path.display()));
    }
    let le = match b[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Err(format!("{}: not a classic pcap file", path.display())),
    };
    let u32_at = |i: usize| {
        let x = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(x)
        } else {
            u32::from_be_bytes(x)
        }
    };
    let mut out = Vec::new();
    let mut i = 24;
    while i + 16 <= b.len() {
        let incl = u32_at(i + 8) as usize;
        let orig = u32_at(i + 12) as usize;
        let start = i + 16;
        if incl > 262_144 || start + incl > b.len() {
            // A record cut by a stopped capture ends the file.
            break;
        }
        out.push(Captured {
            data: b[start..start + incl].to_vec(),
            wire_len: orig,
        });
        i = start + incl;
    }
    Ok(out)
}

/// The fields of a RoCEv2 frame (Ethernet, IPv4 without options, UDP to
/// port 4791, BTH).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rocev2 {
    /// IPv4 source.
    pub src: [u8; 4],
    /// IPv4 destination.
    pub dst: [u8; 4],
    /// BTH opcode.
    pub opcode: u8,
    /// BTH destination QP.
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
}

/// RC ACKNOWLEDGE: the only opcode that is not counted as data.
pub const ACKNOWLEDGE: u8 = 0x11;

/// `frame`'s RoCEv2 fields, or `None` if it is not IPv4/UDP/4791 with a
/// whole BTH.
pub fn rocev2(frame: &[u8]) -> Option<Rocev2> {
    if frame.len() < 14 + 20 + 8 + 12 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[14..];
    if ip[0] != 0x45 || ip[9] != 17 {
        return None;
    }
    let udp = &ip[20..];
    if u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
        return None;
    }
    let bth = &udp[8..];
    Some(Rocev2 {
        src: ip[12..16].try_into().ok()?,
        dst: ip[16..20].try_into().ok()?,
        opcode: bth[0],
        dest_qp: u32::from_be_bytes([0, bth[5], bth[6], bth[7]]),
        psn: u32::from_be_bytes([0, bth[9], bth[10], bth[11]]),
    })
}

/// What one sender put on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Data packets (every opcode but ACKNOWLEDGE).
    pub data: u64,
    /// Of those, repeats of a (destination, QP, PSN, opcode) sent before:
    /// retransmissions (go-back-N resends, READ responses to a repeated
    /// READ request).
    pub repeated: u64,
    /// ACKNOWLEDGE packets.
    pub acks: u64,
}

impl std::ops::AddAssign for Sent {
    fn add_assign(&mut self, o: Sent) {
        self.data += o.data;
        self.repeated += o.repeated;
        self.acks += o.acks;
    }
}

/// The packets `src` sent among `frames` (captured before any loss, in
/// order).
pub fn sent_by(frames: &[Rocev2], src: [u8; 4]) -> Sent {
    let mut seen = HashSet::new();
    let mut s = Sent::default();
    for f in frames.iter().filter(|f| f.src == src) {
        if f.opcode == ACKNOWLEDGE {
            s.acks += 1;
            continue;
        }
        s.data += 1;
        if !seen.insert((f.dst, f.dest_qp, f.psn, f.opcode)) {
            s.repeated += 1;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src: u8, opcode: u8, qp: u32, psn: u32) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 12 + 4];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[14 + 12..14 + 16].copy_from_slice(&[10, 77, 0, src]);
        f[14 + 16..14 + 20].copy_from_slice(&[10, 77, 0, 9]);
        f[34 + 2..34 + 4].copy_from_slice(&4791u16.to_be_bytes());
        f[42] = opcode;
        f[42 + 5..42 + 8].copy_from_slice(&qp.to_be_bytes()[1..]);
        f[42 + 9..42 + 12].copy_from_slice(&psn.to_be_bytes()[1..]);
        f
    }

    #[test]
    fn repeats_of_a_psn_are_retransmissions_acks_are_not() {
        let fs: Vec<Rocev2> = [
            frame(1, 0x06, 0x11, 1),
            frame(1, 0x07, 0x11, 2),
            frame(1, 0x06, 0x11, 1),
            frame(1, 0x07, 0x11, 2),
            frame(2, ACKNOWLEDGE, 0x12, 2),
            frame(2, ACKNOWLEDGE, 0x12, 2),
            frame(1, 0x08, 0x11, 3),
        ]
        .iter()
        .map(|f| rocev2(f).unwrap())
        .collect();
        assert_eq!(fs[0].psn, 1);
        assert_eq!(fs[0].dest_qp, 0x11);
        assert_eq!(
            sent_by(&fs, [10, 77, 0, 1]),
            Sent {
                data: 5,
                repeated: 2,
                acks: 0
            }
        );
        assert_eq!(sent_by(&fs, [10, 77, 0, 2]).acks, 2);
        assert!(rocev2(&[0u8; 20]).is_none());
    }
}
