#!/usr/bin/env bash
# accord sync side by side with Unison (Debian's unison, run as
# `unison -batch -auto -times=false`), in one run, on a fresh ext4 loop
# image (root needed). Each tool syncs its own copy of the same pair of
# replicas; rounds alternate between the tools, after a warm-up, and the
# medians, their ratio and each tool's peak memory are printed.
#
#   bench/sync/run.sh              100,000 files (about 10 minutes)
#   SCALE=0.1 bench/sync/run.sh    a tenth of them (smoke)
#   RUNS=5 ...                     timed rounds per row (default 3)
#   ACCORD_BIN=path/to/accord      binary (default target/release/accord)
#
# 1. first sync: A holds the tree, B is empty, no archives (made anew
#    before every round).
# 2. no-change re-sync of the synced pair, and in the same rounds its floor
#    on this machine: two GNU finds at once stat'ing every entry of both
#    replicas (what any update detection by metadata must do); accord's
#    ratio to it, and its ratio to Unison's.
# 3. 1% of the files changed on each side (different files; a line
#    appended), then a re-sync: the round before each timed one changes a
#    new 1% on both tools' pairs alike.
#
# Targets (issue 12): first sync at most 0.5x Unison's time; rows 2 and 3
# at most 0.2x; peak memory below Unison's in every row. Issue 31: row 2 at
# most 1.2x its floor.
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
# Five copies of the tree at once (the tree, A and B of each tool): the
# inode count of ext4 grows with the image, so the image is large (sparse).
fresh_fs sync-bench 32G
W=$FS
# Each tool's archives in a directory of the run, never the user's.
export ACCORD_STATE_DIR=$W/accord-state
export UNISON=$W/unison-state

echo "accord sync vs unison $(unison -version 2>/dev/null | head -1 | awk '{print $3}'), $FILES files, ext4 loop image, $(nproc) cores, $RUNS timed rounds after a warm-up"
python3 bench/mirror/gentree.py "$W/tree" "$FILES" 0 12 4096
echo "tree: $(find "$W/tree" -type f | wc -l) files, $(du -sm "$W/tree" | cut -f1) MiB"

accord_sync() { "$ACCORD" sync --batch -q --max-delete 100% "$W/acc-a" "$W/acc-b"; }
unison_sync() {
    unison -batch -auto -times=false -confirmbigdel=false -silent \
        "$W/uni-a" "$W/uni-b"
}

# The tools run under GNU time in a child shell, which needs these.
export -f accord_sync unison_sync
export W ACCORD

# measure NAME CMD: run CMD once, recording wall seconds and peak RSS (KiB).
declare -A TIMES PEAK
measure() {
    local name=$1 cmd=$2 s e kib
    s=$EPOCHREALTIME
    /usr/bin/time -f %M -o "$W/rss" bash -c "$cmd" >"$W/err" 2>&1 || {
        # unison exits 1 when it skipped something; anything else is a failure
        local code=$?
        [ "$code" = 1 ] || { echo "$name failed ($code):"; cat "$W/err"; exit 1; }
    }
    e=$EPOCHREALTIME
    kib=$(tail -1 "$W/rss")
    TIMES[$name]+="$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }') "
    [ "${PEAK[$name]:-0}" -ge "$kib" ] || PEAK[$name]=$kib
}

# row TITLE PREP [floor]: a warm-up round, then RUNS rounds, each running
# PREP and then both tools (in turn, so a passing load hits both alike);
# with `floor`, the floor's scan too, in the same rounds.
row() {
    local title=$1 prep=$2 with_floor=${3:-} a u
    eval "$prep"
    bash -c accord_sync >/dev/null 2>&1 || true
    bash -c unison_sync >/dev/null 2>&1 || true
    [ -z "$with_floor" ] || bash -c floor_scan >/dev/null 2>&1
    TIMES=([accord]="" [unison]="" [floor]="")
    PEAK=([accord]=0 [unison]=0 [floor]=0)
    for _ in $(seq "$RUNS"); do
        eval "$prep"
        sync
        measure accord accord_sync
        measure unison unison_sync
        [ -z "$with_floor" ] || measure floor floor_scan
    done
    a=$(printf '%s\n' ${TIMES[accord]} | median)
    u=$(printf '%s\n' ${TIMES[unison]} | median)
    echo "== $title"
    printf '  accord sync  median %8.3f s   peak %7d KiB   runs: %s\n' "$a" "${PEAK[accord]}" "${TIMES[accord]}"
    printf '  unison       median %8.3f s   peak %7d KiB   runs: %s\n' "$u" "${PEAK[unison]}" "${TIMES[unison]}"
    echo "  ratio accord/unison: time $(ratio "$a" "$u"), peak memory $(ratio "${PEAK[accord]}" "${PEAK[unison]}")"
    LAST_UNISON=$u
}

fresh_pairs() {
    rm -rf "$W/acc-a" "$W/acc-b" "$W/uni-a" "$W/uni-b" "$ACCORD_STATE_DIR" "$UNISON"
    cp -a "$W/tree" "$W/acc-a"
    cp -a "$W/tree" "$W/uni-a"
    mkdir "$W/acc-b" "$W/uni-b" "$UNISON"
}
row "1. first sync (B empty, no archives)" fresh_pairs

# The floor of a re-sync on this machine: one stat of every entry of both
# replicas (what update detection needs: size, times, inode), made by two
# GNU finds at once, one per replica, with nothing else done. Timed in the
# rounds of row 2, between the tools, so the machine's passing moods hit
# it as they hit them.
floor_scan() {
    find "$W/acc-a" -printf '%s %T@ %C@ %i\n' >/dev/null &
    find "$W/acc-b" -printf '%s %T@ %C@ %i\n' >/dev/null
    wait
}
export -f floor_scan

# Rows 2 and 3 start from pairs in agreement.
fresh_pairs
accord_sync >/dev/null 2>&1
unison_sync >/dev/null 2>&1 || true
row "2. no-change re-sync" ':' floor
f=$(printf '%s\n' ${TIMES[floor]} | median)
printf '  floor: stat of both replicas (two finds at once)  median %8.3f s   runs: %s\n' "$f" "${TIMES[floor]}"
echo "  ratio accord/floor: $(ratio "$(printf '%s\n' ${TIMES[accord]} | median)" "$f"), floor/unison: $(ratio "$f" "$LAST_UNISON")"

ROUND=0
# A new 1% of the files on each side (A's and B's sets differ), the same
# on both tools' pairs.
change_one_percent() {
    ROUND=$((ROUND + 1))
    python3 bench/sync/change.py "$W" "$ROUND"
}
row "3. 1% of the files changed on each side" change_one_percent
