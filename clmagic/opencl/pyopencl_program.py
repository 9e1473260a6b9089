"""The pyopencl internals clmagic relies on, named once: read in pyopencl 2026.1.4
(``pyopencl/__init__.py``, ``class Program``; ``pyopencl/_monkeypatch.py``; ``pyopencl._cl``).

Why internals at all: pyopencl's public ``Program.build`` adds options of its own and may go
through pyopencl's binary cache (see :mod:`clmagic.opencl.driver`), and the hook
(:mod:`clmagic.process.hook`) must hand back the very ``pyopencl.Program`` the caller made, built.
Every other module calls the small functions here, so a pyopencl release that changes one of
these names breaks one module, and :func:`missing` says which name before the hook is installed
(the hook then leaves every build to pyopencl).

What each name is, in pyopencl 2026.1.4:

- ``pyopencl._cl._Program``: the C++ program class under ``pyopencl.Program``; its ``_build``
  is the bare ``clBuildProgram`` (``Program.build`` wraps it in ``_monkeypatch.program_build``);
- ``Program._prg``: that C++ program, ``None`` for a program made from source and not built yet;
  ``Program._source``: the source (only on programs made from source);
  ``Program._context``: the context, deleted by ``Program.build`` after a build through
  pyopencl's binary cache (so a second ``build`` there raises ``AttributeError``);
- ``Program._process_build_options``: the options pyopencl gives the driver (its include folder,
  per-platform options, ``PYOPENCL_BUILD_OPTIONS``) and the include path;
- ``Program._build_duration_info``: what ``Program.__getattr__`` logs about a long build;
- ``pyopencl._PYOPENCL_NO_CACHE``: ``PYOPENCL_NO_CACHE`` as pyopencl read it at import.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import pyopencl as cl
from pyopencl.characterize import has_src_build_cache

from clmagic.opencl import pocl_binary

__all__ = ["CHECKED_AGAINST", "Unbuilt", "missing", "raw_from_source", "raw_from_binaries",
           "bare_build", "raw_of", "unbuilt", "options_of", "no_cache", "adopt", "renew", "log_of",
           "info_of", "INFOS", "ASK_DRIVER"]

#: the pyopencl release these names were read in
CHECKED_AGAINST = "2026.1.4"



class _Adopted(NamedTuple):
    program: weakref.ref[cl.Program]
    #: the build log of the program's one device (``None`` for several: the driver's then)
    log: str | None
    #: what pyopencl's own build would have made, where the program was loaded from binaries
    #: on a device with a source cache of its own (see :func:`info_of`); ``None``: the driver's
    made: _AsMade | None = None


class _AsMade(NamedTuple):
    """A program made from source in its context (pyopencl's build on POCL, NVIDIA): its source
    and every device of the context, of which those built have a binary."""

    source: str | bytes
    devices: list[cl.Device]


#: the programs the hook built, by ``id`` (their C++ program is clmagic's: loaded from a binary, or
#: shared with other programs of the same source and context); weak, each dropped when its
#: program ends. Not a WeakSet: ``Program.__hash__`` and ``__eq__`` build the program they ask
#: about.
_adopted: dict[int, _Adopted] = {}


class Unbuilt(NamedTuple):
    """A ``pyopencl.Program`` made from source and not built yet: what the hook needs of it."""

    context: cl.Context
    source: str | bytes


def missing() -> list[str]:
    """The names above that this pyopencl does not have (empty: the hook can rely on them)."""
    raw = getattr(getattr(cl, "_cl", None), "_Program", None)
    wanted = [("pyopencl._cl._Program", raw), ("pyopencl._cl._Program._build",
                                              getattr(raw, "_build", None)),
              ("pyopencl.Program._process_build_options",
               getattr(cl.Program, "_process_build_options", None)),
              ("pyopencl.Program._get_prg", getattr(cl.Program, "_get_prg", None))]
    gone = [name for name, value in wanted if value is None]
    if not hasattr(cl, "_PYOPENCL_NO_CACHE"):
        gone.append("pyopencl._PYOPENCL_NO_CACHE")
    return gone


def raw_from_source(ctx: cl.Context, source: str | bytes) -> Any:
    """A C++ program made from ``source``, not built (``clCreateProgramWithSource``)."""
    return cl._cl._Program(ctx, source)


def raw_from_binaries(ctx: cl.Context, devs: Sequence[cl.Device],
                      binaries: Sequence[bytes]) -> Any:
    """A C++ program made from one binary per device, not built (``clCreateProgramWithBinary``);
    each POCL binary with a build folder of its own (:func:`.pocl_binary.own_folder`)."""
    return cl._cl._Program(ctx, list(devs), [pocl_binary.own_folder(b) for b in binaries])


def bare_build(raw: Any, options: str, devices: Sequence[cl.Device]) -> None:
    """``clBuildProgram`` with exactly ``options``; raises ``cl.Error`` when the driver refuses
    (looked up at each call: a test may wrap ``_build`` to act between build and readout)."""
    raw._build(options=options.encode(), devices=list(devices))


def raw_of(program: cl.Program) -> Any:
    """The C++ program under a ``pyopencl.Program`` that has one."""
    return program._get_prg()


def unbuilt(program: cl.Program) -> Unbuilt | None:
    """The context and source of a program made from source and not built yet; ``None`` for any
    other (made from binaries, IL, a C++ program, or built: pyopencl's own ``build`` then)."""
    held = vars(program)  # not getattr: ``Program.__getattr__`` would look for a kernel
    if held.get("_prg", True) is not None or "_source" not in held or "_context" not in held:
        return None
    return Unbuilt(held["_context"], held["_source"])


def options_of(ctx: cl.Context, options: str | Sequence[str] | None) -> tuple[str, list[str]]:
    """The option string pyopencl's ``build`` hands the driver, and its include folders."""
    options_bytes, include_path = cl.Program._process_build_options(ctx, options)
    return options_bytes.decode("utf-8"), list(include_path)


def no_cache() -> bool:
    """Whether ``PYOPENCL_NO_CACHE`` was set when pyopencl was imported."""
    return bool(getattr(cl, "_PYOPENCL_NO_CACHE", False))


def adopt(program: cl.Program, built: cl.Program, duration: tuple[str, bool, float],
          log: str, loaded: bool = False) -> None:
    """Make ``program`` (made from source, not built) the program ``built``, in the state
    pyopencl's own ``build`` would leave it: built, its duration noted, and, where pyopencl would
    have built through its binary cache (a device without a source cache of its own, caching not
    turned off), its context attribute deleted as pyopencl deletes it (a second ``build`` or a
    ``compile`` then fails there as it does without clmagic). ``log`` is the build's log as
    clmagic has it (a program loaded from a binary has no log of its own): see :func:`log_of`.
    ``loaded``: ``built`` was made from binaries; where pyopencl would have made it from source
    (a device with a source cache of its own), :func:`info_of` answers its source and devices
    as pyopencl's program would."""
    ctx = program._context
    raw = raw_of(built)
    program._prg = raw
    program._build_duration_info = duration
    key = id(program)
    one = len(raw.get_info(cl.program_info.DEVICES)) == 1
    devices = ctx.devices
    source_build = no_cache() or has_src_build_cache(devices[0])
    made = _AsMade(program._source, list(devices)) if loaded and source_build else None
    _adopted[key] = _Adopted(weakref.ref(program, lambda _: _adopted.pop(key, None)),
                             log if one else None, made)
    if not source_build:
        del program._context


def renew(program: cl.Program) -> bool:
    """Before a second ``build`` or a ``compile`` of a program the hook built: give it a fresh C++
    program made from its source, as pyopencl's own first build leaves it on a device with a
    source cache (POCL, NVIDIA), so the driver builds the source with the new options, never
    rebuilds a program loaded from a binary (which keeps the old code, whatever the options) or
    one other programs share. ``False`` when ``program`` is not one the hook built, or pyopencl's
    own path will refuse it anyway (its context deleted, as pyopencl deletes it)."""
    if _adoption(program) is None:
        return False
    del _adopted[id(program)]
    if "_context" not in vars(program):
        return False
    program._prg = raw_from_source(program._context, program._source)
    return True


def _adoption(program: cl.Program) -> _Adopted | None:
    held = _adopted.get(id(program))
    return held if held is not None and held.program() is program else None


#: the program infos :func:`info_of` may answer, and the ``Program`` properties that read them
INFOS = {"source": cl.program_info.SOURCE, "devices": cl.program_info.DEVICES,
         "num_devices": cl.program_info.NUM_DEVICES}
#: :func:`info_of`'s answer when the driver's own is the right one
ASK_DRIVER = object()


def info_of(program: cl.Program, param: Any) -> object:
    """``get_info(param)`` of a program the hook loaded from binaries where pyopencl would have
    built it from source in its context: the source as given and every device of the context
    (their number too); :data:`ASK_DRIVER` for any other program or info (the binaries and
    their sizes are the driver's: it lists those of the devices built, as for pyopencl's)."""
    held = _adopted.get(id(program)) if _adopted else None
    if held is None or held.made is None or held.program() is not program:
        return ASK_DRIVER
    made = held.made
    if param == cl.program_info.SOURCE:
        return made.source.decode() if isinstance(made.source, bytes) else made.source
    if param == cl.program_info.DEVICES:
        return list(made.devices)
    if param == cl.program_info.NUM_DEVICES:
        return len(made.devices)
    return ASK_DRIVER  # its binaries: the driver's (POCL lists the devices built only)


def log_of(program: cl.Program, param: Any) -> str | None:
    """``get_build_info(device, LOG)`` of a program the hook built for one device: the log of
    its build as clmagic stored it (the driver has none for a program loaded from a binary,
    where pyopencl's own path built the source and kept its log); ``None``: ask the driver."""
    if param != cl.program_build_info.LOG:
        return None
    held = _adoption(program)
    return held.log if held is not None else None
