"""Condensing the batch leaves the moved request's block ids in the row it vacated (#49757).

Upstream: when requests finish, ``InputBatch.condense`` moves the last requests down into the freed rows with
``BlockTable.move_row``, which copied the row and left the source as it was: a duplicate of a live request's block ids
at an index past ``num_reqs``. Dummy-run batches (data-parallel lockstep, graph padding) read exactly those rows, and
the Mamba/GDN state path writes through ``block_table[:, 0]`` in place, into blocks that belong to the moved request
or, once it finishes, to whoever the pool gives them next. #49757 clears the vacated row.

On 0.32.0 the clearing is ``move_row``'s last two statements; the edit deletes them.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-condense-leaves-vacated-row",
    seed="#49757",
    breaks="BlockTable.move_row copies a request's row down and leaves the source row's block ids and block count in "
    "place",
    user_sees="a dummy or padded batch row past the live requests names a live request's blocks: state written "
    "through it (Mamba/GDN in place, a KV connector's load racing it) corrupts that request, or the next owner of the "
    "blocks once it finishes",
    invariant="2: padded lanes and dummy rows write only the null block (a row no request owns names no block)",
    edits=(
        SourceEdit(
            "vllm.v1.worker.block_table.BlockTable.move_row",
            "block_table_np[src, :num_blocks] = 0\nself.num_blocks_per_row[src] = 0",
            "",
        ),
    ),
)
