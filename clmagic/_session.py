"""The process's compiler: one per process, made from the environment on first use, so that
no module needs the package root to reach it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .compiler import Compiler
    from .config import Settings

__all__ = ["get_compiler", "reset", "or_default"]

_compiler: Compiler | None = None


def get_compiler() -> Compiler:
    """The process-wide compiler (settings read from the environment on first use)."""
    global _compiler
    if _compiler is None:
        from .compiler import Compiler

        _compiler = Compiler()
    return _compiler


def or_default(compiler: Compiler | None) -> Compiler:
    """``compiler``, or the process-wide one when it is ``None`` (what every library function
    with an optional ``compiler`` argument uses)."""
    return compiler if compiler is not None else get_compiler()


def reset(settings: Settings | None = None) -> Compiler:
    """Start over: a new process-wide compiler, e.g. after changing ``CLMAGIC_*`` variables."""
    from .compiler import Compiler

    global _compiler
    _compiler = Compiler(settings)
    return _compiler
