//! tshark as the independent oracle for the fixture pcaps
//! (`pcap-fixtures/pcaps/*.pcap`): for every frame, each field tshark 4.0
//! decodes must equal what `roce decode --json` reports, and tshark must report
//! no malformed frame and no expert message (with IP and UDP checksum
//! validation on).
//!
//! tshark is required: the tests fail when it is missing (CI installs it),
//! unless `ROCE_SKIP_TSHARK=1` is set. `TSHARK` overrides the binary.
//!
//! How tshark 4.0 prints the fields (see ../shared/reference/vectors.txt):
//! `destqp` as `0x000012`, `reth.va` as `0x00007f0012345000`, `q_key` as a
//! 16-digit hex number, `immdt` and `ieth` as hex bytes (listed twice), the
//! ICRC as the 4 wire bytes read big-endian (`0x649003e4`), no ICRC field for a
//! CNP (opcode 0x81, whose 16 reserved bytes and ICRC show up as
//! `infiniband.vendor`), the AtomicETH address and R_Key under `reth.*`, BTH
//! byte 4 (FECN, BECN, Resv6a) as `infiniband.reserved`, and the payload plus
//! pad bytes as `data.len`.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Fields read from tshark, in `-e` order.
const FIELDS: &[&str] = &[
    "frame.number",
    "eth.src",
    "eth.dst",
    "eth.type",
    "vlan.priority",
    "vlan.dei",
    "vlan.id",
    "ip.src",
    "ip.dst",
    "ip.dsfield.dscp",
    "ip.dsfield.ecn",
    "ip.ttl",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.tclass.dscp",
    "ipv6.tclass.ecn",
    "ipv6.hlim",
    "udp.srcport",
    "udp.dstport",
    "infiniband.grh.sgid",
    "infiniband.grh.dgid",
    "infiniband.grh.tclass",
    "infiniband.grh.hoplmt",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.reserved",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.aeth.syndrome.opcode",
    "infiniband.aeth.syndrome.timer",
    "infiniband.aeth.syndrome.error_code",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.immdt",
    "infiniband.ieth",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.invariant.crc",
    "infiniband.vendor",
    "data.len",
    "macc.opcode",
    "macc.pause_time",
    "macc.cbfc.enbv",
    "macc.cbfc.pause_time.c0",
    "macc.cbfc.pause_time.c1",
    "macc.cbfc.pause_time.c2",
    "macc.cbfc.pause_time.c3",
    "macc.cbfc.pause_time.c4",
    "macc.cbfc.pause_time.c5",
    "macc.cbfc.pause_time.c6",
    "macc.cbfc.pause_time.c7",
    "arp.opcode",
    "arp.src.proto_ipv4",
    "arp.dst.proto_ipv4",
    "_ws.col.Info",
];

/// One frame as tshark printed it: field name -> value (absent when empty).
struct Row(HashMap<&'static str, String>);

impl Row {
    fn get(&self, f: &str) -> Option<&str> {
        self.0.get(f).map(String::as_str)
    }
    /// The first occurrence of a field (tshark joins repeats with `,`).
    fn first(&self, f: &str) -> Option<&str> {
        self.get(f).and_then(|v| v.split(',').next())
    }
    /// A number printed in decimal or as `0x..` hex.
    fn num(&self, f: &str) -> Option<u64> {
        self.first(f)
            .map(|v| parse_num(v).unwrap_or_else(|| panic!("{f}: {v:?}")))
    }
    /// Hex bytes (`cafef00d`) as a big-endian number.
    fn hex_bytes(&self, f: &str) -> Option<u64> {
        self.first(f).map(|v| {
            u64::from_str_radix(v.trim_start_matches("0x"), 16)
                .unwrap_or_else(|_| panic!("{f}: {v:?}"))
        })
    }
    fn bool(&self, f: &str) -> Option<bool> {
        self.first(f).map(|v| match v {
            "1" | "True" | "true" => true,
            "0" | "False" | "false" => false,
            _ => panic!("{f}: {v:?}"),
        })
    }
}

fn parse_num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

/// Run tshark on `file` with `args` and the given fields.
fn tshark_rows(bin: &str, file: &Path, args: &[&str], fields: &[&'static str]) -> Vec<Row> {
    let mut all = vec!["-d", "udp.port==4791,infiniband"];
    all.extend_from_slice(args);
    common::tshark_fields(bin, file, &all, fields)
        .into_iter()
        .map(Row)
        .collect()
}

/// `roce decode --json file`: one object per frame.
fn roce_json(file: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "--json"])
        .arg(file)
        .output()
        .expect("run roce");
    assert!(
        out.status.success(),
        "roce decode --json {}: {}\n{}",
        file.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("roce output is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Mismatches found so far, each with the file and frame.
struct Diffs {
    at: String,
    list: Vec<String>,
}

impl Diffs {
    /// Record a mismatch unless tshark's value equals ours.
    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, what: &str, tshark: T, ours: T) {
        if tshark != ours {
            self.list.push(format!(
                "{}: {what}: tshark {tshark:?}, roce {ours:?}",
                self.at
            ));
        }
    }
    fn fail(&mut self, msg: String) {
        self.list.push(format!("{}: {msg}", self.at));
    }
}

fn u(v: &Value) -> Option<u64> {
    v.as_u64()
}

fn ip(s: Option<&str>) -> Option<IpAddr> {
    s.map(|s| s.parse().unwrap_or_else(|_| panic!("address {s:?}")))
}

/// `RC_RDMA_WRITE_LAST_WITH_IMMEDIATE` -> `rc rdma write last immediate`, the
/// words tshark's Info column uses (`RC RDMA Write Last Immediate QP=...`).
fn opcode_words(ours: &str) -> String {
    ours.replace("WITH_", "")
        .replace('_', " ")
        .to_ascii_lowercase()
}

fn check_roce(d: &mut Diffs, t: &Row, j: &Value) {
    let v1 = t.get("infiniband.grh.sgid").is_some();
    d.eq("version", Some(if v1 { 1 } else { 2 }), u(&j["version"]));
    // Network header.
    let (src, dst, dscp, ecn, ttl) = if v1 {
        let tclass = t.num("infiniband.grh.tclass");
        (
            ip(t.get("infiniband.grh.sgid")),
            ip(t.get("infiniband.grh.dgid")),
            tclass.map(|c| c >> 2),
            tclass.map(|c| c & 3),
            t.num("infiniband.grh.hoplmt"),
        )
    } else if t.get("ipv6.src").is_some() {
        (
            ip(t.get("ipv6.src")),
            ip(t.get("ipv6.dst")),
            t.num("ipv6.tclass.dscp"),
            t.num("ipv6.tclass.ecn"),
            t.num("ipv6.hlim"),
        )
    } else {
        (
            ip(t.get("ip.src")),
            ip(t.get("ip.dst")),
            t.num("ip.dsfield.dscp"),
            t.num("ip.dsfield.ecn"),
            t.num("ip.ttl"),
        )
    };
    d.eq("src", src, ip(j["src"].as_str()));
    d.eq("dst", dst, ip(j["dst"].as_str()));
    d.eq("dscp", dscp, u(&j["dscp"]));
    d.eq("ecn", ecn, u(&j["ecn"]));
    d.eq("ttl", ttl, u(&j["ttl"]));
    d.eq("sport", t.num("udp.srcport"), u(&j["sport"]));
    d.eq("dport", t.num("udp.dstport"), u(&j["dport"]));

    // BTH.
    let opcode = t.num("infiniband.bth.opcode");
    d.eq("opcode", opcode, u(&j["opcode"]));
    d.eq("se", t.bool("infiniband.bth.se"), j["se"].as_bool());
    d.eq("migreq", t.bool("infiniband.bth.m"), j["migreq"].as_bool());
    d.eq("pad", t.num("infiniband.bth.padcnt"), u(&j["pad"]));
    d.eq("tver", t.num("infiniband.bth.tver"), u(&j["tver"]));
    d.eq("pkey", t.num("infiniband.bth.p_key"), u(&j["pkey"]));
    // BTH byte 4: FECN bit 7, BECN bit 6 (IBTA 1.7 §9.2).
    let byte4 = t.hex_bytes("infiniband.reserved");
    d.eq("fecn", byte4.map(|b| b & 0x80 != 0), j["fecn"].as_bool());
    d.eq("becn", byte4.map(|b| b & 0x40 != 0), j["becn"].as_bool());
    d.eq("dest_qp", t.num("infiniband.bth.destqp"), u(&j["dest_qp"]));
    d.eq(
        "ack_req",
        t.bool("infiniband.bth.a"),
        j["ack_req"].as_bool(),
    );
    d.eq("psn", t.num("infiniband.bth.psn"), u(&j["psn"]));

    // Opcode name: tshark's Info column starts with it ("Unknown OpCode" for
    // the CNP, which tshark 4.0 does not name).
    let info = t
        .get("_ws.col.Info")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let name = j["opcode_name"].as_str().unwrap_or_default();
    if opcode == Some(0x81) {
        d.eq("opcode_name", "CNP", name);
    } else if !info.starts_with(&opcode_words(name)) {
        d.fail(format!("opcode_name {name:?} vs tshark Info {info:?}"));
    }

    // RETH, and the AtomicETH (whose VA and R_Key tshark lists as reth.*).
    let reth = &j["reth"];
    let atomic = &j["atomic_eth"];
    let (va, rkey) = if !reth.is_null() {
        d.eq(
            "reth.dma_len",
            t.num("infiniband.reth.dmalen"),
            u(&reth["dma_len"]),
        );
        (u(&reth["va"]), u(&reth["rkey"]))
    } else if !atomic.is_null() {
        (u(&atomic["va"]), u(&atomic["rkey"]))
    } else {
        d.eq("reth.dmalen", t.num("infiniband.reth.dmalen"), None);
        (None, None)
    };
    d.eq("reth.va", t.num("infiniband.reth.va"), va);
    d.eq("reth.rkey", t.num("infiniband.reth.r_key"), rkey);
    d.eq(
        "atomic_eth.swap_add",
        t.num("infiniband.atomiceth.swapdt"),
        u(&atomic["swap_add"]),
    );
    d.eq(
        "atomic_eth.compare",
        t.num("infiniband.atomiceth.cmpdt"),
        u(&atomic["compare"]),
    );

    // AETH, and its decoded syndrome (IBTA 1.7 §9.7.5.2, Table 44).
    let aeth = &j["aeth"];
    d.eq(
        "aeth.syndrome",
        t.num("infiniband.aeth.syndrome"),
        u(&aeth["syndrome"]),
    );
    d.eq("aeth.msn", t.num("infiniband.aeth.msn"), u(&aeth["msn"]));
    if let Some(kind) = t.num("infiniband.aeth.syndrome.opcode") {
        let text = aeth["text"].as_str().unwrap_or_default();
        let expected = match kind {
            0 => "ACK(".to_string(),
            1 => format!(
                "RNR_NAK(timer={})",
                t.num("infiniband.aeth.syndrome.timer").unwrap_or(99)
            ),
            3 => match t.num("infiniband.aeth.syndrome.error_code") {
                Some(0) => "NAK(PSN_SEQ_ERR)".into(),
                Some(1) => "NAK(INV_REQ)".into(),
                Some(2) => "NAK(REM_ACCESS_ERR)".into(),
                Some(3) => "NAK(REM_OP_ERR)".into(),
                Some(4) => "NAK(INV_RD_REQ)".into(),
                c => format!("NAK(reserved {})", c.unwrap_or(99)),
            },
            _ => "RESERVED(".into(),
        };
        if !text.starts_with(&expected) {
            d.fail(format!("aeth.text {text:?}, tshark says {expected:?}..."));
        }
    }
    d.eq(
        "atomic_ack_eth.orig",
        t.num("infiniband.atomicacketh.origremdt"),
        u(&j["atomic_ack_eth"]["orig"]),
    );

    // DETH, ImmDt, IETH.
    let deth = &j["deth"];
    d.eq(
        "deth.qkey",
        t.num("infiniband.deth.q_key"),
        u(&deth["qkey"]),
    );
    d.eq(
        "deth.src_qp",
        t.num("infiniband.deth.srcqp"),
        u(&deth["src_qp"]),
    );
    d.eq("immdt", t.hex_bytes("infiniband.immdt"), u(&j["immdt"]));
    d.eq("ieth", t.hex_bytes("infiniband.ieth"), u(&j["ieth"]));
    for key in ["rdeth", "xrceth", "feth"] {
        if !j[key].is_null() {
            d.fail(format!("unexpected {key}"));
        }
    }

    // Payload (tshark's data.len counts the pad bytes) and ICRC.
    let payload = u(&j["payload_len"]).unwrap_or(u64::MAX);
    let pad = u(&j["pad"]).unwrap_or(0);
    let icrc = j["icrc"].as_str().map(str::to_string);
    if opcode == Some(0x81) {
        // CNP: 16 reserved bytes and the ICRC, shown as vendor data.
        d.eq("payload_len", 0, payload);
        let vendor = t
            .get("infiniband.vendor")
            .and_then(|v| v.rsplit(',').next())
            .map(str::to_string);
        d.eq(
            "vendor data length",
            vendor.as_ref().map(|v| v.len()),
            Some(40),
        );
        d.eq(
            "cnp reserved bytes",
            vendor.as_ref().map(|v| v[..32].to_string()),
            Some("0".repeat(32)),
        );
        d.eq("icrc", vendor.map(|v| v[32..].to_string()), icrc);
    } else {
        d.eq(
            "payload_len + pad",
            t.num("data.len").unwrap_or(0),
            payload + pad,
        );
        d.eq(
            "icrc",
            t.get("infiniband.invariant.crc")
                .map(|c| c.trim_start_matches("0x").to_string()),
            icrc,
        );
    }
    d.eq(
        "icrc_status",
        "ok",
        j["icrc_status"].as_str().unwrap_or_default(),
    );
}

fn check_frame(d: &mut Diffs, t: &Row, j: &Value) {
    d.eq("frame", t.num("frame.number"), u(&j["frame"]));
    d.eq("src_mac", t.get("eth.src"), j["src_mac"].as_str());
    d.eq("dst_mac", t.get("eth.dst"), j["dst_mac"].as_str());
    let vlan = &j["vlan"];
    d.eq("vlan.pcp", t.num("vlan.priority"), u(&vlan["pcp"]));
    d.eq("vlan.dei", t.bool("vlan.dei"), vlan["dei"].as_bool());
    d.eq("vlan.vid", t.num("vlan.id"), u(&vlan["vid"]));
    let kind = j["kind"].as_str().unwrap_or_default();
    if t.get("infiniband.bth.opcode").is_some() {
        d.eq("kind", "roce", kind);
        check_roce(d, t, j);
    } else if let Some(op) = t.num("macc.opcode") {
        match op {
            0x0101 => {
                d.eq("kind", "pfc", kind);
                d.eq(
                    "class_enable",
                    t.num("macc.cbfc.enbv"),
                    u(&j["class_enable"]),
                );
                for p in 0..8 {
                    let f = [
                        "macc.cbfc.pause_time.c0",
                        "macc.cbfc.pause_time.c1",
                        "macc.cbfc.pause_time.c2",
                        "macc.cbfc.pause_time.c3",
                        "macc.cbfc.pause_time.c4",
                        "macc.cbfc.pause_time.c5",
                        "macc.cbfc.pause_time.c6",
                        "macc.cbfc.pause_time.c7",
                    ][p];
                    d.eq(&format!("quanta[{p}]"), t.num(f), u(&j["quanta"][p]));
                }
            }
            0x0001 => {
                d.eq("kind", "pause", kind);
                d.eq("quanta", t.num("macc.pause_time"), u(&j["quanta"]));
            }
            op => d.fail(format!("unexpected MAC control opcode 0x{op:04x}")),
        }
    } else if let Some(op) = t.num("arp.opcode") {
        d.eq("kind", "arp", kind);
        let ours = match j["op"].as_str() {
            Some("request") => Some(1),
            Some("reply") => Some(2),
            _ => u(&j["op"]),
        };
        d.eq("arp.op", Some(op), ours);
        d.eq(
            "sender_ip",
            ip(t.get("arp.src.proto_ipv4")),
            ip(j["sender_ip"].as_str()),
        );
        d.eq(
            "target_ip",
            ip(t.get("arp.dst.proto_ipv4")),
            ip(j["target_ip"].as_str()),
        );
    } else {
        d.fail(format!(
            "tshark decoded neither RoCE, MAC control nor ARP: {kind}"
        ));
    }
}

/// Every field tshark decodes from every fixture frame equals `roce decode --json`.
#[test]
fn fixtures_decode_like_tshark() {
    let Some(bin) = common::tshark() else { return };
    let mut diffs = Vec::new();
    let mut compared = 0;
    for name in pcap_fixtures::names() {
        let file = pcap_fixtures::path(name);
        let rows = tshark_rows(&bin, &file, &[], FIELDS);
        let json = roce_json(&file);
        let frames = pcap_fixtures::frames(name).len();
        assert_eq!(rows.len(), frames, "{name}: tshark frame count");
        assert_eq!(json.len(), frames, "{name}: roce decode --json line count");
        for (i, (t, j)) in rows.iter().zip(&json).enumerate() {
            let mut d = Diffs {
                at: format!("{name}.pcap frame {}", i + 1),
                list: Vec::new(),
            };
            check_frame(&mut d, t, j);
            diffs.extend(d.list);
            compared += 1;
        }
    }
    assert!(compared > 100, "only {compared} frames compared");
    assert!(
        diffs.is_empty(),
        "{} disagreement(s) between tshark and roce decode --json:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
}

/// tshark finds nothing wrong with our frames: no malformed-packet exception, no
/// expert message, IPv4 header checksums and IPv6 UDP checksums valid (IPv4 UDP
/// checksums are 0, "not present").
#[test]
fn tshark_reports_no_malformed_or_expert_messages() {
    let Some(bin) = common::tshark() else { return };
    let fields = [
        "frame.number",
        "_ws.malformed",
        "_ws.expert.message",
        "ip.checksum.status",
        "ipv6.src",
        "udp.checksum.status",
    ];
    let opts = [
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
    ];
    let mut problems = Vec::new();
    for name in pcap_fixtures::names() {
        let file = pcap_fixtures::path(name);
        for r in tshark_rows(&bin, &file, &opts, &fields) {
            let at = format!("{name}.pcap frame {}", r.get("frame.number").unwrap_or("?"));
            for f in ["_ws.malformed", "_ws.expert.message"] {
                if let Some(v) = r.get(f) {
                    problems.push(format!("{at}: {f}: {v}"));
                }
            }
            // Checksum status: 1 = good, 3 = not present (tshark's enum).
            if let Some(s) = r.get("ip.checksum.status") {
                if s != "1" {
                    problems.push(format!("{at}: IPv4 header checksum status {s}"));
                }
            }
            if let Some(s) = r.get("udp.checksum.status") {
                let want = if r.get("ipv6.src").is_some() {
                    "1"
                } else {
                    "3"
                };
                if s != want {
                    problems.push(format!("{at}: UDP checksum status {s}, expected {want}"));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "tshark complaints:\n{}",
        problems.join("\n")
    );
}
