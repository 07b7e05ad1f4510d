//! `roce replay`: play one QP of a capture with the stack and write what it
//! sends, so its answers can be compared with the real device's.
//!
//! The stack takes the place of the QP that `--qp` names (its QPN, as in
//! the BTH destination QPN of the packets sent to it): a [`Device`] is set up
//! as that QP's host was, every captured frame addressed to it is fed to
//! `handle_frame` in capture order through the `pcap` backend
//! ([`roce_io::pcap::PcapIo`]), with the capture time as the clock,
//! and everything the device transmits is written to the output capture,
//! stamped with the time of the frame it answers. The QP acts as:
//!
//! - the **responder** for the requests sent to it (RC: ACKs, READ
//!   responses, ATOMIC ACKNOWLEDGEs; UC/UD receive without answering);
//! - the **requester** for the requests it sent in the capture (unless
//!   `--no-requests`): those messages are posted as work requests before
//!   the first frame, so the device sends them, and the captured responses
//!   to them complete them.
//!
//! # What is inferred from the capture
//!
//! Every value comes from the captured frames; each has an override.
//!
//! | Setting | Inferred from | Override |
//! |---|---|---|
//! | the QP | the only QPN that receives requests (else `--qp` is needed) | `--qp` |
//! | our IP, MAC (and VLAN tag) | destination of the first frame sent to the QP | `--ip`, `--mac` |
//! | peer IP, MAC | source of that frame | `--peer-ip`, `--peer-mac` |
//! | transport (RC/UC/UD) | the opcodes of the frames sent to the QP | — |
//! | peer QPN | the destination QPN of the frames our host sent to the peer whose PSNs best match the frames sent to the QP (ACK/READ response/atomic ACK PSNs are the request PSNs; request PSNs of our requester are the PSNs of the responses); UD: the DETH source QPN | `--peer-qpn` |
//! | expected request PSN (`rq_psn`) | the first request sent to the QP | `--rq-psn` |
//! | first send PSN (`sq_psn`) | the first request the QP sent, else the first response it received | `--sq-psn` |
//! | path MTU | the payload of any FIRST/MIDDLE packet (IBTA 1.7 §9.7.3.1: exactly one PMTU); unsegmented: 1024, or the smallest IB MTU above the largest payload | `--mtu` |
//! | UDP source port | the captured frames the QP sent (so ours are the same) | — |
//! | memory regions | one per R_Key of the RETH / AtomicETH of the requests sent to the QP, covering every VA range they name, registered under that R_Key; READ ranges preloaded with the captured READ response bytes, atomic cells with the first captured original value, the rest zero | `--mr RKEY:VA:LEN` (more regions or wider ones) |
//! | receive WQEs | one per message that consumes one (SEND, WRITE with immediate) | — |
//! | UD Q_Key | the DETH of the requests | — |
//!
//! Frames whose ICRC does not verify are not fed (they are counted).
//!
//! # The comparison
//!
//! The capture is the oracle. Responses: every captured READ response and
//! ATOMIC ACKNOWLEDGE of the QP must be matched, in order, by ours (opcode,
//! PSN, AETH syndrome class and MSN, payload bytes, original value); every
//! captured ACK or NAK by one of ours with the same PSN, syndrome class and
//! MSN (we ACK every packet with AckReq; a NIC may coalesce, so extra ACKs
//! of ours are counted, not failed). The AETH credit field is not compared
//! (rxe sends "invalid", ConnectX real counts). Requests: ours must equal
//! the captured ones in order (opcode, PSN, RETH, AtomicETH, ImmDt, IETH,
//! DETH, payload). Every message the capture delivered to a receive WQE
//! must complete one of ours.
//!
//! A replay that fed no frame (e.g. a `--peer-ip` that matches nothing), or
//! whose capture holds no response, request or received message of the QP,
//! compared nothing: it is reported as such and is not a success (exit
//! status 1). QP0 and QP1 (the SMI and the GSI, whose packets are
//! management datagrams such as RDMA CM's) are refused: no verbs QP plays
//! them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use roce_io::pcap::{self, FrameWriter, PcapIo, TimedFrame};
use roce_io::FrameIo;
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, Mtu, QpCap, QpInitAttr, QpType, RecvWr, Sge, UdDest, Wc, WcStatus,
};
use roce_stack::wire::opcode::OpKind;
use roce_stack::wire::VlanTag;

use crate::capture::{
    self, all_remote, messages, AethClass, Capture, Msg, Pkt, QpSetup, Segmentation,
};

/// What `roce replay` was asked to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// The capture (pcap or pcapng, Ethernet).
    pub capture: PathBuf,
    /// The QP to play, by its QPN (`None`: the only QP that receives
    /// requests).
    pub qp: Option<u32>,
    /// Where to write what the stack sends.
    pub out: Option<PathBuf>,
    /// Our IP (when the QPN exists on both hosts, this picks one).
    pub ip: Option<IpAddr>,
    /// Our MAC.
    pub mac: Option<[u8; 6]>,
    /// The peer's IP.
    pub peer_ip: Option<IpAddr>,
    /// The peer's MAC.
    pub peer_mac: Option<[u8; 6]>,
    /// The peer's QPN.
    pub peer_qpn: Option<u32>,
    /// The first request PSN expected.
    pub rq_psn: Option<u32>,
    /// The first PSN the QP sends.
    pub sq_psn: Option<u32>,
    /// Path MTU.
    pub mtu: Option<Mtu>,
    /// Extra memory regions (R_Key, VA, length).
    pub mrs: Vec<MrSpec>,
    /// Do not re-send the QP's own requests.
    pub no_requests: bool,
}

/// A memory region given on the command line: `RKEY:VA:LEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MrSpec {
    /// R_Key.
    pub rkey: u32,
    /// I/O virtual address of its first byte.
    pub va: u64,
    /// Length, bytes.
    pub len: u64,
}

/// Why a replay could not run (exit status 2).
#[derive(Debug)]
pub enum ReplayError {
    /// Bad arguments, or the capture does not say enough.
    Usage(String),
    /// The capture could not be read or the output written.
    Io(String),
    /// The stack refused the set-up (a verbs call failed).
    Setup(String),
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Usage(m) | ReplayError::Io(m) => f.write_str(m),
            ReplayError::Setup(m) => write!(f, "set-up: {m}"),
        }
    }
}

impl std::error::Error for ReplayError {}

fn usage(m: impl Into<String>) -> ReplayError {
    ReplayError::Usage(m.into())
}

fn setup(what: &str) -> impl Fn(roce_stack::verbs::VerbsError) -> ReplayError + '_ {
    move |e| ReplayError::Setup(format!("{what}: {e}"))
}

/// Parse a number in decimal or, with `0x`, hex.
pub fn parse_num(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("invalid number '{s}' (decimal, or hex with 0x)"))
}

/// Parse a QPN or PSN: 24 bits, decimal or `0x` hex.
pub fn parse_24(s: &str) -> Result<u32, String> {
    match parse_num(s)? {
        v if v <= 0xFF_FFFF => Ok(v as u32),
        v => Err(format!("{v:#x} does not fit in 24 bits")),
    }
}

/// Parse a MAC address `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let mut m = [0u8; 6];
    let mut it = s.split([':', '-']);
    for b in &mut m {
        *b = it
            .next()
            .and_then(|x| u8::from_str_radix(x, 16).ok())
            .ok_or_else(|| format!("invalid MAC '{s}' (expected aa:bb:cc:dd:ee:ff)"))?;
    }
    if it.next().is_some() {
        return Err(format!("invalid MAC '{s}' (expected aa:bb:cc:dd:ee:ff)"));
    }
    Ok(m)
}

/// Parse `RKEY:VA:LEN` (each decimal or `0x` hex).
pub fn parse_mr(s: &str) -> Result<MrSpec, String> {
    let p: Vec<&str> = s.split(':').collect();
    let [k, v, l] = p[..] else {
        return Err(format!(
            "invalid memory region '{s}' (expected RKEY:VA:LEN)"
        ));
    };
    let rkey = u32::try_from(parse_num(k)?).map_err(|_| format!("R_Key '{k}' is over 32 bits"))?;
    let len = parse_num(l)?;
    if len == 0 || len > 1 << 30 {
        return Err(format!("memory region length {len} is not in 1..=1 GiB"));
    }
    Ok(MrSpec {
        rkey,
        va: parse_num(v)?,
        len,
    })
}

fn fmt_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A memory region the replay registers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// R_Key (as captured).
    pub rkey: u32,
    /// I/O virtual address.
    pub va: u64,
    /// Length, bytes.
    pub len: u64,
    /// Bytes preloaded from the capture (READ data, atomic cells).
    pub preloaded: u64,
}

/// The set-up inferred from the capture (and the overrides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Transport.
    pub qp_type: QpType,
    /// The QP played.
    pub qpn: u32,
    /// Its peer.
    pub peer_qpn: u32,
    /// Our IP, MAC.
    pub ip: IpAddr,
    /// Our MAC.
    pub mac: [u8; 6],
    /// The peer's IP.
    pub peer_ip: IpAddr,
    /// The peer's MAC.
    pub peer_mac: [u8; 6],
    /// The 802.1Q tag of the frames to the QP, reused on ours.
    pub vlan: Option<VlanTag>,
    /// The UDP source port the QP used, if it sent anything.
    pub udp_sport: Option<u16>,
    /// Expected PSN of the first request.
    pub rq_psn: u32,
    /// First PSN the QP sends.
    pub sq_psn: u32,
    /// Path MTU, bytes.
    pub pmtu: u32,
    /// UD Q_Key.
    pub qkey: u32,
    /// Remote-access memory regions.
    pub regions: Vec<Region>,
    /// Receive WQEs posted.
    pub recv_wqes: usize,
    /// Messages re-posted as work requests (the QP's own requests).
    pub posted: usize,
    /// How each value was found.
    pub notes: Vec<String>,
}

/// What a replay did and how it compares with the capture.
#[derive(Debug, Clone)]
pub struct ReplayReport {
    /// The set-up.
    pub plan: Plan,
    /// Frames in the capture.
    pub frames: usize,
    /// RoCE frames whose ICRC did not verify (not fed).
    pub bad_frames: usize,
    /// Frames fed to the device.
    pub fed: usize,
    /// Frames the device sent.
    pub sent: usize,
    /// Responses the capture has from the QP.
    pub captured_responses: usize,
    /// Of those, matched by ours.
    pub matched_responses: usize,
    /// ACKs of ours with no captured counterpart (coalesced by the NIC).
    pub extra_acks: usize,
    /// Requests the capture has from the QP.
    pub captured_requests: usize,
    /// Of those, matched by ours.
    pub matched_requests: usize,
    /// What differed (at most 20 lines).
    pub mismatches: Vec<String>,
    /// Mismatches in all.
    pub mismatch_count: usize,
    /// Send work requests that completed successfully / in all.
    pub send_completions: (usize, usize),
    /// Receive completions.
    pub recv_completions: usize,
    /// Device counters that are not zero.
    pub counters: Vec<(&'static str, u64)>,
    /// Frames written to the output capture.
    pub written: u64,
    /// What the capture let us compare: its responses and requests of the
    /// QP, and the messages it delivered to receive WQEs.
    pub compared: usize,
}

impl ReplayReport {
    /// Whether anything was compared and every captured response and
    /// request was matched. A replay that fed no frame, or whose capture
    /// holds nothing of the QP to compare with, is not a success.
    pub fn ok(&self) -> bool {
        self.mismatch_count == 0 && !self.nothing_compared()
    }

    /// Whether the replay had nothing to check: no frame fed, or no
    /// captured response, request or received message of the QP.
    pub fn nothing_compared(&self) -> bool {
        self.fed == 0 || self.compared == 0
    }
}

/// Infer the plan (see the module docs) and the packets in play.
fn infer(opts: &ReplayOptions, sc: &Capture) -> Result<(Plan, Vec<Msg>), ReplayError> {
    let pk = &sc.pkts;
    // The QP.
    let qpn = match opts.qp {
        Some(q) => q,
        None => {
            let mut by: BTreeMap<(u32, IpAddr), usize> = BTreeMap::new();
            for p in pk.iter().filter(|p| p.is_request()) {
                if opts.ip.map_or(true, |ip| ip == p.dst) {
                    *by.entry((p.bth.dest_qp, p.dst)).or_insert(0) += 1;
                }
            }
            match by.len() {
                0 => {
                    return Err(usage(
                        "the capture has no RoCE request to play the responder of",
                    ))
                }
                1 => by.keys().next().map_or(0, |k| k.0),
                _ => {
                    let list: Vec<String> = by
                        .iter()
                        .map(|((q, ip), n)| format!("{q:#x} at {ip} ({n} requests)"))
                        .collect();
                    return Err(usage(format!(
                        "several QPs receive requests: {}; choose one with --qp",
                        list.join(", ")
                    )));
                }
            }
        }
    };
    // The IBTA's special QPs (IBTA 1.7 ch. 13, management model): QP0 is
    // the SMI (unused on RoCE), QP1 the GSI, whose packets are management
    // datagrams (the CM MADs of ch. 12 that RDMA CM sends), answered by the
    // communication manager, not by a QP the verbs create.
    if qpn <= 1 {
        let what = if qpn == 0 {
            "the SMI (QP0)"
        } else {
            "the GSI (QP1): its packets are CM MADs (connection management)"
        };
        return Err(usage(format!(
            "QP {qpn:#x} is {what}, not replayable; give --qp a data QP (the QPNs \
             the CM exchange set up appear as the other destination QPNs)"
        )));
    }
    let to_qp = |p: &&Pkt| p.bth.dest_qp == qpn && opts.ip.map_or(true, |ip| ip == p.dst);
    // The first frame to the QP names both hosts (requests first, as the
    // responder side is the usual subject).
    let first = pk
        .iter()
        .filter(to_qp)
        .find(|p| p.is_request())
        .or_else(|| pk.iter().find(to_qp))
        .ok_or_else(|| {
            usage(format!(
                "no frame of the capture is addressed to QP {qpn:#x}"
            ))
        })?;
    let mut notes = Vec::new();
    let ip = opts.ip.unwrap_or(first.dst);
    let peer_ip = opts.peer_ip.unwrap_or(first.src);
    let mac = opts.mac.unwrap_or(first.dst_mac);
    let peer_mac = opts.peer_mac.unwrap_or(first.src_mac);
    let vlan = first.vlan;
    let qp_type = first
        .qp_type()
        .ok_or_else(|| usage(format!("QP {qpn:#x}: {} is not RC, UC or UD", first.name())))?;
    notes.push(format!(
        "addresses from frame {} (the first to the QP): ours {ip} {}, the peer's {peer_ip} {}",
        first.number(),
        fmt_mac(mac),
        fmt_mac(peer_mac)
    ));
    // Packets to the QP (requests and, as a requester, responses).
    let inbound: Vec<&Pkt> = pk
        .iter()
        .filter(|p| p.bth.dest_qp == qpn && p.dst == ip && p.qp_type() == Some(qp_type))
        .filter(|p| qp_type == QpType::Ud || p.src == peer_ip)
        .collect();
    let requests_in: Vec<&Pkt> = inbound.iter().copied().filter(|p| p.is_request()).collect();
    let responses_in: Vec<&Pkt> = inbound
        .iter()
        .copied()
        .filter(|p| !p.is_request())
        .collect();
    // The peer QPN.
    let peer_qpn = match opts.peer_qpn {
        Some(q) => {
            notes.push("peer QPN from --peer-qpn".into());
            q
        }
        None if qp_type == QpType::Ud => {
            let q = requests_in
                .iter()
                .find_map(|p| p.ext.deth.map(|d| d.src_qp))
                .unwrap_or(0);
            notes.push(format!("peer QPN {q:#x} from the DETH source QPN"));
            q
        }
        None => {
            let in_psns: BTreeSet<u32> = inbound.iter().map(|p| p.bth.psn).collect();
            let mut score: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
            for p in pk
                .iter()
                .filter(|p| p.src == ip && p.dst == peer_ip && p.qp_type() == Some(qp_type))
            {
                let e = score.entry(p.bth.dest_qp).or_insert((0, 0));
                e.1 += 1;
                if in_psns.contains(&p.bth.psn) {
                    e.0 += 1;
                }
            }
            match score.iter().max_by_key(|(_, s)| **s) {
                Some((&q, &(m, n))) => {
                    notes.push(format!(
                        "peer QPN {q:#x}: the destination QPN of {n} frames our host sent the peer, {m} of them with PSNs of frames sent to the QP"
                    ));
                    q
                }
                None => {
                    notes.push(
                        "peer QPN 0: no frame from us to the peer names it (give --peer-qpn if the QP must send)"
                            .into(),
                    );
                    0
                }
            }
        }
    };
    // What the QP sent (the oracle).
    let outbound: Vec<&Pkt> = pk
        .iter()
        .filter(|p| {
            p.src == ip
                && p.dst == peer_ip
                && p.bth.dest_qp == peer_qpn
                && p.qp_type() == Some(qp_type)
        })
        .collect();
    let requests_out: Vec<&Pkt> = outbound
        .iter()
        .copied()
        .filter(|p| p.is_request())
        .collect();
    let udp_sport = outbound.first().and_then(|p| p.sport);
    let rq_psn = match (opts.rq_psn, requests_in.first()) {
        (Some(v), _) => v,
        (None, Some(p)) => {
            notes.push(format!(
                "rq_psn {} from the first request to the QP",
                p.bth.psn
            ));
            p.bth.psn
        }
        (None, None) => 0,
    };
    let sq_psn = match (opts.sq_psn, requests_out.first(), responses_in.first()) {
        (Some(v), _, _) => v,
        (None, Some(p), _) => {
            notes.push(format!(
                "sq_psn {} from the first request the QP sent",
                p.bth.psn
            ));
            p.bth.psn
        }
        (None, None, Some(p)) => {
            notes.push(format!(
                "sq_psn {} from the first response to the QP",
                p.bth.psn
            ));
            p.bth.psn
        }
        (None, None, None) => 0,
    };
    let (pmtu, why) = match opts.mtu {
        Some(m) => (m.bytes() as u32, "--mtu".to_string()),
        None => Segmentation::of(inbound.iter().copied().chain(outbound.iter().copied())).pmtu(),
    };
    notes.push(format!("path MTU {pmtu} from {why}"));
    let qkey = requests_in
        .iter()
        .chain(requests_out.iter())
        .find_map(|p| p.ext.deth.map(|d| d.qkey))
        .unwrap_or(0);

    // Memory: regions of the requests to the QP, plus --mr.
    let msgs_in = messages(requests_in.iter().copied());
    let extra: Vec<(u32, u64, u64)> = opts.mrs.iter().map(|r| (r.rkey, r.va, r.len)).collect();
    let mut regions = Vec::new();
    for r in capture::regions(&msgs_in, &extra) {
        if r.len > 1 << 30 {
            return Err(usage(format!(
                "R_Key {:#x}: the VAs span {} bytes (over 1 GiB); give a --mr",
                r.rkey, r.len
            )));
        }
        regions.push(Region {
            rkey: r.rkey,
            va: r.va,
            len: r.len,
            preloaded: 0,
        });
    }
    let recv_wqes = msgs_in.iter().filter(|m| m.needs_recv()).count();
    let own = if opts.no_requests {
        Vec::new()
    } else {
        messages(requests_out.iter().copied())
    };
    Ok((
        Plan {
            qp_type,
            qpn,
            peer_qpn,
            ip,
            mac,
            peer_ip,
            peer_mac,
            vlan,
            udp_sport,
            rq_psn,
            sq_psn,
            pmtu,
            qkey,
            regions,
            recv_wqes,
            posted: own.len(),
            notes,
        },
        own,
    ))
}

/// Run the replay (see the module docs).
///
/// # Errors
/// [`ReplayError`] when the capture cannot be read, does not say enough, or
/// the set-up fails; mismatches are in the report, not errors.
pub fn replay(opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    let sc = Capture::load(&opts.capture).map_err(|e| ReplayError::Io(e.to_string()))?;
    let (mut plan, own) = infer(opts, &sc)?;
    let ip = plan.ip;
    let peer_ip = plan.peer_ip;
    let qp_type = plan.qp_type;
    let inbound: Vec<&Pkt> = sc
        .pkts
        .iter()
        .filter(|p| p.bth.dest_qp == plan.qpn && p.dst == ip)
        .filter(|p| qp_type == QpType::Ud || p.src == peer_ip)
        .filter(|p| p.qp_type() == Some(qp_type))
        .collect();
    let requests_in: Vec<&Pkt> = inbound.iter().copied().filter(|p| p.is_request()).collect();
    let outbound: Vec<&Pkt> = sc
        .pkts
        .iter()
        .filter(|p| {
            p.src == ip
                && p.dst == peer_ip
                && p.bth.dest_qp == plan.peer_qpn
                && p.qp_type() == Some(qp_type)
        })
        .collect();

    // The device.
    let mtu = Mtu::from_bytes(plan.pmtu as usize)
        .ok_or_else(|| usage(format!("path MTU {} is not an IB MTU", plan.pmtu)))?;
    let mut dev = capture::device(ip, plan.mac, plan.pmtu);
    let pd = dev.alloc_pd();
    let nmsg = requests_in.len() + own.len();
    let cq = dev.create_cq(4 * nmsg + 64);
    let depth = (nmsg as u32 + 16).min(16384);
    let init = QpInitAttr {
        qp_type,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: depth,
            max_recv_wr: (plan.recv_wqes as u32 + 16).min(16384),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    dev.create_qp_with_qpn(pd, &init, plan.qpn)
        .map_err(setup("create_qp_with_qpn"))?;
    let av = AddressVector {
        dgid: Gid::from_ip(peer_ip),
        dmac: plan.peer_mac,
        hop_limit: 64,
        vlan: plan.vlan,
        udp_sport: plan.udp_sport,
        ..AddressVector::default()
    };
    QpSetup {
        qp_type,
        qpn: plan.qpn,
        av,
        peer_qpn: plan.peer_qpn,
        rq_psn: plan.rq_psn,
        sq_psn: plan.sq_psn,
        mtu,
        qkey: plan.qkey,
    }
    .bring_up(&mut dev)
    .map_err(|(step, e)| setup(step)(e))?;

    // Remote-access memory, preloaded from the capture.
    let msgs_in = messages(requests_in.iter().copied());
    let regions: Vec<capture::Region> = plan
        .regions
        .iter()
        .map(|r| capture::Region {
            rkey: r.rkey,
            va: r.va,
            len: r.len,
        })
        .collect();
    let responses: Vec<&Pkt> = outbound
        .iter()
        .copied()
        .filter(|p| !p.is_request())
        .collect();
    let mem = capture::preload(&regions, &msgs_in, &responses, plan.pmtu);
    for ((r, m), n) in plan.regions.iter_mut().zip(mem.images).zip(mem.preloaded) {
        r.preloaded = n;
        dev.reg_mr_with_rkey(pd, m, r.va, all_remote(), r.rkey)
            .map_err(setup("reg_mr_with_rkey"))?;
    }
    // Receive WQEs.
    let slot = msgs_in.iter().map(Msg::len).max().unwrap_or(0) as u64 + 40;
    let slot = slot.next_multiple_of(64);
    let riova = 0x7000_0000_0000u64;
    if plan.recv_wqes > 0 {
        let rmr = dev
            .reg_mr(
                pd,
                vec![0; (slot * plan.recv_wqes as u64) as usize],
                riova,
                AccessFlags::LOCAL_WRITE,
            )
            .map_err(setup("reg_mr (receive buffers)"))?;
        for i in 0..plan.recv_wqes as u64 {
            let sge = [Sge {
                addr: riova + i * slot,
                length: slot as u32,
                lkey: rmr.lkey,
            }];
            dev.post_recv(
                plan.qpn,
                &RecvWr {
                    wr_id: 1 << 32 | i,
                    sg_list: &sge,
                },
            )
            .map_err(setup("post_recv"))?;
        }
    }
    // The QP's own requests, posted when the capture shows them sent.
    let (mem, offs) = capture::local_memory(&own);
    let liova = 0x10_0000u64;
    let mut lkey = 0;
    if !own.is_empty() {
        lkey = dev
            .reg_mr(pd, mem, liova, AccessFlags::LOCAL_WRITE)
            .map_err(setup("reg_mr (local)"))?
            .lkey;
    }
    let post_own = |dev: &mut Device, k: usize| -> Result<bool, ReplayError> {
        let m = &own[k];
        let sge = [Sge {
            addr: liova + offs[k],
            length: m.len(),
            lkey,
        }];
        let Some(mut wr) = m.work_request(k as u64, &sge) else {
            return Ok(false);
        };
        if qp_type == QpType::Ud {
            wr.ud = Some(UdDest {
                av,
                remote_qpn: plan.peer_qpn,
                remote_qkey: m.deth.map_or(plan.qkey, |d| d.qkey),
            });
        }
        dev.post_send(plan.qpn, &wr).map_err(setup("post_send"))?;
        Ok(true)
    };

    // Drive: every frame to the QP in capture order, on the capture's
    // clock; each own message posted at the capture time of its first
    // packet (before a frame captured at the same time).
    let t0 = sc.frames.first().map_or(Duration::ZERO, |f| f.time);
    let feed: Vec<TimedFrame> = inbound.iter().map(|p| sc.frames[p.idx].clone()).collect();
    let fed = feed.len();
    let writer = match &opts.out {
        Some(p) => Some(FrameWriter::create(p).map_err(|e| ReplayError::Io(e.to_string()))?),
        None => None,
    };
    let mut io = PcapIo::new(feed, writer);
    io.keep_sent(true);
    let io_err = |e: pcap::PcapIoError| ReplayError::Io(e.to_string());
    let at = |t: Duration| Instant::from_nanos(t.saturating_sub(t0).as_nanos() as u64);
    let own_time: Vec<Duration> = own
        .iter()
        .map(|m| sc.frames.get(m.first_idx).map_or(t0, |f| f.time))
        .collect();
    let mut next_own = 0;
    let mut posted = 0;
    loop {
        let tn = io.next_time();
        let tm = own_time.get(next_own).copied();
        let (t, post) = match (tm, tn) {
            (Some(m), Some(n)) if m <= n => (m, true),
            (Some(m), None) => (m, true),
            (_, Some(n)) => (n, false),
            (None, None) => break,
        };
        let now = at(t);
        io.set_time(t);
        if dev.poll_timeout().is_some_and(|d| d <= now) {
            dev.handle_timeout(now);
        }
        if post {
            posted += usize::from(post_own(&mut dev, next_own)?);
            next_own += 1;
        } else {
            io.set_clock(Some(t));
            io.rx_burst(1, &mut |f| dev.handle_frame(now, f))
                .map_err(io_err)?;
        }
        drain(&mut dev, &mut io, now).map_err(io_err)?;
    }
    plan.posted = posted;
    let sent = io.take_sent();
    let written = io.finish().map_err(io_err)?;

    // Completions.
    let mut wcs = [Wc::EMPTY; 64];
    let (mut ok_sends, mut recvs) = (0, 0);
    loop {
        let n = dev.poll_cq(cq, &mut wcs);
        if n == 0 {
            break;
        }
        for w in &wcs[..n] {
            if w.wr_id >> 32 == 1 {
                recvs += 1;
            } else if w.status == WcStatus::Success {
                ok_sends += 1;
            }
        }
    }
    let counters = dev
        .counters()
        .iter()
        .filter(|(_, v)| *v != 0)
        .collect::<Vec<_>>();

    // Compare with the capture.
    let ours: Vec<Pkt> = sent
        .iter()
        .enumerate()
        .filter_map(|(i, f)| Pkt::parse(i, &f.data))
        .collect();
    let mut cmp = Compare::default();
    if ours.len() != sent.len() {
        cmp.fail(format!(
            "{} of our frames do not parse strictly (ICRC)",
            sent.len() - ours.len()
        ));
    }
    let cap_resp: Vec<&Pkt> = outbound
        .iter()
        .copied()
        .filter(|p| !p.is_request())
        .collect();
    let cap_req: Vec<&Pkt> = outbound
        .iter()
        .copied()
        .filter(|p| p.is_request())
        .collect();
    let our_resp: Vec<&Pkt> = ours.iter().filter(|p| !p.is_request()).collect();
    let our_req: Vec<&Pkt> = ours.iter().filter(|p| p.is_request()).collect();
    let (matched_responses, extra_acks) = compare_responses(&mut cmp, &our_resp, &cap_resp);
    let matched_requests = if opts.no_requests {
        0
    } else {
        compare_requests(&mut cmp, &our_req, &cap_req)
    };
    // Every message the capture delivered to a receive WQE (SEND, WRITE
    // with immediate) must complete one of ours.
    if recvs != plan.recv_wqes {
        cmp.fail(format!(
            "{recvs} receive completions, but the capture delivered {} messages that consume a receive WQE",
            plan.recv_wqes
        ));
    }
    let compared =
        cap_resp.len() + if opts.no_requests { 0 } else { cap_req.len() } + plan.recv_wqes;
    Ok(ReplayReport {
        compared,
        frames: sc.frames.len(),
        bad_frames: sc.bad,
        fed,
        sent: sent.len(),
        captured_responses: cap_resp.len(),
        matched_responses,
        extra_acks,
        captured_requests: if opts.no_requests { 0 } else { cap_req.len() },
        matched_requests,
        mismatches: cmp.lines,
        mismatch_count: cmp.count,
        send_completions: (ok_sends, posted),
        recv_completions: recvs,
        counters,
        written,
        plan,
    })
}

/// Send everything the device has now.
fn drain(dev: &mut Device, io: &mut PcapIo, now: Instant) -> Result<(), pcap::PcapIoError> {
    while io.tx_burst(64, &mut |b| dev.poll_transmit(now, b))? > 0 {}
    Ok(())
}

#[derive(Default)]
struct Compare {
    lines: Vec<String>,
    count: usize,
}

impl Compare {
    fn fail(&mut self, m: String) {
        self.count += 1;
        if self.lines.len() < 20 {
            self.lines.push(m);
        }
    }
}

/// The first difference between two responses (the fields of the module
/// docs), if any.
fn response_diff(o: &Pkt, t: &Pkt) -> Option<String> {
    if o.name() != t.name() {
        return Some(format!("opcode {} (captured {})", o.name(), t.name()));
    }
    if o.bth.psn != t.bth.psn {
        return Some(format!("PSN {} (captured {})", o.bth.psn, t.bth.psn));
    }
    match (o.ext.aeth, t.ext.aeth) {
        (Some(a), Some(b)) => {
            if AethClass::of(a.syndrome) != AethClass::of(b.syndrome) {
                return Some(format!(
                    "AETH {} (captured {})",
                    AethClass::of(a.syndrome),
                    AethClass::of(b.syndrome)
                ));
            }
            if a.msn != b.msn {
                return Some(format!("MSN {} (captured {})", a.msn, b.msn));
            }
        }
        (a, b) if a.is_some() != b.is_some() => return Some("AETH presence".into()),
        _ => {}
    }
    if o.ext.atomic_ack_eth != t.ext.atomic_ack_eth {
        return Some(format!(
            "original value {:?} (captured {:?})",
            o.ext.atomic_ack_eth.map(|a| a.orig),
            t.ext.atomic_ack_eth.map(|a| a.orig)
        ));
    }
    if o.payload != t.payload {
        return Some(format!(
            "payload differs ({} bytes, captured {})",
            o.payload.len(),
            t.payload.len()
        ));
    }
    None
}

fn compare_responses(cmp: &mut Compare, ours: &[&Pkt], cap: &[&Pkt]) -> (usize, usize) {
    let mut matched = 0;
    // READ responses and ATOMIC ACKNOWLEDGEs: one for one, in order.
    let od: Vec<&&Pkt> = ours.iter().filter(|p| p.kind() != OpKind::Ack).collect();
    let cd: Vec<&&Pkt> = cap.iter().filter(|p| p.kind() != OpKind::Ack).collect();
    for (i, t) in cd.iter().enumerate() {
        match od.get(i) {
            Some(o) => match response_diff(o, t) {
                None => matched += 1,
                Some(d) => cmp.fail(format!(
                    "response to capture frame {} ({} PSN {}): {d}",
                    t.number(),
                    t.name(),
                    t.bth.psn
                )),
            },
            None => cmp.fail(format!(
                "no response of ours for capture frame {} ({} PSN {})",
                t.number(),
                t.name(),
                t.bth.psn
            )),
        }
    }
    if od.len() > cd.len() {
        cmp.fail(format!(
            "{} READ responses / atomic ACKs of ours have no captured counterpart",
            od.len() - cd.len()
        ));
    }
    // ACKs / NAKs: each captured one has one of ours with its PSN.
    let oa: Vec<&&Pkt> = ours.iter().filter(|p| p.kind() == OpKind::Ack).collect();
    let mut used = BTreeSet::new();
    for t in cap.iter().filter(|p| p.kind() == OpKind::Ack) {
        let hit = oa
            .iter()
            .enumerate()
            .find(|(k, o)| !used.contains(k) && o.bth.psn == t.bth.psn);
        match hit {
            Some((k, o)) => {
                used.insert(k);
                match response_diff(o, t) {
                    None => matched += 1,
                    Some(d) => cmp.fail(format!(
                        "ACK for capture frame {} (PSN {}): {d}",
                        t.number(),
                        t.bth.psn
                    )),
                }
            }
            None => cmp.fail(format!(
                "no ACK of ours with PSN {} (capture frame {}, {})",
                t.bth.psn,
                t.number(),
                t.ext
                    .aeth
                    .map_or(String::new(), |a| AethClass::of(a.syndrome).to_string())
            )),
        }
    }
    (matched, oa.len() - used.len())
}

fn compare_requests(cmp: &mut Compare, ours: &[&Pkt], cap: &[&Pkt]) -> usize {
    let mut matched = 0;
    let mut seen = BTreeSet::new();
    let cap: Vec<&&Pkt> = cap.iter().filter(|p| seen.insert(p.bth.psn)).collect();
    for (i, t) in cap.iter().enumerate() {
        let Some(o) = ours.get(i) else {
            cmp.fail(format!(
                "no request of ours for capture frame {} ({} PSN {})",
                t.number(),
                t.name(),
                t.bth.psn
            ));
            continue;
        };
        let d = if o.name() != t.name() {
            Some(format!("opcode {} (captured {})", o.name(), t.name()))
        } else if o.bth.psn != t.bth.psn {
            Some(format!("PSN {} (captured {})", o.bth.psn, t.bth.psn))
        } else if o.ext.reth != t.ext.reth
            || o.ext.atomic_eth != t.ext.atomic_eth
            || o.ext.immdt != t.ext.immdt
            || o.ext.ieth != t.ext.ieth
            || o.ext.deth.map(|d| d.qkey) != t.ext.deth.map(|d| d.qkey)
        {
            Some("extension headers differ".into())
        } else if o.payload != t.payload {
            Some("payload differs".into())
        } else {
            None
        };
        match d {
            None => matched += 1,
            Some(d) => cmp.fail(format!(
                "request for capture frame {} ({} PSN {}): {d}",
                t.number(),
                t.name(),
                t.bth.psn
            )),
        }
    }
    if ours.len() > cap.len() {
        cmp.fail(format!(
            "{} requests of ours have no captured counterpart",
            ours.len() - cap.len()
        ));
    }
    matched
}

fn qp_type_name(t: QpType) -> &'static str {
    match t {
        QpType::Rc => "RC",
        QpType::Uc => "UC",
        QpType::Ud => "UD",
    }
}

impl ReplayReport {
    /// The human-readable summary.
    pub fn write_text(&self, opts: &ReplayOptions, out: &mut dyn Write) -> io::Result<()> {
        let p = &self.plan;
        writeln!(
            out,
            "roce replay: {}: {} frames{}",
            opts.capture.display(),
            self.frames,
            if self.bad_frames > 0 {
                format!(
                    ", {} RoCE frames with a bad ICRC or header (not fed)",
                    self.bad_frames
                )
            } else {
                String::new()
            }
        )?;
        writeln!(
            out,
            "playing {} QP {:#08x} at {} ({}) <-> peer QP {:#08x} at {} ({})",
            qp_type_name(p.qp_type),
            p.qpn,
            p.ip,
            fmt_mac(p.mac),
            p.peer_qpn,
            p.peer_ip,
            fmt_mac(p.peer_mac)
        )?;
        for n in &p.notes {
            writeln!(out, "  {n}")?;
        }
        if let Some(s) = p.udp_sport {
            writeln!(out, "  UDP source port {s} (as captured)")?;
        }
        for r in &p.regions {
            writeln!(
                out,
                "  memory: R_Key {:#010x} VA {:#018x} length {} ({} bytes preloaded from the capture)",
                r.rkey, r.va, r.len, r.preloaded
            )?;
        }
        writeln!(
            out,
            "  receive WQEs posted: {}; own messages re-posted: {}",
            p.recv_wqes, p.posted
        )?;
        writeln!(
            out,
            "fed {} frames; sent {} frames{}",
            self.fed,
            self.sent,
            match &opts.out {
                Some(o) => format!(" -> {} ({} written)", o.display(), self.written),
                None => String::new(),
            }
        )?;
        writeln!(
            out,
            "responses: {} captured, {} matched ({} extra ACKs of ours); requests: {} captured, {} matched",
            self.captured_responses,
            self.matched_responses,
            self.extra_acks,
            self.captured_requests,
            self.matched_requests
        )?;
        writeln!(
            out,
            "completions: {} of {} send WRs succeeded, {} receives",
            self.send_completions.0, self.send_completions.1, self.recv_completions
        )?;
        for m in &self.mismatches {
            writeln!(out, "MISMATCH {m}")?;
        }
        if self.mismatch_count > self.mismatches.len() {
            writeln!(
                out,
                "... {} more mismatches",
                self.mismatch_count - self.mismatches.len()
            )?;
        }
        let result = if self.nothing_compared() {
            if self.fed == 0 {
                "nothing compared: no frame of the capture was fed to the QP (check --qp, --ip and --peer-ip)".to_string()
            } else {
                format!(
                    "nothing compared: {} frames fed, but the capture has no response, request or received message of the QP to compare with",
                    self.fed
                )
            }
        } else if self.ok() {
            "every captured response and request matched".to_string()
        } else {
            "MISMATCH".to_string()
        };
        writeln!(out, "result: {result}")
    }

    /// The summary as one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let p = &self.plan;
        serde_json::json!({
            "qp_type": qp_type_name(p.qp_type),
            "qpn": p.qpn,
            "peer_qpn": p.peer_qpn,
            "ip": p.ip.to_string(),
            "mac": fmt_mac(p.mac),
            "peer_ip": p.peer_ip.to_string(),
            "peer_mac": fmt_mac(p.peer_mac),
            "rq_psn": p.rq_psn,
            "sq_psn": p.sq_psn,
            "pmtu": p.pmtu,
            "udp_sport": p.udp_sport,
            "regions": p.regions.iter().map(|r| serde_json::json!({
                "rkey": r.rkey, "va": r.va, "len": r.len, "preloaded": r.preloaded
            })).collect::<Vec<_>>(),
            "recv_wqes": p.recv_wqes,
            "posted": p.posted,
            "notes": p.notes,
            "frames": self.frames,
            "bad_frames": self.bad_frames,
            "fed": self.fed,
            "sent": self.sent,
            "written": self.written,
            "captured_responses": self.captured_responses,
            "matched_responses": self.matched_responses,
            "extra_acks": self.extra_acks,
            "captured_requests": self.captured_requests,
            "matched_requests": self.matched_requests,
            "mismatches": self.mismatches,
            "mismatch_count": self.mismatch_count,
            "compared": self.compared,
            "nothing_compared": self.nothing_compared(),
            "send_completions": self.send_completions.0,
            "send_wrs": self.send_completions.1,
            "recv_completions": self.recv_completions,
            "counters": self.counters.iter().map(|(n, v)| (n.to_string(), *v)).collect::<BTreeMap<_, _>>(),
            "ok": self.ok(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_parsers() {
        assert_eq!(parse_24("0x11"), Ok(0x11));
        assert_eq!(parse_24("17"), Ok(17));
        assert!(parse_24("0x1000000").is_err());
        assert_eq!(
            parse_mr("0x1234:0x7f0000001000:4096"),
            Ok(MrSpec {
                rkey: 0x1234,
                va: 0x7f00_0000_1000,
                len: 4096
            })
        );
        assert!(parse_mr("1:2").is_err());
        assert!(parse_mr("1:2:0").is_err());
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Ok([2, 0, 0, 0, 0, 10]));
        assert!(parse_mac("02:00:00:00:00").is_err());
    }
}
