//! The record parser behind [`super::read::Frames`] and
//! [`super::read::CaptureReader`]: the file header and the records of a
//! classic pcap (tcpdump format) or pcapng capture, as offsets into the
//! unparsed bytes, so that one parser serves a capture in memory and a
//! stream. The global header, the record headers and the pcapng block
//! framing are parsed by `pcap-file`; the bodies of the three packet blocks
//! are read here with bounds-checked code.

use std::time::Duration;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::PcapNgParser;
use pcap_file::{Endianness, PcapError, TsResolution};

use super::read::{CaptureError, CaptureFormat, LINKTYPE_ETHERNET, MAX_BLOCK_LEN, MAX_RECORD_LEN};

/// Length of the classic pcap global header, bytes.
const PCAP_HEADER_LEN: usize = 24;
/// Length of a classic pcap record header, bytes.
const PCAP_RECORD_HEADER_LEN: usize = 16;
/// pcapng Section Header Block type (also its magic number).
const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
/// pcapng Enhanced Packet Block type.
const PCAPNG_EPB: u32 = 6;
/// pcapng Simple Packet Block type.
const PCAPNG_SPB: u32 = 3;
/// pcapng (obsolete) Packet Block type.
const PCAPNG_PB: u32 = 2;

pub(super) enum State {
    Pcap(PcapParser),
    PcapNg(Box<PcapNgParser>),
}

/// What the next record of a capture is, as offsets into the unparsed
/// bytes (so the same parser serves a capture in memory and a stream).
pub(super) enum Step {
    /// A frame: its bytes are `at..at + len` of the data; the record took
    /// `used` bytes; captured at `time` (since the Unix epoch).
    Frame {
        number: u64,
        time: Duration,
        at: usize,
        len: usize,
        orig_len: u32,
        used: usize,
    },
    /// A block without a frame, `used` bytes long.
    Skip(usize),
    /// The next record needs `need` bytes and fewer are there; `claimed` is
    /// the length its header gives (`None`: the header itself is cut).
    Need { need: usize, claimed: Option<u64> },
    /// No byte left.
    End,
}

/// The parser state shared by [`super::read::Frames`] and
/// [`super::read::CaptureReader`].
pub(super) struct Core {
    state: State,
    /// The number the next frame gets (1-based).
    pub(super) next_number: u64,
    /// An error or the end was reported: nothing more is read.
    pub(super) done: bool,
    /// The file's format.
    pub(super) format: CaptureFormat,
}

/// Where `part` starts in `whole` (a sub-slice of it).
fn offset_in(whole: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).saturating_sub(whole.as_ptr() as usize)
}

/// How many bytes the file header needs, from its first bytes (at least 4;
/// 12 for pcapng): Err for an unknown magic number or an oversized Section
/// Header Block; `Ok(None)` when more bytes are needed to tell.
pub(super) fn header_len(data: &[u8]) -> Result<Option<usize>, CaptureError> {
    if data.is_empty() {
        return Err(CaptureError::Empty);
    }
    match be_u32(data) {
        0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1 if data.len() >= 4 => {
            Ok(Some(PCAP_HEADER_LEN))
        }
        PCAPNG_SHB if data.len() >= 12 => {
            let len = match data.get(8..12) {
                Some([0x1A, 0x2B, 0x3C, 0x4D]) => be_u32(&data[4..8]),
                _ => be_u32(&data[4..8]).swap_bytes(),
            };
            if len > MAX_BLOCK_LEN {
                return Err(CaptureError::BadHeader {
                    format: CaptureFormat::PcapNg,
                    reason: "section header block longer than 16 MiB",
                });
            }
            Ok(Some(len as usize))
        }
        PCAPNG_SHB => Ok(None),
        magic if data.len() >= 4 => Err(CaptureError::UnknownMagic { magic }),
        _ => Ok(None),
    }
}

impl Core {
    /// Detect the format by magic number and read the file header from
    /// `data`; returns the parser and the header's length.
    pub(super) fn new(data: &[u8]) -> Result<(Core, usize), CaptureError> {
        if data.is_empty() {
            return Err(CaptureError::Empty);
        }
        let magic = be_u32(data);
        let (state, format, rest) = match magic {
            0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1 => {
                let bad = |reason| CaptureError::BadHeader {
                    format: CaptureFormat::Pcap,
                    reason,
                };
                if data.len() < PCAP_HEADER_LEN {
                    return Err(bad("file shorter than the 24-byte global header"));
                }
                let (rest, parser) = PcapParser::new(data).map_err(|e| match e {
                    PcapError::InvalidField(r) => bad(r),
                    _ => bad("unreadable global header"),
                })?;
                let link_type = u32::from(parser.header().datalink);
                if link_type != LINKTYPE_ETHERNET {
                    return Err(CaptureError::UnsupportedLinkType {
                        link_type,
                        frame: None,
                    });
                }
                (State::Pcap(parser), CaptureFormat::Pcap, rest)
            }
            PCAPNG_SHB => {
                let (rest, parser) =
                    PcapNgParser::new(data).map_err(|e| CaptureError::BadHeader {
                        format: CaptureFormat::PcapNg,
                        reason: match e {
                            PcapError::IncompleteBuffer => {
                                "section header block runs past the end of the file"
                            }
                            PcapError::InvalidField(r) => r,
                            _ => "unreadable section header block",
                        },
                    })?;
                (State::PcapNg(Box::new(parser)), CaptureFormat::PcapNg, rest)
            }
            // (From a file shorter than 4 bytes, `magic` holds what there is.)
            _ => return Err(CaptureError::UnknownMagic { magic }),
        };
        let core = Core {
            state,
            next_number: 1,
            done: false,
            format,
        };
        Ok((core, data.len() - rest.len()))
    }

    /// The error for a record cut short by the end of the input.
    pub(super) fn truncated(
        &self,
        offset: usize,
        claimed: Option<u64>,
        available: usize,
    ) -> CaptureError {
        CaptureError::Truncated {
            frame: self.next_number,
            offset,
            needed: claimed,
            available,
        }
    }

    /// Parse the next record of `data` (the unparsed bytes, starting at byte
    /// `base` of the file).
    pub(super) fn step(&mut self, data: &[u8], base: usize) -> Result<Step, CaptureError> {
        match self.state {
            State::Pcap(_) => self.step_pcap(data, base),
            State::PcapNg(_) => self.step_pcapng(data, base),
        }
    }

    fn step_pcap(&mut self, data: &[u8], base: usize) -> Result<Step, CaptureError> {
        let State::Pcap(parser) = &self.state else {
            return Ok(Step::End);
        };
        if data.is_empty() {
            return Ok(Step::End);
        }
        if data.len() < PCAP_RECORD_HEADER_LEN {
            return Ok(Step::Need {
                need: PCAP_RECORD_HEADER_LEN,
                claimed: None,
            });
        }
        let incl = match parser.header().endianness {
            Endianness::Big => be_u32(&data[8..12]),
            Endianness::Little => be_u32(&data[8..12]).swap_bytes(),
        };
        // Lenient like tshark: an incl_len above the snap length or above
        // orig_len is accepted as long as the bytes are there, up to the
        // largest record Wireshark reads.
        if incl > MAX_RECORD_LEN {
            return Err(CaptureError::RecordTooLarge {
                frame: self.next_number,
                offset: base,
                claimed: u64::from(incl),
                limit: MAX_RECORD_LEN,
            });
        }
        let need = PCAP_RECORD_HEADER_LEN + incl as usize;
        if data.len() < need {
            return Ok(Step::Need {
                need,
                claimed: Some(need as u64),
            });
        }
        let raw = match parser.next_raw_packet(&data[..need]) {
            Ok((_, raw)) => raw,
            Err(_) => return Err(self.truncated(base, Some(need as u64), data.len())),
        };
        let number = self.next_number;
        self.next_number += 1;
        // Seconds and micro- or nanoseconds (the magic number says which);
        // a fraction of a second or more is carried, as tshark does.
        let frac_ns = match parser.header().ts_resolution {
            TsResolution::MicroSecond => u64::from(raw.ts_frac) * 1000,
            TsResolution::NanoSecond => u64::from(raw.ts_frac),
        };
        let time = Duration::from_secs(u64::from(raw.ts_sec)) + Duration::from_nanos(frac_ns);
        Ok(Step::Frame {
            number,
            time,
            at: PCAP_RECORD_HEADER_LEN,
            len: raw.data.len(),
            orig_len: raw.orig_len,
            used: need,
        })
    }

    fn step_pcapng(&mut self, data: &[u8], base: usize) -> Result<Step, CaptureError> {
        let frame = self.next_number;
        let State::PcapNg(parser) = &mut self.state else {
            return Ok(Step::End);
        };
        if data.is_empty() {
            return Ok(Step::End);
        }
        let bad = |reason| CaptureError::BadBlock {
            frame,
            offset: base,
            reason,
        };
        if data.len() < 8 {
            return Ok(Step::Need {
                need: 8,
                claimed: None,
            });
        }
        // A Section Header Block gives its own byte order (its type reads
        // the same both ways).
        let big = if be_u32(data) == PCAPNG_SHB {
            if data.len() < 12 {
                return Ok(Step::Need {
                    need: 12,
                    claimed: None,
                });
            }
            data[8..12] == [0x1A, 0x2B, 0x3C, 0x4D]
        } else {
            parser.section().endianness == Endianness::Big
        };
        let len = if big {
            be_u32(&data[4..8])
        } else {
            be_u32(&data[4..8]).swap_bytes()
        };
        if len > MAX_BLOCK_LEN {
            return Err(CaptureError::RecordTooLarge {
                frame,
                offset: base,
                claimed: u64::from(len),
                limit: MAX_BLOCK_LEN,
            });
        }
        if data.len() < len as usize {
            return Ok(Step::Need {
                need: len as usize,
                claimed: Some(u64::from(len)),
            });
        }
        let block = &data[..(len as usize).max(8).min(data.len())];
        let (rem, raw) = match parser.next_raw_block(block) {
            Ok(x) => x,
            Err(PcapError::IncompleteBuffer) => {
                return Err(self.truncated(base, Some(u64::from(len)), data.len()))
            }
            Err(e) => {
                return Err(bad(match e {
                    PcapError::InvalidField(r) => r,
                    PcapError::Utf8Error(_) | PcapError::FromUtf8Error(_) => {
                        "invalid UTF-8 in an option"
                    }
                    PcapError::InvalidInterfaceId(_) => "invalid interface ID",
                    _ => "unreadable block",
                }))
            }
        };
        let used = block.len() - rem.len();
        let body: &[u8] = match raw.body {
            std::borrow::Cow::Borrowed(b) => b,
            // `next_raw_block` on a slice always borrows; an owned body would
            // be a change in pcap-file: treat it as an empty block.
            std::borrow::Cow::Owned(_) => &[],
        };
        let endianness = parser.section().endianness;
        let u32_at = |off: usize| -> Option<u32> {
            let b: [u8; 4] = body.get(off..off + 4)?.try_into().ok()?;
            Some(match endianness {
                Endianness::Big => u32::from_be_bytes(b),
                Endianness::Little => u32::from_le_bytes(b),
            })
        };
        let u16_at = |off: usize| -> Option<u16> {
            let b: [u8; 2] = body.get(off..off + 2)?.try_into().ok()?;
            Some(match endianness {
                Endianness::Big => u16::from_be_bytes(b),
                Endianness::Little => u16::from_le_bytes(b),
            })
        };
        // The 64-bit timestamp of an (Enhanced) Packet Block, in units of
        // its interface's if_tsresol.
        let ts_at = |off: usize| -> Option<u64> {
            Some(u64::from(u32_at(off)?) << 32 | u64::from(u32_at(off + 4)?))
        };
        // (interface, timestamp, captured bytes, original length)
        let (interface, ts, bytes, orig_len) = match raw.type_ {
            PCAPNG_EPB => {
                let (Some(interface), Some(cap), Some(orig)) = (u32_at(0), u32_at(12), u32_at(16))
                else {
                    return Err(bad("enhanced packet block shorter than 20 bytes"));
                };
                let Some(d) = body.get(20..).and_then(|d| d.get(..cap as usize)) else {
                    return Err(bad(
                        "enhanced packet block: captured length runs past the block",
                    ));
                };
                (interface, ts_at(4), d, orig)
            }
            PCAPNG_PB => {
                let (Some(interface), Some(cap), Some(orig)) = (u16_at(0), u32_at(12), u32_at(16))
                else {
                    return Err(bad("packet block shorter than 20 bytes"));
                };
                let Some(d) = body.get(20..).and_then(|d| d.get(..cap as usize)) else {
                    return Err(bad("packet block: captured length runs past the block"));
                };
                (u32::from(interface), ts_at(4), d, orig)
            }
            PCAPNG_SPB => {
                let Some(orig) = u32_at(0) else {
                    return Err(bad("simple packet block shorter than 4 bytes"));
                };
                // Captured length = min(original length, interface 0's snap
                // length, what the block holds).
                let snap = parser.interfaces().first().map_or(0, |i| i.snaplen);
                let room = body.len().saturating_sub(4);
                let mut cap = (orig as usize).min(room);
                if snap != 0 {
                    cap = cap.min(snap as usize);
                }
                // A Simple Packet Block has no timestamp.
                (0, None, body.get(4..4 + cap).unwrap_or(&[]), orig)
            }
            _ => return Ok(Step::Skip(used)),
        };
        if bytes.len() > MAX_RECORD_LEN as usize {
            return Err(CaptureError::RecordTooLarge {
                frame,
                offset: base,
                claimed: bytes.len() as u64,
                limit: MAX_RECORD_LEN,
            });
        }
        let Some(idb) = parser.interfaces().get(interface as usize) else {
            return Err(CaptureError::UnknownInterface { frame, interface });
        };
        let link_type = u32::from(idb.linktype);
        if link_type != LINKTYPE_ETHERNET {
            return Err(CaptureError::UnsupportedLinkType {
                link_type,
                frame: Some(frame),
            });
        }
        let ns = ts.map_or(0, |raw| {
            ng_units_to_ns(tsresol_of(&idb.options), u128::from(raw))
        });
        let time = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
        self.next_number += 1;
        Ok(Step::Frame {
            number: frame,
            time,
            at: offset_in(data, bytes),
            len: bytes.len(),
            orig_len,
            used,
        })
    }
}

/// The first 4 bytes of `data` (fewer: zero-padded) as a big-endian number.
pub(super) fn be_u32(data: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    for (d, s) in b.iter_mut().zip(data) {
        *d = *s;
    }
    u32::from_be_bytes(b)
}

/// A raw pcapng timestamp count in nanoseconds, for an interface whose
/// `if_tsresol` is `tsresol` (pcapng §4.2: bit 7 clear = 10^-n s per unit,
/// set = 2^-n s; default 10^-6).
pub(super) fn ng_units_to_ns(tsresol: u8, raw: u128) -> u128 {
    let n = u32::from(tsresol & 0x7F);
    if tsresol & 0x80 == 0 {
        if n <= 9 {
            raw * 10u128.pow(9 - n)
        } else {
            raw / 10u128.pow((n - 9).min(38))
        }
    } else {
        // 2^-n seconds per unit.
        (raw * 1_000_000_000) >> n.min(127)
    }
}

/// An interface's `if_tsresol` (default 6: microseconds).
fn tsresol_of(options: &[InterfaceDescriptionOption<'_>]) -> u8 {
    options
        .iter()
        .find_map(|o| match o {
            InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
            _ => None,
        })
        .unwrap_or(6)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcapng_resolution() {
        assert_eq!(ng_units_to_ns(6, 1_500_000), 1_500_000_000);
        assert_eq!(ng_units_to_ns(9, 42), 42);
        assert_eq!(ng_units_to_ns(0x80 | 10, 1024), 1_000_000_000);
    }
}
