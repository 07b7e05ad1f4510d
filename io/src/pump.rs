//! The loop step that joins a backend to a [`Device`]: the one pump of the
//! project (the perf engine, `TapHost`, the DPDK examples and tests all
//! drive their devices with it).
//!
//! A step is a receive half and a transmit half:
//!
//! 1. [`receive`]: up to `burst` frames from the backend into
//!    [`Device::handle_frame`], then [`Device::handle_timeout`] if a timer is
//!    due at `now`;
//! 2. [`transmit`]: up to `burst` frames from [`Device::poll_transmit`] into
//!    the backend's buffers ([`transmit_gather`]: by reference where the
//!    device has a large payload in a shared MR, see
//!    [`roce_stack::backend::TxFrame`]).
//!
//! [`pump`] and [`pump_gather`] are both halves in a row. A loop that does
//! something between the halves (the perf engine polls its CQ and posts
//! work requests there) calls them itself.
//!
//! Anything else on the wire (ARP, neighbour discovery, ping) is the
//! business of a [`crate::adapt::NeighIo`] wrapped around the backend,
//! and loss or capture of an [`crate::adapt::FaultIo`] or
//! [`crate::adapt::TeeIo`]: the pump only sees a [`FrameIo`].
//!
//! The pump never reads a clock: `now` is the caller's.

use roce_stack::backend::FrameIo;
use roce_stack::time::Instant;
use roce_stack::verbs::Device;

/// What one pump step (or half) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpStats {
    /// Frames received from the backend and handed to the device.
    pub rx: usize,
    /// Frames the device produced and the backend accepted.
    pub tx: usize,
    /// Whether the device's timers were due and ran.
    pub timers: bool,
}

impl PumpStats {
    /// Whether nothing happened: no frame moved, no timer ran. A caller may
    /// then sleep until [`Device::poll_timeout`] or until its backend is
    /// readable ([`FrameIo::wait_fd`]).
    pub fn is_idle(&self) -> bool {
        self.rx == 0 && self.tx == 0 && !self.timers
    }
}

/// The receive half: up to `burst` frames into `dev`, then its timers if
/// one is due at `now`. `tx` of the result is 0.
///
/// # Errors
/// The backend's error from `rx_burst`.
pub fn receive<B: FrameIo + ?Sized>(
    dev: &mut Device,
    io: &mut B,
    now: Instant,
    burst: usize,
) -> Result<PumpStats, B::Error> {
    let rx = io.rx_burst(burst, &mut |frame| dev.handle_frame(now, frame))?;
    let timers = dev.poll_timeout().is_some_and(|t| t <= now);
    if timers {
        dev.handle_timeout(now);
    }
    Ok(PumpStats { rx, tx: 0, timers })
}

/// The transmit half: up to `burst` frames of `dev` into the backend.
/// Returns the frames the backend accepted.
///
/// # Errors
/// The backend's error from `tx_burst`.
pub fn transmit<B: FrameIo + ?Sized>(
    dev: &mut Device,
    io: &mut B,
    now: Instant,
    burst: usize,
) -> Result<usize, B::Error> {
    io.tx_burst(burst, &mut |buf| dev.poll_transmit(now, buf))
}

/// As [`transmit`], with [`Device::poll_transmit_gather`] and
/// [`FrameIo::tx_burst_gather`]: large payloads of shared MRs go to the
/// backend by reference (sent without a copy by backends that support it,
/// copied once by the others).
///
/// # Errors
/// The backend's error from `tx_burst_gather`.
pub fn transmit_gather<B: FrameIo + ?Sized>(
    dev: &mut Device,
    io: &mut B,
    now: Instant,
    burst: usize,
) -> Result<usize, B::Error> {
    io.tx_burst_gather(burst, &mut |buf| dev.poll_transmit_gather(now, buf))
}

/// One step of a poll loop: [`receive`] then [`transmit`].
///
/// # Errors
/// The backend's error from `rx_burst` or `tx_burst`.
pub fn pump<B: FrameIo + ?Sized>(
    dev: &mut Device,
    io: &mut B,
    now: Instant,
    burst: usize,
) -> Result<PumpStats, B::Error> {
    let mut st = receive(dev, io, now, burst)?;
    st.tx = transmit(dev, io, now, burst)?;
    Ok(st)
}

/// One step of a poll loop: [`receive`] then [`transmit_gather`].
///
/// # Errors
/// The backend's error from `rx_burst` or `tx_burst_gather`.
pub fn pump_gather<B: FrameIo + ?Sized>(
    dev: &mut Device,
    io: &mut B,
    now: Instant,
    burst: usize,
) -> Result<PumpStats, B::Error> {
    let mut st = receive(dev, io, now, burst)?;
    st.tx = transmit_gather(dev, io, now, burst)?;
    Ok(st)
}
