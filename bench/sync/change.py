#!/usr/bin/env python3
"""Change 1% of a benchmark pair's files on each side, alike for both tools.

usage: change.py W ROUND

W holds the tree (W/tree) and each tool's pair (W/acc-a, W/acc-b, W/uni-a,
W/uni-b). Picks 2% of the tree's files at random (seeded by ROUND), appends a
line to the first half on the A sides and to the other half on the B sides,
so that each round changes a new 1% on each side and nothing conflicts.
"""
import os
import random
import sys


def main():
    w, round_ = sys.argv[1], int(sys.argv[2])
    tree = os.path.join(w, "tree")
    files = sorted(
        os.path.relpath(os.path.join(d, f), tree)
        for d, _, fs in os.walk(tree) for f in fs
    )
    r = random.Random(round_)
    picked = r.sample(files, max(2, len(files) // 50))
    half = len(picked) // 2
    for side, chosen in (("a", picked[:half]), ("b", picked[half:])):
        for rel in chosen:
            for tool in ("acc", "uni"):
                with open(os.path.join(w, f"{tool}-{side}", rel), "a") as f:
                    f.write(f"round {round_} on {side}\n")


if __name__ == "__main__":
    main()
