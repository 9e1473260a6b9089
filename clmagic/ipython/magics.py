"""``%%clkernel`` and ``%clcache``: a thin IPython layer over :class:`clmagic.Compiler` and
:mod:`clmagic.cache.manage`."""

from __future__ import annotations

import keyword
from typing import TYPE_CHECKING, Any

from IPython.core.magic import Magics, magics_class
from traitlets import Bool, Int, TraitError, Unicode, observe, validate

from clmagic.errors import OptionsError
from clmagic.ipython import pager
from clmagic.ipython.line import misspelt_option, parse_line, split_opts
from clmagic.ipython.typed import argument, cell_magic, display, line_magic, magic_arguments
from clmagic.show import views

if TYPE_CHECKING:
    import pyopencl as cl
    from IPython.core.interactiveshell import InteractiveShell

    from clmagic.trip.compiler import BuildResult, Compiler

# Nothing of the build path (pyopencl, the compiler, the stores) is imported here: ``%load_ext``
# registers the magics only, and the first cell imports what it runs.
__all__ = ["CLMagics", "split_opts", "CLCACHE_COMMANDS"]

#: ``%clcache``'s subcommands, in the order ``%clcache?`` lists them (those of
#: :data:`clmagic.ipython.clcache.CLCACHE`, which is loaded by the first ``%clcache``)
CLCACHE_COMMANDS = ("stats", "history", "info", "clear", "widget", "export", "import", "install",
                    "uninstall", "use", "kernels")


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
    max_size = Unicode(
        "", help="Size limit of the cache (500M, 2G, 0 = none), as CLMAGIC_CACHE_MAX_SIZE; "
                 "empty: the environment's. Applies to the store of the following builds."
    ).tag(config=True)
    memory_max = Int(
        0, help="Programs kept in memory (least recently used dropped first), as "
                "CLMAGIC_MEMORY_MAX; 0: the environment's."
    ).tag(config=True)

    def __init__(self, shell: InteractiveShell | None = None, compiler: Compiler | None = None,
                 **kwargs: Any) -> None:
        self._limited: Compiler | None = None  # the compiler the configured limits were set on
        super().__init__(shell=shell, **kwargs)
        self._compiler = compiler
        if shell is not None:  # the result line, the statistics, the reports: by type name
            views.register(shell)
            pager.register(shell)  # %clcache? printed where the output goes, paged on a terminal
        if self.cache_every_program:  # set in a config file, before any observer ran
            self._hook({"new": True})

    @validate("max_size")
    def _valid_size(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"])
        if value.strip():
            from clmagic.config import parse_size

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
        from clmagic._warn import warn
        from clmagic.config import parse_size

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
        from clmagic.process import hook

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
        from clmagic.process.session import get_compiler

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
        import pyopencl as cl

        ns = self._namespace
        for name in ("cl_ctx", "ctx"):
            ctx = ns.get(name)
            if isinstance(ctx, cl.Context) and list(ctx.devices) == [dev]:
                return ctx
        return None

    def _bind(self, result: BuildResult, name: str | None) -> str:
        """Bind the kernels (and ``cl_ctx``/``cl_queue``); returns what to say when that moved
        ``cl_ctx`` to another device, whose buffers the old context's kernels cannot use."""
        import pyopencl as cl

        from clmagic._warn import warn

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
    @argument("--show", choices=["ptx"],
              help="ptx: the compiled code under the cell (NVIDIA's PTX; elsewhere what the "
                   "driver's binary is).")
    @argument("--sweep", action="append", metavar="NAME=V1,V2",
              help="Build every variant over -DNAME=V (repeat for more names) through the "
                   "cache in parallel, time each with --run, bind the best; the cell's value "
                   "is the DataFrame.")
    @argument("--run", metavar="FUNC",
              help="--sweep: the launch, a function of the namespace taking the build result "
                   "and returning clmagic.time_kernel(...) (or µs).")
    @argument("--fresh", action="store_true",
              help="--sweep: time every variant again, ignoring the timings kept from "
                   "earlier runs.")
    @argument("--opts", metavar="OPTIONS...",
              help="Build options, to the end of the line (-O0…-O3 are mapped for the driver).")
    @cell_magic
    def clkernel(self, line: str, cell: str) -> object:
        """Compile the cell's OpenCL C through clmagic's binary cache.

        Every kernel of the program is bound under its own name, with ``cl_ctx`` and
        ``cl_queue``; one line under the cell says HIT or MISS and the time taken.
        """
        rest, opts = split_opts(line)
        typo = misspelt_option(rest, self.clkernel)
        if typo:
            raise OptionsError(typo)
        args = parse_line(self.clkernel, rest)
        if args.name is not None and not (args.name.isidentifier()
                                          and not keyword.iskeyword(args.name)):
            raise OptionsError(f"--name {args.name!r} is not a Python variable name")
        if args.device is not None and not args.device.strip():
            raise OptionsError("--device needs a device: \"P:D\" or part of its name "
                               "(clmagic.list_devices() shows them)")
        if not cell.strip():
            raise OptionsError("empty cell: write OpenCL C below the %%clkernel line")
        info, dev = self.compiler.resolve(args.device)
        if args.sweep or args.run or args.fresh:
            return self._sweep(args, cell, opts, info)
        result = self.compiler.build(
            cell, opts, info, context=self._user_context(dev), use_cache=not args.no_cache,
            line_offset=1,
        )
        moved = self._bind(result, args.name)
        if not result.kernels:
            from clmagic._warn import warn

            warn("the cell compiled but defines no __kernel function: nothing bound")
        if not (args.quiet or self.quiet):
            self._show(result)
        if args.show:
            from clmagic.ipython.tuning import show_code

            show_code(result)
        if moved:  # said even with --quiet: the user's buffers no longer fit
            print(moved)
        return None

    def _sweep(self, args: Any, cell: str, opts: str | None, info: object) -> object:
        """``--sweep``: every variant through the cache, timed with ``--run``; the best
        variant's kernels bound (:mod:`clmagic.ipython.tuning`)."""
        from clmagic.ipython.tuning import parse_sweeps, run_sweep

        if not args.sweep:
            raise OptionsError(f"{'--run' if args.run else '--fresh'} goes with --sweep "
                               "NAME=V1,V2")
        moved: list[str] = []
        df = run_sweep(self._namespace, self.compiler, cell, parse_sweeps(args.sweep),
                       opts or "", info, args.run,
                       lambda best: moved.append(self._bind(best, args.name)), args.fresh)
        if moved and moved[0]:
            print(moved[0])
        return df

    @line_magic
    def cltime(self, line: str) -> object:
        """Time a kernel launch with OpenCL profiling events (:func:`clmagic.time_kernel`).

        ``%cltime [-r REPEATS] KERNEL(QUEUE, GLOBAL_SIZE, LOCAL_SIZE, *ARGS)``, written as the
        kernel is called; its median, min and spread in µs (``t = %cltime ...`` keeps them).
        """
        from clmagic.ipython.tuning import cltime

        return cltime(self._namespace, line)

    @line_magic
    def clcheck(self, line: str) -> object:
        """Check one kernel launch under Oclgrind (:func:`clmagic.check_kernel`): out-of-bounds
        accesses, data races, uninitialised values, barrier divergence, each once with the
        cell's line. ``%clcheck [--timeout S] KERNEL(QUEUE, GLOBAL_SIZE, LOCAL_SIZE, *ARGS)``.
        """
        from clmagic.ipython.check import clcheck

        return clcheck(self._namespace, line, self.compiler)

    def _show(self, result: BuildResult) -> None:
        """The result line under the cell, as ``display(result)`` shows it: its text and HTML
        made once and published as they are, without asking each of IPython's formatters (a
        shell that shows text only, or a formatter the user registered for build results, goes
        through ``display``)."""
        if not views.shows(self.shell, type(result)):
            display(result)
            return
        from clmagic.show.live import display_result

        display_result(result)  # "saving", then "saved" in place when the save ends

    @magic_arguments()
    @argument("command", nargs="?", metavar="COMMAND", choices=CLCACHE_COMMANDS,
              help="stats | history | info | clear | widget | export | import | install | "
                   "uninstall | use | kernels (none: the entries as a DataFrame).")
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
        ``%clcache kernels [--device SPEC]``
                                     every stored kernel's facts as a DataFrame (registers and
                                     spills on NVIDIA with -cl-nv-verbose, work-group sizes,
                                     local and private memory, argument names)
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
        from clmagic.ipython.clcache import run_clcache

        return run_clcache(self, parse_line(self.clcache, line))
