"""``%%clkernel`` and ``%clcache``: a thin IPython layer over :class:`clmagic.Compiler` and
:mod:`clmagic.manage`."""

from __future__ import annotations

import argparse
import difflib
import keyword
import re
from argparse import Namespace
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyopencl as cl
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Int, TraitError, Unicode, observe, validate

from . import manage
from .compiler import BuildResult, Compiler
from .config import parse_size, warn
from .errors import OptionsError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from .store import Store

__all__ = ["CLMagics", "split_opts", "CLCACHE", "CLCACHE_COMMANDS", "Subcommand"]

_COMMANDS = ("stats", "history", "info", "clear", "widget", "export", "import", "install",
             "uninstall", "use")

_OPTS = re.compile(r"(?:^|\s)--opts(?:=|\s+|$)")


def _outside_quotes(line: str, end: int) -> bool:
    """Whether position ``end`` of ``line`` is outside shell quotes."""
    quote = ""
    i = 0
    while i < end:
        ch = line[i]
        if ch == "\\" and quote != "'":
            i += 2
            continue
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        i += 1
    return not quote


def split_opts(line: str) -> tuple[str, str | None]:
    """Split a magic line at ``--opts`` (outside quotes): everything after it, to the end of
    the line, is build options (so ``--opts -O3 -cl-mad-enable`` works as written)."""
    m = next((m for m in _OPTS.finditer(line) if _outside_quotes(line, m.start())), None)
    if not m:
        return line, None
    opts = line[m.end():].strip()
    if not opts:
        raise OptionsError("--opts needs build options after it, e.g. --opts -O3 -cl-mad-enable")
    return line[: m.start()], opts


def misspelt_option(rest: str, parser: argparse.ArgumentParser) -> str | None:
    """``--opt is not an option of %%clkernel; did you mean --opts?`` for the first word that
    looks like an option, is none of ``parser``'s, and is close to one of them (argparse would
    take ``--opt`` for ``--opts`` and complain about its value instead)."""
    actions = parser._option_string_actions
    longs = [o for o in actions if o.startswith("--") and o != "--help"]
    words = iter(rest.split())
    for word in words:
        name = word.split("=", 1)[0]
        if name in actions:
            if actions[name].nargs != 0 and "=" not in word:
                next(words, None)  # its value
            continue
        if word.startswith("-"):
            close = difflib.get_close_matches(name.lstrip("-"), [o[2:] for o in longs], n=1,
                                              cutoff=0.7)
            if close:
                return (f"{name} is not an option of %%{parser.prog.split()[-1]}; "
                        f"did you mean --{close[0]}?")
    return None


@magics_class
class CLMagics(Magics):
    """OpenCL magics. Configure with ``%config CLMagics.quiet = True``."""

    quiet = Bool(
        False, help="Print nothing under %%clkernel cells (like --quiet)."
    ).tag(config=True)
    bind_context = Bool(
        True, help="Put cl_ctx and cl_queue of the build's device in the user namespace."
    ).tag(config=True)

    cache_every_program = Bool(
        False, help="Build every pyopencl program of this kernel (pyopencl.array, elementwise, "
                    "reduction, scan, silx, pyFAI, ...) through clmagic's cache, as "
                    "%clcache install does; off: pyopencl builds them its own way."
    ).tag(config=True)

    def __init__(self, shell: InteractiveShell | None = None, compiler: Compiler | None = None,
                 **kwargs: Any) -> None:
        self._limited: Compiler | None = None  # the compiler the configured limits were set on
        super().__init__(shell=shell, **kwargs)
        self._compiler = compiler
        if self.cache_every_program:  # set in a config file, before any observer ran
            self._hook({"new": True})

    max_size = Unicode(
        "", help="Size limit of the cache (500M, 2G, 0 = none), as CLMAGIC_CACHE_MAX_SIZE; "
                 "empty: the environment's. Applies to the store of the following builds."
    ).tag(config=True)
    memory_max = Int(
        0, help="Programs kept in memory (least recently used dropped first), as "
                "CLMAGIC_MEMORY_MAX; 0: the environment's."
    ).tag(config=True)

    @validate("max_size")
    def _valid_size(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"])
        if value.strip():
            try:
                parse_size(value)
            except OptionsError as exc:  # %config says so in one line; nothing changes
                raise TraitError(str(exc)) from None
        return value

    @observe("max_size", "memory_max")
    def _limits(self, change: dict[str, Any]) -> None:
        self._limited = None  # set on the compiler at its next use

    def _apply_limits(self, c: Compiler) -> None:
        """The configured limits (where set), on the compiler about to be used."""
        if self.max_size.strip() and c.store is not None:
            try:
                c.store.max_size = parse_size(self.max_size)
            except OptionsError as exc:
                warn(f"CLMagics.max_size: {exc}")
        if self.memory_max > 0:
            c.memory_max = self.memory_max
        self._limited = c

    @observe("cache_every_program")
    def _hook(self, change: dict[str, Any]) -> None:
        from . import hook

        if change["new"]:
            hook.install(lambda: self.compiler)
        else:
            hook.uninstall()

    @property
    def compiler(self) -> Compiler:
        """The compiler behind the magics (the process-wide one unless given)."""
        if self._compiler is not None:
            if self._compiler is not self._limited:
                self._apply_limits(self._compiler)
            return self._compiler
        from ._session import get_compiler

        c = get_compiler()  # each time: after reset() or a changed CLMAGIC_* variable, new
        if c is not self._limited:
            self._apply_limits(c)
        return c

    @property
    def _namespace(self) -> dict[str, Any]:
        """The user's namespace (the magics run in a shell; without one there is none)."""
        if self.shell is None:
            raise OptionsError("%%clkernel runs in an IPython shell")
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    def _user_context(self, dev: cl.Device) -> cl.Context | None:
        ns = self._namespace
        for name in ("cl_ctx", "ctx"):
            ctx = ns.get(name)
            if isinstance(ctx, cl.Context) and list(ctx.devices) == [dev]:
                return ctx
        return None

    def _bind(self, result: BuildResult, name: str | None) -> str:
        """Bind the kernels (and ``cl_ctx``/``cl_queue``); returns what to say when that moved
        ``cl_ctx`` to another device, whose buffers the old context's kernels cannot use."""
        ns = self._namespace
        for kname, kernel in result.kernels.items():
            old = ns.get(kname)
            if old is not None and not isinstance(old, cl.Kernel):
                warn(
                    f"kernel {kname!r} not bound: {kname!r} is already a "
                    f"{type(old).__name__} in your namespace (use --name VAR and VAR's kernels)"
                )
                continue
            ns[kname] = kernel
        if name:
            ns[name] = result.program
        moved = ""
        if self.bind_context:
            old = ns.get("cl_ctx")
            if isinstance(old, cl.Context) and old != result.context and (
                    list(old.devices) != list(result.context.devices)):
                was = ", ".join(d.name.strip() for d in old.devices)
                moved = (f"clmagic: cl_ctx and cl_queue now belong to {result.device.label} "
                         f"(they were {was}'s): buffers made with the old cl_ctx do not work "
                         "with these kernels; make them again with the new cl_ctx")
            ns["cl_ctx"], ns["cl_queue"] = result.context, result.queue
        return moved

    @magic_arguments()
    @argument("--device", "-d", metavar="SPEC",
              help='Device: "P:D" index, or a case-insensitive part of its platform/device name.')
    @argument("--name", "-n", metavar="VAR", help="Also bind the built cl.Program to VAR.")
    @argument("--no-cache", action="store_true", help="Build with the driver; read/write no cache.")
    @argument("--quiet", "-q", action="store_true", help="Print nothing when the build succeeds.")
    @argument("--opts", metavar="OPTIONS...",
              help="Build options, to the end of the line (-O0…-O3 are mapped for the driver).")
    @cell_magic
    def clkernel(self, line: str, cell: str) -> None:
        """Compile the cell's OpenCL C through clmagic's binary cache.

        Every kernel of the program is bound under its own name, with ``cl_ctx`` and
        ``cl_queue``; one line under the cell says HIT or MISS and the time taken.
        """
        rest, opts = split_opts(line)
        typo = misspelt_option(rest, self.clkernel.parser)
        if typo:
            raise OptionsError(typo)
        args = _parse(self.clkernel, rest)
        if args.name is not None and not (args.name.isidentifier()
                                          and not keyword.iskeyword(args.name)):
            raise OptionsError(f"--name {args.name!r} is not a Python variable name")
        if args.device is not None and not args.device.strip():
            raise OptionsError("--device needs a device: \"P:D\" or part of its name "
                               "(clmagic.list_devices() shows them)")
        if not cell.strip():
            raise OptionsError("empty cell: write OpenCL C below the %%clkernel line")
        info, dev = self.compiler.resolve(args.device)
        result = self.compiler.build(
            cell, opts, info, context=self._user_context(dev), use_cache=not args.no_cache,
            line_offset=1,
        )
        moved = self._bind(result, args.name)
        if not result.kernels:
            warn("the cell compiled but defines no __kernel function: nothing bound")
        if not (args.quiet or self.quiet):
            from IPython.display import display

            display(result)
        if moved:  # said even with --quiet: the user's buffers no longer fit
            print(moved)


    @magic_arguments()
    @argument("command", nargs="?", metavar="COMMAND", choices=_COMMANDS,
              help="stats | history | info | clear | widget | export | import | install | "
                   "uninstall | use (none: the entries as a DataFrame).")
    @argument("keys", nargs="*", metavar="KEY_PREFIX",
              help="clear: only entries whose key starts with one of these (hex); "
                   "export/import: the bundle's PATH; use: the store's PATH.")
    @argument("--device", "-d", metavar="SPEC",
              help='DataFrame, clear, export: only this device ("P:D", name part or '
                   "fingerprint).")
    @argument("--older-than", metavar="AGE",
              help="clear: only entries not used for AGE (a number and s, m, h, d or w: 7d).")
    @argument("--zero", action="store_true",
              help="stats: set the lifetime statistics to zero first.")
    @argument("--remote", action="store_true",
              help="clear: the shared store too (CLMAGIC_REMOTE, or a Redis cache): the team's "
                   "entries; without it only this machine's cache is cleared.")
    @argument("--origin", metavar="MODULE",
              help="DataFrame, stats, history, clear: only builds asked for by MODULE (cell, "
                   "pyopencl.elementwise, or a package: pyopencl, silx).")
    @line_magic
    def clcache(self, line: str) -> object:
        """Explore and manage clmagic's cache.

        ``%clcache [--origin MODULE]`` the stored entries as a DataFrame, most recently used
                                     first (``--origin``: of builds asked for by MODULE: cell,
                                     pyopencl.reduction, or a package: pyopencl, silx; also
                                     for stats, history and clear)
        ``%clcache stats [--zero]``  this session's and the store's lifetime hits, misses,
                                     evictions, hit rate, time saved side by side; entries and
                                     bytes per device (``--zero``: lifetime figures to zero)
        ``%clcache history``         this session's build trips as a DataFrame
        ``%clcache info``            where the cache is, its backend, the variables in effect,
                                     the devices (* = active)
        ``%clcache clear [--device SPEC] [--older-than AGE] [--remote] [KEY_PREFIX ...]``
                                     remove the entries matching every filter given (all when
                                     none is), from disk and memory; says how many and bytes;
                                     the team's shared store only with ``--remote``
        ``%clcache widget``          the panel: choose the device, view and clear its entries
        ``%clcache export PATH [--device SPEC]``
                                     write the cache (or one device's part) to a bundle file
        ``%clcache import PATH``     add a bundle's entries, never overwriting local ones
        ``%clcache install``         from now on, every pyopencl program built from source in
                                     this kernel (pyopencl.array, ElementwiseKernel, silx, ...)
                                     goes through the cache (``%config
                                     CLMagics.cache_every_program = True`` does the same)
        ``%clcache uninstall``       give pyopencl its own build back
        ``%clcache use PATH``        switch to the store at PATH (a folder, a .db file, a
                                     redis:// URL, or off); says which one is in use

        Each returns its object, so ``df = %clcache`` keeps the DataFrame.
        """
        args = _parse(self.clcache, line)
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
            raise OptionsError("KEY_PREFIX, --older-than and --remote go with %clcache clear "
                               "only")
        if extra:
            raise OptionsError("--device goes with %clcache (the DataFrame), clear and export")
        return sub.run(self, args)

    def _install(self, on: bool) -> None:
        """``%clcache install`` / ``uninstall``: every pyopencl program through the cache."""
        self.cache_every_program = on
        print("every pyopencl program built from source now goes through clmagic's cache "
              "(%clcache uninstall to stop)" if on else
              "pyopencl builds its programs its own way again")


def _store_of(compiler: Compiler) -> Store:
    if compiler.store is None:
        raise OptionsError("the cache is off (memory only): set CLMAGIC_CACHE_DIR first")
    return compiler.store


def _frame(m: CLMagics, a: Namespace) -> object:
    from .frames import cache_frame

    return cache_frame(a.device, compiler=m.compiler, origin=a.origin)


def _stats(m: CLMagics, a: Namespace) -> object:
    if a.zero:
        manage.zero_stats(m.compiler)
    return manage.stats(m.compiler, origin=a.origin)


def _history(m: CLMagics, a: Namespace) -> object:
    from .frames import history_frame

    return history_frame(compiler=m.compiler, origin=a.origin)


def _widget(m: CLMagics, a: Namespace) -> object:
    from .widget import CacheWidget

    return CacheWidget(m.compiler)


def _export(m: CLMagics, a: Namespace) -> object:
    from .bundle import export_bundle

    return export_bundle(a.keys[0], device=a.device, store=_store_of(m.compiler))


def _import(m: CLMagics, a: Namespace) -> object:
    from .bundle import import_bundle

    return import_bundle(a.keys[0], store=_store_of(m.compiler))


def _use(m: CLMagics, a: Namespace) -> object:
    from ._session import use

    return use(a.keys[0], compiler=m.compiler)


@dataclass(frozen=True)
class Subcommand:
    """One ``%clcache`` subcommand: what it runs, which arguments it takes (``keys``,
    ``older_than``, ``device``, ``origin``), whether ``keys`` is one PATH, and the one line that
    answers a misuse (when empty: which subcommands take the argument given)."""

    run: Callable[[CLMagics, Namespace], object]
    takes: frozenset[str] = frozenset()
    misuse: str = ""
    needs_path: bool = False


#: ``%clcache`` subcommands (``None``: no subcommand, the entries as a DataFrame)
CLCACHE: dict[str | None, Subcommand] = {
    None: Subcommand(_frame, frozenset({"device", "origin"})),
    "stats": Subcommand(_stats, frozenset({"zero", "origin"})),
    "history": Subcommand(_history, frozenset({"origin"})),
    "info": Subcommand(lambda m, a: manage.cache_info(m.compiler)),
    "clear": Subcommand(lambda m, a: manage.clear_cache(a.device, a.older_than, a.keys,
                                                       m.compiler, remote=a.remote,
                                                       origin=a.origin),
                        frozenset({"keys", "older_than", "device", "remote", "origin"})),
    "widget": Subcommand(_widget),
    "export": Subcommand(_export, frozenset({"keys", "device"}),
                         "usage: %clcache export PATH [--device SPEC]", needs_path=True),
    "import": Subcommand(_import, frozenset({"keys"}), "usage: %clcache import PATH",
                         needs_path=True),
    "install": Subcommand(lambda m, a: m._install(True),
                          misuse="%clcache install takes no arguments"),
    "uninstall": Subcommand(lambda m, a: m._install(False),
                            misuse="%clcache uninstall takes no arguments"),
    "use": Subcommand(_use, frozenset({"keys"}), "usage: %clcache use PATH (a folder, a .db "
                      "file, a redis:// URL, or off)", needs_path=True),
}
#: the subcommand names, in the order ``%clcache?`` lists them
CLCACHE_COMMANDS = tuple(name for name in CLCACHE if name)
assert CLCACHE_COMMANDS == _COMMANDS, "the argument parser's choices are the table's names"


def _parse(magic: Callable[..., object], line: str) -> Namespace:
    """The magic's arguments, unquoted, or one :class:`OptionsError` line (argparse's usage
    errors, and unbalanced quotes, which ``shlex`` reports as ``ValueError``)."""
    try:
        args: Namespace = parse_argstring(magic, line)
    except UsageError as exc:
        raise OptionsError(str(exc)) from None
    except ValueError as exc:
        raise OptionsError(f"cannot read the magic line {line.strip()!r}: {exc}") from None
    for name, value in vars(args).items():  # IPython keeps the quotes: --name "x" means x
        if isinstance(value, list):
            setattr(args, name, [_unquote(v) for v in value])
        elif isinstance(value, str):
            setattr(args, name, _unquote(value))
    return args


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value
