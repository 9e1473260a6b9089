"""clmagic's own time per hook HIT, this tree against a baseline tree, alternating in one run (a
ratio taken where the host's speed is the same for both: the GPU hosts lent here differ by
up to 2x from call to call, and one host drifts between slow and fast spells).

    git archive dc4fd16 clmagic | tar -x -C /tmp/base        # the baseline's package
    python benchmarks/ab_hit.py --base /tmp/base --device pocl --label pocl31-xeon [--pairs 6]

Each side is a child process, the sides alternating ``--pairs`` times. A child builds
pyopencl's generated programs (benchmarks/corpus.py) once through the hook, then makes each a
HIT ``--repeats`` times as in a new process (memory, prepared sources and the entries kept in
memory forgotten; the manifest as read once), and times ``Program.build`` less the driver's two
calls inside it (``clCreateProgramWithBinary``, ``clBuildProgram``): what clmagic adds to the
load, as it runs right after the driver's work. Per child: the mean over programs of each
program's median. Writes ``results/ab-hit-LABEL.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def child(device: str, repeats: int) -> tuple[float, str]:
    """The mean over programs of each one's median own µs per hook HIT, in this process, and
    the device's name."""
    import tempfile

    import pyopencl as cl
    from corpus import pyopencl_kernels

    import clmagic
    from clmagic.config import Settings
    from clmagic.opencl import pyopencl_program as internals

    info, dev = clmagic.resolve_device(device)
    ctx, _ = clmagic.opencl.devices.context_for(info, dev)
    kernels = pyopencl_kernels(ctx)
    comp = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": tempfile.mkdtemp()}))
    clmagic.install(comp)
    in_driver = [0.0]
    for name in ("raw_from_binaries", "bare_build"):
        inner = getattr(internals, name)

        def timed(*a: Any, _inner: Any = inner, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return _inner(*a, **kw)
            finally:
                in_driver[0] += time.perf_counter() - t

        setattr(internals, name, timed)
    for k in kernels:  # the MISSes, saved
        cl.Program(ctx, k.source).build(options=k.options.split())
    comp.flush()
    own: dict[str, list[float]] = {k.name: [] for k in kernels}
    for _ in range(repeats):
        for k in kernels:
            comp.forget()
            comp.state.forget_prepared(manifest=False)
            store = comp.state.store  # the state's: waits for no saver (see profile_hit)
            if store is not None:
                store.close()
            prg, opts = cl.Program(ctx, k.source), k.options.split()
            in_driver[0] = 0.0
            t = time.perf_counter()
            prg.build(options=opts)
            own[k.name].append(time.perf_counter() - t - in_driver[0])
            if str(comp.state.history.records[-1].outcome) != "HIT":
                raise SystemExit(f"{k.name}: not a HIT")
    return statistics.mean(statistics.median(v) for v in own.values()) * 1e6, info.label


def run_side(root: Path, args: argparse.Namespace) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(HERE)])}
    out = subprocess.run([sys.executable, __file__, "--child", "--device", args.device,
                          "--repeats", str(args.repeats)], env=env, capture_output=True,
                         text=True, check=True, timeout=600)
    us, label = out.stdout.strip().splitlines()[-1].split(" ", 1)
    return float(us), label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, help="a folder holding the baseline's clmagic/")
    ap.add_argument("--device", default="pocl")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--label", default="local")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        us, label = child(args.device, args.repeats)
        print(f"{us:.2f} {label}")
        return
    if args.base is None or not (args.base / "clmagic").is_dir():
        raise SystemExit("ab_hit: --base must be a folder holding the baseline's clmagic/")
    pairs, label = [], ""
    for i in range(args.pairs):  # the order flips each pair: neither side always goes first
        sides = [("base", args.base), ("this", HERE.parent)][:: 1 if i % 2 == 0 else -1]
        got = {}
        for name, root in sides:
            got[name], label = run_side(root, args)
        pairs.append(got)
        print(f"pair {i + 1}: base {got['base']:.1f} µs, this {got['this']:.1f} µs", flush=True)
    write(args, pairs, label)


def write(args: argparse.Namespace, pairs: list[dict[str, float]], label: str) -> None:
    from bench_hook import _commit, _machine, _versions

    ratios = [p["this"] / p["base"] for p in pairs]
    res = {"device": label, "pairs": pairs, "ratios": ratios,
           "median_ratio": statistics.median(ratios), "repeats": args.repeats,
           "machine": _machine(), "versions": _versions(),
           "commit": _commit(), "base": str(args.base)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"ab-hit-{args.label}.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# clmagic's own µs per hook HIT: this tree against {args.base.name}",
             "", f"- device {label}; machine: {res['machine']}",
             f"- versions: {res['versions']}; clmagic {res['commit']} against {args.base}",
             f"- {len(pairs)} pairs of child processes, alternating; each child: the mean over "
             f"pyopencl's generated programs of each one's median over {args.repeats} HITs",
             "", "| pair | base µs | this µs | this / base |", "|---|---|---|---|"]
    lines += [f"| {i + 1} | {p['base']:.1f} | {p['this']:.1f} | {r:.2f} |"
              for i, (p, r) in enumerate(zip(pairs, ratios, strict=True))]
    lines += ["", f"Median this / base: **{res['median_ratio']:.2f}**", ""]
    (args.out / f"ab-hit-{args.label}.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
