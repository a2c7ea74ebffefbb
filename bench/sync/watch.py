#!/usr/bin/env python3
"""How soon a saved file reaches the other replica under `accord sync --watch`,
side by side with the floor of any watcher: `inotifywait -m` on one replica
feeding `cp` into the other (one direction, no archive, no checks).

    python3 bench/sync/watch.py          20 saves per tool, alternating sides
    SAVES=40 python3 bench/sync/watch.py
    ACCORD_BIN=path/to/accord            binary (default target/release/accord)

Run on an idle machine, as root (a fresh ext4 loop image). Prints each
tool's median latency (and min, max) and their ratio. The target (the watch
issue's acceptance): a median under one second."""

import json, os, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACCORD = os.environ.get("ACCORD_BIN", os.path.join(ROOT, "target/release/accord"))
SAVES = int(os.environ.get("SAVES", "20"))


def fresh_fs(work):
    """A new ext4 image mounted at work/fs (a plain directory if not root)."""
    mnt = os.path.join(work, "fs")
    os.mkdir(mnt)
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4"):
        print("warning: not root or no mkfs.ext4; a plain directory", file=sys.stderr)
        return mnt, None
    img = os.path.join(work, "fs.img")
    subprocess.run(["truncate", "-s", "1G", img], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    return mnt, mnt


def save(d, name, data):
    """An editor's save: a temp written, then renamed over the name."""
    tmp = os.path.join(d, "." + name + ".swp")
    with open(tmp, "w") as f:
        f.write(data)
    os.rename(tmp, os.path.join(d, name))


def arrived(path, data, limit=30.0):
    """Seconds until `path` holds `data` (polled every millisecond)."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        try:
            with open(path) as f:
                if f.read() == data:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.001)
    raise SystemExit(f"{path} did not arrive within {limit} s")


def latencies(a, b, both_ways):
    out = []
    for i in range(SAVES + 2):
        src, dst = (a, b) if (i % 2 == 0 or not both_ways) else (b, a)
        name, data = f"saved{i}.txt", f"version {i}\n"
        start = time.monotonic()
        save(src, name, data)
        arrived(os.path.join(dst, name), data)
        took = time.monotonic() - start
        if i >= 2:  # the first two are the warm-up
            out.append(took)
        time.sleep(0.2)
    return out


def accord_watch(fs):
    a, b = os.path.join(fs, "accord-a"), os.path.join(fs, "accord-b")
    os.mkdir(a), os.mkdir(b)
    env = dict(os.environ, ACCORD_STATE_DIR=os.path.join(fs, "accord-state"))
    p = subprocess.Popen([ACCORD, "sync", "--watch", "--batch", "--json", a, b],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        json.loads(p.stdout.readline())  # the first cycle: the watch is on
        return latencies(a, b, True)
    finally:
        p.terminate()
        p.wait()


def inotify_floor(fs):
    a, b = os.path.join(fs, "floor-a"), os.path.join(fs, "floor-b")
    os.mkdir(a), os.mkdir(b)
    script = (f'inotifywait -q -m -e moved_to --format %f {a} | '
              f'while read -r f; do cp -p "{a}/$f" "{b}/$f"; done')
    p = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        time.sleep(1)  # inotifywait has no "watching" line with -q
        return latencies(a, b, False)
    finally:
        os.killpg(p.pid, 15)
        p.wait()


def show(name, xs):
    ms = [x * 1e3 for x in xs]
    print(f"{name:<36} median {statistics.median(ms):7.1f} ms  "
          f"(min {min(ms):.1f}, max {max(ms):.1f}, {len(ms)} saves)")
    return statistics.median(ms)


def main():
    if not shutil.which("inotifywait"):
        raise SystemExit("inotifywait missing (apt-get install inotify-tools)")
    work = tempfile.mkdtemp(prefix="accord-watch-bench-")
    fs, mounted = fresh_fs(work)
    try:
        ours = show("accord sync --watch (both ways)", accord_watch(fs))
        floor = show("inotifywait + cp (one way, floor)", inotify_floor(fs))
        print(f"ratio accord/floor: {ours / floor:.2f}x; target: median under 1000 ms")
    finally:
        if mounted:
            subprocess.run(["umount", mounted])
        shutil.rmtree(work, ignore_errors=True)


main()
