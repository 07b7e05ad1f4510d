//! Adapters that wrap any [`FrameIo`](roce_stack::backend::FrameIo) and are
//! one themselves, after smoltcp's `phy` wrappers (`FaultInjector`,
//! `PcapWriter`): what they add works the same over every backend.
//!
//! - [`FaultIo`]: seeded, deterministic loss, duplication, reordering and
//!   corruption of the transmitted frames (`roce perf --loss`).
//! - [`TeeIo`]: every frame received and/or transmitted handed to a
//!   [`FrameTap`], such as [`crate::pcap::PcapTap`] (`roce perf --pcap`).
//! - [`NeighIo`]: ARP, neighbour discovery and ping answered in front of an
//!   Ethernet backend ([`roce_stack::neigh::Neighbors`]).
//!
//! They stack: `FaultIo<TeeIo<B>>` records what survived the faults, as a
//! capture on the wire would. Each forwards
//! [`FrameIo::wait_fd`](roce_stack::backend::FrameIo::wait_fd) (and
//! `AsFd`) to the backend it wraps.

mod fault;
mod neigh;
mod tee;

pub use fault::{FaultConfig, FaultIo, FaultStats};
pub use neigh::NeighIo;
pub use tee::{FrameTap, Tee, TeeIo};

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::net::Ipv4Addr;

    use roce_stack::backend::FrameIo;

    /// A scripted backend: frames to deliver, frames sent (each burst ends
    /// after `tx_room` frames when set, as a full ring does).
    #[derive(Debug, Default)]
    pub(crate) struct QueueIo {
        pub(crate) rx: VecDeque<Vec<u8>>,
        pub(crate) sent: Vec<Vec<u8>>,
        pub(crate) tx_room: Option<usize>,
    }

    impl QueueIo {
        pub(crate) fn new(rx: impl IntoIterator<Item = Vec<u8>>) -> QueueIo {
            QueueIo {
                rx: rx.into_iter().collect(),
                ..QueueIo::default()
            }
        }
    }

    impl FrameIo for QueueIo {
        type Error = Infallible;
        fn max_frame_len(&self) -> usize {
            2048
        }
        fn rx_burst(
            &mut self,
            max: usize,
            on_frame: &mut dyn FnMut(&[u8]),
        ) -> Result<usize, Infallible> {
            let mut n = 0;
            while n < max {
                let Some(f) = self.rx.pop_front() else { break };
                on_frame(&f);
                n += 1;
            }
            Ok(n)
        }
        fn tx_burst(
            &mut self,
            max: usize,
            fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
        ) -> Result<usize, Infallible> {
            let mut n = 0;
            let mut buf = vec![0u8; 2048];
            while n < max.min(self.tx_room.unwrap_or(usize::MAX)) {
                let Some(len) = fill(&mut buf) else { break };
                self.sent.push(buf[..len].to_vec());
                n += 1;
            }
            Ok(n)
        }
    }

    /// An ARP request (RFC 826) from `sha`/`spa` for `tpa`, broadcast,
    /// padded to 60 bytes.
    pub(crate) fn arp_request(sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&[0xff; 6]);
        f.extend_from_slice(&sha);
        // EtherType ARP; hardware Ethernet, protocol IPv4, lengths 6 and 4,
        // operation 1 (request).
        f.extend_from_slice(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 6, 4, 0, 1]);
        f.extend_from_slice(&sha);
        f.extend_from_slice(&spa.octets());
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&tpa.octets());
        f.resize(60, 0);
        f
    }

    /// `n` distinct frames of 60 bytes (byte 14 numbers them).
    pub(crate) fn numbered(n: u8) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let mut f = vec![0u8; 60];
                f[14] = i;
                f
            })
            .collect()
    }

    /// Transmit `frames` through `io` in bursts of `burst`, then a few empty
    /// bursts (which flush what an adapter holds back); returns the frames
    /// taken per burst.
    pub(crate) fn send_all<B: FrameIo>(io: &mut B, frames: &[Vec<u8>], burst: usize) -> Vec<usize>
    where
        B::Error: std::fmt::Debug,
    {
        let mut next = 0;
        let mut taken = Vec::new();
        while next < frames.len() {
            let n = io
                .tx_burst(burst, &mut |buf| {
                    let f = frames.get(next)?;
                    buf[..f.len()].copy_from_slice(f);
                    next += 1;
                    Some(f.len())
                })
                .unwrap();
            taken.push(n);
            assert!(taken.len() < 1000, "the frames are not taken");
        }
        for _ in 0..4 {
            io.tx_burst(burst, &mut |_| None).unwrap();
        }
        taken
    }
}
