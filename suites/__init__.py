"""The suites that hold an implementation to the SWA KV-cache contracts, on any target (the harness's own or
SGLang's, ``--target``): ``scenarios``, ``differential``, ``pool`` and ``prefix`` (state machines against a plain
model), ``sglang`` and ``vllm`` (code only that implementation has), ``servers`` and ``real_weights`` (real
servers and checkpoints against oracles). The kill matrix (``harness/faults/matrix.py``) runs a selection of them
once per catalog fault, and only an assertion made in suite code counts as a kill (``harness/faults/verdicts.py``).
Shared machinery lives in non-test modules here (``checks.py``, ``hooks.py``, ``*/machines.py``), which is what
``tests/`` may import. Two folders hold data, not tests, and both live here today: ``accuracy`` (the frozen lm-eval
task YAMLs that ``swa-harness eval`` runs) and ``plans`` (the job plans that ``swa-harness eval --plan`` reads,
with their ``patches``). Unit tests of the harness's own code go in ``tests/``.
"""
