#!/usr/bin/env bash
# Peak memory of `accord mirror` and `rsync -aHAXS` mirroring a real tree of
# this system (default /usr) into a fresh ext4 loop image, in one run:
# initial copy, then a run with nothing to do, each tool into its own copy.
# Peak RSS is GNU time's %M: the largest of the process and the children it
# waited for, so for rsync its largest process (generator, receiver or
# sender), as for accord its one process.
#
#   bench/mirror/memory.sh                 mirror /usr (root needed)
#   TREE=/usr/share bench/mirror/memory.sh a smaller tree
#   ACCORD=path/to/accord                  binary (default target/release/accord)
#   RUNS=3                                 no-change runs per tool (median)
#
# Both tools copy hard links, ACLs, extended attributes and sparse files
# (accord does by default; rsync with -HAXS).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TREE=${TREE:-/usr}
RUNS=${RUNS:-3}
ACCORD=${ACCORD:-$ROOT/target/release/accord}
WORK=${WORK:-/tmp/accord-memory-bench}
IMG=$WORK/fs.img
MNT=$WORK/mnt
export ACCORD_STATE_DIR=$WORK/state

[ "$(id -u)" = 0 ] || { echo "run as root (loop mount, reading all of $TREE)" >&2; exit 1; }
for t in rsync /usr/bin/time mkfs.ext4; do
    command -v "$t" >/dev/null || { echo "$t missing" >&2; exit 1; }
done
[ -x "$ACCORD" ] || cargo build --release --bin accord

cleanup() {
    set +e
    mountpoint -q "$MNT" && umount "$MNT"
    rm -f "$IMG"
}
trap cleanup EXIT
mkdir -p "$WORK" "$MNT"
mountpoint -q "$MNT" && umount "$MNT"
rm -rf "$ACCORD_STATE_DIR" "$IMG"
# Room for two copies of the tree, and inodes for them.
read -r bytes < <(du -sxb "$TREE" | cut -f1)
entries=$(find "$TREE" -xdev | wc -l)
truncate -s $(( bytes * 5 / 2 / 1024 / 1024 + 2048 ))M "$IMG"
mkfs.ext4 -q -F -N $(( entries * 5 / 2 + 100000 )) -E lazy_itable_init=0,lazy_journal_init=0 "$IMG"
mount -o loop "$IMG" "$MNT"

# peak_kib CMD...: peak RSS in KiB of one run (its output discarded).
peak_kib() {
    /usr/bin/time -f '%M' -o "$WORK/rss" "$@" >/dev/null 2>"$WORK/err" || {
        echo "failed: $* (exit $?)" >&2
        tail -5 "$WORK/err" >&2
        exit 1
    }
    tail -n 1 "$WORK/rss"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mb() { awk -v k="$1" 'BEGIN {printf "%.1f MB", k * 1024 / 1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; }

echo "== $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== $TREE: $entries entries, $((bytes / 1000000)) MB; $(rsync --version | head -1)"
# A tool's source is read through the page cache, as a nightly job finds it.
find "$TREE" -xdev >/dev/null
a_init=$(peak_kib "$ACCORD" mirror "$TREE/" "$MNT/accord/")
r_init=$(peak_kib rsync -aHAXS "$TREE/" "$MNT/rsync/")
a_same=() r_same=()
for _ in $(seq "$RUNS"); do
    a_same+=("$(peak_kib "$ACCORD" mirror "$TREE/" "$MNT/accord/")")
    r_same+=("$(peak_kib rsync -aHAXS "$TREE/" "$MNT/rsync/")")
done
a_same=$(printf '%s\n' "${a_same[@]}" | median)
r_same=$(printf '%s\n' "${r_same[@]}" | median)
printf '%-22s %14s %14s %8s\n' "peak RSS" "accord" "rsync -aHAXS" "ratio"
printf '%-22s %14s %14s %8s\n' "initial copy" "$(mb "$a_init")" "$(mb "$r_init")" "$(ratio "$a_init" "$r_init")"
printf '%-22s %14s %14s %8s\n' "nothing to do (median)" "$(mb "$a_same")" "$(mb "$r_same")" "$(ratio "$a_same" "$r_same")"
