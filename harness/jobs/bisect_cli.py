"""``swa-harness bisect --good 0.5.X --bad 0.5.Y [--suite ...]``: installs the SGLang releases between as needed
(one overlay venv each, reused), runs the suites, prints the first bad release and its failing tests."""

from harness.jobs.sglang_matrix import bisect_main as main

__all__ = ["main"]
