#!/usr/bin/env bash
# Union file system benchmarks, side by side in one run: a plain directory, kernel overlayfs,
# fuse-overlayfs, unionfs-fuse, mergerfs and `accord union`, all over the same lower branch on a
# private tmpfs (so the disk does not dominate). Each figure is the median of RUNS runs; the
# tables print absolute numbers and the ratio to kernel overlayfs and to accord.
#
# usage: sudo bench/union/run.sh [path/to/accord]     (needs root, /dev/fuse, gcc, postmark,
#        libfuse3-dev and pkg-config for the floor)
# env:   RUNS=3  STATN=100000  RATEN=10000  READMB=1024  PM_FILES=1000  PM_TX=5000
#        BRANCHES="1 200 1000"  ONLY="plain overlayfs ..." (subset of file systems)  FLOOR=0
#        PRIO=-10 (nice value for the whole run: every daemon and workload inherits it, so
#        other load on a shared machine disturbs the figures less; all file systems alike)
#        ACCORD_OPTS= (mount options of accord's mounts, e.g. readdirplus=off)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ACCORD=${1:-${ACCORD_BIN:-$here/../../target/release/accord}}
RUNS=${RUNS:-3}
STATN=${STATN:-100000}
RATEN=${RATEN:-10000}
READMB=${READMB:-1024}
PM_FILES=${PM_FILES:-1000}
PM_TX=${PM_TX:-5000}
BRANCHES=${BRANCHES:-"1 200 1000"}
ALL="plain overlayfs fuse-overlayfs unionfs-fuse mergerfs accord"
ONLY=${ONLY:-$ALL}
B=${BENCH_DIR:-/tmp/accord-union-bench}
PRIO=${PRIO:-}
ACCORD_OPTS=${ACCORD_OPTS:-}
aopts=(); [ -z "$ACCORD_OPTS" ] || aopts=(-o "$ACCORD_OPTS")

[ "$(id -u)" = 0 ] || { echo "run as root (overlayfs, tmpfs, drop_caches)"; exit 2; }
[ -x "$ACCORD" ] || { echo "accord binary not found at $ACCORD"; exit 2; }
[ -z "$PRIO" ] || renice -n "$PRIO" -p $$ >/dev/null
mkdir -p "$B"
mountpoint -q "$B" || mount -t tmpfs -o size=8G tmpfs "$B"
MOUNTS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    umount "$B" 2>/dev/null || umount -l "$B" || true
}
trap cleanup EXIT

gcc -O2 -o "$B/fsops" "$here/fsops.c"
now() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

echo "== $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), nice ${PRIO:-0}"
echo "== preparing the lower branch on tmpfs ($STATN files, ${READMB} MiB file, C project)"
L=$B/lower
mkdir -p "$L/stat" "$L/pm"
(
    cd "$L/stat"
    d=0
    while [ $((d * 1000)) -lt "$STATN" ]; do
        mkdir -p "d$d"
        "$B/fsops" create "d$d" 1000 >/dev/null
        d=$((d + 1))
    done
)
dd if=/dev/urandom of="$L/big" bs=1M count="$READMB" status=none
"$here/gen-cproject.sh" "$B/proj" 150 && tar -C "$B" -cf "$L/proj.tar" proj && rm -rf "$B/proj"

mount_fs() { # name upper work mnt
    local fs=$1 U=$2 W=$3 M=$4
    mkdir -p "$U" "$W" "$M"
    case $fs in
        plain) rm -rf "$M"; cp -a "$L" "$M" ;;
        overlayfs) mount -t overlay overlay -o "lowerdir=$L,upperdir=$U,workdir=$W" "$M" ;;
        fuse-overlayfs) fuse-overlayfs -o "lowerdir=$L,upperdir=$U,workdir=$W" "$M" ;;
        unionfs-fuse) unionfs-fuse -o cow,allow_other "$U=RW:$L=RO" "$M" ;;
        mergerfs) mergerfs -o allow_other,category.create=ff "$U=RW:$L=RO" "$M" ;;
        accord) "$ACCORD" union mount "${aopts[@]}" "$M" "$U=rw" "$L=ro" ;;
    esac
    [ "$fs" = plain ] || MOUNTS+=("$M")
}
umount_fs() {
    local fs=$1 M=$2
    case $fs in
        plain) ;;
        overlayfs) umount "$M" ;;
        *) fusermount3 -u "$M" ;;
    esac
}

declare -A R
declare -A S   # all samples per key, space separated
sample() { # key prep command...  -> appends microseconds to S[key]
    local key=$1 prep=$2; shift 2
    $prep
    local a b; a=$(now); "$@" >/dev/null 2>&1; b=$(now)
    S[$key]="${S[$key]:-} $(( (b - a) / 1000 ))"
}

stat_tree() { find "$1/stat" -printf '%s\n' | wc -l; }
warm_lower() { drop; cat "$L/big" >/dev/null; }
read_big() { dd if="$1/big" of=/dev/null bs=1M status=none; }
rate() { # op mnt -> microseconds for RATEN ops
    local op=$1 M=$2 ns
    ns=$("$B/fsops" "$op" "$M/rate" "$RATEN")
    echo $((ns / 1000))
}
postmark_run() {
    mkdir -p "$1/pm/run"
    printf 'set location %s\nset number %s\nset transactions %s\nset subdirectories 10\nrun\nquit\n' \
        "$1/pm/run" "$PM_FILES" "$PM_TX" > "$B/pm.cfg"
    postmark "$B/pm.cfg"
    rm -rf "$1/pm/run"
}
build_run() {
    rm -rf "$1/build"; mkdir -p "$1/build"
    tar -C "$1/build" -xf "$1/proj.tar" && make -s -j2 -C "$1/build/proj" && rm -rf "$1/build"
}

# All file systems are mounted at once and every run visits them in turn (in a rotating
# order), so a burst of load from elsewhere on the machine hits them alike.
for fs in $ONLY; do
    rm -rf "$B/upper-$fs" "$B/work-$fs"
    mount_fs "$fs" "$B/upper-$fs" "$B/work-$fs" "$B/mnt-$fs"
done
order=($ONLY)
for r in $(seq "$RUNS"); do
    echo "== run $r of $RUNS"
    rot=("${order[@]:$(( (r - 1) % ${#order[@]} ))}" "${order[@]:0:$(( (r - 1) % ${#order[@]} ))}")
    for fs in "${rot[@]}"; do sample "$fs.stat" drop stat_tree "$B/mnt-$fs"; done
    for fs in "${rot[@]}"; do sample "$fs.read" warm_lower read_big "$B/mnt-$fs"; done
    for fs in "${rot[@]}"; do
        M=$B/mnt-$fs
        mkdir -p "$M/rate"
        sync; S[$fs.create]="${S[$fs.create]:-} $(rate create "$M")"
        drop; S[$fs.statrate]="${S[$fs.statrate]:-} $(rate stat "$M")"
        S[$fs.unlink]="${S[$fs.unlink]:-} $(rate unlink "$M")"
        rmdir "$M/rate"
    done
    for fs in "${rot[@]}"; do sample "$fs.postmark" sync postmark_run "$B/mnt-$fs"; done
    for fs in "${rot[@]}"; do sample "$fs.build" sync build_run "$B/mnt-$fs"; done
done
for fs in $ONLY; do umount_fs "$fs" "$B/mnt-$fs"; done
for k in "${!S[@]}"; do R[$k]=$(printf '%s\n' ${S[$k]} | median); done

fmt_row() { # label key unit kind(time|rate n)
    local label=$1 key=$2 kind=$3 n=${4:-1}
    printf '%-26s' "$label"
    for fs in $ONLY; do
        local v=${R[$fs.$key]:-}
        if [ -z "$v" ]; then printf '%16s' "-"; continue; fi
        if [ "$kind" = rate ]; then
            printf '%16s' "$(awk -v n="$n" -v us="$v" 'BEGIN{printf "%.0f/s", n/(us/1e6)}')"
        elif [ "$kind" = mbs ]; then
            printf '%16s' "$(awk -v n="$n" -v us="$v" 'BEGIN{printf "%.0f MB/s", n/(us/1e6)}')"
        else
            printf '%16s' "$(awk -v us="$v" 'BEGIN{printf "%.2f s", us/1e6}')"
        fi
    done
    echo
}
ratio_row() { # label key base
    local label=$1 key=$2 base=$3
    printf '%-26s' "$label"
    local b=${R[$base.$key]:-}
    for fs in $ONLY; do
        local v=${R[$fs.$key]:-}
        if [ -z "$v" ] || [ -z "$b" ]; then printf '%16s' "-"; continue; fi
        printf '%16s' "$(awk -v v="$v" -v b="$b" 'BEGIN{printf "%.2fx", v/b}')"
    done
    echo
}

echo
echo "== results (median of $RUNS; lower branch on tmpfs)"
printf '%-26s' ""; for fs in $ONLY; do printf '%16s' "$fs"; done; echo
fmt_row "postmark ($PM_TX tx)" postmark time
fmt_row "build (untar+make -j2)" build time
fmt_row "stat $STATN files (find)" stat time
fmt_row "create" create rate "$RATEN"
fmt_row "stat (cold dentries)" statrate rate "$RATEN"
fmt_row "unlink" unlink rate "$RATEN"
fmt_row "read ${READMB} MiB" read mbs "$((READMB * 1048576 / 1000000))"
echo
echo "== time relative to kernel overlayfs (lower is better; 1.00x = overlayfs)"
for k in postmark build stat create statrate unlink read; do ratio_row "$k" "$k" overlayfs; done
echo
echo "== time relative to accord union (above 1.00x = slower than accord)"
for k in postmark build stat create statrate unlink read; do ratio_row "$k" "$k" accord; done

# ---- the floor of FUSE on this machine: create / stat / unlink with the daemon and the
# workload pinned to one CPU (no wake-up of another CPU: the cheapest path a FUSE request
# has), for kernel overlayfs, a null FUSE file system (nullfs.c: names and modes in memory,
# nothing else, mounted with accord's options), passfs.c (nullfs plus the system calls on a
# backing directory that any union must make) and accord. What nullfs costs over overlayfs is
# the price of the FUSE round trips themselves, which no FUSE daemon can go below; what passfs
# costs over nullfs is the branch file system's own work.
if [ "${FLOOR:-1}" = 1 ]; then
    echo
    echo "== floor: daemon and workload on CPU 0 (median of $RUNS; operations per second)"
    gcc -O2 -o "$B/nullfs" "$here/nullfs.c" $(pkg-config fuse3 --cflags --libs)
    gcc -O2 -o "$B/passfs" "$here/passfs.c" $(pkg-config fuse3 --cflags --libs)
    F=$B/floor
    mkdir -p "$F/lower" "$F/upper-ovl" "$F/work-ovl" "$F/upper-acc" "$F/backing-pass"
    floor_fs="overlayfs nullfs passfs accord"
    for fs in $floor_fs; do
        M=$F/mnt-$fs; mkdir -p "$M"
        case $fs in
            overlayfs) mount -t overlay overlay -o "lowerdir=$F/lower,upperdir=$F/upper-ovl,workdir=$F/work-ovl" "$M" ;;
            # (Each in a session of its own, as accord's daemon is: see cpu.sh.)
            nullfs) setsid taskset -c 0 "$B/nullfs" "$M" & for _ in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done ;;
            passfs) setsid taskset -c 0 "$B/passfs" "$F/backing-pass" "$M" & for _ in $(seq 50); do mountpoint -q "$M" && break; sleep 0.1; done ;;
            accord) taskset -c 0 "$ACCORD" union mount "${aopts[@]}" "$M" "$F/upper-acc=rw" "$F/lower=ro" ;;
        esac
        MOUNTS+=("$M")
    done
    declare -A FS_
    for r in $(seq "$RUNS"); do
        for fs in $floor_fs; do
            M=$F/mnt-$fs; mkdir -p "$M/rate"
            sync; FS_[$fs.create]="${FS_[$fs.create]:-} $(taskset -c 0 "$B/fsops" create "$M/rate" "$RATEN")"
            drop; FS_[$fs.stat]="${FS_[$fs.stat]:-} $(taskset -c 0 "$B/fsops" stat "$M/rate" "$RATEN")"
            FS_[$fs.unlink]="${FS_[$fs.unlink]:-} $(taskset -c 0 "$B/fsops" unlink "$M/rate" "$RATEN")"
            rmdir "$M/rate"
        done
    done
    for fs in $floor_fs; do
        case $fs in overlayfs) umount "$F/mnt-$fs" ;; *) fusermount3 -u "$F/mnt-$fs" ;; esac
    done
    printf '%-10s' ""; for op in create stat unlink; do printf '%22s' "$op"; done; echo
    for fs in $floor_fs; do
        printf '%-10s' "$fs"
        for op in create stat unlink; do
            v=$(printf '%s\n' ${FS_[$fs.$op]} | median); o=$(printf '%s\n' ${FS_[overlayfs.$op]} | median)
            printf '%22s' "$(awk -v n="$RATEN" -v v="$v" -v o="$o" 'BEGIN{printf "%.0f/s (%.2fx)", n/(v/1e9), v/o}')"
        done
        echo
    done
    echo "(in brackets: time relative to overlayfs on the same CPU)"
    for base in nullfs passfs; do
        printf '%-10s' "/$base"
        for op in create stat unlink; do
            v=$(printf '%s\n' ${FS_[accord.$op]} | median); o=$(printf '%s\n' ${FS_[$base.$op]} | median)
            printf '%22s' "$(awk -v v="$v" -v o="$o" 'BEGIN{printf "%.2fx", v/o}')"
        done
        echo
    done
    echo "(accord's time relative to nullfs, the FUSE round trips alone, and to passfs, the"
    echo " round trips plus the branch's own system calls)"
fi

# ---- many branches: accord (and the FUSE peers that take a branch list) with 1, 200, 1000
# branches. A directory `d` of 1000 files spread round-robin over the branches (so it is held
# by every branch up to 1000), plus one private file per branch at the top. Lookup = lstat of
# the 1000 files after dropping the kernel's dentries; readdir = listing `d`; cold = after the
# union's 1 s cache expired (accord must re-read the directory in every branch).
echo
echo "== many branches (median of 5; microseconds per operation)"
printf '%-14s %8s %14s %14s %14s\n' "fs" "branches" "lookup" "readdir" "cold lookup"
for fs in accord unionfs-fuse mergerfs; do
    case " $ONLY " in *" $fs "*) ;; *) continue ;; esac
    for n in $BRANCHES; do
        root=$B/many-$n
        if [ ! -d "$root" ]; then
            mkdir -p "$root"
            for i in $(seq 0 $((n - 1))); do mkdir -p "$root/b$i/d"; : > "$root/b$i/own$i"; done
            for j in $(seq 0 999); do : > "$root/b$((j % n))/d/f$j"; done
        fi
        M=$B/mnt-many-$fs
        mkdir -p "$M"
        spec=()
        case $fs in
            accord)
                spec=("$root/b0=rw"); for i in $(seq 1 $((n - 1))); do spec+=("$root/b$i=ro"); done
                "$ACCORD" union mount "${aopts[@]}" "$M" "${spec[@]}" ;;
            unionfs-fuse|mergerfs)
                s="$root/b0=RW"; for i in $(seq 1 $((n - 1))); do s="$s:$root/b$i=RO"; done
                if [ $fs = unionfs-fuse ]; then unionfs-fuse -o cow "$s" "$M"; else mergerfs -o category.create=ff "$s" "$M"; fi ;;
        esac
        MOUNTS+=("$M")
        ls "$M/d" >/dev/null
        lk=(); rd=(); cl=()
        for _ in 1 2 3 4 5; do
            echo 2 > /proc/sys/vm/drop_caches
            lk+=("$("$B/fsops" stat "$M/d" 1000)")
            a=$(now); ls -f "$M/d" >/dev/null; b=$(now); rd+=("$((b - a))")
            sleep 1.2; echo 2 > /proc/sys/vm/drop_caches
            cl+=("$("$B/fsops" stat "$M/d" 1000)")
        done
        fusermount3 -u "$M"
        l=$(printf '%s\n' "${lk[@]}" | median); r=$(printf '%s\n' "${rd[@]}" | median); c=$(printf '%s\n' "${cl[@]}" | median)
        printf '%-14s %8s %14.1f %14.1f %14.1f\n' "$fs" "$n" "$(echo "$l/1000000" | bc -l)" "$(echo "$r/1000" | bc -l)" "$(echo "$c/1000000" | bc -l)"
        R[many.$fs.$n]="$l $r $c"
    done
done
echo "(lookup and cold lookup: per file; readdir: per listing of 1000 names)"
echo "== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
