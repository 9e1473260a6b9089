"""Where a HIT's time goes, next to the bare load of the same binary (a profile to read, not a
benchmark). Two paths, each HIT alternating with the bare driver load of its stored binary:

- ``build``: ``clmagic.build`` (a cell's path): the bare side loads the binary and makes every
  kernel, as the HIT does;
- ``hook``: ``pyopencl.Program(ctx, src).build()`` through clmagic's hook: the bare side loads
  the binary and makes no kernel, as the hook hands the program back without kernels.

Two sets of programs: pyopencl's generated kernels (benchmarks/corpus.py), and one 40 KB source
that includes three headers (the issue's yardstick for clmagic's own work). Each HIT is made as
in a new process: nothing in memory, every source prepared again (from the manifest, whose
file a process reads once: that read is timed apart), every entry read from its file. First
the totals (nothing wrapped), then the split: a timer around each step of the trip (the
wrappers add about a µs each) and, with ``--cprofile``, cProfile over the HITs.

    python benchmarks/profile_hit.py [--device pocl] [--repeats 20] [--cprofile] [--json F]

"clmagic's own" is the HIT less the driver's part of it (``clCreateProgramWithBinary`` and
``clBuildProgram``, and the kernels where made): what clmagic adds to the load.

The floor: the least any cache in Python can do for a HIT in a new process, next to the same
bare load: name the source (XXH3-128 over it and its options), open, ``fstat``, read and close
one file holding the binary, check its XXH3-128, then the same driver calls. No key, no
headers, no records, no history. ``floor/bare`` is the ratio no design of a checked file cache
written in Python gets under; ``HIT - floor`` is what clmagic does beyond that.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

#: the steps timed for the split: (module or class path, attribute); "driver" marks the driver's
STEPS = [
    ("clmagic.trip.state:TripState", "prepare"), ("clmagic.key.prepare", "find_headers"),
    ("clmagic.key.prepare", "cache_key"), ("clmagic.key.prepare", "check_source"),
    ("clmagic.key.prepare", "parse_options"),
    ("clmagic.trip.state:TripState", "recall"),
    ("clmagic.trip.state:TripState", "lookup"), ("clmagic.trip.state", "saves_settled"),
    ("clmagic.store.directory.store:DirectoryStore", "get"),
    ("clmagic.store.directory.store", "read_entry"),
    ("clmagic.trip.state:TripState", "load"), ("clmagic.opencl.driver", "from_binaries"),
    ("clmagic.opencl.pyopencl_program", "raw_from_binaries"),
    ("clmagic.opencl.pyopencl_program", "bare_build"), ("clmagic.opencl.driver", "_built"),
    ("clmagic.trip.state:TripState", "keep"),
    ("clmagic.trip.state:TripState", "count_hit"), ("clmagic.trip.state:TripState", "record"),
    ("clmagic.trip.state:TripState", "keep_records"), ("clmagic.trip.state:TripState", "count"),
    ("clmagic.trip.route", "travel"), ("clmagic.trip.route", "_close"),
    ("clmagic.process.hook", "exact_options"), ("clmagic.opencl.pyopencl_program", "options_of"),
    ("clmagic.opencl.pyopencl_program", "adopt"), ("clmagic.opencl.pyopencl_program", "unbuilt"),
]
DRIVER = {"raw_from_binaries", "bare_build"}


def big_source(folder: Path) -> tuple[str, str]:
    """A 40 KB source reading three headers in ``folder`` (made here), and its options."""
    for i in range(3):
        body = "".join(f"#define H{i}_C{j} ({j}.5f * {i + 1})\n"
                       f"inline float h{i}_f{j}(float x) {{ return x * H{i}_C{j} + {j}; }}\n"
                       for j in range(40))
        (folder / f"h{i}.h").write_text(f"#ifndef H{i}\n#define H{i}\n{body}#endif\n")
    parts = ['#include "h0.h"\n#include "h1.h"\n#include "h2.h"\n']
    n = 0
    while sum(map(len, parts)) < 40_000:
        parts.append(f"__kernel void k{n}(__global float *a, const float s)\n{{\n"
                     "    const int g = get_global_id(0);\n    float v = a[g] * s;\n"
                     f"    v = h0_f{n % 40}(v) + h1_f{(n * 3) % 40}(v) - h2_f{(n * 7) % 40}(v);\n"
                     f"    for (int j = 0; j < {1 + n % 5}; ++j) v = v * 0.5f + sin(v + j);\n"
                     "    a[g] = v;\n}\n")
        n += 1
    return "".join(parts), f"-I {folder}"


class Steps:
    """Timers around the named steps, counted only while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.times: dict[str, list[float]] = collections.defaultdict(list)
        self.calls: collections.Counter[str] = collections.Counter()
        for where, name in STEPS:
            self._wrap(where, name)

    def _wrap(self, where: str, name: str) -> None:
        import importlib

        mod, _, cls = where.partition(":")
        owner: Any = importlib.import_module(mod)
        if cls:
            owner = getattr(owner, cls)
        inner = getattr(owner, name)
        label = f"{cls or mod.rsplit('.', 1)[-1]}.{name}"
        steps = self

        def wrapper(*a: Any, **kw: Any) -> Any:
            if not steps.on:
                return inner(*a, **kw)
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                steps.times[label].append(time.perf_counter() - t)
                steps.calls[label] += 1

        setattr(owner, name, staticmethod(wrapper) if isinstance(
            owner.__dict__.get(name) if cls else None, staticmethod) else wrapper)

    def per_hit(self, hits: int) -> dict[str, float]:
        """Each step's total per HIT, µs."""
        return {k: sum(v) / hits * 1e6 for k, v in self.times.items()}


def bare_load(ctx: Any, dev: Any, binary: bytes, opts: bytes, kernels: bool) -> float:
    import pyopencl as cl

    t = time.perf_counter()
    p = cl._cl._Program(ctx, [dev], [binary])
    p._build(options=opts, devices=[dev])
    if kernels:
        p.all_kernels()
    return time.perf_counter() - t


def floor_load(ctx: Any, dev: Any, path: Path, source: str, opts: bytes,
               kernels: bool) -> float:
    """The floor (see the module's note): name, read, check, load."""
    import os

    import pyopencl as cl
    import xxhash

    t = time.perf_counter()
    xxhash.xxh3_128_hexdigest(source.encode() + b"\0" + opts)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size)
    finally:
        os.close(fd)
    binary = data[16:]
    if xxhash.xxh3_128_digest(binary) != data[:16]:
        raise AssertionError("the floor's file is damaged")
    p = cl._cl._Program(ctx, [dev], [binary])
    p._build(options=opts, devices=[dev])
    if kernels:
        p.all_kernels()
    return time.perf_counter() - t


def one_hit(path: str, comp: Any, ctx: Any, info: Any, k: Any) -> tuple[float, str]:
    """One HIT as in a new process (memory and prepared sources forgotten): its time, outcome."""
    import pyopencl as cl

    comp.forget()
    comp.state.forget_prepared(manifest=False)  # read once per process, timed apart
    # the entries it kept in memory: a new process reads their files. Through the state's
    # store, which waits for nothing: Compiler.store waits for the saver's queue, and a flush
    # before every HIT would make each pay the thread switch a burst of HITs pays once
    comp.state.store.close()
    if path == "build":
        t = time.perf_counter()
        r = comp.build(k.source, k.options, info)
        return time.perf_counter() - t, str(r.outcome)
    prg = cl.Program(ctx, k.source)
    t = time.perf_counter()
    prg.build(options=k.options.split())
    dt = time.perf_counter() - t
    return dt, str(comp.state.history.records[-1].outcome)


def measure(path: str, comp: Any, ctx: Any, dev: Any, info: Any, kernels: list[Any],
            repeats: int, steps: Steps | None, prof: cProfile.Profile | None) -> dict[str, Any]:
    """HIT and bare load of every program ``repeats`` times, alternating; medians per program
    summed over the programs (ms) and their ratio."""
    import xxhash

    hit_ms = bare_ms = floor_ms = 0.0
    driver_us = 0.0
    floor_file = Path(tempfile.mkdtemp()) / "entry"
    for k in kernels:
        comp.forget()
        one_hit(path, comp, ctx, info, k)  # the first: a MISS, saved
        comp.flush()  # its save (on POCL a helper process) done before anything is timed
        rec = comp.history.records[-1]
        binary = comp.store.get(info.fingerprint, rec.key).binary
        opts = rec.options.encode()
        floor_file.write_bytes(xxhash.xxh3_128_digest(binary) + binary)
        hits, bares, floors = [], [], []
        for rep in range(repeats):
            floors.append(floor_load(ctx, dev, floor_file, k.source, opts, path == "build"))
            if rep % 2:
                bares.append(bare_load(ctx, dev, binary, opts, path == "build"))
            if steps is not None:
                steps.on = True
            if prof is not None:
                prof.enable()
            dt, outcome = one_hit(path, comp, ctx, info, k)
            if prof is not None:
                prof.disable()
            if steps is not None:
                steps.on = False
            assert outcome == "HIT", outcome
            hits.append(dt)
            if not rep % 2:
                bares.append(bare_load(ctx, dev, binary, opts, path == "build"))
        hit_ms += statistics.median(hits) * 1e3
        bare_ms += statistics.median(bares) * 1e3
        floor_ms += statistics.median(floors) * 1e3
    floor_file.unlink()
    floor_file.parent.rmdir()
    hits_done = len(kernels) * repeats
    out: dict[str, Any] = {"programs": len(kernels), "hit_ms": hit_ms, "bare_ms": bare_ms,
                           "ratio": hit_ms / bare_ms, "over_bare_ms": (hit_ms - bare_ms)
                           / len(kernels), "floor_ms": floor_ms, "floor_ratio": floor_ms / bare_ms,
                           "over_floor_ms": (hit_ms - floor_ms) / len(kernels)}
    if steps is not None:
        split = steps.per_hit(hits_done)
        driver_us = sum(v for k2, v in split.items() if k2.split(".")[-1] in DRIVER)
        if path == "build":  # the kernels, made by _built, are the driver's too
            driver_us += split.get("driver._built", 0.0)
        out["split_us"] = dict(sorted(split.items(), key=lambda kv: -kv[1]))
        out["driver_us"] = driver_us
    return out


def manifest_read(comp: Any, info: Any, k: Any) -> float:
    """What a process pays once to read the manifest (µs): a preparation with the file read
    again less one with its lines as read (medians of 21)."""
    from clmagic.key.options import parse_options

    opts = parse_options(k.options)
    sides: dict[bool, list[float]] = {True: [], False: []}
    for rep in range(42):
        again = bool(rep % 2)
        comp.state.forget_prepared(manifest=again)
        t = time.perf_counter()
        comp.state.prepare(k.source, opts, info)
        sides[again].append(time.perf_counter() - t)
    return (statistics.median(sides[True]) - statistics.median(sides[False])) * 1e6


def run(args: argparse.Namespace) -> dict[str, Any]:
    from corpus import Kernel, pyopencl_kernels

    import clmagic
    from clmagic.config import Settings

    info, dev = clmagic.resolve_device(args.device)
    ctx, _ = clmagic.opencl.devices.context_for(info, dev)
    results: dict[str, Any] = {"device": info.label, "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as inc:
        src, opts = big_source(Path(inc))
        sets = {"generated": pyopencl_kernels(ctx),
                "40KB+3 headers": [Kernel("big", "big", src, opts)]}
        comp = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": cache}))
        clmagic.install(comp)
        for phase in ("totals", "split"):
            steps = Steps() if phase == "split" else None
            prof = cProfile.Profile() if phase == "split" and args.cprofile else None
            for name, kernels in sets.items():
                for path in ("build", "hook"):
                    got = measure(path, comp, ctx, dev, info, kernels,
                                  args.repeats if phase == "totals" else max(args.repeats // 2, 4),
                                  steps, prof)
                    if steps is not None:
                        own = got["split_us"]
                        results[name][path].update(split_us=own, driver_us=got["driver_us"])
                        steps.times.clear()
                    else:
                        results.setdefault(name, {})[path] = got
            if phase == "totals":
                results["manifest_read_us"] = manifest_read(comp, info, sets["generated"][0])
            if prof is not None:
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
                results["cprofile"] = out.getvalue()
    return results


def report(res: dict[str, Any]) -> str:
    lines = [f"{res['device']}: medians of {res['repeats']} HITs per program, each alternating "
             "with the bare load of its binary"]
    for name in ("generated", "40KB+3 headers"):
        for path in ("build", "hook"):
            r = res[name][path]
            own_ms = r["over_bare_ms"]
            lines.append(f"  {name:<15} {path:<5} {r['programs']:>3} programs: HIT "
                         f"{r['hit_ms']:.2f} ms, bare {r['bare_ms']:.2f} ms, HIT/bare "
                         f"{r['ratio']:.2f}, HIT - bare {own_ms * 1e3:.0f} µs a program")
            if "floor_ms" in r:
                lines.append(f"      floor {r['floor_ms']:.2f} ms, floor/bare "
                             f"{r['floor_ratio']:.2f}, HIT - floor "
                             f"{r['over_floor_ms'] * 1e3:.0f} µs a program")
            split = r.get("split_us", {})
            top = ", ".join(f"{k} {v:.0f}" for k, v in list(split.items())[:12])
            lines.append(f"      split (µs a HIT, nested steps overlap): {top}")
    if "manifest_read_us" in res:
        lines.append(f"  the manifest, read once per process: {res['manifest_read_us']:.0f} µs "
                     "(not in the HITs above)")
    if "cprofile" in res:
        lines.append(res["cprofile"])
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--json", default=None, help="write the results here too")
    args = ap.parse_args()
    res = run(args)
    print(report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
