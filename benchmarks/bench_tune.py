"""A Kernel Tuner re-tune: plain against ``clmagic.install()``, first (caches empty) and second
(warm), in one run.

    python benchmarks/bench_tune.py --device pocl --label pocl-zen4
    python benchmarks/bench_tune.py --device nvidia --driver-cache both --label nvidia-h100

The tune: Kernel Tuner's brute force over a tiled matrix multiply in the shape of its OpenCL
matmul example (``block_size_x == block_size_y * tile_size_y``: 12 configurations), every output
checked against numpy's (``answer``). Each run is a fresh Python process, as a tuning script is
run again; one repeat is, for each path, a fresh folder for every cache (clmagic's, pyopencl's,
POCL's kernel cache, CUDA's JIT cache), a ``first`` run with them empty and a ``second`` with
them as the first left them; the two paths alternate, the order flipped each repeat.

- ``plain``: ``tune_kernel`` as it is: pyopencl's and the driver's caches at work (POCL's kernel
  cache and CUDA's JIT cache when ``--driver-cache on``, nothing when ``off``);
- ``clmagic``: the same script after ``clmagic.install()``: every build through clmagic's cache.

Reported (medians of the repeats): ``compile`` — Kernel Tuner's own ``compile_time``, summed
over the configurations (its ``env["total_compile_time"]``; the warm-up build of the first
configuration, which Kernel Tuner times apart, is not in it), ``tune`` — the ``tune_kernel``
call's wall time, ``process`` — the whole process (interpreter start and imports included).
A last pair of clmagic runs (its own caches) adds :class:`clmagic.kernel_tuner.FactsObserver`
(with ``-cl-nv-verbose`` on NVIDIA, for the registers and spills) and keeps each
configuration's kernel facts, from the MISS and from the HIT.

Needs numpy, pyopencl, kernel_tuner (``pip install --no-deps kernel_tuner`` and its import-time
needs: python-constraint2, jsonschema, xmltodict, packaging, pandas: the brute force strategy
needs none of scipy, scikit-learn or pymoo) and this checkout's clmagic (put on ``PYTHONPATH``
here). Writes ``results/tune-LABEL.json`` and ``.md`` naming the machine, versions and commit.
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
MATMUL = """\
#define WIDTH {width}
__kernel void matmul_kernel(__global float *C, __global const float *A,
                            __global const float *B)
{{
    __local float sA[block_size_y * tile_size_y][block_size_x];
    __local float sB[block_size_y * tile_size_y][block_size_x];
    int tx = get_local_id(0), ty = get_local_id(1);
    int x = get_group_id(0) * block_size_x + tx;
    int y = get_group_id(1) * block_size_y * tile_size_y + ty;
    float sum[tile_size_y];
    for (int i = 0; i < tile_size_y; i++) sum[i] = 0.0f;
    for (int k = 0; k < WIDTH; k += block_size_x) {{
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = 0; i < tile_size_y; i++) {{
            sA[ty + block_size_y * i][tx] = A[(y + block_size_y * i) * WIDTH + k + tx];
            sB[ty + block_size_y * i][tx] = B[(k + ty + block_size_y * i) * WIDTH + x];
        }}
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kb = 0; kb < block_size_x; kb++)
            for (int i = 0; i < tile_size_y; i++)
                sum[i] += sA[ty + block_size_y * i][kb] * sB[kb][tx];
    }}
    for (int i = 0; i < tile_size_y; i++)
        C[(y + block_size_y * i) * WIDTH + x] = sum[i];
}}
"""
PARAMS = {"block_size_x": [8, 16, 32], "block_size_y": [1, 2, 4, 8, 16, 32],
          "tile_size_y": [1, 2, 4, 8]}
RESTRICT = ["block_size_x == block_size_y * tile_size_y"]
PATHS = ("plain", "clmagic")
RUNS = ("first", "second")
#: every cache a run can fill, each pointed at the repeat's own folder
CACHE_VARS = {"CLMAGIC_CACHE_DIR": "clmagic", "XDG_CACHE_HOME": "xdg", "POCL_CACHE_DIR": "pocl",
              "CUDA_CACHE_PATH": "cuda"}
FACTS = ("work_group_size", "local_mem", "private_mem", "registers", "spills",
         "clmagic_outcome")


# -- the child: one tune in a fresh process --------------------------------------------------


def child(path: str, platform_index: int, device_index: int, width: int, facts: bool) -> dict:
    """One tune; what it took, as JSON-ready data."""
    import kernel_tuner
    import numpy as np
    from kernel_tuner import tune_kernel

    observers, options = [], []
    if path == "clmagic":
        import clmagic

        clmagic.install()
        if facts:
            from clmagic.kernel_tuner import FactsObserver

            observers = [FactsObserver()]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((width, width), np.float32)
    b = rng.standard_normal((width, width), np.float32)
    if facts and "NVIDIA" in _platform_name(platform_index):
        options = ["-cl-nv-verbose"]  # NVIDIA prints registers and spills only then
    t = time.perf_counter()
    results, env = tune_kernel(
        "matmul_kernel", MATMUL.format(width=width), (width, width),
        [np.zeros_like(a), a, b], PARAMS, restrictions=RESTRICT,
        grid_div_y=["block_size_y", "tile_size_y"], answer=[a @ b, None, None],
        atol=1e-3 * width, lang="OpenCL", platform=platform_index, device=device_index,
        compiler_options=options, observers=observers or None, quiet=True, cache=None)
    tune_s = time.perf_counter() - t
    out = {"tune_s": tune_s, "compile_ms": env["total_compile_time"],
           "configs": len(results), "errors": sum("__error__" in r for r in results),
           "device": env["device_name"], "platform": env["platform_name"],
           "kernel_tuner": kernel_tuner.__version__,
           "driver": env["driver_version"]}
    if path == "clmagic":
        out["outcomes"] = [str(r.outcome) for r in clmagic.get_compiler().history.records]
    if facts:
        out["facts"] = [{k: r.get(k) for k in ("block_size_x", "block_size_y", "tile_size_y",
                                               "compile_time", *FACTS)} for r in results]
    return out


def _platform_name(index: int) -> str:
    import pyopencl as cl

    return str(cl.get_platforms()[index].name)


# -- the parent: repeats, alternating paths -----------------------------------------------------


def _env(folder: str, driver_cache: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({var: str(Path(folder) / sub) for var, sub in CACHE_VARS.items()})
    env["POCL_KERNEL_CACHE"] = "1" if driver_cache == "on" else "0"
    env["CUDA_CACHE_DISABLE"] = "0" if driver_cache == "on" else "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE.parent),
                                                      os.environ.get("PYTHONPATH")]))
    return env


def _run(path: str, args: argparse.Namespace, env: dict[str, str], facts: bool = False) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", path, "--width",
           str(args.width), "--indexes", args.indexes] + (["--facts"] if facts else [])
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{path} run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out: dict = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    return out


def measure(args: argparse.Namespace, driver_cache: str) -> dict[str, dict[str, list[dict]]]:
    """``--repeats`` pairs of runs per path, each pair on empty caches of its own."""
    runs: dict[str, dict[str, list[dict]]] = {p: {r: [] for r in RUNS} for p in PATHS}
    for i in range(args.repeats):
        for path in PATHS if i % 2 == 0 else PATHS[::-1]:
            with tempfile.TemporaryDirectory(prefix="clmagic-bench-tune-") as folder:
                env = _env(folder, driver_cache)
                for run in RUNS:
                    runs[path][run].append(_run(path, args, env))
    return runs


def facts_pair(args: argparse.Namespace, driver_cache: str) -> dict[str, list[dict]]:
    """The observer's columns from a first (MISS) and a second (HIT) clmagic run."""
    with tempfile.TemporaryDirectory(prefix="clmagic-bench-tune-facts-") as folder:
        env = _env(folder, driver_cache)
        return {run: _run("clmagic", args, env, facts=True)["facts"] for run in RUNS}


def summarise(runs: dict[str, dict[str, list[dict]]]) -> dict:
    """Medians per path and run, and whether every second clmagic run was served whole."""
    med = {p: {r: {m: statistics.median(x[m] for x in runs[p][r])
                   for m in ("compile_ms", "tune_s", "process_s")} for r in RUNS}
           for p in PATHS}
    second = [set(x["outcomes"]) for x in runs["clmagic"]["second"]]
    return {"median": med, "clmagic_second_served": all(s <= {"HIT", "MEMORY"} for s in second),
            "errors": sum(x["errors"] for p in PATHS for r in RUNS for x in runs[p][r])}


# -- reporting -------------------------------------------------------------------------------


def _table(cache: str, summary: dict, runs: dict) -> list[str]:
    med = summary["median"]
    lines = [f"### driver caches {cache}", "",
             "| median | plain first | plain second | clmagic first | clmagic second |",
             "|---|---|---|---|---|"]
    rows = (("compile time (Kernel Tuner's, all configurations)", "compile_ms", 1, "ms"),
            ("tune_kernel wall time", "tune_s", 1000, "ms"),
            ("whole process (with imports)", "process_s", 1000, "ms"))
    for label, m, scale, unit in rows:
        cells = [f"{med[p][r][m] * scale:.0f} {unit}" for p in PATHS for r in RUNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    outs = ["—", "—"] + [", ".join(f"{n} {o}" for o, n in sorted(_counts(
        runs["clmagic"][r][0]["outcomes"]).items())) for r in RUNS]
    lines.append("| clmagic's outcomes (first repeat) | " + " | ".join(outs) + " |")
    ratio = {m: med["plain"]["second"][m] / max(med["clmagic"]["second"][m], 1e-9)
             for m in ("compile_ms", "tune_s")}
    return lines + ["", f"Second run, plain / clmagic: compile time {ratio['compile_ms']:.1f}×, "
                    f"tune_kernel {ratio['tune_s']:.1f}×. One build more than configurations: "
                    f"Kernel Tuner builds its first configuration twice (a warm-up, then the "
                    f"measured build); through clmagic the second is a HIT, or a MISS again "
                    f"while the first one's save is under way (the hook waits for none).", ""]


def _counts(items: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for x in items:
        found[x] = found.get(x, 0) + 1
    return found


def _facts_table(facts: dict[str, list[dict]]) -> list[str]:
    cols = ("block_size_x", "block_size_y", "tile_size_y", *FACTS)
    lines = ["### FactsObserver's columns, first run (MISS) / second run (HIT)", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    def cell(x: object) -> str:
        return "—" if x is None else str(x)

    for a, b in zip(facts["first"], facts["second"], strict=True):
        lines.append("| " + " | ".join(cell(a.get(c)) if a.get(c) == b.get(c)
                                       else f"{cell(a.get(c))} / {cell(b.get(c))}"
                                       for c in cols) + " |")
    return lines + ["registers and spills: NVIDIA's ptxas report (a build with "
                    "`-cl-nv-verbose`); — elsewhere.", ""]


def markdown(res: dict) -> str:
    first = next(iter(res["caches"].values()))["runs"]["plain"]["first"][0]
    v = res["versions"]
    lines = [f"# A Kernel Tuner re-tune, plain and through clmagic — {first['device']}", "",
             f"- machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, "
             f"{res['machine']['os']}; {first['platform']}, driver {first['driver']}",
             "- versions: " + ", ".join(f"{k} {v[k]}" for k in sorted(v)) +
             f"; clmagic {res['commit']}",
             f"- tiled matmul {res['width']}², {first['configs']} configurations (brute force, "
             f"every output checked against numpy), {res['repeats']} repeats of each pair of "
             f"fresh processes (first: every cache empty; second: warm), paths alternating",
             ""]
    skipped = {c: p["summary"]["errors"] for c, p in res["caches"].items()
               if p["summary"]["errors"]}
    if skipped:
        lines[-1:-1] = [f"- configurations Kernel Tuner skipped (too large for the device), all "
                        f"runs together: {skipped}"]
    for cache, part in res["caches"].items():
        lines += _table(cache, part["summary"], part["runs"])
    if res.get("facts"):
        lines += _facts_table(res["facts"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="pocl", help='"P:D" or part of the platform/device name')
    ap.add_argument("--driver-cache", choices=("on", "off", "both"), default="on")
    ap.add_argument("--width", type=int, default=256, help="matrix size (a multiple of 32)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--label", default=None, help="results file suffix (default: none written)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--child", choices=PATHS, help=argparse.SUPPRESS)
    ap.add_argument("--indexes", help=argparse.SUPPRESS)
    ap.add_argument("--facts", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.width % 32:
        ap.error("--width must be a multiple of 32 (the largest block)")
    if args.child:
        p, d = (int(x) for x in args.indexes.split(":"))
        print(json.dumps(child(args.child, p, d, args.width, args.facts)))
        return 0
    sys.path.insert(0, str(HERE.parent))
    from bench_hook import _commit, _machine, _versions

    from clmagic.opencl.devices import resolve_device

    args.indexes = resolve_device(args.device)[0].spec
    caches = ("on", "off") if args.driver_cache == "both" else (args.driver_cache,)
    res: dict = {"width": args.width, "repeats": args.repeats, "machine": _machine(),
                 "versions": _versions(), "commit": _commit(), "caches": {}}
    for cache in caches:
        runs = measure(args, cache)
        res["caches"][cache] = {"runs": runs, "summary": summarise(runs)}
    res["facts"] = facts_pair(args, caches[0])
    res["versions"]["kernel_tuner"] = next(iter(res["caches"].values()))["runs"]["plain"][
        "first"][0]["kernel_tuner"]
    text = markdown(res)
    print(text)
    if args.label:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"tune-{args.label}.json").write_text(json.dumps(res, indent=1))
        (out / f"tune-{args.label}.md").write_text(text)
    return 0 if all(p["summary"]["clmagic_second_served"] for p in res["caches"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
