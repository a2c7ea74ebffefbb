#!/usr/bin/env python3
"""In-place compression loss on real versioned binaries.

Recipe: the shared libraries of two consecutive releases of PyPI wheels
(numpy 1.26.3 -> 1.26.4 and pillow 10.2.0 -> 10.3.0, CPython 3.11, manylinux
x86_64), paired by file name with the build hash stripped. For each pair:
accord's sequential delta vs its in-place delta (default 8 MiB scratch), and
the planner's peak memory against the file size.

Usage: bench/corpus.py [WORKDIR]   (needs pip and network access to PyPI)
"""
import json
import os
import re
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ACCORD = os.environ.get("ACCORD_BIN", os.path.join(ROOT, "target/release/accord"))
WORK = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench/out/corpus")
PAIRS = [("numpy", "1.26.3", "1.26.4"), ("pillow", "10.2.0", "10.3.0")]


def fetch(pkg, version):
    dest = os.path.join(WORK, f"{pkg}-{version}")
    if not os.path.isdir(dest):
        wheels = os.path.join(WORK, "wheels")
        subprocess.run(
            ["pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
             "--platform", "manylinux2014_x86_64", "-d", wheels, f"{pkg}=={version}"],
            check=True)
        wheel = next(w for w in os.listdir(wheels) if w.lower().startswith(f"{pkg.lower()}-{version}-"))
        zipfile.ZipFile(os.path.join(wheels, wheel)).extractall(dest)
    return dest


def libraries(tree):
    """Shared libraries by name with the build hash (-1a2b3c4d) stripped."""
    out = {}
    for d, _, files in os.walk(tree):
        for f in files:
            if ".so" in f:
                key = re.sub(r"-[0-9a-f]{8}(?=\.)", "", os.path.relpath(os.path.join(d, f), tree))
                out[key] = os.path.join(d, f)
    return out


def delta_json(sig, new, out, *flags):
    r = subprocess.run([ACCORD, "delta", "delta", "--json", *flags, sig, new, out], check=True, capture_output=True)
    return json.loads(r.stdout)


def main():
    os.makedirs(WORK, exist_ok=True)
    total = {"size": 0, "seq": 0, "ip": 0, "peak": 0, "peak_sum": 0}
    print(f"{'library':60} {'size':>10} {'seq lit':>10} {'in-place':>10} {'loss':>8} {'peak/size':>9}")
    for pkg, a, b in PAIRS:
        old_libs, new_libs = libraries(fetch(pkg, a)), libraries(fetch(pkg, b))
        for name in sorted(set(old_libs) & set(new_libs)):
            old, new = old_libs[name], new_libs[name]
            if os.path.getsize(new) < 64 * 1024:
                continue
            sig = os.path.join(WORK, "sig")
            subprocess.run([ACCORD, "delta", "signature", old, sig], check=True)
            seq = delta_json(sig, new, os.path.join(WORK, "d.seq"))
            ip = delta_json(sig, new, os.path.join(WORK, "d.ip"), "--in-place")
            # The paper's policies alone (no scratch), for comparison.
            trim = delta_json(sig, new, os.path.join(WORK, "d.trim"), "--in-place", "--scratch", "0", "--policy", "trim")
            total["trim"] = total.get("trim", 0) + trim["literal_bytes"]
            target = os.path.join(WORK, "target")
            subprocess.run(["cp", old, target], check=True)
            subprocess.run([ACCORD, "delta", "patch", "--in-place", target, os.path.join(WORK, "d.ip")], check=True)
            subprocess.run(["cmp", target, new], check=True)
            size = os.path.getsize(new)
            loss = ip["literal_bytes"] - seq["literal_bytes"]
            total["size"] += size
            total["seq"] += seq["literal_bytes"]
            total["ip"] += ip["literal_bytes"]
            total["peak"] = max(total["peak"], ip["planner_peak_bytes"] / size)
            total["peak_sum"] += ip["planner_peak_bytes"]
            print(f"{pkg + ':' + name:60} {size:>10} {seq['literal_bytes']:>10} {ip['literal_bytes']:>10} "
                  f"{100 * loss / size:>7.3f}% {100 * ip['planner_peak_bytes'] / size:>8.3f}%")
    loss = total["ip"] - total["seq"]
    print(f"TOTAL {total['size']} bytes: in-place loss {loss} bytes = {100 * loss / total['size']:.3f}% of the files "
          f"({100 * loss / max(total['seq'], 1):.3f}% of the sequential literal data); "
          f"planner peak {100 * total['peak_sum'] / total['size']:.3f}% of the file size over the corpus, "
          f"largest for one file {100 * total['peak']:.3f}%; without scratch (trim policy) the loss is "
          f"{100 * (total['trim'] - total['seq']) / total['size']:.3f}% of the files")


if __name__ == "__main__":
    main()
