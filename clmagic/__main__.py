"""``python -m clmagic``: the command line."""

from .cli import main

raise SystemExit(main())
