"""``python -m harness.server --model PATH ...`` (see cli.py)."""

from harness.server.cli import main

raise SystemExit(main())
