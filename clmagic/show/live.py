"""The result line under a cell that follows its save: a MISS's line says ``saving`` when it is
drawn (the user does not wait for the binary's readout and save) and ``saved`` once the save
is done, in place.

IPython's display ids do it: the line is published with one, and a daemon thread that waits
for the save publishes the line again as an update of that display. JupyterLab and the classic
notebook route an update to the display that has its id, whatever cell runs meanwhile, so the
line changes where it is; a front end without display ids keeps the first line (a terminal,
which would print the update as a second line, is not sent one), and the next rendering
(``r``, the history, the panel) says ``saved``. IPython is imported at the first
display (:mod:`clmagic.show.display`).
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from typing import TYPE_CHECKING

from clmagic.show.line import result_bundle

if TYPE_CHECKING:
    from clmagic.trip.results import BuildResult

__all__ = ["display_result"]


def display_result(result: BuildResult) -> None:
    """Display ``result``'s line (text and HTML, made once); while its save runs, update it in
    place when the save ends."""
    from clmagic.show.display import display, redraws_in_place  # IPython's, typed

    pending = result.pending
    if pending is None or pending.done or not redraws_in_place():
        display(result_bundle(result), raw=True)
        return
    display_id = f"clmagic-{uuid.uuid4().hex}"
    display(result_bundle(result), raw=True, display_id=display_id)
    # the cell's context (ipykernel keeps the request being answered in a context variable)
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(_update_when_saved, result, display_id),
                     name="clmagic-result-line", daemon=True).start()


def _update_when_saved(result: BuildResult, display_id: str) -> None:
    """Wait for the save, then draw the line again in place (``saved``, or why not)."""
    from clmagic.show.display import update_display

    result.settled  # noqa: B018 - waits for the save
    try:
        update_display(result_bundle(result), raw=True, display_id=display_id)
    except Exception:  # noqa: BLE001 - the kernel is going away: the first line stays
        pass
