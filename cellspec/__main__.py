"""`python -m cellspec`: the command line (cellspec/cli.py)."""

from cellspec.cli import main

raise SystemExit(main())
