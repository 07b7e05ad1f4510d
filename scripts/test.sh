#!/usr/bin/env bash
# Every test of the project, on a fresh Debian machine with the Rust toolchain:
# installs what the tests need (idempotent, non-interactive), then runs them.
#   - tshark: oracle for our own fixture pcaps (tests/tshark.rs) and for the
#     traffic captured on the TAP bridge (tests/tap_netns.rs)
#   - libdpdk-dev (DPDK 22.11, found by pkg-config), libclang-dev (bindgen),
#     dpdk-dev (dpdk-testpmd, the reference in scripts/bench-dpdk.sh): the
#     `dpdk` feature, on in this command
#   - fonts-dejavu-core: the TrueType font `roce sim --plot` draws text with
#   - iproute2: network namespaces, bridges and TAP devices the tests create;
#     iputils-ping: the kernel pings the stack over TAP (tests/tap_netns.rs)
#   - perftest, ibverbs-utils: Debian's RDMA programs run unmodified on the
#     drop-in libibverbs (ibverbs/tests/); libibverbs-dev: verbs.h for its
#     layout test; libibverbs1 + rdma-core: the real library perftest also
#     links (librdmacm, libmlx5), which LD_PRELOAD sits on top of
#   - ethtool: turns lo's UDP segmentation offload off so a capture sees
#     each UDP GSO segment (tests/udp_wire.rs)
#   - qemu-system-x86, busybox-static, nftables: Debian's kernel booted as
#     the stack's rxe peer (ibverbs/tests/kernel_peer.rs, the roce-kernel-peer
#     crate): QEMU with TCG, busybox as the initramfs's /init, nftables for
#     loss on the bridge. The kernel package itself (linux-image-amd64, ~70
#     MB) is downloaded by the test with `apt-get download` into
#     ~/.cache/roce-kernel-peer ($ROCE_KERNEL_CACHE), never into the repository.
#     (bookworm's qemu-system-x86 makes apt remove a newer backported
#     qemu-utils, if the machine has one; the tests do not use qemu-img.)
# `scripts/test.sh --deps-only` installs and verifies the packages, and stops.
# Benches are compiled (cargo test --all-targets builds them) but not timed.
# The public captures and reference vectors are read from ../shared beside the
# repository (or $ROCE_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages the tests need, decided by package status (dpkg-query), never
# by file globs: a glob once matched libclang-cpp14's library and hid a missing
# libclang-dev (issue 11).
packages=(tshark libdpdk-dev dpdk-dev libclang-dev pkg-config iproute2 iputils-ping fonts-dejavu-core perftest ibverbs-utils libibverbs-dev libibverbs1 rdma-core ethtool qemu-system-x86 busybox-static nftables)
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer it before install.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | as_root debconf-set-selections 2>/dev/null || true
  as_root apt-get update -qq
  had_qemu_utils=0; installed qemu-utils && had_qemu_utils=1
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # A machine image may carry a newer qemu-utils (qemu-img) than Debian's,
  # which Debian's qemu-system-x86 makes apt remove: put Debian's back so
  # the machine keeps the tools it came with.
  if [ "$had_qemu_utils" = 1 ] && ! installed qemu-utils; then
    as_root apt-get install -y -qq --no-install-recommends qemu-utils >/dev/null
  fi
fi
# Verify after installing: a wrong detection must fail here, on every machine.
for p in "${packages[@]}"; do
  installed "$p" || { echo "scripts/test.sh: required package $p is not installed" >&2; exit 1; }
done
pkg-config --exists 'libdpdk >= 22.11' || { echo "scripts/test.sh: libdpdk-dev installed but pkg-config finds no libdpdk >= 22.11" >&2; exit 1; }
if [ "${1:-}" = "--deps-only" ]; then
  echo "dependencies installed: ${packages[*]}"
  exit 0
fi

cargo test --workspace --all-targets --features dpdk
cargo test --workspace --doc --features dpdk
# The 100,000-message soak, in release mode (#[ignore] in debug runs).
scripts/soak.sh
