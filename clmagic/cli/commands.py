"""The cache commands of ``clmagic`` (``ls``, ``stats``, ``clear``, ``prune``, ``export``,
``import``, ``warm``, ``config``): each reads its parsed arguments, calls the library
(:mod:`clmagic.cache.manage`, :mod:`clmagic.cache.bundle`, :mod:`clmagic.cache.warm`), prints,
and returns the exit status: 0 done, 1 the work failed (in part), 2 bad input (raised as
:class:`~clmagic.errors.ClmagicError` and printed by :func:`clmagic.cli.main.main`).

pandas prints the tables; tqdm draws ``warm``'s progress bar on a terminal (imported there only).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clmagic._format import count_of, fmt_bytes
from clmagic._warn import held_warnings
from clmagic.cli.table import terminal_width
from clmagic.config import Settings, parse_age, parse_size
from clmagic.errors import ClmagicError, OptionsError
from clmagic.show.views import text_of
from clmagic.store._fs import kind_of

if TYPE_CHECKING:
    from clmagic.trip.compiler import Compiler

__all__ = ["HANDLERS"]


def _compiler(writable: bool = False) -> Compiler:
    """The compiler of the environment's settings; bad input when the cache is off, and (for a
    command that changes it) :class:`ReadOnly` when it cannot be written: one line, in place
    of the store's own warning."""
    from clmagic.trip.compiler import Compiler

    with held_warnings() as held:
        c = Compiler(Settings.from_env())
    store = c.store
    if store is None:
        raise OptionsError("the cache is off (memory only): set CLMAGIC_CACHE_DIR")
    if writable and not store.writable:
        raise ReadOnly(f"the cache at {store.location} cannot be written "
                       f"({store.reason or 'read-only'}); nothing changed")
    for message in held:
        print(f"clmagic: warning: {message}", file=sys.stderr)
    return c


class ReadOnly(ClmagicError):
    """The store cannot be written (exit status 1: nothing wrong with the input)."""


def _input_path(path: str, what: str, folders: bool = False) -> None:
    """Bad input (one line, exit 2) unless ``path`` is a regular file to read (or, with
    ``folders``, a folder): a FIFO, a device or a socket is named for what it is (reading one
    would block or mean nothing), a missing path as missing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise OptionsError(f"no such {what}: {path}") from None
    except OSError as exc:
        raise OptionsError(f"cannot read {path}: {exc.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or (folders and stat.S_ISDIR(st.st_mode))):
        raise OptionsError(f"{path} is {kind_of(st.st_mode)}, not a {what}")


def _output_file(path: str, what: str, replace: bool) -> None:
    """Bad input unless ``path`` can be written as a new file: its folder exists (none is made
    unasked), and what is there already is a regular file that ``replace`` allows to go."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OptionsError(f"no such folder {folder} for the {what}; nothing written")
    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise OptionsError(f"{path} is {kind_of(st.st_mode)}, not a {what}; nothing written")
    if not replace:
        raise OptionsError(f"{path} exists; choose another path or pass --force")


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _ls(args: argparse.Namespace) -> int:
    from clmagic.show.frames import cache_frame

    df = cache_frame(args.device, compiler=_compiler(), origin=args.origin)
    if args.sort not in df.columns:
        raise OptionsError(f"--sort {args.sort!r}: no such column; columns: "
                           + ", ".join(df.columns))
    numeric = df[args.sort].dtype.kind in "iufmM"
    df = df.sort_values(args.sort, ascending=not numeric, kind="stable", ignore_index=True)
    if args.json:
        sys.stdout.write(df.to_json(orient="records", date_format="iso", indent=2) + "\n")
    elif args.csv:
        df.to_csv(sys.stdout, index=False)
    elif df.empty:
        print("no entries")
    else:
        from clmagic.cli.listing import ls_lines

        print("\n".join(ls_lines(df, terminal_width())))
    return 0


def _stats(args: argparse.Namespace) -> int:
    from clmagic.cache import manage

    c = _compiler(writable=args.zero)
    if args.zero:
        zeroed = manage.zero_stats(c)
        if not args.json:
            where = c.store.location  # type: ignore[union-attr]
            print(f"lifetime statistics of {where} set to zero" if zeroed else
                  f"nothing to zero: no lifetime statistics in {where} since the last zero")
            return 0
    s = manage.stats(c)
    if args.json:
        _print_json(s.as_dict())
    else:
        from clmagic.cli.listing import stats_lines
        from clmagic.show.cache import stats_text

        width = terminal_width()
        print("\n".join(stats_lines(s, stats_text(s, width))))
    return 0


def _confirm(question: str) -> bool:
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _clear(args: argparse.Namespace) -> int:
    from clmagic.cache import manage

    if args.older_than is not None:
        parse_age(args.older_than)  # bad input before anything is opened
    c = _compiler(writable=True)
    everything = not (args.keys or args.device or args.older_than or args.origin)
    if everything:
        going = manage.to_clear(compiler=c, remote=args.remote)
        if not going.entries:  # nothing to ask about, nothing to do
            return _say_removed(args, going, f"nothing to remove: no entries in "
                                             f"{going.location}")
        if not args.yes and sys.stdin.isatty() and not _confirm(
                f"remove {count_of(going.entries, 'entry')} ({fmt_bytes(going.bytes)}) "
                f"from {going.location}?"):
            print("nothing removed")
            return 1
    removed = manage.clear_cache(args.device, args.older_than, args.keys, c, origin=args.origin,
                                 remote=args.remote)
    return _say_removed(args, removed, text_of(removed))


def _say_removed(args: argparse.Namespace, removed: Any, text: str) -> int:
    """What a clear removed: ``text``, or the counts as JSON."""
    if args.json:
        _print_json({"entries": removed.entries, "bytes": removed.bytes,
                     "location": removed.location})
    else:
        print(text)
    return 0


def _prune(args: argparse.Namespace) -> int:
    from clmagic.cache import manage

    max_size = parse_size(args.max_size) if args.max_size is not None else None
    if args.older_than is not None:
        parse_age(args.older_than)
    c = _compiler(writable=True)
    removed = manage.prune(max_size=max_size, older_than=args.older_than, compiler=c)
    if args.json:
        _print_json({"entries": removed.entries, "bytes": removed.bytes,
                     "location": removed.location, "left_entries": removed.left_entries,
                     "left_bytes": removed.left_bytes})
        return 0
    raw = (args.max_size or "").strip()
    asked = [f"down to {fmt_bytes(max_size)}" if raw.isdigit() else
             f"down to {raw} = {fmt_bytes(max_size)}"] if max_size else []
    asked += [f"unused for {args.older_than}"] if args.older_than else []
    print(text_of(removed).replace("removed", "evicted", 1)
          + (f" ({', '.join(asked)})" if asked else " (down to the cache's limit)"))
    print(f"left: {count_of(removed.left_entries, 'entry')}, {fmt_bytes(removed.left_bytes)}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from clmagic.cache.bundle import export_bundle

    _output_file(args.path, "bundle file", replace=args.force)
    c = _compiler()
    report = export_bundle(args.path, device=args.device, kernels=args.kernel, store=c.store,
                           overwrite=args.force)
    if args.json:
        _print_json({"path": report.path, "entries": report.entries, "bytes": report.bytes,
                     "devices": report.devices, "failed": report.failed})
    else:
        print(text_of(report))
    return 1 if report.failed else 0


def _import(args: argparse.Namespace) -> int:
    from clmagic.cache.bundle import import_bundle
    from clmagic.show.progress import counted_bar

    _input_path(args.path, "bundle file")
    c = _compiler(writable=True)
    with counted_bar("proving imported binaries", "entry",
                     show=not args.json and sys.stderr.isatty()) as step:
        report = import_bundle(args.path, store=c.store, progress=step)
    if args.json:
        _print_json({"path": report.path, "imported": report.imported,
                     "proven": report.proven, "skipped": report.skipped, "failed": report.failed,
                     "reasons": report.reasons, "missing_devices": report.missing_devices})
    else:
        print(text_of(report))
    return 1 if report.failed else 0


def _warm(args: argparse.Namespace) -> int:
    from clmagic.cache.warm import find_sources, warm

    if args.jobs is not None and args.jobs < 1:
        raise OptionsError(f"--jobs {args.jobs}: need at least one process")
    for path in args.paths:  # missing paths, FIFOs: one line, exit 2, before any work
        _input_path(path, "file or folder", folders=True)
    settings = Settings.from_env()
    files = find_sources(args.paths)
    if not files:
        raise OptionsError("no .cl files under " + ", ".join(args.paths))
    _compiler(writable=True)  # a cache that cannot be written: say so before building
    opts = " ".join([args.opts, *(f"-D{d}" for d in args.defines),
                     *(f"-I{i}" for i in args.includes)]).strip()
    bar, progress = _progress(len(files), quiet=args.json)
    try:
        report = warm(files, opts, args.device, args.jobs, settings, progress)
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        _print_json(report.as_dict())
    else:
        print(text_of(report))
    if report.interrupted:
        return 130
    return 1 if report.failed else 0


def _progress(total: int, quiet: bool) -> tuple[Any, Callable[[str, str], None] | None]:
    """A tqdm bar on a terminal (stderr), else nothing."""
    if quiet or not sys.stderr.isatty():
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="file", desc="warming", file=sys.stderr)

    def step(path: str, outcome: str) -> None:
        bar.set_postfix_str(f"{outcome} {path[-40:]}", refresh=False)
        bar.update(1)

    return bar, step


def _config(args: argparse.Namespace) -> int:
    rows = Settings.from_env().describe()
    if args.json:
        _print_json([{"setting": n, "variable": v, "value": val, "origin": o}
                     for n, v, val, o in rows])
        return 0
    from clmagic.cli.listing import config_lines

    print("\n".join(config_lines(rows, terminal_width())))
    return 0


def _guard(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except ReadOnly as exc:
            print(f"clmagic: {exc}", file=sys.stderr)
            return 1

    return run


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    name: _guard(fn) for name, fn in {
        "ls": _ls, "stats": _stats, "clear": _clear, "prune": _prune, "export": _export,
        "import": _import, "warm": _warm, "config": _config}.items()
}
