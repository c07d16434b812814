"""``SWA_HARNESS_VLLM_FAULT=<id>``: one vLLM-side catalog fault (``harness/targets/vllm/faults``) is applied to the
installed vLLM for the whole run, before any suite here is collected; the kill matrix runs these suites once per
fault this way. Outside the vLLM venv the variable must be unset (the suites skip there)."""

from __future__ import annotations

import os

from harness.targets.vllm.faults import activate_from_env

FAULT = activate_from_env(os.environ)
