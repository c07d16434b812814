"""Greedy or seeded temperature sampling, one row per request.

A row that cannot be sampled (NaN logits from a broken forward, a distribution that is not one)
becomes a ``SamplingFailure`` for that request alone: the engine finishes it with an error and the
other requests of the batch carry on. Temperatures below ``GREEDY_BELOW`` are greedy decoding, as in
SGLang: dividing logits by 1e-40 overflows to inf and softmax turns that into NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.engine.request import Req

GREEDY_BELOW = 1e-5  # temperatures under this sample as temperature 0 (argmax)


@dataclass(frozen=True)
class SamplingFailure:
    """Why one request's next token could not be drawn."""

    message: str


def sample(logits: torch.Tensor, reqs: list[Req]) -> list[int | SamplingFailure]:
    """Next token per request; teacher-forced requests take their given token."""
    # One reduction for both: max's indices are argmax's (the first maximal entry), and its values are NaN
    # exactly where the row holds a NaN (max propagates it). argmax and isnan().any() make two passes over a
    # [32, vocab] block, three times the time of this one on one CPU thread.
    best, greedy = logits.max(dim=-1)
    greedy, nan_rows = greedy.tolist(), torch.isnan(best).tolist()
    tokens: list[int | SamplingFailure] = []
    for row, req in enumerate(reqs):
        if req.forced_output_ids is not None:
            tokens.append(req.forced_output_ids[len(req.output_ids)])
        elif nan_rows[row]:
            tokens.append(SamplingFailure(f"the model produced NaN logits for request {req.rid}"))
        elif req.sampling.temperature < GREEDY_BELOW:
            tokens.append(greedy[row])
        else:
            tokens.append(_draw(logits[row], req))
    return tokens


def _draw(row: torch.Tensor, req: Req) -> int | SamplingFailure:
    probs = torch.softmax(row.float() / req.sampling.temperature, dim=-1)
    try:
        return int(torch.multinomial(probs, 1, generator=req.generator))
    except RuntimeError as exc:  # not a distribution (inf/NaN/negative): this request only
        return SamplingFailure(f"sampling at temperature {req.sampling.temperature} failed: {exc}")
