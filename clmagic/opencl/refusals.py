"""A kernel launch the driver (or pyopencl) refuses, said in one line that tells what to change.

``%cltime saxpy(cl_queue, (n,), (7,), a, x, y)`` with a local size that does not divide the
global one, or with an argument left out, used to end in a 40-line traceback through clmagic's
code and pyopencl's generated invoker, ending in ``clEnqueueNDRangeKernel failed:
INVALID_WORK_GROUP_SIZE``. Here each refusal a launch can meet becomes an
:class:`~clmagic.errors.OptionsError` (one line in IPython, a plain exception to a library
caller) naming the kernel, what was given and what the device takes.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Sequence
from typing import SupportsIndex, cast

import pyopencl as cl

from clmagic.errors import OptionsError

__all__ = ["launch_sizes", "set_arguments", "refused"]


def _size(value: object, what: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    items = list(value) if isinstance(value, Iterable) and not isinstance(value, str) else [value]
    try:
        dims = tuple(operator.index(cast("SupportsIndex", v)) for v in items)  # numpy's too
    except TypeError:
        raise OptionsError(f"{what} {value!r}: give a whole number or a tuple of 1 to 3 "
                           "of them, e.g. (1024,) or (64, 64)") from None
    if not 1 <= len(dims) <= 3 or min(dims) < 1:
        raise OptionsError(f"{what} {value!r}: 1 to 3 dimensions, each at least 1")
    return dims


def launch_sizes(global_size: object, local_size: object
                 ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """The global and local sizes as tuples, checked before the driver sees them."""
    gs = _size(global_size, "global size")
    if gs is None:
        raise OptionsError("the global size is missing: give the number of work-items, "
                           "e.g. (n,)")
    ls = _size(local_size, "local size")
    if ls is not None and len(ls) != len(gs):
        raise OptionsError(f"local size {ls} has {len(ls)} dimensions, the global size {gs} "
                           f"{len(gs)}: give as many (or None: the driver chooses)")
    return gs, ls


def _name(kernel: object) -> str:
    return str(getattr(kernel, "function_name", "the kernel"))


def set_arguments(kernel: object, args: Sequence[object]) -> None:
    """``kernel.set_args(*args)``, or one line saying which argument does not fit and why."""
    if not isinstance(kernel, cl.Kernel):
        raise OptionsError(f"{kernel!r} is not a kernel: the first name is the kernel, as "
                           "%%clkernel binds it (e.g. saxpy(cl_queue, (n,), None, ...))")
    expected = int(kernel.num_args)
    if len(args) != expected:
        raise OptionsError(f"{_name(kernel)} takes {expected} argument"
                           f"{'' if expected == 1 else 's'}, {len(args)} given")
    try:
        kernel.set_args(*args)  # type: ignore[arg-type]  # checked by pyopencl itself
    except cl.Error as exc:
        raise OptionsError(f"{_name(kernel)}: {_which_arg(kernel, exc)} does not fit its "
                           f"parameter ({_code(exc)}): a scalar needs its numpy type, e.g. "
                           "np.float32(2.0), a pointer a cl.Buffer") from None
    except (TypeError, ValueError) as exc:
        raise OptionsError(f"{_name(kernel)}: an argument does not fit ({exc})") from None


def _code(exc: BaseException) -> str:
    """The OpenCL status a pyopencl error names (``INVALID_ARG_SIZE``)."""
    found = re.search(r"\b(?:INVALID|OUT_OF)_[A-Z_]+", str(exc))
    return found.group() if found else type(exc).__name__


def _which_arg(kernel: cl.Kernel, exc: BaseException) -> str:
    """``argument 2 (y)`` from pyopencl's ``arg#2 (1-based)``; its name where the driver
    keeps argument names."""
    found = re.search(r"arg#(\d+)", str(exc))
    if found is None:
        return "an argument"
    n = int(found.group(1))
    try:
        name = str(kernel.get_arg_info(n - 1, cl.kernel_arg_info.NAME))
    except cl.Error:
        return f"argument {n}"
    return f"argument {n} ({name})"


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0].rstrip(":") if lines else type(exc).__name__


def refused(exc: cl.Error, kernel: cl.Kernel, device: cl.Device, gs: tuple[int, ...],
            ls: tuple[int, ...] | None) -> OptionsError:
    """The one line for an enqueue the driver refused (``exc``)."""
    name, code = _name(kernel), getattr(exc, "code", None)
    status = cl.status_code
    if code == status.INVALID_WORK_GROUP_SIZE and ls is not None:
        most = kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device)
        return OptionsError(f"{name}: local size {ls} does not go with global size {gs}: "
                            "each global size must be a multiple of the local one, and a "
                            f"group at most {most} work-items here (or None: the driver "
                            "chooses)")
    if code == status.INVALID_WORK_ITEM_SIZE and ls is not None:
        return OptionsError(f"{name}: local size {ls} is over what the device takes in a "
                            f"dimension ({tuple(device.max_work_item_sizes)})")
    if code == status.INVALID_KERNEL_ARGS:
        return OptionsError(f"{name}: its arguments are not all set: give them after the "
                            "local size, as the kernel is called")
    return OptionsError(f"{name} could not be launched over {gs} in groups of "
                        f"{ls or 'the driver’s choice'} ({_code(exc)}): {_first_line(exc)}")
