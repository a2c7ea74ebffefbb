#!/usr/bin/env bash
# accord sync of three roots in one run, beside accord sync of two roots on
# the same tree (what a third root costs), and beside Unison's star (hub B,
# spokes A and C: `unison A B` then `unison C B`, Debian's unison run as
# `unison -batch -auto -times=false`), in one run, on a fresh ext4 loop
# image (root needed). Rounds alternate between the contenders after a
# warm-up; the medians, their ratios and each one's peak memory are printed.
#
#   bench/sync/set.sh              100,000 files
#   SCALE=0.1 bench/sync/set.sh    a tenth of them (smoke)
#   RUNS=7 ...                     timed rounds per row (default 3; the
#                                  no-change ratio needs 7 to settle)
#   ACCORD_BIN=path/to/accord      binary (default target/release/accord)
#
# 1. first sync: A holds the tree, the other roots are empty, no archives.
# 2. no-change re-sync of roots in agreement.
#
# Targets (issue 29): three roots within 1.6x of two roots' time in both
# rows, peak memory within 2x.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/lib.sh
RUNS=${RUNS:-3}
SCALE=${SCALE:-1}
[ "$(id -u)" = 0 ] || { echo "run as root (loop mount)" >&2; exit 1; }
command -v unison >/dev/null || { echo "unison missing (apt-get install unison)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "GNU time missing (apt-get install time)" >&2; exit 1; }
ensure_accord

FILES=$(python3 -c "print(int(100000 * $SCALE))")
# Seven copies of the tree at once: a large (sparse) image for the inodes.
fresh_fs sync-set-bench 48G
W=$FS
export ACCORD_STATE_DIR=$W/accord-state
export UNISON=$W/unison-state

echo "accord sync of 3 roots vs 2 roots vs unison's star, $FILES files, ext4 loop image, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $RUNS timed rounds after a warm-up"
python3 bench/mirror/gentree.py "$W/tree" "$FILES" 0 12 4096
echo "tree: $(find "$W/tree" -type f | wc -l) files, $(du -sm "$W/tree" | cut -f1) MiB"

three() { "$ACCORD" sync --batch -q --max-delete 100% "$W/s3-a" "$W/s3-b" "$W/s3-c"; }
two() { "$ACCORD" sync --batch -q --max-delete 100% "$W/s2-a" "$W/s2-b"; }
star() {
    local flags=(-batch -auto -times=false -confirmbigdel=false -silent)
    unison "${flags[@]}" "$W/u-a" "$W/u-b" || [ $? = 1 ]
    unison "${flags[@]}" "$W/u-c" "$W/u-b" || [ $? = 1 ]
}
export -f three two star
export W ACCORD

declare -A TIMES PEAK
# measure NAME: run the contender NAME once, recording seconds and peak RSS.
measure() {
    local name=$1 s e kib
    s=$EPOCHREALTIME
    /usr/bin/time -f %M -o "$W/rss" bash -c "$name" >"$W/err" 2>&1 || {
        echo "$name failed:"; cat "$W/err"; exit 1;
    }
    e=$EPOCHREALTIME
    kib=$(sort -n "$W/rss" | tail -1)
    TIMES[$name]+="$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }') "
    [ "${PEAK[$name]:-0}" -ge "$kib" ] || PEAK[$name]=$kib
}

# row TITLE PREP: a warm-up, then RUNS rounds of PREP and each contender.
row() {
    local title=$1 prep=$2 name
    eval "$prep"
    for name in three two star; do bash -c "$name" >/dev/null 2>&1 || true; done
    TIMES=([three]="" [two]="" [star]="")
    PEAK=([three]=0 [two]=0 [star]=0)
    for _ in $(seq "$RUNS"); do
        eval "$prep"
        sync
        for name in three two star; do measure "$name"; done
    done
    echo "== $title"
    declare -A MED
    for name in three two star; do
        MED[$name]=$(printf '%s\n' ${TIMES[$name]} | median)
        printf '  %-26s median %8.3f s   peak %7d KiB   runs: %s\n' \
            "$(label "$name")" "${MED[$name]}" "${PEAK[$name]}" "${TIMES[$name]}"
    done
    echo "  three roots / two roots: time $(ratio "${MED[three]}" "${MED[two]}"), peak memory $(ratio "${PEAK[three]}" "${PEAK[two]}")"
    echo "  three roots / unison's star: time $(ratio "${MED[three]}" "${MED[star]}"), peak memory $(ratio "${PEAK[three]}" "${PEAK[star]}")"
}

label() {
    case $1 in
        three) echo "accord sync A B C" ;;
        two) echo "accord sync A B" ;;
        star) echo "unison A B, then C B" ;;
    esac
}

fresh_roots() {
    rm -rf "$W"/s3-? "$W"/s2-? "$W"/u-? "$ACCORD_STATE_DIR" "$UNISON"
    for root in s3-a s2-a u-a; do cp -a "$W/tree" "$W/$root"; done
    mkdir "$W/s3-b" "$W/s3-c" "$W/s2-b" "$W/u-b" "$W/u-c" "$UNISON"
}
row "1. first sync (A holds the tree, the others empty, no archives)" fresh_roots

fresh_roots
for name in three two star; do bash -c "$name" >/dev/null 2>&1 || true; done
# A second round, so that what the first wrote is settled everywhere.
sleep 3
for name in three two star; do bash -c "$name" >/dev/null 2>&1 || true; done
row "2. no-change re-sync" ':'
