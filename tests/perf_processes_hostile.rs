//! `roce perf --server` against hostile or broken peers on its TCP side
//! channel and its RoCE port, and `roce perf --client` against a server
//! that never answers. The test plays the peer itself: it speaks the side
//! channel's line protocol (documented in `src/perf/remote.rs`) and builds
//! its RoCE requests byte by byte, and it reads the server's answers as raw
//! UDP datagrams.
//!
//! Oracles: the packet layouts and codes of the IBTA (BTH opcode 0x0A
//! RC RDMA WRITE Only, 0x11 RC Acknowledge; AETH syndrome bits 6:5 = 00 ACK,
//! 11 NAK, NAK code 2 = remote access error, i.e. 0x62; the responder checks
//! `[va, va + len)` against the region it advertised, IBTA 1.7 §9.7.4.1.5
//! C9-88), the ICRC recipe of ROCEV2-DIGEST §4 computed here with the `crc`
//! crate's CRC-32, the exit statuses the README documents (2: refused
//! arguments, 1: failed run), and the limits `roce perf` documents (side
//! channel lines of at most 1024 bytes, 30 s handshake deadline, 30 s run
//! idle timeout). Timeouts are waited for, never measured.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

const CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// The key `roce perf` gave its first memory region before R_Keys were
/// random (the device's first key: index 1 << 8 | tag 0x9E).
const OLD_FIXED_RKEY: u32 = 0x0000_019E;

/// A `roce perf --server` started with `-p 0`, and the port it reported.
struct Server {
    child: Child,
    out: BufReader<ChildStdout>,
    port: u16,
}

impl Server {
    fn start(op: &str, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args(["perf", op, "--server", "--backend", "udp", "-p", "0"])
            .args(["--udp-port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn roce");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        out.read_line(&mut line).expect("first line");
        // " Waiting for a client on TCP port N ..."
        let port = line
            .split_whitespace()
            .find_map(|w| w.parse::<u16>().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        assert_ne!(port, 0, "{line}");
        Server { child, out, port }
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        s
    }

    /// Wait for the exit: (status, stdout, stderr).
    fn finish(mut self) -> (Option<i32>, String, String) {
        let mut rest = String::new();
        let _ = self.out.read_to_string(&mut rest);
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let st = self.child.wait().expect("wait");
        (st.code(), rest, err)
    }
}

/// One line from the side channel, without the newline.
fn read_line(r: &mut BufReader<TcpStream>) -> String {
    let mut s = String::new();
    r.read_line(&mut s).expect("side channel line");
    s.trim_end().to_string()
}

/// What the server advertised: its QPN and first PSN, and its region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Advert {
    udp: SocketAddr,
    qpn: u32,
    psn: u32,
    va: u64,
    rkey: u32,
    len: u64,
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

const CLIENT_QPN: u32 = 0x00_0042;
const CLIENT_PSN: u32 = 0x12_3456;

/// Play a client through the handshake (WRITE, 4 KiB, one QP, seed `seed`)
/// with `udp` as its RoCE socket; returns the side channel and what the
/// server advertised.
fn handshake(s: &Server, udp: &UdpSocket, seed: u64) -> (BufReader<TcpStream>, Advert) {
    let tcp = s.connect();
    let mut w = tcp.try_clone().expect("clone");
    let me = udp.local_addr().expect("addr");
    write!(
        w,
        "ROCE-PERF 1 client\n\
         config op=write lat=0 size=4096 iters=1000 duration_ns=0 qps=1 mtu=1024 tx_depth=16 cq_mod=16 qp_timeout=14 seed={seed} backend=udp\n\
         endpoint gid=::ffff:127.0.0.1 mac=02:00:7f:00:00:01 udp={me} va=0x0000100000000000 rkey=0x00000077 len=4096\n\
         qp qpn=0x{CLIENT_QPN:06x} psn=0x{CLIENT_PSN:06x}\n\
         end\n"
    )
    .expect("send");
    let mut r = BufReader::new(tcp);
    assert_eq!(read_line(&mut r), "ROCE-PERF 1 server");
    let ep = read_line(&mut r);
    assert!(ep.starts_with("endpoint "), "{ep}");
    let qp = read_line(&mut r);
    assert!(qp.starts_with("qp "), "{qp}");
    assert_eq!(read_line(&mut r), "end");
    let a = Advert {
        udp: field(&ep, "udp").parse().expect("udp"),
        qpn: hex(field(&qp, "qpn")) as u32,
        psn: hex(field(&qp, "psn")) as u32,
        va: hex(field(&ep, "va")),
        rkey: hex(field(&ep, "rkey")) as u32,
        len: field(&ep, "len").parse().expect("len"),
    };
    (r, a)
}

/// An RC RDMA WRITE Only (opcode 0x0A) with AckReq, as the UDP payload
/// (BTH, RETH, payload, ICRC) that a sender at `from` puts in a datagram to
/// `to`. The ICRC covers the IPv4 header the receiving backend rebuilds
/// (identification 0 with DF, destination port 4791: `io/src/udp.rs`),
/// per ROCEV2-DIGEST §4.
fn write_only(
    from: SocketAddr,
    to: SocketAddr,
    a: &Advert,
    psn: u32,
    va: u64,
    rkey: u32,
) -> Vec<u8> {
    let data = [0xA5u8; 8];
    let mut p = Vec::new();
    // BTH: opcode, SE/M/Pad/TVer 0, P_Key 0xFFFF, resv, DestQP, A + PSN.
    p.extend_from_slice(&[0x0A, 0x00, 0xFF, 0xFF, 0x00]);
    p.extend_from_slice(&a.qpn.to_be_bytes()[1..]);
    p.push(0x80);
    p.extend_from_slice(&psn.to_be_bytes()[1..]);
    // RETH: VA, R_Key, DMA length.
    p.extend_from_slice(&va.to_be_bytes());
    p.extend_from_slice(&rkey.to_be_bytes());
    p.extend_from_slice(&(data.len() as u32).to_be_bytes());
    p.extend_from_slice(&data);
    let udp_len = (8 + p.len() + 4) as u16;
    let (SocketAddr::V4(f), SocketAddr::V4(t)) = (from, to) else {
        panic!("IPv4 only");
    };
    let mut pseudo = vec![0xFFu8; 8];
    pseudo.extend_from_slice(&[0x45, 0xFF]);
    pseudo.extend_from_slice(&(20 + udp_len).to_be_bytes());
    pseudo.extend_from_slice(&[0x00, 0x00, 0x40, 0x00, 0xFF, 17, 0xFF, 0xFF]);
    pseudo.extend_from_slice(&f.ip().octets());
    pseudo.extend_from_slice(&t.ip().octets());
    pseudo.extend_from_slice(&f.port().to_be_bytes());
    pseudo.extend_from_slice(&4791u16.to_be_bytes());
    pseudo.extend_from_slice(&udp_len.to_be_bytes());
    pseudo.extend_from_slice(&[0xFF, 0xFF]);
    let mut bth = p.clone();
    bth[4] = 0xFF;
    pseudo.extend_from_slice(&bth);
    p.extend_from_slice(&CRC32.checksum(&pseudo).to_le_bytes());
    p
}

/// The next RC Acknowledge for QP `qpn` on `udp`: (PSN, AETH syndrome).
fn next_ack(udp: &UdpSocket, qpn: u32) -> (u32, u8) {
    udp.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut buf = [0u8; 2048];
    loop {
        let (n, _) = udp.recv_from(&mut buf).expect("an answer from the server");
        let d = &buf[..n];
        assert!(n >= 20, "short datagram {d:02x?}");
        let dest = u32::from_be_bytes([0, d[5], d[6], d[7]]);
        if d[0] == 0x11 && dest == qpn {
            return (u32::from_be_bytes([0, d[9], d[10], d[11]]), d[12]);
        }
    }
}

fn client_socket() -> UdpSocket {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("udp")
}

#[test]
fn a_write_past_the_advertised_region_is_naked_and_the_nak_reaches_the_peer() {
    let s = Server::start("write", &[]);
    let udp = client_socket();
    let (mut side, a) = handshake(&s, &udp, 7);
    assert_eq!(a.len, 4096, "{a:?}");
    let me = udp.local_addr().expect("addr");
    // The last 8 bytes of the region: inside, ACKed (syndrome class 000).
    let ok = write_only(me, a.udp, &a, CLIENT_PSN, a.va + a.len - 8, a.rkey);
    udp.send_to(&ok, a.udp).expect("send");
    let (psn, syn) = next_ack(&udp, CLIENT_QPN);
    assert_eq!((psn, syn >> 5), (CLIENT_PSN, 0), "syndrome {syn:#04x}");
    // 4 bytes inside, 4 past the end: NAK remote access error (0x62) with
    // the request's PSN, which the server sends before it stops.
    let bad = write_only(me, a.udp, &a, CLIENT_PSN + 1, a.va + a.len - 4, a.rkey);
    udp.send_to(&bad, a.udp).expect("send");
    let (psn, syn) = next_ack(&udp, CLIENT_QPN);
    assert_eq!((psn, syn), (CLIENT_PSN + 1, 0x62));
    // The server tells its side of the story and fails the run.
    let l = read_line(&mut side);
    assert!(l.starts_with("result fail server:"), "{l}");
    let (code, _, err) = s.finish();
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("entered the error state"), "{err}");
}

#[test]
fn a_write_with_the_old_fixed_rkey_is_refused() {
    let s = Server::start("write", &[]);
    let udp = client_socket();
    let (_side, a) = handshake(&s, &udp, 3);
    assert_ne!(a.rkey, OLD_FIXED_RKEY, "{a:?}");
    let me = udp.local_addr().expect("addr");
    let forged = write_only(me, a.udp, &a, CLIENT_PSN, a.va, OLD_FIXED_RKEY);
    udp.send_to(&forged, a.udp).expect("send");
    let (psn, syn) = next_ack(&udp, CLIENT_QPN);
    assert_eq!((psn, syn), (CLIENT_PSN, 0x62));
    let (code, _, err) = s.finish();
    assert_eq!(code, Some(1), "{err}");
}

/// What a `roce perf --client` sends a server that only listens: its
/// `config` and `endpoint` lines.
fn client_parameters(extra: &[&str]) -> (String, String) {
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = l.local_addr().expect("addr").port().to_string();
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["perf", "write", "--backend", "udp", "--client", "127.0.0.1"])
        .args(["-p", &port, "--udp-port", "0", "-n", "10"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let (s, _) = l.accept().expect("accept");
    let mut r = BufReader::new(s);
    assert_eq!(read_line(&mut r), "ROCE-PERF 1 client");
    let config = read_line(&mut r);
    let endpoint = read_line(&mut r);
    let qp = read_line(&mut r);
    drop(r);
    let _ = c.wait();
    (config, format!("{endpoint} {qp}"))
}

#[test]
fn psns_rkeys_and_vas_are_random_unless_seeded() {
    let (c1, e1) = client_parameters(&[]);
    let (c2, e2) = client_parameters(&[]);
    let keys = |e: &str| {
        (
            field(e, "psn").to_string(),
            field(e, "rkey").to_string(),
            field(e, "va").to_string(),
        )
    };
    let (k1, k2) = (keys(&e1), keys(&e2));
    // 24 + 32 + 20 random bits: equal by chance once in 2^76.
    assert_ne!(k1.0, k2.0, "{e1}\n{e2}");
    assert_ne!(k1.1, k2.1, "{e1}\n{e2}");
    assert_ne!(field(&c1, "seed"), field(&c2, "seed"));
    for e in [&e1, &e2] {
        assert_ne!(hex(field(e, "rkey")) as u32, OLD_FIXED_RKEY, "{e}");
    }
    // --seed repeats them.
    let (c3, e3) = client_parameters(&["--seed", "99"]);
    let (_, e4) = client_parameters(&["--seed", "99"]);
    assert_eq!(field(&c3, "seed"), "99");
    assert_eq!(keys(&e3), keys(&e4));
}

#[test]
fn a_config_beyond_the_memory_bound_is_refused_over_the_side_channel() {
    let s = Server::start("write", &[]);
    let tcp = s.connect();
    let mut w = tcp.try_clone().expect("clone");
    // 4096 QPs x 16384 WQEs: tens of GB of rings, slots and completions.
    // No endpoint follows: the server refuses on the config line.
    w.write_all(
        b"ROCE-PERF 1 client\n\
          config op=write lat=0 size=2 iters=1000 duration_ns=0 qps=4096 mtu=1024 tx_depth=16384 cq_mod=100 qp_timeout=14 seed=1 backend=udp\n",
    )
    .expect("send");
    let mut r = BufReader::new(tcp);
    assert_eq!(read_line(&mut r), "ROCE-PERF 1 server");
    let e = read_line(&mut r);
    assert!(
        e.starts_with("error ") && e.contains("MiB of memory"),
        "{e}"
    );
    let (code, _, err) = s.finish();
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
}

#[test]
fn side_channel_lines_are_capped_in_length_and_number() {
    // A line without a newline: cut off at 1024 bytes, not buffered on.
    let s = Server::start("write", &[]);
    let mut tcp = s.connect();
    tcp.write_all(b"ROCE-PERF 1 client\n").expect("send");
    let junk = vec![b'x'; 64 * 1024];
    // The server may close while this is being written.
    let _ = tcp.write_all(&junk);
    let (code, _, err) = s.finish();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("longer than 1024 bytes"), "{err}");
    // More `qp` lines than the config's QPs.
    let s = Server::start("write", &[]);
    let mut tcp = s.connect();
    tcp.write_all(
        b"ROCE-PERF 1 client\n\
          config op=write lat=0 size=64 iters=10 duration_ns=0 qps=1 mtu=1024 tx_depth=16 cq_mod=16 qp_timeout=14 seed=1 backend=udp\n\
          endpoint gid=::ffff:127.0.0.1 mac=02:00:7f:00:00:01 udp=127.0.0.1:9 va=0x0 rkey=0x1 len=64\n\
          qp qpn=0x000042 psn=0x000001\n\
          qp qpn=0x000043 psn=0x000001\n",
    )
    .expect("send");
    let (code, _, err) = s.finish();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("more `qp` lines than its 1 QPs"), "{err}");
}

#[test]
fn a_trickling_client_hits_the_handshake_deadline() {
    // One byte a second: every read succeeds, only a deadline on the whole
    // handshake ends it (30 s).
    let mut s = Server::start("write", &[]);
    let mut tcp = s.connect();
    let hello = b"ROCE-PERF 1 client\nconfig op=write lat=0 size=64 iters=10 duration_ns=0 qps=1 mtu=1024 tx_depth=16 cq_mod=16 qp_timeout=14 seed=1 backend=udp\n";
    for b in hello.iter().take(60) {
        if s.child.try_wait().expect("try_wait").is_some() {
            break;
        }
        // The server closes when it gives up; a write may then fail.
        let _ = tcp.write_all(&[*b]);
        std::thread::sleep(Duration::from_secs(1));
    }
    let (code, _, err) = s.finish();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("within 30 s"), "{err}");
    assert!(!err.contains("os error"), "{err}");
}

#[test]
fn an_idle_client_during_the_run_is_given_up_in_plain_words() {
    // A complete handshake, then nothing: no frame, no report.
    let s = Server::start("write", &[]);
    let udp = client_socket();
    let (side, _) = handshake(&s, &udp, 5);
    let (code, _, err) = s.finish();
    drop(side);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("sent nothing"), "{err}");
    assert!(err.contains("for 30 s"), "{err}");
    assert!(!err.contains("os error"), "{err}");
}

#[test]
fn a_client_whose_server_never_answers_says_so_in_plain_words() {
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = l.local_addr().expect("addr").port().to_string();
    let c = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["perf", "write", "--backend", "udp", "--client", "127.0.0.1"])
        .args(["-p", &port, "--udp-port", "0", "-n", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Accept and keep the connection open without a word.
    let (held, _) = l.accept().expect("accept");
    let o = c.wait_with_output().expect("client");
    drop(held);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("the server at 127.0.0.1"), "{err}");
    assert!(err.contains("within 30 s"), "{err}");
    assert!(!err.contains("os error"), "{err}");
}
