"""The `clmagic` command."""

from clmagic.cli.main import main

__all__ = ["main"]
