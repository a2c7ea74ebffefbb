#!/usr/bin/env python3
"""Generate a benchmark tree for `accord mirror`.

usage: gentree.py DIR FILES TOTAL_BYTES [SEED [SMALL_MAX]]

Mixed sizes: most files small (0-16 KiB), some medium (16-256 KiB), a few
large; the large ones take whatever is left of TOTAL_BYTES. With SMALL_MAX,
every file is 0..SMALL_MAX bytes instead (TOTAL_BYTES is then ignored). About 25 files per
directory, directories nested up to three levels. Contents are pseudo-random
(incompressible) and deterministic for a seed.
"""
import os
import random
import sys


def main():
    root, nfiles, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    small_max = int(sys.argv[5]) if len(sys.argv) > 5 else None
    rnd = random.Random(seed)
    pool = rnd.randbytes(64 << 20)  # slices of this make the contents

    def data(n):
        out = bytearray()
        while n > 0:
            k = min(n, 8 << 20)
            off = rnd.randrange(0, len(pool) - k + 1)
            out += pool[off:off + k]
            n -= k
        return bytes(out)

    sizes = []
    for _ in range(nfiles):
        r = rnd.random()
        if small_max is not None:
            sizes.append(rnd.randrange(0, small_max + 1))
        elif r < 0.85:
            sizes.append(rnd.randrange(0, 16 << 10))
        elif r < 0.99:
            sizes.append(rnd.randrange(16 << 10, 256 << 10))
        else:
            sizes.append(-1)  # large: filled in below
    used = sum(s for s in sizes if s > 0)
    large = [i for i, s in enumerate(sizes) if s < 0]
    rest = max(total - used, 0)
    for i in large:
        sizes[i] = rest // max(len(large), 1)

    dirs = []
    ndirs = max(nfiles // 25, 1)
    for d in range(ndirs):
        depth = d % 3
        parts = [f"d{d % 17}", f"e{d % 101}", f"f{d}"][: depth + 1]
        if depth < 2:
            parts.append(f"g{d}")
        dirs.append(os.path.join(root, *parts))
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    for i, s in enumerate(sizes):
        d = dirs[i % len(dirs)]
        with open(os.path.join(d, f"file-{i}.dat"), "wb") as f:
            f.write(data(s))


if __name__ == "__main__":
    main()
