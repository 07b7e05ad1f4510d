//! The one interface every frame mover implements (DPDK, TAP, UDP socket,
//! pcap, the in-memory wire), and [`pump`], the loop step that joins a
//! backend to a [`Device`].
//!
//! The interface is shaped for zero-copy drivers:
//! - receive hands the caller each frame as a slice that borrows the driver's
//!   own buffer (a DPDK mbuf's data, a pcap record, a socket buffer); the
//!   device parses it in place and copies the payload once, straight into the
//!   destination memory region;
//! - transmit lends the caller a driver buffer (for DPDK the mbuf's data
//!   room) and the device writes the whole frame, headers included, into it.
//!
//! Nothing here performs I/O: the implementations live with their OS or
//! driver glue (`dpdk-glue`, the `roce` CLI's backends).

use crate::time::Instant;
use crate::verbs::Device;

/// A driver that receives and transmits Ethernet frames in bursts.
///
/// Frames are whole Ethernet II frames without the FCS. A backend whose
/// medium is not Ethernet (the kernel UDP socket) synthesises on receive, and
/// strips on transmit, the Ethernet/IP/UDP headers the stack needs.
pub trait FrameIo {
    /// What the driver reports when it fails (not when it has no frames).
    type Error: std::error::Error + Send + Sync + 'static;

    /// The largest frame, in bytes (without FCS), that `tx_burst` buffers
    /// hold and `rx_burst` may deliver.
    fn max_frame_len(&self) -> usize;

    /// Receive up to `max` frames, calling `on_frame` once per frame, in
    /// arrival order, with a slice borrowed from the driver's buffer; the
    /// buffer is returned to the driver when `on_frame` returns. Returns the
    /// number of frames delivered (0 when none are waiting; never blocks).
    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, Self::Error>;

    /// Transmit up to `max` frames. For each frame the backend lends a
    /// writable buffer of at least [`FrameIo::max_frame_len`] bytes; `fill`
    /// writes one frame at its start and returns its length, or `None` when
    /// it has nothing more to send (the unused buffer goes back to the
    /// driver and the burst ends). Returns the number of frames the driver
    /// accepted.
    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, Self::Error>;
}

/// What one [`pump`] step moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PumpStats {
    /// Frames received from the backend and handed to the device.
    pub rx: usize,
    /// Frames the device produced and the backend accepted.
    pub tx: usize,
}

/// One step of a poll loop: receive a burst into `dev`, run its timers due at
/// `now`, then transmit a burst of what it has to send. Returns the frame
/// counts; a caller with nothing moved may sleep until
/// [`Device::poll_timeout`] or until its backend is readable.
///
/// # Errors
/// The backend's error from `rx_burst` or `tx_burst`.
pub fn pump<B: FrameIo + ?Sized>(
    dev: &mut Device,
    io: &mut B,
    now: Instant,
    burst: usize,
) -> Result<PumpStats, B::Error> {
    let rx = io.rx_burst(burst, &mut |frame| dev.handle_frame(now, frame))?;
    if dev.poll_timeout().is_some_and(|t| t <= now) {
        dev.handle_timeout(now);
    }
    let tx = io.tx_burst(burst, &mut |buf| dev.poll_transmit(now, buf))?;
    Ok(PumpStats { rx, tx })
}
