"""Benchmark (not a test): the size limit's cost.

1. Eviction over 10,000 entries, per store: the time of ``store.evict`` bringing a store of
   10,000 entries down to 90 % (one scan of sizes and last uses, then ~1,000 removals), and of
   the one save that takes a full store past its limit (which scans and evicts).
2. HIT time before and after issue 12 (lifetime counters, bounded memory front, size limit):
   the same HIT trip timed in child processes running this checkout and a checkout of the
   commit before (``--before PATH``, e.g. ``git archive d2328e9 | tar -x -C /tmp/before``),
   alternating, so both are measured in one run on one machine.

    python benchmarks/bench_evict.py [--entries 10000] [--before /tmp/before] [--hits 30]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("POCL_KERNEL_CACHE", "0")
ROOT = Path(__file__).resolve().parents[1]

SOURCE = """
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{ const int i = get_global_id(0); y[i] = a * x[i] + y[i]; }
"""

# A child: HIT trips through a fresh Compiler each (so memory never serves them), over a store
# that the first (MISS) trip filled; prints the trip times. Runs against whichever clmagic is on
# PYTHONPATH, so it uses only what both versions have.
HIT_CHILD = r"""
import json, sys, time
import clmagic
from clmagic.store import open_store
where, device, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def store():
    s = open_store(where)
    s.max_size = 1 << 30  # the default limit of a cache opened from the settings
    return s
src = '''SOURCE'''
clmagic.Compiler(store=store()).build(src, None, device)
times = []
for _ in range(n):
    r = clmagic.Compiler(store=store()).build(src, None, device)
    assert r.outcome == "HIT", r.outcome
    times.append(r.ms)
print(json.dumps(times))
""".replace("SOURCE", SOURCE)


def synthetic(n: int, size: int):
    from clmagic.entry import Entry

    key = hashlib.sha256(f"evict/{n}".encode()).hexdigest()
    return Entry.create(key, "0123456789abcdef", os.urandom(size), kernels=[f"k{n}"],
                        options="-O3", device="bench", platform="bench", driver="1",
                        source_bytes=100, build_ms=10.0, created=time.time(), build_log="")


def eviction(kind: str, root: str, n: int, size: int) -> tuple[float, float, int]:
    """(seconds for evict() to 90 %, seconds for the save that overflows, entries evicted)."""
    from clmagic.store import open_store

    where = f"{root}/{kind}" + (".db" if kind == "sqlite" else "")
    store = open_store(where)
    batch = [synthetic(i, size) for i in range(n)]
    for start in range(0, n, 500):
        store.put_many(batch[start : start + 500])
    total = sum(u.size for u in store.usage_list())
    t = time.perf_counter()
    gone = store.evict(int(total * 0.9))
    evict_s = time.perf_counter() - t
    store.max_size = sum(u.size for u in store.usage_list())  # exactly full
    store._known = None  # as a process that has not scanned yet
    t = time.perf_counter()
    store.put(synthetic(n + 1, size))
    overflow_s = time.perf_counter() - t
    return evict_s, overflow_s, len(gone)


def hits(checkout: Path, device: str, n: int, root: str, tag: str) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", HIT_CHILD, f"{root}/{tag}", device, str(n)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=2048, help="binary bytes per entry")
    ap.add_argument("--before", type=Path, help="a checkout of the commit before, for HIT")
    ap.add_argument("--hits", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="pocl")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import pyopencl

    import clmagic

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    info = clmagic.resolve_device(args.device)[0]
    print(f"# {time.strftime('%Y-%m-%d')} · {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, pyopencl "
          f"{pyopencl.VERSION_TEXT}, clmagic {commit} · device {info.label}")
    with tempfile.TemporaryDirectory(prefix="clmagic-bench-evict-") as root:
        print(f"eviction over {args.entries:,} entries of {args.size} B")
        print(f"{'store':<12}{'evict s':>10}{'evicted':>9}{'overflowing save s':>20}")
        for kind in ("directory", "sqlite"):
            evict_s, overflow_s, gone = eviction(kind, root, args.entries, args.size)
            print(f"{kind:<12}{evict_s:>10.3f}{gone:>9}{overflow_s:>20.3f}")
        from clmagic.store.lifetime import Counters

        c = Counters(f"{root}/stats")
        c.add("0123456789abcdef", "HIT")  # opens this process's file
        t = time.perf_counter()
        for _ in range(10_000):
            c.add("0123456789abcdef", "HIT", 1, 1.0)
        print(f"lifetime count on the HIT path: {(time.perf_counter() - t) * 100:.2f} µs per "
              "event (one pwrite, no lock file, no fsync)")
        if args.before is None:
            return
        print(f"HIT ms (median of {args.rounds} x {args.hits} trips, alternating before/after)")
        print(f"{'store':<12}{'before':>10}{'after':>10}{'after/before':>14}")
        for kind, suffix in (("directory", ""), ("sqlite", ".db")):
            before: list[float] = []
            after: list[float] = []
            for r in range(args.rounds):
                before += hits(args.before, info.spec, args.hits, root, f"b{kind}{r}{suffix}")
                after += hits(ROOT, info.spec, args.hits, root, f"a{kind}{r}{suffix}")
            b, a = statistics.median(before), statistics.median(after)
            print(f"{kind:<12}{b:>10.3f}{a:>10.3f}{a / b:>14.2f}")


if __name__ == "__main__":
    main()
