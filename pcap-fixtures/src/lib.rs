//! Fixture pcaps for tests, benches and fuzz seeding.
//!
//! Every file in `pcaps/` is produced by [`generate`] from our own frame builders
//! (`roce_stack::wire::PacketRepr::emit`, `pfc::MacControl::emit`,
//! `arp::ArpRepr::emit_frame`, `cnp::{bth, ext}`), deterministically: fixed
//! timestamps, MACs, IP addresses, QPNs, PSNs and payload patterns. The files are
//! classic pcap (magic `0xa1b2c3d4` little-endian, version 2.4, link type
//! Ethernet, microsecond timestamps, snap length 65535); frames carry no FCS and
//! are zero-padded to the 60-byte Ethernet minimum.
//!
//! The repository's tests check that the committed files equal what
//! [`generate`] produces, that every RoCE frame parses strictly with a valid
//! ICRC, and that tshark decodes every field as `roce decode --json` does.
//!
//! Regenerate with `cargo run -p pcap-fixtures --bin gen-fixtures`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::path::PathBuf;
use std::time::Duration;

use roce_io::pcap::read::{CaptureError, Frames};
use roce_io::pcap::write::{to_vec, Resolution};

mod gen;

/// The fixtures, as file stems, in the order [`generate`] returns them.
pub const NAMES: [&str; 15] = [
    "rc_send",
    "uc_send",
    "ud_send",
    "rc_write",
    "rc_read",
    "rc_atomic",
    "rc_ack",
    "cnp",
    "pfc",
    "pause",
    "ipv6",
    "vlan",
    "arp",
    "rocev1",
    "rc_mix",
];

/// One generated fixture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixture {
    /// File stem, e.g. `rc_mix` (the file is `rc_mix.pcap`).
    pub name: &'static str,
    /// One line saying what the capture holds.
    pub description: &'static str,
    /// The whole pcap file.
    pub pcap: Vec<u8>,
}

impl Fixture {
    /// File name, e.g. `rc_mix.pcap`.
    pub fn file_name(&self) -> String {
        format!("{}.pcap", self.name)
    }

    /// The frames (Ethernet, no FCS) of this fixture.
    ///
    /// # Panics
    /// Never for fixtures from [`generate`] (their pcap is well formed).
    pub fn frames(&self) -> Vec<Vec<u8>> {
        read_frames(&self.pcap).expect("generated pcap is well formed")
    }
}

/// Build every fixture, in the order of [`NAMES`].
pub fn generate() -> Vec<Fixture> {
    gen::all()
}

/// The directory holding the committed fixture pcaps (`<crate>/pcaps`).
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pcaps")
}

/// The fixture stems (`rc_send`, ..., `rc_mix`).
pub fn names() -> &'static [&'static str] {
    &NAMES
}

/// Path of a committed fixture; `name` may be given with or without `.pcap`.
pub fn path(name: &str) -> PathBuf {
    let stem = name.strip_suffix(".pcap").unwrap_or(name);
    dir().join(format!("{stem}.pcap"))
}

/// The frames of a committed fixture (Ethernet, no FCS), in capture order.
///
/// # Panics
/// If the file does not exist or is not a pcap file: run
/// `cargo run -p pcap-fixtures --bin gen-fixtures`.
pub fn frames(name: &str) -> Vec<Vec<u8>> {
    let p = path(name);
    let bytes = std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "cannot read fixture {}: {e} (regenerate with `cargo run -p pcap-fixtures --bin gen-fixtures`)",
            p.display()
        )
    });
    read_frames(&bytes).unwrap_or_else(|e| panic!("fixture {} is not a pcap: {e}", p.display()))
}

/// The frames of every committed fixture, as `(name, frames)`.
pub fn all_frames() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    NAMES.iter().map(|n| (*n, frames(n))).collect()
}

/// The frames of a capture (pcap or pcapng) held in memory, read by
/// `roce_io::pcap::read`.
///
/// # Errors
/// The capture is damaged or not Ethernet.
pub fn read_frames(pcap: &[u8]) -> Result<Vec<Vec<u8>>, CaptureError> {
    Frames::new(pcap)?
        .map(|f| f.map(|f| f.data.to_vec()))
        .collect()
}

/// Encode `(timestamp, frame)` pairs as a classic pcap file
/// (`roce_io::pcap::write`: version 2.4, little-endian, link type Ethernet,
/// snap length 65535, microsecond timestamps, truncated).
pub fn write_pcap(packets: &[(Duration, Vec<u8>)]) -> Vec<u8> {
    to_vec(
        packets.iter().map(|(t, f)| (*t, f.as_slice())),
        Resolution::Micro,
    )
}

/// Write every fixture into `dir` (created if missing). Returns the paths
/// written.
pub fn write_all(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for f in generate() {
        let p = dir.join(f.file_name());
        std::fs::write(&p, &f.pcap)?;
        written.push(p);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_round_trip() {
        let packets = vec![
            (Duration::new(1_700_000_000, 1_000), vec![0xAA; 60]),
            (Duration::new(1_700_000_000, 2_000), vec![0xBB; 1082]),
        ];
        let pcap = write_pcap(&packets);
        // 24-byte file header + two 16-byte record headers + data.
        assert_eq!(pcap.len(), 24 + 16 + 60 + 16 + 1082);
        let frames = read_frames(&pcap).unwrap();
        assert_eq!(frames, vec![vec![0xAA; 60], vec![0xBB; 1082]]);
    }

    #[test]
    fn generate_follows_names() {
        let names: Vec<&str> = generate().iter().map(|f| f.name).collect();
        assert_eq!(names, NAMES);
    }

    #[test]
    fn path_accepts_stem_or_file_name() {
        assert_eq!(path("rc_mix"), path("rc_mix.pcap"));
        assert!(path("rc_mix").ends_with("pcaps/rc_mix.pcap"));
    }
}
