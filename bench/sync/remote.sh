#!/usr/bin/env bash
# accord sync with replica B over ssh, side by side with Unison over the
# same ssh and the same delaying proxy, in one run, on a fresh ext4 loop
# image (root needed). Starts its own sshd on a loopback port with keys made
# for the run, and a delaying TCP proxy (bench/remote/delayproxy.py; this
# kernel has no netem) for the round-trip time. Each tool syncs its own
# copy of the same pair; rounds alternate between the tools after a
# warm-up; medians and their ratio are printed.
#
#   bench/sync/remote.sh              6,000 files, RTT_MS=130 (a few minutes)
#   RTT_MS=0 ...                      straight to sshd, no proxy
#   RUNS=5 SCALE=0.5 ...              timed rounds (default 3), tree size
#   ACCORD_BIN=path/to/accord         binary (default target/release/accord)
#
# The workload is the Unison paper's: 6,000 files of about 16 MB in all.
# 1. first sync: A holds the tree, B (remote) is empty, no archives.
# 2. no-change re-sync; also `ssh HOST true` through the same proxy, and the
#    time above it in round trips.
# 3. 1% of the files changed on each side (60 on A, 60 others on B, a
#    line appended), then a re-sync.
#
# Unison runs as `unison -batch -auto -times=false` (bench/sync/run.sh's
# options), its server through a wrapper that keeps its archives in the
# run's directory; accord's server keeps its archives there too.
# Target (issue 31): each row at most 0.5x Unison's time; the no-change
# row within ssh's set-up plus 3 round trips.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
RUNS=${RUNS:-3}
source bench/lib.sh
source bench/remote/sshd.sh
RTT_MS=${RTT_MS:-130}
SCALE=${SCALE:-1}
WORK=${WORK:-/tmp/accord-sync-remote-bench}
[ "$(id -u)" = 0 ] || { echo "run as root (loop mount, sshd)" >&2; exit 1; }
command -v unison >/dev/null || { echo "unison missing (apt-get install unison)" >&2; exit 1; }
ensure_accord
mkdir -p "$WORK"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_sshd "$WORK/sshd" "$(free_port)"
PORT=$SSH_PORT
PROXY_PID=
if [ "$RTT_MS" != 0 ]; then
    PORT=$(free_port)
    python3 bench/remote/delayproxy.py "$PORT" "$SSH_PORT" "$(awk -v r="$RTT_MS" 'BEGIN{print r/2}')" &
    PROXY_PID=$!
    for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT))" 2>/dev/null && break; sleep 0.1; done
fi
trap '[ -n "$PROXY_PID" ] && kill $PROXY_PID 2>/dev/null; stop_sshd; cleanup_mounts' EXIT
RSH=$(rsh_for "$PORT")

fresh_fs sync-remote 2G
W=$FS
# Both ends of each tool keep their archives in the run's directory.
export ACCORD_STATE_DIR=$W/accord-state
export UNISON=$W/unison-state
cat > "$W/accord-server" <<EOF
#!/bin/sh
ACCORD_STATE_DIR=$W/accord-server-state exec $ACCORD "\$@"
EOF
cat > "$W/unison-server" <<EOF
#!/bin/sh
UNISON=$W/unison-server-state exec unison "\$@"
EOF
chmod +x "$W/accord-server" "$W/unison-server"

python3 - "$W/tree" "$SCALE" <<'PY'
import os, random, sys
random.seed(1)
root, scale = sys.argv[1], float(sys.argv[2])
for i in range(int(6000 * scale)):
    d = f"{root}/d{i % 10}/s{(i // 10) % 6}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{i}.txt", "wb") as f:
        f.write(os.urandom(random.randint(0, 5400)))
PY
echo "accord sync vs unison $(unison -version 2>/dev/null | head -1 | awk '{print $3}') with B over ssh at ${RTT_MS} ms round trip, $(find "$W/tree" -type f | wc -l) files, $(du -sb "$W/tree" | cut -f1) bytes, $(nproc) cores, $RUNS timed rounds after a warm-up, load $(cut -d' ' -f1-3 /proc/loadavg)"

accord_sync() {
    "$ACCORD" sync --batch -q --max-delete 100% --rsh "$RSH" --remote-accord "$W/accord-server" \
        "$W/acc-a" "127.0.0.1:$W/acc-b"
}
unison_sync() {
    unison -batch -auto -times=false -confirmbigdel=false -silent \
        -sshargs "${RSH#ssh }" -servercmd "$W/unison-server" \
        "$W/uni-a" "ssh://127.0.0.1/$W/uni-b" || [ $? = 1 ]
}

declare -A TIMES
# row TITLE PREP: a warm-up round, then RUNS rounds, each running PREP and
# then both tools in turn.
row() {
    local title=$1 prep=$2 a u
    eval "$prep"
    accord_sync >/dev/null 2>&1 || true
    unison_sync >/dev/null 2>&1 || true
    TIMES=([accord]="" [unison]="")
    for _ in $(seq "$RUNS"); do
        eval "$prep"
        sync
        TIMES[accord]+="$(seconds accord_sync) "
        TIMES[unison]+="$(seconds unison_sync) "
    done
    a=$(printf '%s\n' ${TIMES[accord]} | median)
    u=$(printf '%s\n' ${TIMES[unison]} | median)
    echo "== $title"
    printf '  accord sync  median %8.3f s   runs: %s\n' "$a" "${TIMES[accord]}"
    printf '  unison       median %8.3f s   runs: %s\n' "$u" "${TIMES[unison]}"
    echo "  ratio accord/unison: $(ratio "$a" "$u")   (target <= 0.5)"
    LAST_ACCORD=$a
}

check_agree() {
    for tool in acc uni; do
        diff -r "$W/$tool-a" "$W/$tool-b" >/dev/null || { echo "$tool: the replicas differ after its run" >&2; exit 1; }
    done
}

fresh_pairs() {
    rm -rf "$W"/acc-? "$W"/uni-? "$ACCORD_STATE_DIR" "$UNISON" "$W/accord-server-state" "$W/unison-server-state"
    cp -a "$W/tree" "$W/acc-a"
    cp -a "$W/tree" "$W/uni-a"
    mkdir "$W/acc-b" "$W/uni-b" "$UNISON" "$W/unison-server-state"
}
row "1. first sync (B empty, no archives)" fresh_pairs
check_agree

# Rows 2 and 3 start from pairs in agreement (the warm-up of each row
# also settles what the row before wrote).
row "2. no-change re-sync" ':'
check_agree
ssh_true=$(for _ in $(seq "$RUNS"); do seconds $RSH 127.0.0.1 true; done | median)
echo "  ssh set-up (ssh HOST true): ${ssh_true}s; accord above it: $(awk -v a="$LAST_ACCORD" -v s="$ssh_true" -v r="$RTT_MS" 'BEGIN { if (r > 0) printf "%.1f round trips", (a - s) * 1000 / r; else printf "%.3f s", a - s }')"

ROUND=0
# A new 1% of the files on each side (A's and B's differ), the same on
# both tools' pairs.
change_one_percent() {
    ROUND=$((ROUND + 1))
    python3 bench/sync/change.py "$W" "$ROUND"
}
row "3. 1% of the files changed on each side" change_one_percent
check_agree
