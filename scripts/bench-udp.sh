#!/usr/bin/env bash
# 4 KiB RDMA WRITE goodput of the `udp` backend between two processes
# (`roce perf write --server/--client --backend udp -s 4096 -D SECS`: UDP
# GSO sends, GRO receives, sendmmsg/recvmmsg), against kernel TCP (`iperf3`,
# one stream) and unpaced kernel UDP (`iperf3 -u -l 4096 -b 0`), in the
# same run, on two paths:
#   lo    loopback (127.0.0.1), in a network namespace of its own so that
#         captures or filters other programs put on the host's lo tax
#         neither side;
#   veth  a veth pair between two network namespaces this script makes
#         (MTU 9000, the jumbo MTU RoCE fabrics run 4096-byte PMTUs on).
# Every round runs roce, TCP, UDP on lo, then the same on the veth, so a
# slow phase of the shared machine hits all of them; the script prints
# every measurement, then per path the best and the median of each and the
# ratios roce / TCP (best to best, median to median).
#
# CPU per byte: user + system seconds of both processes (server and
# client, all threads, from bash's `times` for the process it ran) over
# the bytes the receiver got, in CPU-seconds per GB (1e9 bytes); lower is
# better. iperf3's UDP figure is the bytes that arrived (it loses most of
# what it sends unpaced; its loss is printed); roce perf loses nothing (RC
# retransmits what the kernel drops, and the data is verified at the end).
#
# Needs root (namespaces). Installs iperf3 when it is missing.
# Usage: scripts/bench-udp.sh [seconds per measurement, default 5]
# Env:   ROUNDS (default 3): alternating rounds; ROCE_ARGS: extra arguments
#        for both roce perf processes (e.g. --udp-no-gso); PATHS (default
#        "lo veth").
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-5}
rounds=${ROUNDS:-3}
paths=${PATHS:-lo veth}
read -r -a extra <<<"${ROCE_ARGS:-}"
target=${CARGO_TARGET_DIR:-target}

[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces)"; exit 1; }
if ! dpkg-query -W -f='${Status}' iperf3 2>/dev/null | grep -q "ok installed"; then
  # iperf3's package asks whether to start a daemon: no.
  echo 'iperf3 iperf3/start_daemon boolean false' | debconf-set-selections
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >/dev/null; }
fi
cargo build --release -q --bin roce
roce="$target/release/roce"

dir=$(mktemp -d /tmp/roce-bench-udp.XXXXXX)
na="rbu-a$$"
nb="rbu-b$$"
nl="rbu-l$$"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  ip netns del "$na" 2>/dev/null || true
  ip netns del "$nb" 2>/dev/null || true
  ip netns del "$nl" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# Loopback of its own in $nl; the veth pair: 10.99.0.1 in $na, 10.99.0.2
# in $nb.
ip netns add "$nl"
ip -n "$nl" link set lo up
ip netns add "$na"
ip netns add "$nb"
ip link add "rbua$$" type veth peer name "rbub$$"
ip link set "rbua$$" netns "$na"
ip link set "rbub$$" netns "$nb"
for x in "a $na 10.99.0.1" "b $nb 10.99.0.2"; do
  read -r side ns ip <<<"$x"
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$ip/24" dev "rbu$side$$"
  ip -n "$ns" link set "rbu$side$$" mtu 9000 up
done

# timed NS TAG CMD...: run CMD (in namespace NS, or "-" for the host's),
# output to $dir/TAG.out / .err, and its children's user and system time
# to $dir/TAG.times.
timed() {
  local ns=$1 tag=$2
  shift 2
  local pre=()
  [ "$ns" = - ] || pre=(ip netns exec "$ns")
  "${pre[@]}" env T="$dir/$tag.times" bash -c '"$@"; rc=$?; times >"$T"; exit $rc' _ "$@" \
    >"$dir/$tag.out" 2>"$dir/$tag.err"
}
# CPU seconds (user + system) of the command `timed` ran as TAG.
cpu() {
  awk 'NR == 2 {split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.3f", u[1] * 60 + u[2] + s[1] * 60 + s[2]}' \
    "$dir/$1.times"
}
port=$((20000 + $$ % 20000))

# roce_round PATH: prints "goodput_Gbps cpu_s_per_GB".
roce_round() {
  local path=$1 sns cns sip cip
  if [ "$path" = lo ]; then sns=$nl cns=$nl sip=127.0.0.1 cip=127.0.0.1; else sns=$nb cns=$na sip=10.99.0.2 cip=10.99.0.1; fi
  port=$((port + 1))
  timed "$sns" rs "$roce" perf write --server --backend udp --port "$port" --udp-port 47910 \
    --local-ip "$sip" "${extra[@]}" &
  local server=$!
  pids+=("$server")
  sleep 0.3
  if ! timed "$cns" rc "$roce" perf write --client "$sip" --backend udp --port "$port" \
    --udp-port 47911 --local-ip "$cip" -s 4096 -D "$secs" "${extra[@]}"; then
    echo "roce perf client failed:" >&2; cat "$dir/rc.err" "$dir/rc.out" "$dir/rs.err" >&2; exit 1
  fi
  wait "$server" || { echo "roce perf server failed:" >&2; cat "$dir/rs.err" >&2; exit 1; }
  grep -q 'data verified: OK' "$dir/rc.out" ||
    { echo "roce perf: data not verified" >&2; cat "$dir/rc.out" >&2; exit 1; }
  local bytes gbps
  bytes=$(awk '/^ Total:/ {print $2; exit}' "$dir/rc.out")
  gbps=$(awk '/#bytes/ {getline; print $4; exit}' "$dir/rc.out")
  awk -v g="$gbps" -v b="$bytes" -v c="$(cpu rs)" -v d="$(cpu rc)" \
    'BEGIN {printf "%.2f %.3f\n", g, (c + d) / (b / 1e9)}'
}

# iperf_round PATH tcp|udp: prints "goodput_Gbps cpu_s_per_GB lost_percent".
iperf_round() {
  local path=$1 proto=$2 sns cns sip
  if [ "$path" = lo ]; then sns=$nl cns=$nl sip=127.0.0.1; else sns=$nb cns=$na sip=10.99.0.2; fi
  local args=()
  [ "$proto" = udp ] && args=(-u -l 4096 -b 0)
  port=$((port + 1))
  timed "$sns" is iperf3 -s -1 -B "$sip" -p "$port" &
  local server=$!
  pids+=("$server")
  sleep 0.3
  timed "$cns" ic iperf3 -c "$sip" -p "$port" -t "$secs" -J "${args[@]}" ||
    { echo "iperf3 failed:" >&2; cat "$dir/ic.out" "$dir/ic.err" >&2; exit 1; }
  wait "$server" || true
  # The receiver's bytes and seconds (end.sum_received) and, UDP, the loss.
  local rx lost
  rx=$(awk '/"sum_received"/ {r = 1} r && /"seconds"/ {gsub(/[^0-9.]/, "", $2); s = $2}
    r && /"bytes"/ {gsub(/[^0-9.]/, "", $2); print $2, s; exit}' "$dir/ic.out")
  lost=$(awk '/"end"/ {e = 1} e && /"lost_percent"/ {gsub(/[^0-9.]/, "", $2); print $2; exit}' "$dir/ic.out")
  read -r bytes s <<<"$rx"
  awk -v b="$bytes" -v s="$s" -v c="$(cpu is)" -v d="$(cpu ic)" -v l="${lost:-0}" \
    'BEGIN {printf "%.2f %.3f %.1f\n", b * 8 / s / 1e9, (c + d) / (b / 1e9), l}'
}

best() { tr ' ' '\n' | sed '/^$/d' | sort -g | tail -n 1; }
least() { tr ' ' '\n' | sed '/^$/d' | sort -g | head -n 1; }
med() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b>0) printf "%.2f", a/b; else print "n/a"}'; }

declare -A g c
echo "4 KiB RDMA WRITE over the udp backend vs iperf3, $secs s per measurement, $rounds rounds${ROCE_ARGS:+ (roce: $ROCE_ARGS)}"
for r in $(seq 1 "$rounds"); do
  for p in $paths; do
    read -r rg rc_ <<<"$(roce_round "$p")"
    read -r tg tc _ <<<"$(iperf_round "$p" tcp)"
    read -r ug uc ul <<<"$(iperf_round "$p" udp)"
    g[$p,roce]+=" $rg" c[$p,roce]+=" $rc_"
    g[$p,tcp]+=" $tg" c[$p,tcp]+=" $tc"
    g[$p,udp]+=" $ug" c[$p,udp]+=" $uc"
    echo "round $r $p: roce $rg Gbit/s ($rc_ CPU-s/GB), iperf3 TCP $tg Gbit/s ($tc CPU-s/GB) = $(ratio "$rg" "$tg")x," \
      "iperf3 UDP -l 4096 $ug Gbit/s received ($uc CPU-s/GB, $ul% lost)"
  done
done
for p in $paths; do
  rb=$(best <<<"${g[$p,roce]}") tb=$(best <<<"${g[$p,tcp]}") ub=$(best <<<"${g[$p,udp]}")
  rm_=$(med <<<"${g[$p,roce]}") tm=$(med <<<"${g[$p,tcp]}") um=$(med <<<"${g[$p,udp]}")
  echo "$p: best roce $rb, TCP $tb, UDP $ub Gbit/s: roce/TCP $(ratio "$rb" "$tb")x;" \
    "median roce $rm_, TCP $tm, UDP $um: $(ratio "$rm_" "$tm")x;" \
    "CPU-s/GB median roce $(med <<<"${c[$p,roce]}"), TCP $(med <<<"${c[$p,tcp]}"), UDP $(med <<<"${c[$p,udp]}")" \
    "(least: $(least <<<"${c[$p,roce]}"), $(least <<<"${c[$p,tcp]}"), $(least <<<"${c[$p,udp]}"))"
done
