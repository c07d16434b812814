"""vLLM #4055 / #4139: prompt logprobs computed as if one forward held the whole prompt, so a later chunk of a chunked
prefill scores its rows against the prompt's first tokens."""

from __future__ import annotations

from harness.engine.engine import Engine
from harness.engine.scheduler import PromptRows
from harness.faults.base import Fault, Patch


def _targets_from_prompt_start(rows: PromptRows) -> list[int]:
    """Twin of ``Engine._prompt_targets``: as many targets as the clean code takes, but counted from the prompt's start,
    not from the chunk's position (the code as it stands for a prompt prefilled in one forward, where the two agree)."""
    scored = len(rows.req.prompt_ids[rows.position + 1 : rows.position + 1 + rows.count])
    return rows.req.prompt_ids[1 : 1 + scored]


FAULT = Fault(
    id="chunked-prompt-logprobs-from-prompt-start",
    seed="vllm#4055 / vllm#4139 (prompt logprobs under chunked prefill)",
    breaks="a chunk's prompt logprobs index the prompt from its start instead of from the chunk's position: the "
    "logic assumes one forward holds the whole prompt (vLLM's, before chunked prefill scored prompts per chunk)",
    user_sees="every prompt longer than one chunk is scored against the wrong tokens past its first chunk: echoed "
    "logprobs, lm-eval's loglikelihoods and multiple-choice picks are wrong, with no error and the right count",
    invariant="echo: the logprob at prompt position p is log P(token p | tokens < p), whatever the chunking",
    patches=(Patch(Engine, "_prompt_targets", staticmethod(_targets_from_prompt_start)),),
)
