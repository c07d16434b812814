"""A padded token's slot id -1, used as a Python index, writes the last slot of the KV cache (#43810).

Upstream: the extract_hidden_states model caches each token's hidden states through a cache-only attention layer whose
``basic_cache`` scatters with ``kv_cache[slot // block_size, :, slot % block_size] = ...``. A CUDA-graph padded batch
fills its padding tokens' slots with ``PADDING_SLOT_ID = -1``; in Python ``-1 // block_size`` is the last block and
``-1 % block_size`` its last offset, so every padded step overwrote the last slot of the cache, whichever request
owned it (issue #43810; #43869 proposed skipping negative slots as the CUDA cache kernels do).

On 0.32.0 ``basic_cache`` redirects negative slots to the null block (``slot_mapping.clamp_min(0)``) before the
scatter. The edit deletes that line: the scatter as it was when #43810 was reported.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-hidden-state-pad-slot-writes-last-slot",
    seed="#43810 (fix proposed in #43869)",
    breaks="extract_hidden_states.basic_cache indexes the KV cache with the padding slot -1 as is: padded tokens write "
    "the last slot of the last block",
    user_sees="hidden states extracted for training drafters (EAGLE-3 data) come back with the last position of "
    "whichever request owns the cache's last block overwritten by a padding token's values, on every padded step",
    invariant="2: padded lanes write only the null block; no live slot changes because of padding",
    edits=(
        SourceEdit(
            "vllm.model_executor.models.extract_hidden_states.basic_cache",
            "slot_mapping = slot_mapping.clamp_min(0)",
            "",
        ),
    ),
)
