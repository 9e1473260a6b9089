"""What the compiler made of each kernel, as the driver says it: :class:`KernelFacts`.

Gathered once, when a program is built (:func:`gather`), and kept in the cache entry as JSON
(:func:`facts_to_json` / :func:`facts_from_json`), so a HIT shows them without a rebuild and
without asking the driver again. Every figure is the driver's own answer or ``None``:

- ``clGetKernelWorkGroupInfo`` (every driver): the most work-items per group for this kernel
  (``work_group_size``), the size fixed by ``reqd_work_group_size`` (``compile_work_group_size``,
  ``(0, 0, 0)`` when the kernel fixes none), the preferred multiple, local and private memory;
- ``clGetKernelArgInfo``: argument names, types and address spaces, only where the driver keeps
  them (Oclgrind always; POCL and NVIDIA only for a build with ``-cl-kernel-arg-info``: clmagic
  never adds options to the user's, so without it the names are ``None``);
- registers, spills, stack frame and shared memory: NVIDIA's ``ptxas`` report in the build log,
  present only when the user built with ``-cl-nv-verbose`` (:mod:`clmagic.opencl.ptxas`).

Each query stands alone (one that fails leaves its figure ``None``); nothing is estimated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import pyopencl as cl

from clmagic._valid import load_json, whole
from clmagic.errors import CorruptEntry
from clmagic.opencl.ptxas import PtxasUsage, parse_ptxas

__all__ = ["ArgFacts", "KernelFacts", "gather", "facts_to_json", "facts_from_json",
           "FACT_FIELDS"]

#: CL_KERNEL_ARG_ADDRESS_* → the OpenCL C qualifier
ADDRESS = {0x119B: "global", 0x119C: "local", 0x119D: "constant", 0x119E: "private"}
_T = TypeVar("_T")


@dataclass(frozen=True, kw_only=True)
class ArgFacts:
    """One kernel argument as the driver reports it (``None``: it does not say)."""

    name: str | None = None
    type_name: str | None = None
    #: ``global``, ``local``, ``constant`` or ``private``
    address: str | None = None


@dataclass(frozen=True, kw_only=True)
class KernelFacts:
    """What the compiler made of one kernel for one device; ``None`` where the driver does not
    say. Sizes are bytes; ``spills`` is ptxas's spill stores plus spill loads."""

    name: str
    work_group_size: int | None = None
    compile_work_group_size: tuple[int, ...] | None = None
    preferred_multiple: int | None = None
    local_mem: int | None = None
    private_mem: int | None = None
    registers: int | None = None
    spills: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_frame: int | None = None
    shared_mem: int | None = None
    args: tuple[ArgFacts, ...] | None = None

    @property
    def arg_names(self) -> list[str | None] | None:
        """The arguments' names (``None`` each where the driver keeps none)."""
        return None if self.args is None else [a.name for a in self.args]


#: the figures of :class:`KernelFacts` (every field but ``name`` and ``args``)
FACT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(KernelFacts)
                                     if f.name not in ("name", "args"))


def _ask(query: Callable[[], _T]) -> _T | None:
    """One driver query; ``None`` when the driver refuses it or pyopencl cannot ask."""
    try:
        return query()
    except (cl.Error, ValueError, TypeError, AttributeError):
        return None


def _int(value: object) -> int | None:
    """A figure as the contract reads a count (a whole number from 0 to 2**63 - 1: a driver's
    or a stored one), ``None`` for anything else."""
    try:
        return whole(value, "a kernel fact") if not isinstance(value, str | bytes) else None
    except CorruptEntry:
        return None


def _arg(kernel: cl.Kernel, i: int) -> ArgFacts:
    info = cl.kernel_arg_info
    name = _ask(lambda: kernel.get_arg_info(i, info.NAME))
    type_name = _ask(lambda: kernel.get_arg_info(i, info.TYPE_NAME))
    address = _ask(lambda: kernel.get_arg_info(i, info.ADDRESS_QUALIFIER))
    return ArgFacts(name=str(name) if name else None,
                    type_name=str(type_name) if type_name else None,
                    address=ADDRESS.get(address) if isinstance(address, int) else None)


def _kernel(name: str, kernel: cl.Kernel, dev: cl.Device, usage: PtxasUsage) -> KernelFacts:
    wg = cl.kernel_work_group_info

    def ask(what: int) -> Any:
        return _ask(lambda: kernel.get_work_group_info(what, dev))

    compile_size = ask(wg.COMPILE_WORK_GROUP_SIZE)
    n_args = _int(_ask(lambda: kernel.get_info(cl.kernel_info.NUM_ARGS)))
    return KernelFacts(
        name=name, work_group_size=_int(ask(wg.WORK_GROUP_SIZE)),
        compile_work_group_size=(tuple(int(v) for v in compile_size)
                                 if isinstance(compile_size, list | tuple) else None),
        preferred_multiple=_int(ask(wg.PREFERRED_WORK_GROUP_SIZE_MULTIPLE)),
        local_mem=_int(ask(wg.LOCAL_MEM_SIZE)), private_mem=_int(ask(wg.PRIVATE_MEM_SIZE)),
        registers=usage.registers, spills=usage.spills, spill_stores=usage.spill_stores,
        spill_loads=usage.spill_loads, stack_frame=usage.stack_frame,
        shared_mem=usage.shared_mem,
        args=None if n_args is None else tuple(_arg(kernel, i) for i in range(n_args)))


def _writes_ptxas(dev: cl.Device) -> bool:
    """Whether ``dev``'s driver writes a ptxas report (NVIDIA's): on any other, such lines in
    a log can only be the source's (two ``#warning`` lines made POCL "report" 3 registers)."""
    try:
        return str(dev.platform.name).startswith("NVIDIA")
    except cl.Error:
        return False


def gather(kernels: Mapping[str, cl.Kernel], dev: cl.Device, log: str = ""
           ) -> dict[str, KernelFacts]:
    """The facts of each kernel for ``dev``, asked of the driver now, with the ptxas figures of
    ``log`` (the build log) where it has them. A few microseconds per query: no code is
    generated (measured on POCL: 17 kernels in 0.2 ms, against seconds for their binary)."""
    usage = parse_ptxas(log) if "ptxas" in log and _writes_ptxas(dev) else {}
    return {name: _kernel(name, k, dev, usage.get(name, PtxasUsage()))
            for name, k in kernels.items()}


def facts_to_json(facts: Mapping[str, KernelFacts]) -> dict[str, Any]:
    """The JSON kept in an entry: per kernel, the figures the driver gave (``None`` ones left
    out, so an entry says only what is known)."""
    out: dict[str, Any] = {}
    for name, f in facts.items():
        doc: dict[str, Any] = {k: getattr(f, k) for k in FACT_FIELDS if getattr(f, k) is not None}
        if "compile_work_group_size" in doc:
            doc["compile_work_group_size"] = list(doc["compile_work_group_size"])
        if f.args is not None:
            doc["args"] = [{k: v for k, v in (("name", a.name), ("type_name", a.type_name),
                                              ("address", a.address)) if v is not None}
                           for a in f.args]
        out[name] = doc
    return out


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _one(name: str, doc: Mapping[str, Any]) -> KernelFacts:
    size = doc.get("compile_work_group_size")
    args = doc.get("args")
    return KernelFacts(
        name=name, **{k: _int(doc.get(k)) for k in FACT_FIELDS if k != "compile_work_group_size"},
        compile_work_group_size=(tuple(v for v in size if _int(v) is not None)
                                 if isinstance(size, list) else None),
        args=(tuple(ArgFacts(name=_str(a.get("name")), type_name=_str(a.get("type_name")),
                             address=_str(a.get("address")))
                    for a in args if isinstance(a, dict)) if isinstance(args, list) else None))


def facts_from_json(raw: object) -> dict[str, KernelFacts] | None:
    """The facts an entry keeps (``None``: it keeps none, as entries saved before clmagic kept
    them). Read leniently: a value of an unexpected type is ``None``, never an error (the
    entry's digest already vouches for the bytes; a newer clmagic may add figures). ``raw``
    is the JSON text an entry keeps, or the object it holds (entries saved before)."""
    if isinstance(raw, str):
        try:
            raw = load_json(raw, "kernel facts")
        except CorruptEntry:
            return None
    if not isinstance(raw, Mapping):
        return None
    return {n: _one(n, d) for n, d in raw.items() if isinstance(n, str) and isinstance(d, Mapping)}
