"""vLLM #4055 / #4139: prompt logprobs computed as if one forward held the whole prompt, so a later chunk of a chunked
prefill scores its rows against the prompt's first tokens."""

from __future__ import annotations

import torch

from harness.engine.engine import Engine
from harness.engine.request import PositionLogprobs
from harness.engine.scheduler import PromptRows
from harness.faults.base import Fault, Patch


def _score_prompt_from_start(rows: PromptRows, logits: torch.Tensor) -> None:
    """Twin of ``Engine._score_prompt``: the targets are taken from the prompt's start, not the chunk's position (the
    code as it stands for a prompt prefilled in one forward, where the two are the same)."""
    req = rows.req
    scored = len(req.prompt_ids[rows.position + 1 : rows.position + 1 + rows.count])  # as many as the clean code
    targets = req.prompt_ids[1 : 1 + scored]
    if not targets:
        return
    logp = torch.log_softmax(logits[rows.first : rows.first + len(targets)].double(), -1)
    ids = torch.tensor(targets, dtype=torch.int64, device=logp.device)
    chosen = logp.gather(1, ids.unsqueeze(1)).squeeze(1).tolist()
    tops: list[tuple[tuple[int, float], ...]] = [()] * len(targets)
    if req.prompt_logprobs:
        values, top_ids = logp.topk(min(req.prompt_logprobs, logp.shape[-1]), dim=-1)
        tops = [tuple(zip(i, v)) for i, v in zip(top_ids.tolist(), values.tolist())]
    req.prompt_scores += [PositionLogprobs(t, c, top) for t, c, top in zip(targets, chosen, tops)]


FAULT = Fault(
    id="chunked-prompt-logprobs-from-prompt-start",
    seed="vllm#4055 / vllm#4139 (prompt logprobs under chunked prefill)",
    breaks="a chunk's prompt logprobs index the prompt from its start instead of from the chunk's position: the "
    "logic assumes one forward holds the whole prompt (vLLM's, before chunked prefill scored prompts per chunk)",
    user_sees="every prompt longer than one chunk is scored against the wrong tokens past its first chunk: echoed "
    "logprobs, lm-eval's loglikelihoods and multiple-choice picks are wrong, with no error and the right count",
    invariant="echo: the logprob at prompt position p is log P(token p | tokens < p), whatever the chunking",
    patches=(Patch(Engine, "_score_prompt", staticmethod(_score_prompt_from_start)),),
)
