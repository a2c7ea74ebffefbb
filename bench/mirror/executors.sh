#!/usr/bin/env bash
# `accord mirror`'s two local executors side by side, in one run, on a
# fresh ext4 loop image (root needed): the walk (the default) and the task
# model of cluster runs on threads of one process (`--executor tasks`).
# Prints medians, the ratio tasks/walk (below 1: the task executor is
# faster) and each one's peak RSS. The task executor is kept for local
# runs only where it wins a row by at least 20% (ratio <= 0.83).
#
#   bench/mirror/executors.sh            full size (about 10 minutes)
#   SCALE=0.1 bench/mirror/executors.sh  a tenth of the files and bytes
#   RUNS=5 ...                           timed runs per executor (default 3, after one warm-up)
#   ACCORD=path/to/accord                binary (default target/release/accord)
#
# 1. initial copy of ~50,000 files (mixed sizes, ~2 GiB)
# 2. initial copy of 2 files of 1.5 GiB (the task executor copies files above
#    --range-size, 512 MiB by default, in ranges on several threads)
# 3. no-change re-run on ~200,000 files
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SCALE=${SCALE:-1}
RUNS=${RUNS:-3}
ACCORD=${ACCORD:-$ROOT/target/release/accord}
WORK=${WORK:-/tmp/accord-executors-bench}
IMG=$WORK/fs.img
MNT=$WORK/mnt
export ACCORD_STATE_DIR=$WORK/state
rm -rf "$ACCORD_STATE_DIR"

[ "$(id -u)" = 0 ] || { echo "run as root (loop mount)" >&2; exit 1; }
[ -x "$ACCORD" ] || cargo build --release --bin accord

num() { python3 -c "print(int($1 * $SCALE))"; }
N1=$(num 50000); B1=$(num 2*1024**3); B2=$(num 1536*1024**2); N3=$(num 200000)

cleanup() {
    set +e
    mountpoint -q "$MNT" && umount "$MNT"
    [ -n "${LOOP:-}" ] && losetup -d "$LOOP"
}
trap cleanup EXIT
mkdir -p "$WORK" "$MNT"
mountpoint -q "$MNT" && umount "$MNT"
rm -f "$IMG"
truncate -s $(( (B1 * 2 + B2 * 4) / 1024 / 1024 + 4096 ))M "$IMG"
mkfs.ext4 -q -F -N $(( N1 * 3 + N3 * 3 + 100000 )) -E lazy_itable_init=0,lazy_journal_init=0 "$IMG"
LOOP=$(losetup -f --show "$IMG")
mount "$LOOP" "$MNT"

median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f\n", m}'; }
ratio() { echo "scale=3; $1 / $2" | bc; }
# peak KiB of one run of the command (GNU time's %M), its output discarded
peak() { /usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1; }

# pair PREP SRC DST: one warm-up of each executor, then RUNS alternating
# rounds; PREP runs untimed before each run. Sets WALK, TASKS (medians) and
# WALK_KB, TASKS_KB (peak RSS of one more run each).
pair() {
    local prep=$1 src=$2 dst=$3 t0 t1 w=() t=()
    for ex in walk tasks; do eval "$prep"; "$ACCORD" mirror -q --executor $ex "$src" "$dst" >/dev/null 2>&1; done
    for _ in $(seq "$RUNS"); do
        eval "$prep"; t0=$EPOCHREALTIME; "$ACCORD" mirror -q --executor walk "$src" "$dst" >/dev/null 2>&1; t1=$EPOCHREALTIME
        w+=("$(echo "$t1 - $t0" | bc)")
        eval "$prep"; t0=$EPOCHREALTIME; "$ACCORD" mirror -q --executor tasks "$src" "$dst" >/dev/null 2>&1; t1=$EPOCHREALTIME
        t+=("$(echo "$t1 - $t0" | bc)")
    done
    WALK=$(printf '%s\n' "${w[@]}" | median)
    TASKS=$(printf '%s\n' "${t[@]}" | median)
    eval "$prep"; WALK_KB=$(peak "$ACCORD" mirror -q --executor walk "$src" "$dst")
    eval "$prep"; TASKS_KB=$(peak "$ACCORD" mirror -q --executor tasks "$src" "$dst")
    printf '  walk   median %8.3f s  peak %7s KiB   runs: %s\n' "$WALK" "$WALK_KB" "${w[*]}"
    printf '  tasks  median %8.3f s  peak %7s KiB   runs: %s\n' "$TASKS" "$TASKS_KB" "${t[*]}"
    echo "  ratio tasks/walk  time $(ratio "$TASKS" "$WALK")   peak RSS $(ratio "$TASKS_KB" "$WALK_KB")"
}

echo "accord mirror executors on ext4 ($LOOP, $(nproc) cores), $RUNS timed runs after a warm-up, SCALE=$SCALE"
echo
echo "== 1. initial copy: $N1 files, $((B1 / 1024 / 1024)) MiB"
python3 bench/mirror/gentree.py "$MNT/t1" "$N1" "$B1" 1
sync
pair 'rm -rf "$MNT/c1"; sync' "$MNT/t1" "$MNT/c1"
rm -rf "$MNT/c1" "$MNT/t1"; sync

echo
echo "== 2. initial copy: 2 files of $((B2 / 1024 / 1024)) MiB"
mkdir -p "$MNT/t2"
for i in 1 2; do head -c "$B2" /dev/urandom >"$MNT/t2/big$i"; done
sync
pair 'rm -rf "$MNT/c2"; sync' "$MNT/t2" "$MNT/c2"
rm -rf "$MNT/c2" "$MNT/t2"; sync

echo
echo "== 3. no-change re-run: $N3 files"
python3 bench/mirror/gentree.py "$MNT/t3" "$N3" 0 2 2048
"$ACCORD" mirror -q "$MNT/t3" "$MNT/c3"
sync
pair ':' "$MNT/t3" "$MNT/c3"
