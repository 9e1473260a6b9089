"""Typed fronts of the IPython helpers the magics use, whose own code is unannotated
(``IPython.core.magic_arguments``; ``display`` is :mod:`clmagic.show.display`'s) or typed loosely
(``cell_magic`` and ``line_magic`` return a union of the function and a decorator): mypy
``--strict`` would make every magic they decorate untyped, so each is called here once, behind
a signature, with the one ``type: ignore`` its call needs.

:func:`argument` also keeps each magic's option table (option string → whether it takes a
value), read by :func:`options_of`: argparse has no public way to list a parser's options, and
:func:`clmagic.ipython.line.misspelt_option` needs them.
"""

from __future__ import annotations

from argparse import ArgumentParser, Namespace
from collections.abc import Callable
from typing import Any, TypeVar

from IPython.core import magic as _ipython_magic
from IPython.core import magic_arguments as _ipython_args

__all__ = ["cell_magic", "line_magic", "magic_arguments", "argument", "parser_of",
           "options_of", "parse_argstring", "display"]

#: a magic method (IPython's decorators give it back, with attributes added)
_F = TypeVar("_F", bound=Callable[..., Any])

#: the attribute under which :func:`argument` keeps a magic's options (IPython keeps its parser
#: under ``parser`` the same way)
_OPTIONS = "clmagic_options"


def cell_magic(func: _F) -> _F:
    """IPython's ``@cell_magic``: marks the method for ``@magics_class`` (which registers it
    under its own name), and gives it back unchanged."""
    _ipython_magic.cell_magic(func)  # the naked call records func, returns func itself
    return func


def line_magic(func: _F) -> _F:
    """IPython's ``@line_magic``, as :func:`cell_magic`."""
    _ipython_magic.line_magic(func)
    return func


def magic_arguments() -> Callable[[_F], _F]:
    """IPython's ``@magic_arguments()``: makes the magic's parser from the ``@argument``
    decorators below it (its help shown by ``%magic?``)."""
    # IPython's decorator classes are unannotated; each gives back the function it was given
    decorate: Callable[[_F], _F] = _ipython_args.magic_arguments()  # type: ignore[no-untyped-call]
    return decorate


def argument(*names: str, **kwargs: Any) -> Callable[[_F], _F]:
    """IPython's ``@argument(...)`` (``argparse``'s ``add_argument`` arguments), recording the
    option's strings and whether it takes a value, as argparse itself judges them (the
    arguments are added to a scratch parser, whose public ``add_argument`` returns the
    action)."""
    action = ArgumentParser(add_help=False).add_argument(*names, **kwargs)
    # unannotated, as in magic_arguments: it gives back the function it was given
    decorate: Callable[[_F], _F] = _ipython_args.argument(  # type: ignore[no-untyped-call]
        *names, **kwargs)

    def record(func: _F) -> _F:
        known: dict[str, bool] = getattr(func, _OPTIONS, {})
        # the decorators run bottom-up: this option goes before those declared below it
        setattr(func, _OPTIONS, {**{o: action.nargs != 0 for o in action.option_strings},
                                 **known})
        return decorate(func)

    return record


def parser_of(magic: Callable[..., object]) -> ArgumentParser:
    """The parser ``@magic_arguments()`` made for ``magic`` (a function or a bound method)."""
    parser = getattr(magic, "parser", None)
    if not isinstance(parser, ArgumentParser):
        raise TypeError(f"{magic!r} has no @magic_arguments() parser")
    return parser


def options_of(magic: Callable[..., object]) -> dict[str, bool]:
    """``magic``'s option strings (``--name``, ``-n``, ...; positional arguments have none),
    each with whether it takes a value (``--quiet`` does not)."""
    options: dict[str, bool] = getattr(magic, _OPTIONS, {})
    return dict(options)


def parse_argstring(magic: Callable[..., object], line: str) -> Namespace:
    """IPython's ``parse_argstring``: ``line`` read by ``magic``'s parser (shell-split; raises
    ``UsageError`` for a bad line, ``ValueError`` for unbalanced quotes)."""
    # unannotated in IPython; its parser's parse_args gives a Namespace
    args: Namespace = _ipython_args.parse_argstring(magic, line)  # type: ignore[no-untyped-call]
    return args


def display(obj: object, *, raw: bool = False) -> None:
    """IPython's ``display(obj)`` (``raw``: ``obj`` is a MIME bundle, published as it is),
    through the renderers' typed front, :func:`clmagic.show.display.display` (imported at the
    first display, not at ``%load_ext``)."""
    from clmagic.show.display import display as show

    show(obj, raw=raw)
