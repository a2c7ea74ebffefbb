#!/usr/bin/env python3
"""Generate a tree of small files for the task-run benchmarks.

usage: gentree.py DIR FILES [PER_DIR [SEED [MAX_SIZE]]]

FILES files of 0..MAX_SIZE bytes (default 4096) in directories of PER_DIR
files (default 100), laid out two levels deep (DIR/aNNN/bNNNN) with at most
100 directories under each top directory, so the tree has the same shape
at 20,000 and at 200,000 files: only the number of top directories grows.
Contents are pseudo-random and deterministic for a seed.
"""
import os
import random
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root, nfiles = sys.argv[1], int(sys.argv[2])
    per_dir = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    max_size = int(sys.argv[5]) if len(sys.argv) > 5 else 4096
    if nfiles < 0 or per_dir < 1 or max_size < 0:
        sys.exit("FILES >= 0, PER_DIR >= 1, MAX_SIZE >= 0")
    rnd = random.Random(seed)
    pool = rnd.randbytes(1 << 20)
    ndirs = max((nfiles + per_dir - 1) // per_dir, 1)
    made = 0
    for d in range(ndirs):
        path = os.path.join(root, f"a{d // 100:03d}", f"b{d:05d}")
        os.makedirs(path, exist_ok=True)
        for f in range(min(per_dir, nfiles - made)):
            size = rnd.randrange(0, max_size + 1)
            off = rnd.randrange(0, len(pool) - size + 1)
            with open(os.path.join(path, f"f{f:04d}"), "wb") as out:
                out.write(pool[off:off + size])
            made += 1


if __name__ == "__main__":
    main()
