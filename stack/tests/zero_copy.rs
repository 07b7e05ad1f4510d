//! Zero-copy transmit (`Device::poll_transmit_gather`, `reg_mr_shared`,
//! `FrameIo::tx_burst_gather`).
//!
//! The oracle for the gather path is the copying path: the same scenario is
//! run twice from identical devices, once with `poll_transmit` and once with
//! `poll_transmit_gather` (payloads reassembled from headers, MR bytes and
//! tail), and every frame must be byte for byte equal. Each frame is also
//! accepted by the receiving device, whose parser verifies the ICRC
//! independently (`RocePacket::parse`), and the written/read data must equal
//! the source pattern.

use std::convert::Infallible;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use roce_stack::backend::{FrameIo, TxFrame};
use roce_stack::testing::test_config;
use roce_stack::testing::{all_access, av_to, modify_to_rts, pattern, ConnOpts};
use roce_stack::time::Instant;
use roce_stack::transport::av::{AddressVector, Gid};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Sge, VerbsError,
    WrOpcode,
};
use roce_stack::wire::{Opcode, RocePacket, VlanTag};

fn config(i: u8, ipv6: bool, zc_min: usize) -> DeviceConfig {
    let mut c = test_config(i, 1500);
    if ipv6 {
        c.gids = vec![Gid::from_ipv6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            0,
            u16::from(i) + 1,
        ))];
    } else {
        c.gids = vec![Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, i + 1))];
    }
    c.zero_copy_min_bytes = zc_min;
    c
}

/// Frames sent: (sending side, bytes).
type Frames = Vec<(usize, Vec<u8>)>;

struct Setup {
    dev: [Device; 2],
    pd: [u32; 2],
    cq: [u32; 2],
    qpn: [u32; 2],
}

/// Two RC QPs in RTS, PMTU 1024, optionally VLAN-tagged both ways.
fn setup(ipv6: bool, vlan: bool, zc_min: usize) -> Setup {
    let mut dev = [
        Device::new(config(0, ipv6, zc_min)),
        Device::new(config(1, ipv6, zc_min)),
    ];
    let mut pd = [0; 2];
    let mut cq = [0; 2];
    let mut qpn = [0; 2];
    for s in 0..2 {
        pd[s] = dev[s].alloc_pd();
        cq[s] = dev[s].create_cq(1024);
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: cq[s],
            recv_cq: cq[s],
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        };
        qpn[s] = dev[s].create_qp(pd[s], &init).unwrap();
    }
    let o = ConnOpts {
        rd_atomic: 4,
        ..ConnOpts::default()
    };
    for s in 0..2 {
        let peer = 1 - s;
        let av = AddressVector {
            vlan: vlan.then_some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100,
            }),
            ..av_to(&dev[peer]).unwrap()
        };
        let (sq_psn, rq_psn) = (o.sq_psn[s], o.sq_psn[peer]);
        modify_to_rts(&mut dev[s], qpn[s], av, qpn[peer], sq_psn, rq_psn, &o).unwrap();
    }
    Setup { dev, pd, cq, qpn }
}

/// Run both devices until nothing is left to send, delivering every frame
/// at once; returns every frame sent (side, bytes) and how many were
/// Gather frames.
fn run(s: &mut Setup, gather: bool) -> (Frames, usize) {
    let mut out = Vec::new();
    let mut gathered = 0;
    let mut buf = vec![0u8; 16384];
    let now = Instant::ZERO;
    loop {
        let mut moved = false;
        for side in 0..2 {
            loop {
                let frame = if gather {
                    match s.dev[side].poll_transmit_gather(now, &mut buf) {
                        None => None,
                        Some(f @ TxFrame::Whole(_)) => Some(buf[..f.len()].to_vec()),
                        Some(f @ TxFrame::Gather { hdr_len, .. }) => {
                            gathered += 1;
                            let mut v = buf[..hdr_len].to_vec();
                            v.extend_from_slice(f.payload().unwrap());
                            v.extend_from_slice(f.tail());
                            assert_eq!(v.len(), f.len());
                            Some(v)
                        }
                    }
                } else {
                    s.dev[side]
                        .poll_transmit(now, &mut buf)
                        .map(|n| buf[..n].to_vec())
                };
                let Some(f) = frame else { break };
                let before = s.dev[1 - side].counters().rx_parse_drops;
                s.dev[1 - side].handle_frame(now, &f);
                assert_eq!(s.dev[1 - side].counters().rx_parse_drops, before);
                out.push((side, f));
                moved = true;
            }
        }
        if !moved {
            return (out, gathered);
        }
    }
}

const WRITE_LEN: usize = 3 * 1024 + 333; // FIRST, MIDDLE x2, LAST (pad 3)
const ONLY_LEN: usize = 777; // WRITE ONLY (pad 3)
const SEND_LEN: usize = 2000; // SEND FIRST + LAST
const READ_LEN: usize = 2 * 1024 + 2; // READ RESPONSE FIRST, MIDDLE, LAST (pad 2)

/// WRITE (multi-packet and ONLY) and SEND from side 0's shared MR, READ by
/// side 1 from it; returns the frames, the Gather count and the data each
/// destination received.
fn scenario(ipv6: bool, vlan: bool, gather: bool) -> (Frames, usize, Vec<u8>) {
    let mut s = setup(ipv6, vlan, 1);
    let src = pattern(8192, 5);
    let mem: Arc<[u8]> = Arc::from(src.clone());
    let a = s.dev[0]
        .reg_mr_shared(
            s.pd[0],
            Arc::clone(&mem),
            0x10_000,
            AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let b = s.dev[1]
        .reg_mr(s.pd[1], vec![0u8; 16384], 0x40_000, all_access())
        .unwrap();
    // Receive for the SEND.
    s.dev[1]
        .post_recv(
            s.qpn[1],
            &RecvWr {
                wr_id: 9,
                sg_list: &[Sge {
                    addr: 0x40_000 + 12000,
                    length: 4000,
                    lkey: b.lkey,
                }],
            },
        )
        .unwrap();
    let sge = |off: u64, len: usize| Sge {
        addr: 0x10_000 + off,
        length: len as u32,
        lkey: a.lkey,
    };
    let s1 = [sge(1, WRITE_LEN)];
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite, &s1);
    w.remote_addr = 0x40_000;
    w.rkey = b.rkey;
    s.dev[0].post_send(s.qpn[0], &w).unwrap();
    let s2 = [sge(5000, ONLY_LEN)];
    let mut w = SendWr::new(2, WrOpcode::RdmaWrite, &s2);
    w.remote_addr = 0x40_000 + 5000;
    w.rkey = b.rkey;
    s.dev[0].post_send(s.qpn[0], &w).unwrap();
    let s3 = [sge(6000, SEND_LEN)];
    s.dev[0]
        .post_send(s.qpn[0], &SendWr::new(3, WrOpcode::Send, &s3))
        .unwrap();
    // Side 1 reads 3074 bytes of side 0's shared MR into 8000.. of its own.
    let s4 = [Sge {
        addr: 0x40_000 + 8000,
        length: READ_LEN as u32,
        lkey: b.lkey,
    }];
    let mut r = SendWr::new(4, WrOpcode::RdmaRead, &s4);
    r.remote_addr = 0x10_000 + 3;
    r.rkey = a.rkey;
    s.dev[1].post_send(s.qpn[1], &r).unwrap();

    let (frames, gathered) = run(&mut s, gather);
    let mut wc = [roce_stack::verbs::Wc::EMPTY; 16];
    let n0 = s.dev[0].poll_cq(s.cq[0], &mut wc);
    assert!(
        wc[..n0]
            .iter()
            .all(|w| w.status == roce_stack::verbs::WcStatus::Success),
        "{:?}",
        &wc[..n0]
    );
    let got = s.dev[1].mr(b.lkey).unwrap().as_slice().to_vec();
    assert_eq!(s.dev[0].tx_zero_copy_frames(), gathered as u64);
    (frames, gathered, got)
}

fn opcodes(frames: &Frames) -> Vec<Opcode> {
    frames
        .iter()
        .map(|(_, f)| RocePacket::parse(f).unwrap().bth().opcode)
        .collect()
}

fn check_gather_equals_copy(ipv6: bool, vlan: bool) {
    let (copy, g0, got_copy) = scenario(ipv6, vlan, false);
    let (zc, g1, got_zc) = scenario(ipv6, vlan, true);
    assert_eq!(g0, 0);
    let ops = opcodes(&zc);
    for want in [
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
    ] {
        assert!(ops.contains(&want), "{want:?} missing from {ops:?}");
    }
    // Every data packet from side 0 went by reference: 4 + 1 + 2 + 3.
    assert_eq!(g1, 10);
    assert_eq!(copy.len(), zc.len());
    for (i, (a, b)) in copy.iter().zip(&zc).enumerate() {
        assert_eq!(a, b, "frame {i} differs");
    }
    // The data arrived (independent of our builder: the source pattern).
    let src = pattern(8192, 5);
    for got in [&got_copy, &got_zc] {
        assert_eq!(&got[..WRITE_LEN], &src[1..1 + WRITE_LEN]);
        assert_eq!(&got[5000..5000 + ONLY_LEN], &src[5000..5000 + ONLY_LEN]);
        assert_eq!(&got[8000..8000 + READ_LEN], &src[3..3 + READ_LEN]);
        assert_eq!(&got[12000..12000 + SEND_LEN], &src[6000..6000 + SEND_LEN]);
    }
}

#[test]
fn gather_frames_equal_copied_frames_ipv4() {
    check_gather_equals_copy(false, false);
}

#[test]
fn gather_frames_equal_copied_frames_ipv4_vlan() {
    check_gather_equals_copy(false, true);
}

#[test]
fn gather_frames_equal_copied_frames_ipv6() {
    check_gather_equals_copy(true, false);
}

#[test]
fn gather_frames_equal_copied_frames_ipv6_vlan() {
    check_gather_equals_copy(true, true);
}

#[test]
fn shared_mr_refuses_write_rights() {
    let mut d = Device::new(config(0, false, 2048));
    let pd = d.alloc_pd();
    let mem: Arc<[u8]> = Arc::from(vec![0u8; 64]);
    for bad in [
        AccessFlags::LOCAL_WRITE,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
    ] {
        assert_eq!(
            d.reg_mr_shared(pd, Arc::clone(&mem), 0, bad),
            Err(VerbsError::InvalidAttribute("access"))
        );
    }
    let k = d
        .reg_mr_shared(pd, Arc::clone(&mem), 0, AccessFlags::REMOTE_READ)
        .unwrap();
    assert_eq!(Arc::strong_count(&mem), 2);
    assert!(d.mr_mut(k.lkey).unwrap().as_mut_slice().is_empty());
    assert_eq!(d.mr(k.lkey).unwrap().len(), 64);
    assert_eq!(d.dereg_mr(k.lkey), Ok(Vec::new()));
    assert_eq!(Arc::strong_count(&mem), 1);
}

/// A write into a shared MR is refused by the responder (no REMOTE_WRITE):
/// the stack never writes it.
#[test]
fn remote_write_into_shared_mr_is_refused() {
    let mut s = setup(false, false, 2048);
    let mem: Arc<[u8]> = Arc::from(vec![7u8; 4096]);
    let t = s.dev[1]
        .reg_mr_shared(s.pd[1], Arc::clone(&mem), 0x9000, AccessFlags::REMOTE_READ)
        .unwrap();
    let a = s.dev[0]
        .reg_mr(s.pd[0], vec![1u8; 4096], 0x1000, all_access())
        .unwrap();
    let sg = [Sge {
        addr: 0x1000,
        length: 100,
        lkey: a.lkey,
    }];
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite, &sg);
    w.remote_addr = 0x9000;
    w.rkey = t.rkey;
    s.dev[0].post_send(s.qpn[0], &w).unwrap();
    run(&mut s, true);
    let mut wc = [roce_stack::verbs::Wc::EMPTY; 4];
    let n = s.dev[0].poll_cq(s.cq[0], &mut wc);
    assert_eq!(n, 1);
    assert_eq!(wc[0].status, roce_stack::verbs::WcStatus::RemAccessErr);
    assert!(mem.iter().all(|b| *b == 7));
}

/// Below `zero_copy_min_bytes`, and from owned MRs, frames stay Whole.
#[test]
fn threshold_and_owned_mrs_stay_whole() {
    let mut s = setup(false, false, 2048);
    let mem: Arc<[u8]> = Arc::from(pattern(4096, 1));
    let a = s.dev[0]
        .reg_mr_shared(s.pd[0], Arc::clone(&mem), 0x1000, AccessFlags::empty())
        .unwrap();
    let o = s.dev[0]
        .reg_mr(s.pd[0], pattern(4096, 1), 0x8000, all_access())
        .unwrap();
    let b = s.dev[1]
        .reg_mr(s.pd[1], vec![0u8; 8192], 0x4000, all_access())
        .unwrap();
    for (i, (addr, lkey)) in [(0x1000u64, a.lkey), (0x8000, o.lkey)].iter().enumerate() {
        let sg = [Sge {
            addr: *addr,
            length: 3000,
            lkey: *lkey,
        }];
        let mut w = SendWr::new(i as u64, WrOpcode::RdmaWrite, &sg);
        w.remote_addr = 0x4000;
        w.rkey = b.rkey;
        s.dev[0].post_send(s.qpn[0], &w).unwrap();
    }
    let (_, gathered) = run(&mut s, true);
    // PMTU 1024 < 2048: nothing qualifies.
    assert_eq!(gathered, 0);
    assert_eq!(Arc::strong_count(&mem), 2);
}

/// A backend without its own `tx_burst_gather`: the provided one copies
/// Gather frames whole into its buffer.
struct VecIo {
    sent: Vec<Vec<u8>>,
}

impl FrameIo for VecIo {
    type Error = Infallible;
    fn max_frame_len(&self) -> usize {
        9000
    }
    fn rx_burst(&mut self, _: usize, _: &mut dyn FnMut(&[u8])) -> Result<usize, Infallible> {
        Ok(0)
    }
    fn tx_burst(
        &mut self,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<usize, Infallible> {
        let mut n = 0;
        while n < max {
            let mut buf = vec![0u8; 9000];
            let Some(len) = fill(&mut buf) else { break };
            buf.truncate(len);
            self.sent.push(buf);
            n += 1;
        }
        Ok(n)
    }
}

#[test]
fn default_tx_burst_gather_copies_and_releases_the_pin() {
    let frames = |gather: bool| {
        let mut s = setup(true, true, 1);
        let mem: Arc<[u8]> = Arc::from(pattern(4096, 9));
        let a = s.dev[0]
            .reg_mr_shared(s.pd[0], Arc::clone(&mem), 0, AccessFlags::empty())
            .unwrap();
        let sg = [Sge {
            addr: 10,
            length: 3001,
            lkey: a.lkey,
        }];
        let mut w = SendWr::new(1, WrOpcode::RdmaWrite, &sg);
        w.remote_addr = 0x4000;
        w.rkey = 0x1234;
        s.dev[0].post_send(s.qpn[0], &w).unwrap();
        let mut io = VecIo { sent: Vec::new() };
        let dev = &mut s.dev[0];
        let now = Instant::ZERO;
        if gather {
            io.tx_burst_gather(32, &mut |b| dev.poll_transmit_gather(now, b))
                .unwrap();
            assert_eq!(dev.tx_zero_copy_frames(), 3);
        } else {
            io.tx_burst(32, &mut |b| dev.poll_transmit(now, b)).unwrap();
        }
        // Only the MR's own clone is left: the frames released theirs.
        assert_eq!(Arc::strong_count(&mem), 2);
        io.sent
    };
    let a = frames(false);
    let b = frames(true);
    assert_eq!(a.len(), 3);
    assert_eq!(a, b);
}
