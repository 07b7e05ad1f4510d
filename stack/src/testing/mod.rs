//! Deterministic test harness: two devices joined by an in-memory wire with a
//! virtual clock and a seeded fault injector (loss, reordering, duplication,
//! corruption, delay). Used by the unit and integration tests, the fuzz targets
//! and `roce perf`'s single-process mode.
//!
//! To play a (mis)behaving peer, a test drops one device's own frames with
//! [`Pair::drop_filter`], builds frames with [`Pair::frame`] and puts them on
//! the wire with [`Pair::inject`]; [`Pair::capture`] records every frame with
//! its virtual time.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::time::Instant;
use crate::transport::av::{AddressVector, Gid};
use crate::verbs::{
    AccessFlags, Device, DeviceConfig, MrKeys, Mtu, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendWr, Sge, VerbsError, Wc, WrOpcode,
};
use crate::wire::{
    BthRepr, EthRepr, ExtHeaders, Ipv4Repr, Ipv6Repr, NetRepr, PacketRepr, UdpChecksum, UdpRepr,
    ROCEV2_UDP_PORT,
};

/// A small deterministic PRNG (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in `[0, n)` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
}

/// What the wire does to frames. Probabilities are per frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    /// Drop.
    pub loss: f64,
    /// Deliver twice.
    pub duplicate: f64,
    /// Delay by an extra random amount up to `reorder_window` (reordering).
    pub reorder: f64,
    /// Extra delay bound for reordered frames.
    pub reorder_window: Duration,
    /// Flip one bit after the Ethernet header (the receiver must drop it on
    /// its ICRC or header checks).
    pub corrupt: f64,
    /// One-way delay of every frame.
    pub delay: Duration,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_window: Duration::from_micros(20),
            corrupt: 0.0,
            delay: Duration::from_micros(1),
        }
    }
}

impl Faults {
    /// Loss `p` with as much duplication and reordering (`p`/2 each).
    pub fn lossy(p: f64) -> Faults {
        Faults {
            loss: p,
            duplicate: p / 2.0,
            reorder: p / 2.0,
            ..Faults::default()
        }
    }
}

/// Counts of what the wire did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames handed to the wire.
    pub sent: u64,
    /// Frames delivered (duplicates count twice).
    pub delivered: u64,
    /// Frames dropped.
    pub lost: u64,
    /// Extra copies.
    pub duplicated: u64,
    /// Frames delayed out of order.
    pub reordered: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
}

/// `len` bytes of test data that differ per `seed` and per offset (byte
/// `i` is `31 i + seed` xor `i / 256`, so a block misplaced by a multiple of
/// 256 bytes is caught too): the one payload pattern of the test trees.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// The bytes of a hex string (white space ignored), for test vectors.
///
/// # Panics
/// On an odd number of digits or a character that is not a hex digit.
pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(s.len() % 2 == 0, "odd number of hex digits");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Take every completion waiting on CQ `cq` of `dev`, in order.
pub fn poll_all(dev: &mut Device, cq: u32) -> Vec<Wc> {
    let mut out = Vec::new();
    let mut buf = [Wc::EMPTY; 16];
    loop {
        let n = dev.poll_cq(cq, &mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Every access flag a test memory region may need (local write, remote
/// write, read and atomic).
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// The configuration of test side `i` (0 or 1): MAC 02:00:00:00:00:0(i+1),
/// GID 0 = IPv4 10.0.0.(i+1), on an Ethernet of `netdev_mtu` bytes.
pub fn test_config(i: u8, netdev_mtu: usize) -> DeviceConfig {
    DeviceConfig {
        mac: [0x02, 0, 0, 0, 0, i + 1],
        gids: vec![Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, i + 1))],
        netdev_mtu,
        ..DeviceConfig::default()
    }
}

/// The test device of side `i` (see [`test_config`]).
pub fn test_device(i: u8, netdev_mtu: usize) -> Device {
    Device::new(test_config(i, netdev_mtu))
}

/// Like [`test_device`], but GID 0 is the IPv6 address 2001:db8::(i+1), so
/// every QP addressed through GID index 0 runs RoCEv2 over IPv6.
pub fn test_device_ipv6(i: u8, netdev_mtu: usize) -> Device {
    Device::new(DeviceConfig {
        gids: vec![Gid::from_ipv6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            0,
            i as u16 + 1,
        ))],
        ..test_config(i, netdev_mtu)
    })
}

/// Decides the fate of each frame a device puts on the wire: called with the
/// sending side, the current time and the frame; `true` drops it (it is still
/// captured). Frames given to [`Pair::inject`] are never filtered.
pub type DropFilter = Box<dyn FnMut(usize, Instant, &[u8]) -> bool + Send>;

/// A frame on the wire: delivery time, sequence number (keeps equal times in
/// send order), receiving side, bytes.
type InFlight = (Instant, u64, usize, Vec<u8>);

/// Two devices and the wire between them.
pub struct Pair {
    /// The two devices.
    pub dev: [Device; 2],
    /// Virtual time.
    pub now: Instant,
    /// Fault injection.
    pub faults: Faults,
    /// What the wire did.
    pub stats: WireStats,
    rng: Rng,
    seq: u64,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    buf: Vec<u8>,
    /// Optional tap: every frame put on the wire (before faults and the drop
    /// filter), with its time.
    pub capture: Option<Vec<(Instant, Vec<u8>)>>,
    /// Optional deterministic loss for frames the devices send (a test
    /// playing one side by hand drops that device's own frames with
    /// `|from, _, _| from == 1`).
    pub drop_filter: Option<DropFilter>,
}

impl fmt::Debug for Pair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("dev", &self.dev)
            .field("now", &self.now)
            .field("faults", &self.faults)
            .field("stats", &self.stats)
            .field("in_flight", &self.in_flight.len())
            .field("drop_filter", &self.drop_filter.is_some())
            .finish_non_exhaustive()
    }
}

impl Pair {
    /// Two test devices on an Ethernet of `netdev_mtu` bytes.
    pub fn new(netdev_mtu: usize, faults: Faults, seed: u64) -> Pair {
        Pair::with_devices(
            [test_device(0, netdev_mtu), test_device(1, netdev_mtu)],
            faults,
            seed,
        )
    }

    /// Two given devices (e.g. [`test_device_ipv6`], or sides with different
    /// MTUs) joined by the wire.
    pub fn with_devices(dev: [Device; 2], faults: Faults, seed: u64) -> Pair {
        Pair {
            dev,
            now: Instant::ZERO,
            faults,
            stats: WireStats::default(),
            rng: Rng::new(seed),
            seq: 0,
            in_flight: BinaryHeap::new(),
            buf: vec![0u8; 16384],
            capture: None,
            drop_filter: None,
        }
    }

    /// Start capturing (clearing any earlier capture).
    pub fn start_capture(&mut self) {
        self.capture = Some(Vec::new());
    }

    /// The frames captured so far (empty when not capturing).
    pub fn captured(&self) -> &[(Instant, Vec<u8>)] {
        self.capture.as_deref().unwrap_or(&[])
    }

    /// A RoCEv2 frame from side `from` to the other side, addressed with both
    /// devices' GID 0 and MACs, UDP source port 0xC000: for tests that play a
    /// (mis)behaving peer. The BTH PadCnt is computed from `payload`.
    pub fn frame(&self, from: usize, bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
        let (src, dst) = (&self.dev[from], &self.dev[1 - from]);
        let sgid = src.gid(0).unwrap_or_default().to_ip();
        let dgid = dst.gid(0).unwrap_or_default().to_ip();
        let net = net_repr(sgid, dgid);
        let repr = PacketRepr {
            eth: EthRepr {
                dst: dst.config().mac,
                src: src.config().mac,
                vlan: None,
            },
            net,
            udp: UdpRepr {
                src_port: 0xC000,
                dst_port: ROCEV2_UDP_PORT,
                checksum: UdpChecksum::Default,
            },
            bth,
            ext,
        };
        let mut buf = vec![0u8; repr.frame_len(payload.len())];
        match repr.emit(&mut buf, payload) {
            Ok(n) => buf.truncate(n),
            Err(e) => panic!("Pair::frame: cannot build {bth:?}: {e}"),
        }
        buf
    }

    /// Put a frame from side `from` on the wire (subject to the random faults,
    /// never to the drop filter).
    pub fn inject(&mut self, from: usize, frame: &[u8]) {
        self.stats.sent += 1;
        if let Some(c) = self.capture.as_mut() {
            c.push((self.now, frame.to_vec()));
        }
        self.wire(from, frame);
    }

    /// A frame sent by device `from`: captured, filtered, then on the wire.
    fn transmit(&mut self, from: usize, frame: &[u8]) {
        self.stats.sent += 1;
        if let Some(c) = self.capture.as_mut() {
            c.push((self.now, frame.to_vec()));
        }
        if let Some(f) = self.drop_filter.as_mut() {
            if f(from, self.now, frame) {
                self.stats.lost += 1;
                return;
            }
        }
        self.wire(from, frame);
    }

    fn wire(&mut self, from: usize, frame: &[u8]) {
        if self.rng.chance(self.faults.loss) {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.faults.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut f = frame.to_vec();
            if self.rng.chance(self.faults.corrupt) && f.len() > 14 {
                let i = 14 + self.rng.below((f.len() - 14) as u64) as usize;
                f[i] ^= 1 << self.rng.below(8);
                self.stats.corrupted += 1;
            }
            let mut at = self.now + self.faults.delay;
            if self.rng.chance(self.faults.reorder) {
                self.stats.reordered += 1;
                let w = self.faults.reorder_window.as_nanos() as u64;
                at = at + Duration::from_nanos(self.rng.below(w + 1));
            }
            self.seq += 1;
            self.in_flight.push(Reverse((at, self.seq, 1 - from, f)));
        }
    }

    /// Do everything due at the current time; if nothing was, advance the clock
    /// to the next event. Returns `false` when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.step_bounded(Instant(u64::MAX))
    }

    fn step_bounded(&mut self, end: Instant) -> bool {
        let mut did = false;
        for side in 0..2 {
            loop {
                let mut buf = std::mem::take(&mut self.buf);
                let n = self.dev[side].poll_transmit(self.now, &mut buf);
                if let Some(n) = n {
                    self.transmit(side, &buf[..n]);
                    did = true;
                }
                self.buf = buf;
                if n.is_none() {
                    break;
                }
            }
        }
        while let Some(Reverse((at, _, _, _))) = self.in_flight.peek() {
            if *at > self.now {
                break;
            }
            let Some(Reverse((_, _, to, f))) = self.in_flight.pop() else {
                break;
            };
            self.stats.delivered += 1;
            self.dev[to].handle_frame(self.now, &f);
            did = true;
        }
        for side in 0..2 {
            if self.dev[side].poll_timeout().is_some_and(|t| t <= self.now) {
                self.dev[side].handle_timeout(self.now);
                did = true;
            }
        }
        if did {
            return true;
        }
        let next = [
            self.in_flight.peek().map(|Reverse((t, ..))| *t),
            self.dev[0].poll_timeout(),
            self.dev[1].poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) if t <= end => {
                self.now = t.max(self.now);
                true
            }
            _ => {
                if end != Instant(u64::MAX) {
                    self.now = end.max(self.now);
                }
                false
            }
        }
    }

    /// Step until `done` holds, nothing is left to happen, or `limit` of
    /// virtual time passed. Returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        let end = self.now + limit;
        loop {
            if done(self) {
                return true;
            }
            if !self.step_bounded(end) {
                return done(self);
            }
        }
    }

    /// Advance the clock by `d`, processing everything due on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while self.step_bounded(end) {}
    }

    /// Frames in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// A connected pair of QPs set up by [`connect`].
#[derive(Debug, Clone, Copy)]
pub struct Conn {
    /// PD on each side.
    pub pd: [u32; 2],
    /// CQ on each side (send and receive share it).
    pub cq: [u32; 2],
    /// QPN on each side.
    pub qpn: [u32; 2],
}

/// Options for [`connect`].
#[derive(Debug, Clone, Copy)]
pub struct ConnOpts {
    /// Transport.
    pub qp_type: QpType,
    /// Path MTU.
    pub mtu: Mtu,
    /// Initial PSN of each side's send queue.
    pub sq_psn: [u32; 2],
    /// Access rights granted to the peer.
    pub access: AccessFlags,
    /// ACK timeout code.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// RNR timer code each side sends.
    pub min_rnr_timer: u8,
    /// Outstanding READ/ATOMIC (both directions).
    pub rd_atomic: u8,
    /// Queue capacities.
    pub cap: QpCap,
    /// CQ depth.
    pub cqe: usize,
    /// UD Q_Key.
    pub qkey: u32,
}

impl Default for ConnOpts {
    fn default() -> Self {
        ConnOpts {
            qp_type: QpType::Rc,
            mtu: Mtu::Mtu1024,
            sq_psn: [0x100, 0x200],
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            rd_atomic: 16,
            cap: QpCap {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 128,
            },
            cqe: 4096,
            qkey: 0x1111_1111,
        }
    }
}

fn ipv6_of(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// The IP header of the test frames from `src` to `dst`: DSCP 0, ECN 0, TTL
/// (hop limit) 64; IPv4 with identification 0 and DF, IPv6 with flow label
/// 0. Two IPv4 addresses give IPv4; any other pair IPv6 (an IPv4 side
/// v4-mapped).
pub fn net_repr(src: IpAddr, dst: IpAddr) -> NetRepr {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => NetRepr::Ipv4(Ipv4Repr {
            src: s,
            dst: d,
            dscp: 0,
            ecn: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        }),
        (s, d) => NetRepr::Ipv6(Ipv6Repr {
            src: ipv6_of(s),
            dst: ipv6_of(d),
            dscp: 0,
            ecn: 0,
            flow_label: 0,
            hop_limit: 64,
        }),
    }
}

/// Create a PD, a CQ and a QP on each side and bring both QPs to RTS, each
/// addressed to the other.
pub fn connect(pair: &mut Pair, o: &ConnOpts) -> Conn {
    connect_with(pair, o, None).expect("connect")
}

/// [`connect`] with chosen QPNs (`Device::create_qp_with_qpn`; e.g. to
/// re-create a destroyed QP under its old number, CASES R22). Fails if a
/// QPN is taken.
pub fn connect_with(
    pair: &mut Pair,
    o: &ConnOpts,
    qpns: Option<[u32; 2]>,
) -> Result<Conn, VerbsError> {
    let mut pd = [0; 2];
    let mut cq = [0; 2];
    let mut qpn = [0; 2];
    for s in 0..2 {
        let d = &mut pair.dev[s];
        pd[s] = d.alloc_pd();
        cq[s] = d.create_cq(o.cqe);
        let init = QpInitAttr {
            qp_type: o.qp_type,
            send_cq: cq[s],
            recv_cq: cq[s],
            cap: o.cap,
            sq_sig_all: false,
        };
        qpn[s] = match qpns {
            Some(q) => d.create_qp_with_qpn(pd[s], &init, q[s])?,
            None => d.create_qp(pd[s], &init)?,
        };
    }
    for s in 0..2 {
        let peer = 1 - s;
        let av = av_to(&pair.dev[peer]).ok_or(VerbsError::NotFound)?;
        let (sq_psn, rq_psn) = (o.sq_psn[s], o.sq_psn[peer]);
        modify_to_rts(&mut pair.dev[s], qpn[s], av, qpn[peer], sq_psn, rq_psn, o)?;
    }
    Ok(Conn { pd, cq, qpn })
}

/// Bring QP `qpn` of `dev` from RESET through INIT and RTR to RTS (IBTA 1.7
/// §10.3.1; the attribute masks `ibv_modify_qp` requires for `o.qp_type`),
/// sending through `av` to the peer's QP `dest_qpn`: this QP's first PSN is
/// `sq_psn`, the first it expects `rq_psn`. Every other attribute comes from
/// `o` (whose `sq_psn` is not read). [`connect_with`] does this for both
/// sides of a [`Pair`]; tests and benches whose devices sit elsewhere (a
/// TAP host, thousands of QPs on one device) call it directly.
///
/// # Errors
/// The first error `modify_qp` returns.
pub fn modify_to_rts(
    dev: &mut Device,
    qpn: u32,
    av: AddressVector,
    dest_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
    o: &ConnOpts,
) -> Result<(), VerbsError> {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: o.access,
        qkey: o.qkey,
        ..QpAttr::default()
    };
    let init_mask = QpAttrMask::STATE
        | QpAttrMask::PKEY_INDEX
        | QpAttrMask::PORT
        | if o.qp_type == QpType::Ud {
            QpAttrMask::QKEY
        } else {
            QpAttrMask::ACCESS_FLAGS
        };
    dev.modify_qp(qpn, &a, init_mask)?;
    a.qp_state = QpState::Rtr;
    a.ah_attr = av;
    a.path_mtu = o.mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = o.rd_atomic;
    a.min_rnr_timer = o.min_rnr_timer;
    let rtr_mask = match o.qp_type {
        QpType::Rc => {
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER
        }
        QpType::Uc => {
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
        }
        QpType::Ud => QpAttrMask::STATE,
    };
    dev.modify_qp(qpn, &a, rtr_mask)?;
    a.qp_state = QpState::Rts;
    a.sq_psn = sq_psn;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.rd_atomic;
    let rts_mask = match o.qp_type {
        QpType::Rc => {
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC
        }
        _ => QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    };
    dev.modify_qp(qpn, &a, rts_mask)?;
    Ok(())
}

/// The address vector of a QP sending to `peer`: its GID 0 and MAC, hop
/// limit 64, the rest default (GID index 0, no VLAN). `None` if `peer` has
/// no GID 0.
pub fn av_to(peer: &Device) -> Option<AddressVector> {
    Some(AddressVector {
        dgid: peer.gid(0)?,
        dmac: peer.config().mac,
        hop_limit: 64,
        ..AddressVector::default()
    })
}

/// The gathered SEND with immediate of the RC end-to-end tests (CASES R19
/// shape), for one scenario run over several transports (the in-memory wire,
/// DPDK memif): side 1 posts one 1000-byte receive (wr_id 77) at IOVA
/// `recv_at` of its MR `b`; side 0 posts on QP `qpn[0]` a signaled SEND with
/// immediate 0xDEAD_BEEF (wr_id 3) of 407 bytes gathered from its MR `a`:
/// 100 bytes at IOVA `send_at`, 300 at `send_at + 500`, 7 at
/// `send_at + 1000`. The caller moves the frames and checks the completions.
///
/// # Errors
/// The first error `post_recv` or `post_send` returns.
pub fn post_gathered_send_imm(
    dev: &mut [Device; 2],
    qpn: [u32; 2],
    a: MrKeys,
    send_at: u64,
    b: MrKeys,
    recv_at: u64,
) -> Result<(), VerbsError> {
    let rsge = [Sge {
        addr: recv_at,
        length: 1000,
        lkey: b.lkey,
    }];
    dev[1].post_recv(
        qpn[1],
        &RecvWr {
            wr_id: 77,
            sg_list: &rsge,
        },
    )?;
    let sge = [(0, 100), (500, 300), (1000, 7)].map(|(off, length)| Sge {
        addr: send_at + off,
        length,
        lkey: a.lkey,
    });
    let mut wr = SendWr::new(3, WrOpcode::SendWithImm, &sge);
    wr.imm_data = 0xdead_beef;
    dev[0].post_send(qpn[0], &wr)
}
