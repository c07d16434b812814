"""Greedy or seeded temperature sampling, one row per request."""

from __future__ import annotations

import torch

from harness.engine.request import Req


def sample(logits: torch.Tensor, reqs: list[Req]) -> list[int]:
    """Next token per request; teacher-forced requests take their given token."""
    greedy = logits.argmax(dim=-1).tolist()
    tokens = []
    for row, req in enumerate(reqs):
        if req.forced_output_ids is not None:
            tokens.append(req.forced_output_ids[len(req.output_ids)])
        elif req.sampling.temperature == 0:
            tokens.append(greedy[row])
        else:
            probs = torch.softmax(logits[row].float() / req.sampling.temperature, dim=-1)
            tokens.append(int(torch.multinomial(probs, 1, generator=req.generator)))
    return tokens
