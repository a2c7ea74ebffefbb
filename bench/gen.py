#!/usr/bin/env python3
"""Generates the delta benchmark inputs: `gen.py KIND OUTDIR [SIZE_MIB]`.

Every workload writes OUTDIR/old and OUTDIR/new. Randomness is seeded so runs
are comparable."""
import os
import random
import sys

MiB = 1 << 20


def rand_bytes(rng, n):
    chunk = 64 * MiB
    return b"".join(rng.randbytes(min(chunk, n - i)) for i in range(0, n, chunk))


def scattered_edits(rng, data, count):
    """Overwrites, inserts and deletes of 1-200 bytes at random places."""
    out = bytearray(data)
    for _ in range(count):
        at = rng.randrange(len(out))
        kind = rng.randrange(3)
        n = rng.randrange(1, 200)
        if kind == 0:
            out[at:at + n] = rand_bytes(rng, len(out[at:at + n]))
        elif kind == 1:
            out[at:at] = rand_bytes(rng, n)
        else:
            del out[at:at + n]
    return bytes(out)


def main():
    kind, outdir = sys.argv[1], sys.argv[2]
    size = int(sys.argv[3]) * MiB if len(sys.argv) > 3 else 0
    rng = random.Random(20261121)
    os.makedirs(outdir, exist_ok=True)
    if kind == "edits":  # random data with 200 scattered edits
        old = rand_bytes(rng, size)
        new = scattered_edits(rng, old, 200)
    elif kind == "reversed":  # 64 chunks in reverse order
        old = rand_bytes(rng, size)
        c = size // 64
        new = b"".join(old[i * c:(i + 1) * c] for i in reversed(range(64)))
    elif kind == "overwrites-insert":  # 100 random 4 KiB overwrites, 1 KiB inserted near the start
        old = rand_bytes(rng, size)
        out = bytearray(old)
        for _ in range(100):
            at = rng.randrange(len(out) - 4096)
            out[at:at + 4096] = rand_bytes(rng, 4096)
        at = rng.randrange(4096, 64 * 1024)
        out[at:at] = rand_bytes(rng, 1024)
        new = bytes(out)
    elif kind == "identical-blocks":  # one block repeated, then edited
        block = rand_bytes(rng, int(sys.argv[4]) if len(sys.argv) > 4 else 16384)
        old = (block * (size // len(block) + 1))[:size]
        new = scattered_edits(rng, old, 200)
    elif kind == "random-edited":  # same-size random counterpart of the above
        old = rand_bytes(rng, size)
        new = scattered_edits(rng, old, 200)
    elif kind == "zeros-vs-80":  # basis of zeros, new data of 0x80 bytes
        old = bytes(size)
        new = b"\x80" * size
    elif kind == "random-vs-random":  # counterpart: nothing matches
        old = rand_bytes(rng, size)
        new = rand_bytes(rng, size)
    elif kind == "zeros-tail":  # 90% zeros, changed tail
        z = size * 9 // 10
        old = bytes(z) + rand_bytes(rng, size - z)
        new = bytes(z) + rand_bytes(rng, size - z)
    elif kind == "random-tail":  # counterpart: random head, changed tail
        z = size * 9 // 10
        head = rand_bytes(rng, z)
        old = head + rand_bytes(rng, size - z)
        new = head + rand_bytes(rng, size - z)
    else:
        sys.exit(f"unknown workload {kind}")
    with open(os.path.join(outdir, "old"), "wb") as f:
        f.write(old)
    with open(os.path.join(outdir, "new"), "wb") as f:
        f.write(new)


if __name__ == "__main__":
    main()
