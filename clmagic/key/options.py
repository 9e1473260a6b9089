"""Build options: parse what the user wrote, map ``-O0``…``-O3``, and say what the driver gets."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from clmagic.errors import OptionsError

__all__ = ["BuildOptions", "parse_options", "exact_options"]

_OPT_LEVEL = re.compile(r"^-O([0-3s]?)$")
# printable ASCII, space and tab, without quotes or backslash: no shell-like syntax to parse
_PLAIN = re.compile(r"[\t !#-&(-\[\]-~]*")
_DEFINE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class BuildOptions:
    """The options as written and as the driver receives them.

    ``effective`` is the exact string passed to ``clBuildProgram`` and hashed into the key:
    the tokens joined by spaces, as pyopencl's ``Program.build`` passes them (no shell quoting
    is added: ``-DSCALE=(2*3)`` arrives as written). ``exact``, when set, is that string
    verbatim (options another library already made, see :func:`exact_options`); ``tokens`` then
    name only its ``-I`` folders.
    """

    written: str
    tokens: tuple[str, ...]
    exact: str | None = None

    @property
    def effective(self) -> str:
        """The option string the driver receives."""
        return self.exact if self.exact is not None else " ".join(self.tokens)

    @property
    def include_dirs(self) -> tuple[str, ...]:
        """The ``-I`` folders, in order."""
        return tuple(t[2:] for t in self.tokens if t.startswith("-I"))


def _split(options: str | Iterable[str] | None) -> tuple[str, list[str]]:
    if options is None:
        return "", []
    if isinstance(options, str):
        if _PLAIN.fullmatch(options):
            return options, options.split()  # what shlex.split gives here, 10× faster
        try:
            return options, shlex.split(options)
        except ValueError as exc:
            raise OptionsError(f"cannot parse build options {options!r}: {exc}") from None
    items = [str(o) for o in options]
    return " ".join(items), items


def parse_options(options: str | Iterable[str] | BuildOptions | None) -> BuildOptions:
    """Normalise build options.

    ``-O0`` becomes ``-cl-opt-disable``; ``-O``, ``-O1``…``-O3`` and ``-Os`` become the driver's
    default optimisation (some drivers, POCL among them, reject ``-O3``). ``-D NAME[=V]`` and
    ``-I DIR`` are joined into one token each (``-DNAME=V``, ``-IDIR``) so that two spellings of
    the same driver input share a key; everything else is passed through in order.
    """
    if isinstance(options, BuildOptions):
        return options
    written, raw = _split(options)
    tokens: list[str] = []
    it = iter(raw)
    for tok in it:
        level = _OPT_LEVEL.match(tok)
        if level:
            if level.group(1) == "0":
                tokens.append("-cl-opt-disable")
            continue
        if tok in ("-D", "-I"):
            value = next(it, None)
            if value is None or value.startswith("-"):
                raise OptionsError(f"{tok} needs a value (in {written!r})")
            tok = tok + value
        if tok.startswith("-D"):
            name = tok[2:].split("=", 1)[0]
            if not _DEFINE_NAME.match(name):
                raise OptionsError(f"malformed define {tok!r}: expected -DNAME or -DNAME=VALUE")
        elif tok.startswith("-I") and len(tok) == 2:
            raise OptionsError(f"-I needs a folder (in {written!r})")
        tokens.append(tok)
    return BuildOptions(written=written, tokens=tuple(tokens))


def exact_options(options: str, include_dirs: Iterable[str] = ()) -> BuildOptions:
    """Options passed to the driver exactly as given, nothing mapped (pyopencl's own options,
    with its include folder: the driver then receives what it would without clmagic).
    ``include_dirs`` are the ``-I`` folders the caller found in them, for the header rules."""
    return BuildOptions(written=options, tokens=tuple(f"-I{d}" for d in include_dirs),
                        exact=options)
