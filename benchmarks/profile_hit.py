"""Where a HIT's time goes, next to the bare load of the same binary (not a benchmark: a
profile to read). Builds pyopencl's generated kernels (benchmarks/corpus.py) into a fresh cache,
then loads each from the store many times, alternating with the bare driver load, with timers
around each step of the trip and cProfile over the HITs.

    python benchmarks/profile_hit.py [--device nvidia] [--repeats 30]
"""

from __future__ import annotations

import argparse
import cProfile
import collections
import io
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    import pyopencl as cl
    from corpus import pyopencl_kernels

    import clmagic
    from clmagic.trip import compiler as C
    from clmagic.opencl import driver as D
    from clmagic.key import prepare as P
    from clmagic.config import Settings
    from clmagic.store.directory import store as SD

    info, dev = clmagic.resolve_device(args.device)
    ctx, _ = clmagic.opencl.devices.context_for(info, dev)
    steps: dict[str, list[float]] = collections.defaultdict(list)
    timing = [False]

    def timed(owner: object, name: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*a: object, **kw: object) -> object:
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                if timing[0]:
                    steps[f"{getattr(owner, '__name__', '')}.{name}"].append(
                        time.perf_counter() - t)
        setattr(owner, name, wrapper)

    for owner, name in ((C.Compiler, "_start"), (C.Compiler, "_lookup"), (C.Compiler, "_load"),
                        (C.Compiler, "_finish"), (D, "from_binaries"), (D, "_built"),
                        (P, "check_source"), (P, "find_headers"), (P, "cache_key"),
                        (SD, "read_entry"), (SD, "open_regular"),
                        (SD.DirectoryStore, "_usage")):
        timed(owner, name)
    kernels = pyopencl_kernels(ctx)
    with tempfile.TemporaryDirectory() as cache:
        comp = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": cache}))
        hit, bare = [], []
        prof = cProfile.Profile()
        for k in kernels:
            key = comp.build(k.source, k.options, info).record.key
            comp.flush()
            binary = comp.store.get(info.fingerprint, key).binary
            opts = clmagic.key.options.parse_options(k.options).effective.encode()
            for _ in range(args.repeats):
                t = time.perf_counter()
                p = cl._cl._Program(ctx, [dev], [binary])
                p._build(options=opts, devices=[dev])
                p.all_kernels()
                bare.append(time.perf_counter() - t)
                comp.forget()
                comp.state.forget_prepared()  # as in a new process: the source prepared again
                timing[0] = True
                prof.enable()
                t = time.perf_counter()
                r = comp.build(k.source, k.options, info)
                hit.append(time.perf_counter() - t)
                prof.disable()
                timing[0] = False
                assert r.outcome == "HIT", r.outcome
    med = statistics.median
    print(f"{info.label}: {len(kernels)} programs x {args.repeats}; median HIT "
          f"{med(hit) * 1e3:.3f} ms, bare {med(bare) * 1e3:.3f} ms (ratio {med(hit) / med(bare):.2f}; "
          f"the HITs ran under cProfile)")
    for name, ts in sorted(steps.items(), key=lambda kv: -med(kv[1])):
        print(f"  {name:<32} {med(ts) * 1e6:8.1f} us  (x{len(ts) // len(hit)})")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(30)
    print(out.getvalue())


if __name__ == "__main__":
    main()
