"""``python -m clmagic``: the command line."""

from clmagic.cli.main import main

raise SystemExit(main())
