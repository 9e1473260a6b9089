"""A test-suite-shaped pyopencl workload (issue 23): pyopencl's default path against
``clmagic run`` (the hook), in one run, as ratios.

    python benchmarks/bench_suite.py --device pocl --label pocl-zen4 [--tests 50] [--repeats 3]
    python benchmarks/bench_suite.py --device nvidia --driver-cache off --label nvidia-h200-off

The workload (``--child``, also run alone): ``--tests`` "tests", each with a new context and
queue, each building what pyopencl generates for it: pyopencl.array arithmetic, comparisons,
``sum``/``dot``/``max`` (reductions) and ``cumsum`` (a scan) in one of several dtypes (the test's
number picks it, so the suite's programs repeat across tests as a real suite's do), an
``ElementwiseKernel``, a ``ReductionKernel``, a ``GenericScanKernel``, pyopencl.algorithm's
``RadixSort`` and pyopencl.bitonic_sort's ``BitonicSort``; every result checked against numpy.

Each run is a fresh process; the two sides alternate, several repeats, medians:

- ``warm``: pyopencl's default path (the driver's cache warm) against ``clmagic run`` with
  clmagic's cache warm (every program a HIT);
- ``first``: the same pyopencl side against ``clmagic run`` with clmagic's cache empty (a new
  folder each run) and the driver's cache warm: clmagic builds and saves every program once.

Per run: the whole process (interpreter, imports and the exit's last saves included), the
workload (first test to last result), the time inside ``pyopencl.Program.build`` (calls and
total: the outermost wrapper, so the hook's work is inside), the time outside the builds, and
pyopencl ``CompilerWarning``s (raised, and shown by Python's default filter). Writes
``results/suite-LABEL.json`` and ``.md`` (machine, versions, commit). Needs numpy, pyopencl,
Mako and clmagic.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
# unsigned: pyopencl's a - b adds -1 * b; int16: sums wrap
DTYPES = ("float32", "int32", "float64", "int64")
DRIVER_CACHE_OFF = {"POCL_KERNEL_CACHE": "0", "CUDA_CACHE_DISABLE": "1"}


# -- the workload (the child) ----------------------------------------------------------------------

class Counts:
    """Time and calls inside ``Program.build`` (outermost), and pyopencl's compiler warnings:
    raised (``pyopencl.compiler_output`` calls) and shown (past Python's default filter)."""

    def __init__(self) -> None:
        import pyopencl as cl

        self.build_s, self.builds, self.raised, self.shown = 0.0, 0, 0, 0
        inner, output, show = cl.Program.build, cl.compiler_output, warnings.showwarning

        def build(prg, *args, **kwargs):
            t = time.perf_counter()
            try:
                return inner(prg, *args, **kwargs)
            finally:
                self.build_s += time.perf_counter() - t
                self.builds += 1

        def compiler_output(text: str) -> None:
            self.raised += 1
            output(text)

        def showwarning(message, category, *args, **kwargs):
            if issubclass(category, cl.CompilerWarning):
                self.shown += 1
                return None
            return show(message, category, *args, **kwargs)

        cl.Program.build = build  # type: ignore[method-assign]
        cl.compiler_output = compiler_output
        warnings.showwarning = showwarning


def one_test(cl, ctx, n: int) -> float:
    """Test ``n``: its programs built and run in ``ctx``; the largest relative error."""
    import numpy as np
    import pyopencl.array as cla
    from pyopencl.algorithm import RadixSort
    from pyopencl.bitonic_sort import BitonicSort
    from pyopencl.elementwise import ElementwiseKernel
    from pyopencl.reduction import ReductionKernel
    from pyopencl.scan import GenericScanKernel

    queue = cl.CommandQueue(ctx)
    dt = np.dtype(DTYPES[n % len(DTYPES)])
    rng = np.random.default_rng(n)
    x = (rng.random(2048) * 50).astype(dt)
    y = (rng.random(2048) * 50 + 1).astype(dt)
    a, b = cla.to_device(queue, x), cla.to_device(queue, y)
    two = dt.type(2)
    errs = [_rel((a + b).get(), x + y), _rel((a * two - b).get(), x * two - y),
            _rel((a > b).get(), x > y), _rel(abs(a - b).get(), np.abs(x - y)),
            _rel(cla.sum(a).get(), x.sum(dtype=dt)), _rel(cla.max(a).get(), x.max()),
            _rel(cla.dot(a, b).get(), np.dot(x, y)), _rel(cla.cumsum(a).get(), np.cumsum(x))]
    f = cla.to_device(queue, x.astype(np.float32))
    fma = ElementwiseKernel(ctx, "float *x, float *z", f"z[i] = x[i] * {n % 5}.5f + 1.0f")
    z = cla.empty_like(f)
    fma(f, z)
    xf = x.astype(np.float32)
    errs.append(_rel(z.get(), xf * np.float32(n % 5 + 0.5) + 1))
    sumsq = ReductionKernel(ctx, np.float32, neutral="0", reduce_expr="a+b",
                            map_expr="x[i]*x[i]", arguments="__global const float *x")
    errs.append(_rel(sumsq(f).get(), np.dot(xf.astype(np.float64), xf)))
    scan = GenericScanKernel(ctx, np.float32, arguments="float *x, float *y", input_expr="x[i]",
                             scan_expr="max(a, b)", neutral="-INFINITY",
                             output_statement="y[i] = item;")
    scan(f, z)
    errs.append(_rel(z.get(), np.maximum.accumulate(xf)))
    keys = cla.to_device(queue, rng.integers(0, 2**20, 1024).astype(np.uint32))
    sort = RadixSort(ctx, "uint *keys", key_expr="keys[i]", sort_arg_names=["keys"])
    (got,), _ = sort(keys, key_bits=20)
    errs.append(_rel(got.get(), np.sort(keys.get())))
    bit = cla.to_device(queue, x[:1024].copy())
    BitonicSort(ctx)(bit)
    errs.append(_rel(bit.get(), np.sort(x[:1024])))
    return max(errs)


def _rel(got, want) -> float:
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))


def child(args: argparse.Namespace) -> int:
    import pyopencl as cl

    sys.path.insert(0, str(HERE))
    from hook_workload import pick_device

    for name in ("pyopencl.array", "pyopencl.algorithm", "pyopencl.bitonic_sort",
                 "pyopencl.elementwise", "pyopencl.reduction", "pyopencl.scan", "mako"):
        __import__(name)  # imported before the clock starts, as a suite's conftest would
    dev = pick_device(args.device)
    counts = Counts()
    t0 = time.perf_counter()
    err = max(one_test(cl, cl.Context([dev]), n) for n in range(args.tests))
    out = {"device": f"{dev.platform.name} · {dev.name}", "error": err,
           "workload_s": time.perf_counter() - t0, "build_s": counts.build_s,
           "builds": counts.builds, "raised": counts.raised, "shown": counts.shown,
           "end": time.time()}
    hook = sys.modules.get("clmagic.process.hook")
    if hook is not None and hook.installed():
        from clmagic import get_compiler

        recs = get_compiler().state.history.records  # no waiting for the saves here
        out["outcomes"] = {o: sum(r.outcome == o for r in recs) for o in {r.outcome for r in recs}}
    print(json.dumps(out), flush=True)
    return 0 if err < 1e-4 else 1


# -- the runs (the parent) -------------------------------------------------------------------------

def _run(side: str, args: argparse.Namespace, cache: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in DRIVER_CACHE_OFF}
    if args.driver_cache == "off":
        env.update(DRIVER_CACHE_OFF)
    env["CLMAGIC_CACHE_DIR"] = cache
    env.pop("PYTHONWARNINGS", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent), env.get("PYTHONPATH")]))
    script = [str(Path(__file__).resolve()), "--child", "--tests", str(args.tests)]
    script += ["--device", args.device] if args.device else []
    cmd = [sys.executable, *(["-m", "clmagic", "run"] if side != "pyopencl" else []), *script]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{side} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update(process_s=wall, exit_s=max(time.time() - out.pop("end"), 0.0),
               outside_s=out["workload_s"] - out["build_s"])
    return out


METRICS = ("process_s", "workload_s", "build_s", "outside_s", "builds", "raised", "shown",
           "exit_s")


def _median(runs: list[dict]) -> dict:
    return {m: statistics.median(r[m] for r in runs) for m in METRICS}


def measure(args: argparse.Namespace, root: Path) -> dict:
    warm_cache = str(root / "warm")
    _run("pyopencl", args, warm_cache)  # the driver's cache warm for both sides
    _run("clmagic", args, warm_cache)  # clmagic's cache filled
    runs: dict[str, list[dict]] = {"pyopencl": [], "warm": [], "first": []}
    for rep in range(args.repeats):
        sides = ["pyopencl", "warm", "first"]
        for side in sides if rep % 2 == 0 else sides[::-1]:
            cache = str(root / f"first-{rep}") if side == "first" else warm_cache
            runs[side].append(_run(side, args, cache))
    med = {side: _median(rs) for side, rs in runs.items()}
    ratios = {side: {m: med[side][m] / med["pyopencl"][m] if med["pyopencl"][m] else None
                     for m in METRICS if m not in ("raised", "shown", "builds", "exit_s")}
              for side in ("warm", "first")}
    return {"runs": runs, "median": med, "ratio": ratios,
            "all_hit": all(set(r["outcomes"]) == {"HIT"} for r in runs["warm"]),
            "max_error": max(r["error"] for rs in runs.values() for r in rs)}


def markdown(res: dict) -> str:
    med, ratio, v = res["median"], res["ratio"], res["versions"]
    lines = [f"# Test-suite-shaped pyopencl workload — {res['device']}", "",
             f"- machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, "
             f"{res['machine']['os']}; load before: {res['load']}",
             "- versions: " + ", ".join(f"{k} {v[k]}" for k in sorted(v)) +
             f"; clmagic {res['commit']}",
             f"- {res['tests']} tests (a new context each), {med['pyopencl']['builds']:.0f} "
             f"Program.build calls a run; driver cache {res['driver_cache']}; {res['repeats']} "
             f"runs per side, alternating, medians; warm clmagic runs all HIT: {res['all_hit']}; "
             f"largest error vs numpy {res['max_error']:.1e}", "",
             "| median | pyopencl default | clmagic warm (HIT) | warm / pyopencl | "
             "clmagic first run (cache empty) | first / pyopencl |", "|---|---|---|---|---|---|"]
    names = {"process_s": "whole run (process)", "workload_s": "workload",
             "build_s": "inside Program.build", "outside_s": "outside the builds"}
    for m, label in names.items():
        lines.append(f"| {label} | {med['pyopencl'][m]:.2f} s | {med['warm'][m]:.2f} s | "
                     f"{ratio['warm'][m]:.2f} | {med['first'][m]:.2f} s | "
                     f"{ratio['first'][m]:.2f} |")
    for m, label in (("builds", "Program.build calls"), ("raised", "CompilerWarnings raised"),
                     ("shown", "CompilerWarnings shown"), ("exit_s", "exit (last saves)")):
        lines.append(f"| {label} | {med['pyopencl'][m]:.4g} | {med['warm'][m]:.4g} | | "
                     f"{med['first'][m]:.4g} | |")
    per = {s: med[s]["build_s"] / max(med[s]["builds"], 1) * 1e3 for s in med}
    lines += ["", "Per Program.build call: " + ", ".join(f"{s} {per[s]:.2f} ms" for s in per)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help='"P:D" or part of the platform/device name')
    ap.add_argument("--tests", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--driver-cache", choices=("on", "off"), default="on")
    ap.add_argument("--label", default=None)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    from bench_hook import _commit, _machine, _versions

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="clmagic-bench-suite-") as root:
        res = measure(args, Path(root))
    first = res["runs"]["pyopencl"][0]
    res.update(device=first["device"], tests=args.tests, repeats=args.repeats,
               driver_cache=args.driver_cache, load=f"{load:.2f}", machine=_machine(),
               versions=_versions(), commit=_commit())
    text = markdown(res)
    print(text)
    if args.label:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"suite-{args.label}.json").write_text(json.dumps(res, indent=1))
        (out / f"suite-{args.label}.md").write_text(text)
    return 0 if res["all_hit"] and res["max_error"] < 1e-4 else 1


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
