#!/usr/bin/env bash
# Seed the cargo-fuzz corpora, build the fuzz targets once and run each for a
# bounded time. Exits non-zero if any target crashes (or fails to build/run).
#
# Usage: scripts/fuzz.sh [target ...]        (default: all five targets)
#   FUZZ_SECONDS=60   seconds per target (libFuzzer -max_total_time)
#   FUZZ_ARGS="..."   extra libFuzzer flags, e.g. "-max_len=8192"
#   ROCE_SHARED_DIR   where the shared reference material is (default ../shared)
#
# Seeds (fuzz/corpus/<target>/, gitignored; files named by content hash):
#   frame, mac_control   every frame of pcap-fixtures/pcaps/*.pcap and every
#                        "hex:" frame of $ROCE_SHARED_DIR/reference/vectors.txt
#   transport_headers    the same RoCE frames as "opcode byte + bytes after
#                        the BTH" (the target's input format)
#   pcap_decode          the whole pcap files
# plus anything committed under fuzz/seeds/<target>/. Missing fixtures or
# vectors are skipped with a note. Crash inputs land in fuzz/artifacts/<target>/,
# libFuzzer logs in fuzz/artifacts/<target>.log.
set -uo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
seconds="${FUZZ_SECONDS:-60}"
shared="${ROCE_SHARED_DIR:-$root/../shared}"
all_targets=(frame transport_headers mac_control pcap_decode host_rx)
if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    targets=("${all_targets[@]}")
fi

for t in "${all_targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
done

python3 - "$root" "$shared" <<'EOF'
import glob, hashlib, os, struct, sys

root, shared = sys.argv[1], sys.argv[2]
corpus = os.path.join(root, "fuzz", "corpus")

def put(target, data):
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(corpus, target, name), "wb") as f:
        f.write(data)

def pcap_frames(data):
    """Frames of a classic pcap (either byte order, us or ns) or a pcapng."""
    if len(data) < 24:
        return []
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    elif magic == b"\x0a\x0d\x0d\x0a":
        return pcapng_frames(data)
    else:
        return []
    out, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out

def pcapng_frames(data):
    out, off, end = [], 0, "<"
    while off + 12 <= len(data):
        btype = struct.unpack(end + "I", data[off:off + 4])[0]
        if btype == 0x0A0D0D0A:
            end = "<" if data[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            btype = 0x0A0D0D0A
        blen = struct.unpack(end + "I", data[off + 4:off + 8])[0]
        if blen < 12:
            break
        if btype == 6 and off + 28 <= len(data):
            cap = struct.unpack(end + "I", data[off + 20:off + 24])[0]
            out.append(data[off + 28:off + 28 + cap])
        elif btype == 3 and off + 12 <= len(data):
            out.append(data[off + 12:off + blen - 4])
        off += blen
    return out

def transport(frame):
    """(opcode byte + bytes after the BTH) of a RoCE frame, or None."""
    if len(frame) < 14:
        return None
    et, l3 = struct.unpack(">H", frame[12:14])[0], 14
    if et == 0x8100 and len(frame) >= 18:
        et, l3 = struct.unpack(">H", frame[16:18])[0], 18
    if et == 0x0800 and len(frame) > l3:
        bth = l3 + (frame[l3] & 0x0F) * 4 + 8
    elif et == 0x86DD:
        bth = l3 + 48
    elif et == 0x8915:
        bth = l3 + 40
    else:
        return None
    if len(frame) < bth + 12:
        return None
    return frame[bth:bth + 1] + frame[bth + 12:]

frames, pcaps = [], sorted(glob.glob(os.path.join(root, "pcap-fixtures", "pcaps", "*.pcap")))
if not pcaps:
    print("fuzz.sh: no pcap-fixtures/pcaps/*.pcap; seeding without fixtures")
for p in pcaps:
    data = open(p, "rb").read()
    put("pcap_decode", data)
    frames += pcap_frames(data)
vectors = os.path.join(shared, "reference", "vectors.txt")
if os.path.exists(vectors):
    for line in open(vectors):
        if line.startswith("hex:"):
            try:
                frames.append(bytes.fromhex(line[4:].strip()))
            except ValueError:
                pass
else:
    print(f"fuzz.sh: {vectors} not found; seeding without vectors")
# The fixtures are little-endian microsecond pcaps: also seed the reader's
# other formats (big-endian, nanosecond, pcapng) with the same frames.
def pcap_file(frames, end, magic):
    out = struct.pack(end + "IHHiIII", magic, 2, 4, 0, 0, 65535, 1)
    for i, f in enumerate(frames):
        out += struct.pack(end + "IIII", i, 0, len(f), len(f)) + f
    return out

def pcapng_file(frames):
    def block(btype, body):
        body += b"\0" * (-len(body) % 4)
        n = len(body) + 12
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", 1, 0, 65535))
    for i, f in enumerate(frames):
        out += block(6, struct.pack("<IIIII", 0, 0, i, len(f), len(f)) + f)
    return out

if frames:
    few = frames[:8]
    put("pcap_decode", pcap_file(few, ">", 0xA1B2C3D4))
    put("pcap_decode", pcap_file(few, "<", 0xA1B23C4D))
    put("pcap_decode", pcapng_file(few))
for f in frames:
    put("frame", f)
    put("mac_control", f)
    put("host_rx", struct.pack(">H", len(f)) + f)
    t = transport(f)
    if t is not None:
        put("transport_headers", t)
for target in os.listdir(corpus):
    seeds = os.path.join(root, "fuzz", "seeds", target)
    for s in glob.glob(os.path.join(seeds, "*")):
        put(target, open(s, "rb").read())
    print(f"fuzz.sh: corpus/{target}: {len(os.listdir(os.path.join(corpus, target)))} inputs")
EOF

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked --quiet || { echo "fuzz.sh: cannot install cargo-fuzz" >&2; exit 2; }
fi

echo "fuzz.sh: building (cargo fuzz build -O)"
if ! RUSTC_BOOTSTRAP=1 cargo fuzz build -O; then
    echo "fuzz.sh: build failed" >&2
    exit 2
fi

status=0
summary=()
for t in "${targets[@]}"; do
    log="fuzz/artifacts/$t.log"
    echo "fuzz.sh: running $t for ${seconds}s (log: $log)"
    # shellcheck disable=SC2086
    RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$t" "$root/fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -print_final_stats=1 ${FUZZ_ARGS:-} >"$log" 2>&1
    rc=$?
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    if [[ $rc -ne 0 ]]; then
        status=1
        summary+=("$t: FAILED (exit $rc), ${execs:-?} execs; see $log and fuzz/artifacts/$t/")
        grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -5 >&2
    else
        summary+=("$t: ok, ${execs:-?} execs in ${seconds}s, ${cov:-cov: ?}")
    fi
done

echo "fuzz.sh: summary"
printf '  %s\n' "${summary[@]}"
exit $status
