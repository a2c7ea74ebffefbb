#!/usr/bin/env bash
# Task runs side by side with fpsync (Debian's fpart: fpart cuts the tree
# into lists, rsync workers copy them) on a fresh ext4 loop image (root
# needed). Timings: run it on an idle machine.
#
#   bench/cluster/run.sh                        200,000 files, 3 runs each
#   FILES=5000 RUNS=1 bench/cluster/run.sh      a smoke run
#
# Environment: FILES (200000), PER_DIR (files per directory, 100), MAX_SIZE
# (largest file, bytes, 4096), JOBS ("1 2 4 8"), RUNS (timed runs after a
# warm-up, 3), WORKERS (cluster workers on this machine, 3), ACCORD (the
# binary, default target/release/accord), WORK (scratch, /tmp/accord-cluster-bench),
# PORT (a free loopback port for redis-server, 6393).
#
# 1. initial copy: files/s of `accord mirror --executor tasks --jobs N`
#    and of `fpsync -n N` for each N, and their ratio (target >= 2);
# 2. no-change re-run: the same, and the local executor at its default
#    threads against `rsync -a` (target: at most 0.5x its time);
# 3. the cluster: WORKERS `accord worker`s of 2 threads (`mirror --cluster`,
#    a redis-server of its own) against the local executor at 2*WORKERS
#    threads, initial copy (target: cluster time <= 1.5x local).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
FILES=${FILES:-200000}
PER_DIR=${PER_DIR:-100}
MAX_SIZE=${MAX_SIZE:-4096}
JOBS=${JOBS:-1 2 4 8}
RUNS=${RUNS:-3}
WORKERS=${WORKERS:-3}
ACCORD=${ACCORD:-$ROOT/target/release/accord}
WORK=${WORK:-/tmp/accord-cluster-bench}
PORT=${PORT:-6393}
IMG=$WORK/fs.img
MNT=$WORK/mnt
export ACCORD_STATE_DIR=$WORK/state

[ "$(id -u)" = 0 ] || { echo "run as root (loop mount)" >&2; exit 1; }
for t in fpsync rsync redis-server redis-cli; do
    command -v "$t" >/dev/null || { echo "$t missing (apt-get install fpart rsync redis-server)" >&2; exit 1; }
done
[ -x "$ACCORD" ] || { echo "no accord at $ACCORD (cargo build --release)" >&2; exit 1; }

REDIS_PID=
cleanup() {
    set +e
    [ -n "$REDIS_PID" ] && kill "$REDIS_PID" && wait "$REDIS_PID" 2>/dev/null
    mountpoint -q "$MNT" && umount "$MNT"
    [ -n "${LOOP:-}" ] && losetup -d "$LOOP"
    rm -f "$IMG"
}
trap cleanup EXIT
mkdir -p "$WORK" "$MNT"
mountpoint -q "$MNT" && umount "$MNT"
rm -f "$IMG"
# Room for the source and three copies at once (4 KiB blocks), and their
# inodes: accord's and fpsync's, and rsync -a's in section 2.
truncate -s $(( FILES * 4 * 8 / 1024 + 1024 ))M "$IMG"
mkfs.ext4 -q -F -N $(( FILES * 4 + FILES / PER_DIR * 4 + 10000 )) \
    -E lazy_itable_init=0,lazy_journal_init=0 "$IMG"
LOOP=$(losetup -f --show "$IMG")
mount "$LOOP" "$MNT"

median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f\n", m}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "inf"; else printf "%.2f\n", a / b }'; }
rate() { awk -v n="$FILES" -v t="$1" 'BEGIN { if (t == 0) print "inf"; else printf "%.0f\n", n / t }'; }

# rounds PREP NAME CMD [NAME CMD ...]: one warm-up of each command, then
# RUNS rounds running every command once in turn (a load that comes and
# goes hits all alike); PREP runs untimed before each run. Each command's
# exit status is checked. Medians go to MED.
declare -A MED
rounds() {
    local prep=$1 t0 t1 i name
    shift
    local -a names=() cmds=()
    while [ $# -gt 0 ]; do names+=("$1"); cmds+=("$2"); shift 2; done
    declare -A times=()
    for i in "${!cmds[@]}"; do eval "$prep"; eval "${cmds[$i]}" >/dev/null 2>&1 || fail "${names[$i]}"; done
    for _ in $(seq "$RUNS"); do
        for i in "${!cmds[@]}"; do
            eval "$prep"
            t0=$EPOCHREALTIME
            eval "${cmds[$i]}" >/dev/null 2>&1 || fail "${names[$i]}"
            t1=$EPOCHREALTIME
            times[$i]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') "
        done
    done
    for i in "${!cmds[@]}"; do
        name=${names[$i]}
        MED[$name]=$(printf '%s\n' ${times[$i]} | median)
        printf '  %-34s median %8.3f s  %8s files/s   runs: %s\n' \
            "$name" "${MED[$name]}" "$(rate "${MED[$name]}")" "${times[$i]}"
    done
}
fail() { echo "FAILED: $1" >&2; exit 1; }

# same A B: the copy holds the source's files (names, sizes, contents).
same() { diff -r "$1" "$2" >/dev/null || fail "$2 differs from $1"; }
# verify_clean: check each copy the last command made, then remove it
# (the prep of initial copies, untimed: every timed copy is checked).
verify_clean() {
    local d
    for d in "$MNT/a" "$MNT/f"; do
        if [ -d "$d" ]; then same "$SRC" "$d"; rm -rf "$d"; fi
    done
    sync
}

SRC=$MNT/src
python3 bench/cluster/gentree.py "$SRC" "$FILES" "$PER_DIR" 1 "$MAX_SIZE"
sync
echo "accord task runs and fpsync on ext4 ($LOOP, $(nproc) cores), $RUNS timed runs after a warm-up"
echo "tree: $(find "$SRC" -type f | wc -l) files of 0..$MAX_SIZE bytes, $(find "$SRC" -type d | wc -l) directories"

# fpsync's copy: rsync keeping what `accord mirror` keeps of these files
# (times, modes, owners; no xattrs: the tree has none); its scratch on the
# image's file system would be timed too, so it goes to $WORK.
FPSYNC_OPTS='-lptgoD --numeric-ids'
fp() { fpsync -n "$1" -t "$WORK/fpsync" -o "$FPSYNC_OPTS" "$SRC/" "$2/"; }
acc() { "$ACCORD" mirror -q --executor tasks --jobs "$1" "$SRC" "$2"; }

echo
echo "== 1. initial copy"
CLEAN=verify_clean
for n in $JOBS; do
    rounds "$CLEAN" \
        "accord --executor tasks --jobs $n" "acc $n \"\$MNT/a\"" \
        "fpsync -n $n" "fp $n \"\$MNT/f\""
    verify_clean
    echo "  ratio of rates accord/fpsync at $n: $(ratio "${MED[fpsync -n $n]}" "${MED[accord --executor tasks --jobs $n]}")   (target >= 2)"
done

echo
echo "== 2. no-change re-run"
acc 4 "$MNT/a" >/dev/null 2>&1; fp 4 "$MNT/f" >/dev/null 2>&1; sync
for n in $JOBS; do
    rounds ':' \
        "accord --executor tasks --jobs $n (no change)" "acc $n \"\$MNT/a\"" \
        "fpsync -n $n (no change)" "fp $n \"\$MNT/f\""
    echo "  ratio of rates accord/fpsync at $n: $(ratio "${MED[fpsync -n $n (no change)]}" "${MED[accord --executor tasks --jobs $n (no change)]}")   (target >= 2)"
done
rsync -a "$SRC/" "$MNT/r/" >/dev/null 2>&1; sync
rounds ':' \
    "accord --executor tasks (no change)" "\"\$ACCORD\" mirror -q --executor tasks \"\$SRC\" \"\$MNT/a\"" \
    "rsync -a (no change)" "rsync -a \"\$SRC/\" \"\$MNT/r/\""
echo "  ratio of times accord/rsync -a: $(ratio "${MED[accord --executor tasks (no change)]}" "${MED[rsync -a (no change)]}")   (target <= 0.5)"
same "$SRC" "$MNT/r"
verify_clean; rm -rf "$MNT/r"; sync

echo
echo "== 3. $WORKERS cluster workers (2 threads each) against the local executor at $((WORKERS * 2)) threads"
mkdir -p "$WORK/redis"
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$WORK/redis" >/dev/null 2>&1 &
REDIS_PID=$!
until redis-cli -p "$PORT" ping >/dev/null 2>&1; do sleep 0.1; done
# One run in Redis: the starter creates it and follows it; the workers
# are started at once and leave when it is over.
cluster() {
    local run=r$RANDOM$RANDOM url=redis://127.0.0.1:$PORT/0 pids=() i
    redis-cli -p "$PORT" FLUSHALL >/dev/null
    "$ACCORD" mirror -q --cluster "$url" --run "$run" "$SRC" "$1" &
    pids+=($!)
    until redis-cli -p "$PORT" EXISTS "accord:{$run}:tasks" | grep -q 1; do sleep 0.01; done
    for i in $(seq "$WORKERS"); do
        "$ACCORD" worker --cluster "$url" --run "$run" --jobs 2 --name "w$i" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || return 1; done
}
rounds "$CLEAN" \
    "local executor --jobs $((WORKERS * 2))" "acc $((WORKERS * 2)) \"\$MNT/a\"" \
    "cluster, $WORKERS workers x 2" "cluster \"\$MNT/a\""
verify_clean
echo "  ratio of times cluster/local: $(ratio "${MED[cluster, $WORKERS workers x 2]}" "${MED[local executor --jobs $((WORKERS * 2))]}")   (target <= 1.5)"
