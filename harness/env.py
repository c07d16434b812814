"""Every environment variable the harness reads or sets, spelled once.

Variables cross process boundaries (a job sets one, the server it launches reads it), so a typo on
either side fails silently; both sides import the name from here instead.
"""

from __future__ import annotations

FAULT_ENV = "SWA_HARNESS_FAULT"  # a harness catalog fault to inject (harness/faults), read by every process
SGLANG_FAULT_ENV = "SWA_HARNESS_SGLANG_FAULT"  # an SGLang-side catalog fault (harness/targets/sglang/faults)
SGLANG_SOURCE_ENV = "SWA_HARNESS_SGLANG"  # the SGLang under test: a pip requirement or a checkout's python/
SGLANG_PATCH_ENV = "SWA_HARNESS_SGLANG_PATCH"  # an ad-hoc source patch (SGLang's source_patcher YAML)
SGLANG_ANY_VERSION_ENV = "SWA_HARNESS_SGLANG_ANY_VERSION"  # accept an SGLang release the adapters were not written for
VLLM_FAULT_ENV = "SWA_HARNESS_VLLM_FAULT"  # a vLLM-side catalog fault (harness/targets/vllm/faults)
TARGET_ENV = "SWA_HARNESS_TARGET"  # the memory-level target of the suites: harness | sglang
HYPOTHESIS_ENV = "SWA_HARNESS_HYPOTHESIS"  # the hypothesis profile: default | matrix | seeded | exhaustive
VERDICTS_ENV = "SWA_HARNESS_VERDICTS"  # where a kill-matrix run's pytest plugin writes each failure's class
STOP_ON_KILL_ENV = "SWA_HARNESS_STOP_ON_KILL"  # a kill-matrix run stops at its first behavioural kill
IMPACT_ENV = "SWA_HARNESS_IMPACT"  # <target>:<out.json>: record which tests reach each fault's code (faults/impact)
SELECT_ENV = "SWA_HARNESS_SELECT"  # a JSON list of node ids: a kill-matrix run runs only these, in this order
IMPACT_CODE_ENV = "SWA_HARNESS_IMPACT_CODE"  # a JSON map key -> functions: record these, not a catalog's
IMPACT_LINES_ENV = "SWA_HARNESS_IMPACT_LINES"  # a JSON list of files whose every executed line is recorded too
MUTANT_ENV = "SWA_HARNESS_MUTANT"  # a JSON file: the module a mutation run imports from mutated text
DURATIONS_ENV = "SWA_HARNESS_DURATIONS"  # a mutation run's clean build writes each test's seconds here
KERNEL_STORE_ENV = "SWA_HARNESS_KERNEL_STORE"  # finished CPU-kernel builds shared by environments of one torch build
CACHE_ENV = "SWA_HARNESS_CACHE"  # converted real weights (never committed); default ~/.cache/swa-harness
REAL_WEIGHTS_ENV = "SWA_HARNESS_REAL_WEIGHTS"  # "require": the real-weights suite fails instead of skipping
SGLANG_SERVER_ENV = "SWA_HARNESS_SGLANG_SERVER"  # "require": the SGLang server suite fails instead of skipping
VLLM_SERVER_ENV = "SWA_HARNESS_VLLM_SERVER"  # "require": the vLLM server suite fails instead of skipping
SERVER_READY = "SWA_HARNESS_SERVER_READY"  # not a variable: the line the harness server prints once listening

# lm-eval and every server it talks to run offline: the data sets and tokenizers are in the checkout.
OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
