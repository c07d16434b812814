"""vLLM, as a target of the harness's faults: the installed vLLM's own KV-cache manager, block pool and worker
block tables, into which ``faults/`` re-injects real regressions from vLLM's history at run time.

vLLM is not a memory target of the engine-level suites (``harness.targets.TARGETS``): its code runs as vLLM drives
it, in ``suites/vllm`` (the KV-cache manager under the ownership model, the worker's block tables and slot writes).
"""
