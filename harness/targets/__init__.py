"""A *target* is the implementation a suite runs against: ``harness`` (this repo's, the default) or
``sglang`` (real SGLang's memory code, as far as it runs on CPU).

The interface is narrow on purpose: build a hybrid pool from a spec, a prefix cache over it, an engine
over a checkpoint. The engine takes the target's pool builder, so the engine-level suites run over any
target's memory code.
"""
