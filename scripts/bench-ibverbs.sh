#!/usr/bin/env bash
# Speed of unmodified perftest on the drop-in libibverbs, as ratios to
# `roce perf` on the same UDP backend, alternated in one run (the machine
# is shared and noisy: compare within a round, never across runs):
#   - ib_write_bw -s 65536 (BW average) / roce perf write -s 65536
#   - ib_write_lat -s 2 (t_typical) / roce perf write --lat -s 2 (typical,
#     halved: roce perf reports a full round trip, perftest half of one)
#   - CPU use of an idle ibv_rc_pingpong server over 3 s (ps, % of a core)
# Each round runs the four in turn; the summary gives the median of the
# rounds' ratios.
# Usage: scripts/bench-ibverbs.sh [ROUNDS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
cargo build --release -q -p roce-ibverbs -p roce
LIB=$PWD/target/release/libroce_ibverbs.so
ROCE=$PWD/target/release/roce
port=$((20000 + RANDOM % 10000))
udp=$((40000 + RANDOM % 10000))
T=60

pt() { # prog args... -> client's output (server on .1, client on .2)
  local p=$((port++)) prog=$1; shift
  LD_PRELOAD=$LIB ROCE_LOCAL_IP=127.0.0.1 ROCE_UDP_PORT=$udp timeout $T "$prog" "$@" -p $p >/dev/null 2>&1 &
  local s=$!; sleep 0.5
  LD_PRELOAD=$LIB ROCE_LOCAL_IP=127.0.0.2 ROCE_UDP_PORT=$udp timeout $T "$prog" "$@" -p $p 127.0.0.1 2>&1
  wait $s || true
}
rp() { # roce perf args... -> client's output
  local p=$((port++))
  timeout $T "$ROCE" perf "$@" --backend udp --server --local-ip 127.0.0.1 --udp-port $udp -p $p >/dev/null 2>&1 &
  local s=$!; sleep 0.5
  timeout $T "$ROCE" perf "$@" --backend udp --client 127.0.0.1 --local-ip 127.0.0.2 --udp-port $udp -p $p 2>&1
  wait $s || true
}
field() { awk -v b="$1" -v c="$2" '$1 == b { print $c; exit }'; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "?"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratio() { if [ -n "$1" ] && [ -n "$2" ]; then echo "$1 / $2" | bc -l | cut -c1-5; fi; }
bw_ratios=() lat_ratios=()
for r in $(seq "$rounds"); do
  a=$(pt ib_write_bw -F -s 65536 -n 5000 --report_gbits | field 65536 4)
  b=$(rp write -s 65536 -n 5000 | field 65536 4)
  c=$(pt ib_write_lat -F -s 2 -n 2000 | field 2 5)
  d=$(rp write --lat -s 2 -n 2000 | awk '$1 == 2 { print $5 / 2; exit }')
  x=$(ratio "$a" "$b") y=$(ratio "$c" "$d")
  bw_ratios+=("$x") lat_ratios+=("$y")
  echo "round $r: ib_write_bw ${a} Gb/s, roce perf write ${b} Gb/s, ratio $x"
  echo "round $r: ib_write_lat typical ${c} us, roce perf --lat typical/2 ${d} us, ratio $y"
done
echo "median of $rounds rounds: ib_write_bw / roce perf write $(printf '%s\n' "${bw_ratios[@]}" | grep . | median) (>= 0.8 wanted)"
echo "median of $rounds rounds: ib_write_lat / (roce perf --lat / 2) $(printf '%s\n' "${lat_ratios[@]}" | grep . | median) (<= 1.25 wanted)"

# Idle server: waits for a client that never comes.
p=$((port++))
LD_PRELOAD=$LIB ROCE_LOCAL_IP=127.0.0.1 ROCE_UDP_PORT=$udp timeout 10 ibv_rc_pingpong -g 0 -p $p >/dev/null 2>&1 &
s=$!
sleep 1
t0=$(awk '{print $14 + $15}' /proc/$s/stat); sleep 3; t1=$(awk '{print $14 + $15}' /proc/$s/stat)
kill $s 2>/dev/null || true; wait $s 2>/dev/null || true
hz=$(getconf CLK_TCK)
echo "idle ibv_rc_pingpong server: $(echo "($t1 - $t0) * 100 / $hz / 3" | bc -l | cut -c1-5)% of a core"
