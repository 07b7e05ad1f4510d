//! Interop with real RoCEv2 captures: our transport engine replays both
//! sides of public captures made by Linux rxe (soft-RoCE) and NVIDIA ConnectX
//! NICs, and must answer, and ask, as they did.
//!
//! The captures are read in place from `../shared/captures` (or
//! `$ROCE_SHARED_DIR/captures`); they are never copied into the repository
//! (their licences do not allow it; see `../shared/captures/MANIFEST.md`).
//! The oracle is the capture itself: every value compared comes from the
//! captured frames (QPNs, PSNs, R_Keys, VAs, payload bytes, MSNs, atomic
//! original values), never from our own output.
//!
//! Each capture is split into request flows: the request packets (IBTA 1.7
//! §9.2.1 Table 36, `is_request`) from one IP to one destination QPN. For
//! every flow two replays run:
//!
//! (a) Responder. A [`Device`] with the responder side's MAC and IP, the
//!     flow's QP created under the captured destination QPN, its peer the
//!     requester's IP/QPN/MAC, `rq_psn` the first request PSN, the path MTU
//!     the capture's segmentation shows, MRs registered under the captured
//!     R_Keys and VAs (READ memory preloaded with the captured READ response
//!     bytes, atomic cells with the first ATOMIC ACKNOWLEDGE's original value
//!     of each cell) and enough receive WQEs. Every captured request frame of
//!     the flow is fed to `handle_frame` in capture order, with the capture
//!     time as `now`; after each, `poll_transmit` is drained. What we send is
//!     compared with the captured responses: addressing, opcode, QPN, PSN,
//!     AETH syndrome class and MSN, READ response segmentation, length and
//!     bytes, ATOMIC original values; then the memory (WRITEs and atomics
//!     applied to a model of the MR) and the receive completions (UC/UD/RC
//!     SENDs: length, data, source QPN, Q_Key from the DETH, UD's 40-byte GRH
//!     area holding the captured IPv4 header in bytes 20..40).
//!
//! (b) Requester. A [`Device`] with the requester side's MAC and IP, the QP
//!     under the requester QPN, `sq_psn` the first request PSN, and the same
//!     operations posted (same sizes, payload bytes, R_Keys, VAs, atomic
//!     operands, immediates, UD Q_Key). The capture is then replayed in lock
//!     step: at each captured request we take one frame from `poll_transmit`
//!     and compare it field by field (opcode, PSN, QPN, AckReq, SE, PadCnt,
//!     RETH va/rkey/length, AtomicETH, DETH, ImmDt, payload bytes,
//!     addressing); at each captured response we hand the captured frame to
//!     `handle_frame`. At the end nothing else may be waiting to be sent (no
//!     retransmission), every WQE must have completed once, in order, with
//!     SUCCESS, READ data and atomic results must be those captured, and the
//!     QP must be idle (no timer) and not in ERR.
//!
//! Two more replays use the real frames as a lossy network would repeat them:
//!
//! (c) Duplicate requests (RC). After (a), every captured request of the flow
//!     is fed again: nothing may execute twice (memory and receive queue
//!     unchanged), SEND/WRITE packets are ACKed again with rxe's
//!     `ack_psn − 1` (the last SEND/WRITE/ATOMIC PSN, never a READ's), READs
//!     are answered again from the responder resources with exactly the
//!     captured PSNs, bytes and MSNs, and atomics return the captured
//!     original values and MSNs without touching the cells (IBTA 1.7
//!     §9.7.4.1.4).
//! (d) Duplicate responses. (b) again, with every captured response handed
//!     over twice in a row: the copies are counted as `resp_duplicate` and
//!     change nothing (each WQE still completes exactly once).
//!
//! Where rxe and ConnectX differ, and which we follow:
//! - AETH credits: rxe sends 0x1F ("invalid"), ConnectX real credit counts
//!   (1..4 in ib_send_bw, 0 in the WRITE-only flows of rdma1). We send 0x1F
//!   like rxe and compare only the syndrome class (ACK / RNR NAK / NAK code)
//!   and the MSN. As a requester we ignore the credit field (ConnectX's
//!   credit 0 does not stall us; rxe ignores it too).
//! - BTH MigReq: rxe sends 0, ConnectX 1 (APM "migrated"). We send 0, as rxe;
//!   the bit is compared against 0 and otherwise ignored.
//! - AckReq: both set it on the last packet of every RC message and on every
//!   READ and atomic request; so do we, and every captured AckReq bit is
//!   compared (none of these messages is long enough for rxe's extra AckReq
//!   every 64 packets to show).
//! - ACK coalescing: we drain `poll_transmit` after every request, so we ACK
//!   every packet that has AckReq. A NIC may ACK fewer (a later cumulative
//!   ACK covers the earlier PSNs). Our ACK set must contain every captured
//!   ACK whose PSN had AckReq (with the same MSN); an extra ACK of ours is
//!   accepted only for an AckReq'd PSN that a later captured ACK covers; and
//!   the last acknowledged PSN and MSN must agree. (In these captures both
//!   NICs ACKed every AckReq'd packet, so the sets are equal.)
//! - UDP source port: for RC and UC, rxe and ConnectX both use the kernel's
//!   `rdma_flow_label_to_udp_sport(rdma_calc_flow_label(lqpn, rqpn))`, the
//!   same port in both directions; so do we, and it is compared. For UD, rxe
//!   sends from the port it chose at QP creation, `0xC000 + hash_32(qpn, 14)`
//!   (ROCEV2-DIGEST §1; checked here against the capture: 55194 for QPN
//!   0x23, 65320 for 0x22), while we derive it from the address vector like
//!   a connected QP (flow label of the QPN pair). The source port is the
//!   sender's choice (it only spreads flows over ECMP paths); ours is only
//!   required to be in 0xC000..=0xFFFF.
//! - IP header fields besides the addresses (TTL, identification, DSCP/ECN)
//!   are not compared.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use roce::capture::{
    self, all_remote, messages, preload, regions, rel, responses_of, AethClass, Capture, Msg, Pkt,
    QpSetup, Segmentation,
};
use roce_stack::testing::poll_all;
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, Mtu, NetworkHdrType, QpCap, QpInitAttr, QpState, QpType, RecvWr, Sge,
    UdDest, WcFlags, WcOpcode, WcStatus, WrOpcode,
};
use roce_stack::wire::opcode::OpKind;
use roce_stack::wire::Position;

/// RoCEv2 UDP destination port (IANA; RoCEv2 Annex A17.2).
const ROCEV2_PORT: u16 = 4791;
/// The AETH syndrome we send in every ACK: ACK, credit code 31 ("invalid"),
/// as rxe (IBTA 1.7 §9.7.5.2, Table 44).
const ACK_NO_CREDIT: u8 = 0x1F;
/// Length of the GRH area at the start of a UD receive buffer (ROCEV2-DIGEST
/// §5, `union rdma_network_hdr`: over IPv4 the IPv4 header fills its last 20
/// bytes).
const GRH_AREA: usize = 40;

// ---------------------------------------------------------------------------
// Reading the captures (the model `roce replay` uses: `roce::capture`).

/// A capture and its name.
struct Named {
    name: String,
    cap: Capture,
    /// The RoCEv2 frames (RoCEv1 has no UDP header to compare).
    roce: Vec<Pkt>,
}

fn load(name: &str) -> Named {
    let path = common::shared_dir()
        .join("captures")
        .join(format!("{name}.pcap"));
    let cap = Capture::load(&path)
        .unwrap_or_else(|e| panic!("read {} (../shared/captures): {e}", path.display()));
    let roce = cap
        .pkts
        .iter()
        .filter(|p| p.sport.is_some())
        .cloned()
        .collect();
    Named {
        name: name.to_string(),
        cap,
        roce,
    }
}

// ---------------------------------------------------------------------------
// Flows and messages.

/// One direction of one connection: the requests from `req_ip` to QPN
/// `resp_qpn` at `resp_ip`, and the responses coming back.
#[derive(Debug, Clone)]
struct Flow {
    qp_type: QpType,
    req_ip: IpAddr,
    req_mac: [u8; 6],
    resp_ip: IpAddr,
    resp_mac: [u8; 6],
    /// The responder QPN (BTH destination QPN of the requests).
    resp_qpn: u32,
    /// The requester QPN: the destination QPN of the responses (RC), of the
    /// requests going the other way (UC), or the DETH source QPN (UD).
    req_qpn: u32,
    first_psn: u32,
    /// First request PSN of the opposite flow, if there is one.
    reverse_first_psn: Option<u32>,
    /// Path MTU, bytes.
    pmtu: u32,
    /// Request packets ([`Pkt::idx`]: the frame index).
    requests: Vec<Pkt>,
    /// Response packets.
    responses: Vec<Pkt>,
}

fn flows(cap: &Named) -> Vec<Flow> {
    // Requests grouped by (source IP, destination IP, destination QPN), in
    // order of first appearance.
    let mut order: Vec<(IpAddr, IpAddr, u32)> = Vec::new();
    let mut reqs: HashMap<(IpAddr, IpAddr, u32), Vec<Pkt>> = HashMap::new();
    for p in &cap.roce {
        if !p.is_request() || p.qp_type().is_none() {
            continue;
        }
        let key = (p.src, p.dst, p.bth.dest_qp);
        if !reqs.contains_key(&key) {
            order.push(key);
        }
        reqs.entry(key).or_default().push(p.clone());
    }
    let mut out = Vec::new();
    for key in &order {
        let (req_ip, resp_ip, resp_qpn) = *key;
        let requests = reqs[key].clone();
        let first = &requests[0];
        let qp_type = first.qp_type().expect("transport");
        // Responses: RC response opcodes from the responder IP to the
        // requester IP (the requester QPN is their destination QPN).
        let responses: Vec<Pkt> = if qp_type == QpType::Rc {
            cap.roce
                .iter()
                .filter(|p| {
                    !p.is_request()
                        && p.qp_type() == Some(QpType::Rc)
                        && p.src == resp_ip
                        && p.dst == req_ip
                })
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let reverse = order
            .iter()
            .find(|(s, d, _)| *s == resp_ip && *d == req_ip)
            .map(|k| &reqs[k]);
        let req_qpn = match qp_type {
            QpType::Rc => responses
                .first()
                .map(|p| p.bth.dest_qp)
                .or_else(|| reverse.map(|r| r[0].bth.dest_qp))
                .expect("RC flow: no response or reverse flow names the requester QPN"),
            QpType::Uc => reverse
                .map(|r| r[0].bth.dest_qp)
                .expect("UC flow: no reverse flow names the requester QPN"),
            QpType::Ud => first.ext.deth.expect("UD request without DETH").src_qp,
        };
        // Only the responses addressed to the requester QPN belong here.
        let responses = responses
            .into_iter()
            .filter(|p| p.bth.dest_qp == req_qpn)
            .collect();
        let reverse_first_psn = reverse.map(|r| r[0].bth.psn);
        let mut flow = Flow {
            qp_type,
            req_ip,
            req_mac: first.src_mac,
            resp_ip,
            resp_mac: first.dst_mac,
            resp_qpn,
            req_qpn,
            first_psn: first.bth.psn,
            reverse_first_psn,
            pmtu: 0,
            requests,
            responses,
        };
        flow.pmtu = pmtu_of(&flow);
        out.push(flow);
    }
    out
}

/// The path MTU the capture's segmentation shows ([`Segmentation::pmtu`]),
/// held to what these captures must show: at most one segment size, an IB
/// MTU; when no message was segmented, 1024 (the active MTU of the
/// 1500-byte Ethernets these captures ran on) or the smallest IB MTU that
/// holds the largest payload.
fn pmtu_of(flow: &Flow) -> u32 {
    let seg = Segmentation::of(flow.requests.iter().chain(&flow.responses));
    assert!(
        seg.sizes.len() <= 1,
        "{flow:?}: several segment sizes {:?}",
        seg.sizes
    );
    assert!(seg.max_payload <= 4096, "payload larger than 4096");
    let (pmtu, _) = seg.pmtu();
    assert!(
        Mtu::from_bytes(pmtu as usize).is_some(),
        "PMTU {pmtu} is not an IB MTU"
    );
    pmtu
}

/// The messages of a flow ([`messages`]), held to what these captures
/// show: every message starts with a FIRST or ONLY packet, no PSN repeats,
/// and the PSNs are consecutive (no loss, no retransmission); the replays
/// rely on it.
fn flow_messages(flow: &Flow) -> Vec<Msg> {
    let out = messages(&flow.requests);
    for m in &out {
        let p = &flow.requests[m.pkts[0]];
        assert!(
            matches!(p.position(), Position::First | Position::Only),
            "frame {}: MIDDLE/LAST first",
            p.number()
        );
    }
    let grouped: usize = out.iter().map(|m| m.pkts.len()).sum();
    assert_eq!(grouped, flow.requests.len(), "a request PSN repeats");
    let mut psn = flow.first_psn;
    for m in &out {
        assert_eq!(
            m.first_psn, psn,
            "PSN gap before message at {}",
            m.first_psn
        );
        psn = psn.wrapping_add(m.npsn(flow.pmtu)) & 0x00FF_FFFF;
    }
    out
}

/// The captured response packets of a READ or atomic message, by PSN.
fn captured_responses_of<'a>(flow: &'a Flow, m: &Msg) -> Vec<&'a Pkt> {
    responses_of(m, &flow.responses, flow.pmtu)
}

// ---------------------------------------------------------------------------
// Device setup.

fn av(ip: IpAddr, mac: [u8; 6]) -> AddressVector {
    AddressVector {
        dgid: Gid::from_ip(ip),
        dmac: mac,
        hop_limit: 64,
        ..AddressVector::default()
    }
}

/// A device at `ip`/`mac` on an Ethernet whose active IB MTU is `pmtu`, with
/// one PD and one CQ, and one QP `qpn` brought to RTS towards `peer`.
struct Side {
    dev: Device,
    pd: u32,
    cq: u32,
    qpn: u32,
}

#[allow(clippy::too_many_arguments)]
fn side(
    qp_type: QpType,
    ip: IpAddr,
    mac: [u8; 6],
    pmtu: u32,
    qpn: u32,
    peer: AddressVector,
    peer_qpn: u32,
    rq_psn: u32,
    sq_psn: u32,
    qkey: u32,
    depth: u32,
) -> Side {
    let mut dev = capture::device(ip, mac, pmtu);
    assert_eq!(dev.active_mtu().bytes() as u32, pmtu);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(4 * depth as usize + 64);
    let init = QpInitAttr {
        qp_type,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: depth + 16,
            max_recv_wr: depth + 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let got = dev
        .create_qp_with_qpn(pd, &init, qpn)
        .expect("create_qp_with_qpn");
    assert_eq!(got, qpn);
    QpSetup {
        qp_type,
        qpn,
        av: peer,
        peer_qpn,
        rq_psn,
        sq_psn,
        mtu: Mtu::from_bytes(pmtu as usize).expect("IB MTU"),
        qkey,
    }
    .bring_up(&mut dev)
    .unwrap_or_else(|(step, e)| panic!("{step}: {e:?}"));
    Side { dev, pd, cq, qpn }
}

/// Run due timers, then take one frame from `poll_transmit`.
fn transmit_one(dev: &mut Device, now: Instant) -> Option<Pkt> {
    if dev.poll_timeout().is_some_and(|t| t <= now) {
        dev.handle_timeout(now);
    }
    let mut buf = vec![0u8; 16384];
    let n = dev.poll_transmit(now, &mut buf)?;
    Some(Pkt::parse(0, &buf[..n]).expect("our frame parses strictly (ICRC ok)"))
}

/// rxe's UDP source port of a QP before any address vector is applied:
/// `0xC000 + (hash_32(qpn, 14) & 0x3FFF)`, `hash_32(v, b) = (v × 0x61C88647
/// mod 2^32) >> (32 − b)` (ROCEV2-DIGEST §1, Linux `rxe_qp.c`).
fn rxe_initial_sport(qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x61C8_8647) >> (32 - 14);
    0xC000 + (h & 0x3FFF) as u16
}

/// The counters that must stay 0 in a clean replay (no loss, no error).
const CLEAN_COUNTERS: &[&str] = &[
    "rx_parse_drops",
    "rx_qp_not_found",
    "rx_qp_bad_state",
    "rx_opcode_qp_mismatch",
    "rx_pkey_mismatch",
    "rx_addr_mismatch",
    "out_of_sequence",
    "packet_seq_err",
    "duplicate_request",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "implied_nak_seq_err",
    "rcvd_rnr_err",
    "send_rnr_err",
    "retry_exceeded_err",
    "seq_nak_sent",
    "resp_invalid_request",
    "resp_remote_access_error",
    "resp_remote_operational_error",
    "resp_unexpected",
    "resp_duplicate",
    "dup_no_resource",
    "qkey_violation",
    "ud_len_err",
    "rx_no_rwqe",
    "uc_dropped",
    "cq_overrun",
    "rx_dmac_mismatch",
    "rx_vlan_mismatch",
    "rx_other_ethertype",
    "rx_other_ip_protocol",
    "rx_other_udp_port",
    "resp_msn_backwards",
    "resp_msn_skipped",
];

fn assert_clean(ctx: &str, dev: &Device, qpn: u32) {
    for name in CLEAN_COUNTERS {
        assert_eq!(
            dev.counters().get(name),
            Some(0),
            "{ctx}: counter {name}: {:?}",
            dev.counters()
        );
    }
    let qp = dev.qp(qpn).expect("qp");
    assert_eq!(qp.state(), QpState::Rts, "{ctx}: QP state");
    assert_eq!(qp.sq_outstanding(), 0, "{ctx}: send queue not empty");
}

// ---------------------------------------------------------------------------
// Comparisons.

/// Addressing of a frame we sent from `from` to `to`.
fn check_addressing(ctx: &str, ours: &Pkt, theirs: &Pkt, compare_sport: bool) {
    assert_eq!(ours.src_mac, theirs.src_mac, "{ctx}: source MAC");
    assert_eq!(ours.dst_mac, theirs.dst_mac, "{ctx}: destination MAC");
    assert_eq!(ours.src, theirs.src, "{ctx}: source IP");
    assert_eq!(ours.dst, theirs.dst, "{ctx}: destination IP");
    assert_eq!(ours.dport, Some(ROCEV2_PORT), "{ctx}: UDP destination port");
    assert_eq!(theirs.dport, Some(ROCEV2_PORT), "{ctx}: captured UDP dport");
    if compare_sport {
        assert_eq!(ours.sport, theirs.sport, "{ctx}: UDP source port");
    } else {
        assert!(
            ours.sport.is_some_and(|p| p >= 0xC000),
            "{ctx}: UDP source port {:?}",
            ours.sport
        );
    }
    // We follow rxe: MigReq 0 (ConnectX sends 1), P_Key 0xFFFF, TVer 0.
    assert!(!ours.bth.migreq, "{ctx}: MigReq");
    assert_eq!(ours.bth.pkey, theirs.bth.pkey, "{ctx}: P_Key");
    assert_eq!(ours.bth.tver, theirs.bth.tver, "{ctx}: TVer");
}

/// A response of ours against the captured one with the same PSN.
fn check_response(ctx: &str, ours: &Pkt, theirs: &Pkt) {
    let ctx = format!(
        "{ctx}: response PSN {} (frame {})",
        theirs.bth.psn,
        theirs.number()
    );
    assert_eq!(ours.name(), theirs.name(), "{ctx}: opcode");
    assert_eq!(ours.bth.dest_qp, theirs.bth.dest_qp, "{ctx}: QPN");
    assert_eq!(ours.bth.psn, theirs.bth.psn, "{ctx}: PSN");
    assert_eq!(ours.bth.ack_req, theirs.bth.ack_req, "{ctx}: AckReq");
    assert_eq!(ours.pad, theirs.pad, "{ctx}: PadCnt");
    match (ours.ext.aeth, theirs.ext.aeth) {
        (Some(o), Some(t)) => {
            assert_eq!(
                AethClass::of(o.syndrome),
                AethClass::of(t.syndrome),
                "{ctx}: AETH"
            );
            if AethClass::of(o.syndrome) == AethClass::Ack {
                assert_eq!(o.syndrome, ACK_NO_CREDIT, "{ctx}: our credit field");
            }
            assert_eq!(o.msn, t.msn, "{ctx}: MSN");
        }
        (o, t) => assert_eq!(o.is_some(), t.is_some(), "{ctx}: AETH presence"),
    }
    assert_eq!(
        ours.ext.atomic_ack_eth, theirs.ext.atomic_ack_eth,
        "{ctx}: AtomicAckETH original value"
    );
    assert_eq!(
        ours.payload.len(),
        theirs.payload.len(),
        "{ctx}: payload length"
    );
    assert!(ours.payload == theirs.payload, "{ctx}: payload bytes");
}

/// A request of ours against the captured one.
fn check_request(ctx: &str, ours: &Pkt, theirs: &Pkt) {
    let ctx = format!(
        "{ctx}: request frame {} PSN {}",
        theirs.number(),
        theirs.bth.psn
    );
    assert_eq!(ours.name(), theirs.name(), "{ctx}: opcode");
    assert_eq!(ours.bth.dest_qp, theirs.bth.dest_qp, "{ctx}: QPN");
    assert_eq!(ours.bth.psn, theirs.bth.psn, "{ctx}: PSN");
    assert_eq!(ours.bth.ack_req, theirs.bth.ack_req, "{ctx}: AckReq");
    assert_eq!(ours.bth.solicited, theirs.bth.solicited, "{ctx}: SE");
    assert_eq!(ours.pad, theirs.pad, "{ctx}: PadCnt");
    assert_eq!(ours.ext.reth, theirs.ext.reth, "{ctx}: RETH");
    assert_eq!(
        ours.ext.atomic_eth, theirs.ext.atomic_eth,
        "{ctx}: AtomicETH"
    );
    assert_eq!(ours.ext.deth, theirs.ext.deth, "{ctx}: DETH");
    assert_eq!(ours.ext.immdt, theirs.ext.immdt, "{ctx}: ImmDt");
    assert_eq!(ours.ext.ieth, theirs.ext.ieth, "{ctx}: IETH");
    assert_eq!(
        ours.payload.len(),
        theirs.payload.len(),
        "{ctx}: payload length"
    );
    assert!(ours.payload == theirs.payload, "{ctx}: payload bytes");
}

// ---------------------------------------------------------------------------
// (a) Responder replay.

#[derive(Debug, Default, Clone, Copy)]
struct ResponderReport {
    fed: usize,
    generated: usize,
    captured: usize,
    /// Our responses equal to a captured one (all compared fields).
    matched: usize,
    /// Our ACKs for AckReq'd PSNs the NIC covered by a later cumulative ACK.
    extra_acks: usize,
    /// Captured ACKs we did not send (NIC-initiated or unsolicited).
    missing_acks: usize,
    completions: usize,
    /// Answers to the duplicate replay (RC).
    duplicates: usize,
}

fn responder(cap: &Named, flow: &Flow) -> ResponderReport {
    let ctx = format!(
        "{} responder {}->{} QPN {:#x}",
        cap.name, flow.req_ip, flow.resp_ip, flow.resp_qpn
    );
    let msgs = flow_messages(flow);
    let nrecv = msgs.iter().filter(|m| m.needs_recv()).count() as u32;
    let qkey = msgs.iter().find_map(|m| m.deth).map_or(0, |d| d.qkey);
    let mut s = side(
        flow.qp_type,
        flow.resp_ip,
        flow.resp_mac,
        flow.pmtu,
        flow.resp_qpn,
        av(flow.req_ip, flow.req_mac),
        flow.req_qpn,
        flow.first_psn,
        flow.reverse_first_psn.unwrap_or(0),
        qkey,
        msgs.len() as u32 + nrecv,
    );

    // Remote-access MRs under the captured R_Keys, with a model of their
    // contents: READ ranges preloaded with the captured READ response bytes,
    // atomic cells with the first original value each shows.
    // The capture must hold every READ response byte and each atomic's
    // original value.
    for m in &msgs {
        let resp = captured_responses_of(flow, m);
        match m.kind {
            OpKind::ReadRequest => {
                let n: usize = resp.iter().map(|p| p.payload.len()).sum();
                let r = m.reth.expect("RETH");
                assert_eq!(n, r.dma_len as usize, "{ctx}: READ data captured");
            }
            OpKind::Atomic => assert!(
                resp.first().and_then(|p| p.ext.atomic_ack_eth).is_some(),
                "{ctx}: captured ATOMIC ACKNOWLEDGE"
            ),
            _ => {}
        }
    }
    let regs = regions(&msgs, &[]);
    let reg_of = |rkey: u32| regs.iter().position(|r| r.rkey == rkey).expect("region");
    let responses: Vec<&Pkt> = flow.responses.iter().collect();
    let mut model = preload(&regs, &msgs, &responses, flow.pmtu).images;
    let mut lkeys = Vec::new();
    for (r, m) in regs.iter().zip(&model) {
        let keys = s
            .dev
            .reg_mr_with_rkey(s.pd, m.clone(), r.va, all_remote(), r.rkey)
            .expect("reg_mr_with_rkey");
        assert_eq!(keys.rkey, r.rkey);
        lkeys.push(keys.lkey);
    }

    // Receive WQEs: one buffer per message that consumes one.
    let slot = msgs.iter().map(|m| m.len()).max().unwrap_or(0) as u64 + GRH_AREA as u64;
    let slot = slot.next_multiple_of(64).max(64);
    let rbuf_iova = 0x7000_0000_0000u64;
    let rmr = s
        .dev
        .reg_mr(
            s.pd,
            vec![0xEE; (slot * nrecv.max(1) as u64) as usize],
            rbuf_iova,
            AccessFlags::LOCAL_WRITE,
        )
        .expect("recv MR");
    for i in 0..nrecv as u64 {
        let sge = [Sge {
            addr: rbuf_iova + i * slot,
            length: slot as u32,
            lkey: rmr.lkey,
        }];
        s.dev
            .post_recv(
                s.qpn,
                &RecvWr {
                    wr_id: 1000 + i,
                    sg_list: &sge,
                },
            )
            .expect("post_recv");
    }

    // Feed every request in capture order; drain after each.
    let mut ours: Vec<Pkt> = Vec::new();
    for p in &flow.requests {
        let at = cap.cap.at(p.idx);
        s.dev.handle_frame(at, &cap.cap.frames[p.idx].data);
        while let Some(o) = transmit_one(&mut s.dev, at) {
            ours.push(o);
        }
    }
    let mut rep = ResponderReport {
        fed: flow.requests.len(),
        generated: ours.len(),
        captured: flow.responses.len(),
        ..ResponderReport::default()
    };

    // Addressing of everything we sent.
    let proto = flow.responses.first().cloned();
    for o in &ours {
        let ctx = format!("{ctx}: our response PSN {}", o.bth.psn);
        assert!(!o.is_request(), "{ctx}: we sent a request");
        assert_eq!(o.bth.dest_qp, flow.req_qpn, "{ctx}: QPN");
        if let Some(t) = &proto {
            check_addressing(&ctx, o, t, true);
        }
    }
    if flow.qp_type != QpType::Rc {
        assert!(ours.is_empty(), "{ctx}: UC/UD never respond");
    }

    // READ responses and ATOMIC ACKNOWLEDGEs: one for one, in order.
    let ours_data: Vec<&Pkt> = ours.iter().filter(|p| p.kind() != OpKind::Ack).collect();
    let cap_data: Vec<&Pkt> = flow
        .responses
        .iter()
        .filter(|p| p.kind() != OpKind::Ack)
        .collect();
    assert_eq!(
        ours_data.len(),
        cap_data.len(),
        "{ctx}: READ responses / ATOMIC ACKs: ours {:?} captured {:?}",
        ours_data
            .iter()
            .map(|p| (p.name(), p.bth.psn))
            .collect::<Vec<_>>(),
        cap_data
            .iter()
            .map(|p| (p.name(), p.bth.psn))
            .collect::<Vec<_>>()
    );
    for (o, t) in ours_data.iter().zip(&cap_data) {
        check_response(&ctx, o, t);
        rep.matched += 1;
    }

    // ACKs: coalescing may differ (see the module docs).
    let base = flow.first_psn;
    let ackreq: BTreeSet<u32> = flow
        .requests
        .iter()
        .filter(|p| p.bth.ack_req)
        .map(|p| rel(p.bth.psn, base))
        .collect();
    let our_acks: BTreeMap<u32, &Pkt> = ours
        .iter()
        .filter(|p| p.kind() == OpKind::Ack)
        .map(|p| (rel(p.bth.psn, base), p))
        .collect();
    let cap_acks: BTreeMap<u32, &Pkt> = flow
        .responses
        .iter()
        .filter(|p| p.kind() == OpKind::Ack)
        .map(|p| (rel(p.bth.psn, base), p))
        .collect();
    assert_eq!(
        our_acks.len(),
        ours.iter().filter(|p| p.kind() == OpKind::Ack).count(),
        "{ctx}: we ACKed a PSN twice"
    );
    // Highest PSN each side acknowledged (ACKs and data responses alike).
    let last_of = |acks: &BTreeMap<u32, &Pkt>, data: &[&Pkt]| {
        acks.keys()
            .copied()
            .chain(data.iter().map(|p| rel(p.bth.psn, base)))
            .max()
    };
    let cap_last = last_of(&cap_acks, &cap_data);
    let our_last = last_of(&our_acks, &ours_data);
    for (r, o) in &our_acks {
        assert!(
            ackreq.contains(r),
            "{ctx}: we ACKed PSN {} without AckReq",
            o.bth.psn
        );
        assert_eq!(
            AethClass::of(o.ext.aeth.expect("AETH").syndrome),
            AethClass::Ack,
            "{ctx}: PSN {}",
            o.bth.psn
        );
        match cap_acks.get(r) {
            Some(t) => {
                check_response(&ctx, o, t);
                rep.matched += 1;
            }
            None => {
                assert!(
                    cap_last.is_some_and(|l| l >= *r),
                    "{ctx}: our ACK for PSN {} is covered by no captured response",
                    o.bth.psn
                );
                rep.extra_acks += 1;
            }
        }
    }
    for (r, t) in &cap_acks {
        if our_acks.contains_key(r) {
            continue;
        }
        assert!(
            !ackreq.contains(r),
            "{ctx}: captured ACK for AckReq'd PSN {} (frame {}) missing from ours",
            t.bth.psn,
            t.number()
        );
        assert!(
            our_last.is_some_and(|l| l >= *r),
            "{ctx}: captured ACK PSN {} not covered by ours",
            t.bth.psn
        );
        rep.missing_acks += 1;
    }
    assert_eq!(our_last, cap_last, "{ctx}: last acknowledged PSN");
    if let (Some((_, o)), Some((_, t))) = (our_acks.last_key_value(), cap_acks.last_key_value()) {
        if o.bth.psn == t.bth.psn {
            assert_eq!(
                o.ext.aeth.map(|a| a.msn),
                t.ext.aeth.map(|a| a.msn),
                "{ctx}: final MSN"
            );
        }
    }

    // Memory: the model with every captured WRITE and atomic applied.
    for m in &msgs {
        match m.kind {
            OpKind::Write => {
                let r = m.reth.expect("RETH");
                if r.dma_len == 0 {
                    continue;
                }
                let k = reg_of(r.rkey);
                let o = (r.va - regs[k].va) as usize;
                model[k][o..o + m.data.len()].copy_from_slice(&m.data);
            }
            OpKind::Atomic => {
                let a = m.atomic.expect("AtomicETH");
                let k = reg_of(a.rkey);
                let o = (a.va - regs[k].va) as usize;
                let cur = u64::from_ne_bytes(model[k][o..o + 8].try_into().unwrap());
                let new = match m.wr_opcode().expect("atomic") {
                    WrOpcode::AtomicCmpAndSwp if cur == a.compare => a.swap_add,
                    WrOpcode::AtomicCmpAndSwp => cur,
                    _ => cur.wrapping_add(a.swap_add),
                };
                model[k][o..o + 8].copy_from_slice(&new.to_ne_bytes());
            }
            _ => {}
        }
    }
    for (k, lkey) in lkeys.iter().enumerate() {
        let mem = s.dev.mr(*lkey).expect("MR").as_slice();
        assert!(
            mem == &model[k][..],
            "{ctx}: memory of R_Key {:#x} differs from the captured WRITEs/atomics",
            regs[k].rkey
        );
    }

    // Receive completions, in order, with the captured data.
    let wcs = poll_all(&mut s.dev, s.cq);
    let recv_msgs: Vec<&Msg> = msgs.iter().filter(|m| m.needs_recv()).collect();
    assert_eq!(wcs.len(), recv_msgs.len(), "{ctx}: receive completions");
    let rmem = s.dev.mr(rmr.lkey).expect("recv MR").as_slice().to_vec();
    for (i, (wc, m)) in wcs.iter().zip(&recv_msgs).enumerate() {
        let ctx = format!("{ctx}: receive {i} (PSN {})", m.first_psn);
        assert_eq!(wc.status, WcStatus::Success, "{ctx}");
        assert_eq!(wc.wr_id, 1000 + i as u64, "{ctx}: wr_id order");
        assert_eq!(wc.qp_num, flow.resp_qpn, "{ctx}: qp_num");
        assert_eq!(wc.imm_data, m.imm.unwrap_or(0), "{ctx}: imm");
        assert_eq!(
            wc.wc_flags.contains(WcFlags::WITH_IMM),
            m.imm.is_some(),
            "{ctx}: WITH_IMM"
        );
        let buf = &rmem[i * slot as usize..(i + 1) * slot as usize];
        match flow.qp_type {
            QpType::Ud => {
                let d = m.deth.expect("DETH");
                assert_eq!(wc.src_qp, d.src_qp, "{ctx}: src_qp from the DETH");
                assert_eq!(wc.opcode, WcOpcode::Recv, "{ctx}");
                assert_eq!(
                    wc.byte_len as usize,
                    GRH_AREA + m.data.len(),
                    "{ctx}: byte_len includes the 40-byte GRH area"
                );
                assert!(wc.wc_flags.contains(WcFlags::GRH), "{ctx}: GRH flag");
                assert_eq!(wc.network_hdr_type, NetworkHdrType::Ipv4, "{ctx}");
                let hdr = &flow.requests[m.pkts[0]].ipv4_header;
                assert_eq!(hdr.len(), 20, "{ctx}: captured IPv4 header");
                assert!(buf[..20].iter().all(|b| *b == 0), "{ctx}: GRH area 0..20");
                assert!(
                    buf[20..40] == hdr[..],
                    "{ctx}: GRH area 20..40 = IPv4 header"
                );
                assert!(
                    buf[GRH_AREA..GRH_AREA + m.data.len()] == m.data[..],
                    "{ctx}: data"
                );
            }
            _ => {
                assert_eq!(wc.byte_len as usize, m.len() as usize, "{ctx}: byte_len");
                if m.kind == OpKind::Send {
                    assert_eq!(wc.opcode, WcOpcode::Recv, "{ctx}");
                    assert!(buf[..m.data.len()] == m.data[..], "{ctx}: data");
                } else {
                    assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm, "{ctx}");
                }
            }
        }
        rep.completions += 1;
    }
    assert_clean(&ctx, &s.dev, s.qpn);
    if flow.qp_type == QpType::Rc {
        rep.duplicates = duplicates(&ctx, cap, flow, &msgs, &mut s, &lkeys, &model);
    }
    rep
}

/// RC duplicates with the real frames: every captured request of the flow is
/// fed again (as a requester retransmitting after lost ACKs would send it).
/// IBTA 1.7 §9.7.4.1.4: nothing executes twice; SEND/WRITE
/// are acknowledged again (we, like rxe, ACK each duplicate with the most
/// recent PSN, ePSN − 1); READs are answered again from the saved responder
/// resource (so the bytes and PSNs must be those captured); atomics get their
/// saved original value back (the captured one) and the cell is not touched
/// again. The AETH MSN of these answers is the current MSN (rxe does the
/// same), i.e. the number of messages of the flow, the capture's last MSN.
fn duplicates(
    ctx: &str,
    cap: &Named,
    flow: &Flow,
    msgs: &[Msg],
    s: &mut Side,
    lkeys: &[u32],
    model: &[Vec<u8>],
) -> usize {
    let ctx = format!("{ctx} (duplicates)");
    let rd_atomic = msgs
        .iter()
        .filter(|m| matches!(m.kind, OpKind::ReadRequest | OpKind::Atomic))
        .count();
    // Every READ/atomic must still have its responder resource (16 here).
    assert!(rd_atomic <= 16, "{ctx}: more READ/atomics than resources");
    let final_msn = msgs.len() as u32 & 0x00FF_FFFF;
    if let Some(last) = flow.responses.last() {
        if let Some(a) = last.ext.aeth {
            assert_eq!(a.msn, final_msn, "{ctx}: captured final MSN");
        }
    }
    // rxe acknowledges a duplicate SEND/WRITE with `ack_psn - 1`: the PSN
    // of the last SEND/WRITE packet or ATOMIC executed, never one of a
    // READ's response PSNs (Linux 4e4c53df5677 "IB/rxe: fix for duplicate
    // request processing and ack psns"); before any, the RQ PSN - 1.
    let last_psn = flow
        .requests
        .iter()
        .rev()
        .find(|p| p.kind() != OpKind::ReadRequest)
        .map_or(flow.first_psn.wrapping_sub(1) & 0x00FF_FFFF, |p| p.bth.psn);
    let at = cap.cap.at(cap.cap.frames.len().saturating_sub(1));
    let mut out = Vec::new();
    for p in &flow.requests {
        s.dev.handle_frame(at, &cap.cap.frames[p.idx].data);
        while let Some(o) = transmit_one(&mut s.dev, at) {
            out.push(o);
        }
    }
    assert_eq!(
        s.dev.counters().duplicate_request,
        flow.requests.len() as u64,
        "{ctx}: duplicate_request"
    );
    assert_eq!(s.dev.counters().dup_no_resource, 0, "{ctx}");
    assert!(
        poll_all(&mut s.dev, s.cq).is_empty(),
        "{ctx}: new completions"
    );
    for (k, lkey) in lkeys.iter().enumerate() {
        let mem = s.dev.mr(*lkey).expect("MR").as_slice();
        assert!(mem == &model[k][..], "{ctx}: memory changed by duplicates");
    }
    let cap_data: Vec<&Pkt> = flow
        .responses
        .iter()
        .filter(|p| p.kind() != OpKind::Ack)
        .collect();
    let out_data: Vec<&Pkt> = out.iter().filter(|p| p.kind() != OpKind::Ack).collect();
    assert_eq!(out_data.len(), cap_data.len(), "{ctx}: READ/atomic answers");
    for (o, t) in out_data.iter().zip(&cap_data) {
        let c = format!("{ctx}: PSN {}", t.bth.psn);
        assert_eq!(o.name(), t.name(), "{c}: opcode");
        assert_eq!(o.bth.psn, t.bth.psn, "{c}: PSN");
        assert_eq!(o.bth.dest_qp, t.bth.dest_qp, "{c}: QPN");
        assert!(o.payload == t.payload, "{c}: payload");
        assert_eq!(o.ext.atomic_ack_eth, t.ext.atomic_ack_eth, "{c}: orig");
        assert_eq!(o.ext.aeth.is_some(), t.ext.aeth.is_some(), "{c}: AETH");
        if let (Some(a), Some(ta)) = (o.ext.aeth, t.ext.aeth) {
            assert_eq!(AethClass::of(a.syndrome), AethClass::Ack, "{c}");
            // A replay carries the MSN of the captured original answer.
            assert_eq!(a.msn, ta.msn, "{c}: MSN of the original response");
        }
    }
    let sw_pkts = flow
        .requests
        .iter()
        .filter(|p| matches!(p.kind(), OpKind::Send | OpKind::Write))
        .count();
    let acks: Vec<&Pkt> = out.iter().filter(|p| p.kind() == OpKind::Ack).collect();
    assert_eq!(
        acks.len(),
        sw_pkts,
        "{ctx}: one ACK per duplicate SEND/WRITE"
    );
    // The MSN through `last_psn` by the IBTA count (a SEND/WRITE at its
    // last PSN, a READ/ATOMIC at its first), and the captured ACK for that
    // PSN, if the capture has one, carries the same.
    let through = rel(last_psn, flow.first_psn);
    let ack_msn = msgs
        .iter()
        .filter(|m| {
            let cp = match m.kind {
                OpKind::ReadRequest | OpKind::Atomic => m.first_psn,
                _ => m.first_psn.wrapping_add(m.npsn(flow.pmtu) - 1),
            };
            through < 0x0080_0000 && rel(cp, flow.first_psn) <= through
        })
        .count() as u32;
    if let Some(t) = flow
        .responses
        .iter()
        .find(|p| p.kind() == OpKind::Ack && p.bth.psn == last_psn)
    {
        assert_eq!(t.ext.aeth.map(|a| a.msn), Some(ack_msn), "{ctx}: captured");
    }
    for a in &acks {
        let aeth = a.ext.aeth.expect("AETH");
        assert_eq!(
            a.bth.psn, last_psn,
            "{ctx}: duplicate ACK PSN = ack_psn - 1"
        );
        assert_eq!(aeth.syndrome, ACK_NO_CREDIT, "{ctx}");
        assert_eq!(aeth.msn, ack_msn, "{ctx}: duplicate ACK MSN as of its PSN");
    }
    assert_eq!(
        s.dev.qp(s.qpn).expect("qp").state(),
        QpState::Rts,
        "{ctx}: QP state"
    );
    out.len()
}

// ---------------------------------------------------------------------------
// (b) Requester replay.

#[derive(Debug, Default, Clone, Copy)]
struct RequesterReport {
    posted: usize,
    emitted: usize,
    matched: usize,
    fed: usize,
    succeeded: usize,
}

/// The requester replay; with `dup_responses` every captured response is
/// handed over twice in a row (a duplicating network): the copy must change
/// nothing (IBTA 1.7 §9.7.5.1: responses for PSNs already acknowledged are
/// ignored) and is counted in `resp_duplicate`.
fn requester(cap: &Named, flow: &Flow, dup_responses: bool) -> RequesterReport {
    let ctx = format!(
        "{} requester{} {}->{} QPN {:#x}",
        cap.name,
        if dup_responses {
            " (responses twice)"
        } else {
            ""
        },
        flow.req_ip,
        flow.resp_ip,
        flow.req_qpn
    );
    let msgs = flow_messages(flow);
    let qkey = msgs.iter().find_map(|m| m.deth).map_or(0, |d| d.qkey);
    let mut s = side(
        flow.qp_type,
        flow.req_ip,
        flow.req_mac,
        flow.pmtu,
        flow.req_qpn,
        av(flow.resp_ip, flow.resp_mac),
        flow.resp_qpn,
        flow.reverse_first_psn.unwrap_or(0),
        flow.first_psn,
        qkey,
        msgs.len() as u32,
    );
    // One local MR: each message's bytes (SEND/WRITE source, READ sink,
    // atomic result) at its own 64-byte aligned offset.
    let (mem, offs) = capture::local_memory(&msgs);
    let iova = 0x10_0000u64;
    let mr = s
        .dev
        .reg_mr(s.pd, mem, iova, AccessFlags::LOCAL_WRITE)
        .expect("local MR");
    for (k, (m, o)) in msgs.iter().zip(&offs).enumerate() {
        let sge = [Sge {
            addr: iova + o,
            length: m.len(),
            lkey: mr.lkey,
        }];
        let mut wr = m.work_request(k as u64, &sge).expect("work request");
        if flow.qp_type == QpType::Ud {
            let d = m.deth.expect("DETH");
            wr.ud = Some(UdDest {
                av: av(flow.resp_ip, flow.resp_mac),
                remote_qpn: flow.resp_qpn,
                remote_qkey: d.qkey,
            });
        }
        s.dev.post_send(s.qpn, &wr).expect("post_send");
    }
    let mut rep = RequesterReport {
        posted: msgs.len(),
        ..RequesterReport::default()
    };

    // Lock step over the capture.
    let req_at: BTreeMap<usize, &Pkt> = flow.requests.iter().map(|p| (p.idx, p)).collect();
    let resp_at: BTreeMap<usize, &Pkt> = flow.responses.iter().map(|p| (p.idx, p)).collect();
    for (i, f) in cap.cap.frames.iter().enumerate() {
        let (at, raw) = (&cap.cap.at(i), &f.data);
        if let Some(t) = req_at.get(&i) {
            let o = transmit_one(&mut s.dev, *at).unwrap_or_else(|| {
                panic!(
                    "{ctx}: nothing to send where the capture has frame {} ({} PSN {}); counters {:?}",
                    t.number(),
                    t.name(),
                    t.bth.psn,
                    s.dev.counters()
                )
            });
            rep.emitted += 1;
            check_request(&ctx, &o, t);
            check_addressing(
                &format!("{ctx}: frame {}", t.number()),
                &o,
                t,
                flow.qp_type != QpType::Ud,
            );
            if flow.qp_type == QpType::Ud {
                // The documented difference: rxe's UD port comes from its
                // own QPN alone.
                assert_eq!(
                    t.sport,
                    Some(rxe_initial_sport(flow.req_qpn)),
                    "{ctx}: captured rxe UD source port"
                );
            }
            rep.matched += 1;
        } else if resp_at.contains_key(&i) {
            if s.dev.poll_timeout().is_some_and(|t| t <= *at) {
                s.dev.handle_timeout(*at);
            }
            s.dev.handle_frame(*at, raw);
            rep.fed += 1;
            if dup_responses {
                s.dev.handle_frame(*at, raw);
            }
        }
    }
    let end = cap.cap.at(cap.cap.frames.len().saturating_sub(1));
    if let Some(extra) = transmit_one(&mut s.dev, end) {
        panic!(
            "{ctx}: we still send {} PSN {} after the capture ends",
            extra.name(),
            extra.bth.psn
        );
    }
    if flow.qp_type == QpType::Rc {
        assert_eq!(s.dev.poll_timeout(), None, "{ctx}: a timer is still armed");
    }

    // Every WQE completed once, in order, with SUCCESS and the captured data.
    let wcs = poll_all(&mut s.dev, s.cq);
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    let exp: Vec<(u64, WcStatus)> = (0..msgs.len() as u64)
        .map(|k| (k, WcStatus::Success))
        .collect();
    assert_eq!(got, exp, "{ctx}: send completions");
    let local = s.dev.mr(mr.lkey).expect("MR").as_slice().to_vec();
    for ((wc, m), o) in wcs.iter().zip(&msgs).zip(&offs) {
        let ctx = format!("{ctx}: WQE {} (PSN {})", wc.wr_id, m.first_psn);
        let op = m.wr_opcode().expect("work request");
        assert_eq!(wc.opcode, op.wc_opcode(), "{ctx}: opcode");
        assert_eq!(wc.byte_len, m.len(), "{ctx}: byte_len");
        let got = &local[*o as usize..][..m.len() as usize];
        match m.kind {
            OpKind::ReadRequest => {
                let data: Vec<u8> = captured_responses_of(flow, m)
                    .iter()
                    .flat_map(|p| p.payload.clone())
                    .collect();
                assert!(got == &data[..], "{ctx}: READ data = captured responses");
            }
            OpKind::Atomic => {
                let orig = captured_responses_of(flow, m)
                    .first()
                    .and_then(|p| p.ext.atomic_ack_eth)
                    .expect("ATOMIC ACK")
                    .orig;
                assert_eq!(
                    got,
                    &orig.to_ne_bytes()[..],
                    "{ctx}: atomic result = captured original value"
                );
            }
            _ => assert!(got == &m.data[..], "{ctx}: source untouched"),
        }
        rep.succeeded += 1;
    }
    let mut c = s.dev.counters().clone();
    if dup_responses {
        assert_eq!(
            c.resp_duplicate, rep.fed as u64,
            "{ctx}: every second copy is a duplicate"
        );
        c.resp_duplicate = 0;
    }
    for name in CLEAN_COUNTERS {
        assert_eq!(c.get(name), Some(0), "{ctx}: counter {name}: {c:?}");
    }
    let qp = s.dev.qp(s.qpn).expect("qp");
    assert_eq!(qp.state(), QpState::Rts, "{ctx}: QP state");
    assert_eq!(qp.sq_outstanding(), 0, "{ctx}: send queue not empty");
    rep
}

// ---------------------------------------------------------------------------
// The captures.

fn interop(name: &str) {
    let cap = load(name);
    let fl = flows(&cap);
    assert!(!fl.is_empty(), "{name}: no request flow");
    let (mut fed, mut gen, mut capd, mut matched) = (0, 0, 0, 0);
    for f in &fl {
        let a = responder(&cap, f);
        let b = requester(&cap, f, false);
        let b2 = requester(&cap, f, true);
        assert_eq!(b2.succeeded, b.succeeded);
        eprintln!(
            "interop {name} {:?} {}->{} QPN {:#x}->{:#x} PMTU {}: responder fed {} requests, \
             generated {} responses ({} captured), matched {}, extra ACKs {}, captured ACKs \
             coalesced by us {}, receive completions {}, answers to the duplicate replay {}; requester posted {} WQEs, emitted {} \
             requests, matched {}, fed {} responses, {} WQEs SUCCESS",
            f.qp_type,
            f.req_ip,
            f.resp_ip,
            f.req_qpn,
            f.resp_qpn,
            f.pmtu,
            a.fed,
            a.generated,
            a.captured,
            a.matched,
            a.extra_acks,
            a.missing_acks,
            a.completions,
            a.duplicates,
            b.posted,
            b.emitted,
            b.matched,
            b.fed,
            b.succeeded
        );
        fed += a.fed + b.fed;
        gen += a.generated + b.emitted;
        capd += a.captured + f.requests.len();
        matched += a.matched + b.matched;
    }
    eprintln!(
        "interop {name}: {} flows, {} frames fed, {} frames generated, {} captured counterparts, \
         {} matched",
        fl.len(),
        fed,
        gen,
        capd,
        matched
    );
}

#[test]
fn interop_linlinw5_pingpong_rc() {
    interop("linlinw5__pingpong_rc");
}

#[test]
fn interop_linlinw5_pingpong_uc() {
    interop("linlinw5__pingpong_uc");
}

#[test]
fn interop_linlinw5_pingpong_ud() {
    interop("linlinw5__pingpong_ud");
}

#[test]
fn interop_linlinw5_rdma_write_bw() {
    interop("linlinw5__rdma_write_bw");
}

#[test]
fn interop_linlinw5_rdma_write_lat() {
    interop("linlinw5__rdma_write_lat");
}

#[test]
fn interop_linlinw5_rdma_read_bw() {
    interop("linlinw5__rdma_read_bw");
}

#[test]
fn interop_linlinw5_rdma_read_lat() {
    interop("linlinw5__rdma_read_lat");
}

#[test]
fn interop_linlinw5_rdma_send_bw() {
    interop("linlinw5__rdma_send_bw");
}

#[test]
fn interop_linlinw5_rdma_atomic_bw() {
    interop("linlinw5__rdma_atomic_bw");
}

#[test]
fn interop_magnate3_ib_send_bw_over_roce() {
    interop("magnate3__doc__ib_send_bw_over_roce");
}

#[test]
fn interop_phdddddd_rdma1() {
    interop("phdddddd__rdma1");
}
