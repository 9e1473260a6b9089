"""clmagic against the bare driver and pyopencl, on real kernels, in one run.

    python benchmarks/bench_build.py --device pocl --label pocl-zen5

For every kernel of the corpora (see corpus.py), on one device, each timing in its own role:

- ``cold``   bare driver build from source, driver caches off (POCL_KERNEL_CACHE=0,
             CUDA_CACHE_DISABLE=1); ``miss``: clmagic MISS (build + binary readout + save),
             alternating with ``cold`` in the same process, each on a source made unique by a
             comment so nothing is reused;
- ``hit``    clmagic HIT from disk in a fresh process, alternating with ``bare``: the driver
             loading the same binary without clmagic (program from binary + build + kernels);
- ``memory`` clmagic HIT from memory;
- ``pyopencl`` pyopencl's default ``Program(ctx, src).build()`` in a fresh process, its own and
             the driver's caches on and warmed by an earlier process;
- ``magic``  ``%%clkernel`` end to end in an InteractiveShell (disk HIT, fresh process), and
             ``cell``: the same cell under a cell magic that does nothing (IPython's own cost).

Prints a table of medians and ratios and writes JSON (+ a markdown summary) under
benchmarks/results/.
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
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

COLD_ENV = {"POCL_KERNEL_CACHE": "0", "CUDA_CACHE_DISABLE": "1"}


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


def _unique(source: str, rep: int) -> str:
    """The source made unique per repeat and per run, in its code (a comment alone would be
    REKEYED, and a driver cache that is on could know it from an earlier run); ends with a
    newline as a %%clkernel cell body does."""
    run = os.environ.get("CLMAGIC_BENCH_RUN", "0")
    # the source's own checksum too: two generated sources that differ in comments only would
    # otherwise be one code (REKEYED, not the MISS measured)
    tag = f"{run}_{rep}_{zlib.crc32(source.encode())}"
    return f"#define CLMAGIC_BENCH_{tag} 1\n{source.rstrip()}\n"


def _device(spec):
    import clmagic

    info, dev = clmagic.resolve_device(spec)
    return info, dev


# -- roles (each runs in its own process) ---------------------------------------------------------

def role_prepare(args, work: Path) -> None:
    import pyopencl as cl
    from corpus import pyopencl_kernels, size_sweep, wheel_kernels

    info, dev = _device(args.device)
    ctx = cl.Context([dev])

    def builds(src: str, opts: str) -> bool:
        try:
            cl._cl._Program(ctx, src)._build(options=opts.encode(), devices=[dev])
            return True
        except cl.Error:
            return False

    corpus_dir = Path(args.corpus_dir) if args.corpus_dir else None
    real, skipped = wheel_kernels(builds, corpus_dir)
    real = [k for k in real if len(k.source) <= args.max_bytes]
    step = max(1, -(-len(real) // args.max_real)) if args.max_real else len(real) + 1
    kernels = real[::step] + pyopencl_kernels(ctx) + size_sweep()  # an even sample of real ones
    (work / "corpus.json").write_text(json.dumps({
        "kernels": [k.__dict__ for k in kernels], "skipped": skipped,
        "device": info.__dict__, "label": info.label,
    }))


def _load(work: Path) -> list[dict]:
    return json.loads((work / "corpus.json").read_text())["kernels"]


def _launcher(ctx, queue, kernel: dict):
    """For the size sweep (whose kernels take ``(float *a, const float *b, float s)``): a
    function timing the first launch of ``k0`` of a program, to its end; else ``None``."""
    if kernel["corpus"] != "sweep":
        return None
    import numpy as np
    import pyopencl as cl

    n = 1 << 16
    a = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * n)
    b = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 4 * n)

    def launch(k0) -> float:
        t0 = time.perf_counter()
        k0(queue, (n,), None, a, b, np.float32(1.5))
        queue.finish()
        return _ms(t0)
    return launch


def role_cold_miss(args, work: Path) -> dict:
    import pyopencl as cl

    import clmagic
    from clmagic.config import Settings

    info, dev = _device(args.device)
    compiler = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(work / "cache")}))
    flush = getattr(compiler, "flush", lambda: None)
    ctx, queue = clmagic.opencl.devices.context_for(info, dev)
    cl._cl._Program(ctx, "__kernel void warm(__global int *a) { a[0] = 1; }")._build(
        options=b"", devices=[dev])
    out = {}
    for k in _load(work):
        rec = out.setdefault(k["name"], {"cold": [], "readout": [], "miss": [], "memory": [],
                                         "launch_cold": [], "launch_miss": []})
        launch = _launcher(ctx, queue, k)
        for rep in range(args.repeats):
            src = _unique(k["source"], rep)
            order = ("cold", "miss") if rep % 2 == 0 else ("miss", "cold")
            for what in order:
                if what == "cold":
                    t0 = time.perf_counter()
                    prg = cl._cl._Program(ctx, "// cold\n" + src)
                    prg._build(options=clmagic.key.options.parse_options(k["options"]).effective
                               .encode(), devices=[dev])
                    kernels = prg.all_kernels()
                    rec["cold"].append(_ms(t0))
                    if launch:  # the user's first launch, without clmagic
                        rec["launch_cold"].append(launch(
                            next(x for x in kernels if x.function_name == "k0")))
                    t0 = time.perf_counter()  # what a cache must add: the binary readout
                    prg.get_info(cl.program_info.BINARIES)
                    rec["readout"].append(_ms(t0))
                else:
                    t0 = time.perf_counter()  # as the user waits: the save may be pending
                    r = compiler.build(src, k["options"], info)
                    ms = _ms(t0)
                    if r.outcome != "MISS":  # not what is measured here: say so, go on
                        print(f"{k['name']}: {r.outcome}, not MISS", file=sys.stderr)
                        continue
                    rec["miss"].append(ms)
                    if launch:  # the first launch, while clmagic reads out and saves
                        rec["launch_miss"].append(launch(r.kernels["k0"]))
                    flush()  # untimed: the next timing does not share the CPU with this save
            t0 = time.perf_counter()
            assert compiler.build(src, k["options"], info).outcome == "MEMORY"
            rec["memory"].append(_ms(t0))
    return out


def role_hit_bare(args, work: Path) -> dict:
    import pyopencl as cl

    import clmagic
    from clmagic.config import Settings

    info, dev = _device(args.device)
    settings = Settings.from_env({"CLMAGIC_CACHE_DIR": str(work / "cache")})
    compiler = clmagic.Compiler(settings)
    keyer = clmagic.Compiler(settings, store=None)  # so the timed HIT prepares its source
    ctx, _ = clmagic.opencl.devices.context_for(info, dev)
    out = {}
    for k in _load(work):
        rec = out.setdefault(k["name"], {"hit": [], "bare": []})
        opts = clmagic.key.options.parse_options(k["options"])
        for rep in range(args.repeats):
            src = _unique(k["source"], rep)
            key = keyer.key(src, k["options"], info)
            binary = compiler.store.get(info.fingerprint, key).binary
            # untimed: the driver's first load of a binary in a process (its own JIT cache
            # lookup) would otherwise land on whichever of the two goes first
            warm = cl._cl._Program(ctx, [dev], [binary])
            warm._build(options=opts.effective.encode(), devices=[dev])
            order = ("hit", "bare") if rep % 2 == 0 else ("bare", "hit")
            for what in order:
                t0 = time.perf_counter()
                if what == "hit":
                    r = compiler.build(src, k["options"], info)
                    rec["hit"].append(_ms(t0))
                    assert r.outcome == "HIT", r.outcome
                else:
                    prg = cl._cl._Program(ctx, [dev], [binary])
                    prg._build(options=opts.effective.encode(), devices=[dev])
                    prg.all_kernels()
                    rec["bare"].append(_ms(t0))
    return out


def role_pyopencl(args, work: Path) -> dict:
    import pyopencl as cl

    info, dev = _device(args.device)
    ctx = cl.Context([dev])
    out = {}
    for k in _load(work):
        rec = out.setdefault(k["name"], {"pyopencl": []})
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            prg = cl.Program(ctx, _unique(k["source"], rep)).build(options=k["options"].split())
            prg.all_kernels()
            rec["pyopencl"].append(_ms(t0))
    return out


def role_magic(args, work: Path) -> dict:
    from IPython.core.interactiveshell import InteractiveShell

    import clmagic
    from clmagic.config import Settings
    from clmagic.ipython.magics import CLMagics

    info, _ = _device(args.device)
    shell = InteractiveShell.instance()
    compiler = clmagic.Compiler(Settings.from_env({"CLMAGIC_CACHE_DIR": str(work / "cache")}))
    shell.register_magics(CLMagics(shell=shell, compiler=compiler))
    shell.register_magic_function(lambda line, cell: None, "cell", "noop")
    out = {}
    for k in _load(work):
        rec = out.setdefault(k["name"], {"magic": [], "cell": []})
        for rep in range(args.repeats):
            opts = f" --opts {k['options']}" if k["options"].strip() else ""
            cell = f"%%clkernel --quiet --device {info.spec}{opts}\n" + _unique(k["source"], rep)
            t0 = time.perf_counter()
            res = shell.run_cell(cell, silent=True)
            rec["magic"].append(_ms(t0))
            assert res.success, res.error_in_exec
            t0 = time.perf_counter()  # what IPython itself costs for the same cell
            shell.run_cell(cell.replace("%%clkernel", "%%noop", 1), silent=True)
            rec["cell"].append(_ms(t0))
    return out


ROLES = {"prepare": role_prepare, "cold_miss": role_cold_miss, "hit_bare": role_hit_bare,
         "pyopencl": role_pyopencl, "magic": role_magic}


# -- orchestration --------------------------------------------------------------------------------

def _child(role: str, args, work: Path, env: dict[str, str]) -> dict:
    cmd = [sys.executable, __file__, "--role", role, "--work", str(work), "--device",
           args.device or "", "--repeats", str(args.repeats), "--max-real", str(args.max_real),
           "--max-bytes", str(args.max_bytes)]
    if args.corpus_dir:
        cmd += ["--corpus-dir", args.corpus_dir]
    proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"role {role} failed:\n{proc.stderr[-4000:]}")
    path = work / f"{role}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _machine() -> dict:
    """CPU model and family, cores, OS and Python of this machine."""
    info = {"python": platform.python_version(), "cores": os.cpu_count(),
            "os": platform.platform(terse=True)}
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu"] = f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')})"
    except OSError:
        info["cpu"] = platform.machine()
    return info


def import_overhead(repeats: int = 7) -> dict:
    """Median ms, in a fresh IPython, of ``import pyopencl``, of ``%load_ext clmagic`` alone
    (it imports no pyopencl until a cell needs it) and of both; ``difference``: what
    ``%load_ext`` adds to ``import pyopencl``."""
    pre = "import time\nfrom IPython.core.interactiveshell import InteractiveShell\n" \
          "ip = InteractiveShell.instance()\nt = time.perf_counter()\n"
    load = "ip.run_line_magic('load_ext', 'clmagic')\n"
    codes = {"import_pyopencl": pre + "import pyopencl\n", "load_ext_alone": pre + load,
             "load_ext": pre + "import pyopencl\n" + load}
    res = {}
    for name, code in codes.items():
        runs = []
        for _ in range(repeats):
            p = subprocess.run([sys.executable, "-c", code + "print((time.perf_counter()-t)*1000)"],
                               capture_output=True, text=True, check=True,
                               env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                   [str(HERE.parent), os.environ.get("PYTHONPATH", "")])})
            runs.append(float(p.stdout.strip().splitlines()[-1]))
        res[name] = statistics.median(runs)
    res["difference"] = res["load_ext"] - res["import_pyopencl"]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--label", default=None, help="results file name (default: device label)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-real", type=int, default=1000,
                    help="at most this many silx/pyFAI kernels, sampled evenly (POCL is slow)")
    ap.add_argument("--max-bytes", type=int, default=1 << 30,
                    help="leave out silx/pyFAI sources longer than this (POCL's binary readout "
                         "compiles every kernel: minutes for the 100 KB ones)")
    ap.add_argument("--corpus-dir", default=None, help="unpacked .cl tree (no PyPI needed)")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--driver-cache", choices=("off", "on"), default="off",
                    help="driver caches (POCL_KERNEL_CACHE, CUDA's JIT cache) in the clmagic roles")
    ap.add_argument("--role", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.device = args.device or None
    if args.role:
        work = Path(args.work)
        result = ROLES[args.role](args, work)
        if result is not None:
            (work / f"{args.role}.json").write_text(json.dumps(result))
        return 0

    from report_build import summarise, write_results

    work = Path(tempfile.mkdtemp(prefix="clmagic-bench-"))
    os.environ["CLMAGIC_BENCH_RUN"] = f"{os.getpid()}_{int(time.time())}"  # for the children
    warm_env = {"POCL_KERNEL_CACHE": "1", "CUDA_CACHE_DISABLE": "0"}
    t0 = time.perf_counter()
    ours = COLD_ENV if args.driver_cache == "off" else warm_env
    _child("prepare", args, work, ours)
    timings: dict[str, dict] = {}
    for role, env in (("cold_miss", ours), ("hit_bare", ours), ("magic", ours),
                      ("pyopencl", warm_env), ("pyopencl", warm_env)):
        for name, rec in _child(role, args, work, env).items():
            timings.setdefault(name, {}).update(rec)  # the 2nd pyopencl run (warm) wins
    corpus = json.loads((work / "corpus.json").read_text())
    (work / "timings.json").write_text(json.dumps(timings))
    try:
        imports = import_overhead()
    except subprocess.CalledProcessError as exc:  # keep the build timings all the same
        print(f"import timing failed: {exc.stderr[-500:]}", file=sys.stderr)
        imports = {"load_ext": float("nan"), "import_pyopencl": float("nan"),
                   "load_ext_alone": float("nan"),
                   "difference": float("nan")}
    summary = summarise(corpus, timings, imports, args)
    summary["wall_s"] = round(time.perf_counter() - t0, 1)
    summary["driver_cache"] = args.driver_cache
    summary["machine"] = _machine()
    write_results(summary, Path(args.out), args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
