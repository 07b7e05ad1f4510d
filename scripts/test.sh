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
# Benches are compiled (cargo test --all-targets builds them) but not timed.
# The public captures and reference vectors are read from ../shared beside the
# repository (or $ROCE_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ping >/dev/null 2>&1 || missing+=(iputils-ping)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
pkg-config --exists 'libdpdk >= 22.11' 2>/dev/null || missing+=(libdpdk-dev)
command -v dpdk-testpmd >/dev/null 2>&1 || missing+=(dpdk-dev)
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || ls /usr/lib/*/libclang*.so* >/dev/null 2>&1 || missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo test --workspace --all-targets --features dpdk
cargo test --workspace --doc --features dpdk
# The 100,000-message soak, in release mode (#[ignore] in debug runs).
scripts/soak.sh
