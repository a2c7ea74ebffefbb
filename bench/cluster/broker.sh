#!/usr/bin/env bash
# The broker's load and the memory of a task run (issue 13, items 4 and 5):
# counts, not timings, so it may run while the machine is busy.
#
#   bench/cluster/broker.sh                 20,000 files in directories of 100
#   FILES=200000 bench/cluster/broker.sh    the same shape, ten times larger
#
# Environment: FILES (20000), PER_DIR (100), WORKERS (3 `accord worker`s),
# JOBS (threads per worker, 2), LOCAL_JOBS (4), ACCORD (the binary),
# WORK (a scratch directory; the tree is kept there between runs of the
# same FILES and PER_DIR), PORT (a free loopback port for redis-server).
#
# Prints, for one cluster run (the starter following it, WORKERS workers):
# Redis commands by name from `INFO commandstats` (reset just before; calls
# made inside the queue's Lua scripts count as well), their total per file,
# each worker's peak RSS, Redis's peak memory; then the peak RSS of
# `accord mirror --executor tasks -j LOCAL_JOBS` (initial copy and
# no-change re-run); then Redis memory per pending task: a run paused with
# tasks waiting, `MEMORY USAGE` of its stream divided by the entries.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
FILES=${FILES:-20000}
PER_DIR=${PER_DIR:-100}
WORKERS=${WORKERS:-3}
JOBS=${JOBS:-2}
LOCAL_JOBS=${LOCAL_JOBS:-4}
ACCORD=${ACCORD:-$ROOT/target/release/accord}
WORK=${WORK:-/tmp/accord-broker-bench}
PORT=${PORT:-6391}
URL=redis://127.0.0.1:$PORT/0
export ACCORD_STATE_DIR=$WORK/state

command -v redis-server >/dev/null || { echo "redis-server missing" >&2; exit 1; }
[ -x "$ACCORD" ] || { echo "no accord at $ACCORD (cargo build --release)" >&2; exit 1; }
mkdir -p "$WORK"
SRC=$WORK/src-$FILES-$PER_DIR
if [ ! -d "$SRC" ]; then
    python3 bench/cluster/gentree.py "$SRC.tmp" "$FILES" "$PER_DIR"
    mv "$SRC.tmp" "$SRC"
fi

REDIS_PID=
cleanup() {
    set +e
    [ -n "$REDIS_PID" ] && kill "$REDIS_PID" && wait "$REDIS_PID" 2>/dev/null
    rm -rf "$WORK/dst" "$WORK/redis"
}
trap cleanup EXIT
rm -rf "$WORK/redis" && mkdir -p "$WORK/redis"
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$WORK/redis" >/dev/null 2>&1 &
REDIS_PID=$!
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.1; done
rcli() { redis-cli -p "$PORT" "$@"; }

# redis_cpu: seconds of CPU the server used so far (user + system).
redis_cpu() {
    rcli INFO cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { t += $2 } END { printf "%.3f\n", t }'
}

# rss_of LOG: the peak RSS (KiB) /usr/bin/time wrote last in LOG.
rss_of() { tail -n 1 "$1"; }

echo "tree: $SRC ($(find "$SRC" -type f | wc -l) files, $(find "$SRC" -type d | wc -l) directories)"
echo
echo "== cluster run: $WORKERS workers x $JOBS threads, the starter following"
rm -rf "$WORK/dst"
rcli CONFIG RESETSTAT >/dev/null
CPU0=$(redis_cpu)
"$ACCORD" mirror --cluster "$URL" --run bench "$SRC" "$WORK/dst" 2>"$WORK/follower.log" &
FOLLOWER=$!
until rcli EXISTS 'accord:{bench}:tasks' | grep -q 1; do sleep 0.05; done
PIDS=()
for i in $(seq "$WORKERS"); do
    /usr/bin/time -f %M -o "$WORK/worker$i.rss" \
        "$ACCORD" worker --cluster "$URL" --run bench --jobs "$JOBS" --name "w$i" \
        2>"$WORK/worker$i.log" &
    PIDS+=($!)
done
for p in "${PIDS[@]}"; do wait "$p"; done
wait "$FOLLOWER"
tail -n 1 "$WORK/follower.log"
CPU1=$(redis_cpu)
rcli INFO commandstats | tr -d '\r' | awk -F'[:=,]' -v files="$FILES" '
    /^cmdstat_/ { name = substr($1, 9); calls[name] = $3; total += $3 }
    END {
        for (n in calls) printf "  %-14s %8d  %.4f per file\n", n, calls[n], calls[n] / files
        printf "  %-14s %8d  %.4f per file\n", "TOTAL", total, total / files
    }' | sort -k2 -n -r
awk -v a="$CPU0" -v b="$CPU1" -v f="$FILES" 'BEGIN {
    printf "  redis CPU %.3f s: %.1f us per file, so one core feeds %.0f files/s\n", b - a, (b - a) * 1e6 / f, f / (b - a) }'
for i in $(seq "$WORKERS"); do echo "  worker w$i peak RSS $(rss_of "$WORK/worker$i.rss") KiB"; done
echo "  redis used_memory_peak $(rcli INFO memory | tr -d '\r' | awk -F: '/^used_memory_peak:/ {print $2}') bytes"
diff -r "$SRC" "$WORK/dst" >/dev/null && echo "  destination identical to the source (diff -r)"
# What a finished run leaves in Redis: the marks that make every count
# once, and the directories' counters.
for h in marks counters; do
    n=$(rcli HLEN "accord:{bench}:$h"); b=$(rcli MEMORY USAGE "accord:{bench}:$h" SAMPLES 0)
    echo "  $h: $n fields, ${b:-0} bytes ($(( ${b:-0} / (n > 0 ? n : 1) )) per field)"
done

echo
echo "== local executor, -j $LOCAL_JOBS"
rm -rf "$WORK/dst"
/usr/bin/time -f %M -o "$WORK/local.rss" "$ACCORD" mirror --executor tasks -j "$LOCAL_JOBS" "$SRC" "$WORK/dst" 2>"$WORK/local.log"
echo "  initial copy: $(tail -n 1 "$WORK/local.log"); peak RSS $(rss_of "$WORK/local.rss") KiB"
/usr/bin/time -f %M -o "$WORK/local.rss" "$ACCORD" mirror --executor tasks -j "$LOCAL_JOBS" "$SRC" "$WORK/dst" 2>"$WORK/local.log"
echo "  no-change re-run: $(tail -n 1 "$WORK/local.log"); peak RSS $(rss_of "$WORK/local.rss") KiB"

echo
echo "== Redis memory per pending task (a run paused with tasks waiting)"
rm -rf "$WORK/dst"
rcli FLUSHALL >/dev/null
"$ACCORD" mirror --cluster "$URL" --run mem --detach "$SRC" "$WORK/dst" 2>/dev/null
"$ACCORD" worker --cluster "$URL" --run mem --jobs 1 --name m 2>/dev/null &
MW=$!
# Pause as soon as the first files are written: the scans ahead of them
# have queued most of the tree's tasks by then.
until [ -n "$(rcli HGET 'accord:{mem}:counters' written)" ]; do sleep 0.05; done
"$ACCORD" cluster pause --cluster "$URL" --run mem >/dev/null
sleep 1
"$ACCORD" cluster stop --cluster "$URL" --run mem >/dev/null
wait "$MW" || true
LEN=$(rcli XLEN 'accord:{mem}:tasks')
BYTES=$(rcli MEMORY USAGE 'accord:{mem}:tasks' SAMPLES 0)
MARKS=$(rcli MEMORY USAGE 'accord:{mem}:marks' SAMPLES 0)
NMARKS=$(rcli HLEN 'accord:{mem}:marks')
echo "  $LEN tasks waiting; the stream takes $BYTES bytes: $((BYTES / (LEN > 0 ? LEN : 1))) bytes per task"
echo "  marks: $NMARKS taking ${MARKS:-0} bytes: $(( ${MARKS:-0} / (NMARKS > 0 ? NMARKS : 1) )) bytes per mark"
rcli INFO memory | tr -d '\r' | grep -E '^used_memory:' | sed 's/^/  /'
