"""The version of clmagic (its own module, so nothing needs the package root for it)."""

__version__ = "0.1.0"
