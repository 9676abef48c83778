"""``python -m kiln``: the command line."""

from kiln.cli.main import main

raise SystemExit(main())
