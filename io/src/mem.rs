//! `mem`: two [`FrameIo`] endpoints joined by in-memory queues, one per
//! direction, for two devices in one process (on one thread or two).
//!
//! Each direction owns a fixed pool of frame buffers, allocated once by
//! [`pair`] (so a timed run never pays for a first allocation or page
//! fault). A buffer circulates through two single-producer,
//! single-consumer rings (`rtrb`: a fixed array, the producer's and the
//! consumer's index on separate cache lines, each side reading the other's
//! index only when its cached copy says the ring is full or empty): the
//! sender fills buffers ([`FrameIo::tx_burst`]) and queues them to the
//! peer, the peer hands them to its device ([`FrameIo::rx_burst`]) and
//! returns them empty. Each side publishes once per burst, not once per
//! frame: one index store per burst and ring, so a burst of frames costs
//! one cache-line hand-off each way instead of one per frame. Nothing is
//! allocated per frame. A sender with no free buffer left ends its burst
//! early, as a NIC with a full ring does, and tries again on its next one.
//!
//! The one option is the placement of the buffers in memory (see
//! `roce::perf`, "Memory alignment"). Loss and capture are adapters that
//! work on every backend ([`crate::adapt::FaultIo`],
//! [`crate::adapt::TeeIo`]).

use std::convert::Infallible;

use rtrb::{Consumer, Producer, RingBuffer};

use roce_stack::backend::FrameIo;

/// Default number of buffers per direction: enough to keep a 4096-byte-MTU
/// stream going while the peer is busy.
pub const DEFAULT_POOL: usize = 512;

/// Buffers start this far past a 256-byte boundary unless placed otherwise.
const FRAME_PHASE: usize = 128;

/// How [`pair`] builds the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemConfig {
    /// Bytes per frame buffer (the largest frame, without FCS).
    pub frame_cap: usize,
    /// Buffers per direction.
    pub pool: usize,
    /// `Some(p)`: every buffer starts exactly `p` (mod 4096) bytes past a
    /// 4096-byte boundary; `None`: 128 bytes past a 256-byte boundary.
    pub page_offset: Option<usize>,
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig {
            frame_cap: 16 * 1024,
            pool: DEFAULT_POOL,
            page_offset: None,
        }
    }
}

/// One reusable frame buffer.
#[derive(Debug)]
struct FrameBuf {
    data: Box<[u8]>,
    off: usize,
    cap: usize,
    len: usize,
}

impl FrameBuf {
    fn new(cap: usize, page_offset: Option<usize>) -> FrameBuf {
        let (data, off) = match page_offset {
            None => {
                let data = vec![0u8; cap + 256].into_boxed_slice();
                let addr = data.as_ptr() as usize;
                (data, (FRAME_PHASE + 256 - addr % 256) % 256)
            }
            Some(p) => {
                let data = vec![0u8; cap + 4096].into_boxed_slice();
                let addr = data.as_ptr() as usize;
                (data, (p % 4096 + 4096 - addr % 4096) % 4096)
            }
        };
        FrameBuf {
            data,
            off,
            cap,
            len: 0,
        }
    }
    fn space(&mut self) -> &mut [u8] {
        &mut self.data[self.off..self.off + self.cap]
    }
    fn frame(&self) -> &[u8] {
        &self.data[self.off..self.off + self.len]
    }
}

/// One endpoint of the in-memory wire.
pub struct MemIo {
    /// Frames from the peer.
    rx: Consumer<FrameBuf>,
    /// The peer's buffers, returned once handled.
    rx_return: Producer<FrameBuf>,
    /// Frames to the peer.
    tx: Producer<FrameBuf>,
    /// Our buffers coming back from the peer.
    tx_free: Consumer<FrameBuf>,
    /// Our free buffers at hand (a stack: the most recently returned buffer
    /// is reused first, so few buffers stay warm in the cache).
    spare: Vec<FrameBuf>,
    /// Buffers filled in this burst, queued to the peer at its end; and
    /// the peer's buffers handled in this burst, returned at its end
    /// (both hold at most the pool).
    staged: Vec<FrameBuf>,
    cap: usize,
}

impl std::fmt::Debug for MemIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemIo")
            .field("cap", &self.cap)
            .field("spare", &self.spare.len())
            .finish_non_exhaustive()
    }
}

/// Two connected endpoints.
pub fn pair(cfg: &MemConfig) -> (MemIo, MemIo) {
    let pool = cfg.pool.max(1);
    // Every ring holds the whole pool of its direction, so a push never
    // finds it full.
    let (tx_ab, rx_ab) = RingBuffer::new(pool);
    let (ret_ab, free_ab) = RingBuffer::new(pool);
    let (tx_ba, rx_ba) = RingBuffer::new(pool);
    let (ret_ba, free_ba) = RingBuffer::new(pool);
    let end = |rx, rx_return, tx, tx_free| MemIo {
        rx,
        rx_return,
        tx,
        tx_free,
        spare: (0..pool)
            .map(|_| FrameBuf::new(cfg.frame_cap, cfg.page_offset))
            .collect(),
        staged: Vec::with_capacity(pool),
        cap: cfg.frame_cap,
    };
    let a = end(rx_ba, ret_ba, tx_ab, free_ab);
    let b = end(rx_ab, ret_ab, tx_ba, free_ba);
    (a, b)
}

/// Move everything in `items` into `ring`, published once (the ring holds
/// the whole pool, so there is room; if the peer is gone the frames are
/// lost, as on a dead link).
fn publish(ring: &mut Producer<FrameBuf>, items: &mut Vec<FrameBuf>) {
    let n = items.len().min(ring.slots());
    if n > 0 {
        if let Ok(chunk) = ring.write_chunk_uninit(n) {
            chunk.fill_from_iter(items.drain(..n));
        }
    }
    items.clear();
}

impl MemIo {
    /// A free buffer: one at hand, else every buffer the peer returned.
    #[inline]
    fn take(&mut self) -> Option<FrameBuf> {
        if self.spare.is_empty() {
            let n = self.tx_free.slots();
            if let Ok(chunk) = self.tx_free.read_chunk(n) {
                self.spare.extend(chunk);
            }
        }
        self.spare.pop()
    }
}

impl FrameIo for MemIo {
    type Error = Infallible;

    fn max_frame_len(&self) -> usize {
        self.cap
    }

    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, Infallible> {
        let n = self.rx.slots().min(max);
        if n == 0 {
            return Ok(0);
        }
        if let Ok(chunk) = self.rx.read_chunk(n) {
            for b in chunk {
                on_frame(b.frame());
                self.staged.push(b);
            }
        }
        publish(&mut self.rx_return, &mut self.staged);
        Ok(n)
    }

    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, Infallible> {
        let mut n = 0;
        while n < max {
            let Some(mut b) = self.take() else { break };
            match fill(b.space()) {
                Some(len) => {
                    b.len = len.min(b.cap);
                    self.staged.push(b);
                    n += 1;
                }
                None => {
                    self.spare.push(b);
                    break;
                }
            }
        }
        publish(&mut self.tx, &mut self.staged);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pump::pump;
    use roce_stack::testing::{connect, ConnOpts, Pair};
    use roce_stack::time::Instant;
    use roce_stack::verbs::{AccessFlags, SendWr, Sge, Wc, WcStatus, WrOpcode};

    #[test]
    fn frames_arrive_in_order_and_buffers_circulate() {
        let cfg = MemConfig {
            frame_cap: 64,
            pool: 4,
            ..MemConfig::default()
        };
        let (mut a, mut b) = pair(&cfg);
        // More frames than buffers: the pool is reused.
        let mut got = Vec::new();
        for round in 0..10u8 {
            let mut k = 0u8;
            let sent = a
                .tx_burst(3, &mut |buf| {
                    if k == 3 {
                        return None;
                    }
                    buf[0] = round * 3 + k;
                    k += 1;
                    Some(1)
                })
                .unwrap();
            assert_eq!(sent, 3);
            b.rx_burst(8, &mut |f| got.push(f[0])).unwrap();
        }
        assert_eq!(got, (0..30).collect::<Vec<u8>>());
        // A full pool ends the burst early.
        let sent = a.tx_burst(100, &mut |_| Some(1)).unwrap();
        assert_eq!(sent, 4);
        assert_eq!(a.tx_burst(1, &mut |_| Some(1)).unwrap(), 0);
    }

    #[test]
    fn an_rc_write_over_pump() {
        // Two devices set up as roce_stack::testing::connect does, moved to
        // a mem pair and driven by `pump`.
        let mut p = Pair::new(1500, Default::default(), 1);
        let c = connect(&mut p, &ConnOpts::default());
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let src = p.dev[0]
            .reg_mr(c.pd[0], data.clone(), 0x1000, AccessFlags::LOCAL_WRITE)
            .unwrap();
        let dst = p.dev[1]
            .reg_mr(
                c.pd[1],
                vec![0; 5000],
                0x9000,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let [mut d0, mut d1] = p.dev;
        let sge = [Sge {
            addr: 0x1000,
            length: 5000,
            lkey: src.lkey,
        }];
        let mut wr = SendWr::new(7, WrOpcode::RdmaWrite, &sge);
        wr.remote_addr = 0x9000;
        wr.rkey = dst.rkey;
        d0.post_send(c.qpn[0], &wr).unwrap();
        let (mut a, mut b) = pair(&MemConfig::default());
        let mut wc = [Wc::EMPTY; 4];
        let mut done = 0;
        for _ in 0..100 {
            pump(&mut d0, &mut a, Instant::ZERO, 32).unwrap();
            pump(&mut d1, &mut b, Instant::ZERO, 32).unwrap();
            done += d0.poll_cq(c.cq[0], &mut wc);
            if done > 0 {
                break;
            }
        }
        assert_eq!(done, 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::Success));
        assert_eq!(d1.mr(dst.lkey).unwrap().as_slice(), &data[..]);
    }
}
