#!/usr/bin/env bash
# Every test of the project, on a fresh Debian machine with the Rust toolchain:
# installs what the tests need (idempotent, non-interactive), then runs them.
#   - tshark: oracle for our own fixture pcaps (tests/tshark.rs)
# Benches are compiled (cargo test --all-targets builds them) but not timed.
# The public captures and reference vectors are read from ../shared beside the
# repository (or $ROCE_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cargo test --workspace --all-targets
cargo test --workspace --doc
# The 100,000-message soak, in release mode (#[ignore] in debug runs).
scripts/soak.sh
