#!/usr/bin/env bash
# The pooled table: `accord union` as a pool against mergerfs, both over four writable
# branches (each its own tmpfs mount, so free space differs between branches as they fill, as
# on a pool of disks) with the same create policy, in one run. Rows: Postmark, a copy of a
# source tree into the pool (`cp -a`), a `find` over the copied tree after dropping the
# kernel's caches, a listing of it (`ls -lR`), and removing it (`rm -rf`); then creating,
# renaming and unlinking RATEN files in one directory (`fsops.c`). Each figure is the
# median of RUNS runs, the two file systems alternating; the script prints wall time and the
# daemon's CPU time (user + system of all its threads, from /proc: far less sensitive to
# other load on the machine than wall time), and the ratio accord / mergerfs of both.
#
# usage: sudo bench/union/pool.sh [path/to/accord]   (needs root, /dev/fuse, gcc, postmark,
#        mergerfs)
# env:   RUNS=3  PM_FILES=1000  PM_TX=5000  RATEN=10000  TREES=20 (copies of the C project
#        in the copied tree, 300 files each)  POLICY=mfs (create policy of both)
#        BRANCH_MB=2048 (size of each branch)  MIN_FREE=64M  PRIO= (nice value for the whole
#        run, as in run.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ACCORD=${1:-${ACCORD_BIN:-$here/../../target/release/accord}}
RUNS=${RUNS:-3}
PM_FILES=${PM_FILES:-1000}
PM_TX=${PM_TX:-5000}
RATEN=${RATEN:-10000}
TREES=${TREES:-20}
POLICY=${POLICY:-mfs}
BRANCH_MB=${BRANCH_MB:-2048}
MIN_FREE=${MIN_FREE:-64M}
B=${BENCH_DIR:-/tmp/accord-union-pool}
PRIO=${PRIO:-}
FS="mergerfs accord"

[ "$(id -u)" = 0 ] || { echo "run as root (tmpfs, drop_caches)"; exit 2; }
[ -x "$ACCORD" ] || { echo "accord binary not found at $ACCORD"; exit 2; }
command -v mergerfs >/dev/null || { echo "mergerfs is needed (Debian: mergerfs)"; exit 2; }
command -v postmark >/dev/null || { echo "postmark is needed (Debian: postmark)"; exit 2; }
[ -z "$PRIO" ] || renice -n "$PRIO" -p $$ >/dev/null
mkdir -p "$B"
mountpoint -q "$B" || mount -t tmpfs -o size=1G tmpfs "$B"
MOUNTS=()
cleanup() {
    local i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        m=${MOUNTS[$i]}
        fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    umount "$B" 2>/dev/null || umount -l "$B" || true
}
trap cleanup EXIT

now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# CPU nanoseconds all threads of process $1 have run so far.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'; }

gcc -O2 -o "$B/fsops" "$here/fsops.c"
echo "== $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), nice ${PRIO:-0}"
echo "== pool of 4 branches (${BRANCH_MB} MiB tmpfs each), category.create=$POLICY, minfreespace=$MIN_FREE"
"$here/gen-cproject.sh" "$B/proj" 150
mkdir -p "$B/tree"
for i in $(seq "$TREES"); do cp -a "$B/proj" "$B/tree/p$i"; done
rm -rf "$B/proj"
echo "== the copied tree: $(find "$B/tree" -type f | wc -l) files in $(find "$B/tree" -type d | wc -l) directories"

declare -A PID
for fs in $FS; do
    branches=()
    for i in 0 1 2 3; do
        d=$B/$fs-b$i
        mkdir -p "$d"
        mount -t tmpfs -o "size=${BRANCH_MB}M" tmpfs "$d"
        MOUNTS+=("$d")
        branches+=("$d")
    done
    M=$B/mnt-pool-$fs
    mkdir -p "$M"
    opts="category.create=$POLICY,minfreespace=$MIN_FREE"
    case $fs in
        mergerfs) mergerfs -o "allow_other,$opts" "$(IFS=:; echo "${branches[*]}")" "$M" ;;
        accord) "$ACCORD" union mount -o "$opts" "$M" "${branches[@]}" ;;
    esac
    MOUNTS+=("$M")
    for _ in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
    PID[$fs]=$(pgrep -o -f -- "$M( |\$)")
    [ -n "${PID[$fs]}" ] || { echo "no daemon found for $fs"; exit 1; }
done

declare -A S C
# Run the rest of the arguments against $1's pool as row $2: wall and daemon CPU microseconds.
sample() {
    local fs=$1 key=$2; shift 2
    local a b ca cb
    ca=$(cpu_ns "${PID[$fs]}"); a=$(now)
    "$@" >/dev/null 2>&1
    b=$(now); cb=$(cpu_ns "${PID[$fs]}")
    S[$fs.$key]="${S[$fs.$key]:-} $(( (b - a) / 1000 ))"
    C[$fs.$key]="${C[$fs.$key]:-} $(( (cb - ca) / 1000 ))"
}
postmark_run() {
    mkdir -p "$1/pm"
    printf 'set location %s\nset number %s\nset transactions %s\nset subdirectories 10\nrun\nquit\n' \
        "$1/pm" "$PM_FILES" "$PM_TX" > "$B/pm.cfg"
    postmark "$B/pm.cfg"
    rm -rf "$1/pm"
}
copy_tree() { cp -a "$B/tree" "$1/tree"; }
find_tree() { find "$1/tree" -printf '%s\n' | wc -l; }
list_tree() { ls -lR "$1/tree" | wc -l; }
remove_tree() { rm -rf "$1/tree"; }
fsops() { "$B/fsops" "$@"; }

for r in $(seq "$RUNS"); do
    echo "== run $r of $RUNS"
    # Alternate which file system goes first.
    rot=($FS); [ $((r % 2)) = 1 ] || rot=("${rot[1]}" "${rot[0]}")
    for fs in "${rot[@]}"; do sync; sample "$fs" postmark postmark_run "$B/mnt-pool-$fs"; done
    for fs in "${rot[@]}"; do
        M=$B/mnt-pool-$fs
        drop; sample "$fs" copy copy_tree "$M"
        drop; sample "$fs" find find_tree "$M"
        drop; sample "$fs" list list_tree "$M"
        sample "$fs" remove remove_tree "$M"
        mkdir "$M/rate"
        sync; sample "$fs" create fsops create "$M/rate" "$RATEN"
        sample "$fs" rename fsops rename "$M/rate" "$RATEN"
        sample "$fs" unlink fsops unlink "$M/rate" "$RATEN" g
        rmdir "$M/rate"
    done
done
echo "== branches of accord's pool after the runs (files per branch, should be empty):"
for i in 0 1 2 3; do printf '   b%d: %s' "$i" "$(find "$B/accord-b$i" -mindepth 1 | wc -l)"; done; echo

ROWS="postmark copy find list remove create rename unlink"
label() {
    case $1 in
        postmark) echo "postmark ($PM_TX tx)" ;;
        copy) echo "cp -a tree in" ;;
        find) echo "find (cold)" ;;
        list) echo "ls -lR (cold)" ;;
        remove) echo "rm -rf tree" ;;
        create) echo "create $RATEN" ;;
        rename) echo "rename $RATEN" ;;
        unlink) echo "unlink $RATEN" ;;
    esac
}
table() { # title array-name scale unit
    local title=$1 arr=$2 div=$3 unit=$4
    echo
    echo "== $title (median of $RUNS)"
    printf '%-22s%14s%14s%16s\n' "" mergerfs accord "accord/mergerfs"
    for k in $ROWS; do
        local -n A=$arr
        m=$(printf '%s\n' ${A[mergerfs.$k]} | median)
        a=$(printf '%s\n' ${A[accord.$k]} | median)
        printf '%-22s%14s%14s%16s\n' "$(label $k)" \
            "$(awk -v v="$m" -v d="$div" -v u="$unit" 'BEGIN{printf "%.3f %s", v/d, u}')" \
            "$(awk -v v="$a" -v d="$div" -v u="$unit" 'BEGIN{printf "%.3f %s", v/d, u}')" \
            "$(awk -v a="$a" -v m="$m" 'BEGIN{if (m > 0) printf "%.2fx", a/m; else print "-"}')"
    done
}
table "wall time" S 1000000 s
table "daemon CPU time (user + system, all threads)" C 1000 ms
echo "(below 1.00x: accord is ahead)"
echo "== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
