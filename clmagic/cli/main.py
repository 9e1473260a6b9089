"""The ``clmagic`` command: argparse subcommands over the library (``demo``, ``devices``,
``info``, ``run`` here; the cache commands in :mod:`clmagic.cli.commands`)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

from clmagic._format import wrapped
from clmagic._launch import launch
from clmagic.cli.argv import join_dash_values, unknown_command
from clmagic.cli.table import terminal_width

ORIGIN_HELP = ("only entries first built for MODULE: cell (%%%%clkernel, clmagic.build), a "
               "module that built through clmagic.install() (pyopencl.elementwise), or a "
               "package (pyopencl, silx)")

__all__ = ["main", "DEMO_SOURCE"]

DEMO_SOURCE = r"""
// A small n-body step plus saxpy: enough code that the driver's build time shows.
__kernel void saxpy(const float a, __global const float *x, __global float *y)
{
    const int i = get_global_id(0);
    y[i] = a * x[i] + y[i];
}

__kernel void nbody_step(__global const float4 *pos, __global const float4 *vel,
                         __global float4 *new_pos, __global float4 *new_vel,
                         const int n, const float dt, const float eps)
{
    const int i = get_global_id(0);
    float4 p = pos[i];
    float4 acc = (float4)(0.0f);
    for (int j = 0; j < n; ++j) {
        float4 d = pos[j] - p;
        d.w = 0.0f;
        float inv = rsqrt(dot(d, d) + eps * eps);
        acc += d * (pos[j].w * inv * inv * inv);
    }
    float4 v = vel[i] + acc * dt;
    new_vel[i] = v;
    new_pos[i] = (float4)(p.xyz + v.xyz * dt, p.w);
}
"""


def _demo_child(args: argparse.Namespace) -> int:
    import numpy as np
    import pyopencl as cl

    from clmagic.config import Settings
    from clmagic.trip.compiler import Compiler

    settings = Settings.from_env({**os.environ, "CLMAGIC_CACHE_DIR": args.cache_dir})
    compiler = Compiler(settings)
    result = compiler.build(DEMO_SOURCE, args.opts, args.device)
    x = np.arange(1024, dtype=np.float32)
    y = np.ones_like(x)
    mf = cl.mem_flags
    xb = cl.Buffer(result.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    yb = cl.Buffer(result.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
    result.kernels["saxpy"](result.queue, x.shape, None, np.float32(2.0), xb, yb)
    out = np.empty_like(y)
    cl.enqueue_copy(result.queue, out, yb)
    ok = bool(np.allclose(out, 2 * x + 1))
    from clmagic.show.line import result_text

    print(json.dumps({"line": result_text(result), "outcome": result.outcome, "ms": result.ms,
                      "build_ms": result.build_ms, "correct": ok}))
    return 0 if ok else 1


def _demo(args: argparse.Namespace) -> int:
    if args.cache_dir:
        return _demo_runs(args, args.cache_dir)
    with tempfile.TemporaryDirectory(prefix="clmagic-demo-") as cache_dir:
        return _demo_runs(args, cache_dir)


def _demo_runs(args: argparse.Namespace, cache_dir: str) -> int:
    env = {**os.environ, "POCL_KERNEL_CACHE": "0", "CUDA_CACHE_DISABLE": "1"}
    width = terminal_width()
    print("\n".join(wrapped(f"clmagic demo: cache at {cache_dir}",
                            ["(driver caches off);", "two separate processes"], width, 2, " ")))
    cmd = [_CHILD, "--cache-dir", cache_dir]
    if args.device:
        cmd += ["--device", args.device]
    cmd.append(f"--opts={args.opts}")
    runs = []
    for n in (1, 2):
        proc = launch("clmagic", cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = (b.decode("utf-8", "replace") for b in proc.communicate())
        sys.stderr.write(err)
        if proc.returncode != 0 or not out.strip():
            print(f"process {n} failed (exit {proc.returncode})", file=sys.stderr)
            return 1
        run = json.loads(out.strip().splitlines()[-1])
        runs.append(run)
        check = "result correct" if run["correct"] else "WRONG RESULT"
        first_part, *parts = str(run["line"]).split(" · ")  # the result line, at the width
        print("\n".join(wrapped(f"process {n}: {first_part}", [*parts, check], width, 11)))
    first, second = runs
    if (first["outcome"], second["outcome"]) != ("MISS", "HIT"):
        print("expected MISS then HIT", file=sys.stderr)
        return 1
    print("\n".join(wrapped(
        f"MISS built in {first['build_ms']:.1f} ms → HIT loaded in {second['ms']:.2f} ms:",
        [f"{first['build_ms'] / max(second['ms'], 1e-6):.0f}× faster from the cache"],
        width, 2, " ")))
    return 0


def _devices(args: argparse.Namespace) -> int:
    from clmagic.config import Settings
    from clmagic.errors import DeviceError
    from clmagic.opencl.devices import default_device, list_devices

    try:
        default: str | None = default_device(Settings.from_env().device)[0].fingerprint
    except DeviceError as exc:
        default = None
        print(f"clmagic: no default device: {exc}", file=sys.stderr)
    from clmagic.show.cache import device_lines

    width = terminal_width()
    for d in list_devices():
        print("\n".join(device_lines(d, "*" if d.fingerprint == default else " ",
                                      width=width)))
    return 0


def _info(args: argparse.Namespace) -> int:
    from clmagic.cache.manage import cache_info
    from clmagic.show.cache import info_text

    print(info_text(cache_info(), terminal_width()))
    return 0


def _run(args: argparse.Namespace) -> int:
    """Run a script (or ``-m`` module) as ``python`` would, every pyopencl build through the
    cache; its exit status is the command's."""
    import runpy

    from clmagic.errors import ClmagicError
    from clmagic.process.hook import install

    # the process's compiler: the script's own clmagic calls see it
    from clmagic.process.session import get_compiler

    target = args.target
    problem = _module_problem(target) if args.module else _script_problem(target)
    if problem:
        raise ClmagicError(problem)
    sys.argv = [target, *args.args]
    install(get_compiler)
    code: object = 0
    try:
        if args.module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    finally:
        if args.stats:
            from clmagic.cache.manage import stats
            from clmagic.show.views import text_of

            print(text_of(stats(get_compiler())), file=sys.stderr)
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _script_problem(path: str) -> str:
    """Why ``path`` cannot be run as a script ("" when it can): missing, or not a regular file
    (a FIFO would block the read, a folder holds no script)."""
    import stat

    from clmagic.store._fs import kind_of

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"no such script: {path}"
    except OSError as exc:
        return f"cannot read the script {path}: {exc.strerror}"
    return "" if stat.S_ISREG(mode) else f"{path} is {kind_of(mode)}, not a script"


def _module_problem(name: str) -> str:
    """Why ``python -m name`` would not start ("" when it would): no such module, or a package
    without ``__main__``. Found as runpy finds it (a parent package is imported); the module
    itself is not run here."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            if importlib.util.find_spec(f"{name}.__main__") is None:
                return f"{name} is a package with no __main__ module: cannot be run with -m"
    except (ImportError, ValueError) as exc:  # a parent that is missing, or not a package
        said = "" if "No module named" in str(exc) else f" ({exc})"
        return f"no module named {name}{said}"
    return "" if spec is not None else f"no module named {name}"


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", default=None, help="cache folder (default: a temp folder)")
    p.add_argument("--device", default=None, help='device spec, e.g. "pocl" or "0:0"')
    p.add_argument("--opts", default="-O3", help="build options (default: -O3)")


#: the demo's child process (``clmagic _demo-child``): parsed apart, so that no usage, help or
#: "invalid choice" message lists it
_CHILD = "_demo-child"


def build_parser() -> argparse.ArgumentParser:
    """The ``clmagic`` parser: one subcommand per task (handlers in :mod:`clmagic.cli.commands`)."""
    from clmagic._version import __version__

    parser = argparse.ArgumentParser(
        prog="clmagic", description="clmagic: OpenCL kernels through a persistent binary cache.",
        epilog="exit status: 0 done, 1 the work failed (in part), 2 bad input or usage")
    parser.add_argument("--version", action="version", version=f"clmagic {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _demo_arguments(sub.add_parser("demo", help="compile a kernel in two processes: MISS, "
                                                "then HIT"))
    sub.add_parser("devices", help="list OpenCL devices (* = default), and those that "
                   "cannot build here")
    sub.add_parser("info", help="where the cache is, settings in effect, devices")
    _add_run(sub.add_parser)
    _add_listing_commands(sub.add_parser)
    _add_file_commands(sub.add_parser)
    parser.set_defaults(commands=tuple(sub.choices))  # for the nearest one to a typo
    return parser


#: a subcommand's parser maker (``add_subparsers().add_parser``)
_Add = Callable[..., argparse.ArgumentParser]


def _add_run(add: _Add) -> None:
    """``clmagic run``: a script or module with every pyopencl build through the cache."""
    run = add("run", help="run a Python script with every pyopencl build through "
                                     "the cache: clmagic run SCRIPT [ARGS...]")
    run.add_argument("-m", dest="module", action="store_true",
                     help="run a module, as python -m does (clmagic run -m pkg.mod ARGS)")
    run.add_argument("--stats", action="store_true",
                     help="print this run's hits, misses and time saved to stderr at the end")
    run.add_argument("target", metavar="SCRIPT", help="the script (or, with -m, the module)")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


def _add_listing_commands(add: _Add) -> None:
    """The commands that show or remove what the cache holds: ``ls``, ``stats``, ``clear``,
    ``prune``."""
    ls = add("ls", help="the cached entries, most recently used first")
    ls.add_argument("--device", "-d", metavar="SPEC", help="only this device's entries")
    ls.add_argument("--origin", metavar="MODULE", help=ORIGIN_HELP)
    ls.add_argument("--sort", metavar="COLUMN", default="last_used",
                    help="column to sort by (numbers and times: largest first; default last_used)")
    fmt = ls.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="every column, as CSV")
    fmt.add_argument("--json", action="store_true", help="every column, as JSON records")

    stats = add("stats", help="hits, misses, evictions, time saved: this store's "
                                         "lifetime, per device")
    stats.add_argument("--zero", action="store_true", help="reset the lifetime statistics")
    stats.add_argument("--json", action="store_true", help="as JSON")

    clear = add("clear", help="remove entries (all of them when no filter is given)")
    clear.add_argument("keys", nargs="*", metavar="KEY_PREFIX", help="only keys starting so")
    clear.add_argument("--device", "-d", metavar="SPEC", help="only this device's entries")
    clear.add_argument("--older-than", metavar="AGE", help="only entries unused for AGE (7d)")
    clear.add_argument("--origin", metavar="MODULE", help=ORIGIN_HELP)
    clear.add_argument("--remote", action="store_true",
                       help="the team's shared store too (CLMAGIC_REMOTE, or a Redis cache)")
    clear.add_argument("--yes", "-y", action="store_true",
                       help="clear everything without asking (asked only on a terminal)")
    clear.add_argument("--json", action="store_true", help="say what was removed as JSON")

    prune = add("prune", help="evict least recently used entries down to a size, or "
                                         "entries unused for an age")
    prune.add_argument("--max-size", metavar="SIZE",
                       help="evict down to SIZE (500M, 2G; default: the cache's limit)")
    prune.add_argument("--older-than", metavar="AGE", help="evict entries unused for AGE (30d)")
    prune.add_argument("--json", action="store_true", help="say what was evicted as JSON")


def _add_file_commands(add: _Add) -> None:
    """The commands that move entries through files (``export``, ``import``, ``warm``) and
    ``config``."""
    export = add("export", help="write the cache (or a part) to a bundle file")
    export.add_argument("path", metavar="PATH", help="the bundle file to write")
    export.add_argument("--device", "-d", metavar="SPEC", help="only this device's entries")
    export.add_argument("--kernel", "-k", action="append", metavar="NAME",
                        help="only programs defining this kernel (repeatable)")
    export.add_argument("--force", "-f", action="store_true", help="replace an existing PATH")
    export.add_argument("--json", action="store_true", help="the report as JSON")

    imp = add("import", help="add a bundle's entries (never overwriting yours)")
    imp.add_argument("path", metavar="PATH", help="the bundle file to read")
    imp.add_argument("--json", action="store_true", help="the report as JSON")

    warm = add("warm", help="build every .cl file under PATHs into the cache, in "
                                       "parallel processes")
    warm.add_argument("paths", nargs="+", metavar="PATH", help="files or folders (.cl files)")
    warm.add_argument("--opts", default="", metavar="OPTIONS",
                      help='build options as one string, e.g. --opts="-O3 -cl-mad-enable"')
    warm.add_argument("--device", "-d", metavar="SPEC", help="device (default: the default)")
    warm.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=V]",
                      help="a macro definition (repeatable)")
    warm.add_argument("-I", dest="includes", action="append", default=[], metavar="DIR",
                      help="an include folder (repeatable)")
    warm.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                      help="processes building at once (default: one per CPU)")
    warm.add_argument("--json", action="store_true", help="the report as JSON")

    config = add("config", help="every setting: value and where it came from")
    config.add_argument("--json", action="store_true", help="as JSON")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``clmagic`` command. A reader that goes away (``clmagic ls | head``)
    ends it quietly, whatever was printing: a listing, ``--help``, a usage error (argparse
    prints those itself and exits, so its exit is caught here too and stdout flushed inside
    the guard, not at interpreter exit where the error would be a traceback)."""
    try:
        try:
            code = _main(sys.argv[1:] if argv is None else list(argv))
        except SystemExit as exc:  # argparse's --help, --version and usage errors
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # the reader left (`clmagic devices | head -1`): it has what it
        # wanted, so the command did not fail (1 would say "the work failed")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str]) -> int:
    from clmagic.errors import ClmagicError

    argv = join_dash_values(argv)
    if argv[:1] == [_CHILD]:
        child = argparse.ArgumentParser(prog=f"clmagic {_CHILD}")
        _demo_arguments(child)
        args = child.parse_args(argv[1:])
        args.cmd = _CHILD
    else:
        parser = build_parser()
        unknown = unknown_command(argv, parser.get_default("commands"))
        if unknown:
            print(unknown, file=sys.stderr)
            return 2
        args = parser.parse_args(argv)
    handler: dict[str, Callable[[argparse.Namespace], int]] = {
        "demo": _demo, _CHILD: _demo_child, "devices": _devices, "info": _info, "run": _run}
    if args.cmd not in handler:
        from clmagic.cli import commands

        handler = commands.HANDLERS
    try:
        code = handler[args.cmd](args)
        sys.stdout.flush()  # here, so that a reader gone away is met in main, not at exit
        return code
    except ClmagicError as exc:
        print(f"clmagic: {exc}", file=sys.stderr)
        if hasattr(exc, "log"):
            print(exc.log, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("clmagic: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # a file the work needed failed (disk full, permission): one line
        if args.cmd == "run" or isinstance(exc, BrokenPipeError):
            raise  # the script's own error: its traceback, as python shows it; a pipe: main's
        where = f": {exc.filename}" if exc.filename else ""
        print(f"clmagic: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
