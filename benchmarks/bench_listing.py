"""Benchmark (not a test): list 10,000 entries of a directory store, read no binary.

    python benchmarks/bench_listing.py [N] [--binary-bytes B]

Fills a temporary store with N synthetic entries (spread over two device folders, a third of
them with recorded hits), then times ``store.entries()`` (metadata + use counts) and
``clmagic.cache_frame()`` over it. Target: 10,000 entries listed in <= 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clmagic.entry import Entry  # noqa: E402
from clmagic.store import DirectoryStore  # noqa: E402

FINGERPRINTS = ("0123456789abcdef", "fedcba9876543210")


def fill(store: DirectoryStore, n: int, binary_bytes: int) -> None:
    """Write ``n`` synthetic entries; every third one gets two hits."""
    binary = os.urandom(binary_bytes)
    for i in range(n):
        fp = FINGERPRINTS[i % 2]
        key = secrets.token_hex(32)
        entry = Entry.create(
            key, fp, binary, kernels=[f"k{i}", "scale"], options="-cl-mad-enable",
            device="pthread-AMD EPYC", platform="Portable Computing Language",
            driver="3.1", device_version="OpenCL 3.0", platform_version="OpenCL 3.0 pocl",
            source_bytes=400 + i % 100, build_ms=100.0 + i % 50, created=time.time() - i,
            build_log="",
        )
        store.put(entry)
        if i % 3 == 0:
            store.record_hit(fp, key)
            store.record_hit(fp, key)


def best_of(fn, repeat: int) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=10_000)
    parser.add_argument("--binary-bytes", type=int, default=64 << 10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="clmagic-bench-") as tmp:
        store = DirectoryStore(Path(tmp) / "cache")
        t = time.perf_counter()
        fill(store, args.n, args.binary_bytes)
        print(f"filled {args.n} entries of {args.binary_bytes} B binary "
              f"in {time.perf_counter() - t:.1f} s ({store.location})")
        listed = list(store.entries())
        assert len(listed) == args.n, len(listed)
        assert sum(1 for e in listed if e.usage.hits) == len(range(0, args.n, 3))
        best, median = best_of(lambda: list(store.entries()), args.repeat)
        print(f"store.entries(): {args.n} entries in {best * 1000:.0f} ms "
              f"(best of {args.repeat}; median {median * 1000:.0f} ms) "
              f"-> {'OK' if best <= 0.5 else 'OVER'} the 0.5 s target")
        try:
            from clmagic.show.frames import cache_frame
        except ImportError:  # before frames exist
            return
        cache_frame(store=store)  # import pandas outside the timing
        best, median = best_of(lambda: cache_frame(store=store), args.repeat)
        print(f"cache_frame():   {args.n} rows in {best * 1000:.0f} ms "
              f"(best of {args.repeat}; median {median * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
