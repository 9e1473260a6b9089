"""Every rendering: the result line (:mod:`~clmagic.show.line`), the cache's statistics, clears
and bundles (:mod:`~clmagic.show.cache`), the frames (pandas), the plot (matplotlib), the panel
(ipywidgets), and :mod:`~clmagic.show.views`, which says which view shows which data type and
tells IPython so. ``text_of(obj)`` and ``html_of(obj)`` are those views outside IPython."""

from clmagic.show.views import html_of, text_of

__all__ = ["html_of", "text_of"]
