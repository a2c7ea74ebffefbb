#!/usr/bin/env bash
# Benchmarks of `accord mirror` side by side with rsync and cp, in one run,
# on a fresh ext4 loop image (root needed). Prints medians and ratios.
#
#   bench/mirror/run.sh            full size (about 10-15 minutes)
#   SCALE=0.1 bench/mirror/run.sh  a tenth of the files and bytes (smoke)
#   RUNS=5 ...                     timed runs per tool (default 3, after one warm-up)
#   ACCORD=path/to/accord          binary (default target/release/accord)
#
# 1. initial copy of ~50,000 files (mixed sizes, ~2 GiB): accord vs rsync -a vs cp -a
#    (accord with its default durability -- a syncfs per commit batch -- and with
#    --no-fsync; cp and rsync do not sync at all, so `rsync -a; sync` and
#    `cp -a; sync` are shown too: the time until the copy is on disk; and
#    `rsync -a --fsync`, rsync's own durable mode, one fsync per file)
# 2. no-change re-run on ~200,000 files: accord vs rsync -a
# 3. 1 GiB file with 0.1% changed: accord --inplace vs rsync --inplace --no-whole-file,
#    time and bytes written to the device (sectors from /sys/block/loopN/stat)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SCALE=${SCALE:-1}
RUNS=${RUNS:-3}
ACCORD=${ACCORD:-$ROOT/target/release/accord}
WORK=${WORK:-/tmp/accord-mirror-bench}
IMG=$WORK/fs.img
MNT=$WORK/mnt
# accord's state (deletion guard, xattr memo) for this benchmark only: the
# warm-up run fills it and the timed runs use it, as a nightly job would.
export ACCORD_STATE_DIR=$WORK/state
rm -rf "$ACCORD_STATE_DIR"

[ "$(id -u)" = 0 ] || { echo "run as root (loop mount)" >&2; exit 1; }
command -v rsync >/dev/null || { echo "rsync missing" >&2; exit 1; }
if [ ! -x "$ACCORD" ]; then
    cargo build --release --bin accord
fi

num() { python3 -c "print(int($1 * $SCALE))"; }
N1=$(num 50000); B1=$(num 2*1024**3); N2=$(num 200000); B3=$(num 1024**3)

cleanup() {
    set +e
    mountpoint -q "$MNT" && umount "$MNT"
    [ -n "${LOOP:-}" ] && losetup -d "$LOOP"
}
trap cleanup EXIT
mkdir -p "$WORK" "$MNT"
mountpoint -q "$MNT" && umount "$MNT"
rm -f "$IMG"
truncate -s $(( (B1 * 3 + B3 * 4) / 1024 / 1024 + 4096 ))M "$IMG"
mkfs.ext4 -q -F -N $(( N1 * 3 + N2 * 3 + 100000 )) -E lazy_itable_init=0,lazy_journal_init=0 "$IMG"
LOOP=$(losetup -f --show "$IMG")
mount "$LOOP" "$MNT"
DEV=$(basename "$LOOP")
sectors() { sync; awk '{print $7}' "/sys/block/$DEV/stat"; }

median() { sort -g | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%.3f\n", m}'; }
# rounds PREP NAME CMD [NAME CMD ...]: one warm-up of each command, then
# RUNS rounds that run every command once in turn (so a load that comes and
# goes hits all alike); PREP runs untimed before each. Medians go to MED.
declare -A MED
rounds() {
    local prep=$1 t0 t1 i name
    shift
    local -a names=() cmds=()
    while [ $# -gt 0 ]; do names+=("$1"); cmds+=("$2"); shift 2; done
    declare -A times=()
    for i in "${!cmds[@]}"; do eval "$prep"; eval "${cmds[$i]}" >/dev/null; done
    for _ in $(seq "$RUNS"); do
        for i in "${!cmds[@]}"; do
            eval "$prep"
            t0=$(date +%s.%N); eval "${cmds[$i]}" >/dev/null; t1=$(date +%s.%N)
            times[$i]+="$(echo "$t1 - $t0" | bc) "
        done
    done
    for i in "${!cmds[@]}"; do
        name=${names[$i]}
        MED[$name]=$(printf '%s\n' ${times[$i]} | median)
        printf '  %-34s median %8.3f s   runs: %s\n' "$name" "${MED[$name]}" "${times[$i]}"
    done
}
ratio() { echo "scale=3; $1 / $2" | bc; }

echo "accord mirror benchmarks on ext4 ($LOOP, $(nproc) cores), $RUNS timed runs after a warm-up, SCALE=$SCALE"
echo
echo "== 1. initial copy: $N1 files, $((B1 / 1024 / 1024)) MiB"
python3 bench/mirror/gentree.py "$MNT/t1" "$N1" "$B1" 1
sync
echo "  tree: $(find "$MNT/t1" -type f | wc -l) files, $(du -sm "$MNT/t1" | cut -f1) MiB"
CLEAN='rm -rf "$MNT/c1"; sync'
rounds "$CLEAN" \
    "accord mirror" '"$ACCORD" mirror -q "$MNT/t1" "$MNT/c1"' \
    "accord mirror --no-fsync" '"$ACCORD" mirror -q --no-fsync "$MNT/t1" "$MNT/c1"' \
    "rsync -a" 'rsync -a "$MNT/t1/" "$MNT/c1/"' \
    "rsync -a; sync" 'rsync -a "$MNT/t1/" "$MNT/c1/"; sync' \
    "rsync -a --fsync" 'rsync -a --fsync "$MNT/t1/" "$MNT/c1/"' \
    "cp -a" 'cp -a "$MNT/t1" "$MNT/c1"' \
    "cp -a; sync" 'cp -a "$MNT/t1" "$MNT/c1"; sync'
echo "  ratio accord/rsync -a           $(ratio "${MED[accord mirror]}" "${MED[rsync -a]}")   (target <= 0.5)"
echo "  ratio accord/cp -a              $(ratio "${MED[accord mirror]}" "${MED[cp -a]}")   (target <= 1.0)"
echo "  ratio accord/(rsync -a; sync)   $(ratio "${MED[accord mirror]}" "${MED[rsync -a; sync]}")   (both durable at the end)"
echo "  ratio accord/rsync -a --fsync   $(ratio "${MED[accord mirror]}" "${MED[rsync -a --fsync]}")   (rsync's own durable mode)"
echo "  ratio accord/(cp -a; sync)      $(ratio "${MED[accord mirror]}" "${MED[cp -a; sync]}")"
echo "  ratio accord --no-fsync/rsync   $(ratio "${MED[accord mirror --no-fsync]}" "${MED[rsync -a]}")"
echo "  ratio accord --no-fsync/cp -a   $(ratio "${MED[accord mirror --no-fsync]}" "${MED[cp -a]}")   (target <= 0.8)"
rm -rf "$MNT/c1" "$MNT/t1"; sync

echo
echo "== 2. no-change re-run: $N2 files"
python3 bench/mirror/gentree.py "$MNT/t2" "$N2" 0 2 2048
"$ACCORD" mirror -q "$MNT/t2" "$MNT/a2"
rsync -a "$MNT/t2/" "$MNT/r2/"
sync
echo "  tree: $(find "$MNT/t2" | wc -l) entries"
# accord keeps xattrs and ACLs by default, rsync -a does not: both are shown
# with and without them. rsync -a also never lists DST's directories (it does
# not delete); --delete makes it do the same work as a mirror.
rounds ':' \
    "accord mirror (nothing to do)" '"$ACCORD" mirror -q "$MNT/t2" "$MNT/a2"' \
    "rsync -a (nothing to do)" 'rsync -a "$MNT/t2/" "$MNT/r2/"' \
    "rsync -a --delete (nothing to do)" 'rsync -a --delete "$MNT/t2/" "$MNT/r2/"' \
    "accord --no-xattrs --no-acls" '"$ACCORD" mirror -q --no-xattrs --no-acls "$MNT/t2" "$MNT/a2"' \
    "rsync -aHAXS (nothing to do)" 'rsync -aHAXS "$MNT/t2/" "$MNT/r2/"'
echo "  accord phases (one more run): $("$ACCORD" mirror --json "$MNT/t2" "$MNT/a2" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(f"{k}={d[k]:.3f}" for k in ("scan_s","plan_s","execute_s","elapsed_s")))')"
echo "  ratio accord/rsync -a           $(ratio "${MED[accord mirror (nothing to do)]}" "${MED[rsync -a (nothing to do)]}")   (target <= 0.5)"
echo "  ratio accord/rsync -a --delete  $(ratio "${MED[accord mirror (nothing to do)]}" "${MED[rsync -a --delete (nothing to do)]}")"
echo "  ratio accord/rsync -aHAXS       $(ratio "${MED[accord mirror (nothing to do)]}" "${MED[rsync -aHAXS (nothing to do)]}")"
echo "  ratio accord --no-xattrs --no-acls/rsync -a  $(ratio "${MED[accord --no-xattrs --no-acls]}" "${MED[rsync -a (nothing to do)]}")"
rm -rf "$MNT/t2" "$MNT/a2" "$MNT/r2"; sync

echo
echo "== 3. $((B3 / 1024 / 1024)) MiB file, 0.1% changed in place"
mkdir -p "$MNT/t3" "$MNT/a3" "$MNT/r3" "$WORK/old"
python3 - "$MNT/t3/big" "$B3" <<'EOF'
import random, sys
path, n = sys.argv[1], int(sys.argv[2])
r = random.Random(3)
block = r.randbytes(1 << 20)
with open(path, "wb") as f:
    for i in range(n >> 20):
        f.write(block[i % 7:] + block[:i % 7])
EOF
cp "$MNT/t3/big" "$WORK/old/big"
python3 - "$MNT/t3/big" "$B3" <<'EOF'
import random, sys
path, n = sys.argv[1], int(sys.argv[2])
r = random.Random(4)
changed = n // 1000
with open(path, "r+b") as f:
    per = 1024
    for _ in range(changed // per):
        f.seek(r.randrange(0, n - per))
        f.write(r.randbytes(per))
EOF
touch "$MNT/t3/big"
RESET_A='cp "$WORK/old/big" "$MNT/a3/big"; touch -d @1 "$MNT/a3/big"; sync'
RESET_R='cp "$WORK/old/big" "$MNT/r3/big"; touch -d @1 "$MNT/r3/big"; sync'
rounds "$RESET_A; $RESET_R" \
    "accord mirror --inplace" '"$ACCORD" mirror -q --inplace "$MNT/t3" "$MNT/a3"' \
    "rsync --inplace --no-whole-file" 'rsync -a --inplace --no-whole-file "$MNT/t3/" "$MNT/r3/"'
eval "$RESET_A"; s0=$(sectors)
J=$("$ACCORD" mirror -q --inplace --json "$MNT/t3" "$MNT/a3"); s1=$(sectors)
eval "$RESET_R"; s2=$(sectors)
rsync -a --inplace --no-whole-file --stats "$MNT/t3/" "$MNT/r3/" > "$WORK/rsync-stats"; s3=$(sectors)
cmp "$MNT/t3/big" "$MNT/a3/big" && cmp "$MNT/t3/big" "$MNT/r3/big"
AB=$(( (s1 - s0) * 512 )); RB=$(( (s3 - s2) * 512 ))
echo "  bytes written to the device: accord $AB, rsync $RB (includes journal and metadata)"
echo "  accord --json: $J"
echo "  rsync: $(grep -E 'Literal data|Matched data' "$WORK/rsync-stats" | tr '\n' ' ')"
echo "  ratio accord/rsync time         $(ratio "${MED[accord mirror --inplace]}" "${MED[rsync --inplace --no-whole-file]}")   (target < 1)"
echo "  ratio accord/rsync bytes        $(ratio "$AB" "$RB")   (target < 1)"
