#!/usr/bin/env bash
# accord mirror over ssh, side by side with rsync over the same ssh, in one
# run, on a fresh ext4 loop image (root needed). Starts its own sshd on a
# loopback port with keys made for the run, and a delaying TCP proxy
# (delayproxy.py; this kernel has no netem) for the round-trip time.
#
#   bench/remote/run.sh              all parts
#   PARTS="latency bytes" ...        some of: latency bytes inplace
#   RTT_MS=130 RUNS=3 SCALE=1        defaults
#
# latency: the Unison paper's workload, 6,000 files of about 16 MB in all,
#   pushed into an empty directory, then pushed again with nothing to do:
#   accord vs rsync -a, at 0 ms and at RTT_MS; prints medians, ratios, and
#   the time above 0 ms in round trips.
# bytes: four 4.5 MB files with a line appended to each, pushed with
#   --delta always vs rsync -a --no-whole-file: bytes on the wire (accord's
#   --json bytes_sent + bytes_received; rsync's --stats) and time.
# numpy: a real binary update, numpy's core extension module
#   (_multiarray_umath…so, 10.4 MB) from the 2.1.2 wheel updated to 2.1.3's,
#   with -z vs rsync -z --no-whole-file, and without compression: bytes on
#   the wire. The wheels come from PyPI (pip download) unless NUMPY_DIR
#   holds them already.
# inplace: a 256 MiB file whose 64 chunks were reversed, pushed with
#   --inplace to a destination file system of 300 MiB (no room for a second
#   copy): bytes on the wire and the destination's peak use.
# resume: a push of a 1 GiB file killed (SIGKILL) once about half of it has
#   arrived, then run again: bytes the second run sends, as a share of the
#   file.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
source bench/lib.sh
source bench/remote/sshd.sh
RUNS=${RUNS:-3}
RTT_MS=${RTT_MS:-130}
SCALE=${SCALE:-1}
PARTS=${PARTS:-"latency bytes numpy inplace resume"}
WORK=${WORK:-/tmp/accord-remote-bench}
[ "$(id -u)" = 0 ] || { echo "run as root (loop mounts, sshd)" >&2; exit 1; }
command -v rsync >/dev/null || { echo "rsync missing" >&2; exit 1; }
ensure_accord
mkdir -p "$WORK" "$OUT"
export ACCORD_STATE_DIR=$WORK/state

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SSHD_DIR=$WORK/sshd
start_sshd "$SSHD_DIR" "$(free_port)"
PROXY_PORT=$(free_port)
python3 bench/remote/delayproxy.py "$PROXY_PORT" "$SSH_PORT" "$(awk -v r="$RTT_MS" 'BEGIN{print r/2}')" &
PROXY_PID=$!
trap 'kill $PROXY_PID 2>/dev/null; stop_sshd; cleanup_mounts' EXIT
sleep 0.5
RSH0=$(rsh_for "$SSH_PORT")
RSHD=$(rsh_for "$PROXY_PORT")
# Both tools find their remote side by absolute path.
ACC() { "$ACCORD" mirror -q --remote-accord "$ACCORD" "$@"; }

timed() { local s=$EPOCHREALTIME; "$@" >/dev/null 2>&1; awk -v s="$s" -v e="$EPOCHREALTIME" 'BEGIN{printf "%.3f\n", e-s}'; }

latency() {
    fresh_fs lat 2G
    local src=$FS/src dst=$FS/dst
    python3 - "$src" "$SCALE" <<'PY'
import os, random, sys
random.seed(1)
root, scale = sys.argv[1], float(sys.argv[2])
n = int(6000 * scale)
for i in range(n):
    d = f"{root}/d{i % 10}/s{(i // 10) % 6}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i}.txt", "wb") as f:
        f.write(os.urandom(random.randint(0, 5400)))
PY
    echo "latency: $(find "$src" -type f | wc -l) files, $(du -sb "$src" | cut -f1) bytes"
    for label in 0ms "${RTT_MS}ms"; do
        local rsh=$RSH0
        [ "$label" = 0ms ] || rsh=$RSHD
        local a=() r=() an=() rn=()
        ACC --rsh "$rsh" "$src" "127.0.0.1:$dst" >/dev/null 2>&1; rm -rf "$dst"   # warm-up
        for _ in $(seq "$RUNS"); do
            rm -rf "$dst"; sync
            a+=("$(timed ACC --rsh "$rsh" "$src" "127.0.0.1:$dst")")
            an+=("$(timed ACC --rsh "$rsh" "$src" "127.0.0.1:$dst")")
            rm -rf "$dst"; sync
            r+=("$(timed rsync -a -e "$rsh" "$src/" "127.0.0.1:$dst/")")
            rn+=("$(timed rsync -a -e "$rsh" "$src/" "127.0.0.1:$dst/")")
        done
        local ma mr man mrn
        ma=$(printf '%s\n' "${a[@]}" | median); mr=$(printf '%s\n' "${r[@]}" | median)
        man=$(printf '%s\n' "${an[@]}" | median); mrn=$(printf '%s\n' "${rn[@]}" | median)
        echo "  $label initial push: accord ${ma}s rsync ${mr}s ratio $(ratio "$ma" "$mr")"
        echo "  $label no-change:    accord ${man}s rsync ${mrn}s ratio $(ratio "$man" "$mrn")"
        eval "LAT_$label=$ma; LATN_$label=$man" 2>/dev/null || true
        [ "$label" = 0ms ] && { base=$ma; basen=$man; }
    done
    local ssh0 sshd
    ssh0=$(printf '%s\n' $(for _ in 1 2 3; do timed $RSH0 127.0.0.1 true; done) | median)
    sshd=$(printf '%s\n' $(for _ in 1 2 3; do timed $RSHD 127.0.0.1 true; done) | median)
    echo "  ssh set-up (ssh HOST true): ${ssh0}s at 0 ms, ${sshd}s at ${RTT_MS} ms"
    echo "  time above 0 ms, minus ssh's extra set-up, in round trips: initial $(awk -v a="$ma" -v b="$base" -v s0="$ssh0" -v s1="$sshd" -v r="$RTT_MS" 'BEGIN{printf "%.1f", (a-b-(s1-s0))*1000/r}'), no-change $(awk -v a="$man" -v b="$basen" -v s0="$ssh0" -v s1="$sshd" -v r="$RTT_MS" 'BEGIN{printf "%.1f", (a-b-(s1-s0))*1000/r}')"
    # ssh's own floor for the bytes: its channel window (2 MiB in OpenSSH)
    # lets that much be in flight per round trip, whatever the tool.
    local bytes; bytes=$(du -sb "$src" | cut -f1)
    head -c "$bytes" /dev/urandom > "$WORK/blob"
    local c0 c1
    c0=$(printf '%s\n' $(for _ in 1 2 3; do timed sh -c "$RSH0 127.0.0.1 'cat > /dev/null' < $WORK/blob"; done) | median)
    c1=$(printf '%s\n' $(for _ in 1 2 3; do timed sh -c "$RSHD 127.0.0.1 'cat > /dev/null' < $WORK/blob"; done) | median)
    rm -f "$WORK/blob"
    echo "  ssh HOST cat of the same bytes: ${c0}s at 0 ms, ${c1}s at ${RTT_MS} ms: $(awk -v a="$c0" -v b="$c1" -v s0="$ssh0" -v s1="$sshd" -v r="$RTT_MS" 'BEGIN{printf "%.1f", (b-a-(s1-s0))*1000/r}') round trips above its set-up"
    echo "  initial push above that floor: $(awk -v a="$ma" -v b="$base" -v c0="$c0" -v c1="$c1" -v r="$RTT_MS" 'BEGIN{printf "%.1f", ((a-b)-(c1-c0))*1000/r}') round trips"
}

wire_bytes_accord() {
    "$ACCORD" mirror -q --json --remote-accord "$ACCORD" "$@" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["bytes_sent"]+j["bytes_received"])'
}

wire_bytes_rsync() {
    rsync "$@" --stats | awk -F': ' '/^Total bytes sent|^Total bytes received/ {gsub(/,/,"",$2); s+=$2} END{print s}'
}

bytes() {
    fresh_fs bytes 1G
    local src=$FS/src
    mkdir -p "$src"
    for i in 1 2 3 4; do head -c 4718592 /dev/urandom > "$src/big$i"; done
    local da=$FS/dst_accord dr=$FS/dst_rsync
    ACC --rsh "$RSHD" "$src" "127.0.0.1:$da"
    rsync -a -e "$RSHD" "$src/" "127.0.0.1:$dr/"
    for i in 1 2 3 4; do echo "one more line $i" >> "$src/big$i"; done
    local s=$EPOCHREALTIME
    local ba; ba=$(wire_bytes_accord --rsh "$RSHD" --delta always "$src" "127.0.0.1:$da")
    local ta; ta=$(awk -v s="$s" -v e="$EPOCHREALTIME" 'BEGIN{printf "%.3f", e-s}')
    s=$EPOCHREALTIME
    local br; br=$(wire_bytes_rsync -a --no-whole-file -e "$RSHD" "$src/" "127.0.0.1:$dr/")
    local tr; tr=$(awk -v s="$s" -v e="$EPOCHREALTIME" 'BEGIN{printf "%.3f", e-s}')
    cmp "$src/big1" "$da/big1" && cmp "$src/big4" "$dr/big4"
    echo "bytes (4 x 4.5 MB, a line appended, ${RTT_MS} ms): accord ${ba} B in ${ta}s, rsync ${br} B in ${tr}s, bytes ratio $(ratio "$ba" "$br")"
}

numpy() {
    local wheels=${NUMPY_DIR:-$WORK/numpy}
    mkdir -p "$wheels"
    for v in 2.1.2 2.1.3; do
        ls "$wheels"/numpy-$v-*.whl >/dev/null 2>&1 ||
            pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
                --platform manylinux_2_17_x86_64 "numpy==$v" -d "$wheels"
    done
    fresh_fs numpy 512M
    local so=numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so
    for v in 2.1.2 2.1.3; do
        mkdir -p "$FS/$v"
        unzip -q -o "$wheels"/numpy-$v-*.whl "$so" -d "$FS/$v"
    done
    local line="numpy ($(stat -c %s "$FS/2.1.3/$so") B, 2.1.2 -> 2.1.3):"
    for z in "-z" ""; do
        local src=$FS/src$z da=$FS/da$z dr=$FS/dr$z
        mkdir -p "$src"
        cp "$FS/2.1.2/$so" "$src/m.so"
        ACC --rsh "$RSH0" "$src" "127.0.0.1:$da"
        rsync -a -e "$RSH0" "$src/" "127.0.0.1:$dr/"
        cp "$FS/2.1.3/$so" "$src/m.so"
        local ba br
        ba=$(wire_bytes_accord --rsh "$RSH0" --delta always $z "$src" "127.0.0.1:$da")
        br=$(wire_bytes_rsync -a --no-whole-file $z -e "$RSH0" "$src/" "127.0.0.1:$dr/")
        cmp "$src/m.so" "$da/m.so" && cmp "$src/m.so" "$dr/m.so"
        line="$line ${z:-plain}: accord $ba B, rsync $br B, ratio $(ratio "$ba" "$br");"
    done
    echo "$line"
}

inplace() {
    fresh_fs ipsrc 1G
    local src=$FS/src; mkdir -p "$src"
    fresh_fs ipdst 300M
    local dst=$FS/dst
    head -c $((256 << 20)) /dev/urandom > "$src/big"
    ACC --rsh "$RSH0" "$src" "127.0.0.1:$dst"
    python3 - "$src/big" <<'PY'
import sys
p = sys.argv[1]
data = open(p, "rb").read()
n = 64
size = len(data) // n
chunks = [data[i * size:(i + 1) * size] for i in range(n)]
open(p, "wb").write(b"".join(reversed(chunks)))
PY
    local peak=0 used
    ( while sleep 0.05; do df -B1 --output=used "$FS" | tail -1; done ) > "$WORK/df.log" &
    local poll=$!
    local b; b=$(wire_bytes_accord --rsh "$RSH0" --inplace "$src" "127.0.0.1:$dst")
    kill $poll
    peak=$(sort -n "$WORK/df.log" | tail -1)
    cmp "$src/big" "$dst/big"
    echo "inplace (256 MiB, 64 chunks reversed, destination fs 300 MiB): $b B on the wire ($(awk -v b="$b" 'BEGIN{printf "%.2f", b*100/(256*1048576)}')% of the file), destination peak use $peak B"
}

resume() {
    fresh_fs resume 3G
    local src=$FS/src dst=$FS/dst size=$((1 << 30))
    mkdir -p "$src"
    head -c "$size" /dev/urandom > "$src/big"
    # Not through ACC: $! must be accord itself, not a subshell.
    "$ACCORD" mirror -q --remote-accord "$ACCORD" --rsh "$RSH0" "$src" "127.0.0.1:$dst" &
    local pid=$! arrived=0
    while kill -0 "$pid" 2>/dev/null; do
        arrived=$(find "$dst" -maxdepth 1 -name '.accord*' -printf '%s\n' 2>/dev/null | sort -n | tail -1 || true)
        [ "${arrived:-0}" -ge $((size / 2)) ] && { kill -9 "$pid"; break; }
        sleep 0.05
    done
    wait "$pid" 2>/dev/null || true
    # The far side's server ends once ssh tells it its client is gone.
    for _ in $(seq 100); do pgrep -f "$ACCORD server" >/dev/null || break; sleep 0.1; done
    local b; b=$(wire_bytes_accord --rsh "$RSH0" "$src" "127.0.0.1:$dst")
    cmp "$src/big" "$dst/big"
    echo "resume (1 GiB, killed after ${arrived} B had arrived): the second run sent $b B ($(awk -v b="$b" -v s="$size" 'BEGIN{printf "%.1f", b*100/s}')% of the file)"
}

for p in $PARTS; do "$p"; done
