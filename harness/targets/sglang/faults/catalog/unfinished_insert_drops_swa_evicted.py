"""A chunk's checkpoint inserts without the request's SWA eviction boundary: freed SWA KV goes in as live."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

_SWA = "sglang.srt.mem_cache.unified_cache.components.swa.SWAComponent"
_COPY = """insert_params.set_evicted_seqlen(
    self.component_type, req.kv.get_evicted_seqlen(self.component_type)
)"""

FAULT = SGLangFault(
    id="sglang-unfinished-insert-drops-swa-evicted",
    seed="#29350, #36909",
    breaks="an unfinished request's insert (a chunk's checkpoint) carries no SWA eviction boundary: "
    "SWAComponent.prepare_for_caching_req copies req.kv's SWA evicted seqlen into InsertParams for finished "
    "requests only (as before #29350), and free_out_of_window_slots, the other place 0.5.23 copies it for an "
    "unfinished insert, no longer does; both tree cores read the boundary from InsertParams",
    user_sees="tokens whose SWA slots already went back are cached as live SWA KV (their SWA value translates "
    "to slot 0): a later request matching them reads the padding slot or another request's keys in its "
    "sliding layers, and the tree counts SWA slots it does not hold as evictable",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot; 5: accounting",
    edits=(
        SourceEdit(f"{_SWA}.prepare_for_caching_req", _COPY, "if is_finished:\n    " + _COPY.replace("\n", "\n    ")),
        SourceEdit(f"{_SWA}.free_out_of_window_slots", _COPY, "pass"),
    ),
)
