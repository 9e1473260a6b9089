"""``%clcache``'s subcommands: what each runs on the library (:mod:`clmagic.cache.manage`, frames,
the widget, bundles, the session's store), which arguments it takes, and the one line that
answers a misuse. Loaded by the first ``%clcache``; each subcommand imports what it runs."""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from clmagic.errors import OptionsError

if TYPE_CHECKING:
    from clmagic.store import Store
    from clmagic.trip.compiler import Compiler

__all__ = ["CLCACHE", "Subcommand", "run_clcache", "Host"]


class Host(Protocol):
    """What a subcommand needs of the magics that run it (:class:`~clmagic.ipython.magics.CLMagics`
    is one): their compiler, and the switch that sends every pyopencl program through it. Named
    as a protocol so that this table does not import the magics that import it."""

    cache_every_program: bool

    @property
    def compiler(self) -> Compiler: ...


def _store_of(compiler: Compiler) -> Store:
    if compiler.store is None:
        raise OptionsError("the cache is off (memory only): set CLMAGIC_CACHE_DIR first")
    return compiler.store


def _frame(m: Host, a: Namespace) -> object:
    from clmagic.show.frames import cache_frame

    return cache_frame(a.device, compiler=m.compiler, origin=a.origin)


def _kernels(m: Host, a: Namespace) -> object:
    from clmagic.show.sweep import kernels_frame

    return kernels_frame(a.device, compiler=m.compiler)


def _stats(m: Host, a: Namespace) -> object:
    from clmagic.cache import manage

    if a.zero:
        manage.zero_stats(m.compiler)
    return manage.stats(m.compiler, origin=a.origin)


def _history(m: Host, a: Namespace) -> object:
    from clmagic.show.frames import history_frame

    return history_frame(compiler=m.compiler, origin=a.origin)


def _info(m: Host, a: Namespace) -> object:
    from clmagic.cache.manage import cache_info

    return cache_info(m.compiler)


def _clear(m: Host, a: Namespace) -> object:
    from clmagic.cache.manage import clear_cache

    return clear_cache(a.device, a.older_than, a.keys, m.compiler, remote=a.remote,
                       origin=a.origin)


def _widget(m: Host, a: Namespace) -> object:
    from clmagic.show.widget import CacheWidget

    return CacheWidget(m.compiler)


def _export(m: Host, a: Namespace) -> object:
    from clmagic.cache.bundle import export_bundle

    return export_bundle(a.keys[0], device=a.device, store=_store_of(m.compiler))


def _import(m: Host, a: Namespace) -> object:
    from clmagic.cache.bundle import import_bundle
    from clmagic.show.progress import counted_bar

    with counted_bar("proving imported binaries", "entry") as step:
        return import_bundle(a.keys[0], store=_store_of(m.compiler), progress=step)


def _use(m: Host, a: Namespace) -> object:
    from clmagic.process.session import use

    return use(a.keys[0], compiler=m.compiler)


def _install(m: Host, on: bool) -> None:
    """``%clcache install`` / ``uninstall``: every pyopencl program through the cache."""
    m.cache_every_program = on
    print("every pyopencl program built from source now goes through clmagic's cache "
          "(%clcache uninstall to stop)" if on else
          "pyopencl builds its programs its own way again")


@dataclass(frozen=True)
class Subcommand:
    """One ``%clcache`` subcommand: what it runs, which arguments it takes (``keys``,
    ``older_than``, ``device``, ``origin``), whether ``keys`` is one PATH, and the one line that
    answers a misuse (when empty: which subcommands take the argument given)."""

    run: Callable[[Host, Namespace], object]
    takes: frozenset[str] = frozenset()
    misuse: str = ""
    needs_path: bool = False


#: ``%clcache`` subcommands (``None``: no subcommand, the entries as a DataFrame)
CLCACHE: dict[str | None, Subcommand] = {
    None: Subcommand(_frame, frozenset({"device", "origin"})),
    "stats": Subcommand(_stats, frozenset({"zero", "origin"})),
    "history": Subcommand(_history, frozenset({"origin"})),
    "info": Subcommand(_info),
    "clear": Subcommand(_clear, frozenset({"keys", "older_than", "device", "remote", "origin"})),
    "widget": Subcommand(_widget),
    "export": Subcommand(_export, frozenset({"keys", "device"}),
                         "usage: %clcache export PATH [--device SPEC]", needs_path=True),
    "import": Subcommand(_import, frozenset({"keys"}), "usage: %clcache import PATH",
                         needs_path=True),
    "install": Subcommand(lambda m, a: _install(m, True),
                          misuse="%clcache install takes no arguments"),
    "uninstall": Subcommand(lambda m, a: _install(m, False),
                            misuse="%clcache uninstall takes no arguments"),
    "use": Subcommand(_use, frozenset({"keys"}), "usage: %clcache use PATH (a folder, a .db "
                      "file, a redis:// URL, or off)", needs_path=True),
    "kernels": Subcommand(_kernels, frozenset({"device"})),
}


def run_clcache(m: Host, args: Namespace) -> object:
    """Run the subcommand ``args`` name, or say in one line which argument does not go with
    it."""
    sub = CLCACHE[args.command]
    given = ("keys", "older_than", "device", "zero", "remote", "origin")
    extra = {n for n in given if getattr(args, n)} - sub.takes
    if sub.misuse and (extra or (sub.needs_path and len(args.keys) != 1)):
        raise OptionsError(sub.misuse)
    if "zero" in extra:
        raise OptionsError("--zero goes with %clcache stats only")
    if "origin" in extra:
        raise OptionsError("--origin goes with %clcache (the DataFrame), stats, history and "
                           "clear")
    if extra & {"keys", "older_than", "remote"}:
        raise OptionsError("KEY_PREFIX, --older-than and --remote go with %clcache clear only")
    if extra:
        raise OptionsError("--device goes with %clcache (the DataFrame), clear, export and "
                           "kernels")
    return sub.run(m, args)
