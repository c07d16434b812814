"""``python -m harness.nightly``: the nightly GPU job (``nox -s gpu_nightly``); ``--dry-run`` prints the plan."""

import sys

from harness.nightly.cli import main

sys.exit(main())
