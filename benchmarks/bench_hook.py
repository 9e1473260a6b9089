"""The first run of a pyopencl workload in a fresh process: pyopencl's default path against
clmagic's hook (``clmagic run``), in one run.

    python benchmarks/bench_hook.py --device pocl --label pocl-zen5
    python benchmarks/bench_hook.py --device nvidia --label nvidia-h200

The workload is benchmarks/hook_workload.py (pyopencl.array arithmetic, sum, dot, cumsum, an
ElementwiseKernel, a ReductionKernel, silx's Convolution when silx is installed). Each timed run is
a fresh Python process; the two paths alternate:

- ``pyopencl``: ``python hook_workload.py``, pyopencl's default path with the driver's caches at
  their defaults (POCL's kernel cache, CUDA's JIT cache: on), warmed by an untimed first run;
- ``clmagic``: ``python -m clmagic run hook_workload.py``, every build a HIT from a cache that an
  untimed first run filled (the driver's caches on as well).

Reported per path (medians, and the best run of each): ``workload`` (first array operation to
last result: every build and the computations; imports, device and context excluded),
``builds`` (time spent building), ``process`` (the whole process, interpreter start and imports
included). Ratios are pyopencl /
clmagic. Needs pyopencl, numpy, Mako (pyopencl's generated kernels) and clmagic; silx optional.
Writes ``results/hook-LABEL.json`` and ``.md`` with machine, versions and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "hook_workload.py"
DRIVER_CACHES = ("POCL_KERNEL_CACHE", "CUDA_CACHE_DISABLE")  # unset: the drivers' defaults


def _env(cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DRIVER_CACHES}
    env["CLMAGIC_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent),
                                                      os.environ.get("PYTHONPATH")]))
    return env


def _run(path: str, device: str | None, env: dict[str, str]) -> dict:
    script = [str(WORKLOAD), "--json"] + (["--device", device] if device else [])
    cmd = [sys.executable, *(["-m", "clmagic", "run"] if path == "clmagic" else []), *script]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{path} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    return out


def _versions() -> dict[str, str]:
    code = ("import json, numpy, pyopencl\nv = {'pyopencl': pyopencl.VERSION_TEXT, "
            "'numpy': numpy.__version__}\ntry:\n import silx; v['silx'] = silx.version\n"
            "except ImportError: pass\ntry:\n import mako; v['mako'] = mako.__version__\n"
            "except ImportError: pass\nprint(json.dumps(v))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {"python": platform.python_version(), **json.loads(proc.stdout)}


def _commit() -> str:
    if os.environ.get("CLMAGIC_BENCH_COMMIT"):  # a copy without .git (the GPU host)
        return os.environ["CLMAGIC_BENCH_COMMIT"]
    try:
        return subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _machine() -> dict:
    info = {"cores": os.cpu_count(), "os": platform.platform(terse=True)}
    try:
        fields = {k.strip(): v.strip() for k, v in (
            line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines()
            if ":" in line)}
        info["cpu"] = fields.get("model name", "?")
    except OSError:
        info["cpu"] = platform.machine()
    return info


def summarise(runs: dict[str, list[dict]]) -> dict:
    """Medians and minima per path, and the pyopencl / clmagic ratios of each."""
    out: dict = {}
    for stat, f in (("median", statistics.median), ("min", min)):
        val = {path: {m: f(r[f"{m}_s"] for r in rs) for m in ("workload", "build", "process")}
               for path, rs in runs.items()}
        out[f"{stat}_s"] = val
        out[f"{stat}_ratio"] = {m: val["pyopencl"][m] / max(val["clmagic"][m], 1e-9)
                                for m in val["pyopencl"]}
    med = out["median_s"]["pyopencl"]  # the workload's ratio if building took no time
    out["limit_ratio"] = med["workload"] / max(med["workload"] - med["build"], 1e-9)
    return out


def markdown(res: dict) -> str:
    summary = res["summary"]
    med, ratio = summary["median_s"], summary["median_ratio"]
    v = res["versions"]
    lines = [
        f"# pyopencl workload, first run in a fresh process — {res['device']}",
        "",
        f"- machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, "
        f"{res['machine']['os']}",
        "- versions: " + ", ".join(f"{k} {v[k]}" for k in sorted(v)) +
        f"; clmagic {res['commit']}",
        f"- {res['repeats']} runs per path, alternating, each a fresh process; {res['builds']} "
        f"programs built per run; driver caches at their defaults (on) for both paths; every "
        f"clmagic run all HIT: {res['all_hit']}; largest error vs numpy {res['max_error']:.1e}",
        "",
        "| median of the runs | pyopencl default | clmagic hook (HIT) | pyopencl / clmagic | "
        "(best runs) |",
        "|---|---|---|---|---|",
    ]
    names = {"workload": "workload (builds + compute)", "build": "time building",
             "process": "whole process (with imports)"}
    for m, label in names.items():
        lines.append(f"| {label} | {med['pyopencl'][m] * 1000:.0f} ms | "
                     f"{med['clmagic'][m] * 1000:.0f} ms | {ratio[m]:.1f}× | "
                     f"{summary['min_ratio'][m]:.1f}× |")
    rest = {p: (med[p]["workload"] - med[p]["build"]) * 1000 for p in med}
    lines += ["", f"Outside the builds (pyopencl's templates and kernel invokers, transfers, the "
              f"computations): {rest['pyopencl']:.0f} ms on pyopencl's path, "
              f"{rest['clmagic']:.0f} ms on clmagic's; so even builds that took no time would "
              f"make the workload at most {summary['limit_ratio']:.1f}× faster."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None, help='"P:D" or part of the platform/device name')
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--label", default=None, help="results file suffix (default: none written)")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="clmagic-bench-hook-") as cache:
        env = _env(cache)
        _run("pyopencl", args.device, env)  # warms the driver's caches for pyopencl's path
        first = _run("clmagic", args.device, env)  # fills clmagic's cache (MISS)
        runs: dict[str, list[dict]] = {"pyopencl": [], "clmagic": []}
        for _ in range(args.repeats):
            for path in runs:
                runs[path].append(_run(path, args.device, env))
    res = {
        "device": first["device"], "repeats": args.repeats, "builds": first["builds"],
        "all_hit": all(set(r["outcomes"]) == {"HIT"} for r in runs["clmagic"]),
        "max_error": max(max(r["errors"].values()) for rs in runs.values() for r in rs),
        "first_clmagic_run": {k: first[k] for k in ("workload_s", "build_s", "outcomes")},
        "machine": _machine(), "versions": _versions(), "commit": _commit(), "runs": runs,
    }
    res["summary"] = summarise(runs)
    text = markdown(res)
    print(text)
    if args.label:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"hook-{args.label}.json").write_text(json.dumps(res, indent=1))
        (out / f"hook-{args.label}.md").write_text(text)
    return 0 if res["all_hit"] and res["max_error"] < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
