//! Zero-copy transmit end to end: a 64 KiB RDMA WRITE from a shared MR
//! (`Device::reg_mr_shared`) over a `net_memif` pair, the sender driven by
//! `roce_io::pump_gather`, so `DpdkPort::tx_burst_gather` sends
//! every data packet as an mbuf chain attached to the MR's memory
//! (`rte_pktmbuf_attach_extbuf`). The data is checked at the receiver, the
//! extbuf path is checked by the backend's counter, and the pin (the MR's
//! `Arc`) is checked to be released once the driver freed the frames.
//! Needs root.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{eal, memif_ports, unique, TempDir};
use dpdk_glue::extbuf::tx_chain_extbuf;
use dpdk_glue::{Mempool, MonotonicClock, DEFAULT_DATA_ROOM};
use roce_io::{pump, pump_gather, TxFrame};
use roce_stack::testing::pattern;
use roce_stack::testing::{connect, test_config, test_device, ConnOpts, Faults, Pair};
use roce_stack::verbs::{
    AccessFlags, Device, DeviceConfig, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};

const LEN: usize = 64 * 1024;

#[test]
fn write_64k_from_shared_mr_zero_copy_over_memif() {
    let dir = TempDir::new();
    let mut io = memif_ports(&dir, "zc");
    // PMTU 1024 on a 1500-byte link: let every full packet go by reference.
    let d0 = Device::new(DeviceConfig {
        zero_copy_min_bytes: 1024,
        ..test_config(0, 1500)
    });
    let mut p = Pair::with_devices([d0, test_device(1, 1500)], Faults::default(), 3);
    let c = connect(&mut p, &ConnOpts::default());
    let src = pattern(LEN + 64, 11);
    let mem: Arc<[u8]> = Arc::from(src.clone());
    let a = p.dev[0]
        .reg_mr_shared(c.pd[0], Arc::clone(&mem), 0x10_0000, AccessFlags::empty())
        .unwrap();
    let b = p.dev[1]
        .reg_mr(
            c.pd[1],
            vec![0; LEN + 64],
            0x8000_0000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let Pair { mut dev, .. } = p;
    let sge = [Sge {
        addr: 0x10_0000 + 32,
        length: LEN as u32,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 0x8000_0000 + 16;
    wr.rkey = b.rkey;
    dev[0].post_send(c.qpn[0], &wr).unwrap();

    let clock = MonotonicClock::new();
    let guard = Instant::now();
    let mut out = [Wc::EMPTY; 1];
    loop {
        if dev[0].poll_cq(c.cq[0], &mut out) == 1 {
            break;
        }
        pump_gather(&mut dev[0], &mut io[0], clock.now(), 32).unwrap();
        pump(&mut dev[1], &mut io[1], clock.now(), 32).unwrap();
        assert!(
            guard.elapsed() < Duration::from_secs(60),
            "WRITE not done after 60 s: {:?} / {:?}; {:?}",
            dev[0].counters(),
            dev[1].counters(),
            io[0].counters()
        );
    }
    assert_eq!(
        (out[0].status, out[0].opcode, out[0].wr_id),
        (WcStatus::Success, WcOpcode::RdmaWrite, 1)
    );
    let got = dev[1].mr(b.lkey).unwrap().as_slice();
    assert_eq!(&got[16..16 + LEN], &src[32..32 + LEN]);
    assert!(got[..16].iter().all(|x| *x == 0) && got[16 + LEN..].iter().all(|x| *x == 0));

    // 64 packets of 1024 bytes, each sent as an extbuf chain.
    let zc = io[0].counters().tx_zero_copy_frames;
    assert_eq!(zc, 64, "{:?}", io[0].counters());
    assert_eq!(io[0].counters().tx_zero_copy_fallback, 0);
    assert_eq!(dev[0].tx_zero_copy_frames(), 64);
    // Every frame was acknowledged, so the driver has sent and freed it:
    // only the MR's clone and ours remain; after dereg, only ours.
    assert_eq!(io[0].tx_pending(), 0);
    assert_eq!(Arc::strong_count(&mem), 2);
    dev[0].dereg_mr(a.lkey).unwrap();
    assert_eq!(Arc::strong_count(&mem), 1);
}

/// The chain built for a Gather frame holds the MR's memory until the mbuf
/// is freed, even after the device deregistered the MR and the frame
/// description is gone.
#[test]
fn gather_chain_pins_the_mr_until_freed() {
    let _ = eal();
    let mut p = Pair::with_devices(
        [
            Device::new(DeviceConfig {
                zero_copy_min_bytes: 1024,
                ..test_config(0, 1500)
            }),
            test_device(1, 1500),
        ],
        Faults::default(),
        5,
    );
    let c = connect(&mut p, &ConnOpts::default());
    let mem: Arc<[u8]> = Arc::from(pattern(4096, 3));
    let a = p.dev[0]
        .reg_mr_shared(c.pd[0], Arc::clone(&mem), 0, AccessFlags::empty())
        .unwrap();
    let sge = [Sge {
        addr: 100,
        length: 1024,
        lkey: a.lkey,
    }];
    let mut wr = SendWr::new(1, WrOpcode::RdmaWrite, &sge);
    wr.remote_addr = 0x1000;
    wr.rkey = 0x77;
    p.dev[0].post_send(c.qpn[0], &wr).unwrap();
    let mut hdr = vec![0u8; 2048];
    let frame = p.dev[0]
        .poll_transmit_gather(roce_stack::time::Instant::ZERO, &mut hdr)
        .expect("a frame");
    let TxFrame::Gather {
        hdr_len,
        payload,
        offset,
        len,
        ..
    } = &frame
    else {
        panic!("expected a Gather frame, got {frame:?}");
    };
    assert_eq!((*offset, *len), (100, 1024));
    let pool = Mempool::new(&unique("pin"), 63, 0, DEFAULT_DATA_ROOM).expect("pool");
    let ext = Mempool::new(&unique("pinx"), 63, 0, 0).expect("ext pool");
    let chain = tx_chain_extbuf(
        &pool,
        &ext,
        &hdr[..*hdr_len],
        payload,
        *offset,
        *len,
        frame.tail(),
    )
    .expect("chain");
    assert_eq!(chain.nb_segs(), 3);
    assert_eq!(chain.pkt_len(), frame.len());
    drop(frame);
    p.dev[0].dereg_mr(a.lkey).unwrap();
    // Ours and the chain's.
    assert_eq!(Arc::strong_count(&mem), 2);
    drop(chain);
    assert_eq!(Arc::strong_count(&mem), 1);
}
