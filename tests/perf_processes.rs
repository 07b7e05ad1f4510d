//! `roce perf --server` / `--client` between two processes over the `udp`
//! backend on 127.0.0.1 (unique TCP and UDP ports per run): both exit 0,
//! both print perftest's table with the message size and the iteration
//! count asked for, the trailer's byte count is iterations × size, and the
//! data is verified (by the server for WRITE, SEND and ATOMIC, by the
//! client for READ).

#[path = "common/icrc_ref.rs"]
mod icrc_ref;
#[path = "support/perf_output.rs"]
mod perf_output;
#[path = "support/ports.rs"]
mod ports;

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::process::{Child, Command};

use perf_output::{dropped, finish_pair, spawn_roce as spawn, text};
use ports::free_port;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// A TCP port and two UDP ports below the ephemeral range, free a moment
/// ago ([`ports`]).
fn free_ports() -> (u16, u16, u16) {
    (free_port(), free_port(), free_port())
}

fn run_pair(op: &str, size: u64, iters: u64, extra: &[&str]) -> (String, String) {
    run_pair_during(op, size, iters, extra, |_, _| {})
}

/// [`run_pair`], calling `during(server UDP port, client)` once both are
/// started (and waiting for it to return).
fn run_pair_during(
    op: &str,
    size: u64,
    iters: u64,
    extra: &[&str],
    during: impl FnOnce(u16, &mut Child),
) -> (String, String) {
    run_pair_sides(op, size, iters, extra, [&[], &[]], during)
}

/// [`run_pair_during`], with `sides` = [server's, client's] own extra
/// arguments.
fn run_pair_sides(
    op: &str,
    size: u64,
    iters: u64,
    extra: &[&str],
    sides: [&[&str]; 2],
    during: impl FnOnce(u16, &mut Child),
) -> (String, String) {
    let (_, us, uc) = free_ports();
    let common = |tcp: u16, udp: u16| -> Vec<String> {
        let mut v: Vec<String> = [
            "perf",
            op,
            "--backend",
            "udp",
            "--port",
            &tcp.to_string(),
            "--udp-port",
            &udp.to_string(),
            "-n",
            &iters.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if op != "atomic" {
            v.push("-s".into());
            v.push(size.to_string());
        }
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    // The server listens on a port of the system's choosing (-p 0) and
    // says which.
    let mut sa = common(0, us);
    sa.extend(sides[0].iter().map(|s| s.to_string()));
    sa.push("--server".into());
    let mut server = spawn(&sa);
    let mut sout = BufReader::new(server.stdout.take().expect("stdout"));
    let mut first = String::new();
    sout.read_line(&mut first).expect("server's first line");
    let tcp: u16 = first
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no port in {first:?}"));
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = sout.read_to_string(&mut rest);
        first + &rest
    });
    let mut ca = common(tcp, uc);
    ca.extend(sides[1].iter().map(|s| s.to_string()));
    ca.extend(["--client".to_string(), "127.0.0.1".to_string()]);
    // The client retries the connection while the server starts.
    let mut client = spawn(&ca);
    during(us, &mut client);
    let qps: u64 = extra
        .iter()
        .position(|a| *a == "-q")
        .map_or(1, |i| extra[i + 1].parse().expect("-q"));
    let stdout = Box::new(move || reader.join().expect("server stdout"));
    let ((ct, _), (st, _)) = finish_pair(op, (size, iters, qps), client, server, Some(stdout));
    (ct, st)
}

#[test]
fn write_between_processes_over_udp() {
    let (c, s) = run_pair("write", 4096, 300, &[]);
    assert!(c.contains("RDMA_Write BW Test"), "{c}");
    assert!(s.contains("server MR equals the client's pattern"), "{s}");
}

#[test]
fn read_send_atomic_between_processes_over_udp() {
    let (c, _) = run_pair("read", 3000, 100, &["-q", "2"]);
    assert!(c.contains("client MR equals the server's pattern"), "{c}");
    let (_, s) = run_pair("send", 1500, 100, &[]);
    assert!(s.contains("100 messages received"), "{s}");
    let (_, s) = run_pair("atomic", 8, 100, &[]);
    assert!(s.contains("counter = 100 FETCH_ADDs"), "{s}");
}

#[test]
fn latency_between_processes_over_udp() {
    let (c, _) = run_pair("write", 64, 50, &["--lat"]);
    assert!(c.contains("RDMA_Write Latency Test"), "{c}");
}

#[test]
fn mismatched_server_refuses_with_a_message() {
    let (tcp, us, uc) = free_ports();
    let mut server = spawn(
        &[
            "perf",
            "read",
            "--server",
            "--backend",
            "udp",
            "--port",
            &tcp.to_string(),
            "--udp-port",
            &us.to_string(),
        ]
        .map(String::from),
    );
    let client = spawn(
        &[
            "perf",
            "write",
            "--client",
            "127.0.0.1",
            "--backend",
            "udp",
            "--port",
            &tcp.to_string(),
            "--udp-port",
            &uc.to_string(),
            "-n",
            "10",
        ]
        .map(String::from),
    );
    let c = client.wait_with_output().expect("client");
    if c.status.code() == Some(0) {
        let _ = server.kill();
    }
    let s = server.wait_with_output().expect("server");
    let (_, ce) = text(&c);
    let (_, se) = text(&s);
    assert_ne!(c.status.code(), Some(0), "{ce}");
    assert_eq!(s.status.code(), Some(2), "{se}");
    assert!(se.contains("the client runs write"), "{se}");
    assert!(ce.contains("refused"), "{ce}");
}

#[test]
fn mem_backend_cannot_join_processes() {
    let o = roce()
        .args(["perf", "write", "--server", "--backend", "mem"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("cannot join two processes"), "{e}");
}

#[test]
fn garbage_datagrams_are_counted_as_drops_not_retransmissions() {
    // Junk on the server's RoCE port while a run goes on: 64 bytes that are
    // no RoCEv2 packet (their ICRC cannot verify). The run still verifies;
    // the server's table lists them under the drops, and the retransmission
    // counters (if any) do not name them.
    let (_, s) = run_pair_during("write", 64, 20000, &[], |port, client| {
        let junk = UdpSocket::bind("127.0.0.1:0").expect("udp");
        for i in 0..2000u32 {
            let _ = junk.send_to(&[(i % 251) as u8; 64], ("127.0.0.1", port));
            std::thread::sleep(std::time::Duration::from_millis(2));
            if client.try_wait().expect("try_wait").is_some() {
                break;
            }
        }
    });
    let drops = s
        .split(" Received frames dropped before any QP (client / server):")
        .nth(1)
        .unwrap_or_else(|| panic!("no drops section: {s}"));
    let line = drops
        .lines()
        .find(|l| l.trim_start().starts_with("rx_parse_drops"))
        .unwrap_or_else(|| panic!("no rx_parse_drops: {s}"));
    let server: u64 = line
        .split('/')
        .nth(1)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(server > 0, "{line}");
    if let Some(r) = s.split(" Retransmission counters").nth(1) {
        let r = r.split(" Received frames").next().unwrap_or(r);
        assert!(!r.contains("rx_parse_drops"), "{s}");
    }
}

/// `--loss` and `--pcap` between processes (they were for `mem` only):
/// each side drops from what it sends, with its own probability, and
/// records what it sent and received. Oracle for the captures: the
/// independent ICRC reference (`tests/common/icrc_ref.rs`) and the IBTA's
/// opcode numbers: the client's capture holds each of the 300 WRITE ONLY
/// PSNs (4 KiB at PMTU 4096: one packet each) and the ACKs it received, the
/// server's the WRITEs it received and the ACKs it sent.
#[test]
fn loss_and_pcap_between_processes_over_udp() {
    let dir = std::env::temp_dir().join(format!("roce-perf-processes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (sp, cp) = (dir.join("server.pcap"), dir.join("client.pcap"));
    let (c, s) = run_pair_sides(
        "write",
        4096,
        300,
        &["--seed", "3"],
        [
            &["--loss", "0.01", "--pcap", sp.to_str().unwrap()],
            &["--loss", "0.05", "--pcap", cp.to_str().unwrap()],
        ],
        |_, _| {},
    );
    assert!(c.contains("Loss: 0.05 (seed 3)"), "{c}");
    assert!(s.contains("Loss: 0.01 (seed 3)"), "{s}");
    let (cd, sd) = (dropped(&c), dropped(&s));
    assert!(cd[0] > 0 && cd[1] == 0, "client: {c}");
    assert_eq!(sd[0], 0, "server: {s}");
    for (who, path, text) in [("client", &cp, &c), ("server", &sp, &s)] {
        let frames = roce_io::pcap::read_timed(path).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            text.contains(&format!(" pcap: {} frames written to", frames.len())),
            "{who}: {text}"
        );
        let mut write_psns = std::collections::BTreeSet::new();
        let mut acks = 0;
        for (i, f) in frames.iter().enumerate() {
            let loc = icrc_ref::locate(&f.data)
                .unwrap_or_else(|| panic!("{who} frame {}: not RoCEv2", i + 1));
            assert_eq!(
                icrc_ref::reference_icrc(loc.form, loc.covered).to_le_bytes(),
                loc.wire,
                "{who} frame {}: ICRC",
                i + 1
            );
            // The BTH follows the 20-byte IPv4 and 8-byte UDP headers.
            let bth = &loc.covered[28..40];
            match bth[0] {
                0x0A => {
                    write_psns.insert(u32::from_be_bytes([0, bth[9], bth[10], bth[11]]));
                }
                0x11 => acks += 1,
                op => panic!("{who} frame {}: opcode {op:#04x}", i + 1),
            }
        }
        assert_eq!(write_psns.len(), 300, "{who}: RC RDMA WRITE ONLY PSNs");
        assert!(acks > 0, "{who}: RC ACKNOWLEDGE frames");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
