"""``%clcheck``: one launch checked under Oclgrind (:func:`clmagic.check_kernel`), written as
the kernel is called. Apart from :mod:`clmagic.ipython.magics` so that ``%load_ext`` imports
none of it; the work is the library's, the rendering :mod:`clmagic.show.check`'s."""

from __future__ import annotations

from typing import Any

from clmagic.errors import OptionsError
from clmagic.ipython.line import launch_line, launch_values

__all__ = ["clcheck", "CLCHECK_USAGE"]

CLCHECK_USAGE = ("usage: %clcheck [--timeout SECONDS] KERNEL(QUEUE, GLOBAL_SIZE, LOCAL_SIZE, "
                 "*ARGS), as the kernel is called: %clcheck saxpy(cl_queue, (n,), None, a, x, y)")


def _timeout(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        timeout = float(value)
    except ValueError:
        raise OptionsError(CLCHECK_USAGE) from None
    if not timeout > 0:
        raise OptionsError(f"--timeout {value}: give a number of seconds over 0")
    return timeout


def clcheck(ns: dict[str, Any], line: str, compiler: object = None) -> object:
    """``%clcheck oob(cl_queue, (64,), None, x, y)``: the launch's arguments evaluated in the
    user's namespace, checked, and the report returned (its findings are the cell's output,
    ``_`` after it)."""
    from clmagic.cache.checker.run import DEFAULT_TIMEOUT_S, check_kernel
    from clmagic.trip.compiler import Compiler

    value, call = launch_line(line, ("-t", "--timeout"), CLCHECK_USAGE)
    timeout = _timeout(value)
    kernel, queue, global_size, local_size, *args = launch_values(call, ns, "clcheck")
    return check_kernel(kernel, queue, global_size, local_size, *args,
                        timeout=timeout or DEFAULT_TIMEOUT_S,
                        compiler=compiler if isinstance(compiler, Compiler) else None)
