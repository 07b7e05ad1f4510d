#!/usr/bin/env bash
# The long soak (stack/tests/soak.rs, the #[ignore] tests): 100,000 messages
# of every RC operation (SEND, SEND_WITH_IMM, WRITE, WRITE_WITH_IMM, READ,
# CMP_SWAP, FETCH_ADD), 0 B to 1 MiB, 8 QPs, PSNs starting just below 2^24,
# on a clean wire, at 1 % and 5 % loss (with reordering, duplication and
# corruption), and at 1 % loss with RNR NAKs. Release mode; a few minutes at
# most on a 2-core machine. Each run prints one `soak ...` line of figures.
#
# Knobs (environment):
#   ROCE_SOAK_MESSAGES=<n>   messages per run (default 100000)
#   ROCE_SOAK_BIG_SEED=<n>   seed for every run (default: one per run)
# Extra arguments go to the test binary, e.g. `scripts/soak.sh soak_100k_loss_5pct`.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
cargo test --release -p roce-stack --test soak -- --ignored --nocapture "$@" 2>&1 \
  | grep -E '^soak |^test |panicked|test result'
echo "total wall time: $(( $(date +%s) - start )) s (build included)"
