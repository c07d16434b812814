"""#24138: the attention backend re-translates full -> SWA instead of using this batch's loc."""

from __future__ import annotations

import torch

from harness.engine.attention_backend import PoolAttentionBackend
from harness.faults.base import Fault, Patch


def _swa_write_loc_retranslated(self: PoolAttentionBackend, layer, batch) -> torch.Tensor | None:
    """Twin of ``PoolAttentionBackend._swa_write_loc``: ignores ``batch.out_cache_loc_swa``."""
    return self.pool.translate_loc_from_full_to_swa(batch.out_cache_loc) if layer.is_sliding else None


FAULT = Fault(
    id="prefill-ignores-precomputed-loc",
    seed="#24138",
    breaks="the backend translates the write loc again inside the layer instead of using the loc computed "
    "for this batch; inside a captured graph that records a second translation",
    user_sees="wasted gathers in every graph forward; wrong slots wherever re-translation is not valid",
    invariant="design: one full->SWA translation of the write loc per forward",
    structural_only="in this design the re-translation goes through the same memo and mapping within the forward, so it returns the same slots; only the extra gather is visible",
    patches=(Patch(PoolAttentionBackend, "_swa_write_loc", _swa_write_loc_retranslated),),
)
