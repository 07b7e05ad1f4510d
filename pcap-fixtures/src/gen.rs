//! The fixture generator: small, deterministic conversations built with our own
//! frame builders.
//!
//! Two hosts, A (requester) and B (responder), on documentation addresses
//! (RFC 5737 / RFC 3849): A = 02:00:00:00:00:01, 192.0.2.1, 2001:db8::1,
//! QPN 0x000011; B = 02:00:00:00:00:02, 192.0.2.2, 2001:db8::2, QPN 0x000012.
//! RoCEv1 GIDs are the link-local EUI-64 GIDs of the MACs (fe80::ff:fe00:1,
//! fe80::ff:fe00:2). Multi-packet messages use a PMTU of 1024 bytes
//! (IBTA 1.7 §9.7.1: FIRST and MIDDLE packets carry exactly one PMTU).

use core::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use roce_stack::wire::arp::ArpRepr;
use roce_stack::wire::bth::BthRepr;
use roce_stack::wire::cnp;
use roce_stack::wire::ext::{AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, RethRepr};
use roce_stack::wire::grh::{GrhRepr, NXTHDR_IBA};
use roce_stack::wire::opcode::OpKind;
use roce_stack::wire::pfc::{MacControl, PauseRepr, PfcRepr};
use roce_stack::wire::{
    EthRepr, ExtHeader, ExtHeaders, HdrMask, Ipv4Repr, Ipv6Repr, NetRepr, Opcode, PacketRepr,
    Position, Transport, UdpChecksum, UdpRepr, VlanTag, ROCEV2_UDP_PORT,
};

use crate::Fixture;

/// Seconds since the epoch of every fixture's first frame (2023-11-14 22:13:20 UTC).
const EPOCH_S: u64 = 1_700_000_000;
/// Path MTU of multi-packet messages, bytes.
const PMTU: usize = 1024;

/// A station: MAC, IPv4, IPv6 and RoCEv1 GID.
#[derive(Clone, Copy)]
struct Host {
    mac: [u8; 6],
    ip4: Ipv4Addr,
    ip6: Ipv6Addr,
    gid: Ipv6Addr,
}

const HOST_A: Host = Host {
    mac: [0x02, 0, 0, 0, 0, 0x01],
    ip4: Ipv4Addr::new(192, 0, 2, 1),
    ip6: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1),
    gid: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 1),
};
const HOST_B: Host = Host {
    mac: [0x02, 0, 0, 0, 0, 0x02],
    ip4: Ipv4Addr::new(192, 0, 2, 2),
    ip6: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2),
    gid: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 2),
};

/// QPN of A's QP.
const QP_A: u32 = 0x00_0011;
/// QPN of B's QP.
const QP_B: u32 = 0x00_0012;

/// Network header flavour of a flow.
#[derive(Clone, Copy)]
enum L3 {
    /// RoCEv2 over IPv4: DSCP, ECN.
    V4 { dscp: u8, ecn: u8 },
    /// RoCEv2 over IPv6: DSCP, ECN, flow label.
    V6 { dscp: u8, ecn: u8, flow_label: u32 },
    /// RoCEv1: GRH traffic class, flow label.
    V1 { tclass: u8, flow_label: u32 },
}

/// IPv4 DSCP 26 (AF31, the usual RoCE class), ECT(0).
const V4: L3 = L3::V4 { dscp: 26, ecn: 2 };
/// IPv6, same class, flow label 0x2a5a5.
const V6: L3 = L3::V6 {
    dscp: 26,
    ecn: 2,
    flow_label: 0x2_a5a5,
};
/// RoCEv1 GRH, traffic class 0x6a (DSCP 26, ECT(0)).
const V1: L3 = L3::V1 {
    tclass: 0x6a,
    flow_label: 0,
};

/// One direction of a QP connection (or a UD flow): addressing, the peer's QPN
/// and the next PSN this side sends.
#[derive(Clone, Copy)]
struct Side {
    src: Host,
    dst: Host,
    l3: L3,
    vlan: Option<VlanTag>,
    udp_sport: u16,
    /// QPN the packets are addressed to.
    dest_qp: u32,
    /// Next PSN (24 bits).
    psn: u32,
    /// Next IPv4 identification.
    ident: u16,
    pkey: u16,
    migreq: bool,
}

impl Side {
    /// A side from `src` (QP `local_qp`) to `dst` (QP `dest_qp`), first PSN `psn`.
    fn new(src: Host, dst: Host, l3: L3, local_qp: u32, dest_qp: u32, psn: u32) -> Side {
        Side {
            src,
            dst,
            l3,
            vlan: None,
            // rxe-style flow entropy: 0xC000 | low bits of the sender's QPN.
            udp_sport: 0xC000 | (local_qp & 0x3FFF) as u16,
            dest_qp,
            psn: psn & 0xFF_FFFF,
            ident: (local_qp as u16).wrapping_mul(0x101),
            pkey: 0xFFFF,
            migreq: false,
        }
    }

    /// Take the next PSN.
    fn next_psn(&mut self) -> u32 {
        let p = self.psn;
        self.psn = (self.psn + 1) & 0xFF_FFFF;
        p
    }

    /// A BTH to the peer with this side's P_Key and MigReq.
    fn bth(&self, opcode: Opcode, psn: u32) -> BthRepr {
        BthRepr {
            pkey: self.pkey,
            migreq: self.migreq,
            ..BthRepr::new(opcode, self.dest_qp, psn)
        }
    }
}

/// Frames with timestamps, in microseconds from [`EPOCH_S`].
struct Cap {
    t_us: u64,
    frames: Vec<(Duration, Vec<u8>)>,
}

impl Cap {
    fn new() -> Cap {
        Cap {
            t_us: 0,
            frames: Vec::new(),
        }
    }

    /// Append a frame `gap_us` microseconds after the previous one.
    fn push(&mut self, gap_us: u64, frame: Vec<u8>) {
        self.t_us += gap_us;
        let ts = Duration::from_secs(EPOCH_S) + Duration::from_micros(self.t_us);
        self.frames.push((ts, frame));
    }

    /// Build and append one RoCE frame from `side`.
    fn roce(
        &mut self,
        gap_us: u64,
        side: &mut Side,
        bth: BthRepr,
        ext: ExtHeaders,
        payload: &[u8],
    ) {
        let net = match side.l3 {
            L3::V4 { dscp, ecn } => {
                let ident = side.ident;
                side.ident = side.ident.wrapping_add(1);
                NetRepr::Ipv4(Ipv4Repr {
                    src: side.src.ip4,
                    dst: side.dst.ip4,
                    dscp,
                    ecn,
                    ttl: 64,
                    ident,
                    dont_frag: true,
                })
            }
            L3::V6 {
                dscp,
                ecn,
                flow_label,
            } => NetRepr::Ipv6(Ipv6Repr {
                src: side.src.ip6,
                dst: side.dst.ip6,
                dscp,
                ecn,
                flow_label,
                hop_limit: 64,
            }),
            L3::V1 { tclass, flow_label } => NetRepr::Grh(GrhRepr {
                traffic_class: tclass,
                flow_label,
                payload_len: 0,
                next_header: NXTHDR_IBA,
                hop_limit: 1,
                sgid: side.src.gid,
                dgid: side.dst.gid,
            }),
        };
        let repr = PacketRepr {
            eth: EthRepr {
                dst: side.dst.mac,
                src: side.src.mac,
                vlan: side.vlan,
            },
            net,
            udp: UdpRepr {
                src_port: side.udp_sport,
                dst_port: ROCEV2_UDP_PORT,
                checksum: UdpChecksum::Default,
            },
            bth,
            ext,
        };
        let mut buf = vec![0u8; repr.frame_len(payload.len())];
        let n = repr
            .emit(&mut buf, payload)
            .unwrap_or_else(|e| panic!("fixture frame {bth:?}: {e}"));
        buf.truncate(n);
        self.push(gap_us, buf);
    }

    /// Encode as a pcap file.
    fn into_pcap(self) -> Vec<u8> {
        crate::write_pcap(&self.frames)
    }
}

/// A deterministic payload: `len` bytes of a sequence seeded by `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i as u8).wrapping_mul(7)) ^ (i >> 8) as u8)
        .collect()
}

/// What a request message is (the variants of SEND and RDMA WRITE).
#[derive(Clone, Copy)]
enum Msg {
    Send,
    SendImm(u32),
    SendInv(u32),
    Write(RethRepr),
    WriteImm(RethRepr, u32),
}

/// The opcode of a packet of `msg` on `transport` at `position`, from the
/// opcode table (IBTA 1.7 §9.2.1, Table 36): the operation family, and the
/// header that marks the variant (ImmDt, IETH) on the last packet.
fn opcode(transport: Transport, msg: Msg, position: Position) -> Opcode {
    let (kind, variant) = match msg {
        Msg::Send => (OpKind::Send, HdrMask::EMPTY),
        Msg::SendImm(_) => (OpKind::Send, HdrMask::EMPTY.with(ExtHeader::ImmDt)),
        Msg::SendInv(_) => (OpKind::Send, HdrMask::EMPTY.with(ExtHeader::Ieth)),
        Msg::Write(_) => (OpKind::Write, HdrMask::EMPTY),
        Msg::WriteImm(..) => (OpKind::Write, HdrMask::EMPTY.with(ExtHeader::ImmDt)),
    };
    let ends = matches!(position, Position::Last | Position::Only);
    let extra = if ends { variant } else { HdrMask::EMPTY };
    Opcode::find(transport, kind, position, extra).expect("an opcode of the table")
}

/// Send a SEND / WRITE message of `payload` as FIRST/MIDDLE.../LAST or ONLY
/// packets from `side` over `transport` (RC or UC); RC packets ending the
/// message set AckReq. Returns the PSN of the last packet.
fn message(
    cap: &mut Cap,
    side: &mut Side,
    transport: Transport,
    msg: Msg,
    payload: &[u8],
    solicited: bool,
) -> u32 {
    let chunks: Vec<&[u8]> = if payload.is_empty() {
        vec![payload]
    } else {
        payload.chunks(PMTU).collect()
    };
    let n = chunks.len();
    let mut last_psn = side.psn;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let (position, first, last) = match (i, n) {
            (_, 1) => (Position::Only, true, true),
            (0, _) => (Position::First, true, false),
            (i, n) if i + 1 == n => (Position::Last, false, true),
            _ => (Position::Middle, false, false),
        };
        let mut ext = ExtHeaders::default();
        match msg {
            Msg::Send => {}
            Msg::SendImm(imm) if last => ext.immdt = Some(imm),
            Msg::SendInv(rkey) if last => ext.ieth = Some(rkey),
            Msg::SendImm(_) | Msg::SendInv(_) => {}
            Msg::Write(reth) if first => ext.reth = Some(reth),
            Msg::WriteImm(reth, imm) => {
                if first {
                    ext.reth = Some(reth);
                }
                if last {
                    ext.immdt = Some(imm);
                }
            }
            Msg::Write(_) => {}
        }
        last_psn = side.next_psn();
        let bth = BthRepr {
            solicited: solicited && last,
            ack_req: transport == Transport::Rc && last,
            ..side.bth(opcode(transport, msg, position), last_psn)
        };
        cap.roce(1, side, bth, ext, chunk);
    }
    last_psn
}

/// An RC RDMA READ REQUEST for `len` bytes at `va`/`rkey`. Returns its PSN; the
/// request consumes one PSN per response packet (IBTA 1.7 §9.7.2).
fn read_request(cap: &mut Cap, side: &mut Side, va: u64, rkey: u32, len: u32) -> u32 {
    let psn = side.psn;
    let packets = (len as usize).div_ceil(PMTU).max(1) as u32;
    side.psn = (side.psn + packets) & 0xFF_FFFF;
    let ext = ExtHeaders {
        reth: Some(RethRepr {
            va,
            rkey,
            dma_len: len,
        }),
        ..ExtHeaders::default()
    };
    let bth = BthRepr {
        ack_req: true,
        ..side.bth(Opcode::RC_RDMA_READ_REQUEST, psn)
    };
    cap.roce(1, side, bth, ext, &[]);
    psn
}

/// The READ RESPONSE packets for a request at `psn`: FIRST (AETH) / MIDDLE /
/// LAST (AETH), or ONLY (AETH), with an ACK syndrome of `credit` and `msn`.
fn read_response(cap: &mut Cap, side: &mut Side, psn: u32, data: &[u8], credit: u8, msn: u32) {
    let chunks: Vec<&[u8]> = data.chunks(PMTU).collect();
    let n = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let (op, aeth) = match (i, n) {
            (_, 1) => (Opcode::RC_RDMA_READ_RESPONSE_ONLY, true),
            (0, _) => (Opcode::RC_RDMA_READ_RESPONSE_FIRST, true),
            (i, n) if i + 1 == n => (Opcode::RC_RDMA_READ_RESPONSE_LAST, true),
            _ => (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, false),
        };
        let ext = ExtHeaders {
            aeth: aeth.then_some(AethRepr {
                syndrome: credit & 0x1F,
                msn,
            }),
            ..ExtHeaders::default()
        };
        let bth = side.bth(op, (psn + i as u32) & 0xFF_FFFF);
        cap.roce(1, side, bth, ext, chunk);
    }
}

/// An RC ACKNOWLEDGE for `psn` with AETH `syndrome` and `msn`.
fn ack(cap: &mut Cap, gap_us: u64, side: &mut Side, psn: u32, syndrome: u8, msn: u32) {
    let ext = ExtHeaders {
        aeth: Some(AethRepr { syndrome, msn }),
        ..ExtHeaders::default()
    };
    let bth = side.bth(Opcode::RC_ACKNOWLEDGE, psn);
    cap.roce(gap_us, side, bth, ext, &[]);
}

/// An RC COMPARE_SWAP or FETCH_ADD. Returns its PSN.
fn atomic(cap: &mut Cap, side: &mut Side, op: Opcode, a: AtomicEthRepr) -> u32 {
    let psn = side.next_psn();
    let ext = ExtHeaders {
        atomic_eth: Some(a),
        ..ExtHeaders::default()
    };
    let bth = BthRepr {
        ack_req: true,
        ..side.bth(op, psn)
    };
    cap.roce(1, side, bth, ext, &[]);
    psn
}

/// An RC ATOMIC ACKNOWLEDGE for `psn`.
fn atomic_ack(cap: &mut Cap, gap_us: u64, side: &mut Side, psn: u32, msn: u32, orig: u64) {
    let ext = ExtHeaders {
        aeth: Some(AethRepr {
            syndrome: 0x1F,
            msn,
        }),
        atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
        ..ExtHeaders::default()
    };
    let bth = side.bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn);
    cap.roce(gap_us, side, bth, ext, &[]);
}

/// A UD SEND ONLY (or SEND ONLY WITH IMMEDIATE) with DETH `qkey`, `src_qp`.
fn ud_send(
    cap: &mut Cap,
    side: &mut Side,
    qkey: u32,
    src_qp: u32,
    imm: Option<u32>,
    payload: &[u8],
) {
    let op = if imm.is_some() {
        Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
    } else {
        Opcode::UD_SEND_ONLY
    };
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey,
            rsvd: 0,
            src_qp,
        }),
        immdt: imm,
        ..ExtHeaders::default()
    };
    let psn = side.next_psn();
    let bth = BthRepr {
        solicited: imm.is_some(),
        ..side.bth(op, psn)
    };
    cap.roce(3, side, bth, ext, payload);
}

/// A RoCEv2 CNP from `side` to the QP whose packets were CE-marked.
fn cnp_frame(cap: &mut Cap, gap_us: u64, side: &mut Side, dest_qp: u32) {
    let bth = BthRepr {
        pkey: side.pkey,
        ..cnp::bth(dest_qp)
    };
    cap.roce(gap_us, side, bth, cnp::ext(), &[]);
}

/// The usual requester/responder pair between A and B.
fn rc_pair(l3: L3, psn_a: u32, psn_b: u32) -> (Side, Side) {
    (
        Side::new(HOST_A, HOST_B, l3, QP_A, QP_B, psn_a),
        Side::new(HOST_B, HOST_A, l3, QP_B, QP_A, psn_b),
    )
}

fn fx_rc_send() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, mut b) = rc_pair(V4, 0x00_1000, 0x00_8000);
    // 2500-byte SEND: FIRST 1024, MIDDLE 1024, LAST 452 (pad 0).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x10, 2500),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 1);
    // SEND ONLY 38 bytes (pad 2).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x20, 38),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 2);
    // 1123-byte SEND with immediate: FIRST 1024 + LAST WITH IMMEDIATE 99 (pad 1).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::SendImm(0x1234_abcd),
        &pattern(0x30, 1123),
        true,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 3);
    // SEND ONLY WITH IMMEDIATE, 17 bytes (pad 3).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::SendImm(0xcafe_f00d),
        &pattern(0x40, 17),
        true,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 4);
    // 1624-byte SEND with invalidate: FIRST 1024 + LAST WITH INVALIDATE 600.
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::SendInv(0x0000_5a17),
        &pattern(0x50, 1624),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 5);
    // SEND ONLY WITH INVALIDATE, 13 bytes (pad 3).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::SendInv(0x0000_5a18),
        &pattern(0x60, 13),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 6);
    cap.into_pcap()
}

fn fx_uc_send() -> Vec<u8> {
    let mut cap = Cap::new();
    let mut a = Side::new(HOST_A, HOST_B, V4, 0x21, 0x22, 0x00_2000);
    // UC SEND FIRST/MIDDLE/LAST (2100 bytes, LAST 52).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::Send,
        &pattern(0x11, 2100),
        false,
    );
    // UC SEND ONLY, 31 bytes (pad 1).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::Send,
        &pattern(0x12, 31),
        false,
    );
    // UC SEND FIRST + LAST WITH IMMEDIATE (1030 bytes, LAST 6: pad 2).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::SendImm(0x0bad_cafe),
        &pattern(0x13, 1030),
        false,
    );
    // UC SEND ONLY WITH IMMEDIATE, 9 bytes (pad 3).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::SendImm(0x0000_0001),
        &pattern(0x14, 9),
        true,
    );
    let reth = |va: u64, len: u32| RethRepr {
        va,
        rkey: 0x0001_2345,
        dma_len: len,
    };
    // UC RDMA WRITE FIRST/MIDDLE/LAST (3000 bytes, LAST 952).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::Write(reth(0x0000_7f00_1234_5000, 3000)),
        &pattern(0x15, 3000),
        false,
    );
    // UC RDMA WRITE FIRST + LAST WITH IMMEDIATE (1027 bytes: pad 1).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::WriteImm(reth(0x0000_7f00_1234_6000, 1027), 0x7777_0001),
        &pattern(0x16, 1027),
        false,
    );
    // UC RDMA WRITE ONLY, 14 bytes (pad 2).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::Write(reth(0x0000_7f00_1234_7000, 14)),
        &pattern(0x17, 14),
        false,
    );
    // UC RDMA WRITE ONLY WITH IMMEDIATE, 0 bytes (a pure notification).
    message(
        &mut cap,
        &mut a,
        Transport::Uc,
        Msg::WriteImm(reth(0x0000_7f00_1234_8000, 0), 0x7777_0002),
        &[],
        false,
    );
    cap.into_pcap()
}

fn fx_ud_send() -> Vec<u8> {
    let mut cap = Cap::new();
    // UD QP 0x000abc on A sends to UD QP 0x000077 on B, Q_Key 0x11111111.
    let mut a = Side::new(HOST_A, HOST_B, V4, 0xabc, 0x77, 0x00_0001);
    ud_send(
        &mut cap,
        &mut a,
        0x1111_1111,
        0xabc,
        None,
        &pattern(0x21, 64),
    );
    ud_send(
        &mut cap,
        &mut a,
        0x1111_1111,
        0xabc,
        None,
        &pattern(0x22, 255),
    );
    ud_send(
        &mut cap,
        &mut a,
        0x1111_1111,
        0xabc,
        Some(0xcafe_f00d),
        &pattern(0x23, 16),
    );
    ud_send(
        &mut cap,
        &mut a,
        0x1111_1111,
        0xabc,
        Some(0x0000_0bad),
        &pattern(0x24, 1022),
    );
    // The reply from B's UD QP 0x000077 to A's 0x000abc, a full PMTU.
    let mut b = Side::new(HOST_B, HOST_A, V4, 0x77, 0xabc, 0x00_0100);
    ud_send(
        &mut cap,
        &mut b,
        0x1111_1111,
        0x77,
        None,
        &pattern(0x25, 1024),
    );
    ud_send(
        &mut cap,
        &mut b,
        0x1111_1111,
        0x77,
        Some(0x1000_0001),
        &pattern(0x26, 1),
    );
    cap.into_pcap()
}

fn fx_rc_write() -> Vec<u8> {
    let mut cap = Cap::new();
    // PSNs wrap from 0xFFFFFF to 0 inside the first message.
    let (mut a, mut b) = rc_pair(V4, 0xFF_FFFD, 0x00_0200);
    let reth = |va: u64, len: u32| RethRepr {
        va,
        rkey: 0x00ab_cdef,
        dma_len: len,
    };
    // WRITE FIRST/MIDDLE/MIDDLE/LAST (3500 bytes, LAST 428).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Write(reth(0x0000_7f00_1234_5000, 3500)),
        &pattern(0x31, 3500),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 1);
    // WRITE FIRST/LAST WITH IMMEDIATE (2047 bytes: LAST 1023, pad 1).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::WriteImm(reth(0x0000_7f00_1234_6000, 2047), 0xdead_beef),
        &pattern(0x32, 2047),
        true,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 2);
    // WRITE ONLY, 13 bytes (pad 3).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Write(reth(0x0000_7f00_1234_7000, 13)),
        &pattern(0x33, 13),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 3);
    // WRITE ONLY WITH IMMEDIATE, 1024 bytes (pad 0).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::WriteImm(reth(0x0000_7f00_1234_8000, 1024), 0x0000_00ff),
        &pattern(0x34, 1024),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 4);
    // WRITE ONLY of 0 bytes (allowed: a zero-length RDMA WRITE).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Write(reth(0, 0)),
        &[],
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 5);
    cap.into_pcap()
}

fn fx_rc_read() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, mut b) = rc_pair(V4, 0x00_3000, 0x00_9000);
    // READ of 4000 bytes: FIRST, MIDDLE, MIDDLE, LAST (928, pad 0).
    let psn = read_request(&mut cap, &mut a, 0x0000_7f00_2000_0000, 0x0000_1234, 4000);
    read_response(&mut cap, &mut b, psn, &pattern(0x41, 4000), 0x1F, 1);
    // READ of 2049 bytes: FIRST, MIDDLE, LAST (1 byte, pad 3).
    let psn = read_request(&mut cap, &mut a, 0x0000_7f00_2000_1000, 0x0000_1234, 2049);
    read_response(&mut cap, &mut b, psn, &pattern(0x42, 2049), 0x1F, 2);
    // READ of 6 bytes: ONLY (pad 2).
    let psn = read_request(&mut cap, &mut a, 0x0000_7f00_2000_2000, 0x0000_1234, 6);
    read_response(&mut cap, &mut b, psn, &pattern(0x43, 6), 0x1F, 3);
    // READ of 1027 bytes: FIRST + LAST (3 bytes, pad 1).
    let psn = read_request(&mut cap, &mut a, 0x0000_7f00_2000_3000, 0x0000_1234, 1027);
    read_response(&mut cap, &mut b, psn, &pattern(0x44, 1027), 0x1F, 4);
    cap.into_pcap()
}

fn fx_rc_atomic() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, mut b) = rc_pair(V4, 0x00_4000, 0x00_a000);
    let psn = atomic(
        &mut cap,
        &mut a,
        Opcode::RC_COMPARE_SWAP,
        AtomicEthRepr {
            va: 0x0000_0000_1000_0000,
            rkey: 0x0000_1234,
            swap_add: 0x1111_1111_1111_1111,
            compare: 0x2222_2222_2222_2222,
        },
    );
    atomic_ack(&mut cap, 3, &mut b, psn, 1, 0x2222_2222_2222_2222);
    let psn = atomic(
        &mut cap,
        &mut a,
        Opcode::RC_FETCH_ADD,
        AtomicEthRepr {
            va: 0x0000_0000_1000_0008,
            rkey: 0x0000_1234,
            swap_add: 1,
            compare: 0,
        },
    );
    atomic_ack(&mut cap, 3, &mut b, psn, 2, 41);
    // A failed compare: the original value differs from the compare value.
    let psn = atomic(
        &mut cap,
        &mut a,
        Opcode::RC_COMPARE_SWAP,
        AtomicEthRepr {
            va: 0x0000_0000_1000_0000,
            rkey: 0x0000_1234,
            swap_add: 0x3333_3333_3333_3333,
            compare: 0x2222_2222_2222_2222,
        },
    );
    atomic_ack(&mut cap, 3, &mut b, psn, 3, 0x1111_1111_1111_1111);
    // FETCH_ADD of a large value (wraps the remote word).
    let psn = atomic(
        &mut cap,
        &mut a,
        Opcode::RC_FETCH_ADD,
        AtomicEthRepr {
            va: 0x0000_0000_1000_0008,
            rkey: 0x0000_1234,
            swap_add: 0xffff_ffff_ffff_ffff,
            compare: 0,
        },
    );
    atomic_ack(&mut cap, 3, &mut b, psn, 4, 42);
    cap.into_pcap()
}

fn fx_rc_ack() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, mut b) = rc_pair(V4, 0x00_0100, 0x00_c000);
    let mut msn = 0;
    // ACKs carrying credit codes 31 (invalid), 5 (6 credits), 0, 17 (384).
    for (seed, credit) in [(0x51u8, 0x1Fu8), (0x52, 5), (0x53, 0), (0x54, 17)] {
        let p = message(
            &mut cap,
            &mut a,
            Transport::Rc,
            Msg::Send,
            &pattern(seed, 16),
            false,
        );
        msn += 1;
        ack(&mut cap, 4, &mut b, p, credit, msn);
    }
    // RNR NAKs: the responder has no receive WQE; the requester retries the same
    // PSN after each timer. Timer codes 0 (655.36 ms), 1 (0.01 ms), 14 (1.28 ms),
    // 20 (10.24 ms), 31 (491.52 ms).
    let psn = a.psn;
    for timer in [0u8, 1, 14, 20, 31] {
        let mut retry = a;
        retry.psn = psn;
        message(
            &mut cap,
            &mut retry,
            Transport::Rc,
            Msg::Send,
            &pattern(0x55, 16),
            false,
        );
        a.ident = retry.ident;
        ack(&mut cap, 4, &mut b, psn, 0x20 | timer, msn);
    }
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x55, 16),
        false,
    );
    msn += 1;
    ack(&mut cap, 4, &mut b, p, 0x1F, msn);
    // NAK PSN sequence error (0x60): one packet is lost, the next arrives; the
    // NAK carries the expected PSN. The requester then goes back.
    let lost = a.next_psn();
    message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x56, 16),
        false,
    );
    ack(&mut cap, 4, &mut b, lost, 0x60, msn);
    // NAK invalid request (0x61), remote access error (0x62), remote operational
    // error (0x63): each ends its own connection, so each uses its own QP pair.
    for (i, syndrome) in [0x61u8, 0x62, 0x63].into_iter().enumerate() {
        let qa = 0x31 + 2 * i as u32;
        let qb = qa + 1;
        let mut a2 = Side::new(HOST_A, HOST_B, V4, qa, qb, 0x00_0500 + 0x100 * i as u32);
        let mut b2 = Side::new(HOST_B, HOST_A, V4, qb, qa, 0);
        let reth = RethRepr {
            va: 0x0000_7f00_3000_0000,
            rkey: 0x0000_0bad + i as u32,
            dma_len: 8,
        };
        let p = message(
            &mut cap,
            &mut a2,
            Transport::Rc,
            Msg::Write(reth),
            &pattern(0x57, 8),
            false,
        );
        ack(&mut cap, 4, &mut b2, p, syndrome, 0);
    }
    cap.into_pcap()
}

fn fx_cnp() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, _) = rc_pair(V4, 0x00_5000, 0);
    // B's notification point: CNPs go out with DSCP 48, ECN Not-ECT.
    let mut np = Side::new(HOST_B, HOST_A, L3::V4 { dscp: 48, ecn: 0 }, QP_B, QP_A, 0);
    let reth = RethRepr {
        va: 0x0000_7f00_4000_0000,
        rkey: 0x0000_4321,
        dma_len: 1024,
    };
    // A write whose packet a switch marked CE (ECN 3) ...
    let mut marked = a;
    marked.l3 = L3::V4 { dscp: 26, ecn: 3 };
    message(
        &mut cap,
        &mut marked,
        Transport::Rc,
        Msg::Write(reth),
        &pattern(0x61, 1024),
        false,
    );
    a.psn = marked.psn;
    a.ident = marked.ident;
    // ... makes B send a CNP to A's QP.
    cnp_frame(&mut cap, 2, &mut np, QP_A);
    // An unmarked write: no CNP.
    message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Write(reth),
        &pattern(0x62, 1024),
        false,
    );
    // Another marked packet, after B's min_time_between_cnps (4 us): another CNP.
    marked.psn = a.psn;
    marked.ident = a.ident;
    message(
        &mut cap,
        &mut marked,
        Transport::Rc,
        Msg::Write(reth),
        &pattern(0x63, 1024),
        false,
    );
    cnp_frame(&mut cap, 5, &mut np, QP_A);
    // A CNP for a second flow (QP 0x000abc) with P_Key 0x8001.
    np.pkey = 0x8001;
    cnp_frame(&mut cap, 7, &mut np, 0xabc);
    cap.into_pcap()
}

fn mac_control(cap: &mut Cap, gap_us: u64, m: MacControl) {
    let mut buf = vec![0u8; 60];
    let n = m.emit(HOST_B.mac, &mut buf).expect("60-byte buffer");
    buf.truncate(n);
    cap.push(gap_us, buf);
}

fn fx_pfc() -> Vec<u8> {
    let mut cap = Cap::new();
    // XOFF priority 3 for 0xFFFF quanta, then XON priority 3.
    mac_control(&mut cap, 1, MacControl::Pfc(PfcRepr::xoff(3, 0xFFFF)));
    mac_control(&mut cap, 100, MacControl::Pfc(PfcRepr::xon(3)));
    // Two priorities: 3 for 0xFFFF quanta, 4 for 0x1234 quanta.
    let mut two = PfcRepr::xoff(3, 0xFFFF);
    two.set(4, 0x1234);
    mac_control(&mut cap, 100, MacControl::Pfc(two));
    // XON for both.
    let mut on = PfcRepr::xon(3);
    on.set(4, 0);
    mac_control(&mut cap, 100, MacControl::Pfc(on));
    // Every priority, different timers (0x0100 * (p + 1)).
    let mut all = PfcRepr::default();
    for p in 0..8u8 {
        all.set(p, 0x0100 * (p as u16 + 1));
    }
    mac_control(&mut cap, 100, MacControl::Pfc(all));
    cap.into_pcap()
}

fn fx_pause() -> Vec<u8> {
    let mut cap = Cap::new();
    mac_control(&mut cap, 1, MacControl::Pause(PauseRepr { quanta: 0xFFFF }));
    mac_control(&mut cap, 100, MacControl::Pause(PauseRepr { quanta: 0 }));
    mac_control(
        &mut cap,
        100,
        MacControl::Pause(PauseRepr { quanta: 0x0100 }),
    );
    cap.into_pcap()
}

fn fx_ipv6() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, mut b) = rc_pair(V6, 0x00_6000, 0x00_d000);
    // SEND ONLY 21 bytes (pad 3), ACK (AETH).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x71, 21),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 1);
    // WRITE ONLY 13 bytes with RETH (pad 3).
    let reth = RethRepr {
        va: 0x0000_7f00_1234_5000,
        rkey: 0x00ab_cdef,
        dma_len: 13,
    };
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Write(reth),
        &pattern(0x72, 13),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 2);
    // WRITE FIRST + LAST WITH IMMEDIATE (1026 bytes, pad 2).
    let reth = RethRepr {
        va: 0x0000_7f00_1234_6000,
        rkey: 0x00ab_cdef,
        dma_len: 1026,
    };
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::WriteImm(reth, 0x6666_0001),
        &pattern(0x73, 1026),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 3);
    // READ of 1500 bytes: FIRST + LAST (AETH on both).
    let psn = read_request(&mut cap, &mut a, 0x0000_7f00_2000_0000, 0x0000_1234, 1500);
    read_response(&mut cap, &mut b, psn, &pattern(0x74, 1500), 0x1F, 4);
    // COMPARE_SWAP and its ATOMIC ACKNOWLEDGE.
    let psn = atomic(
        &mut cap,
        &mut a,
        Opcode::RC_COMPARE_SWAP,
        AtomicEthRepr {
            va: 0x0000_0000_1000_0000,
            rkey: 0x0000_1234,
            swap_add: 5,
            compare: 0,
        },
    );
    atomic_ack(&mut cap, 3, &mut b, psn, 5, 0);
    // A SEND of 15 bytes (pad 1) answered by an RNR NAK (timer code 14, 1.28 ms).
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x75, 15),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x2E, 5);
    // UD SEND ONLY and SEND ONLY WITH IMMEDIATE (DETH).
    let mut u = Side::new(HOST_A, HOST_B, V6, 0xabc, 0x77, 0x00_0010);
    ud_send(
        &mut cap,
        &mut u,
        0x1111_1111,
        0xabc,
        None,
        &pattern(0x76, 50),
    );
    ud_send(
        &mut cap,
        &mut u,
        0x1111_1111,
        0xabc,
        Some(0xcafe_f00d),
        &pattern(0x77, 7),
    );
    // A CNP over IPv6.
    let mut np = Side::new(
        HOST_B,
        HOST_A,
        L3::V6 {
            dscp: 48,
            ecn: 0,
            flow_label: 0,
        },
        QP_B,
        QP_A,
        0,
    );
    cnp_frame(&mut cap, 5, &mut np, QP_A);
    cap.into_pcap()
}

fn fx_vlan() -> Vec<u8> {
    let mut cap = Cap::new();
    // ConnectX-style: VLAN 100 with PCP 3, MigReq set, P_Key 0xFFFF.
    let tag = VlanTag {
        pcp: 3,
        dei: false,
        vid: 100,
    };
    let (mut a, mut b) = rc_pair(V4, 0x00_7000, 0x00_e000);
    for s in [&mut a, &mut b] {
        s.vlan = Some(tag);
        s.migreq = true;
    }
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x81, 16),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 1);
    let reth = RethRepr {
        va: 0x0000_7f00_5000_0000,
        rkey: 0x0000_7777,
        dma_len: 1030,
    };
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Write(reth),
        &pattern(0x82, 1030),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 2);
    let psn = read_request(&mut cap, &mut a, 0x0000_7f00_5000_0000, 0x0000_7777, 33);
    read_response(&mut cap, &mut b, psn, &pattern(0x83, 33), 0x1F, 3);
    // A priority-tagged frame (VID 0, PCP 3) with P_Key 0x8001, and a UD send
    // with DEI set on VLAN 4094.
    let (mut c, _) = rc_pair(V4, 0x00_7100, 0);
    c.vlan = Some(VlanTag {
        pcp: 3,
        dei: false,
        vid: 0,
    });
    c.pkey = 0x8001;
    c.dest_qp = 0x13;
    message(
        &mut cap,
        &mut c,
        Transport::Rc,
        Msg::Send,
        &pattern(0x84, 14),
        false,
    );
    let mut u = Side::new(HOST_A, HOST_B, V4, 0xabc, 0x77, 0x00_0020);
    u.vlan = Some(VlanTag {
        pcp: 5,
        dei: true,
        vid: 4094,
    });
    ud_send(
        &mut cap,
        &mut u,
        0x1111_1111,
        0xabc,
        None,
        &pattern(0x85, 40),
    );
    cap.into_pcap()
}

fn fx_arp() -> Vec<u8> {
    let mut cap = Cap::new();
    let req = ArpRepr::request(HOST_A.mac, HOST_A.ip4, HOST_B.ip4);
    let rep = req.reply_from(HOST_B.mac);
    for (gap, r) in [(1, req), (30, rep)] {
        let mut buf = vec![0u8; 60];
        let n = r.emit_frame(&mut buf).expect("60-byte buffer");
        buf.truncate(n);
        cap.push(gap, buf);
    }
    cap.into_pcap()
}

fn fx_rocev1() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, mut b) = rc_pair(V1, 0x00_0f00, 0x00_f000);
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x91, 23),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 1);
    let reth = RethRepr {
        va: 0x0000_7f00_6000_0000,
        rkey: 0x0000_abab,
        dma_len: 1100,
    };
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::WriteImm(reth, 0x0101_0101),
        &pattern(0x92, 1100),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x1F, 2);
    let psn = read_request(&mut cap, &mut a, 0x0000_7f00_6000_0000, 0x0000_abab, 10);
    read_response(&mut cap, &mut b, psn, &pattern(0x93, 10), 0x1F, 3);
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0x94, 19),
        false,
    );
    ack(&mut cap, 4, &mut b, p, 0x60, 3);
    let mut u = Side::new(HOST_A, HOST_B, V1, 0xabc, 0x77, 0x00_0030);
    ud_send(
        &mut cap,
        &mut u,
        0x1111_1111,
        0xabc,
        Some(0x0000_0042),
        &pattern(0x95, 100),
    );
    cap.into_pcap()
}

/// The demo conversation: one RC connection between A (QP 0x11) and B (QP 0x12).
fn fx_rc_mix() -> Vec<u8> {
    let mut cap = Cap::new();
    let (mut a, mut b) = rc_pair(V4, 0x3c_1f00, 0x81_0000);
    // 1. RDMA WRITE of 2999 bytes into B's buffer: FIRST, MIDDLE, LAST (951, pad 1).
    let reth = RethRepr {
        va: 0x0000_7f3a_c000_0000,
        rkey: 0x0004_2d01,
        dma_len: 2999,
    };
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Write(reth),
        &pattern(0xa1, 2999),
        false,
    );
    ack(&mut cap, 6, &mut b, p, 0x1F, 1);
    // 2. RDMA READ of 2502 bytes from B: request, then FIRST, MIDDLE, LAST (454,
    //    pad 2).
    let psn = read_request(&mut cap, &mut a, 0x0000_7f3a_c000_1000, 0x0004_2d01, 2502);
    cap.t_us += 5;
    read_response(&mut cap, &mut b, psn, &pattern(0xa2, 2502), 0x1F, 2);
    // 3. SEND ONLY of 45 bytes (pad 3), solicited; ACK.
    let p = message(
        &mut cap,
        &mut a,
        Transport::Rc,
        Msg::Send,
        &pattern(0xa3, 45),
        true,
    );
    ack(&mut cap, 6, &mut b, p, 0x1F, 3);
    // 4. FETCH_ADD 1 on a counter at B; ATOMIC ACKNOWLEDGE with the old value.
    let psn = atomic(
        &mut cap,
        &mut a,
        Opcode::RC_FETCH_ADD,
        AtomicEthRepr {
            va: 0x0000_7f3a_c000_2000,
            rkey: 0x0004_2d01,
            swap_add: 1,
            compare: 0,
        },
    );
    atomic_ack(&mut cap, 6, &mut b, psn, 4, 7);
    // 5. B answers with a SEND WITH IMMEDIATE of 1030 bytes (FIRST + LAST, pad 2);
    //    A ACKs.
    let p = message(
        &mut cap,
        &mut b,
        Transport::Rc,
        Msg::SendImm(0x0000_0007),
        &pattern(0xa4, 1030),
        true,
    );
    ack(&mut cap, 6, &mut a, p, 0x1F, 1);
    cap.into_pcap()
}

/// Every fixture, in the order of [`crate::NAMES`].
pub(crate) fn all() -> Vec<Fixture> {
    let f = |name, description, pcap| Fixture {
        name,
        description,
        pcap,
    };
    vec![
        f(
            "rc_send",
            "RC SEND FIRST/MIDDLE/LAST, ONLY, LAST/ONLY WITH IMMEDIATE, LAST/ONLY WITH INVALIDATE, with ACKs (IPv4)",
            fx_rc_send(),
        ),
        f(
            "uc_send",
            "UC SEND FIRST/MIDDLE/LAST/ONLY (+IMM) and UC RDMA WRITE FIRST/MIDDLE/LAST/ONLY (+IMM) (IPv4)",
            fx_uc_send(),
        ),
        f(
            "ud_send",
            "UD SEND ONLY and SEND ONLY WITH IMMEDIATE with DETH, both directions (IPv4)",
            fx_ud_send(),
        ),
        f(
            "rc_write",
            "RC RDMA WRITE FIRST/MIDDLE/LAST, LAST WITH IMMEDIATE, ONLY, ONLY WITH IMMEDIATE, PSN wrap, ACKs (IPv4)",
            fx_rc_write(),
        ),
        f(
            "rc_read",
            "RC RDMA READ REQUEST and READ RESPONSE FIRST/MIDDLE/LAST/ONLY (IPv4)",
            fx_rc_read(),
        ),
        f(
            "rc_atomic",
            "RC COMPARE_SWAP, FETCH_ADD and ATOMIC ACKNOWLEDGE (IPv4)",
            fx_rc_atomic(),
        ),
        f(
            "rc_ack",
            "RC ACK with credit codes 31/5/0/17, RNR NAK timers 0/1/14/20/31, NAK 0x60..0x63 (IPv4)",
            fx_rc_ack(),
        ),
        f(
            "cnp",
            "CE-marked RDMA WRITEs and the RoCEv2 CNPs (opcode 0x81, BECN) they cause (IPv4)",
            fx_cnp(),
        ),
        f(
            "pfc",
            "802.1Qbb PFC: XOFF prio 3 (0xFFFF quanta), XON prio 3, prios 3+4, XON 3+4, all 8 prios",
            fx_pfc(),
        ),
        f(
            "pause",
            "802.3x PAUSE: 0xFFFF quanta, 0 (resume), 0x0100 quanta",
            fx_pause(),
        ),
        f(
            "ipv6",
            "RoCEv2 over IPv6: SEND, WRITE (RETH, IMM), READ, atomics, ACK/RNR NAK (AETH), UD (DETH), CNP",
            fx_ipv6(),
        ),
        f(
            "vlan",
            "802.1Q-tagged RoCEv2 (VLAN 100 PCP 3, MigReq; VID 0; DEI on VLAN 4094) (IPv4)",
            fx_vlan(),
        ),
        f(
            "arp",
            "ARP request from A for B's address and B's reply",
            fx_arp(),
        ),
        f(
            "rocev1",
            "RoCEv1 (EtherType 0x8915, GRH): SEND, WRITE WITH IMMEDIATE, READ, ACK, NAK, UD SEND WITH IMMEDIATE",
            fx_rocev1(),
        ),
        f(
            "rc_mix",
            "One RC connection: 3-packet WRITE, READ with 3-packet response, SEND, FETCH_ADD, SEND WITH IMMEDIATE back, ACKs (IPv4)",
            fx_rc_mix(),
        ),
    ]
}
