//! [`DpdkPort`]: a [`Port`] as a [`roce_stack::backend::FrameIo`] backend.

use roce_stack::backend::{FrameIo, TxFrame};

use crate::error::DpdkError;
use crate::mbuf::{free_bulk, Mbuf};
use crate::mempool::Mempool;
use crate::port::{Port, MAX_BURST};

/// Counters of what the backend did besides moving frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DpdkPortCounters {
    /// Received frames that came as mbuf chains and were copied into one
    /// buffer before parsing (scattered RX).
    pub rx_linearized: u64,
    /// Transmit calls that found the pool empty and sent nothing new.
    pub tx_no_mbuf: u64,
    /// Transmit calls that left frames queued because the driver's ring was
    /// full (they go first on the next call).
    pub tx_ring_full: u64,
    /// Frames sent by [`FrameIo::tx_burst_gather`] as a 3-segment chain
    /// whose payload segment is attached to the memory region
    /// ([`crate::extbuf::tx_chain_extbuf`]): no payload copy.
    pub tx_zero_copy_frames: u64,
    /// Gather frames that had to be copied into one mbuf instead (the chain
    /// could not be built: pool empty, IOVA-as-PA mode, payload over 65535
    /// bytes).
    pub tx_zero_copy_fallback: u64,
}

/// One queue pair of a started [`Port`] driving a [`roce_stack`] device.
///
/// - receive: the frame slice given to `on_frame` is the mbuf's own data
///   (no copy); the mbufs go back to the pool in one bulk free per burst;
/// - transmit: each frame is written by the device straight into a fresh
///   mbuf's data room, `data_len`/`pkt_len` are set and the burst goes to
///   the driver; frames the driver's ring refuses are kept (in order) and
///   sent first next time, and no new frame is taken from the device while
///   any are waiting (backpressure instead of loss); transmit mbufs come from
///   a spare stash refilled in bulk (a burst at a time), so a call with
///   nothing to send allocates nothing once the stash is stocked;
/// - zero-copy transmit ([`FrameIo::tx_burst_gather`]): a
///   [`TxFrame::Gather`] frame leaves as the chain `header mbuf | mbuf
///   attached to the MR's memory | pad + ICRC mbuf`
///   ([`crate::extbuf::tx_chain_extbuf`]); the chain holds an `Arc` of the
///   memory until the driver frees it. Header and tail mbufs come from the
///   transmit pool, the attached one from [`DpdkPort::set_ext_pool`]'s pool
///   (default: the transmit pool). The driver must accept multi-segment
///   mbufs (memif, and NICs with `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`);
/// - threads: the thread that polls the port gets an lcore id if it has
///   none ([`crate::Eal::register_thread`]), so the pools' per-lcore caches
///   serve its allocations and frees.
#[derive(Debug)]
pub struct DpdkPort {
    port: Port,
    tx_pool: Mempool,
    ext_pool: Option<Mempool>,
    queue: u16,
    max_frame: usize,
    rx: Vec<Mbuf>,
    tx_spare: Vec<Mbuf>,
    tx_pending: Vec<Mbuf>,
    linear: Vec<u8>,
    counters: DpdkPortCounters,
}

impl DpdkPort {
    /// The one-call setup for a process whose EAL arguments name its port
    /// (e.g. `roce perf --backend dpdk -- --vdev=net_memif0,...`):
    /// initialise the EAL with `eal_args` (or reuse the running one), take
    /// the first available port, give it a pool of 8191 standard mbufs
    /// (named `roce_pool<port>`), configure one queue pair with `mtu`, start
    /// it and wait up to `link_timeout` for the link.
    ///
    /// # Errors
    /// Everything [`crate::Eal::init`], [`crate::Mempool::new`],
    /// [`Port::configure`] and [`Port::wait_link_up`] report, notably
    /// [`DpdkError::NoPorts`] and [`DpdkError::LinkDownTimeout`].
    pub fn open(
        eal_args: &[String],
        mtu: u16,
        link_timeout: std::time::Duration,
    ) -> Result<DpdkPort, DpdkError> {
        let eal = match crate::Eal::get() {
            Some(e) => e,
            None => crate::Eal::init(eal_args)?,
        };
        let id = *eal.available_ports()?.first().ok_or(DpdkError::NoPorts)?;
        let pool = Mempool::new(
            &format!("roce_pool{id}"),
            8191,
            256,
            crate::DEFAULT_DATA_ROOM.max(
                u16::try_from(usize::from(mtu) + crate::FRAME_OVERHEAD + crate::HEADROOM)
                    .unwrap_or(u16::MAX),
            ),
        )?;
        let port = Port::configure(id, 1, 1, &pool, mtu)?;
        let io = DpdkPort::new(port)?;
        io.port().wait_link_up(link_timeout)?;
        Ok(io)
    }

    /// Drive queue 0 of `port`, transmitting from the port's own pool. The
    /// port is started if it is not.
    ///
    /// # Errors
    /// [`DpdkError::Call`] if the port does not start.
    pub fn new(port: Port) -> Result<DpdkPort, DpdkError> {
        let pool = port.pool().clone();
        DpdkPort::with_queue(port, 0, pool)
    }

    /// Drive `queue` of `port`, allocating transmit mbufs from `tx_pool`.
    ///
    /// # Errors
    /// [`DpdkError::InvalidArgument`] for a queue the port lacks or a pool
    /// whose mbufs cannot hold an MTU-sized frame; [`DpdkError::Call`] if the
    /// port does not start.
    pub fn with_queue(mut port: Port, queue: u16, tx_pool: Mempool) -> Result<DpdkPort, DpdkError> {
        if queue >= port.config().rx_queues || queue >= port.config().tx_queues {
            return Err(DpdkError::InvalidArgument {
                value: format!("queue {queue}"),
                reason: "the port has no such RX/TX queue pair",
            });
        }
        if tx_pool.frame_room() < port.max_frame_len() {
            return Err(DpdkError::PoolTooSmall {
                pool: tx_pool.name().to_string(),
                what: "data room per mbuf for an MTU-sized frame (bytes, without headroom)",
                needed: port.max_frame_len() as u64,
                have: tx_pool.frame_room() as u64,
            });
        }
        port.start()?;
        let max_frame = port.max_frame_len();
        Ok(DpdkPort {
            port,
            tx_pool,
            ext_pool: None,
            queue,
            max_frame,
            rx: Vec::with_capacity(MAX_BURST),
            tx_spare: Vec::with_capacity(MAX_BURST),
            tx_pending: Vec::with_capacity(MAX_BURST),
            linear: Vec::new(),
            counters: DpdkPortCounters::default(),
        })
    }

    /// The port.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// The port, mutably (stats reset, stop).
    pub fn port_mut(&mut self) -> &mut Port {
        &mut self.port
    }

    /// The backend's own counters.
    pub fn counters(&self) -> DpdkPortCounters {
        self.counters
    }

    /// Take the mbufs that are attached to memory regions for zero-copy
    /// transmit from `pool` (their own data room is unused: a pool with a
    /// data room of 0 bytes suffices) instead of the transmit pool.
    pub fn set_ext_pool(&mut self, pool: Mempool) {
        self.ext_pool = Some(pool);
    }

    /// Frames produced by the device but not yet accepted by the driver.
    pub fn tx_pending(&self) -> usize {
        self.tx_pending.len()
    }

    /// Give the port back (frames still pending are freed).
    pub fn into_port(self) -> Port {
        self.port
    }

    /// Put up to `n` fresh mbufs in the spare stash: in one bulk call, or
    /// one by one when the pool has fewer than `n` free.
    fn refill(&mut self, n: usize) {
        if self.tx_pool.alloc_bulk(&mut self.tx_spare, n) {
            return;
        }
        while self.tx_spare.len() < n {
            match self.tx_pool.alloc() {
                Some(m) => self.tx_spare.push(m),
                None => break,
            }
        }
    }

    /// Retry the frames the driver refused earlier; returns how many it took.
    pub fn flush(&mut self) -> usize {
        self.port.tx_burst_retain(self.queue, &mut self.tx_pending)
    }

    /// The start of a transmit call: frames refused earlier go first, and
    /// while any are still refused nothing new is taken. `Ok((accepted,
    /// want))`: how many of the old ones the driver took and how many frames
    /// this call may queue (at most `max` per call, the flushed ones
    /// included); `Err(accepted)`: the call ends here.
    fn start_burst(&mut self, max: usize) -> Result<(usize, usize), usize> {
        crate::eal::ensure_thread_lcore();
        let mut accepted = 0;
        if !self.tx_pending.is_empty() {
            accepted += self.flush();
            if !self.tx_pending.is_empty() {
                self.counters.tx_ring_full += 1;
                return Err(accepted);
            }
        }
        let want = max.min(MAX_BURST).saturating_sub(accepted);
        if want == 0 {
            return Err(accepted);
        }
        Ok((accepted, want))
    }

    /// A fresh mbuf from the spare stash, refilled in bulk (so an idle call,
    /// with nothing to send, costs no allocation at all); `None` (counted)
    /// if the pool is empty.
    fn next_spare(&mut self, want: usize) -> Option<Mbuf> {
        if self.tx_spare.is_empty() {
            self.refill(want - self.tx_pending.len());
        }
        let m = self.tx_spare.pop();
        if m.is_none() {
            self.counters.tx_no_mbuf += 1;
        }
        m
    }

    /// The end of a transmit call: hand the queued frames to the driver
    /// (those it refuses wait for the next call) and report a frame the
    /// fill callback made too long.
    fn finish_burst(
        &mut self,
        mut accepted: usize,
        too_long: Option<(usize, usize)>,
    ) -> Result<usize, DpdkError> {
        accepted += self.flush();
        if !self.tx_pending.is_empty() {
            self.counters.tx_ring_full += 1;
        }
        if let Some((len, room)) = too_long {
            return Err(DpdkError::TooLong {
                what: "frame returned by the transmit fill callback",
                len,
                room,
            });
        }
        Ok(accepted)
    }
}

impl FrameIo for DpdkPort {
    type Error = DpdkError;

    fn max_frame_len(&self) -> usize {
        self.max_frame
    }

    fn rx_burst(
        &mut self,
        max: usize,
        on_frame: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, DpdkError> {
        crate::eal::ensure_thread_lcore();
        free_bulk(&mut self.rx);
        let n = self.port.rx_burst(self.queue, &mut self.rx, max);
        for m in &self.rx {
            if let Some(data) = m.single_segment_data() {
                on_frame(data);
            } else {
                self.counters.rx_linearized += 1;
                self.linear.clear();
                m.copy_to(&mut self.linear);
                on_frame(&self.linear);
            }
        }
        free_bulk(&mut self.rx);
        Ok(n)
    }

    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, DpdkError> {
        let (accepted, want) = match self.start_burst(max) {
            Ok(w) => w,
            Err(accepted) => return Ok(accepted),
        };
        let mut too_long = None;
        while self.tx_pending.len() < want {
            let Some(mut m) = self.next_spare(want) else {
                break;
            };
            let mut room_len = 0;
            let filled = m.fill_room(self.max_frame, |room| {
                room_len = room.len();
                fill(room)
            });
            match filled {
                // Not a fresh single-segment mbuf (never happens with
                // alloc): free it and stop.
                None => break,
                Some(Ok(None)) => {
                    self.tx_spare.push(m);
                    break;
                }
                Some(Ok(Some(_))) => self.tx_pending.push(m),
                Some(Err(len)) => {
                    too_long = Some((len, room_len));
                    break;
                }
            }
        }
        self.finish_burst(accepted, too_long)
    }

    fn tx_burst_gather(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<TxFrame>,
    ) -> Result<usize, DpdkError> {
        let (accepted, want) = match self.start_burst(max) {
            Ok(w) => w,
            Err(accepted) => return Ok(accepted),
        };
        let mut too_long = None;
        while self.tx_pending.len() < want {
            let Some(mut m) = self.next_spare(want) else {
                break;
            };
            let Some(room) = m.room_mut() else {
                break;
            };
            let room_len = room.len().min(self.max_frame);
            let room = &mut room[..room_len];
            let Some(frame) = fill(room) else {
                self.tx_spare.push(m);
                break;
            };
            if let TxFrame::Gather {
                hdr_len,
                payload,
                offset,
                len,
                ..
            } = &frame
            {
                let ext_pool = self.ext_pool.as_ref().unwrap_or(&self.tx_pool);
                let chain = room.get(..*hdr_len).ok_or(DpdkError::TooLong {
                    what: "headers returned by the transmit fill callback",
                    len: *hdr_len,
                    room: room_len,
                });
                let chain = chain.and_then(|hdr| {
                    crate::extbuf::tx_chain_extbuf(
                        &self.tx_pool,
                        ext_pool,
                        hdr,
                        payload,
                        *offset,
                        *len,
                        frame.tail(),
                    )
                });
                if let Ok(chain) = chain {
                    // The headers went into the chain's own mbuf.
                    self.tx_spare.push(m);
                    self.tx_pending.push(chain);
                    self.counters.tx_zero_copy_frames += 1;
                    continue;
                }
                self.counters.tx_zero_copy_fallback += 1;
            }
            // Whole, or a chain that could not be built: one mbuf.
            let len = match frame.linearize(room) {
                Some(n) => n,
                None => {
                    too_long = Some((frame.len(), room_len));
                    break;
                }
            };
            if !m.set_len(len) {
                too_long = Some((len, room_len));
                break;
            }
            self.tx_pending.push(m);
        }
        self.finish_burst(accepted, too_long)
    }
}
