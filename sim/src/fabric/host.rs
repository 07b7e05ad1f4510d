//! Hosts: a real [`Device`] behind a NIC that honours PFC, and the flows
//! (RC QP pairs doing RDMA WRITEs) they run.

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use roce_stack::resources::wr::MAX_SGE;
use roce_stack::transport::av::{udp_sport, AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, SendWr, Sge, Wc,
    WcStatus, WrOpcode,
};
use roce_stack::wire::{ParseMode, Position, RocePacket, Transport};

use super::frame::Frame;
use super::{
    check_pattern, check_pattern_at, device_config, fill_pattern_at, flow_memory_bytes, flow_psn,
    host_ip, host_mac, npkts, send_sge_bytes, ConnSpec, Ev, Fabric, FabricConfig, Flow, FlowSpec,
    Ps, RxFlows, SimError, TransferDone, Xfer, PSN_MASK, PS_PER_NS,
};
use crate::metrics::Bins;
use crate::net;
use crate::pfc::HostPause;
use crate::topo::LinkSpec;

/// What the receive path needs of a data frame.
struct RxInfo {
    flow: usize,
    psn: u32,
    position: Position,
    len: u64,
    va: Option<u64>,
}

/// Transmitter state of a host NIC.
#[derive(Debug)]
pub(super) struct Nic {
    busy_until: Ps,
    held: [VecDeque<Frame>; 8],
    pub(super) pause: HostPause,
    tx_frames: u64,
    tx_wire_bytes: u64,
    prop_ps: Ps,
}

/// A host: a device, its NIC, and the switch port it is cabled to.
#[derive(Debug)]
pub struct Host {
    /// The stack.
    pub dev: Device,
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 address (GID 0).
    pub ip: Ipv4Addr,
    /// The host's link.
    pub link: LinkSpec,
    /// The switch port (global id) at the other end of the link.
    pub port: usize,
    pd: u32,
    cq: u32,
    pub(super) nic: Nic,
    timer_at: Option<Ps>,
    /// Receiving QPN → flow index (goodput measurement).
    rx_flows: RxFlows,
    /// Sum of the windows of the flows this host sends on.
    window_sum: usize,
    /// The flows this host sends on (not closed), whose next packets are
    /// staged before the device builds a frame (`Fabric::stage`).
    tx_flows: Vec<u32>,
}

impl Host {
    pub(super) fn new(
        cfg: &FabricConfig,
        i: usize,
        link: LinkSpec,
        port: usize,
        prio_mask: u8,
    ) -> Host {
        let mut dev = Device::new(device_config(cfg, i, link.gbps));
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(cfg.cq_depth);
        Host {
            dev,
            mac: host_mac(i),
            ip: host_ip(i),
            link,
            port,
            pd,
            cq,
            nic: Nic {
                busy_until: 0,
                held: Default::default(),
                pause: HostPause::new(link.gbps, prio_mask),
                tx_frames: 0,
                tx_wire_bytes: 0,
                prop_ps: link.delay_ns * PS_PER_NS,
            },
            timer_at: None,
            rx_flows: RxFlows::default(),
            window_sum: 0,
            tx_flows: Vec::new(),
        }
    }

    /// PFC/PAUSE honouring state of the NIC.
    pub fn pause(&self) -> &HostPause {
        &self.nic.pause
    }
    /// Frames the NIC transmitted.
    pub fn tx_frames(&self) -> u64 {
        self.nic.tx_frames
    }
    /// Wire bytes the NIC transmitted (frames + FCS + preamble/IFG).
    pub fn tx_wire_bytes(&self) -> u64 {
        self.nic.tx_wire_bytes
    }
}

impl Fabric {
    /// Add a flow: create and connect its QPs and memory, and schedule its
    /// start. Returns its index.
    pub fn add_flow(&mut self, spec: FlowSpec) -> Result<usize, SimError> {
        let start = spec.start_ns * PS_PER_NS;
        let stop = spec.stop_ns.map(|s| s * PS_PER_NS);
        let idx = self.connect(spec, true, false)?;
        self.schedule(start, Ev::FlowStart(idx as u32));
        if let Some(stop) = stop {
            self.schedule(stop, Ev::FlowStop(idx as u32));
        }
        Ok(idx)
    }

    /// Add an idle connection (see [`ConnSpec`]); it sends when
    /// [`Fabric::start_transfer`] says so. Returns its flow index.
    pub fn add_connection(&mut self, c: ConnSpec) -> Result<usize, SimError> {
        let spec = FlowSpec {
            label: c.label,
            src: c.src,
            dst: c.dst,
            msg_bytes: c.msg_bytes,
            window: c.window,
            start_ns: 0,
            stop_ns: None,
        };
        self.connect(spec, false, true)
    }

    fn connect(
        &mut self,
        spec: FlowSpec,
        record: bool,
        verify_each: bool,
    ) -> Result<usize, SimError> {
        let n = self.hosts.len();
        for h in [spec.src, spec.dst] {
            if h >= n || spec.src == spec.dst {
                return Err(SimError::NoSuchHost(h));
            }
        }
        let idx = self.flows.len();
        let window = spec.window.max(1);
        let need = self.hosts[spec.src].window_sum + window as usize;
        if need > self.cfg.cq_depth {
            return Err(SimError::CqTooSmall {
                host: spec.src,
                need,
                depth: self.cfg.cq_depth,
            });
        }
        // The send buffer holds the bytes one SGE of a WRITE covers (see
        // `stage`), the receive region a message per window slot.
        let pmtu = self.hosts[spec.src].dev.active_mtu().bytes() as u32;
        let sge_bytes = send_sge_bytes(spec.msg_bytes, pmtu);
        let regions = [
            u64::from(sge_bytes),
            u64::from(spec.msg_bytes) * u64::from(window),
        ];
        let base = 0x1000_0000_0000u64 + (idx as u64) * 0x1_0000_0000;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mut qpn = [0u32; 2];
        let mut keys = [(0u32, 0u32); 2];
        for (s, h) in [spec.src, spec.dst].into_iter().enumerate() {
            let host = &mut self.hosts[h];
            let init = QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: host.cq,
                recv_cq: host.cq,
                cap: QpCap {
                    max_send_wr: window.max(16),
                    max_recv_wr: 16,
                    max_send_sge: MAX_SGE as u32,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            };
            qpn[s] = super::verbs(host.dev.create_qp(host.pd, &init))?;
            let k = super::verbs(host.dev.reg_mr(
                host.pd,
                vec![0u8; regions[s] as usize],
                base,
                access,
            ))?;
            keys[s] = (k.lkey, k.rkey);
        }
        let sides = [spec.src, spec.dst];
        let mut sport = 0;
        for s in 0..2 {
            let peer = sides[1 - s];
            let peer_gid = Gid::from_ipv4(host_ip(peer));
            let peer_mac = host_mac(peer);
            let dev = &mut self.hosts[sides[s]].dev;
            let mut a = QpAttr {
                qp_state: QpState::Init,
                qp_access_flags: access,
                ..QpAttr::default()
            };
            super::verbs(dev.modify_qp(
                qpn[s],
                &a,
                QpAttrMask::STATE
                    | QpAttrMask::PKEY_INDEX
                    | QpAttrMask::PORT
                    | QpAttrMask::ACCESS_FLAGS,
            ))?;
            a.qp_state = QpState::Rtr;
            a.ah_attr = AddressVector {
                dgid: peer_gid,
                dmac: peer_mac,
                hop_limit: 64,
                traffic_class: self.cfg.traffic_class,
                ..AddressVector::default()
            };
            if s == 0 {
                // The source port the stack derives for this QP pair (the
                // kernel's rdma_get_udp_sport convention).
                sport = udp_sport(&a.ah_attr, qpn[0], qpn[1]);
            }
            a.path_mtu = dev.active_mtu();
            a.dest_qp_num = qpn[1 - s];
            a.rq_psn = flow_psn(idx, 1 - s);
            a.max_dest_rd_atomic = 1;
            a.min_rnr_timer = 1;
            super::verbs(dev.modify_qp(
                qpn[s],
                &a,
                QpAttrMask::STATE
                    | QpAttrMask::AV
                    | QpAttrMask::PATH_MTU
                    | QpAttrMask::DEST_QPN
                    | QpAttrMask::RQ_PSN
                    | QpAttrMask::MAX_DEST_RD_ATOMIC
                    | QpAttrMask::MIN_RNR_TIMER,
            ))?;
            a.qp_state = QpState::Rts;
            a.sq_psn = flow_psn(idx, s);
            a.timeout = self.cfg.qp_timeout;
            a.retry_cnt = self.cfg.retry_cnt;
            a.rnr_retry = 7;
            a.max_rd_atomic = 1;
            super::verbs(dev.modify_qp(
                qpn[s],
                &a,
                QpAttrMask::STATE
                    | QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::SQ_PSN
                    | QpAttrMask::MAX_QP_RD_ATOMIC,
            ))?;
        }
        self.hosts[spec.dst].rx_flows.insert(qpn[1], idx);
        self.hosts[spec.src].tx_flows.push(idx as u32);
        // The QP's path MTU is the device's active MTU (set above).
        debug_assert_eq!(
            self.hosts[spec.src].dev.qp(qpn[0]).map(|q| q.pmtu()),
            Some(pmtu)
        );
        self.hosts[spec.src].window_sum += window as usize;
        self.flow_memory += flow_memory_bytes(spec.msg_bytes, window);
        if record {
            self.series_flows += 1;
        }
        let bin_ps = self.cfg.bin_ns * PS_PER_NS;
        self.flows.push(Flow {
            spec,
            qpn,
            udp_sport: sport,
            src_lkey: keys[0].0,
            dst_lkey: keys[1].0,
            dst_rkey: keys[1].1,
            src_base: base,
            dst_base: base,
            active: false,
            posted: 0,
            completed: 0,
            errors: 0,
            first_error: None,
            last_in_slot: vec![None; window as usize],
            slot_len: vec![0; window as usize],
            rx_epsn: flow_psn(idx, 0),
            rx_bytes: 0,
            last_rx_ps: 0,
            rx_bins: Bins::new(bin_ps),
            rate_bins: Bins::new(bin_ps),
            record,
            verify_each,
            bad_msgs: 0,
            slot_msg: vec![0; window as usize],
            rx_done: vec![None; window as usize],
            rx_cur: None,
            xfer: None,
            closed: false,
            pmtu,
            sge_bytes,
            slot_psn: vec![0; window as usize],
            post_psn: flow_psn(idx, 0),
            staged: None,
            fault: None,
        });
        Ok(idx)
    }

    /// Start sending `bytes` on connection `f` (WRITEs of at most its
    /// `msg_bytes`); when the last completes, [`Fabric::run_until_done`]
    /// returns a [`TransferDone`] with `tag`. A transfer of 0 bytes is done
    /// at once. Ignored if the flow already has a transfer in progress or
    /// is closed.
    pub fn start_transfer(&mut self, f: usize, bytes: u64, tag: u64) {
        let now = self.now;
        let flow = &mut self.flows[f];
        if flow.xfer.is_some() || flow.closed {
            return;
        }
        if bytes == 0 {
            self.done.push_back(TransferDone {
                flow: f,
                tag,
                bytes,
                start_ps: now,
                end_ps: now,
                failed: false,
            });
            return;
        }
        flow.xfer = Some(Xfer {
            tag,
            bytes,
            left: bytes,
            start_ps: now,
        });
        flow.active = flow.errors == 0;
        if !flow.active {
            self.finish_transfer(f);
            return;
        }
        self.fill_window(f);
        let h = self.flows[f].spec.src;
        self.host_poke(h);
    }

    /// The lkeys of flow `f`'s send region (at its source host) and receive
    /// region (at its destination).
    pub fn flow_lkeys(&self, f: usize) -> [u32; 2] {
        [self.flows[f].src_lkey, self.flows[f].dst_lkey]
    }

    /// Destroy flow `f`'s QPs and release its memory (after it drained);
    /// its counters stay.
    pub fn close_flow(&mut self, f: usize) {
        let flow = &mut self.flows[f];
        if flow.closed {
            return;
        }
        flow.closed = true;
        flow.active = false;
        let (src, dst) = (flow.spec.src, flow.spec.dst);
        let (qpn, lkeys) = (flow.qpn, [flow.src_lkey, flow.dst_lkey]);
        let window = flow.spec.window.max(1);
        let mem = flow_memory_bytes(flow.spec.msg_bytes, window);
        for (s, h) in [src, dst].into_iter().enumerate() {
            let dev = &mut self.hosts[h].dev;
            let _ = dev.destroy_qp(qpn[s]);
            let _ = dev.dereg_mr(lkeys[s]);
        }
        self.hosts[dst].rx_flows.remove(&qpn[1]);
        self.hosts[src].tx_flows.retain(|&x| x as usize != f);
        let ws = &mut self.hosts[src].window_sum;
        *ws = ws.saturating_sub(window as usize);
        self.flow_memory = self.flow_memory.saturating_sub(mem);
        if self.flows[f].record {
            self.series_flows -= 1;
        }
    }

    fn finish_transfer(&mut self, f: usize) {
        let now = self.now;
        let flow = &mut self.flows[f];
        let Some(x) = flow.xfer.take() else {
            return;
        };
        flow.active = false;
        self.done.push_back(TransferDone {
            flow: f,
            tag: x.tag,
            bytes: x.bytes,
            start_ps: x.start_ps,
            end_ps: now,
            failed: x.left > 0 || flow.errors > 0,
        });
    }

    /// Post WRITEs on flow `f` until its window is full (if it is active).
    pub(super) fn fill_window(&mut self, f: usize) {
        let flow = &self.flows[f];
        if !flow.active {
            return;
        }
        let src = flow.spec.src;
        let window = u64::from(flow.spec.window.max(1));
        let size = flow.spec.msg_bytes;
        loop {
            let flow = &self.flows[f];
            if !flow.active || flow.posted - (flow.completed + flow.errors) >= window {
                break;
            }
            let len = match flow.xfer {
                Some(x) if x.left == 0 => break,
                Some(x) => x.left.min(u64::from(size)) as u32,
                None => size,
            };
            let msg = flow.posted;
            let slot = msg % window;
            let off = slot * u64::from(size);
            let (lkey, qpn) = (flow.src_lkey, flow.qpn[0]);
            let (raddr, rkey) = (flow.dst_base + off, flow.dst_rkey);
            // Every SGE covers the whole send buffer (the last one what is
            // left of the message): byte `o` of the message is byte
            // `o % sge_bytes` of the buffer.
            let step = flow.sge_bytes.max(1);
            let mut sges = [Sge {
                addr: flow.src_base,
                length: 0,
                lkey,
            }; MAX_SGE];
            let n_sge = len.div_ceil(step).max(1) as usize;
            for (i, sge) in sges[..n_sge].iter_mut().enumerate() {
                sge.length = step.min(len - i as u32 * step);
            }
            let dev = &mut self.hosts[src].dev;
            let mut wr = SendWr::new(
                ((f as u64) << 40) | msg,
                WrOpcode::RdmaWrite,
                &sges[..n_sge],
            );
            wr.remote_addr = raddr;
            wr.rkey = rkey;
            if dev.post_send(qpn, &wr).is_err() {
                self.flows[f].active = false;
                break;
            }
            let flow = &mut self.flows[f];
            flow.posted += 1;
            flow.slot_len[slot as usize] = len;
            flow.slot_msg[slot as usize] = msg;
            flow.slot_psn[slot as usize] = flow.post_psn;
            flow.post_psn = (flow.post_psn + npkts(len, flow.pmtu)) & PSN_MASK;
            if let Some(x) = flow.xfer.as_mut() {
                x.left -= u64::from(len);
            }
        }
    }

    /// Write the bytes of the packet each of host `h`'s flows sends next
    /// into its send buffer, just before the device builds a frame.
    ///
    /// Every WRITE of a flow gathers from one send buffer of `msg_bytes`,
    /// so a packet's payload sits at its offset in the message. The device
    /// builds one frame per `poll_transmit` and reads the payload of that
    /// packet as it builds it; the packet a QP sends next is the one with
    /// its `sq_psn` (new data, or the first one a go-back-N retransmission
    /// resends), and its message and offset follow from the PSNs the
    /// flow's WRITEs were given in posting order (consecutive, one per
    /// PMTU of payload; IBTA 1.7 §9.7.1). So whichever flow the device
    /// serves, and whether it sends new data or retransmits, the bytes it
    /// reads are that packet's pattern; the rest of the buffer may hold
    /// other messages' bytes, which no packet about to be built reads. The
    /// buffer's lines are touched only as a packet is built (a window of
    /// regions per flow would be cold by then at datacenter scale).
    fn stage(&mut self, h: usize) {
        for i in 0..self.hosts[h].tx_flows.len() {
            let f = self.hosts[h].tx_flows[i] as usize;
            let flow = &mut self.flows[f];
            let lo = flow.completed + flow.errors;
            if lo == flow.posted {
                continue;
            }
            let host = &mut self.hosts[h];
            let Some(sq) = host.dev.qp(flow.qpn[0]).map(|q| q.info().sq_psn) else {
                continue;
            };
            let hint = match flow.staged {
                Some((p, _)) if p == sq => continue,
                Some((_, m)) => m,
                None => lo,
            };
            // The message holding PSN `sq`: the one staged last or the next
            // (sending on), else any outstanding one (a retransmission).
            let window = flow.slot_psn.len() as u64;
            let holds = |m: u64| {
                let slot = (m % window) as usize;
                let d = sq.wrapping_sub(flow.slot_psn[slot]) & PSN_MASK;
                (d < npkts(flow.slot_len[slot], flow.pmtu)).then_some((m, d))
            };
            let found = [hint, hint + 1]
                .into_iter()
                .filter(|m| (lo..flow.posted).contains(m))
                .find_map(holds)
                .or_else(|| (lo..flow.posted).find_map(holds));
            let Some((msg, d)) = found else {
                continue;
            };
            let len = flow.slot_len[(msg % window) as usize];
            let off = d * flow.pmtu;
            let n = flow.pmtu.min(len - off);
            flow.staged = Some((sq, msg));
            let Some(mr) = host.dev.mr_mut(flow.src_lkey) else {
                continue;
            };
            let at = (off % flow.sge_bytes.max(1)) as usize;
            let Some(buf) = mr.as_mut_slice().get_mut(at..at + n as usize) else {
                continue;
            };
            fill_pattern_at(buf, f, msg, u64::from(off));
            if let Some((m, b)) = flow.fault {
                if m == msg && (off..off + n).contains(&b) {
                    buf[(b - off) as usize] ^= 0x20;
                    flow.fault = None;
                }
            }
        }
    }

    /// Flip bit 5 of byte `offset` of message `msg` of flow `f` in the
    /// send buffer when the engine writes it there (just before the stack
    /// reads it, `Fabric::stage`): a fault in the source data, which the stack then sends
    /// faithfully (a valid ICRC) and the receiver's check must catch. For
    /// tests.
    pub fn corrupt_source_byte(&mut self, f: usize, msg: u64, offset: u32) {
        self.flows[f].fault = Some((msg, offset));
    }

    /// Take completions of host `h` and refill windows.
    fn reap(&mut self, h: usize) {
        let mut wcs = std::mem::take(&mut self.wc_buf);
        wcs.resize(64, Wc::EMPTY);
        loop {
            let cq = self.hosts[h].cq;
            let n = self.hosts[h].dev.poll_cq(cq, &mut wcs);
            if n == 0 {
                break;
            }
            let mut touched: Vec<usize> = Vec::new();
            for wc in &wcs[..n] {
                let f = (wc.wr_id >> 40) as usize;
                let msg = wc.wr_id & ((1 << 40) - 1);
                let Some(flow) = self.flows.get_mut(f) else {
                    continue;
                };
                if wc.status == WcStatus::Success {
                    flow.completed += 1;
                    let w = flow.last_in_slot.len() as u64;
                    let slot = (msg % w) as usize;
                    let len = flow.slot_len[slot];
                    flow.last_in_slot[slot] = Some((msg, len));
                    // Every packet of a checked flow's WRITE was checked in
                    // the receiver's memory as it was placed; the WRITE
                    // completing means that covered all of it.
                    if flow.verify_each && flow.rx_done[slot] != Some(msg) {
                        flow.bad_msgs += 1;
                    }
                } else {
                    flow.errors += 1;
                    flow.first_error.get_or_insert(wc.status);
                    flow.active = false;
                }
                if !touched.contains(&f) {
                    touched.push(f);
                }
            }
            for f in touched {
                self.fill_window(f);
                let flow = &self.flows[f];
                if let Some(x) = flow.xfer {
                    let idle = flow.posted == flow.completed + flow.errors;
                    if idle && (x.left == 0 || !flow.active) {
                        self.finish_transfer(f);
                    }
                }
            }
        }
        self.wc_buf = wcs;
    }

    /// The flow, PSN, position, payload length and RETH VA of a data frame
    /// for one of host `h`'s receiving QPs. The ICRC is not checked here:
    /// the device checks it, and [`Fabric::host_rx`] accounts the frame
    /// only if the device's parse accepted it.
    fn rx_info(&self, h: usize, frame: &[u8]) -> Option<RxInfo> {
        let p = RocePacket::parse_with(frame, ParseMode::Strict).ok()?;
        let bth = p.bth();
        let info = bth.opcode.info();
        if info.transport != Transport::Rc || !info.is_request {
            return None;
        }
        let &f = self.hosts[h].rx_flows.get(&bth.dest_qp)?;
        Some(RxInfo {
            flow: f,
            psn: bth.psn,
            position: info.position,
            len: p.payload().len() as u64,
            va: p.ext().reth().map(|r| r.va),
        })
    }

    /// Goodput accounting and placement checks of a request packet received
    /// by host `h`, after the device handled it. A go-back-N responder accepts exactly the packets that arrive in
    /// PSN order: their payload counts as goodput, and for a checked flow
    /// the bytes the packet placed are compared with the pattern of the
    /// message its slot holds, at its offset (read while still in cache).
    fn rx_account(&mut self, h: usize, x: &RxInfo) {
        let now = self.now;
        let flow = &mut self.flows[x.flow];
        if x.psn != flow.rx_epsn {
            return;
        }
        flow.rx_epsn = (flow.rx_epsn + 1) & 0x00FF_FFFF;
        if flow.record {
            flow.rx_bytes += x.len;
            flow.last_rx_ps = now;
            flow.rx_bins.add(now, x.len as f64);
        }
        if !flow.verify_each {
            return;
        }
        let size = u64::from(flow.spec.msg_bytes.max(1));
        if let Some(va) = x.va {
            let rel = va.wrapping_sub(flow.dst_base);
            let slot = (rel / size) as usize;
            if rel % size != 0 || slot >= flow.rx_done.len() {
                flow.bad_msgs += 1;
                flow.rx_cur = None;
                return;
            }
            flow.rx_cur = Some((slot, 0));
        }
        let Some((slot, off)) = flow.rx_cur else {
            flow.bad_msgs += 1;
            return;
        };
        let msg = flow.slot_msg[slot];
        let at = slot as u64 * size + off;
        let ok = self.hosts[h]
            .dev
            .mr(flow.dst_lkey)
            .and_then(|mr| mr.as_slice().get(at as usize..(at + x.len) as usize))
            .is_some_and(|b| check_pattern_at(b, x.flow, msg, off));
        if !ok {
            flow.bad_msgs += 1;
        }
        flow.rx_cur = Some((slot, off + x.len));
        if matches!(x.position, Position::Last | Position::Only) {
            if off + x.len == u64::from(flow.slot_len[slot]) {
                flow.rx_done[slot] = Some(msg);
            } else {
                flow.bad_msgs += 1;
            }
            flow.rx_cur = None;
        }
    }

    /// Host `h`'s NIC: start the next frame if the link is free.
    fn host_kick(&mut self, h: usize) {
        let now = self.now;
        let now_i = self.now_instant();
        let cap = self.cfg.nic_held_frames.max(1);
        let host = &mut self.hosts[h];
        if host.nic.busy_until > now {
            return;
        }
        host.nic.pause.settle(now, &mut self.observed.paused_bins);
        // Timers due now first (a pacer release re-activates its QP).
        if host.dev.poll_timeout().is_some_and(|d| d <= now_i) {
            host.dev.handle_timeout(now_i);
        }
        let mut frame = None;
        let any_paused = host.nic.pause.any_paused(now);
        for p in (0..8u8).rev() {
            if !any_paused || !host.nic.pause.is_paused(p, now) {
                if let Some(f) = host.nic.held[p as usize].pop_front() {
                    frame = Some(f);
                    break;
                }
            }
        }
        if frame.is_none() {
            // Pull from the device unless a paused priority's queue is full
            // (the next frame might be for it).
            let blocked = any_paused
                && (0..8u8).any(|p| {
                    host.nic.pause.is_paused(p, now) && host.nic.held[p as usize].len() >= cap
                });
            if !blocked {
                loop {
                    self.stage(h);
                    let mut buf = self.pool.take();
                    let Some(n) = self.hosts[h].dev.poll_transmit(now_i, &mut buf) else {
                        self.pool.put_buf(buf);
                        break;
                    };
                    let f = self.pool.frame(buf, n);
                    if !any_paused {
                        frame = Some(f);
                        break;
                    }
                    let p = f.info().prio;
                    let host = &mut self.hosts[h];
                    if !host.nic.pause.is_paused(p, now) {
                        frame = Some(f);
                        break;
                    }
                    let q = &mut host.nic.held[p as usize];
                    q.push_back(f);
                    if q.len() >= cap {
                        break;
                    }
                }
            }
        }
        if let Some(f) = frame {
            let host = &mut self.hosts[h];
            let wb = net::wire_bytes(f.len());
            let ser = net::serialisation_ps(wb, host.link.gbps);
            host.nic.busy_until = now + ser;
            host.nic.tx_frames += 1;
            host.nic.tx_wire_bytes += wb;
            let prop = host.nic.prop_ps;
            let port = host.port as u32;
            self.host_frames += 1;
            self.packet_hops += 1;
            self.schedule(now + ser, Ev::HostTx(h as u32));
            self.schedule(now + ser + prop, Ev::SwitchRx(port, f));
        }
    }

    /// Schedule a timer event for host `h`'s next device deadline.
    fn host_arm(&mut self, h: usize) {
        let now = self.now;
        let host = &mut self.hosts[h];
        let Some(d) = host.dev.poll_timeout() else {
            return;
        };
        let mut t = d.as_nanos().saturating_mul(PS_PER_NS);
        if t <= now {
            // Due already but nothing could be done now: the transmitter is
            // busy (its HostTx event retries) or the device has nothing to
            // send yet; retry at the transmitter's next free time or 100 ns on.
            t = host.nic.busy_until.max(now + 100 * PS_PER_NS);
        }
        if host.timer_at.map_or(true, |x| t < x) {
            host.timer_at = Some(t);
            self.schedule(t, Ev::HostTimer(h as u32));
        }
    }

    pub(super) fn host_poke(&mut self, h: usize) {
        self.reap(h);
        self.host_kick(h);
        self.host_arm(h);
    }

    pub(super) fn host_timer(&mut self, h: usize) {
        if self.hosts[h].timer_at == Some(self.now) {
            self.hosts[h].timer_at = None;
        }
        let now_i = self.now_instant();
        let host = &mut self.hosts[h];
        if host.dev.poll_timeout().is_some_and(|d| d <= now_i) {
            host.dev.handle_timeout(now_i);
        }
        self.host_poke(h);
    }

    pub(super) fn host_rx(&mut self, h: usize, frame: Frame) {
        if frame.info().mac_control {
            let now = self.now;
            let host = &mut self.hosts[h];
            let (wake, _) =
                host.nic
                    .pause
                    .on_frame(frame.bytes(), now, &mut self.observed.paused_bins);
            self.pool.put(frame);
            if let Some(w) = wake {
                self.schedule(w, Ev::HostTx(h as u32));
            }
            self.host_kick(h);
            self.host_arm(h);
            return;
        }
        let info = self.rx_info(h, frame.bytes());
        let now_i = self.now_instant();
        let dev = &mut self.hosts[h].dev;
        let drops = dev.counters().rx_parse_drops;
        dev.handle_frame(now_i, frame.bytes());
        // The device's parse is `parse_with(Strict)` plus the ICRC check: a
        // frame it dropped there (a bad ICRC) placed nothing.
        let parsed = dev.counters().rx_parse_drops == drops;
        if let Some(x) = info.filter(|_| parsed) {
            self.rx_account(h, &x);
        }
        self.pool.put(frame);
        self.host_poke(h);
    }

    /// Check every flow's receive buffer: each window slot holds the pattern
    /// of the last message completed into it, and no WRITE checked on
    /// completion was wrong. Returns the flows that fail (call after
    /// [`Fabric::drain`]; closed flows are judged by their checks on
    /// completion only).
    pub fn verify(&self) -> Vec<usize> {
        let mut bad = Vec::new();
        for (i, f) in self.flows.iter().enumerate() {
            if f.bad_msgs > 0 {
                bad.push(i);
                continue;
            }
            if f.closed {
                continue;
            }
            let size = f.spec.msg_bytes as usize;
            let Some(mr) = self.hosts[f.spec.dst].dev.mr(f.dst_lkey) else {
                bad.push(i);
                continue;
            };
            let mem = mr.as_slice();
            let ok = f
                .last_in_slot
                .iter()
                .enumerate()
                .all(|(slot, last)| match last {
                    Some((m, len)) => mem
                        .get(slot * size..slot * size + *len as usize)
                        .is_some_and(|got| check_pattern(got, i, *m)),
                    None => true,
                });
            if !ok {
                bad.push(i);
            }
        }
        bad
    }
}
