#!/usr/bin/env bash
# Where a metadata request's time goes in the daemon: its CPU time per create, cold stat and
# unlink (perf stat's task-clock of the daemon process, divided by the operations), for
# nullfs.c (the FUSE round trips alone), passfs.c (the round trips plus the system calls on a
# backing directory that any union must make) and accord, all pinned with the workload to
# CPU 0 over one tmpfs. CPU time counts the context switches a request costs the daemon too, and
# it moves much less with other load than wall time does, so this script gives usable figures on
# a shared machine where run.sh's floor rows do not. Rounds alternate the three file systems;
# the figures are medians.
#
# Every daemon runs in a session of its own, as accord's does (`accord union mount` starts it
# with setsid): with the kernel's autogroup scheduling (sched_autogroup_enabled), a session is
# a scheduling group, and a daemon in the workload's own session is scheduled as one group with
# it, which costs less per request than a daemon in another group (passfs: about 10 % more CPU
# per cold stat and 8 % per create on the 2-CPU test machine in a session of its own). The
# floors are measured as accord is run, not cheaper.
#
# usage: sudo bench/union/cpu.sh [path/to/accord]   (needs root, perf, gcc, libfuse3-dev)
# env:   N=5000 (files per operation)  ROUNDS=5
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ACCORD=${1:-${ACCORD_BIN:-$here/../../target/release/accord}}
N=${N:-5000}
ROUNDS=${ROUNDS:-5}
B=${BENCH_DIR:-/tmp/accord-union-cpu}

[ "$(id -u)" = 0 ] || { echo "run as root (tmpfs, drop_caches, perf on other processes)"; exit 2; }
[ -x "$ACCORD" ] || { echo "accord binary not found at $ACCORD"; exit 2; }
command -v perf >/dev/null || { echo "perf is needed (Debian: linux-perf)"; exit 2; }
mkdir -p "$B"
mountpoint -q "$B" || mount -t tmpfs -o size=2G tmpfs "$B"
cleanup() {
    for fs in nullfs passfs accord; do fusermount3 -u "$B/mnt-$fs" 2>/dev/null || true; done
    umount "$B" 2>/dev/null || umount -l "$B" || true
}
trap cleanup EXIT

flags=$(pkg-config fuse3 --cflags --libs)
gcc -O2 -o "$B/fsops" "$here/fsops.c"
gcc -O2 -o "$B/nullfs" "$here/nullfs.c" $flags
gcc -O2 -o "$B/passfs" "$here/passfs.c" $flags
mkdir -p "$B/backing" "$B/upper" "$B/lower" "$B/mnt-nullfs" "$B/mnt-passfs" "$B/mnt-accord"
setsid taskset -c 0 "$B/nullfs" "$B/mnt-nullfs" &
setsid taskset -c 0 "$B/passfs" "$B/backing" "$B/mnt-passfs" &
taskset -c 0 "$ACCORD" union mount "$B/mnt-accord" "$B/upper=rw" "$B/lower=ro"
for fs in nullfs passfs; do
    for _ in $(seq 50); do mountpoint -q "$B/mnt-$fs" && break; sleep 0.1; done
done
declare -A PID=([nullfs]=$(pgrep -f "^$B/nullfs") [passfs]=$(pgrep -f "^$B/passfs")
    [accord]=$(pgrep -f "union mount --foreground --notify-fd 3 $B/mnt-accord"))

# CPU milliseconds the daemon of $1 spends while the rest of the arguments runs.
daemon_ms() {
    perf stat -x, -e task-clock -p "${PID[$1]}" -- "${@:2}" 2>&1 >/dev/null |
        awk -F, '/task-clock/ {print $1}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $N files, $ROUNDS rounds"
declare -A MS
for _ in $(seq "$ROUNDS"); do
    for fs in nullfs passfs accord; do
        d=$B/mnt-$fs/rate
        mkdir "$d"
        sync
        MS[$fs.create]+=" $(daemon_ms "$fs" taskset -c 0 "$B/fsops" create "$d" "$N")"
        sync; echo 2 > /proc/sys/vm/drop_caches
        MS[$fs.stat]+=" $(daemon_ms "$fs" taskset -c 0 "$B/fsops" stat "$d" "$N")"
        MS[$fs.unlink]+=" $(daemon_ms "$fs" taskset -c 0 "$B/fsops" unlink "$d" "$N")"
        rmdir "$d"
    done
done

declare -A US
printf '%-8s' ""; for op in create stat unlink; do printf '%14s' "$op"; done; echo
for fs in nullfs passfs accord; do
    printf '%-8s' "$fs"
    for op in create stat unlink; do
        US[$fs.$op]=$(printf '%s\n' ${MS[$fs.$op]} | median | awk -v n="$N" '{printf "%.1f", $1 * 1000 / n}')
        printf '%14s' "${US[$fs.$op]} µs"
    done
    echo
done
echo "(daemon CPU per operation, median of $ROUNDS)"
for pair in "passfs nullfs" "accord passfs" "accord nullfs"; do
    set -- $pair
    printf '%-16s' "$1 - $2"
    for op in create stat unlink; do
        printf '%10s' "$(awk -v a="${US[$1.$op]}" -v b="${US[$2.$op]}" 'BEGIN {printf "%+.1f µs", a - b}')"
    done
    echo
done
