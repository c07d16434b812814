"""``python -m harness.http_server --model PATH ...`` (see cli.py)."""

from harness.http_server.cli import main

raise SystemExit(main())
