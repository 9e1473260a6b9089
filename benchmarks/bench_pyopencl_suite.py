"""pyopencl's own test files, plain against ``clmagic run``, in one run: the headline benchmark
of the hook (issue 33). Work no one here wrote: the files vendored in ``tests/data/pyopencl/``.

    python benchmarks/bench_pyopencl_suite.py --device portable --driver-cache on --label NAME

For each driver-cache setting (``on``: the driver's own cache warmed by an untimed plain run
first, as users have it; ``off``: ``POCL_KERNEL_CACHE=0`` / ``CUDA_CACHE_DISABLE=1``) it runs, in
fresh processes and in this order: **plain** (pyopencl's own path), **first** (``clmagic run``
with an empty clmagic cache) and **warm** (``clmagic run`` again on that cache); ``--repeats``
runs the three again, each round with a new empty cache. Each run is split by the plugin
``suite_phases.py`` into making contexts, inside ``Program.build``, and the rest. The same test
ids must pass and fail alike (pytest's junit xml), and differences are listed.

The ratios are against plain's wall time of the same round; the **floor** is plain's wall less
its time inside ``Program.build`` (what no cache can take away). A counting pass (``--count``,
untimed: it holds a reference to every context to read its reference count) says how many
earlier contexts are still alive when each new one is made, plain and under the hook.

Writes ``results/suite-real-NAME.json`` and ``.md`` (machine, versions, commit).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_hook import _commit, _machine, _versions  # noqa: E402

VENDORED = ROOT / "tests" / "data" / "pyopencl"
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-p",
          "suite_phases", "--rootdir", "."]
CACHES = {"on": {}, "off": {"POCL_KERNEL_CACHE": "0", "CUDA_CACHE_DISABLE": "1"}}
KINDS = ("plain", "first", "warm")


def _outcomes(xml: Path) -> dict[str, str]:
    seen = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        seen[f"{case.get('classname')}::{case.get('name')}"] = (
            "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags
            else "passed")
    return seen


def _run(folder: Path, kind: str, env: dict[str, str], files: list[str],
         extra: list[str], count: bool = False) -> dict:
    """One run of the files: the plugin's phases, the process's wall time, the outcomes."""
    out, xml = folder / f"{kind}.json", folder / f"{kind}.xml"
    env = {**env, "SUITE_PHASES_OUT": str(out), "SUITE_PHASES_COUNT": "1" if count else "0"}
    tests = [*PYTEST, *extra, f"--junitxml={xml}", *files]
    cmd = [sys.executable, *(["-m", "clmagic", "run"] if kind != "plain" else []), *tests]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if not out.exists():
        raise SystemExit(f"{kind}: exit {proc.returncode}\n{proc.stdout[-2000:]}"
                         f"{proc.stderr[-2000:]}")
    res = json.loads(out.read_text())
    res.update(process_s=wall, outcomes=_outcomes(xml))
    res["rest_s"] = res["wall_s"] - res["context_s"] - res["build_s"]
    return res


def _round(folder: Path, env: dict[str, str], files: list[str], extra: list[str],
           count: bool = False) -> dict[str, dict]:
    """plain, first and warm, the clmagic cache emptied before first."""
    cache = Path(env["CLMAGIC_CACHE_DIR"])
    shutil.rmtree(cache, ignore_errors=True)
    runs = {}
    for kind in KINDS:
        runs[kind] = _run(folder, kind, env, files, extra, count)
        print(f"  {kind:<6} wall {runs[kind]['wall_s']:7.1f} s  contexts "
              f"{runs[kind]['context_s']:6.1f} s  build {runs[kind]['build_s']:6.1f} s  "
              f"({runs[kind]['builds']} builds, {len(runs[kind]['outcomes'])} tests)"
              + (f"  alive mean {statistics.fmean(runs[kind]['alive'] or [0]):.2f} max "
                 f"{max(runs[kind]['alive'] or [0])}" if count else ""), flush=True)
    return runs


def _differences(runs: dict[str, dict]) -> dict[str, dict[str, tuple[str, str]]]:
    plain = runs["plain"]["outcomes"]
    out = {}
    for kind in ("first", "warm"):
        other = runs[kind]["outcomes"]
        out[kind] = {t: (plain.get(t, "-"), other.get(t, "-"))
                     for t in sorted(set(plain) | set(other)) if plain.get(t) != other.get(t)}
    return out


def _ratios(rounds: list[dict[str, dict]]) -> dict[str, float]:
    def med(f: object) -> float:
        return statistics.median(f(r) for r in rounds)  # type: ignore[operator]
    floor = med(lambda r: r["plain"]["wall_s"] - r["plain"]["build_s"])
    plain = med(lambda r: r["plain"]["wall_s"])
    return {"first/plain": med(lambda r: r["first"]["wall_s"] / r["plain"]["wall_s"]),
            "warm/plain": med(lambda r: r["warm"]["wall_s"] / r["plain"]["wall_s"]),
            "warm/floor": med(lambda r: r["warm"]["wall_s"]) / floor,
            "floor/plain": floor / plain}


def markdown(res: dict) -> str:
    lines = [f"# pyopencl's own tests, plain vs `clmagic run` ({res['label']})", "",
             f"Machine: {res['machine']}; device {res['device']}; versions {res['versions']}; "
             f"clmagic {res['commit']}; files {', '.join(res['files'])}.", ""]
    for cache, block in res["caches"].items():
        lines += [f"## driver cache {cache}", "",
                  "| run | round | wall s | contexts s | in build s | rest s | builds | "
                  "alive at a new context (mean/max) |", "|---|---|---|---|---|---|---|---|"]
        for i, rnd in enumerate(block["rounds"]):
            for kind in KINDS:
                r = rnd[kind]
                alive = block.get("alive", {}).get(kind)
                lines.append(f"| {kind} | {i + 1} | {r['wall_s']:.1f} | {r['context_s']:.1f} | "
                             f"{r['build_s']:.1f} | {r['rest_s']:.1f} | {r['builds']} | "
                             + (f"{alive[0]:.2f} / {alive[1]}" if alive else "") + " |")
        lines += ["", "Ratios (median over rounds): " + ", ".join(
            f"{k} **{v:.2f}**" for k, v in block["ratios"].items()), "",
                  f"Outcomes that differ from plain: {block['differences']}", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="portable", help="PYOPENCL_TEST (pyopencl's tests)")
    ap.add_argument("--files", nargs="+", default=["test_array.py", "test_algorithm.py"])
    ap.add_argument("--driver-cache", nargs="+", choices=list(CACHES), default=["on"])
    ap.add_argument("--repeats", type=int, default=1, help="timed rounds (0: count only)")
    ap.add_argument("--count", action="store_true", help="and a counting pass (untimed)")
    ap.add_argument("--deselect", nargs="*", default=[], help="test ids left out")
    ap.add_argument("-k", dest="keyword", default="", help="pytest's -k (a subset)")
    ap.add_argument("--label", default="local")
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="suite-"))
    for name in args.files:
        shutil.copy(VENDORED / name, work / name)
    env = {k: v for k, v in os.environ.items() if k not in ("POCL_KERNEL_CACHE",
                                                            "CUDA_CACHE_DISABLE")}
    env.update(PYOPENCL_TEST=args.device, CLMAGIC_CACHE_DIR=str(work / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), str(ROOT),
                                                        env.get("PYTHONPATH")])))
    env.pop("PYTEST_ADDOPTS", None)
    extra = [f"--deselect={d}" for d in args.deselect] + (["-k", args.keyword]
                                                          if args.keyword else [])
    res: dict = {"label": args.label, "machine": _machine(), "versions": _versions(),
                 "commit": _commit(), "device": args.device, "files": args.files, "caches": {}}
    for cache in args.driver_cache:
        cenv = {**env, **CACHES[cache]}
        print(f"driver cache {cache}", flush=True)
        if cache == "on":  # the driver's own cache warm for pyopencl's path, as users have it
            _run(work, "plain", cenv, args.files, extra)
        rounds = [_round(work, cenv, args.files, extra) for _ in range(args.repeats)]
        block = {"rounds": [{k: {f: v for f, v in r.items() if f != "outcomes"}
                             for k, r in rnd.items()} for rnd in rounds],
                 "ratios": _ratios(rounds) if rounds else {},
                 "differences": _differences(rounds[0]) if rounds else {}}
        if args.count:
            counted = _round(work, cenv, args.files, extra, count=True)
            block["alive"] = {k: (statistics.fmean(r["alive"] or [0]), max(r["alive"] or [0]))
                              for k, r in counted.items()}
        print("  ratios " + ", ".join(f"{k} {v:.2f}" for k, v in block["ratios"].items()))
        res["caches"][cache] = block
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"suite-real-{args.label}.json").write_text(json.dumps(res, indent=1))
    (out / f"suite-real-{args.label}.md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
