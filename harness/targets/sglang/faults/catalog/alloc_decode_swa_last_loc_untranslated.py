"""alloc_decode hands the SWA allocator the full pool's last slots instead of their SWA peers."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-alloc-decode-swa-last-loc-untranslated",
    seed="#24138's hazard (an id of one sub-pool used in the other's space)",
    breaks="SWATokenToKVPoolAllocator.alloc_decode (page_size > 1) continues each request's SWA page from its "
    "full last_loc, not from translate_loc_from_full_to_swa(last_loc)",
    user_sees="a decode token that does not open a new page gets the SWA slot after the request's full slot: "
    "a slot of another request's SWA page, or of a free one; its K/V overwrite another request's window",
    invariant="5: a slot is never owned twice (both pools page in step)",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator.alloc_decode",
            "seq_lens, seq_lens_cpu, swa_last_loc",
            "seq_lens, seq_lens_cpu, last_loc",
        ),
    ),
)
