"""A finished request's block-table row keeps its block ids (#37728).

Upstream: ``InputBatch.remove_request`` dropped a finished request's bookkeeping but left its block-table row as it
was. Under data parallelism a rank that ran out of work runs dummy batches whose padded rows (sequence length 0) map
to those rows, and a linear-attention (GDN) model read and wrote its recurrent state through the stale block id: a
block the pool had already given to another request (zero-token responses, NaNs). #37728 clears the row when the
request is removed (``BlockTable.clear_row``).

On 0.32.0 ``remove_request`` calls ``block_table.clear_row``. The edit empties ``clear_row`` (``pass``): removal
leaves the row as before #37728.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-finished-row-not-cleared",
    seed="#37728",
    breaks="BlockTable.clear_row leaves a removed request's block ids and block count in its row",
    user_sees="dummy and padded batch rows read a finished request's block ids, which the pool has given to other "
    "requests: in-place state writes through them corrupt those requests (zero-token or NaN responses under DP)",
    invariant="2: padded lanes and dummy rows write only the null block (a row no request owns names no block)",
    edits=(
        SourceEdit(
            "vllm.v1.worker.block_table.BlockTable.clear_row",
            """num_blocks = self.num_blocks_per_row[row_idx]
if num_blocks > 0:
    self.block_table.np[row_idx, :num_blocks] = 0
self.num_blocks_per_row[row_idx] = 0""",
            "pass  # (before #37728) the finished request's row is left as it was",
        ),
    ),
)
