"""Reading a magic's line: ``--opts`` to the end of the line, a misspelt option, the arguments
(unquoted), each bad line as one :class:`~clmagic.errors.OptionsError`."""

from __future__ import annotations

import ast
import re
from argparse import ArgumentParser, Namespace
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from IPython.core.error import UsageError

from clmagic.errors import OptionsError
from clmagic.ipython.typed import options_of, parse_argstring, parser_of

__all__ = ["split_opts", "misspelt_option", "parse_line", "launch_line", "launch_values"]

_OPTS = re.compile(r"(?:^|\s)--opts(?:=|\s+|$)")
#: lines already read, per magic (a re-run cell reads its line once); at most this many each
_READ_MAX = 256
_read: OrderedDict[tuple[ArgumentParser, str], Namespace] = OrderedDict()


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
    if "--opts" not in line:
        return line, None
    m = next((m for m in _OPTS.finditer(line) if _outside_quotes(line, m.start())), None)
    if not m:
        return line, None
    opts = line[m.end():].strip()
    if not opts:
        raise OptionsError("--opts needs build options after it, e.g. --opts -O3 -cl-mad-enable")
    return line[: m.start()], opts


def misspelt_option(rest: str, magic: Callable[..., object]) -> str | None:
    """``--opt is not an option of %%clkernel; did you mean --opts?`` for the first word that
    looks like an option, is none of ``magic``'s, and is close to one of them (argparse would
    take ``--opt`` for ``--opts`` and complain about its value instead)."""
    options = options_of(magic)  # option string → whether it takes a value
    longs = [o for o in options if o.startswith("--") and o != "--help"]
    words = iter(rest.split())
    for word in words:
        name = word.split("=", 1)[0]
        if name in options:
            if options[name] and "=" not in word:
                next(words, None)  # its value
            continue
        if word.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name.lstrip("-"), [o[2:] for o in longs], n=1,
                                              cutoff=0.7)
            if close:
                return (f"{name} is not an option of %%{parser_of(magic).prog.split()[-1]}; "
                        f"did you mean --{close[0]}?")
    return None


def parse_line(magic: Callable[..., object], line: str) -> Namespace:
    """The magic's arguments, unquoted, or one :class:`OptionsError` line (argparse's usage
    errors, and unbalanced quotes, which ``shlex`` reports as ``ValueError``). A line read
    before is not read again: its arguments are copied."""
    parser = parser_of(magic)
    known = _read.get((parser, line))
    if known is not None:
        return _copy(known)
    try:
        args = parse_argstring(magic, line)
    except UsageError as exc:
        raise OptionsError(str(exc)) from None
    except ValueError as exc:
        raise OptionsError(f"cannot read the magic line {line.strip()!r}: {exc}") from None
    for name, value in vars(args).items():  # IPython keeps the quotes: --name "x" means x
        if isinstance(value, list):
            setattr(args, name, [_unquote(v) for v in value])
        elif isinstance(value, str):
            setattr(args, name, _unquote(value))
    if len(_read) >= _READ_MAX:
        _read.popitem(last=False)  # O(1): a dict's next(iter()) walks deleted slots
    _read[(parser, line)] = _copy(args)
    return args


def _copy(args: Namespace) -> Namespace:
    return Namespace(**{n: list(v) if isinstance(v, list) else v for n, v in vars(args).items()})


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def launch_line(line: str, flags: Sequence[str], usage: str) -> tuple[str | None, ast.Call]:
    """A launch magic's line (``%cltime``, ``%clcheck``): an optional flag of ``flags`` with its
    value (returned as written, ``None`` when absent), then the launch written as the kernel
    is called, ``KERNEL(QUEUE, GLOBAL_SIZE, LOCAL_SIZE, *ARGS)``; anything else is ``usage``."""
    words = line.split()
    value = None
    if len(words) >= 2 and words[0] in flags:
        value = words[1]
        line = line.split(None, 2)[2] if len(words) > 2 else ""
    try:
        tree = ast.parse(line.strip(), mode="eval")
    except SyntaxError:
        raise OptionsError(usage) from None
    if not isinstance(tree.body, ast.Call) or len(tree.body.args) < 3 or tree.body.keywords:
        raise OptionsError(usage)
    return value, tree.body


def launch_values(call: ast.Call, ns: dict[str, Any], magic: str) -> list[Any]:
    """The kernel, queue, sizes and arguments of a launch line, evaluated in the user's
    namespace (what the user wrote runs as a cell would run it). One that raises (a name not
    defined yet, a typo) is one line naming it, not a traceback through the magic."""
    values = []
    for node in (call.func, *call.args):
        try:
            values.append(eval(compile(ast.Expression(node), f"<%{magic}>", "eval"), ns))  # noqa: S307
        except Exception as exc:  # the user's own expression: said, not traced
            raise OptionsError(f"%{magic}: {ast.unparse(node)}: {type(exc).__name__}: "
                               f"{exc}".splitlines()[0]) from None
    return values
