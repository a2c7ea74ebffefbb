# Shared helpers of the benchmark scripts (sourced, not run).
# A fresh ext4 loop image per run, warm-up before timing, medians of $RUNS runs.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ACCORD=${ACCORD_BIN:-$ROOT/target/release/accord}
RUNS=${RUNS:-5}
OUT=${BENCH_DIR:-$ROOT/bench/out}

ensure_accord() {
    if [ ! -x "$ACCORD" ]; then
        (cd "$ROOT" && cargo build --release --bin accord)
    fi
}

# fresh_fs NAME SIZE: mounts a new ext4 image at $OUT/NAME and sets FS to it
# (not in a subshell, so the exit trap knows what to unmount).
fresh_fs() {
    local name=$1 size=$2 mnt=$OUT/$1
    FS=$mnt
    mkdir -p "$mnt"
    if [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null; then
        mountpoint -q "$mnt" && umount "$mnt"
        rm -f "$OUT/$name.img"
        truncate -s "$size" "$OUT/$name.img"
        mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$OUT/$name.img"
        mount -o loop "$OUT/$name.img" "$mnt"
        MOUNTS+=("$mnt")
    else
        echo "warning: not root or no mkfs.ext4; benchmarking in a plain directory" >&2
    fi
}

MOUNTS=()
cleanup_mounts() {
    for m in "${MOUNTS[@]}"; do
        umount "$m" 2>/dev/null || true
        rm -f "$m.img"
    done
}
trap cleanup_mounts EXIT

# seconds CMD...: wall time of one run, output discarded.
seconds() {
    local s=$EPOCHREALTIME
    "$@" >/dev/null 2>&1
    local e=$EPOCHREALTIME
    awk -v s="$s" -v e="$e" 'BEGIN { printf "%.4f\n", e - s }'
}

median() {
    sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else printf "%.4f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# median_seconds CMD...: one warm-up run, then the median of $RUNS runs.
median_seconds() {
    "$@" >/dev/null 2>&1
    for _ in $(seq "$RUNS"); do seconds "$@"; done | median
}

# paired_medians "CMD A" "CMD B": one warm-up each, then $RUNS alternating
# runs (so a load that comes and goes hits both alike); prints both medians.
paired_medians() {
    local a=$1 b=$2 ta=() tb=()
    eval "$a" >/dev/null 2>&1
    eval "$b" >/dev/null 2>&1
    for _ in $(seq "$RUNS"); do
        ta+=("$(seconds eval "$a")")
        tb+=("$(seconds eval "$b")")
    done
    echo "$(printf '%s\n' "${ta[@]}" | median) $(printf '%s\n' "${tb[@]}" | median)"
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "inf"; else printf "%.2f\n", a / b }'
}

json_field() {
    python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
