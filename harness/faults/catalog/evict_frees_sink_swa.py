"""SGLang #38269 / #38519: the tree's eviction frees a node's SWA side through a page-representative path with no
``swa > 0`` filter, so a tombstoned node, whose entries all map to the sink, gives slot (page) 0 back."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.mem.radix_cache import RadixCache, TreeNode


def _free_nodes(self: RadixCache, nodes: list[TreeNode]) -> None:
    """Twin of ``RadixCache._free_nodes``: SGLang's ``evict_component`` -> ``free_swa_segment``: one representative
    per page, read through the mapping and handed to the SWA page allocator unfiltered, then the full side."""
    alloc, value = self.allocator, self._cat(node.value for node in nodes)
    representatives = alloc.full_to_swa_index_mapping[value[:: self.page_size].long()]
    alloc.swa_attn_allocator.free(representatives)  # a tombstone's read 0: the sink's page
    alloc.set_full_to_swa_mapping(value, value.new_zeros(value.shape))
    alloc.free_full(value)


FAULT = Fault(
    id="evict-frees-sink-swa",
    seed="SGLang #38269 / #38519",
    breaks="deleting a tree node frees its SWA slots by page representatives without the swa > 0 filter: a tombstone "
    "(pruned, or evicted under a tombstoned parent) maps to the sink, so slot / page 0 goes on the SWA free list",
    user_sees="the padding page is handed to a request: padded lanes write into its window (SGLang: free_group_end "
    "asserts available_size > size on every rank a second after the server goes live)",
    invariant="design: slot 0 is the sink, never handed back to an allocator and never owned",
    patches=(Patch(RadixCache, "_free_nodes", _free_nodes),),
)
