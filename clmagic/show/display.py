"""Typed fronts of ``IPython.display``'s ``display`` and ``update_display``, which IPython
leaves unannotated: under mypy ``--strict`` each call of them would be an untyped call, so
every renderer that publishes calls these, and the one ``type: ignore`` each needs is here.
IPython is imported at the first call (rendering a value does not need it)."""

from __future__ import annotations

__all__ = ["display", "redraws_in_place", "update_display"]


def display(obj: object, *, raw: bool = False, display_id: str | None = None) -> None:
    """``IPython.display.display(obj)``: shown by IPython's formatters, or, with ``raw``,
    ``obj`` is a MIME bundle (``{"text/plain": ..., "text/html": ...}``) published as it is;
    ``display_id`` names the display so that :func:`update_display` can redraw it."""
    from IPython.display import display as ipython_display

    ipython_display(obj, raw=raw, display_id=display_id)  # type: ignore[no-untyped-call]


def update_display(obj: object, *, display_id: str, raw: bool = False) -> None:
    """``IPython.display.update_display``: draw ``obj`` again in place of the display
    ``display_id`` (front ends without display ids keep the first drawing)."""
    from IPython.display import update_display as ipython_update

    ipython_update(obj, display_id=display_id, raw=raw)  # type: ignore[no-untyped-call]


def redraws_in_place() -> bool:
    """Whether an update of a display is drawn in place: in a kernel (ipykernel's publisher,
    which sends ``update_display_data`` to the front end). A terminal IPython or a plain
    ``InteractiveShell`` prints an update as one more output: there the first line stays."""
    from IPython import get_ipython

    shell = get_ipython()
    publisher = getattr(shell, "display_pub", None)
    return type(publisher).__module__.startswith("ipykernel")
