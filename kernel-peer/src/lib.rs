//! The Linux kernel's own soft-RoCE (rxe) as a peer, for tests.
//!
//! - [`Kernel`]: Debian's `linux-image-amd64` (the real package, fetched
//!   with `apt-get download` into a cache outside the repository) reduced
//!   to its image and the modules a peer needs.
//! - [`Net`]: a network namespace the test makes, with a bridge, TAP ports,
//!   and RoCEv2 loss on the bridge (nftables `numgen random`).
//! - [`Guest`]: that kernel booted in QEMU with TCG, the host's root
//!   filesystem shared read-only over virtio-9p (tmpfs on /tmp and /run),
//!   its virtio NIC on a TAP of the [`Net`] and rxe added on it (`rdma link
//!   add`); the host runs shell commands in it and collects their output
//!   and exit codes through a 9p-shared directory ([`Guest::spawn`],
//!   [`Guest::run`]).
//! - [`run`]: a server/client pair of programs, each on the host (in the
//!   namespace, with an environment such as `LD_PRELOAD`) or in a guest.
//! - [`frames`]: captured RoCEv2 frames, their retransmissions.
//!
//! Needs root, `/dev/net/tun`, and Debian's `qemu-system-x86`,
//! `busybox-static`, `iproute2`, `nftables` (scripts/test.sh installs them).
//! docs/kernel-peer.md describes the design and the results.

mod capture;
pub mod frames;
mod guest;
mod initramfs;
mod kernel;
mod net;
pub mod run;

pub use capture::Capture;
pub use guest::{Done, Guest, GuestConfig, Job};
pub use kernel::Kernel;
pub use net::{LossCounts, Net, BRIDGE};

use std::process::{Command, Stdio};

/// Run a command; `Err` with its stderr unless it exits 0.
pub(crate) fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Why the kernel-peer tests cannot run here, or `None` if they can: root,
/// `/dev/net/tun`, and the programs (with their Debian packages).
pub fn missing_prerequisites() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, TAP devices, nftables)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    for (prog, pkg) in [
        ("/usr/bin/qemu-system-x86_64", "qemu-system-x86"),
        ("/bin/busybox", "busybox-static"),
        ("/usr/sbin/nft", "nftables"),
        ("/usr/bin/dpkg-deb", "dpkg"),
        ("/usr/bin/apt-get", "apt"),
        ("/sbin/ip", "iproute2"),
    ] {
        if !std::path::Path::new(prog).exists() {
            return Some(format!(
                "{prog} is missing (Debian package {pkg}; scripts/test.sh --deps-only installs it)"
            ));
        }
    }
    None
}
