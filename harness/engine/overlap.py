"""Overlap (one step ahead) scheduling: step n+1 is scheduled while step n's forward is in flight.

SGLang's overlap scheduler and vLLM's async scheduling run the host one step ahead of the device: the batch of step
n+1 is chosen, its KV allocated and the windows swept while step n computes, and the tokens step n samples are
not known yet, so step n+1 takes them as placeholders (SGLang's future token ids, vLLM's output placeholders)
resolved when step n finishes. ``EngineConfig(schedule="overlap")`` runs the harness engine that way: each
``Engine.step`` launches step n+1 (schedule, allocate), then runs step n's forward, samples it and commits it. On a
GPU the in-flight forward races the host; here it always runs after the host's next scheduling pass, so whatever
that pass frees is gone before the forward reads it: a wrong free is always seen, never lucky.

The rules, and the fixes they come from:

1. **Scheduled and computed.** A request's ``slots_len`` counts the positions holding a full slot (its scheduled
   tokens, the steps in flight included); ``kv_len`` counts those whose KV is written (its computed tokens). The
   scheduler chooses and places step n+1 on ``slots_len``: its chunk starts there, a decode's input is the token
   at ``slots_len``; everything that frees or publishes KV counts ``kv_len``. In sync scheduling the two are equal
   whenever the scheduler looks.
2. **The window sweep counts computed tokens** (vLLM #47728). Step n+1 reads its window from ``slots_len - W``; a
   sweep on ``slots_len`` (which counts the in-flight step) frees a position the in-flight step still reads, and
   the scheduling pass that follows hands its slot to another request. The sweep runs when a step is committed,
   on ``kv_len``, as in sync scheduling.
3. **Nothing an in-flight step reads is freed or reallocated before its forward has run**: its requests' full
   slots, the SWA slots of their windows, the tree's slots their rows lend them (their locks hold those). A
   request that finishes while it is in the next step (EOS, a stop token: not known when that step was scheduled)
   runs that step as a void row: its token is dropped, its KV length does not grow, and it is released when the
   step is done (SGLang's delayed free of the overlapped token). A request is cancelled only after the step it is
   in has run (``Engine.cancel`` finishes the in-flight step first).
4. **Placeholders.** A decode input the in-flight step will sample is ``FUTURE_TOKEN`` when the step is built; it
   is replaced by the sampled token right before the step's forward (``resolve_futures``). A void row's input is
   the token it finished on (or the padding token 0 after a failed sample): what it computes is never read.
5. **What is known ahead.** A request is decoded in step n+1 only if it will still need a token after step n:
   ``slots_len - len(prompt) + 1 < max_new_tokens`` (a length finish is counted, not waited for) and it has not
   finished. Admission in step n+1 sees the pools before step n's releases (as SGLang's and vLLM's do), so with
   requests waiting, the batches may differ from sync scheduling's; with the same batches the logits are equal bit
   for bit, and greedy outputs are equal either way.
6. **Pools.** Two steps hold new slots at once: the SWA pool holds one page more per request and one more step's
   prefill tokens than in sync scheduling (``swa_slots_needed(steps_in_flight=2)``). Speculative decoding is not
   overlapped: a verify's accepted count decides where the next step starts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from harness.engine.forward_batch import ForwardBatch
from harness.engine.request import Req

FUTURE_TOKEN = -1  # an input token the in-flight step has not sampled yet (rule 4)


class Schedule(str, enum.Enum):
    """How the engine pipelines its steps: ``sync`` (schedule, run, commit, one after the other) or ``overlap``."""

    SYNC = "sync"
    OVERLAP = "overlap"

    @property
    def steps_in_flight(self) -> int:
        """Steps whose new slots are held at once (rule 6)."""
        return 2 if self is Schedule.OVERLAP else 1


@dataclass(frozen=True)
class Future:
    """Row ``row`` of a step's inputs is the token of ``req`` at ``position``, sampled by the step in flight."""

    row: int
    req: Req
    position: int


def resolve_futures(futures: list[Future], batch: ForwardBatch) -> None:
    """Rule 4: fill each placeholder with the token the step before sampled (0 where it sampled none)."""
    for future in futures:
        token = future.req.fill_slice(future.position, future.position + 1)
        batch.input_ids[future.row] = token[0] if token else 0
