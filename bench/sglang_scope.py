"""Which lines of SGLang 0.5.23's unified radix cache a CPU server can run: the denominator of issue 53's coverage.

The scope is what a CPU server serving a hybrid sliding-window model runs without HiCache, sessions or PD: its
``UnifiedRadixCache`` with a FULL and an SWA component, on either tree core, at any page size, with the radix
cache on or off, any eviction and scheduling policy. ``EXCLUDED`` names every range outside it, each with the mode
it belongs to (``KINDS``) and, where the function's name does not say it, why; ``docs/SGLANG_MEMORY_COVERAGE.md``
gives the reasons in prose. A line stays in scope when no such reason holds, however hard it is to reach: those that
no test runs are listed with their reasons in that page, never excluded here.

``bench/sglang_coverage.py`` counts a file's statements outside these ranges (lines in scope) and those of them that
ran in the suites or in a traced server; a line excluded here that a server ran is a classification the measurement
contradicts, and fails the run. Line numbers are SGLang 0.5.23's (``SGLANG``): another release is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.coverage_common import spans

SGLANG = "0.5.23"

RADIX = "mem_cache/unified_radix_cache.py"
SWA = "mem_cache/unified_cache/components/swa.py"
CORE = "mem_cache/unified_cache/unified_tree_core.py"
ALLOCATOR = "mem_cache/allocator/swa.py"
SCOPE_FILES = (RADIX, SWA, CORE, ALLOCATOR)

KINDS = {
    "hicache": "HiCache: the host tier (host pools and values, host locks and LRUs, write-through and write-back "
    "backups, load-back), storage and its prefetch, the external cache linker, buffer mode; entered only when "
    "init_hicache or init_cache_linker built a controller, a linker or a pipeline (--enable-hierarchical-cache, "
    "an external linker, LMCache). Without them no node holds a host value, so a node whose full KV left the "
    "device is deleted at once, never kept (evicted, backuped, write-through-pending and load-back marks stay unset)",
    "session": "sessions: --enable-session-radix-cache (session refs, the session partition of each LRU and its "
    "eviction cursor) and streaming sessions (a request with a session id lending its KV record to the next turn)",
    "pd": "PD disaggregation: a prefill or decode server (--disaggregation-mode), its decode-side SWA tail "
    "allocation and its host-pool retraction backup",
    "component": "another tree component: Mamba state (hybrid SSM models), the C128 sidecar (DeepSeek V4 on NPU), "
    "an auxiliary SWA component, a registry override (MLX); a hybrid sliding-window model's tree has FULL and SWA",
    "multi-rank": "more than one rank: tensor/pipeline/context-parallel consensus (all-reduce, PP sync) and "
    "logical-page KV sharding across ranks (rotation bases); a CPU server here runs one rank",
    "memory-class": "another memory class: the unified SWA allocator (virtual and physical SWA pages), a "
    "per-request SWA ring (DeepSeek V4), an SWA pool that does not gate prefix matches",
    "accelerator": "NPU or CUDA code, or an out-of-tree platform's allocator",
    "violation": "runs only once SGLang is already wrong: sanity_check's violation reports and its tree dump, "
    "raise on a state the code never makes, the out-of-memory crash report of an allocation the scheduler "
    "admitted",
    "no-caller": "no code of SGLang 0.5.23 calls it (grep over sglang/srt), or only the Rust tree core's binding does",
}


@dataclass(frozen=True)
class Excluded:
    """Lines of one file a CPU server without HiCache, sessions or PD never runs."""

    file: str  # under sglang/srt/
    where: str  # the function or method (Class.method) the lines are in
    kind: str  # a key of KINDS
    lines: tuple[int, int] | None = None  # first and last line; None: the whole body of ``where``
    why: str = ""  # what in the code puts them there, where ``where`` and the kind do not say it


def _whole(file: str, kind: str, *names: str, why: str = "") -> tuple[Excluded, ...]:
    return tuple(Excluded(file, name, kind, why=why) for name in names)


def _at(file: str, where: str, kind: str, why: str, *lines: int) -> tuple[Excluded, ...]:
    """Single statements of one function (a multi-line statement counts at its first line)."""
    return tuple(Excluded(file, where, kind, (line, line), why) for line in lines)


_URC = "UnifiedRadixCache."
_TC = "UnifiedTreeCore."

EXCLUDED: tuple[Excluded, ...] = (
    # -- unified_radix_cache.py ------------------------------------------------------------------------------------
    Excluded(RADIX, "_c128_transfer_num_pages", "component", why="C128 sidecar load-back pages"),
    Excluded(RADIX, _URC + "__init__", "component", (220, 223), "component_registry_override: C128, MLX"),
    Excluded(RADIX, _URC + "__init__", "multi-rank", (277, 282), "page-interleaved KV without a rotation-base core"),
    *_whole(
        RADIX,
        "multi-rank",
        *(_URC + n for n in ("_all_reduce_attn_groups", "_drain_async_work", "_all_reduce", "_pp_sync")),
    ),
    Excluded(RADIX, _URC + "init_cache_linker", "hicache"),
    Excluded(RADIX, _URC + "reset", "hicache", (418, 418), "linker.reset"),
    Excluded(RADIX, _URC + "_reset_full", "hicache", (444, 446), "buffer_pipeline"),
    Excluded(RADIX, _URC + "_reset_full", "hicache", (449, 451), "cache_controller"),
    *_whole(RADIX, "hicache", _URC + "init_hicache", _URC + "register_sidecar_pool"),
    Excluded(RADIX, _URC + "release_host_resources", "hicache", (605, 605), "linker.close"),
    Excluded(RADIX, _URC + "release_host_resources", "hicache", (607, 607), "host_pool_group.destroy"),
    Excluded(RADIX, _URC + "match_prefix", "session", (616, 616), "a streaming session's own match"),
    Excluded(RADIX, _URC + "_finalize_match_result", "hicache", (641, 641), "linker.match"),
    Excluded(
        RADIX,
        _URC + "insert",
        "hicache",
        (663, 663),
        "a disabled cache's insert: checkpoint_into_tree returns before it; its other callers are LMCache's and "
        "buffer mode's",
    ),
    Excluded(RADIX, _URC + "insert", "hicache", (667, 667), "buffer_pipeline.begin_insert_walk"),
    Excluded(
        RADIX,
        _URC + "evict",
        "multi-rank",
        why="its callers: page-interleaved sharding's eviction loop (common.py) and the external linker's loads "
        "(full.py, swa.py); the scheduler evicts through evict_for_alloc",
    ),
    Excluded(RADIX, _URC + "insert", "hicache", (687, 687), "buffer_pipeline.end_insert_walk"),
    Excluded(
        RADIX,
        _URC + "evict_for_alloc",
        "memory-class",
        (717, 719),
        "allocation_reclaim_satisfied: its only callers are the unified hybrid SWA allocator's",
    ),
    Excluded(RADIX, _URC + "evict_for_alloc", "component", (733, 741), "the Mamba donor arithmetic"),
    Excluded(RADIX, _URC + "evict_for_alloc", "component", (746, 776), "the Mamba donor arithmetic"),
    Excluded(RADIX, _URC + "_component_available_size", "component", (801, 802), "Mamba"),
    Excluded(RADIX, _URC + "_component_available_size", "violation", (803, 803), "an unknown component type"),
    Excluded(RADIX, _URC + "_evict", "multi-rank", (815, 815), "a disabled cache reached through evict() only"),
    Excluded(RADIX, _URC + "_evict", "hicache", (831, 831), "write_back: writing_check"),
    Excluded(RADIX, _URC + "_evict_device_next_node", "component", (875, 890), "a Mamba state's write-back backup"),
    Excluded(RADIX, _URC + "_evict_device_next_node", "hicache", (892, 908), "an SWA window's write-back backup"),
    Excluded(RADIX, _URC + "_evict_device_next_node", "hicache", (911, 914), "write-through: dropped-token metric"),
    Excluded(RADIX, _URC + "_evict_device_leaf", "hicache", (926, 929), "write-through: dropped-token metric"),
    *_whole(RADIX, "hicache", _URC + "_demote", _URC + "_drop_subtree_no_host"),
    Excluded(
        RADIX,
        _URC + "_evict_components.target_reached",
        "memory-class",
        (971, 971),
        "allocation_reclaim_satisfied (the unified hybrid SWA allocator)",
    ),
    Excluded(RADIX, _URC + "_evict_components.target_reached", "component", (985, 996), "the Mamba donor"),
    Excluded(RADIX, _URC + "_evict_components", "hicache", (1034, 1054), "a write-back BackupKV, demote or drop"),
    Excluded(
        RADIX,
        _URC + "_record_dropped_tokens",
        "hicache",
        why="its callers are the write-through and write-back evictions",
    ),
    Excluded(RADIX, _URC + "lock", "session", (1099, 1099), "a streaming session's virtual node"),
    *_whole(RADIX, "hicache", _URC + "inc_host_lock_ref", _URC + "dec_host_lock_ref"),
    Excluded(RADIX, _URC + "claim_kv_row", "hicache", (1148, 1148), "release_pp_prefetch"),
    Excluded(RADIX, _URC + "checkpoint", "session", (1161, 1161), "a streaming session's checkpoint"),
    Excluded(RADIX, _URC + "checkpoint_into_tree", "multi-rank", (1250, 1254), "rotation_tail_declined"),
    Excluded(RADIX, _URC + "checkpoint_into_tree", "session", (1330, 1335), "enable_session_radix_cache"),
    Excluded(RADIX, _URC + "advance_unpublished_req", "pd", why="its one caller is disaggregation/prefill.py"),
    Excluded(
        RADIX,
        _URC + "_apply_cache_action",
        "hicache",
        (1393, 1400),
        "UpdatePendingBackupOnNodeSplit with an ack id: a write-through-pending node split",
    ),
    Excluded(RADIX, _URC + "_apply_cache_action", "hicache", (1409, 1413), "BackupKV"),
    Excluded(RADIX, _URC + "_apply_cache_action", "violation", (1415, 1415), "an action kind no core emits"),
    Excluded(RADIX, _URC + "_drain_host_frees", "hicache", (1431, 1431), "host values freed"),
    *_whole(
        RADIX,
        "hicache",
        *(
            _URC + n
            for n in (
                "evict_host",
                "backup_node_for_write_back",
                "buffer_backup_pending",
                "request_buffer_backup",
                "_execute_and_commit_kv_backup",
                "_backup_publish_node_ids",
                "_build_backup_sidecar",
                "_execute_kv_backup",
                "_track_write_through_node",
                "_replace_pending_write_through_node",
                "_finish_write_through_ack",
                "load_back",
                "_load_back_transfers",
                "_build_sidecar_transfers",
                "write_backup_storage",
                "is_backuped",
                "is_root",
                "get_last_hash_value",
                "get_prefix_hash_values",
                "query_storage_hit_length",
                "prefetch_from_storage",
                "_start_storage_prefetch_wait",
                "_prefetch_deadline_expired",
                "_mark_prefetch_deadline_expired",
                "_can_terminate_prefetch",
                "has_ongoing_prefetch",
                "bind_prefetch_ticket",
                "_check_pp_prefetch_progress",
                "waiting_storage_span",
                "check_prefetch_progress",
                "_handle_prefetch_result",
                "_check_hybrid_prefetch_result",
                "_record_storage_prefetch_hit",
                "_resolve_storage_prefetch_tokens",
                "_settle_storage_prefetch_hit",
                "_handle_storage_prefetch_anchor_loss",
                "_log_storage_prefetch_deferred",
                "pop_prefetch_loaded_tokens",
                "pop_prefetch_loaded_span",
                "release_aborted_request",
                "_retire_ongoing_prefetch",
                "_belief_policy",
                "_invalidate_absent_from_hit_query",
                "_account_prefetch_outcome",
                "prefetch_outcome_stats_snapshot",
                "_prefetch_occupied_span",
                "_alloc_prefetch_aux_staging",
                "_trim_buffer_prefetch_full_head",
                "revoke_pending_prefetch",
                "_drain_storage_control_queues_impl",
                "drain_storage_control_queues",
                "drain_storage_control_queues_local",
                "attach_storage_backend",
                "detach_storage_backend",
                "shutdown",
                "clear_storage_backend",
                "_count_ready_acks",
                "_sync_hicache_ready_counts",
                "writing_check",
                "_log_write_ack_metrics",
                "loading_check",
                "init_load_back",
                "load_back_is_cache_owned",
                "finish_external_linker_loads",
                "check_hicache_events",
                "ready_to_load_host_cache",
                "is_load_back_event_done",
                "has_free_load_back_slot",
            )
        ),
    ),
    *_whole(
        RADIX,
        "pd",
        *(
            _URC + n
            for n in (
                "supports_retraction_backup",
                "validate_retraction_host_capacity",
                "_pad_retraction_indices",
                "_retraction_device_transfers",
                "_reclaim_retraction_host",
                "backup_kv_cache",
                "restore_kv_cache",
                "discard_kv_cache_backup",
            )
        ),
        why="--disaggregation-decode-retraction-backup=host_pool (a PD decode server's retraction to host)",
    ),
    Excluded(RADIX, _URC + "rotation_base_of", "multi-rank"),
    Excluded(RADIX, _URC + "_finish_storage_prefetch", "hicache", (2701, 2713), "a storage hit's accounting"),
    Excluded(RADIX, _URC + "flush_pending_backups", "hicache", (3713, 3713), "cache_controller.start_writing"),
    Excluded(
        RADIX,
        _URC + "swa_reprefill_tail_tokens",
        "memory-class",
        (3764, 3764),
        "decoder SWA bounded replay (DeepSeek V4's attention backend)",
    ),
    Excluded(
        RADIX,
        _URC + "swa_reprefill_tail_tokens",
        "memory-class",
        (3767, 3769),
        "DeepSeek V4's unified KV (is_unified_kv_triton)",
    ),
    Excluded(RADIX, _URC + "swa_retain_floor", "component", (3774, 3777), "Mamba with SWA"),
    *_whole(
        RADIX,
        "session",
        *(
            _URC + n
            for n in ("open_radix_session", "ensure_session_generation", "release_radix_session", "release_session")
        ),
    ),
    *_whole(
        RADIX,
        "component",
        *(_URC + n for n in ("mamba_evictable_size", "mamba_protected_size", "all_mamba_values_flatten")),
    ),
    Excluded(RADIX, _URC + "sanity_check", "session", (3874, 3874), "a streaming session holding KV"),
    Excluded(RADIX, _URC + "sanity_check", "hicache", (3879, 3882), "buffer_pipeline's write-throughs"),
    Excluded(RADIX, _URC + "prefix_device_indices", "hicache", (3959, 3961), "linker.private_load_indices"),
    *_whole(
        RADIX,
        "no-caller",
        *(_URC + n for n in ("total_size", "device", "root_node", "resolve_node_handle")),
        why="the BasePrefixCache defaults that read root_node and resolve_node_handle are overridden here",
    ),
    *_whole(
        RADIX,
        "violation",
        _URC + "available_and_evictable_str",
        _URC + "pretty_print",
        why="the out-of-memory report of mem_cache/allocation.py, on its way to a RuntimeError",
    ),
    Excluded(RADIX, _URC + "page_size.setter", "session", why="a streaming session forwards its page size"),
    *_whole(
        RADIX,
        "hicache",
        _URC + "enable_storage",
        _URC + "write_through_threshold",
        _URC + "write_through_threshold.setter",
        _URC + "is_write_back.setter",
        why="set by init_hicache, read by its storage and write-through paths",
    ),
    # -- unified_cache/components/swa.py -------------------------------------------------------------------------
    Excluded(SWA, "SWAComponent.__init__", "violation", (87, 87), "a hybrid model's SWA component without a window"),
    *_whole(
        SWA,
        "hicache",
        *(
            "SWAComponent." + n
            for n in (
                "restore_buffer_mapping",
                "_collect_unbacked_swa_nodes",
                "_collect_unbacked_swa_nodes_in_window",
                "needs_incremental_backup",
                "recover_after_unevict",
                "prepare_prefetch",
                "alloc_prefetch_staging",
                "buffer_backup_keys",
                "build_hicache_transfers",
                "build_external_linker_transfer",
                "update_external_linker_load",
                "commit_hicache_transfer",
                "_release_swa_host",
                "_attach_swa_host_value",
                "_commit_prefetch",
                "drive_host_eviction",
                "free_host_values",
            )
        ),
    ),
    *_whole(
        SWA,
        "session",
        *(
            "SWAComponent." + n
            for n in (
                "_walk_session_coverage",
                "_inc_session_coverage",
                "_dec_session_coverage",
                "_advance_session_coverage",
                "_recede_session_coverage",
                "validate_session_state",
            )
        ),
    ),
    *_whole(SWA, "memory-class", "SWAComponent._page_pairs", "SWAComponent._transfer_swa_pages"),
    Excluded(SWA, "SWAComponent._unified_allocator", "memory-class", (257, 257), "UnifiedSWAAllocatorBase"),
    Excluded(SWA, "SWAComponent._set_swa", "memory-class", (323, 324), "the unified allocator's page transfer"),
    Excluded(SWA, "SWAComponent.refresh_lru", "violation", (354, 355), "an unknown LRU refresh phase"),
    Excluded(
        SWA, "SWAComponent.create_match_validator.validator", "memory-class", (372, 372), "swa_gates_prefix_match=False"
    ),
    Excluded(SWA, "SWAComponent.finalize_match_result_in_tree_core", "hicache", (412, 413), "a host SWA hit"),
    Excluded(
        SWA,
        "SWAComponent._clip_to_window",
        "hicache",
        (446, 446),
        "a split's UpdatePendingBackupOnNodeSplit (a write-through-pending node)",
    ),
    Excluded(
        SWA,
        "SWAComponent.update_component_on_insert_overlap",
        "component",
        (486, 486),
        "an independent (auxiliary) SWA component",
    ),
    Excluded(
        SWA,
        "SWAComponent._maybe_split_leaf_for_swa_lock",
        "hicache",
        (623, 623),
        "a split's UpdatePendingBackupOnNodeSplit",
    ),
    Excluded(SWA, "SWAComponent.redistribute_on_node_split", "hicache", (654, 681), "host values split"),
    Excluded(SWA, "SWAComponent.evict_component", "hicache", (722, 726), "the host layer"),
    Excluded(SWA, "SWAComponent.evict_component", "hicache", (733, 735), "a device tombstone keeping a host copy"),
    Excluded(SWA, "SWAComponent._evict_device_start", "session", (746, 748), "the session eviction cursor"),
    Excluded(SWA, "SWAComponent._evict_device_next_node", "hicache", (807, 821), "a write-back SWA backup"),
    Excluded(SWA, "SWAComponent._evict_device_next_node", "session", (840, 840), "the session eviction cursor"),
    Excluded(SWA, "SWAComponent._evict_device_end", "session", (846, 846), "the session eviction cursor"),
    Excluded(SWA, "SWAComponent.acquire_component_lock", "hicache", (884, 885), "a host lock"),
    Excluded(SWA, "SWAComponent.acquire_component_lock", "hicache", (891, 891), "a host lock"),
    Excluded(SWA, "SWAComponent.release_component_lock", "hicache", (931, 934), "a host lock"),
    Excluded(SWA, "SWAComponent.release_component_lock", "hicache", (940, 940), "a host lock"),
    Excluded(SWA, "SWAComponent.prepare_for_caching_req", "component", (1015, 1015), "Mamba with SWA"),
    Excluded(
        SWA,
        "SWAComponent.apply_component_action",
        "hicache",
        (1565, 1572),
        "FreeComponentHostSlot",
    ),
    Excluded(SWA, "SWAComponent.apply_component_action", "hicache", (1574, 1577), "RebuildFullToSWAMapping"),
    Excluded(
        SWA,
        "SWAComponent.apply_component_action",
        "no-caller",
        (1579, 1580),
        "RecoverEvictedSWA: neither tree core emits it",
    ),
    Excluded(SWA, "SWAComponent.apply_component_action", "memory-class", (1588, 1588), "the unified allocator"),
    Excluded(SWA, "SWAComponent.apply_component_action", "violation", (1602, 1602), "an unhandled action"),
    # -- unified_cache/unified_tree_core.py ---------------------------------------------------------------------
    Excluded(CORE, "UnifiedTreeNode.component", "no-caller"),
    *_whole(
        CORE,
        "hicache",
        "UnifiedTreeNode.get_last_hash_value",
        "UnifiedTreeNode.get_prefix_hash_values",
        why="page hashes exist only with storage or the linker",
    ),
    Excluded(CORE, "UnifiedLRUList.__init__", "session", (236, 242), "the session partition's sentinels"),
    Excluded(CORE, "UnifiedLRUList._add_node", "session", (255, 255), "the unreferenced half of the partition"),
    Excluded(
        CORE,
        "UnifiedLRUList.reset_node_mru",
        "component",
        why="called by TreeComponent.refresh_lru (Mamba's: SWA has its own) and the session partition",
    ),
    *_whole(
        CORE,
        "session",
        "UnifiedLRUList.cursor_begin",
        "UnifiedLRUList.cursor_next",
        "UnifiedLRUList.cursor_end",
        why="the session eviction cursor",
    ),
    Excluded(
        CORE,
        "UnifiedLRUList.reset_node_and_parents_mru",
        "component",
        why="called by TreeComponent.refresh_lru only: SWA overrides it, FULL keeps no LRU",
    ),
    Excluded(
        CORE,
        "UnifiedLRUList.reset_node_and_window_ancestors_mru",
        "session",
        (352, 353),
        "the unreferenced half of the partition",
    ),
    *_whole(CORE, "hicache", "UnifiedLRUList.get_prev_no_host_lock", "UnifiedLRUList.get_lru_no_host_lock"),
    Excluded(CORE, _TC + "_session_lru_predicate", "session", (480, 480)),
    *_whole(
        CORE,
        "hicache",
        *(
            _TC + n
            for n in (
                "is_write_through_compatible",
                "is_backuped",
                "is_root",
                "get_last_hash_value",
                "get_prefix_hash_values",
                "get_hash_values",
                "snapshot_buffer_backup",
                "validate_buffer_backup",
                "backfill_missing_hash_values",
                "inc_full_pin",
                "dec_full_pin",
                "inc_host_lock_ref",
                "dec_host_lock_ref",
                "match_full_device_prefix",
                "is_full_device_evicted",
                "_needs_external_linker_offload",
                "_needs_incremental_component_backup",
                "_unevict_node_on_insert",
                "finish_swa_state_eviction",
                "_finish_internal_component_eviction",
                "drop_subtree_no_host",
                "drive_host_eviction",
                "_reclaim_full_host_duplicates",
                "_can_reclaim_full_host_duplicate",
                "_release_full_host_duplicate",
                "_evict_host_leaf",
                "demote",
                "_demote",
                "set_hicache_enabled",
                "set_host_memory_buffer_only",
                "insert_host",
                "build_backup_spec",
                "buffer_backup_pool_keys",
                "build_backup_kv_action",
                "_build_backup_spec",
                "build_storage_backup_spec",
                "build_hicache_transfers",
                "build_load_back_spec",
                "prefetch_anchor_info",
                "_build_backup_kv_action",
                "commit_hicache_transfers",
                "commit_backup",
                "commit_load_back",
                "finish_load_back",
                "mark_write_through_pending",
                "_depth_from_root",
                "build_external_linker_offload_transfers",
                "mark_external_cache_stored_path",
                "mark_external_linker_offload_pending",
                "finish_external_linker_offload",
                "finish_write_through",
                "_walk_span",
                "swa_tombstone_ranges",
                "attach_swa_window",
                "_attach_swa_segment",
            )
        ),
    ),
    *_whole(CORE, "multi-rank", _TC + "rotation_base_of", _TC + "rotation_phase_of", _TC + "_rotation_conflict"),
    *_whole(
        CORE,
        "no-caller",
        _TC + "collect_path_info",
        _TC + "dec_window_lock_only",
        _TC + "adjust_component_size",
        _TC + "total_size",
        why="collect_path_info, dec_window_lock_only, adjust_component_size: only the Rust "
        "core's binding has a caller; total_size: none",
    ),
    *_whole(
        CORE,
        "component",
        *(
            _TC + n
            for n in (
                "finish_mamba_state_eviction",
                "evict_excess_path_states",
                "get_component_device_value",
                "component_has_host_value_only",
                "mamba_evictable_size",
                "mamba_protected_size",
                "_all_component_values_flatten",
                "all_mamba_values_flatten",
            )
        ),
        why="Mamba state (get_component_device_value: Mamba's copy-on-write and buffer mode)",
    ),
    Excluded(CORE, _TC + "inc_lock_ref", "component", (740, 740), "a skipped Mamba lock"),
    Excluded(CORE, _TC + "_release_components", "component", (773, 773), "a skipped Mamba lock"),
    Excluded(CORE, _TC + "dec_swa_lock_only", "component", (862, 862), "a skipped Mamba lock"),
    Excluded(CORE, _TC + "dec_swa_lock_only", "component", (864, 864), "a lock below SWA's priority (Mamba)"),
    Excluded(
        CORE,
        _TC + "_match_prefix_helper._update_best_if_valid",
        "hicache",
        (946, 948),
        "a separate device match (host-backed nodes match)",
    ),
    Excluded(CORE, _TC + "_match_prefix_helper", "hicache", (955, 955), "an evicted node left in the tree"),
    Excluded(CORE, _TC + "_inc_hit_count_and_check", "hicache", (1107, 1107), "an evicted node"),
    Excluded(CORE, _TC + "_inc_hit_count_and_check", "hicache", (1109, 1109), "write-back"),
    Excluded(CORE, _TC + "_inc_hit_count_and_check", "hicache", (1113, 1116), "the external linker"),
    Excluded(CORE, _TC + "begin_insert", "violation", (1133, 1133), "a second insert walk while one is in flight"),
    Excluded(CORE, _TC + "begin_insert", "multi-rank", (1159, 1170), "a rotation base"),
    Excluded(CORE, _TC + "resume_insert", "violation", (1235, 1235), "no insert in flight"),
    Excluded(CORE, _TC + "_advance_insert", "violation", (1266, 1266), "an unknown insert phase"),
    Excluded(CORE, _TC + "_insert_walk_step", "hicache", (1296, 1296), "a split's write-through update"),
    Excluded(CORE, _TC + "_insert_walk_step", "hicache", (1300, 1325), "an insert over an evicted node"),
    Excluded(CORE, _TC + "_finish_insert_walk_node", "hicache", (1374, 1374), "a write-through backup"),
    Excluded(CORE, _TC + "_should_backup_after_insert", "hicache", (1433, 1433), "write-back"),
    Excluded(CORE, _TC + "_insert_tail_step", "hicache", (1461, 1465), "a write-through backup"),
    Excluded(CORE, _TC + "_split_node", "hicache", (1508, 1508), "a write-through-pending node"),
    Excluded(CORE, _TC + "_split_node", "hicache", (1510, 1515), "a write-through-pending node or buffer mode"),
    Excluded(CORE, _TC + "_is_host_leaf", "hicache", (2375, 2385), "an evicted node (every node asks first)"),
    Excluded(CORE, _TC + "_add_new_node", "hicache", (1557, 1557), "page hashes (storage, the linker)"),
    Excluded(CORE, _TC + "_update_evictable_leaf_sets", "hicache", (1600, 1600), "a host leaf"),
    Excluded(CORE, _TC + "_update_duplicate_tracking", "hicache", (1608, 1608), "full KV on both tiers"),
    Excluded(
        CORE,
        _TC + "_for_each_component_lru",
        "hicache",
        (1641, 1641),
        "an LRU that already holds the node: only _demote's host LRU (a split's new node is in none)",
    ),
    Excluded(CORE, _TC + "evict_device_next_node", "hicache", (1690, 1696), "an internal state backup"),
    Excluded(CORE, _TC + "evict_device_leaf", "hicache", (1801, 1805), "write-back"),
    Excluded(CORE, _TC + "evict_device_leaf", "hicache", (1814, 1821), "a backed-up leaf demoted"),
    Excluded(
        CORE,
        _TC + "_cascade_evict",
        "hicache",
        (2144, 2154),
        "a full demote's cascade: an SWA trigger never cascades to FULL (FULL outranks it on an internal "
        "node, and an evictable leaf goes whole through evict_device_leaf)",
    ),
    Excluded(CORE, _TC + "_cascade_evict", "hicache", (2163, 2163), "a full demote"),
    Excluded(CORE, _TC + "_cascade_evict", "hicache", (2166, 2166), "a full demote's cascade"),
    Excluded(CORE, _TC + "_is_cascade_evict_leaf", "hicache", (2173, 2175), "the host layer"),
    Excluded(
        CORE,
        _TC + "_should_cascade_evict_component",
        "hicache",
        (2192, 2210),
        "a component at or below the trigger's priority: a full demote's SWA (or Mamba)",
    ),
    Excluded(CORE, _TC + "_evict_component_and_detach_lru", "hicache", (2244, 2245), "the host layer"),
    Excluded(
        CORE,
        _TC + "_iteratively_delete_tombstone_ancestors",
        "hicache",
        (2313, 2346),
        "an ancestor whose full KV left the device (only a host copy keeps one)",
    ),
    Excluded(CORE, _TC + "set_component_device_value", "hicache", (2969, 2969), "the host LRU"),
    *_at(
        CORE,
        _TC + "sanity_check",
        "violation",
        "a violation reported: its check failed",
        3030,
        3032,
        3036,
        3041,
        3042,
        3044,
        3064,
        3073,
        3080,
        3089,
        3091,
        3093,
        3109,
        3110,
        3111,
        3112,
        3113,
        3114,
        3130,
        3133,
        3138,
        3149,
        3154,
        3164,
        3166,
        3177,
        3196,
        3203,
        3223,
        3228,
        3264,
        3269,
        3270,
        3271,
    ),
    *_at(
        CORE,
        _TC + "sanity_check",
        "hicache",
        "host values, host leaves, full KV on both tiers, ongoing write-throughs and load-backs",
        3068,
        3069,
        3082,
        3101,
        3103,
        3118,
        3119,
        3120,
        3121,
        3122,
        3123,
        3235,
        3236,
        3237,
        3238,
        3239,
        3243,
        3244,
        3245,
        3246,
        3247,
        3258,
    ),
    *_at(CORE, _TC + "sanity_check", "session", "session state", 3143, 3144),
    *_at(
        CORE, _TC + "_check_lru_linked_list", "violation", "a broken list reported", 3296, 3302, 3304, 3305, 3310, 3315
    ),
    *_at(CORE, _TC + "_check_lru_linked_list", "session", "the session partition's sentinels", 3298, 3299, 3300),
    Excluded(CORE, _TC + "component_evictable_size", "violation", why="its one caller is the out-of-memory report"),
    Excluded(CORE, _TC + "component_protected_size", "no-caller"),
    Excluded(
        CORE, _TC + "pretty_print", "violation", why="called by a failed sanity_check and the out-of-memory report"
    ),
    # -- allocator/swa.py --------------------------------------------------------------------------------------------
    Excluded(ALLOCATOR, "<module>", "accelerator", (20, 24), "torch_npu and the NPU allocator"),
    Excluded(
        ALLOCATOR,
        "SWATokenToKVPoolAllocator.__init__",
        "accelerator",
        (87, 87),
        "an out-of-tree platform's paged allocator",
    ),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.__init__", "accelerator", (89, 89), "the NPU's paged allocator"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.__init__", "memory-class", (136, 148), "the SWA ring"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.swa_ring_cost_tokens", "memory-class"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.available_size", "memory-class", (167, 167), "the SWA ring"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.swa_available_size", "memory-class", (228, 228), "the SWA ring"),
    *_whole(
        ALLOCATOR,
        "memory-class",
        "SWATokenToKVPoolAllocator._conserve_full_available_size",
        "SWATokenToKVPoolAllocator._conserve_swa_available_size",
        why="read only by the unified hybrid SWA allocator's leak invariant",
    ),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.new_pages_available", "memory-class", (295, 295), "the SWA ring"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.alloc_extend", "memory-class", (319, 327), "the SWA ring"),
    Excluded(
        ALLOCATOR,
        "SWATokenToKVPoolAllocator.alloc_extend_swa_tail",
        "pd",
        why="a PD decode server's transferred prefix with a fresh SWA tail",
    ),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.alloc_decode", "memory-class", (439, 441), "the SWA ring"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.alloc_decode", "accelerator", (456, 461), "NPU scatter"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator.clear_full_to_swa_mapping", "accelerator", (493, 493), "NPU"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator._free_swa_pages", "accelerator", (538, 538), "CUDA"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator._free_swa_pages", "memory-class", (545, 545), "the SWA ring"),
    Excluded(ALLOCATOR, "SWATokenToKVPoolAllocator._free_swa_pages_cuda", "accelerator"),
)


def excluded_lines(srt: Path, file: str) -> dict[int, Excluded]:
    """Each excluded line of ``file`` (under ``srt``, SGLang's ``sglang/srt``) and the entry that excludes it. An
    entry naming a function the file lacks, or lines outside it, is an error: the table no longer fits the file."""
    where = spans(srt / file)
    out: dict[int, Excluded] = {}
    for entry in EXCLUDED:
        if entry.file != file:
            continue
        if entry.kind not in KINDS:
            raise ValueError(f"{entry}: unknown kind")
        span = where.get(entry.where)
        if span is None:
            raise ValueError(f"{file} has no function {entry.where}")
        lo, hi = entry.lines or span.body
        if not (span.whole[0] <= lo <= hi <= span.whole[1]):
            raise ValueError(f"{entry}: lines {lo}-{hi} are not inside {entry.where} ({span.whole})")
        for line in range(lo, hi + 1):
            out.setdefault(line, entry)
    return out
