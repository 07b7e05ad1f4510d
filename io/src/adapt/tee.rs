//! [`TeeIo`]: every frame a backend moves, also handed to a recorder, after
//! smoltcp's `phy::PcapWriter`.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use roce_stack::backend::FrameIo;

/// Something that records frames (e.g. [`crate::pcap::PcapTap`], a pcap
/// file). Shared between endpoints and threads: two endpoints of one
/// process can write one capture.
pub trait FrameTap: Send + Sync {
    /// Record one frame (the bytes without FCS).
    fn record(&self, frame: &[u8]);
}

/// Which frames a [`TeeIo`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tee {
    /// Received frames.
    Rx,
    /// Transmitted frames.
    Tx,
    /// Both.
    Both,
}

impl Tee {
    fn rx(self) -> bool {
        matches!(self, Tee::Rx | Tee::Both)
    }
    fn tx(self) -> bool {
        matches!(self, Tee::Tx | Tee::Both)
    }
}

/// Any backend whose received and/or transmitted frames also go to a
/// [`FrameTap`]: a received frame as the backend delivers it, before the
/// caller sees it; a transmitted one as the caller wrote it, when it hands
/// it to the backend (a backend that rewrites headers on the way out, such
/// as `udp`, records the device's frame). Two endpoints of one process
/// that share a tap record [`Tee::Tx`] each, so that every frame is
/// recorded once, in the order it was sent.
///
/// Zero-copy frames ([`FrameIo::tx_burst_gather`]) are copied (the provided
/// implementation): the tap needs the bytes.
pub struct TeeIo<B> {
    inner: B,
    tap: Arc<dyn FrameTap>,
    which: Tee,
}

impl<B> std::fmt::Debug for TeeIo<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeeIo")
            .field("which", &self.which)
            .finish_non_exhaustive()
    }
}

impl<B: FrameIo> TeeIo<B> {
    /// Record `which` frames of `inner` to `tap`.
    pub fn new(inner: B, tap: Arc<dyn FrameTap>, which: Tee) -> TeeIo<B> {
        TeeIo { inner, tap, which }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The wrapped backend.
    pub fn inner_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The wrapped backend, unwrapped.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: FrameIo> FrameIo for TeeIo<B> {
    type Error = B::Error;

    fn max_frame_len(&self) -> usize {
        self.inner.max_frame_len()
    }

    fn rx_burst(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> Result<usize, B::Error> {
        if !self.which.rx() {
            return self.inner.rx_burst(max, on_frame);
        }
        let tap = &self.tap;
        self.inner.rx_burst(max, &mut |frame| {
            tap.record(frame);
            on_frame(frame);
        })
    }

    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, B::Error> {
        if !self.which.tx() {
            return self.inner.tx_burst(max, fill);
        }
        let tap = &self.tap;
        self.inner.tx_burst(max, &mut |buf| {
            let n = fill(buf)?.min(buf.len());
            tap.record(&buf[..n]);
            Some(n)
        })
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.wait_fd()
    }
}

impl<B: AsFd> AsFd for TeeIo<B> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::adapt::tests::{numbered, send_all, QueueIo};
    use crate::adapt::{FaultConfig, FaultIo};

    #[derive(Default)]
    struct Log(Mutex<Vec<Vec<u8>>>);
    impl FrameTap for Log {
        fn record(&self, frame: &[u8]) {
            self.0.lock().unwrap().push(frame.to_vec());
        }
    }

    #[test]
    fn records_the_directions_asked_for() {
        for which in [Tee::Rx, Tee::Tx, Tee::Both] {
            let log = Arc::new(Log::default());
            let frames = numbered(4);
            let inner = QueueIo::new(frames[..2].to_vec());
            let mut io = TeeIo::new(inner, log.clone(), which);
            let mut got = 0;
            io.rx_burst(8, &mut |_| got += 1).unwrap();
            assert_eq!(got, 2);
            send_all(&mut io, &frames[2..], 8);
            let want: Vec<Vec<u8>> = match which {
                Tee::Rx => frames[..2].to_vec(),
                Tee::Tx => frames[2..].to_vec(),
                Tee::Both => frames.clone(),
            };
            assert_eq!(*log.0.lock().unwrap(), want, "{which:?}");
        }
    }

    /// Inside a fault injector the tee sees what survived the faults: what
    /// the backend was given.
    #[test]
    fn under_faults_records_what_reaches_the_backend() {
        let log = Arc::new(Log::default());
        let tee = TeeIo::new(QueueIo::default(), log.clone(), Tee::Tx);
        let mut io = FaultIo::new(tee, FaultConfig::loss(0.5, 3));
        send_all(&mut io, &numbered(40), 8);
        assert!(io.stats().dropped > 0);
        assert_eq!(*log.0.lock().unwrap(), io.inner().inner().sent);
    }
}
