#!/usr/bin/env bash
# The stack against the Linux kernel's own soft-RoCE (rxe): Debian's kernel
# booted in QEMU (TCG) with the host's root over 9p (the roce-kernel-peer
# crate), Debian's pingpongs and perftest on both sides. Needs root.
#
#   scripts/kernel-peer.sh            the full matrix (every case, both
#                                     directions, TAP and UDP, loss 0, 0.1 %,
#                                     1 %, and rxe-to-rxe as the baseline):
#                                     two to three hours on 2 loaded cores
#   scripts/kernel-peer.sh subset     the CI subset (what scripts/test.sh runs)
#   scripts/kernel-peer.sh read-xfail the expected failure of issue 23
#
# Matrix knobs (environment): ROCE_KP_LOSS=0,1000,10000 (ppm per frame on
# the bridge), ROCE_KP_BACKENDS=tap,udp, ROCE_KP_FILTER=<substring of
# "prog args">, ROCE_KP_BASELINE=0 (no rxe-to-rxe), ROCE_KP_OUT=<file>
# (default target/kernel-peer/results.md). ROCE_KERNEL_PEER_KEEP=1 keeps
# the guests' directories (console log) and the captures.
# docs/kernel-peer.md explains the set-up and records the results.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/test.sh --deps-only >/dev/null
mkdir -p target/kernel-peer
export ROCE_KP_OUT="${ROCE_KP_OUT:-$PWD/target/kernel-peer/results.md}"
case "${1:-matrix}" in
  matrix) test=kernel_peer_matrix; ignored=--ignored ;;
  subset) test=kernel_peer_subset; ignored= ;;
  read-xfail) test=kernel_peer_read_all_sizes_stack_requester; ignored=--ignored ;;
  *) echo "usage: $0 [matrix|subset|read-xfail]" >&2; exit 2 ;;
esac
start=$(date +%s)
status=0
nice cargo test -p roce-ibverbs --test kernel_peer -- --exact "$test" $ignored --nocapture || status=$?
echo "scripts/kernel-peer.sh $test: $(( $(date +%s) - start )) s, exit $status"
[ "$test" = kernel_peer_matrix ] && echo "results: $ROCE_KP_OUT"
exit $status
