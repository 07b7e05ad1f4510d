//! The one interface every frame mover implements (DPDK, TAP, UDP socket,
//! pcap, the in-memory wire).
//!
//! The interface is shaped for zero-copy drivers:
//! - receive hands the caller each frame as a slice that borrows the driver's
//!   own buffer (a DPDK mbuf's data, a pcap record, a socket buffer); the
//!   device parses it in place and copies the payload once, straight into the
//!   destination memory region;
//! - transmit lends the caller a driver buffer (for DPDK the mbuf's data
//!   room) and the device writes the whole frame, headers included, into it;
//! - zero-copy transmit ([`FrameIo::tx_burst_gather`]): a
//!   large payload from a shared MR comes as a [`TxFrame::Gather`], headers
//!   in the lent buffer and the payload by reference, which a driver that
//!   can chain buffers (DPDK external buffers) sends without copying; the
//!   provided implementation copies it into the lent buffer
//!   ([`TxFrame::linearize`]), so every backend accepts it.
//!
//! Nothing here performs I/O: the implementations live with their OS or
//! driver glue (`dpdk-glue`, the `roce-io` crate), and so does the loop
//! step that joins one to a [`Device`] (`roce_io::pump`).
//!
//! [`Device`]: crate::verbs::Device

use std::os::fd::BorrowedFd;
use std::sync::Arc;

/// One frame produced by [`Device::poll_transmit_gather`].
///
/// [`Device::poll_transmit_gather`]: crate::verbs::Device::poll_transmit_gather
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxFrame {
    /// The whole frame, this many bytes, is at the start of the buffer.
    Whole(usize),
    /// The frame is `buffer[..hdr_len] | payload[offset..offset + len] |
    /// tail[..tail_len]`: headers in the buffer, the payload by reference to
    /// a shared MR's memory (the `Arc` pins it while the frame is in
    /// flight), then the pad bytes and the ICRC (IBTA 1.7 §7.8.1).
    Gather {
        /// Header bytes at the start of the buffer (Ethernet through the
        /// last extension header).
        hdr_len: usize,
        /// The memory of the shared MR that holds the payload.
        payload: Arc<[u8]>,
        /// Offset of the payload in `payload`, bytes.
        offset: usize,
        /// Payload length, bytes (without pad).
        len: usize,
        /// Pad bytes (0-3 zeros) then the 4 ICRC bytes in wire order.
        tail: [u8; 8],
        /// Bytes of `tail` in use (pad + 4).
        tail_len: usize,
    },
}

impl TxFrame {
    /// The frame length on the wire, bytes (without FCS).
    pub fn len(&self) -> usize {
        match self {
            TxFrame::Whole(n) => *n,
            TxFrame::Gather {
                hdr_len,
                len,
                tail_len,
                ..
            } => hdr_len + len + tail_len,
        }
    }

    /// Whether the frame is empty (never, for a produced frame).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload slice of a [`TxFrame::Gather`]; `None` for `Whole` (or a
    /// range outside the memory, which the device never produces).
    pub fn payload(&self) -> Option<&[u8]> {
        match self {
            TxFrame::Whole(_) => None,
            TxFrame::Gather {
                payload,
                offset,
                len,
                ..
            } => payload.get(*offset..offset.checked_add(*len)?),
        }
    }

    /// The tail (pad + ICRC) of a [`TxFrame::Gather`]; empty for `Whole`.
    pub fn tail(&self) -> &[u8] {
        match self {
            TxFrame::Whole(_) => &[],
            TxFrame::Gather { tail, tail_len, .. } => tail.get(..*tail_len).unwrap_or(&[]),
        }
    }

    /// Make the frame whole in `buf` (whose first bytes hold what the device
    /// wrote): a `Gather` frame's payload and tail are copied after its
    /// headers. Returns the frame length, or `None` when `buf` is too short
    /// (never for the buffer the device wrote the headers into: it checks
    /// that the whole frame fits).
    pub fn linearize(&self, buf: &mut [u8]) -> Option<usize> {
        let TxFrame::Gather { hdr_len, .. } = self else {
            return Some(self.len());
        };
        let payload = self.payload()?;
        let tail = self.tail();
        let p_end = hdr_len + payload.len();
        crate::transport::copy_payload(buf.get_mut(*hdr_len..p_end)?, payload);
        buf.get_mut(p_end..p_end + tail.len())?
            .copy_from_slice(tail);
        Some(self.len())
    }
}

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

    /// As [`FrameIo::tx_burst`], for a producer that may describe a frame
    /// by reference ([`TxFrame::Gather`], from
    /// [`Device::poll_transmit_gather`]). The provided implementation copies
    /// such frames whole into the lent buffer ([`TxFrame::linearize`]); a
    /// driver that can send a chain of buffers overrides it to send the
    /// payload in place, keeping the frame's `Arc` until the driver is done
    /// with the memory.
    ///
    /// [`Device::poll_transmit_gather`]: crate::verbs::Device::poll_transmit_gather
    fn tx_burst_gather(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, Self::Error> {
        self.tx_burst(max, &mut |buf| fill(buf).and_then(|f| f.linearize(buf)))
    }

    /// A descriptor that becomes readable (poll(2) `POLLIN`) when
    /// [`FrameIo::rx_burst`] has frames to deliver, for a caller that sleeps
    /// while nothing happens; `None` (the default) for a driver that must be
    /// polled (DPDK) or has nothing to wait on. The descriptor stays the
    /// backend's: the caller only polls it, never reads or closes it.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}
