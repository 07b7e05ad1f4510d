//! The safe layer over real DPDK objects (one EAL for the whole binary,
//! ports added with `rte_dev_probe`): ownership of mbufs (no leak, no
//! double free), the errors the EAL would only log, and zero-copy external
//! buffers. Needs root.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{eal, eal_args, unique, TempDir};
use dpdk_glue::extbuf::{tx_chain_extbuf, tx_copy};
use dpdk_glue::{DpdkError, Eal, Mbuf, Mempool, Port, DEFAULT_DATA_ROOM};

/// A started net_ring port (it loops back to itself) with its own pool.
fn ring_port(pool_size: u32) -> (Port, Mempool) {
    let eal = eal();
    let name = unique("net_ring");
    let id = eal.probe_vdev(&name).expect("probe net_ring");
    let pool = Mempool::new(&unique("rp"), pool_size, 0, DEFAULT_DATA_ROOM).expect("pool");
    let mut port = Port::configure(id, 1, 1, &pool, 1500).expect("configure");
    port.start().expect("start");
    port.wait_link_up(Duration::from_secs(5))
        .expect("ring link");
    (port, pool)
}

fn frame(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 7 + j) as u8).collect()
}

#[test]
fn second_eal_init_is_refused_with_a_clear_error() {
    let _ = eal();
    let e = Eal::init(&eal_args()).unwrap_err();
    assert_eq!(e, DpdkError::AlreadyInitialized);
    assert!(e.to_string().contains("one EAL per process"), "{e}");
    assert!(Eal::get().is_some());
}

#[test]
fn a_vdev_that_fails_to_probe_is_an_error() {
    let eal = eal();
    // net_pcap needs rx/tx arguments: its probe fails.
    let name = unique("net_pcap");
    let e = eal.probe_vdev(&name).unwrap_err();
    match &e {
        DpdkError::VdevProbe {
            name: n, detail, ..
        } => {
            assert_eq!(n, &name);
            assert!(detail.contains("rte_dev_probe"), "{detail}");
        }
        other => panic!("expected VdevProbe, got {other:?}"),
    }
    // An unknown driver.
    assert!(matches!(
        eal.probe_vdev("net_nosuchdriver0"),
        Err(DpdkError::VdevProbe { .. })
    ));
    assert!(matches!(
        eal.port_by_name("net_nosuchdriver0"),
        Err(DpdkError::NoSuchPort(_))
    ));
}

#[test]
fn frames_round_trip_through_a_ring_without_leaking_mbufs() {
    let (mut port, pool) = ring_port(4095);
    let mut tx = Vec::new();
    for i in 0..32 {
        let mut m = pool.alloc().expect("mbuf");
        m.append(100 + i)
            .unwrap()
            .copy_from_slice(&frame(i, 100 + i));
        tx.push(m);
    }
    assert_eq!(pool.in_use(), 32);
    assert_eq!(port.tx_burst(0, &mut tx), 32);
    assert!(tx.is_empty());
    let mut rx = Vec::new();
    assert_eq!(port.rx_burst(0, &mut rx, 64), 32);
    for (i, m) in rx.iter().enumerate() {
        assert_eq!(m.nb_segs(), 1);
        assert_eq!(m.data(), &frame(i, 100 + i)[..]);
    }
    drop(rx);
    assert_eq!(pool.in_use(), 0, "every mbuf went back to the pool");
    let s = port.stats().unwrap();
    assert_eq!((s.opackets, s.ipackets), (32, 32));
}

#[test]
fn frames_the_driver_refuses_are_freed_or_kept() {
    let (mut port, pool) = ring_port(4095);
    // net_ring's ring holds 1023 mbufs (1024 slots, one kept empty).
    let mut tx = Vec::new();
    assert!(pool.alloc_bulk(&mut tx, 1100));
    let sent = port.tx_burst(0, &mut tx);
    assert_eq!(sent, 1023);
    assert!(tx.is_empty(), "unsent mbufs are freed, not handed back");
    assert_eq!(pool.in_use(), 1023, "only the ring holds mbufs");
    // The retaining variant keeps what the full ring refused, in order.
    let mut keep = Vec::new();
    assert!(pool.alloc_bulk(&mut keep, 5));
    let first = keep[0].as_ptr();
    assert_eq!(port.tx_burst_retain(0, &mut keep), 0);
    assert_eq!(keep.len(), 5);
    assert_eq!(keep[0].as_ptr(), first);
    let mut rx = Vec::new();
    while port.rx_burst(0, &mut rx, 512) > 0 {}
    assert_eq!(rx.len(), 1023);
    dpdk_glue::free_bulk(&mut rx);
    assert_eq!(port.tx_burst_retain(0, &mut keep), 5);
    assert!(keep.is_empty());
    while port.rx_burst(0, &mut rx, 512) > 0 {}
    assert_eq!(rx.len(), 5);
    rx.clear();
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn pools_too_small_for_the_port_are_refused() {
    let eal = eal();
    let id = eal.probe_vdev(&unique("net_ring")).unwrap();
    // Too few mbufs for 512 RX descriptors plus a burst.
    let small = Mempool::new(&unique("sm"), 255, 0, DEFAULT_DATA_ROOM).unwrap();
    match Port::configure(id, 1, 1, &small, 1500) {
        Err(DpdkError::PoolTooSmall { needed, have, .. }) => {
            assert_eq!(have, 255);
            assert!(needed > 255);
        }
        other => panic!("expected PoolTooSmall, got {other:?}"),
    }
    // Mbufs too short for a 1500-byte MTU frame.
    let short = Mempool::new(&unique("sh"), 2047, 0, 1024 + 128).unwrap();
    assert!(matches!(
        Port::configure(id, 1, 1, &short, 1500),
        Err(DpdkError::PoolTooSmall {
            needed: 1518,
            have: 1024,
            ..
        })
    ));
    // A cache larger than DPDK allows for the pool size.
    assert!(matches!(
        Mempool::new(&unique("ca"), 100, 256, DEFAULT_DATA_ROOM),
        Err(DpdkError::PoolTooSmall { .. })
    ));
    // The refusals left the port usable.
    let ok = Mempool::new(&unique("ok"), 2047, 32, DEFAULT_DATA_ROOM).unwrap();
    let port = Port::configure(id, 1, 1, &ok, 1500).unwrap();
    // And a second handle on the same port is refused.
    assert_eq!(
        Port::configure(id, 1, 1, &ok, 1500).unwrap_err(),
        DpdkError::PortInUse(id)
    );
    drop(port);
}

#[test]
fn a_link_that_never_comes_up_times_out() {
    let eal = eal();
    let dir = TempDir::new();
    // A memif server whose client never connects.
    let name = unique("net_memif");
    let devargs = format!(
        "{name},role=server,socket={}/m.sock,socket-abstract=no",
        dir.0.display()
    );
    let id = eal.probe_vdev(&devargs).unwrap();
    let pool = Mempool::new(&unique("lk"), 2047, 0, DEFAULT_DATA_ROOM).unwrap();
    let mut port = Port::configure(id, 1, 1, &pool, 1500).unwrap();
    port.start().unwrap();
    match port.wait_link_up(Duration::from_millis(200)) {
        Err(DpdkError::LinkDownTimeout { port: p, .. }) => assert_eq!(p, id),
        other => panic!("expected LinkDownTimeout, got {other:?}"),
    }
}

#[test]
fn mbuf_accessors_keep_within_the_buffer() {
    let _ = eal();
    let pool = Mempool::new(&unique("mb"), 511, 0, DEFAULT_DATA_ROOM).unwrap();
    let mut m = pool.alloc().unwrap();
    assert_eq!(m.data_len(), 0);
    assert_eq!(m.headroom(), dpdk_glue::HEADROOM);
    assert_eq!(m.tailroom(), 2048);
    assert!(m.append(2049).is_none(), "append past the tailroom");
    assert!(!m.set_len(2049));
    let room = m.room_mut().unwrap();
    assert_eq!(room.len(), 2048);
    room[..4].copy_from_slice(b"abcd");
    assert!(m.set_len(4));
    assert_eq!(m.data(), b"abcd");
    m.prepend(2).unwrap().copy_from_slice(b"xy");
    assert_eq!(m.data(), b"xyabcd");
    assert!(m.adj(1) && m.trim(1));
    assert_eq!(m.data(), b"yabc");
    // Chains.
    let mut t = pool.alloc().unwrap();
    t.append(3).unwrap().copy_from_slice(b"123");
    m.chain(t).unwrap();
    assert_eq!((m.nb_segs(), m.pkt_len(), m.data_len()), (2, 7, 4));
    let segs: Vec<&[u8]> = m.segments().collect();
    assert_eq!(segs, [&b"yabc"[..], &b"123"[..]]);
    assert!(m.room_mut().is_none(), "a chain lends no single room");
    assert!(m.fill_room(usize::MAX, |_| Some(0)).is_none());
    assert!(m.single_segment_data().is_none());
    let mut v = Vec::new();
    m.copy_to(&mut v);
    assert_eq!(v, b"yabc123");
    assert_eq!(pool.in_use(), 2);
    drop(m);
    assert_eq!(pool.in_use(), 0, "dropping the head frees the chain");
    // The per-frame fast paths: room = data_len + tailroom, capped by max.
    let mut m = pool.alloc().unwrap();
    let r = m.fill_room(usize::MAX, |room| {
        assert_eq!(room.len(), 2048);
        room[..3].copy_from_slice(b"abc");
        Some(3)
    });
    assert_eq!(r, Some(Ok(Some(3))));
    assert_eq!((m.data_len(), m.pkt_len()), (3, 3));
    assert_eq!(m.single_segment_data(), Some(&b"abc"[..]));
    assert_eq!(
        m.fill_room(100, |room| Some(room.len() + 1)),
        Some(Err(101))
    );
    assert_eq!(m.data(), b"abc", "a refused length changes nothing");
    assert_eq!(m.fill_room(100, |_| None), Some(Ok(None)));
    drop(m);
    assert_eq!(pool.in_use(), 0);
    // into_raw / from_raw round trip.
    let m = pool.alloc().unwrap();
    let raw = m.into_raw();
    // SAFETY: `raw` came from into_raw and is owned by nothing else.
    let m: Mbuf = unsafe { Mbuf::from_raw(raw) }.unwrap();
    drop(m);
    assert_eq!(pool.in_use(), 0);
}

#[test]
fn an_extbuf_chain_pins_caller_memory_until_the_driver_frees_it() {
    let (mut port, pool) = ring_port(4095);
    let ext_pool = Mempool::new(&unique("ext"), 511, 0, 0).unwrap();
    let region: Arc<[u8]> = (0..9000u32).map(|i| (i % 251) as u8).collect();
    let header = [0xAAu8; 58];
    let tail = [0xBB, 0xCC, 0xDD, 0xEE, 0x01, 0x02];
    let m = tx_chain_extbuf(&pool, &ext_pool, &header, &region, 1000, 4096, &tail).unwrap();
    assert_eq!(m.nb_segs(), 3);
    assert_eq!(m.pkt_len(), 58 + 4096 + 6);
    assert_eq!(Arc::strong_count(&region), 2, "the chain pins the region");
    let segs: Vec<&[u8]> = m.segments().collect();
    assert_eq!(
        segs[1].as_ptr(),
        region[1000..].as_ptr(),
        "no copy of the payload"
    );
    let mut tx = vec![m];
    assert_eq!(port.tx_burst(0, &mut tx), 1);
    assert_eq!(Arc::strong_count(&region), 2, "still pinned while queued");
    let mut rx = Vec::new();
    assert_eq!(port.rx_burst(0, &mut rx, 8), 1);
    let mut bytes = Vec::new();
    rx[0].copy_to(&mut bytes);
    let mut expect = header.to_vec();
    expect.extend_from_slice(&region[1000..5096]);
    expect.extend_from_slice(&tail);
    assert_eq!(bytes, expect);
    assert!(rx[0].segments().nth(1).is_some());
    drop(rx);
    assert_eq!(
        Arc::strong_count(&region),
        1,
        "the free callback released it"
    );
    assert_eq!((pool.in_use(), ext_pool.in_use()), (0, 0));

    // Errors: a range outside the region, a payload over 64 KiB.
    assert!(matches!(
        tx_chain_extbuf(&pool, &ext_pool, &header, &region, 8000, 2000, &tail),
        Err(DpdkError::ExtBuf(_))
    ));
    let big: Arc<[u8]> = vec![0u8; 70_000].into();
    assert!(matches!(
        tx_chain_extbuf(&pool, &ext_pool, &header, &big, 0, 70_000, &tail),
        Err(DpdkError::ExtBuf(_))
    ));
    assert_eq!(Arc::strong_count(&region), 1);
    assert_eq!((pool.in_use(), ext_pool.in_use()), (0, 0));

    // The copying variant builds the same bytes in one segment.
    let c = tx_copy(&pool, &header, &region[1000..5096], &tail);
    assert!(
        matches!(c, Err(DpdkError::TooLong { .. })),
        "4 KiB does not fit 2 KiB mbufs"
    );
    let c = tx_copy(&pool, &header, &region[1000..2000], &tail).unwrap();
    assert_eq!(c.nb_segs(), 1);
    assert_eq!(&c.data()[58..1058], &region[1000..2000]);
}

#[test]
fn an_extbuf_mbuf_is_never_writable() {
    let _ = eal();
    let pool = Mempool::new(&unique("wr"), 511, 0, DEFAULT_DATA_ROOM).unwrap();
    let region: Arc<Vec<u8>> = Arc::new(vec![7u8; 256]);
    let mut m = tx_chain_extbuf(&pool, &pool, &[1, 2], &region, 0, 256, &[3]).unwrap();
    // The head is ours and writable; the external segment is reachable only
    // through shared slices.
    assert!(m.is_writable());
    assert!(m.data_mut().is_some());
    let ext = m.segments().nth(1).unwrap();
    assert_eq!(ext, &region[..]);
    drop(m);
    assert_eq!(Arc::strong_count(&region), 1);
}

#[test]
fn dpdk_port_keeps_frames_the_driver_refuses_in_order() {
    use roce_stack::backend::FrameIo;
    let (port, pool) = ring_port(4095);
    let mut io = dpdk_glue::DpdkPort::new(port).unwrap();
    assert_eq!(io.max_frame_len(), 1500 + 18);
    // A "device" with frames numbered 0, 1, 2, ... (the number in the
    // first 4 bytes), 64 bytes each.
    let next = std::cell::Cell::new(0u32);
    let mut fill = |buf: &mut [u8]| -> Option<usize> {
        buf[..4].copy_from_slice(&next.get().to_be_bytes());
        buf[4..64].fill(0xEE);
        next.set(next.get() + 1);
        Some(64)
    };
    // net_ring holds 1023 frames: two bursts of 512 fill it and leave one
    // frame pending; the third call takes nothing new from the device.
    assert_eq!(io.tx_burst(512, &mut fill).unwrap(), 512);
    assert_eq!(io.tx_burst(512, &mut fill).unwrap(), 511);
    assert_eq!(io.tx_pending(), 1);
    assert_eq!(io.tx_burst(512, &mut fill).unwrap(), 0);
    assert_eq!(
        next.get(),
        1024,
        "no frame was taken from the device while one waits"
    );
    // Drain the ring through the backend's receive side, in order.
    let mut seen = Vec::new();
    while io
        .rx_burst(256, &mut |f| {
            assert_eq!(f.len(), 64);
            seen.push(u32::from_be_bytes([f[0], f[1], f[2], f[3]]));
        })
        .unwrap()
        > 0
    {}
    assert_eq!(seen, (0..1023).collect::<Vec<u32>>());
    // The waiting frame goes first, then new ones.
    assert_eq!(io.tx_burst(3, &mut fill).unwrap(), 3);
    seen.clear();
    io.rx_burst(16, &mut |f| {
        seen.push(u32::from_be_bytes([f[0], f[1], f[2], f[3]]))
    })
    .unwrap();
    assert_eq!(seen, [1023, 1024, 1025]);
    assert_eq!(io.counters().tx_ring_full, 2);
    // A device with nothing to send: the first call stocks the spare mbufs,
    // later ones allocate nothing.
    assert_eq!(io.tx_burst(32, &mut |_| None).unwrap(), 0);
    let in_use = pool.in_use();
    for _ in 0..100 {
        assert_eq!(io.tx_burst(32, &mut |_| None).unwrap(), 0);
    }
    assert_eq!(pool.in_use(), in_use);
    drop(io);
    assert_eq!(
        pool.in_use(),
        0,
        "spare and pending mbufs are freed with the backend"
    );
}
