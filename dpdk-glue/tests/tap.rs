//! The stack over `net_tap`: a DPDK port backed by a kernel TAP interface
//! (unique name per process, removed when the port closes). Frames the
//! device sends appear in the kernel interface's receive counters; a frame
//! the kernel sends on the interface (through an AF_PACKET socket) reaches
//! the device. Needs root and /dev/net/tun.

mod common;

use std::ffi::CString;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{eal, unique};
use dpdk_glue::{DpdkPort, Mempool, MonotonicClock, Port, PortConfig, DEFAULT_DATA_ROOM};
use roce_io::pump;
use roce_stack::testing::{connect, ConnOpts, Faults, Pair};
use roce_stack::transport::av::AddressVector;
use roce_stack::verbs::{
    AccessFlags, QpType, RecvWr, SendWr, Sge, UdDest, Wc, WcOpcode, WcStatus, WrOpcode,
};
use roce_stack::wire::ext::DethRepr;
use roce_stack::wire::{BthRepr, ExtHeaders, Opcode};

const QKEY: u32 = 0x2222_2222;

fn sysfs_counter(ifname: &str, name: &str) -> u64 {
    let p = format!("/sys/class/net/{ifname}/statistics/{name}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// Send `frame` out of interface `ifname` through an AF_PACKET socket.
fn kernel_send(ifname: &str, frame: &[u8]) {
    let c = CString::new(ifname).unwrap();
    // SAFETY: plain libc calls with valid arguments; the socket is closed
    // before returning; `addr` is a fully initialised sockaddr_ll.
    unsafe {
        let ifindex = libc::if_nametoindex(c.as_ptr());
        assert!(ifindex > 0, "no interface {ifname}");
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let mut addr: libc::sockaddr_ll = std::mem::zeroed();
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = ifindex as i32;
        addr.sll_halen = 6;
        addr.sll_addr[..6].copy_from_slice(&frame[..6]);
        let n = libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        );
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        assert_eq!(n, frame.len() as isize, "sendto: {err}");
    }
}

#[test]
fn tap_frames_reach_the_kernel_interface_and_back() {
    let eal = eal();
    let ifname = unique("rt");
    assert!(ifname.len() <= 15, "interface name {ifname} too long");
    let id = eal
        .probe_vdev(&format!("{},iface={ifname}", unique("net_tap")))
        .expect("probe net_tap (needs /dev/net/tun)");
    let pool = Mempool::new(&unique("tp"), 2047, 0, DEFAULT_DATA_ROOM).unwrap();
    let mut io = DpdkPort::new(Port::configure(id, 1, 1, &pool, 1500).unwrap()).unwrap();
    io.port()
        .wait_link_up(Duration::from_secs(10))
        .expect("tap link up");
    // Promiscuous mode is an explicit option, off by default.
    assert!(!PortConfig::default().promiscuous);
    assert_eq!(io.port().promiscuous(), Some(false));
    assert!(Path::new(&format!("/sys/class/net/{ifname}")).exists());

    // Side 0 is the device behind the TAP; side 1 only supplies addresses.
    let mut p = Pair::new(1500, Faults::default(), 11);
    let c = connect(
        &mut p,
        &ConnOpts {
            qp_type: QpType::Ud,
            qkey: QKEY,
            ..ConnOpts::default()
        },
    );
    let access = AccessFlags::LOCAL_WRITE;
    let a = p.dev[0]
        .reg_mr(c.pd[0], (0..4096u32).map(|i| i as u8).collect(), 0, access)
        .unwrap();
    let dest = UdDest {
        av: AddressVector {
            dgid: p.dev[1].gid(0).unwrap(),
            dmac: p.dev[1].config().mac,
            ..AddressVector::default()
        },
        remote_qpn: c.qpn[1],
        remote_qkey: QKEY,
    };
    // The frame the kernel will send to side 0 later: a UD SEND_ONLY from
    // side 1's QP with 300 bytes.
    let payload: Vec<u8> = (0..300u32).map(|i| (i * 3) as u8).collect();
    let inbound = p.frame(
        1,
        BthRepr::new(Opcode::UD_SEND_ONLY, c.qpn[0], 1),
        ExtHeaders {
            deth: Some(DethRepr {
                qkey: QKEY,
                rsvd: 0,
                src_qp: c.qpn[1],
            }),
            ..ExtHeaders::default()
        },
        &payload,
    );
    let Pair { dev, .. } = p;
    let [mut dev, _] = dev;
    let clock = MonotonicClock::new();

    // Device -> kernel: 32 UD SENDs of 200 bytes.
    let before = sysfs_counter(&ifname, "rx_packets");
    let sge = [Sge {
        addr: 0,
        length: 200,
        lkey: a.lkey,
    }];
    for i in 0..32 {
        let mut wr = SendWr::new(i, WrOpcode::Send, &sge);
        wr.ud = Some(dest);
        dev.post_send(c.qpn[0], &wr).unwrap();
    }
    let guard = Instant::now();
    while io.port().stats().unwrap().opackets < 32 {
        pump(&mut dev, &mut io, clock.now(), 32).unwrap();
        assert!(guard.elapsed() < Duration::from_secs(60), "TX stuck");
    }
    let mut wc = [Wc::EMPTY; 64];
    assert_eq!(dev.poll_cq(c.cq[0], &mut wc), 32);
    assert!(wc[..32].iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(
        sysfs_counter(&ifname, "rx_packets") - before,
        32,
        "the kernel interface received the device's 32 frames"
    );

    // Kernel -> device.
    let rsge = [Sge {
        addr: 1024,
        length: 40 + 1024,
        lkey: a.lkey,
    }];
    dev.post_recv(
        c.qpn[0],
        &RecvWr {
            wr_id: 99,
            sg_list: &rsge,
        },
    )
    .unwrap();
    // A frame for another MAC reaches the device (net_tap does not filter)
    // and is dropped there, counted, without consuming the receive WQE.
    let mut foreign = inbound.clone();
    foreign[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x77]);
    kernel_send(&ifname, &foreign);
    let guard = Instant::now();
    while dev.counters().rx_dmac_mismatch == 0 {
        pump(&mut dev, &mut io, clock.now(), 32).unwrap();
        assert!(
            guard.elapsed() < Duration::from_secs(60),
            "foreign frame never seen: {:?}",
            dev.counters()
        );
    }
    assert!(dev.cq(c.cq[0]).unwrap().is_empty());
    kernel_send(&ifname, &inbound);
    let guard = Instant::now();
    while dev.cq(c.cq[0]).unwrap().is_empty() {
        pump(&mut dev, &mut io, clock.now(), 32).unwrap();
        assert!(
            guard.elapsed() < Duration::from_secs(60),
            "RX stuck: {:?}",
            dev.counters()
        );
    }
    assert_eq!(dev.poll_cq(c.cq[0], &mut wc), 1);
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].wr_id),
        (WcStatus::Success, WcOpcode::Recv, 99)
    );
    assert_eq!(wc[0].byte_len, 40 + 300);
    assert_eq!(
        &dev.mr(a.lkey).unwrap().as_slice()[1024 + 40..1024 + 340],
        &payload[..]
    );

    // Closing the port removes the kernel interface.
    drop(io);
    let guard = Instant::now();
    while Path::new(&format!("/sys/class/net/{ifname}")).exists() {
        assert!(
            guard.elapsed() < Duration::from_secs(10),
            "{ifname} still present after the port closed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
