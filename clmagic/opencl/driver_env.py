"""What a driver read from the environment once per process, as far as clmagic can know it.

POCL reads some variables once and keeps the value for the rest of the process, whatever the
environment says later (checked on POCL 3.0 and 3.1):

- ``POCL_EXTRA_BUILD_FLAGS`` at its first build (clmagic's device probe, or any pyopencl build
  before it): a key made of the value now would file the old value's binary under the new one.
- ``POCL_KERNEL_CACHE`` when its platform starts (:mod:`clmagic.opencl.pocl_binary` needs it).

Oclgrind reads ``OCLGRIND_BUILD_OPTIONS`` at every build: its value now is what it uses.

clmagic takes its first look (:func:`first_look`) just before it asks for the platforms the
first time. Where POCL was not loaded yet, nothing has read the variables, and what POCL reads
next is what the environment says then. Where it was (the user's code enumerated platforms
first), POCL may have read them earlier: clmagic trusts the value only when it is the one the
process started with (``/proc/self/environ``); one changed in the process before clmagic looked
may not be what POCL read. From then on any other value means the driver kept an older one.

What clmagic cannot see: a value changed, used by a build outside clmagic and changed back
between two of clmagic's looks (the environment has no history to ask).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

__all__ = ["ONCE_PER_PROCESS", "first_look", "changed_after_read", "pocl_cache_kept"]

#: variables a driver reads once per process, and keeps (``POCL_KERNEL_CACHE``: see the module)
ONCE_PER_PROCESS = ("POCL_EXTRA_BUILD_FLAGS", "POCL_KERNEL_CACHE")
#: the values of ``POCL_KERNEL_CACHE`` with which POCL keeps its cache (anything else turns it
#: off: "yes", "2", "" and " 1" do, on 3.0 and 3.1 alike)
_CACHE_ON = (None, "1")


@dataclass(frozen=True)
class _Look:
    """The environment at clmagic's first look, and whether a driver may have read it before."""

    values: dict[str, str | None]
    loaded_before: bool  # POCL was loaded in the process before clmagic looked
    initial: dict[str, str | None]  # the values the process started with


_look: _Look | None = None
_lock = threading.Lock()


def _pocl_loaded() -> bool:
    """Whether a POCL library is mapped in this process (loaded when platforms are first
    enumerated: before that no POCL build can have run). Without ``/proc``: assumed so."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            return b"libpocl" in maps.read()
    except OSError:
        return True


def _initial() -> dict[str, str | None]:
    """The variables as the process started with them (``/proc/self/environ`` keeps the
    environment given at ``exec``; ``os.environ`` changes do not reach it)."""
    try:
        with open("/proc/self/environ", "rb") as env:
            pairs = [item.partition(b"=") for item in env.read().split(b"\0")]
    except OSError:
        return {name: os.environ.get(name) for name in ONCE_PER_PROCESS}
    start = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, _, v in pairs}
    return {name: start.get(name) for name in ONCE_PER_PROCESS}


def first_look() -> None:
    """Take clmagic's first look at the driver's environment (later calls do nothing): called
    before clmagic first enumerates the platforms."""
    global _look
    if _look is not None:
        return
    with _lock:
        if _look is None:
            loaded = _pocl_loaded()
            _look = _Look({name: os.environ.get(name) for name in ONCE_PER_PROCESS}, loaded,
                          _initial() if loaded else {})


def _looked() -> _Look:
    first_look()
    assert _look is not None
    return _look


def changed_after_read(name: str) -> str:
    """Why the value of ``name`` now may not be the one the driver read ("" when it is):
    one line for the result (the build is then neither served from the cache nor saved)."""
    look = _looked()
    now, then = os.environ.get(name), look.values.get(name)
    if now != then:
        return (f"{name} changed after the driver read it (POCL keeps the value of its first "
                f"build: {_shown(then)} when clmagic first looked, {_shown(now)} now)")
    if look.loaded_before and now != look.initial.get(name):
        return (f"{name} changed after the driver may have read it (set to {_shown(now)} in "
                "this process before clmagic first looked; POCL keeps the value of its first "
                "build)")
    return ""


def _shown(value: str | None) -> str:
    return "unset" if value is None else repr(value[:60])


def pocl_cache_kept() -> bool:
    """Whether POCL keeps its kernel cache in this process (read when its platform started:
    at clmagic's first look unless POCL was loaded before, then as the process started).
    ``False`` wherever clmagic cannot be sure."""
    look = _looked()
    value = look.values.get("POCL_KERNEL_CACHE")
    if look.loaded_before and look.initial.get("POCL_KERNEL_CACHE") != value:
        return False
    return value in _CACHE_ON


def _forget() -> None:
    """Forget the first look (a test's fresh start)."""
    global _look
    _look = None
