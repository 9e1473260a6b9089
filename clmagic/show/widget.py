"""The device / clear panel: ``clmagic.CacheWidget()`` or ``%clcache widget``.

ipywidgets (and matplotlib, for the plot) are imported here only.
"""

from __future__ import annotations

import functools
import html
import importlib.util
import io
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import ipywidgets as w

from clmagic._format import count_of, short_key
from clmagic.cache.manage import clear_cache, entry_origin, lifetime_counts, remove_entries
from clmagic.errors import DeviceError
from clmagic.opencl import devices as _devices
from clmagic.opencl.facts import facts_from_json
from clmagic.process.session import or_default
from clmagic.show.cache import (
    ENTRY_HEAD,
    device_option,
    entry_line,
    entry_options,
    panel_status_html,
)
from clmagic.show.facts import facts_line
from clmagic.show.views import text_of
from clmagic.trip.records import Stats, from_origin, tally_of

if TYPE_CHECKING:
    from clmagic.entry import Entry
    from clmagic.trip.compiler import Compiler

__all__ = ["CacheWidget"]

T = TypeVar("T")

_STYLE = ("<style>.clmagic-table select{font-family:monospace;font-size:12px}"
          ".clmagic-head{font-family:monospace;font-size:12px;white-space:pre}</style>")


def _guard(method: Callable[..., T]) -> Callable[..., T | None]:
    """Run a callback; show an exception in the widget's error area instead of losing it."""

    @functools.wraps(method)
    def run(self: CacheWidget, *args: Any, **kwargs: Any) -> T | None:
        self.last_error = None  # cleared when an action starts, so a nested error stays shown
        self.errors.value = ""
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # shown to the user, not swallowed
            self.last_error = exc
            self.errors.value = (f'<span style="color:#c0392b">error: '
                                 f"{html.escape(type(exc).__name__)}: {html.escape(str(exc))}"
                                 "</span>")
            return None

    return run


_stale: weakref.WeakSet[CacheWidget] = weakref.WeakSet()
_hooked: weakref.WeakSet[Any] = weakref.WeakSet()


def _refresh_stale(*_args: Any) -> None:
    """After a notebook cell ran: refresh the panels whose session changed during it (once per
    cell, however many builds it made)."""
    for widget in list(_stale):
        _stale.discard(widget)
        widget.refresh()


class CacheWidget(w.VBox):  # type: ignore[misc]  # ipywidgets ships no types: VBox is Any
    """See a device's entries, clear some or all, and choose the device for ``%%clkernel``.

    Looking is not choosing: the ``device`` dropdown picks whose entries are shown;
    ``use_button`` ("Use for %%clkernel") makes that device the one the next cells build for,
    and ``building`` says which one that is. The panel follows the session: after each cell that
    built or cleared through clmagic (each trip, outside a notebook) it re-reads that device's
    entries.

    Parts (attributes): ``device`` (Dropdown, "platform · device"), ``origin`` (Dropdown: all,
    ``cell`` or a module that built through :func:`clmagic.install`; shown once there are
    several), ``table`` (SelectMultiple of the device's entries of that origin, values are keys;
    "Clear all" clears those), ``facts`` (the selected entries' kernel facts), ``refresh_button``,
    ``clear_selected_button``, ``clear_all_button`` (asks for a second, confirming click),
    ``status`` (entries, bytes in KiB or MiB, hit rate,
    time saved), ``message`` (what the last action did), ``errors``, ``plot`` (the session's
    trips on the shown device, of the chosen origin: the status line's scope), ``empty`` (what
    an empty table says in its place).
    """

    children: Any  # ipywidgets' trait (ipywidgets ships no types)

    def __init__(self, compiler: Compiler | None = None, plot: bool | None = None):
        self.compiler = or_default(compiler)
        self.last_error: Exception | None = None
        self._armed = False
        self._updating = False
        self._entries: dict[str, Entry] = {}
        infos = _devices.list_devices()
        try:
            current = self.compiler.resolve()[0].spec
        except DeviceError:  # no device can build here: show the first one's entries
            current = infos[0].spec
        self.device = w.Dropdown(
            options=[(device_option(i), i.spec) for i in infos],
            value=current, description="device",
            layout=w.Layout(width="max-content"),
        )
        self.origin = w.Dropdown(options=[("all origins", "")], value="",
                                 description="origin", layout=w.Layout(width="max-content"))
        self.header = w.HTML(f'{_STYLE}<div class="clmagic-head">{html.escape(ENTRY_HEAD)}</div>')
        # the output area's width, less the margins ipywidgets puts around it (100% ran 4 px
        # past the output area: a sideways scrollbar under the panel)
        self.table = w.SelectMultiple(options=[], rows=10, layout=w.Layout(
            width="calc(100% - 2 * var(--jp-widgets-margin, 2px))"))
        self.table.add_class("clmagic-table")
        self.facts = w.HTML()  # the selected entries' kernel facts (_on_select)
        self.empty = w.HTML()  # in the table's place when it has no rows: not a blank box
        self.table.observe(self._on_select, names="value")
        self.use_button = w.Button(description="Use for %%clkernel", icon="check",
                                   layout=w.Layout(width="auto", min_width="190px"))
        self.building = w.HTML()
        self.refresh_button = w.Button(description="Refresh", icon="refresh")
        self.clear_selected_button = w.Button(description="Clear selected", icon="trash")
        self.clear_all_button = w.Button(description="Clear all for this device",
                                         button_style="warning", icon="trash",
                                         layout=w.Layout(width="auto"))
        self.status = w.HTML()
        self.message = w.HTML()
        self.errors = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="700px"))
        if plot is None:  # matplotlib is an optional extra: no plot rather than an error
            plot = importlib.util.find_spec("matplotlib") is not None
        self._with_plot = plot
        self.device.observe(self._on_device, names="value")
        self.origin.observe(self._on_origin, names="value")
        self.use_button.on_click(self._on_use)
        self.refresh_button.on_click(self._on_refresh)
        self.clear_selected_button.on_click(self._on_clear_selected)
        self.clear_all_button.on_click(self._on_clear_all)
        buttons = w.HBox([self.refresh_button, self.clear_selected_button, self.clear_all_button])
        self._parts = [w.HBox([self.device, self.use_button]), self.building, self.header,
                       self.table, self.empty, self.facts, buttons, self.status, self.message,
                       self.errors] + ([self.plot] if plot else [])
        super().__init__(self._parts)
        self.add_class("clmagic-widget")
        self.compiler.history.listen(self._on_session)
        self.refresh()

    # -- what the widget shows -----------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """Fingerprint of the chosen device."""
        return _devices.resolve_device(self.device.value)[0].fingerprint

    @property
    def rows(self) -> list[tuple[str, str]]:
        """The table as (text, key) pairs."""
        return list(self.table.options)

    @_guard
    def refresh(self) -> None:
        """Re-read the store: table, status line and plot."""
        self._disarm()
        store = self.compiler.store
        entries = list(store.entries(self.fingerprint)) if store is not None else []
        records = self.compiler.history.records
        self._show_origins({entry_origin(e) for e in entries} | {r.origin for r in records})
        wanted = self.origin.value or None
        entries = [e for e in entries if from_origin(entry_origin(e), wanted)]
        entries.sort(key=lambda e: e.last_used, reverse=True)
        self._entries = {e.key: e for e in entries}
        keep = [k for k in self.table.value if k in self._entries]
        self.table.options = [(entry_line(e), e.key) for e in entries]
        self.table.value = tuple(keep)
        self.table.tooltip = self._full_options(entries)
        # the session (no second store listing) on the shown device, of the chosen origin: the
        # same scope as the entries beside it
        fp = self.fingerprint
        s = Stats.of([r for r in records
                      if r.fingerprint == fp and from_origin(r.origin, wanted)])
        where = store.location if store is not None else "memory only (nothing stored)"
        total = 0
        if store is not None:  # the store against its limit, and every process's figures
            life = lifetime_counts(store)
            s.lifetime = tally_of(life, fp) if life is not None else None
            s.max_size = store.max_size
            total = sum(u.size for u in store.usage_list())
        label = _devices.resolve_device(self.device.value)[0].label
        self.status.value = panel_status_html(entries, s, where, total, device=label)
        self._show_empty(not entries, label, wanted)
        self._show_building()
        if self._with_plot:  # the plot's scope is the status line's: this device, this origin
            self._draw(fp, wanted)

    @staticmethod
    def _full_options(entries: list[Entry]) -> str | None:
        """The table's tooltip: the full options of each entry whose row shows them shortened
        (a row of a select list has no tooltip of its own), else none."""
        cut = [f"{short_key(e.key)} {e.meta.options}" for e in entries
               if entry_options(e.meta.options) != (e.meta.options or "-")
               or len(e.meta.options) > 22]
        return "options in full:\n" + "\n".join(cut) if cut else None

    def _show_empty(self, empty: bool, label: str, origin: str | None) -> None:
        """An empty table says so, in words, in its place (a list with no rows is a blank box
        that reads as "still loading")."""
        for part in (self.header, self.table):
            part.layout.display = "none" if empty else None
        of = f" from {origin}" if origin else ""
        self.empty.value = ("" if not empty else
                            f"<i>no entries{of} for {html.escape(label)} yet: each program "
                            "built on it (a %%clkernel cell, clmagic.build) is listed here</i>")

    def _show_building(self) -> None:
        """Say which device ``%%clkernel`` builds on; offer the shown one when it differs."""
        try:
            current: _devices.DeviceInfo | None = self.compiler.resolve()[0]
        except DeviceError:
            current = None
        shown = _devices.resolve_device(self.device.value)[0]
        name = html.escape(current.label) if current else "no device that can build"
        self.building.value = f"%%clkernel builds on <b>{name}</b>"
        self.use_button.disabled = (current is not None and current.spec == shown.spec) or (
            not shown.usable)

    def _show_origins(self, origins: set[str]) -> None:
        """Offer the origins seen; the dropdown appears once there is more than one."""
        current = self.origin.value
        options = [("all origins", "")] + [(o, o) for o in sorted(origins)]
        if current and current not in origins:
            options.append((current, current))  # kept: an empty table says nothing is left
        if options != list(self.origin.options):
            self._updating = True  # no refresh from the value ipywidgets resets meanwhile
            try:
                self.origin.options = options
                self.origin.value = current
            finally:
                self._updating = False
        shown = len(origins) > 1 or bool(current)
        if shown != (self.origin in self.children):
            self.children = self._parts[:2] + ([self.origin] if shown else []) + self._parts[2:]

    def _draw(self, fingerprint: str, origin: str | None) -> None:
        from matplotlib.figure import Figure

        from clmagic.show.plot import plot_history

        fig = Figure(figsize=(8, 2.8), dpi=80, layout="constrained")
        plot_history(compiler=self.compiler, ax=fig.add_subplot(), fingerprint=fingerprint,
                     origin=origin)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        self.plot.value = buf.getvalue()

    def _disarm(self) -> None:
        self._armed = False
        self.clear_all_button.description = "Clear all for this device"
        self.clear_all_button.button_style = "warning"

    # -- callbacks ------------------------------------------------------------------------------

    @_guard
    def _on_device(self, change: dict[str, Any]) -> None:
        info = _devices.resolve_device(change["new"])[0]
        text = f"showing the entries of {info.label}"
        if not info.usable:
            text += f"; it cannot build here ({info.problem})"
        self.message.value = html.escape(text)
        self.refresh()

    @_guard
    def _on_use(self, _button: object = None) -> None:
        info = _devices.resolve_device(self.device.value)[0]
        if not info.usable:
            self.message.value = html.escape(f"{info.label} cannot build here ({info.problem})")
            return
        self.compiler.select_device(info)
        self.message.value = html.escape(f"{info.label} is now the device for %%clkernel")
        self.refresh()

    def _on_session(self) -> None:
        """The session built or cleared something: refresh after the cell (now, outside one)."""
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:
            shell = None
        if shell is None:
            self.refresh()
            return
        _stale.add(self)
        if shell not in _hooked:
            shell.events.register("post_run_cell", _refresh_stale)
            _hooked.add(shell)

    @_guard
    def _on_origin(self, change: dict[str, Any]) -> None:
        if self._updating:
            return
        self.message.value = ""
        self.refresh()

    @_guard
    def _on_select(self, _change: object = None) -> None:
        """Below the table, what the compiler made of each kernel of the selected entries (the
        facts kept in the entry, so no driver is asked): one line per kernel, at most 12."""
        chosen = [self._entries[k] for k in self.table.value if k in self._entries]
        lines = []
        for e in chosen:
            facts = facts_from_json(e.meta.kernel_facts)
            if facts is None:
                lines.append(f"{short_key(e.key)}  no kernel facts (saved before clmagic kept "
                             "them)")
            else:
                lines += [f"{short_key(e.key)}  {facts_line(f)}" for f in facts.values()]
        more = f"\n… and {len(lines) - 12} more" if len(lines) > 12 else ""
        self.facts.value = ("" if not lines else '<pre class="clmagic-facts" style="font-size:12px'
                            ';margin:2px 0">kernel facts of the selection:\n'
                            + html.escape("\n".join(lines[:12]) + more) + "</pre>")

    @_guard
    def _on_refresh(self, _button: object = None) -> None:
        self.message.value = ""
        self.refresh()

    @_guard
    def _on_clear_selected(self, _button: object = None) -> None:
        chosen = [self._entries[k] for k in self.table.value if k in self._entries]
        if not chosen:
            self._disarm()
            self.message.value = "select entries in the table first"
            return
        removed = remove_entries(chosen, self.compiler)
        self.message.value = html.escape(text_of(removed))
        self.refresh()

    @_guard
    def _on_clear_all(self, _button: object = None) -> None:
        if not self._armed:
            n = len(self._entries)
            self._armed = True
            self.clear_all_button.description = f"Click again to clear {count_of(n, 'entry')}"
            self.clear_all_button.button_style = "danger"
            self.message.value = "click again to confirm"
            return
        if self.origin.value:  # only what the table shows
            removed = remove_entries(list(self._entries.values()), self.compiler)
        else:
            removed = clear_cache(device=self.fingerprint, compiler=self.compiler)
        self.message.value = html.escape(text_of(removed))
        self.refresh()
