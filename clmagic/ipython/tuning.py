"""The magics' tuning parts: ``%%clkernel --sweep NAME=V1,V2 --run FUNC`` (a sweep through the
cache, the best variant's kernels bound), ``%%clkernel --show ptx`` (the compiled code under
the cell) and ``%cltime`` (a launch timed with profiling events). Apart from
:mod:`clmagic.ipython.magics` so that ``%load_ext`` imports none of it."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from clmagic.errors import OptionsError
from clmagic.ipython.line import launch_line, launch_values

if TYPE_CHECKING:
    from clmagic.trip.compiler import BuildResult, Compiler

__all__ = ["parse_sweeps", "run_sweep", "show_code", "cltime", "CLTIME_USAGE"]

CLTIME_USAGE = ("usage: %cltime [-r REPEATS] KERNEL(QUEUE, GLOBAL_SIZE, LOCAL_SIZE, *ARGS), "
                "as the kernel is called: %cltime saxpy(cl_queue, (n,), None, a, x_buf, y_buf)")


def parse_sweeps(specs: list[str]) -> dict[str, list[str]]:
    """``["TILE=8,16", "VEC=1,2"]`` → ``{"TILE": ["8", "16"], "VEC": ["1", "2"]}``."""
    params: dict[str, list[str]] = {}
    for spec in specs:
        name, sep, values = spec.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name.strip().isidentifier() or not vals:
            raise OptionsError(f"--sweep {spec!r}: write NAME=V1,V2,... (e.g. --sweep TILE=8,16)")
        if name.strip() in params:
            raise OptionsError(f"--sweep {name.strip()} given twice")
        params[name.strip()] = vals
    return params


def run_sweep(ns: dict[str, Any], compiler: Compiler, cell: str, params: Mapping[str, list[str]],
              options: str, device: object, run_name: str | None,
              bind: Callable[[BuildResult], object], fresh: bool = False) -> object:
    """Run the sweep (``fresh``: the timings kept from earlier runs ignored); bind the best
    variant's kernels (``bind``) and return the DataFrame (the cell's output, ``_`` after
    it). A build error's line numbers are the cell's, as a plain build's (the ``%%clkernel``
    line is line 1)."""
    from clmagic.show.sweep import sweep_frame, sweep_with_bar

    run = None
    if run_name is not None:
        run = ns.get(run_name)
        if not callable(run):
            raise OptionsError(f"--run {run_name}: no function of that name in the namespace "
                               "(def it in a cell above: it takes the build result and returns "
                               "clmagic.time_kernel(...))")
    done = sweep_with_bar(cell, params, run, options=options, device=device,
                          compiler=compiler, fresh=fresh, line_offset=1)
    df = sweep_frame(done)
    if done.best_result is not None:
        bind(done.best_result)
        print(f"best: {df.attrs['best_options']} (its kernels are bound)")
    elif run is None:
        print("no --run: every variant built, none timed, nothing bound")
    elif not done.interrupted:
        print(f"no variant was timed, nothing bound: the error column says why (fix "
              f"{run_name}() and run the cell again: a failed launch is not kept)")
    return df


def show_code(result: BuildResult) -> None:
    """The compiled code under the cell (PTX on NVIDIA), or what the driver's binary is."""
    from IPython.display import HTML, display

    from clmagic.show.facts import code_html

    # IPython's HTML and display are unannotated (a MIME bundle would drop HTML's text repr)
    display(HTML(code_html(result.code)))  # type: ignore[no-untyped-call]


def _call(line: str) -> tuple[int, ast.Call]:
    value, call = launch_line(line, ("-r", "--repeats"), CLTIME_USAGE)
    try:
        return (20 if value is None else int(value)), call
    except ValueError:
        raise OptionsError(CLTIME_USAGE) from None


def cltime(ns: dict[str, Any], line: str) -> object:
    """``%cltime saxpy(cl_queue, (n,), None, a, x, y)``: the launch timed
    (:func:`clmagic.time_kernel`), returned (its text is the cell's output)."""
    from clmagic.opencl.timing import time_kernel

    repeats, call = _call(line)
    kernel, queue, global_size, local_size, *args = launch_values(call, ns, "cltime")
    return time_kernel(kernel, queue, global_size, local_size, *args, repeats=repeats)
