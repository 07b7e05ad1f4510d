//! MAC control frames: IEEE 802.3x PAUSE (802.3 Annex 31B) and IEEE 802.1Qbb
//! priority-based flow control (PFC).
//!
//! ```text
//! DA 01:80:C2:00:00:01 | SA | EtherType 0x8808 | opcode(2) | ...
//!   PAUSE (0x0001): pause_time(2), 42 zero bytes
//!   PFC   (0x0101): class-enable vector(2, bit n = priority n, high byte 0),
//!                   time[0..7](2 each, priority 0 first), 26 zero bytes
//! ```
//! The frame is always 60 bytes before the FCS (64 on the wire), untagged.
//! Times are in quanta of 512 bit times at the link speed (802.3 §31B.3.2):
//! 5.12 ns at 100 Gbit/s, 20.48 ns at 25 Gbit/s. A timer of 0 with its enable bit
//! set is XON (resume at once); a new frame replaces a running timer.

use core::time::Duration;

use super::ethernet::{self, EthRepr, EthernetFrame, L2Info};
use super::view::{self, Field};
use super::{Error, ETHERTYPE_MAC_CONTROL, ETH_MIN_FRAME_LEN};

mod field {
    use super::Field;
    pub const OPCODE: Field = 0..2;
    /// PAUSE: pause_time.
    pub const PAUSE_TIME: Field = 2..4;
    /// PFC: the class-enable vector.
    pub const CLASS_ENABLE: Field = 2..4;
    /// PFC: time[0..7], priority 0 first.
    pub const TIMES: Field = 4..20;
}

/// Length of a PAUSE body (opcode, pause_time), bytes.
pub const PAUSE_LEN: usize = field::PAUSE_TIME.end;
/// Length of a PFC body (opcode, class-enable vector, eight times), bytes.
pub const PFC_LEN: usize = field::TIMES.end;

/// Destination MAC of MAC control frames (802.1D reserved address).
pub const MAC_CONTROL_DST: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];
/// 802.3x PAUSE opcode.
pub const OPCODE_PAUSE: u16 = 0x0001;
/// 802.1Qbb PFC opcode.
pub const OPCODE_PFC: u16 = 0x0101;
/// Length of a MAC control frame without FCS, bytes.
pub const FRAME_LEN: usize = ETH_MIN_FRAME_LEN;
/// Bit times in one pause quantum.
pub const BITS_PER_QUANTUM: u64 = 512;

/// An 802.3x PAUSE frame: pause all traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PauseRepr {
    /// Pause time, quanta (0 = resume).
    pub quanta: u16,
}

/// An 802.1Qbb PFC frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PfcRepr {
    /// Class-enable vector as on the wire: bit n = priority n; the high byte is
    /// reserved (0 when sent; Wireshark flags non-zero).
    pub class_enable: u16,
    /// Pause time per priority, quanta; meaningful only where enabled.
    pub quanta: [u16; 8],
}

impl PfcRepr {
    /// XOFF for one priority: enable bit set, timer `quanta`.
    pub fn xoff(priority: u8, quanta: u16) -> PfcRepr {
        let mut r = PfcRepr::default();
        r.set(priority, quanta);
        r
    }
    /// XON for one priority: enable bit set, timer 0.
    pub fn xon(priority: u8) -> PfcRepr {
        PfcRepr::xoff(priority, 0)
    }
    /// Enable `priority` (0..=7) with timer `quanta`. A priority above 7 is
    /// ignored (it must not alias another priority's bit).
    pub fn set(&mut self, priority: u8, quanta: u16) {
        let p = priority as usize;
        if let Some(q) = self.quanta.get_mut(p) {
            self.class_enable |= 1 << p;
            *q = quanta;
        }
    }
    /// Whether `priority`'s enable bit is set.
    pub fn enabled(&self, priority: u8) -> bool {
        priority < 8 && self.class_enable & (1 << priority) != 0
    }
    /// Timer of `priority` if its enable bit is set.
    pub fn time(&self, priority: u8) -> Option<u16> {
        self.enabled(priority)
            .then(|| self.quanta[(priority & 7) as usize])
    }
}

/// The MAC control payload after the Ethernet header, in a buffer: the
/// opcode and, for PAUSE and PFC, their fields (the zero padding after them
/// is not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap `buffer` without checking its length: the accessors panic if it
    /// is too short. For writing; on input use [`Packet::new_checked`].
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap `buffer` after [`Packet::check_len`].
    ///
    /// Errors: as [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Whether the buffer holds the opcode and, for PAUSE and PFC, their
    /// fields: after this passes no accessor for the opcode's fields
    /// panics.
    ///
    /// Errors: [`Error::MacControlTruncated`].
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < field::OPCODE.end {
            return Err(Error::MacControlTruncated);
        }
        let need = match self.opcode() {
            OPCODE_PAUSE => PAUSE_LEN,
            OPCODE_PFC => PFC_LEN,
            _ => field::OPCODE.end,
        };
        if len < need {
            return Err(Error::MacControlTruncated);
        }
        Ok(())
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// MAC control opcode.
    pub fn opcode(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::OPCODE)
    }
    /// PAUSE: pause_time, quanta.
    pub fn pause_time(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::PAUSE_TIME)
    }
    /// PFC: the class-enable vector (bit n = priority n).
    pub fn class_enable(&self) -> u16 {
        view::get_u16(self.buffer.as_ref(), field::CLASS_ENABLE)
    }
    /// PFC: time of `priority` (0..=7), quanta.
    pub fn time(&self, priority: usize) -> u16 {
        let at = field::TIMES.start + 2 * (priority & 7);
        view::get_u16(self.buffer.as_ref(), at..at + 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the opcode.
    pub fn set_opcode(&mut self, op: u16) {
        view::set_u16(self.buffer.as_mut(), field::OPCODE, op);
    }
    /// PAUSE: set pause_time.
    pub fn set_pause_time(&mut self, quanta: u16) {
        view::set_u16(self.buffer.as_mut(), field::PAUSE_TIME, quanta);
    }
    /// PFC: set the class-enable vector.
    pub fn set_class_enable(&mut self, v: u16) {
        view::set_u16(self.buffer.as_mut(), field::CLASS_ENABLE, v);
    }
    /// PFC: set the time of `priority` (0..=7).
    pub fn set_time(&mut self, priority: usize, quanta: u16) {
        let at = field::TIMES.start + 2 * (priority & 7);
        view::set_u16(self.buffer.as_mut(), at..at + 2, quanta);
    }
}

impl PauseRepr {
    /// The meaning of a PAUSE body.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> PauseRepr {
        PauseRepr {
            quanta: p.pause_time(),
        }
    }
    /// Write opcode and pause_time.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_opcode(OPCODE_PAUSE);
        p.set_pause_time(self.quanta);
    }
}

impl PfcRepr {
    /// The meaning of a PFC body.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> PfcRepr {
        let mut r = PfcRepr {
            class_enable: p.class_enable(),
            quanta: [0; 8],
        };
        for (i, q) in r.quanta.iter_mut().enumerate() {
            *q = p.time(i);
        }
        r
    }
    /// Write opcode, class-enable vector and the eight times.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_opcode(OPCODE_PFC);
        p.set_class_enable(self.class_enable);
        for (i, q) in self.quanta.iter().enumerate() {
            p.set_time(i, *q);
        }
    }
}

/// A parsed MAC control frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MacControl {
    /// 802.3x PAUSE.
    Pause(PauseRepr),
    /// 802.1Qbb PFC.
    Pfc(PfcRepr),
}

impl MacControl {
    /// Parse a whole Ethernet frame (an 802.1Q tag, if any, is skipped). Trailing
    /// bytes (pad, FCS) are ignored.
    ///
    /// Errors: [`Error::NotRoce`] if the EtherType is not 0x8808,
    /// [`Error::MacControlBadDst`] for another destination (CASES R33 e),
    /// [`Error::MacControlTruncated`], [`Error::MacControlUnknownOpcode`].
    pub fn parse(frame: &[u8]) -> Result<MacControl, Error> {
        let l2 = L2Info::parse(frame)?;
        if l2.ethertype != ETHERTYPE_MAC_CONTROL {
            return Err(Error::NotRoce);
        }
        //= IEEE 802.3 Annex 31B / 802.1Qbb, as ROCEV2-DIGEST §7 states it
        //# MAC Control frame [...]: DA 01:80:C2:00:00:01, SA = port MAC,
        //# EtherType 0x8808
        // A frame to another address is not obeyed (CASES R33 e).
        if l2.dst != MAC_CONTROL_DST {
            return Err(Error::MacControlBadDst);
        }
        let body = frame.get(l2.header_len()..).unwrap_or(&[]);
        let p = Packet::new_checked(body)?;
        //= IEEE 802.3 Annex 31B / 802.1Qbb, as ROCEV2-DIGEST §7 states it (table)
        //# Offset after EtherType 0–1: PAUSE opcode 0x0001, PFC opcode 0x0101
        match p.opcode() {
            OPCODE_PAUSE => Ok(MacControl::Pause(PauseRepr::parse(&p))),
            OPCODE_PFC => Ok(MacControl::Pfc(PfcRepr::parse(&p))),
            op => Err(Error::MacControlUnknownOpcode(op)),
        }
    }

    /// Write the 60-byte frame (untagged) from `src` into `buf`. Returns 60.
    ///
    /// Errors: [`Error::BufferTooSmall`].
    pub fn emit(&self, src: [u8; 6], buf: &mut [u8]) -> Result<usize, Error> {
        let out = buf.get_mut(..FRAME_LEN).ok_or(Error::BufferTooSmall)?;
        out.fill(0);
        let (eth, body) = out.split_at_mut(ethernet::HEADER_LEN);
        let eth_repr = EthRepr {
            dst: MAC_CONTROL_DST,
            src,
            vlan: None,
        };
        eth_repr.emit(
            &mut EthernetFrame::new_unchecked(eth),
            ETHERTYPE_MAC_CONTROL,
        );
        let mut p = Packet::new_unchecked(body);
        match self {
            MacControl::Pause(r) => r.emit(&mut p),
            MacControl::Pfc(r) => r.emit(&mut p),
        }
        Ok(FRAME_LEN)
    }
}

/// Duration of `quanta` pause quanta at `link_mbps` Mbit/s (512 bit times each;
/// 802.3 §31B.3.2). Rounded down to the nanosecond. A link speed of 0 gives 0.
pub fn quanta_to_duration(quanta: u16, link_mbps: u64) -> Duration {
    if link_mbps == 0 {
        return Duration::ZERO;
    }
    // picoseconds = quanta * 512 bits / (link_mbps * 1e6 bit/s) * 1e12
    let ps = quanta as u128 * BITS_PER_QUANTUM as u128 * 1_000_000 / link_mbps as u128;
    Duration::from_nanos((ps / 1000) as u64)
}

/// Duration of `quanta` pause quanta at `link_mbps` Mbit/s (512 bit times each;
/// 802.3 §31B.3.2), rounded **up** to the nanosecond: the time a receiver that
/// honours the pause must stay silent, so it never resumes early (65535 quanta at
/// 100 Gbit/s = 335,539.2 ns -> 335,540 ns). A link speed of 0 gives 0.
pub fn quanta_to_duration_ceil(quanta: u16, link_mbps: u64) -> Duration {
    if link_mbps == 0 {
        return Duration::ZERO;
    }
    // picoseconds, exact: quanta * 512 * 1e6 / link_mbps (then ceil to ns)
    let num = quanta as u128 * BITS_PER_QUANTUM as u128 * 1_000_000;
    let ps = num.div_ceil(link_mbps as u128);
    Duration::from_nanos(ps.div_ceil(1000) as u64)
}

/// The number of quanta covering `d` at `link_mbps` Mbit/s, rounded up and
/// saturating at 0xFFFF. A link speed of 0 gives 0.
pub fn duration_to_quanta(d: Duration, link_mbps: u64) -> u16 {
    if link_mbps == 0 {
        return 0;
    }
    // quanta = d[ps] * link_mbps / (512 * 1e6)
    let num = d
        .as_nanos()
        .saturating_mul(1000)
        .saturating_mul(link_mbps as u128);
    let den = BITS_PER_QUANTUM as u128 * 1_000_000;
    num.div_ceil(den).min(u16::MAX as u128) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quanta_at_link_speeds_from_digest() {
        // ROCEV2-DIGEST §7: 51.2 ns @10G, 20.48 ns @25G, 5.12 ns @100G; 65535 quanta
        // = 3.355 ms @10G, 335.5 us @100G; CASES R34: ~1342 us @25G.
        assert_eq!(quanta_to_duration(10, 10_000), Duration::from_nanos(512));
        assert_eq!(quanta_to_duration(100, 25_000), Duration::from_nanos(2048));
        assert_eq!(quanta_to_duration(100, 100_000), Duration::from_nanos(512));
        assert_eq!(
            quanta_to_duration(0xFFFF, 100_000),
            Duration::from_nanos(335_539)
        );
        assert_eq!(
            quanta_to_duration(0xFFFF, 10_000),
            Duration::from_nanos(3_355_392)
        );
        assert_eq!(
            quanta_to_duration(0xFFFF, 25_000),
            Duration::from_nanos(1_342_156)
        );
        // Rounded up: 335,539.2 ns -> 335,540 ns; exact values stay exact.
        assert_eq!(
            quanta_to_duration_ceil(0xFFFF, 100_000),
            Duration::from_nanos(335_540)
        );
        assert_eq!(
            quanta_to_duration_ceil(100, 100_000),
            Duration::from_nanos(512)
        );
        assert_eq!(
            quanta_to_duration_ceil(0xFFFF, 25_000),
            Duration::from_nanos(1_342_157)
        );
        assert_eq!(quanta_to_duration_ceil(1, 0), Duration::ZERO);
        assert_eq!(quanta_to_duration_ceil(0, 100_000), Duration::ZERO);
        assert_eq!(duration_to_quanta(Duration::from_nanos(512), 100_000), 100);
        assert_eq!(duration_to_quanta(Duration::from_nanos(513), 100_000), 101);
        assert_eq!(duration_to_quanta(Duration::from_secs(1), 100_000), 0xFFFF);
        assert_eq!(duration_to_quanta(Duration::from_secs(1), 0), 0);
    }
}
