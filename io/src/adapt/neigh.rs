//! [`NeighIo`]: the neighbour handling of an Ethernet port in front of any
//! backend.

use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};

use roce_stack::backend::{FrameIo, TxFrame};
use roce_stack::neigh::{NeighConfig, Neighbors};
use roce_stack::time::Instant;

/// Nanoseconds since `epoch` as a stack [`Instant`].
fn since(epoch: std::time::Instant) -> Instant {
    Instant::from_nanos(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

/// An Ethernet backend with a [`Neighbors`] in front: ARP, neighbour
/// discovery and ICMP echo frames are answered here and never reach the
/// caller; the replies and requests go out ahead of the caller's frames in
/// [`FrameIo::tx_burst`]. The neighbours run on the monotonic clock
/// (nanoseconds since [`NeighIo::new`]).
///
/// What a RoCE device on a LAN needs besides RoCE (RFC 826, RFC 4861, RFC
/// 792 echo; [`roce_stack::neigh`]): the kernel and other hosts can reach
/// its address, and [`Neighbors::request`] resolves a peer's MAC for an
/// address vector. Zero-copy transmit passes through
/// ([`FrameIo::tx_burst_gather`] of the wrapped backend).
#[derive(Debug)]
pub struct NeighIo<B> {
    inner: B,
    neigh: Neighbors,
    epoch: std::time::Instant,
}

impl<B: FrameIo> NeighIo<B> {
    /// `neigh` in front of `inner`.
    pub fn new(inner: B, neigh: Neighbors) -> NeighIo<B> {
        NeighIo {
            inner,
            neigh,
            epoch: std::time::Instant::now(),
        }
    }

    /// Neighbours for one address of the device, `ip` at `mac`, in front of
    /// `inner` (frames up to its [`FrameIo::max_frame_len`]), announced: a
    /// gratuitous ARP (IPv4) or an unsolicited neighbour advertisement
    /// (IPv6) goes out with the first transmit burst
    /// ([`Neighbors::announce`]).
    pub fn for_address(inner: B, ip: IpAddr, mac: [u8; 6]) -> NeighIo<B> {
        let mut cfg = NeighConfig {
            mac,
            max_frame_len: inner.max_frame_len(),
            ..NeighConfig::default()
        };
        match ip {
            IpAddr::V4(a) => cfg.ipv4.push(a),
            IpAddr::V6(a) => cfg.ipv6.push(a),
        }
        let mut neigh = Neighbors::new(cfg);
        neigh.announce();
        NeighIo::new(inner, neigh)
    }

    /// The neighbours (cache, counters).
    pub fn neigh(&self) -> &Neighbors {
        &self.neigh
    }

    /// The neighbours, e.g. to request a resolution.
    pub fn neigh_mut(&mut self) -> &mut Neighbors {
        &mut self.neigh
    }

    /// The current time on the neighbours' clock.
    pub fn now(&self) -> Instant {
        since(self.epoch)
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    /// The wrapped backend, e.g. to send a frame past the neighbours.
    pub fn inner_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// The wrapped backend, unwrapped.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: FrameIo> FrameIo for NeighIo<B> {
    type Error = B::Error;

    fn max_frame_len(&self) -> usize {
        self.inner.max_frame_len()
    }

    /// Returns the frames handed to `on_frame` (neighbour frames excluded).
    fn rx_burst(&mut self, max: usize, on_frame: &mut dyn FnMut(&[u8])) -> Result<usize, B::Error> {
        let now = self.now();
        let neigh = &mut self.neigh;
        let mut passed = 0;
        self.inner.rx_burst(max, &mut |frame| {
            if !neigh.handle_frame(now, frame) {
                passed += 1;
                on_frame(frame);
            }
        })?;
        Ok(passed)
    }

    /// Returns the frames the backend accepted, the neighbours' included.
    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, B::Error> {
        let now = self.now();
        let neigh = &mut self.neigh;
        self.inner.tx_burst(max, &mut |buf| {
            neigh.poll_transmit(now, buf).or_else(|| fill(buf))
        })
    }

    fn tx_burst_gather(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, B::Error> {
        let now = self.now();
        let neigh = &mut self.neigh;
        self.inner.tx_burst_gather(max, &mut |buf| {
            neigh
                .poll_transmit(now, buf)
                .map(TxFrame::Whole)
                .or_else(|| fill(buf))
        })
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.wait_fd()
    }
}

impl<B: AsFd> AsFd for NeighIo<B> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use roce_stack::testing::test_device;

    use super::*;
    use crate::adapt::tests::{arp_request, QueueIo};
    use crate::pump::{pump, PumpStats};

    /// Through the pump: the ARP request goes to the neighbours, whose
    /// reply leaves first; the other frame reaches the device.
    #[test]
    fn neighbour_frames_are_answered_the_rest_reach_the_device() {
        let mut dev = test_device(0, 1500);
        let n = Neighbors::new(NeighConfig::for_device(dev.config()));
        assert_eq!(n.config().ipv4, vec![Ipv4Addr::new(10, 0, 0, 1)]);
        let mac = dev.config().mac;
        let peer = [0x02, 0, 0, 0, 0, 0xaa];
        let mut udp4 = vec![0u8; 60];
        udp4[12..14].copy_from_slice(&[0x08, 0x00]);
        udp4[14] = 0x45;
        udp4[23] = 17;
        let arp = arp_request(peer, Ipv4Addr::new(10, 0, 0, 9), Ipv4Addr::new(10, 0, 0, 1));
        let mut io = NeighIo::new(QueueIo::new([arp, udp4]), n);
        let st = pump(&mut dev, &mut io, Instant::ZERO, 32).expect("pump");
        assert_eq!(
            st,
            PumpStats {
                rx: 1,
                tx: 1,
                timers: false
            }
        );
        assert_eq!(dev.counters().rx_frames, 1, "only the IPv4 frame");
        let sent = &io.inner().sent;
        assert_eq!(&sent[0][0..6], &peer);
        assert_eq!(&sent[0][6..12], &mac);
        assert_eq!(io.neigh().counters().arp_replies_tx, 1);
    }
}
