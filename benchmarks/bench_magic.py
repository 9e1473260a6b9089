"""The magics' own cost, in one run: ``%load_ext clmagic`` and a ``%%clkernel`` HIT cell.

    python benchmarks/bench_magic.py --device pocl [--loads 21] [--repeats 5] [--profile]
                                     [--before DIR]

1. ``%load_ext clmagic`` in fresh processes (``--loads`` of each, alternating), timed as
   bench_build.py times it, from an ``InteractiveShell`` already made: ``import pyopencl``
   alone, ``%load_ext clmagic`` alone, and ``%load_ext clmagic`` after ``import pyopencl``
   (clmagic's own cost, whatever the extension imports of pyopencl).
2. ``%%clkernel`` HIT cells (disk HITs) in a fresh ``InteractiveShell`` that loaded the extension
   the user's way, after one untimed cell (the device's context, the first cell's imports), each
   repeat on sources built by an earlier process: ``shown`` (the result line displayed, as
   users see it), ``quiet`` (``--quiet``), ``noop`` (the same cell under a cell magic that does
   nothing: IPython's own cost), ``lib`` (``Compiler.build``, a disk HIT) and ``bare`` (the
   driver loading the binary of the same entry: program from binary, build, kernels); then
   the same cells again (``--memory`` times each): MEMORY trips, neither disk nor driver, where
   what the magic itself adds shows best.

Prints medians (ms) and the ratios (cell − noop) / bare and (cell − noop) / lib. ``--profile``
runs the shown cells under cProfile once more and prints where their time goes. ``--before DIR``
measures the clmagic of another checkout (DIR, say a worktree of the commit before) too,
alternating with this one in the same run.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODE = os.environ.get("CLMAGIC_BENCH_CODE") or str(HERE.parent)  # whose clmagic is measured
sys.path.insert(0, str(HERE))
sys.path.insert(0, CODE)

VARIANTS = ("shown", "quiet", "lib")
PRE = ("import time\nfrom IPython.core.interactiveshell import InteractiveShell\n"
       "ip = InteractiveShell.instance()\n")
LOADS = {
    "import_pyopencl": PRE + "t = time.perf_counter()\nimport pyopencl\n",
    "load_ext": PRE + "t = time.perf_counter()\nip.run_line_magic('load_ext', 'clmagic')\n",
    "load_ext_after_pyopencl": PRE + "import pyopencl\nt = time.perf_counter()\n"
                               "ip.run_line_magic('load_ext', 'clmagic')\n",
}


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _kernels() -> list[tuple[str, str]]:
    """(name, source): the size sweep's programs of 1, 4 and 16 kernels, and a saxpy."""
    from corpus import size_sweep

    saxpy = ("__kernel void saxpy(__global float *y, __global const float *x, const float a)\n"
             "{\n    const int i = get_global_id(0);\n    y[i] = a * x[i] + y[i];\n}\n")
    return [("saxpy", saxpy)] + [(k.name, k.source) for k in size_sweep((1, 4, 16))]


def _source(src: str, name: str, rep: int, variant: str) -> str:
    tag = f"{os.environ['CLMAGIC_BENCH_RUN']}_{name.replace('-', '_')}_{rep}_{variant}"
    return f"#define CLMAGIC_MAGIC_{tag} 1\n{src.rstrip()}\n"


def role_prepare(args: argparse.Namespace) -> None:
    import clmagic

    c = clmagic.get_compiler()
    info, _ = clmagic.resolve_device(args.device)
    c.build("__kernel void warm(__global int *a) { a[0] = 1; }\n", None, info)
    for name, src in _kernels():
        for rep in range(args.repeats):
            for variant in VARIANTS:
                assert c.build(_source(src, name, rep, variant), None, info).outcome == "MISS"
    c.flush()


def role_cells(args: argparse.Namespace) -> dict[str, list[float]]:
    import pyopencl as cl
    from IPython.core.interactiveshell import InteractiveShell

    import clmagic

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "clmagic")
    shell.register_magic_function(lambda line, cell: None, "cell", "noop")
    info, dev = clmagic.resolve_device(args.device)
    head = f"%%clkernel --device {info.spec}"
    sink = io.StringIO()
    with redirect_stdout(sink):  # the shown result line: formatted, printed to nowhere
        assert shell.run_cell(f"{head}\n__kernel void w(__global int *a) {{ a[0] = 2; }}\n",
                              silent=True).success
    c = clmagic.get_compiler()
    keyer = clmagic.Compiler(c.settings, store=None)
    ctx, _ = clmagic.opencl.devices.context_for(info, dev)
    out: dict[str, list[float]] = {k: [] for k in ("shown", "quiet", "noop", "lib", "bare")}
    prof = cProfile.Profile() if args.profile else None
    for name, src in _kernels():
        for rep in range(args.repeats):
            shown = f"{head}\n" + _source(src, name, rep, "shown")
            quiet = f"{head} --quiet\n" + _source(src, name, rep, "quiet")
            lib = _source(src, name, rep, "lib")
            binary = c.store.get(info.fingerprint, keyer.key(lib, None, info)).binary
            steps = ["shown", "quiet", "noop", "lib", "bare"]
            if rep % 2:
                steps.reverse()
            for step in steps:
                if step in ("shown", "quiet", "noop"):
                    cell = {"shown": shown, "quiet": quiet, "noop": shown.replace(
                        "%%clkernel", "%%noop", 1)}[step]
                    if prof is not None and step == "shown":
                        prof.enable()
                    with redirect_stdout(sink):
                        t0 = time.perf_counter()
                        res = shell.run_cell(cell, silent=True)
                        ms = _ms(t0)
                    if prof is not None:
                        prof.disable()
                    assert res.success, res.error_in_exec
                elif step == "lib":
                    t0 = time.perf_counter()
                    r = c.build(lib, None, info)
                    ms = _ms(t0)
                    assert r.outcome == "HIT", r.outcome
                else:
                    t0 = time.perf_counter()
                    prg = cl._cl._Program(ctx, [dev], [binary])
                    prg._build(options=b"", devices=[dev])
                    prg.all_kernels()
                    ms = _ms(t0)
                out[step].append(ms)
    # the same cells again: MEMORY trips, no disk and no driver, so the magic's own layer shows
    for k in ("m_shown", "m_quiet", "m_noop", "m_lib"):
        out[k] = []
    mem = {"m_shown": shown, "m_quiet": quiet, "m_noop": shown.replace("%%clkernel", "%%noop", 1)}
    for _ in range(args.memory):
        for step, cell in mem.items():
            with redirect_stdout(sink):
                t0 = time.perf_counter()
                shell.run_cell(cell, silent=True)
                out[step].append(_ms(t0))
        t0 = time.perf_counter()
        r = c.build(lib, None, info)
        out["m_lib"].append(_ms(t0))
        assert r.outcome == "MEMORY", r.outcome
    if prof is not None:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(45)
        print(text.getvalue(), file=sys.stderr)
    return out


def _run_role(role: str, args: argparse.Namespace, env: dict[str, str]) -> dict:
    cmd = [sys.executable, __file__, "--role", role, "--device", args.device or "",
           "--repeats", str(args.repeats), "--memory", str(args.memory),
           *(["--profile"] if args.profile else [])]
    p = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"role {role} failed:\n{p.stderr[-4000:]}")
    if args.profile and p.stderr:
        print(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else {}


def load_times(n: int, code_dir: str) -> dict[str, float]:
    runs: dict[str, list[float]] = {k: [] for k in LOADS}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [code_dir, os.environ.get("PYTHONPATH", "")])}
    for _ in range(n):
        for name, code in LOADS.items():
            p = subprocess.run([sys.executable, "-c", code + "print((time.perf_counter()-t)*1000)"],
                               capture_output=True, text=True, check=True, env=env,
                               cwd=code_dir)  # not the caller's folder: its clmagic would win
            runs[name].append(float(p.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(v) for k, v in runs.items()}


def _loads(args: argparse.Namespace, codes: dict[str, str]) -> None:
    """Each checkout's load times, in rounds that alternate between them."""
    runs: dict[str, list[dict[str, float]]] = {who: [] for who in codes}
    for _ in range(args.loads):
        for who, code_dir in codes.items():
            runs[who].append(load_times(1, code_dir))
    for who, rounds in runs.items():
        med = {k: statistics.median(r[k] for r in rounds) for k in LOADS}
        print(f"[{who}] fresh processes × {args.loads}, median ms: " + ", ".join(
            f"{k} {v:.1f}" for k, v in med.items()))
        print(f"[{who}] load_ext − import pyopencl: "
              f"{med['load_ext'] - med['import_pyopencl']:.1f} ms; load_ext after import "
              f"pyopencl: {med['load_ext_after_pyopencl']:.1f} ms")


def _cells(args: argparse.Namespace, who: str, code_dir: str) -> None:
    with tempfile.TemporaryDirectory(prefix="clmagic-bench-magic-") as tmp:
        env = {"CLMAGIC_CACHE_DIR": tmp, "CLMAGIC_BENCH_RUN": f"{os.getpid()}_{int(time.time())}",
               "POCL_KERNEL_CACHE": "0", "CUDA_CACHE_DISABLE": "1",
               "CLMAGIC_BENCH_CODE": code_dir}
        _run_role("prepare", args, env)
        cells = _run_role("cells", args, env)
    med = {k: statistics.median(v) for k, v in cells.items()}
    print(f"[{who}] {len(cells['bare'])} cells each, median ms: " + ", ".join(
        f"{k} {v:.2f}" for k, v in med.items()))
    for k in ("shown", "quiet"):
        own = med[k] - med["noop"]
        print(f"[{who}] ({k} − noop) = {own:.2f} ms: / bare {own / med['bare']:.2f}, "
              f"/ lib HIT {own / med['lib']:.2f}, magic layer {own - med['lib']:.2f} ms")
    for k in ("m_shown", "m_quiet"):
        own = med[k] - med["m_noop"]
        print(f"[{who}] MEMORY {k[2:]} − noop = {own * 1000:.0f} µs, of which the library's "
              f"MEMORY trip {med['m_lib'] * 1000:.0f} µs: magic layer "
              f"{(own - med['m_lib']) * 1000:.0f} µs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="pocl")
    ap.add_argument("--loads", type=int, default=21)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--memory", type=int, default=200, help="MEMORY cells of each kind")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--skip-loads", action="store_true")
    ap.add_argument("--before", default=None, help="another checkout, measured alternately")
    ap.add_argument("--rounds", type=int, default=1, help="cell measurements per checkout")
    ap.add_argument("--role", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.device = args.device or None
    if args.role == "prepare":
        role_prepare(args)
        return 0
    if args.role == "cells":
        print(json.dumps(role_cells(args)))
        return 0
    codes = {"this": str(HERE.parent)}
    if args.before:
        codes = {"before": str(Path(args.before).resolve()), **codes}
    if not args.skip_loads:
        _loads(args, codes)
    for _ in range(args.rounds):
        for who, code_dir in codes.items():
            _cells(args, who, code_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
