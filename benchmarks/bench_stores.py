"""Benchmark (not a test): HIT latency of a real build and the time to list 10,000 entries,
per store (directory, SQLite, Redis, local directory + Redis).

    python benchmarks/bench_stores.py [--entries 10000] [--hits 20] [--device pocl]

Starts its own redis-server on a free loopback port (skipped when none is installed).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("POCL_KERNEL_CACHE", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import clmagic  # noqa: E402
from clmagic.entry import Entry  # noqa: E402
from clmagic.store import LayeredStore, open_store  # noqa: E402

SOURCE = """
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{ const int i = get_global_id(0); y[i] = a * x[i] + y[i]; }
"""


def start_redis(folder: str) -> tuple[subprocess.Popen | None, str | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        return None, None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", folder],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.01)
    return proc, f"redis://127.0.0.1:{port}/0"


def synthetic(n: int) -> Entry:
    key = hashlib.sha256(str(n).encode()).hexdigest()
    return Entry.create(key, "0123456789abcdef", os.urandom(2048), kernels=[f"k{n}"],
                        options="-O3", device="bench", platform="bench", driver="1",
                        source_bytes=100, build_ms=10.0, created=time.time(), build_log="")


def working_device():
    """The first device (POCL first) whose driver can build the benchmark kernel."""
    devices = sorted(clmagic.list_devices(), key=lambda d: "Portable" not in d.platform_name)
    for info in devices:
        try:
            clmagic.Compiler(store=None).build(SOURCE, None, info)
            return info
        except clmagic.ClmagicError:
            continue
    raise SystemExit("no OpenCL device can build the benchmark kernel")


def hit_ms(make_store, device: str, hits: int) -> tuple[float, float]:
    """Median ms of a HIT: with the store opened for it (a new process's first HIT), and with
    the store already open (the next HITs: a new compiler each time, so none comes from
    memory)."""
    clmagic.Compiler(store=make_store()).build(SOURCE, None, device)  # MISS: fills the store
    first, warm = [], []
    store = make_store()
    for _ in range(hits):
        result = clmagic.Compiler(store=make_store()).build(SOURCE, None, device)
        assert result.outcome == "HIT", result.outcome
        first.append(result.ms)
        result = clmagic.Compiler(store=store).build(SOURCE, None, device)
        assert result.outcome == "HIT", result.outcome
        warm.append(result.ms)
    return statistics.median(first), statistics.median(warm)


def list_s(store, n: int) -> float:
    batch = [synthetic(i) for i in range(n)]
    for start in range(0, n, 1000):
        store.put_many(batch[start : start + 1000])
    t = time.perf_counter()
    count = sum(1 for _ in store.entries())
    elapsed = time.perf_counter() - t
    assert count >= n, count
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--hits", type=int, default=20)
    ap.add_argument("--device", default=None, help="device spec (default: first that builds)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="clmagic-bench-")
    proc, url = start_redis(root)
    import redis as _redis

    flush = (lambda: _redis.Redis.from_url(url).flushall()) if url else (lambda: None)
    backends = {
        "directory": lambda tag: open_store(f"{root}/{tag}-dir"),
        "sqlite": lambda tag: open_store(f"{root}/{tag}.db"),
    }
    if url:
        backends["redis"] = lambda tag: open_store(url)
        backends["directory+redis"] = lambda tag: LayeredStore(
            open_store(f"{root}/{tag}-local"), open_store(url))
    info = clmagic.resolve_device(args.device)[0] if args.device else working_device()
    print(f"device: {info.label} · {args.hits} hits (median) · {args.entries:,} entries listed")
    print("HIT ms: the first of a newly opened store / with the store open; ratio: to the "
          "directory store's")
    print(f"{'store':<18}{'1st HIT':>9}{'ratio':>7}{'HIT':>8}{'ratio':>7}{'list s':>9}")
    base: tuple[float, float] | None = None
    try:
        for name, make in backends.items():
            flush()
            first, warm = hit_ms(lambda make=make: make("hit"), info, args.hits)
            base = base or (first, warm)
            flush()
            listing = list_s(make("list"), args.entries)
            print(f"{name:<18}{first:>9.2f}{first / base[0]:>7.2f}{warm:>8.2f}"
                  f"{warm / base[1]:>7.2f}{listing:>9.3f}")
    finally:
        if proc:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
