#!/bin/bash
# What FUSE over io_uring would give on this machine: create / stat (cold dentries) / unlink
# rates (fsops.c) on three null file systems that keep names and modes in memory and do
# nothing else, each with daemon and workload pinned to CPU 0 and unpinned:
#
#   nullfs  nullfs.c over libfuse 3.14 (one thread reading /dev/fuse), the floor of run.sh;
#   rw      nullfs_uring.c serving by read/write on /dev/fuse (one thread);
#   ring    nullfs_uring.c serving over FUSE io_uring queues (one thread per CPU).
#
# rw and ring run the same request handling and differ only in the transport. Rounds
# alternate (the order of the six mounts is shuffled every round); the script prints the
# median time per operation and the ratios ring / rw and rw / nullfs.
#
# The ring needs the fuse module's `enable_uring` parameter on: the script saves it, switches
# it on and puts the saved value back when it exits, whatever the exit.
#
# usage: sudo bench/union/uring.sh   (needs root, /dev/fuse, gcc, liburing-dev, libfuse3-dev,
#                                     pkg-config; Linux 6.14 or later built with FUSE io_uring)
# env:   N=5000 (files per operation)  ROUNDS=7  DEPTH=8 (ring entries per queue)
#        TASKRUN=signal|coop|defer (how io_uring hands a request to a queue's thread; see
#        nullfs_uring.c)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
N=${N:-5000}
ROUNDS=${ROUNDS:-7}
DEPTH=${DEPTH:-8}
TASKRUN=${TASKRUN:-signal}
B=${BENCH_DIR:-/tmp/accord-uring-bench}
PARAM=/sys/module/fuse/parameters/enable_uring

[ "$(id -u)" = 0 ] || { echo "run as root (mount, drop_caches, $PARAM)"; exit 2; }
[ -e "$PARAM" ] || { echo "$PARAM missing: this kernel has no FUSE over io_uring (6.14+, CONFIG_FUSE_IO_URING)"; exit 2; }
[ -w "$PARAM" ] || { echo "$PARAM is not writable"; exit 2; }
[ -c /dev/fuse ] || { echo "no /dev/fuse"; exit 2; }

saved=$(cat "$PARAM")
MOUNTS=()
PIDS=()
cleanup() {
    set +e
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    [ -f "$B/daemons.log" ] && cat "$B/daemons.log"
    umount "$B" 2>/dev/null || umount -l "$B" 2>/dev/null
    echo "$saved" > "$PARAM"
    echo "== $PARAM restored to $(cat "$PARAM") (was $saved)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$B"
mountpoint -q "$B" || mount -t tmpfs -o size=1G tmpfs "$B"
gcc -O2 -o "$B/fsops" "$here/fsops.c"
gcc -O2 -o "$B/nullfs" "$here/nullfs.c" $(pkg-config fuse3 --cflags --libs)
gcc -O2 -pthread -o "$B/nullfs_uring" "$here/nullfs_uring.c" -luring
: > "$B/daemons.log"

echo Y > "$PARAM"
echo "== $(nproc) CPUs, kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $PARAM: was $saved, now $(cat "$PARAM"); $ROUNDS rounds of $N files, ring depth $DEPTH, task work $TASKRUN"

declare -A PID
CONFIGS="nullfs-pinned rw-pinned ring-pinned nullfs-unpinned rw-unpinned ring-unpinned"
for c in $CONFIGS; do
    M=$B/mnt-$c; mkdir -p "$M"
    pin=(); case $c in *-pinned) pin=(taskset -c 0) ;; esac
    case $c in
        nullfs-*) "${pin[@]}" "$B/nullfs" "$M" 2>>"$B/daemons.log" & ;;
        rw-*) "${pin[@]}" "$B/nullfs_uring" rw "$M" 2>>"$B/daemons.log" & ;;
        ring-*) "${pin[@]}" "$B/nullfs_uring" ring "$M" "$DEPTH" "$TASKRUN" 2>>"$B/daemons.log" & ;;
    esac
    PIDS+=($!)
    PID[$c]=$!
    for _ in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done
    mountpoint -q "$M" || { echo "$c did not mount"; exit 1; }
    MOUNTS+=("$M")
    stat "$M" >/dev/null # waits for INIT (and, for the ring, the queues' registration)
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
# context switches of all the daemon's threads so far
switches() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {n += $2} END {print n}'; }
declare -A T S
for r in $(seq "$ROUNDS"); do
    for c in $(printf '%s\n' $CONFIGS | shuf); do
        M=$B/mnt-$c
        pin=(); case $c in *-pinned) pin=(taskset -c 0) ;; esac
        mkdir "$M/rate"
        for op in create stat unlink; do
            case $op in create) sync ;; stat) drop ;; esac
            a=$(switches "${PID[$c]}")
            T[$c.$op]="${T[$c.$op]:-} $("${pin[@]}" "$B/fsops" $op "$M/rate" "$N")"
            S[$c.$op]="${S[$c.$op]:-} $(( $(switches "${PID[$c]}") - a ))"
        done
        rmdir "$M/rate"
    done
    echo "   round $r done, load average $(cut -d' ' -f1-3 /proc/loadavg)"
done

us() { printf '%s\n' ${T[$1]} | median | awk -v n="$N" '{printf "%.1f", $1 / n / 1000}'; }
echo
echo "== microseconds per operation (median of $ROUNDS rounds; every round below)"
printf '%-16s %10s %10s %10s\n' "" create stat unlink
for c in $CONFIGS; do
    printf '%-16s' "$c"
    for op in create stat unlink; do printf ' %10s' "$(us "$c.$op")"; done
    echo
done
for c in $CONFIGS; do
    for op in create stat unlink; do
        echo "   $c $op: $(printf '%s\n' ${T[$c.$op]} | awk -v n="$N" '{printf "%.1f ", $1 / n / 1000}')"
    done
done
echo
echo "== the daemon's context switches per operation (median of $ROUNDS rounds)"
printf '%-16s %10s %10s %10s\n' "" create stat unlink
for c in $CONFIGS; do
    printf '%-16s' "$c"
    for op in create stat unlink; do
        printf ' %10s' "$(printf '%s\n' ${S[$c.$op]} | median | awk -v n="$N" '{printf "%.2f", $1 / n}')"
    done
    echo
done
echo
echo "== ratios of the medians (below 1.00: the first is faster)"
printf '%-28s %8s %8s %8s\n' "" create stat unlink
for p in pinned unpinned; do
    for pair in "ring rw" "rw nullfs" "ring nullfs"; do
        set -- $pair
        printf '%-28s' "$1 / $2 ($p)"
        for op in create stat unlink; do
            printf ' %8s' "$(awk -v a="$(us "$1-$p.$op")" -v b="$(us "$2-$p.$op")" 'BEGIN{printf "%.2f", a / b}')"
        done
        echo
    done
done
for p in pinned unpinned; do
    x=$(awk -v a="$(us "ring-$p.create")" -v b="$(us "rw-$p.create")" 'BEGIN{printf "%.0f", 100 * (1 - a / b)}')
    echo "== $p: the ring saves $x% of a create against the same daemon on /dev/fuse (threshold 20%)"
done
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== requests each daemon served (printed at unmount):"
