"""Which rendering shows which data type, and the one place that tells IPython so.

The data types (a build result, the statistics, what a clear removed, where the cache is, the
bundle and warm reports) are defined below ``show/`` and import no renderer: a data layer that
imported its view would import upward, and a registry on the ground floor that the renderers
filled in would be the same upward dependency, hidden. So the views are attached from here:

- :func:`register` gives IPython's ``text/plain`` and ``text/html`` formatters a printer for
  each type *by name* (``for_type_by_name``), so nothing of the build trip or the cache is
  imported until one is shown. ``%load_ext clmagic`` (through the magics) and ``import
  clmagic`` in a running IPython call it, so ``clmagic.build(...)`` as a cell's value shows its
  line without the extension loaded.
- :func:`text_of` and :func:`html_of` are the same views for callers outside IPython (the
  command line, the panel, tests).

A type's own ``repr`` stays a plain data repr: outside IPython ``text_of(obj)`` is its words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["VIEWS", "text_of", "html_of", "register", "shows", "plain_printer"]

#: (module, class) of each data type shown → (renderer module in ``show/``, text view, HTML
#: view); by name, because naming a type must not import it (``tests/show/test_views.py`` checks
#: every name is a class that is defined there)
VIEWS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("clmagic.trip.results", "BuildResult"): ("line", "result_text", "result_html"),
    ("clmagic.trip.records", "Stats"): ("cache", "stats_text", "stats_html"),
    ("clmagic.cache.manage", "Removed"): ("cache", "removed_text", "removed_html"),
    ("clmagic.cache.manage", "CacheInfo"): ("cache", "info_text", "info_html"),
    ("clmagic.cache.bundle", "BundleReport"): ("cache", "export_text", "export_html"),
    ("clmagic.cache.bundle", "ImportReport"): ("cache", "import_text", "import_html"),
    ("clmagic.cache.warm", "WarmReport"): ("cache", "warm_text", "warm_html"),
    ("clmagic.opencl.timing", "Timing"): ("facts", "timing_text", "timing_html"),
    ("clmagic.cache.checker.findings", "CheckReport"): ("check", "check_text", "check_html"),
}

_FORMATS = ("text/plain", "text/html")


def _views_of(obj: object) -> tuple[Callable[[Any], str], Callable[[Any], str]] | None:
    """The (text, HTML) renderers of ``obj``'s type, or of the nearest base that has them."""
    for cls in type(obj).__mro__:
        found = VIEWS.get((cls.__module__, cls.__name__))
        if found is not None:
            import importlib  # not at import: naming the views loads none

            module = importlib.import_module(f"clmagic.show.{found[0]}")  # any renderer named
            text: Callable[[Any], str] = getattr(module, found[1])
            page: Callable[[Any], str] = getattr(module, found[2])
            return text, page
    return None


def text_of(obj: object) -> str:
    """``obj`` in words, as a cell shows it (``str(obj)`` for a type without a view)."""
    views = _views_of(obj)
    return views[0](obj) if views is not None else str(obj)


def html_of(obj: object) -> str | None:
    """``obj`` as HTML, as a notebook shows it (``None`` for a type without a view)."""
    views = _views_of(obj)
    return views[1](obj) if views is not None else None


def plain_printer(obj: object, p: Any, cycle: bool) -> None:
    """The ``text/plain`` formatter's printer (IPython's pretty printer calls it so)."""
    p.text(text_of(obj))


def _printer_for(formatter: Any, key: tuple[str, str]) -> object:
    """What ``formatter`` holds for the type named ``key`` now (by name, or by the type once
    IPython has looked it up), else ``None``."""
    found = formatter.deferred_printers.get(key)
    if found is None:
        found = next((p for cls, p in formatter.type_printers.items()
                      if (getattr(cls, "__module__", None), getattr(cls, "__name__", None)) == key),
                     None)
    return found


def register(ip: InteractiveShell) -> None:
    """Give ``ip``'s ``text/plain`` and ``text/html`` formatters the views of every type in
    :data:`VIEWS`, by name (nothing imported). A printer the user registered for one of them
    stays: only a type with none, or with ours, gets ours."""
    ours = {"text/plain": plain_printer, "text/html": html_of}
    formatters = getattr(ip.display_formatter, "formatters", None) or {}
    for kind in _FORMATS:
        formatter = formatters.get(kind)
        if formatter is None:
            continue
        for key in VIEWS:
            if _printer_for(formatter, key) in (None, ours[kind]):
                formatter.for_type_by_name(key[0], key[1], ours[kind])


def shows(ip: object, kind: type) -> bool:
    """Whether ``ip`` shows a ``kind`` with these views in both text and HTML, so its bundle can
    be made once and published as it is (a formatter turned off, or one the user registered
    for the type, and ``display`` has to ask the formatters)."""
    formatters = getattr(getattr(ip, "display_formatter", None), "formatters", None)
    if formatters is None:
        return False
    ours = {"text/plain": plain_printer, "text/html": html_of}
    for name in _FORMATS:
        formatter = formatters.get(name)
        if formatter is None or not formatter.enabled:
            return False
        try:
            if formatter.lookup_by_type(kind) is not ours[name]:
                return False
        except KeyError:
            return False
    return True
