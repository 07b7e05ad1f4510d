#!/usr/bin/env bash
# RC RDMA WRITE goodput (4 KiB messages) through two TAP interfaces bridged in
# a network namespace, against a raw loop that writes and reads pre-built
# frames of the same size (4170 bytes) through the same TAP pair; prints both
# per pair of alternating blocks, their medians and the ratio stack/raw
# (target >= 0.80). See benches/tap.rs for what exactly is timed.
#
# Needs root (TAP interfaces, a network namespace, a bridge) and iproute2.
# Everything it creates is named after its pid and removed when it ends.
#
# Usage: scripts/bench-tap.sh
#   ROCE_TAP_THREADS=2     one busy-polling thread per side (default), or 1:
#                          both sides polled in turn by one thread
#   ROCE_TAP_PAIRS=15      pairs of blocks (default 15)
#   ROCE_TAP_BLOCK=20000   messages per block (default 20000)
#   ROCE_TAP_RING=262144   bytes of source and destination memory (default
#                          64 slots of 4 KiB, one per WRITE in flight)
# The machine is shared and noisy: compare the ratio within a run, not
# figures across runs.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "scripts/bench-tap.sh: needs root (TAP interfaces, a network namespace)" >&2
  exit 1
fi
command -v ip >/dev/null || { echo "needs ip (apt-get install iproute2)" >&2; exit 1; }

cargo bench --bench tap
