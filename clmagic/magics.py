"""``%%clkernel`` and ``%clcache``: a thin IPython layer over :class:`clmagic.Compiler` and
:mod:`clmagic.manage`."""

from __future__ import annotations

import re

import pyopencl as cl
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, observe

from .compiler import BuildResult, Compiler
from .config import warn
from .errors import OptionsError

__all__ = ["CLMagics", "split_opts", "CLCACHE_COMMANDS"]

CLCACHE_COMMANDS = ("stats", "history", "info", "clear", "widget", "export", "import", "install",
                    "uninstall")

_OPTS = re.compile(r"(?:^|\s)--opts(?:=|\s+|$)")


def split_opts(line: str) -> tuple[str, str | None]:
    """Split a magic line at ``--opts``: everything after it, to the end of the line, is build
    options (so ``--opts -O3 -cl-mad-enable`` works as written)."""
    m = _OPTS.search(line)
    if not m:
        return line, None
    opts = line[m.end():].strip()
    if not opts:
        raise OptionsError("--opts needs build options after it, e.g. --opts -O3 -cl-mad-enable")
    return line[: m.start()], opts


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

    def __init__(self, shell=None, compiler: Compiler | None = None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        self._compiler = compiler
        if self.cache_every_program:  # set in a config file, before any observer ran
            self._hook({"new": True})

    @observe("cache_every_program")
    def _hook(self, change) -> None:
        from . import hook

        if change["new"]:
            hook.install(lambda: self.compiler)
        else:
            hook.uninstall()

    @property
    def compiler(self) -> Compiler:
        """The compiler behind the magics (the process-wide one unless given)."""
        if self._compiler is None:
            from ._session import get_compiler

            self._compiler = get_compiler()
        return self._compiler

    def _user_context(self, dev: cl.Device) -> cl.Context | None:
        ns = self.shell.user_ns
        for name in ("cl_ctx", "ctx"):
            ctx = ns.get(name)
            if isinstance(ctx, cl.Context) and list(ctx.devices) == [dev]:
                return ctx
        return None

    def _bind(self, result: BuildResult, name: str | None) -> None:
        ns = self.shell.user_ns
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
        if self.bind_context:
            ns["cl_ctx"], ns["cl_queue"] = result.context, result.queue

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
        try:
            args = parse_argstring(self.clkernel, rest)
        except UsageError as exc:
            raise OptionsError(str(exc)) from None
        if not cell.strip():
            raise OptionsError("empty cell: write OpenCL C below the %%clkernel line")
        info, dev = self.compiler.resolve(args.device)
        result = self.compiler.build(
            cell, opts, info, context=self._user_context(dev), use_cache=not args.no_cache,
            line_offset=1,
        )
        self._bind(result, args.name)
        if not result.kernels:
            warn("the cell compiled but defines no __kernel function: nothing bound")
        if not (args.quiet or self.quiet):
            from IPython.display import display

            display(result)


    @magic_arguments()
    @argument("command", nargs="?", metavar="COMMAND", choices=CLCACHE_COMMANDS,
              help="stats | history | info | clear | widget | export | import | install | "
                   "uninstall (none: the entries as a DataFrame).")
    @argument("keys", nargs="*", metavar="KEY_PREFIX",
              help="clear: only entries whose key starts with one of these (hex); "
                   "export/import: the bundle's PATH.")
    @argument("--device", "-d", metavar="SPEC",
              help='DataFrame, clear, export: only this device ("P:D", name part or '
                   "fingerprint).")
    @argument("--older-than", metavar="AGE",
              help="clear: only entries not used for AGE (a number and s, m, h, d or w: 7d).")
    @line_magic
    def clcache(self, line: str):
        """Explore and manage clmagic's cache.

        ``%clcache``                 the stored entries as a DataFrame, most recently used first
        ``%clcache stats``           this session's hits, misses, hit rate, time saved; entries
                                     and bytes per device
        ``%clcache history``         this session's build trips as a DataFrame
        ``%clcache info``            where the cache is, its backend, the variables in effect,
                                     the devices (* = active)
        ``%clcache clear [--device SPEC] [--older-than AGE] [KEY_PREFIX ...]``
                                     remove the entries matching every filter given (all when
                                     none is), from disk and memory; says how many and bytes
        ``%clcache widget``          the panel: choose the device, view and clear its entries
        ``%clcache export PATH [--device SPEC]``
                                     write the cache (or one device's part) to a bundle file
        ``%clcache import PATH``     add a bundle's entries, never overwriting local ones
        ``%clcache install``         from now on, every pyopencl program built from source in
                                     this kernel (pyopencl.array, ElementwiseKernel, silx, ...)
                                     goes through the cache (``%config
                                     CLMagics.cache_every_program = True`` does the same)
        ``%clcache uninstall``       give pyopencl its own build back

        Each returns its object, so ``df = %clcache`` keeps the DataFrame.
        """
        from . import manage

        try:
            args = parse_argstring(self.clcache, line)
        except UsageError as exc:
            raise OptionsError(str(exc)) from None
        cmd = args.command
        if cmd in ("install", "uninstall"):
            if args.keys or args.older_than or args.device:
                raise OptionsError(f"%clcache {cmd} takes no arguments")
            self.cache_every_program = cmd == "install"
            print("every pyopencl program built from source now goes through clmagic's cache "
                  "(%clcache uninstall to stop)" if cmd == "install" else
                  "pyopencl builds its programs its own way again")
            return None
        if cmd in ("export", "import"):
            return self._bundle(cmd, args)
        if cmd != "clear" and (args.keys or args.older_than):
            raise OptionsError("KEY_PREFIX and --older-than go with %clcache clear only")
        if cmd not in (None, "clear") and args.device:
            raise OptionsError("--device goes with %clcache (the DataFrame), clear and export")
        if cmd is None:
            from .frames import cache_frame

            return cache_frame(args.device, compiler=self.compiler)
        if cmd == "stats":
            return manage.stats(self.compiler)
        if cmd == "history":
            from .frames import history_frame

            return history_frame(compiler=self.compiler)
        if cmd == "info":
            return manage.cache_info(self.compiler)
        if cmd == "clear":
            return manage.clear_cache(args.device, args.older_than, args.keys, self.compiler)
        from .widget import CacheWidget

        return CacheWidget(self.compiler)

    def _bundle(self, cmd: str, args):
        from .bundle import export_bundle, import_bundle

        if len(args.keys) != 1 or args.older_than or (cmd == "import" and args.device):
            usage = "export PATH [--device SPEC]" if cmd == "export" else "import PATH"
            raise OptionsError(f"usage: %clcache {usage}")
        store = self.compiler.store
        if store is None:
            raise OptionsError("the cache is off (memory only): set CLMAGIC_CACHE_DIR first")
        if cmd == "export":
            return export_bundle(args.keys[0], device=args.device, store=store)
        return import_bundle(args.keys[0], store=store)
