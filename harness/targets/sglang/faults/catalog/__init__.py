"""The SGLang-side catalog: one module per fault, each a real regression re-injected into the installed SGLang's source;
``harness.targets.sglang.faults.by_id`` holds them by id."""
