//! Helpers shared by the transport scenario tests (CASES.md): polling,
//! decoding captured frames, and frames for tests that play a peer by hand.
// Each test binary uses a part of the helpers.
#![allow(dead_code, unused_imports)]

mod shared;

use std::time::Duration;

pub use roce_stack::testing::{all_access, pattern, unhex};
use roce_stack::testing::{connect, Conn, ConnOpts, Faults, Pair};
use roce_stack::time::Instant;
use roce_stack::verbs::{MrKeys, RecvWr, SendWr, Sge, Wc, WcStatus, WrOpcode};
use roce_stack::wire::ext::{AethRepr, RethRepr};
use roce_stack::wire::{BthRepr, ExtHeaders, NetInfo, Opcode, RocePacket};
pub use shared::{public_vectors, reference_vectors, shared_dir};

/// Take every completion waiting on `cq` of side `side`.
pub fn poll_all(p: &mut Pair, side: usize, cq: u32) -> Vec<Wc> {
    roce_stack::testing::poll_all(&mut p.dev[side], cq)
}

/// `(wr_id, status)` of each completion.
pub fn ids_status(wcs: &[Wc]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// Completions waiting on side `side`'s CQ.
pub fn cq_len(p: &Pair, side: usize, cq: u32) -> usize {
    p.dev[side].cq(cq).map_or(0, |c| c.len())
}

/// One decoded frame of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// When it was put on the wire.
    pub at: Instant,
    /// Which test device sent it (by source MAC: 02:00:00:00:00:01 = side 0).
    pub from: usize,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH PSN.
    pub psn: u32,
    /// BTH destination QPN.
    pub dest_qp: u32,
    /// BTH AckReq.
    pub ack_req: bool,
    /// BTH PadCnt.
    pub pad: u8,
    /// Payload bytes (without pad).
    pub payload: Vec<u8>,
    /// AETH (syndrome, MSN).
    pub aeth: Option<(u8, u32)>,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// UDP source port.
    pub sport: u16,
    /// IPv4 total length (0 for IPv6).
    pub ip_total_len: u16,
    /// The raw frame.
    pub raw: Vec<u8>,
}

/// Decode a frame we or the harness built (strict parse: the ICRC must be right).
pub fn decode(at: Instant, frame: &[u8]) -> Seen {
    let pkt = RocePacket::parse(frame).expect("every captured frame parses strictly");
    Seen {
        at,
        from: (frame[11] as usize).wrapping_sub(1),
        opcode: pkt.bth().opcode.0,
        psn: pkt.bth().psn,
        dest_qp: pkt.bth().dest_qp,
        ack_req: pkt.bth().ack_req,
        pad: pkt.pad(),
        payload: pkt.payload().to_vec(),
        aeth: pkt.ext().aeth().map(|a| (a.syndrome, a.msn)),
        reth: pkt.ext().reth(),
        sport: pkt.udp().map_or(0, |u| u.src_port),
        ip_total_len: match pkt.net() {
            NetInfo::Ipv4(i) => i.total_len,
            _ => 0,
        },
        raw: frame.to_vec(),
    }
}

/// Every captured frame, decoded.
pub fn seen(p: &Pair) -> Vec<Seen> {
    p.captured().iter().map(|(t, f)| decode(*t, f)).collect()
}

/// Captured frames sent by side `side`.
pub fn seen_from(p: &Pair, side: usize) -> Vec<Seen> {
    seen(p).into_iter().filter(|s| s.from == side).collect()
}

/// An ACKNOWLEDGE (or NAK) from side `from` to QPN `dest_qp`.
pub fn ack_frame(p: &Pair, from: usize, dest_qp: u32, psn: u32, syndrome: u8, msn: u32) -> Vec<u8> {
    let ext = ExtHeaders {
        aeth: Some(AethRepr { syndrome, msn }),
        ..ExtHeaders::default()
    };
    p.frame(
        from,
        BthRepr::new(Opcode::RC_ACKNOWLEDGE, dest_qp, psn),
        ext,
        &[],
    )
}

/// A request packet from side `from` to QPN `dest_qp` (one argument per
/// header field a scenario varies).
#[allow(clippy::too_many_arguments)]
pub fn req_frame(
    p: &Pair,
    from: usize,
    dest_qp: u32,
    opcode: Opcode,
    psn: u32,
    ack_req: bool,
    reth: Option<RethRepr>,
    payload: &[u8],
) -> Vec<u8> {
    let mut bth = BthRepr::new(opcode, dest_qp, psn);
    bth.ack_req = ack_req;
    let ext = ExtHeaders {
        reth,
        ..ExtHeaders::default()
    };
    p.frame(from, bth, ext, payload)
}

/// Drop every frame device `side` sends (they are still captured): the test
/// plays that side's peer role by hand with [`Pair::inject`].
pub fn mute(p: &mut Pair, side: usize) {
    p.drop_filter = Some(Box::new(move |from, _, _| from == side));
}

/// Run until `n` frames from `side` have been captured (or 10 s of virtual
/// time pass); returns whether they were.
pub fn run_until_sent(p: &mut Pair, side: usize, n: usize) -> bool {
    p.run_until(Duration::from_secs(10), |p| {
        p.captured()
            .iter()
            .filter(|(_, f)| f.get(11) == Some(&(side as u8 + 1)))
            .count()
            >= n
    })
}

/// A connected RC pair with an MR on each side (`len` bytes, IOVA 0, every
/// right), capturing, with `opts`.
pub struct Setup {
    pub p: Pair,
    pub c: Conn,
    pub mr: [MrKeys; 2],
}

pub fn setup(netdev_mtu: usize, opts: &ConnOpts, len: usize) -> Setup {
    setup_with(Pair::new(netdev_mtu, Faults::default(), 7), opts, len)
}

/// [`setup`] over the devices of `p`.
pub fn setup_with(mut p: Pair, opts: &ConnOpts, len: usize) -> Setup {
    let c = connect(&mut p, opts);
    let mr0 = p.dev[0]
        .reg_mr(c.pd[0], pattern(len, 1), 0, all_access())
        .unwrap();
    let mr1 = p.dev[1]
        .reg_mr(c.pd[1], vec![0; len], 0, all_access())
        .unwrap();
    p.start_capture();
    Setup {
        p,
        c,
        mr: [mr0, mr1],
    }
}

/// Post a signaled WRITE of `len` bytes from side 0's MR at `local` to side 1's
/// MR at `remote`.
pub fn post_write(s: &mut Setup, wr_id: u64, local: u64, len: u32, remote: u64) {
    let sge = [Sge {
        addr: local,
        length: len,
        lkey: s.mr[0].lkey,
    }];
    let mut wr = SendWr::new(wr_id, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = remote;
    wr.rkey = s.mr[1].rkey;
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
}

/// Post a signaled SEND of `len` bytes from side 0's MR at `local`
/// (zero-length: no SGE).
pub fn post_send_msg(s: &mut Setup, wr_id: u64, local: u64, len: u32) {
    let sge = [Sge {
        addr: local,
        length: len,
        lkey: s.mr[0].lkey,
    }];
    let list: &[Sge] = if len == 0 { &[] } else { &sge };
    let wr = SendWr::new(wr_id, WrOpcode::Send, list);
    s.p.dev[0].post_send(s.c.qpn[0], &wr).unwrap();
}

/// Post a receive WQE of `len` bytes at `addr` of side `side`'s MR.
pub fn post_recv(s: &mut Setup, side: usize, wr_id: u64, addr: u64, len: u32) {
    let sge = [Sge {
        addr,
        length: len,
        lkey: s.mr[side].lkey,
    }];
    s.p.dev[side]
        .post_recv(
            s.c.qpn[side],
            &RecvWr {
                wr_id,
                sg_list: &sge,
            },
        )
        .unwrap();
}

/// Local ACK timeout for `code`: 4.096 µs × 2^code (CASES conventions).
pub fn ack_timeout(code: u32) -> Duration {
    Duration::from_nanos(4096 << code)
}

/// The ICRC of an untagged or 802.1Q-tagged RoCEv2-over-IPv4 frame whose
/// IPv4 header has no options, computed independently of the stack: the
/// `crc` crate's CRC-32 (ISO-HDLC, the Ethernet CRC) over `FF x 8 | IPv4
/// header | UDP header | BTH | rest`, with TOS, TTL, the IPv4 and UDP
/// checksums and BTH byte 4 forced to ones (ROCEV2-DIGEST §4, RoCEv2
/// Annex A17.3.3), written least significant byte first.
pub fn reference_icrc_v4(frame: &[u8]) -> [u8; 4] {
    const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    let l3 = if frame[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    };
    let total = u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]) as usize;
    let mut p = vec![0xFFu8; 8];
    p.extend_from_slice(&frame[l3..l3 + total - 4]);
    let h = &mut p[8..];
    h[1] = 0xFF;
    h[8] = 0xFF;
    h[10..12].fill(0xFF);
    h[26..28].fill(0xFF);
    h[28 + 4] = 0xFF;
    CRC32.checksum(&p).to_le_bytes()
}

/// RFC 791 header checksum of the 20-byte IPv4 header at `h` (checksum field
/// taken as 0).
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut c = h[..20].to_vec();
    c[10..12].copy_from_slice(&[0, 0]);
    !ones_sum(&c)
}

/// `frame` (an untagged RoCEv2/IPv4 frame as [`roce_stack::testing::Pair::frame`]
/// builds it) with everything after its extension headers replaced by
/// `body` (payload bytes followed by pad bytes) and BTH PadCnt set to `pad`:
/// for requests whose PadCnt or length a correct sender would never
/// produce. IPv4 total length and checksum, UDP length and the ICRC
/// ([`reference_icrc_v4`]) are rewritten to match; frames under 60 bytes are
/// zero-padded (Ethernet padding, outside every length).
pub fn with_body(frame: &[u8], ext_len: usize, body: &[u8], pad: u8) -> Vec<u8> {
    let bth = 14 + 20 + 8;
    let data = bth + 12 + ext_len;
    let mut f = frame[..data].to_vec();
    f.extend_from_slice(body);
    f.extend_from_slice(&[0; 4]);
    let ip_len = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    let udp_len = ip_len - 20;
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f[40..42].fill(0); // UDP checksum 0 (IPv4)
    let ck = ipv4_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&ck.to_be_bytes());
    f[bth + 1] = (f[bth + 1] & !0x30) | ((pad & 3) << 4);
    let icrc = reference_icrc_v4(&f);
    let n = f.len();
    f[n - 4..].copy_from_slice(&icrc);
    if f.len() < 60 {
        f.resize(60, 0);
    }
    f
}

/// `frame` with an 802.1Q tag (PCP 0, VLAN `vid`) inserted after the MACs.
/// The tag is outside the ICRC (ROCEV2-DIGEST §1), so nothing else changes.
pub fn tagged(frame: &[u8], vid: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&[0x81, 0x00]);
    f.extend_from_slice(&(vid & 0x0FFF).to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// RFC 1071 one's-complement sum of `data` (odd length padded with a zero
/// byte), folded to 16 bits, not complemented.
pub fn ones_sum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// Recompute the IPv4 header checksum (RFC 791) of the header at `ip`.
pub fn fix_ipv4_checksum(ip: &mut [u8]) {
    let ihl = ((ip[0] & 0x0F) as usize * 4).clamp(20, ip.len());
    ip[10] = 0;
    ip[11] = 0;
    let c = !ones_sum(&ip[..ihl]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

/// The frame `r` builds around `payload` (the buffer it is written into
/// starts as 0xAA bytes and is longer than the frame, so the length
/// `emit` returns is checked too).
pub fn emit(r: &roce_stack::wire::PacketRepr, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0xAAu8; r.frame_len(payload.len()) + 16];
    let n = r.emit(&mut buf, payload).expect("emit");
    assert_eq!(n, r.frame_len(payload.len()));
    buf.truncate(n);
    buf
}
