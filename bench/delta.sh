#!/usr/bin/env bash
# Delta engine benchmarks, each side by side with the peer tool in the same run:
#   speed     accord signature+delta vs rdiff signature+delta, 128 MiB, 200 edits
#   inplace   literal data of in-place updates vs rsync --inplace (reversed chunks; 1 GiB shifted)
#   degenerate  degenerate inputs vs same-size random inputs (must stay within 1.5x)
# Usage: bench/delta.sh [speed|inplace|degenerate]...   (default: all)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ensure_accord
command -v rdiff >/dev/null || { echo "rdiff missing (apt-get install rdiff)"; exit 1; }
command -v rsync >/dev/null || { echo "rsync missing (apt-get install rsync)"; exit 1; }
mkdir -p "$OUT"
fresh_fs delta-fs 8G
GEN="python3 $ROOT/bench/gen.py"

accord_sig_delta() { "$ACCORD" delta signature "$1/old" "$1/sig.a" && "$ACCORD" delta delta "$1/sig.a" "$1/new" "$1/delta.a"; }
rdiff_sig_delta() { rdiff --force signature "$1/old" "$1/sig.r" && rdiff --force delta "$1/sig.r" "$1/new" "$1/delta.r"; }

bench_speed() {
    local d=$FS/speed
    $GEN edits "$d" 128
    local a r
    read -r a r < <(paired_medians "accord_sig_delta $d" "rdiff_sig_delta $d")
    "$ACCORD" delta patch "$d/old" "$d/delta.a" "$d/out" && cmp "$d/out" "$d/new"
    echo "speed: 128 MiB, 200 edits: accord ${a}s, rdiff ${r}s -> accord is $(ratio "$r" "$a")x faster;" \
        "delta accord $(stat -c %s "$d/delta.a") B vs rdiff $(stat -c %s "$d/delta.r") B" \
        "(signature $(stat -c %s "$d/sig.a") B vs $(stat -c %s "$d/sig.r") B)"
    rm -rf "$d"
}

rsync_literal() { # old new: literal bytes rsync --inplace sends to turn a copy of old into new
    cp "$1" "$1.rsync-target"
    rsync --inplace --no-whole-file --ignore-times --stats "$2" "$1.rsync-target" | awk -F': ' '/Literal data/ { gsub(/[^0-9]/, "", $2); print $2 }'
    rm -f "$1.rsync-target"
}

bench_inplace_case() {
    local kind=$1 mib=$2 d=$FS/inplace-$1
    $GEN "$kind" "$d" "$mib"
    "$ACCORD" delta signature "$d/old" "$d/sig"
    local seq ip lit_seq lit_ip lit_rsync size
    seq=$("$ACCORD" delta delta --json "$d/sig" "$d/new" "$d/d.seq")
    ip=$("$ACCORD" delta delta --in-place --json "$d/sig" "$d/new" "$d/d.ip")
    cp "$d/old" "$d/target" && "$ACCORD" delta patch --in-place "$d/target" "$d/d.ip" && cmp "$d/target" "$d/new"
    lit_seq=$(echo "$seq" | json_field literal_bytes)
    lit_ip=$(echo "$ip" | json_field literal_bytes)
    lit_rsync=$(rsync_literal "$d/old" "$d/new")
    size=$(stat -c %s "$d/new")
    awk -v k="$kind" -v m="$mib" -v s="$size" -v a="$lit_ip" -v q="$lit_seq" -v r="$lit_rsync" 'BEGIN {
        printf "inplace %s (%d MiB): literal accord in-place %d B (%.3f%% of file), accord sequential %d B, rsync --inplace %d B (%.2f%% of file); in-place vs sequential %+.3f%%\n",
            k, m, a, 100 * a / s, q, r, 100 * r / s, (q ? 100 * (a - q) / q : 0) }'
    echo "  plan: $ip"
    rm -rf "$d"
}

bench_inplace() {
    bench_inplace_case reversed 64
    bench_inplace_case overwrites-insert 1024
}

bench_degenerate() {
    local pairs="identical-blocks:random-edited zeros-vs-80:random-vs-random zeros-tail:random-tail"
    for pair in $pairs; do
        local deg=${pair%%:*} base=${pair##*:}
        $GEN "$deg" "$FS/deg" 256
        $GEN "$base" "$FS/base" 256
        local td tb
        read -r td tb < <(paired_medians "accord_sig_delta $FS/deg" "accord_sig_delta $FS/base")
        echo "degenerate $deg: ${td}s vs $base ${tb}s -> ratio $(ratio "$td" "$tb") (goal <= 1.5)"
        rm -rf "$FS/deg" "$FS/base"
    done
}

for what in "${@:-speed inplace degenerate}"; do
    for w in $what; do "bench_$w"; done
done
