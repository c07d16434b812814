"""The engine against its oracles (dense reference, transformers), batching, pools and bad input."""

from __future__ import annotations

import logging

import pytest
import torch

from harness.engine import RequestError, SamplingParams
from harness.mem import STALE_KEY_WARNING
from harness.mem.index import LOC_DTYPE
from harness.model import reference_logits
from tests.engine_helpers import hf_greedy, hf_untied, make_engine
from fixtures.checkpoints import ARCHS, hf_logits, random_sequences

GREEDY = SamplingParams(max_new_tokens=24, ignore_eos=True)
TOL = 1e-4  # fp32; measured max abs diffs are ~5e-6 (see the assertion messages)


@pytest.mark.parametrize("arch", ARCHS)
def test_teacher_forced_logits_eager_tape_dense_and_transformers_agree(arch, caplog):
    prompts = random_sequences([3, 19, 40], seed=1)
    continuations = random_sequences([30, 25, 12], seed=2)
    sequences = list(zip(prompts, continuations))
    full = [p + c for p, c in sequences]
    with caplog.at_level(logging.WARNING):
        eager = make_engine(arch, "off").teacher_forced_logits(sequences)
        tape = make_engine(arch, "tape").teacher_forced_logits(sequences)
    assert STALE_KEY_WARNING not in caplog.text  # invariant 6: clean forwards never warn
    engine_model = make_engine(arch, "off").model
    dense = reference_logits(engine_model, full)
    hf = [hf_logits(hf_untied(arch), seq) for seq in full]
    for (p, c), e, t, d, h in zip(sequences, eager, tape, dense, hf):
        rows = slice(len(p) - 1, len(p) - 1 + len(c))  # logits predicting each continuation token
        for name, other in (("tape", t), ("dense", d[rows]), ("transformers", h[rows])):
            diff = (e - other).abs().max().item()
            assert diff <= TOL, f"{arch}: engine eager vs {name}: max abs diff {diff:.2e}"


def test_greedy_matches_transformers_on_50_prompts_spanning_several_windows():
    arch = "gemma2"  # window 6: prompts of 8..40 tokens plus 20 new tokens span 5..10 windows
    lengths = [8 + (7 * i) % 33 for i in range(50)]
    prompts = random_sequences(lengths, seed=3)
    engine = make_engine(arch, "tape")
    outputs = engine.generate(prompts, SamplingParams(max_new_tokens=20, ignore_eos=True))
    mismatched = [
        i for i, (p, o) in enumerate(zip(prompts, outputs)) if o.output_ids != hf_greedy(hf_untied(arch), p, 20)
    ]
    assert not mismatched, f"greedy tokens differ from transformers for prompts {mismatched}"
    assert engine.pools_idle()


@pytest.mark.parametrize("arch", ["gemma3_text", "qwen3", "mellum"])
def test_greedy_matches_transformers_other_layouts(arch):
    prompts = random_sequences([9, 17, 26, 33, 40, 12], seed=4)
    outputs = make_engine(arch, "tape").generate(prompts, GREEDY)
    for p, o in zip(prompts, outputs):
        assert o.output_ids == hf_greedy(hf_untied(arch), p, GREEDY.max_new_tokens)


def test_a_request_alone_and_inside_batches_of_7_25_45_gives_the_same_tokens():
    prompts = random_sequences([5 + (11 * i) % 37 for i in range(45)], seed=5)
    engine = make_engine("gemma2", "tape")
    alone = engine.generate(prompts[:1], GREEDY)[0].output_ids
    for n in (7, 25, 45):  # buckets 8 and 32 with padding; 45 > max_running queues and shrinks
        batch = engine.generate(prompts[:n], GREEDY)
        assert batch[0].output_ids == alone, f"request 0 changed inside a batch of {n}"
        assert engine.pools_idle(), f"slots leaked after a batch of {n}"
    solo = [engine.generate([p], GREEDY)[0].output_ids for p in prompts[20:25]]
    assert [o.output_ids for o in batch[20:25]] == solo


def test_a_workload_larger_than_the_pools_queues_and_completes():
    prompts = random_sequences([30] * 10, seed=6)
    roomy = make_engine("qwen3", "tape").generate(prompts, GREEDY)
    # 160 full slots: at most three requests (30 + 24 - 1 = 53 slots each) run at once.
    tight = make_engine("qwen3", "tape", full_pool_size=160)
    out = tight.generate(prompts, GREEDY)
    assert [o.output_ids for o in out] == [o.output_ids for o in roomy]
    assert tight.pools_idle()


def test_swa_pool_is_sized_for_the_window_and_holds_at_most_a_window_per_request():
    engine = make_engine("gemma2", "off", max_running_requests=4, max_context_len=256)
    window = engine.model_config.sliding_window
    alloc = engine.runner.allocator
    assert alloc.size_swa == 4 * window + 64 < alloc.size == 4 * 256
    for p in random_sequences([40, 50], seed=7):
        engine.add_request(p, SamplingParams(max_new_tokens=30, ignore_eos=True))
    while engine.scheduler.has_work():
        engine.step()
        for req in engine.scheduler.running:  # its own tokens (the prefix cache's are the cache's, evictable)
            row = engine.runner.req_to_token_pool.req_to_token[req.req_pool_idx, req.cache_protected_len : req.kv_len]
            held = int((alloc.full_to_swa_index_mapping[row] > 0).sum())
            assert held <= window, f"request {req.rid} holds {held} SWA slots with window {window}"
    assert engine.pools_idle()


def test_requests_that_can_never_fit_are_refused_clearly():
    engine = make_engine("gemma2", "off", max_context_len=64, full_pool_size=100)
    with pytest.raises(RequestError, match="needs 70 tokens of context; this engine allows 64"):
        engine.add_request(list(range(40)), SamplingParams(max_new_tokens=31))
    small = make_engine("gemma2", "off", max_running_requests=1, max_context_len=64, full_pool_size=32)
    with pytest.raises(RequestError, match="full pool has only 32"):
        small.add_request(list(range(30)), SamplingParams(max_new_tokens=10))
    assert not engine.scheduler.has_work() and not small.scheduler.has_work()


@pytest.mark.parametrize(
    "prompt, params, match",
    [
        ([], SamplingParams(), "prompt is empty"),
        ([1, 999], SamplingParams(), r"outside \[0, 128\)"),
        ([1, 2], SamplingParams(max_new_tokens=0), "max_new_tokens"),
        ([1, 2], SamplingParams(temperature=-1.0), "temperature"),
        ("text", SamplingParams(), "no tokenizer.json"),
        ([1, 2], SamplingParams(stop=("",)), "stop"),
    ],
)
def test_bad_requests_get_a_clear_error(prompt, params, match):
    engine = make_engine("gemma2", "off")
    with pytest.raises(RequestError, match=match):
        engine.add_request(prompt, params)


def test_sampling_is_deterministic_per_seed():
    prompts = random_sequences([10, 20], seed=8)
    hot = [SamplingParams(max_new_tokens=16, temperature=1.5, seed=s, ignore_eos=True) for s in (1, 2)]
    a = make_engine("gemma2", "tape").generate(prompts, hot)
    b = make_engine("gemma2", "off").generate(prompts, hot)
    assert [o.output_ids for o in a] == [o.output_ids for o in b]
    again = make_engine("gemma2", "tape").generate(prompts, [hot[1], hot[1]])
    assert again[0].output_ids != a[0].output_ids  # another seed, another sample


def test_stop_token_ids_end_a_request():
    engine = make_engine("gemma2", "off")
    prompt = random_sequences([12], seed=9)[0]
    free = engine.generate([prompt], GREEDY)[0].output_ids
    stopper = free[5]
    first = free.index(stopper)
    out = engine.generate([prompt], SamplingParams(max_new_tokens=24, stop_token_ids=(stopper,)))[0]
    assert out.output_ids == free[: first + 1] and out.finish_reason == "stop" and out.matched_stop == stopper


def test_abort_after_a_failed_step_frees_everything_and_the_engine_serves_again(monkeypatch):
    engine = make_engine("gemma2", "tape")
    prompts = random_sequences([12, 20, 7], seed=10)
    expected = engine.generate(prompts, GREEDY)
    for p in prompts:
        engine.add_request(p, GREEDY)
    engine.step()  # prefill
    forward = engine.runner.forward

    def broken(batch):
        raise RuntimeError("injected engine failure")

    monkeypatch.setattr(engine.runner, "forward", broken)
    with pytest.raises(RuntimeError, match="injected"):
        engine.step()  # slots for this step were allocated before the failure
    assert len(engine.abort_all()) == 3 and engine.pools_idle()
    monkeypatch.setattr(engine.runner, "forward", forward)
    assert [o.output_ids for o in engine.generate(prompts, GREEDY)] == [o.output_ids for o in expected]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_graphs_match_eager_on_the_gpu(arch):
    """The engine with real CUDA graphs vs graphs off on the same GPU: teacher-forced logits and
    greedy tokens of a batch that pads into a bucket (7 requests -> bucket 8)."""
    prompts = random_sequences([5 + (9 * i) % 31 for i in range(7)], seed=11)
    continuations = random_sequences([20] * 7, seed=12)
    graphs, eager = (make_engine(arch, mode, device="cuda") for mode in ("cuda", "off"))
    assert graphs.graph_mode == "cuda"
    for g, e in zip(
        graphs.teacher_forced_logits(list(zip(prompts, continuations))),
        eager.teacher_forced_logits(list(zip(prompts, continuations))),
    ):
        diff = (g - e).abs().max().item()
        assert diff <= 1e-3, f"{arch}: cuda graph vs eager teacher-forced logits differ by {diff:.2e}"
    assert [o.output_ids for o in graphs.generate(prompts, GREEDY)] == [
        o.output_ids for o in eager.generate(prompts, GREEDY)
    ]
    assert graphs.pools_idle()


def test_fill_slice_is_the_slice_of_fill_ids():
    from harness.engine.request import Req

    req = Req(0, [5, 6, 7], SamplingParams(), output_ids=[8, 9])
    for begin in range(6):
        for end in range(begin, 6):
            assert req.fill_slice(begin, end) == req.fill_ids[begin:end]


def test_greedy_sampling_takes_the_first_maximum_and_fails_nan_rows_alone():
    from harness.engine.request import Req
    from harness.engine.sampling import SamplingFailure, sample

    logits = torch.randn(5, 11, generator=torch.Generator().manual_seed(0))
    logits[1, [2, 7]] = 9.0  # a tie: the first index wins, as argmax
    logits[2, 4] = float("nan")
    logits[3, 0], logits[3, 6] = float("inf"), float("nan")  # NaN beside +inf still fails the row
    logits[4, 3] = float("inf")
    reqs = [Req(i, [1], SamplingParams()) for i in range(5)]
    tokens = sample(logits, reqs)
    assert tokens[0] == int(logits[0].argmax()) and tokens[1] == 2 and tokens[4] == 3
    assert all(isinstance(tokens[i], SamplingFailure) and f"request {i}" in tokens[i].message for i in (2, 3))


def test_a_shared_few_shot_prefix_is_served_from_the_cache_to_a_later_batch():
    """As SGLang serves lm-eval's contexts: once a few-shot prompt was prefilled, an exact repeat reuses all of it;
    the first later prompt with the same exemplars finds their window tombstoned and prefills them (its
    checkpoint repairs the window where it branches: the tree's rule 7, docs/FINDINGS.md #10); every prompt after
    it reuses the exemplars. Before #9's fix the prompt's last chunk was never checkpointed: no hit at all."""
    from harness.engine import Engine, EngineConfig
    from suites.conftest import TRAINED_CHECKPOINTS
    from suites.servers.oracles import lm_eval_prompts

    engine = Engine(EngineConfig(model_path=TRAINED_CHECKPOINTS["gemma2-tiny-swa"], graphs="off", num_threads=1))
    prompts, greedy = lm_eval_prompts(4), SamplingParams(max_new_tokens=48, ignore_eos=True)
    engine.generate([prompts[0], prompts[4]], greedy)  # one per task: the tree holds both exemplar sets
    first = engine.generate([prompts[0], prompts[1], prompts[5]], greedy)  # a repeat, then one sharer per task
    later = engine.generate([*prompts[2:4], *prompts[6:]], greedy)
    assert first[0].cached_tokens >= len(first[0].prompt_ids) - 16, first[0].cached_tokens
    shared = [o.cached_tokens for o in later]
    assert all(c >= 150 for c in shared), f"cached tokens of the later sharers: {shared} (exemplars: ~180 tokens)"


@pytest.mark.parametrize("frees_window", [False, True], ids=["harness-order", "sglang-order"])
def test_a_prefill_chunk_is_checkpointed_with_no_slide_where_the_cache_frees_the_window(frees_window):
    """The order the scheduler drives the cache in after an extend (harness/engine/scheduler.py): slide then
    checkpoint for the harness's tree, which lays the freed tokens as tombstones; checkpoint and no slide for a cache
    that frees the out-of-window SWA slots of what it inserts itself (SGLang's: sliding first freed below a pending
    branch point and broke 0.5.22's checkpoint). Decode steps slide in both."""
    engine = make_engine("gemma2", "off", chunk_size=8)
    cache, calls = engine.tree_cache, []
    cache.checkpoint_frees_window = frees_window  # an instance attribute over the class's
    for name in ("slide_windows", "cache_unfinished_req"):

        def record(arg, _name=name, _method=getattr(cache, name)):
            (req,) = arg if _name == "slide_windows" else [arg]  # one request: a batch of one
            calls.append((_name, req.kv_len, len(req.prompt_ids)))
            return _method(arg)

        setattr(cache, name, record)
    (out,) = engine.generate([list(range(3, 40))], SamplingParams(max_new_tokens=6, ignore_eos=True))
    assert len(out.output_ids) == 6 and engine.pools_idle()
    extend = [name for name, kv_len, prompt in calls if kv_len <= prompt]
    decode = [name for name, kv_len, prompt in calls if kv_len > prompt]
    chunks = ["slide_windows", "cache_unfinished_req"] * 5 if not frees_window else ["cache_unfinished_req"] * 5
    assert extend == chunks, calls  # 37 prompt tokens in chunks of 8
    assert decode == ["slide_windows"] * 5, calls  # the last of 6 tokens needs no forward


@pytest.mark.parametrize("page_size", [1, 4])
def test_a_step_slides_every_cached_window_in_one_free_and_frees_what_a_slide_per_request_freed(page_size):
    """The prefix cache's rule 8 inside the engine: two engines run the same requests in lockstep (a published batch,
    then its repeats, continuations and partial sharers, whose SWA locks follow their windows), one sliding the
    step's windows in one call, the other request by request. After every step the same full slots have given back
    their SWA slot, the pools, requests and tree agree, and each slide of the first took at most one ``free_swa``.
    (Which SWA slot a token gets may differ: one free sorts the whole step's pages, so later allocations hand them
    out in another order.)"""
    engines, frees, slide_frees = [], [], []
    for batched in (True, False):
        engine = make_engine("gemma2", "off", chunk_size=8, page_size=page_size)
        cache, alloc, calls, per_slide = engine.tree_cache, engine.runner.allocator, [], []

        def record(index, _calls=calls, _real=alloc.free_swa):
            _calls.append(index.clone())
            return _real(index)

        def slide(reqs, _slide=cache.slide_windows, _batched=batched, _calls=calls, _per_slide=per_slide):
            before = len(_calls)
            for batch in [reqs] if _batched else [[r] for r in reqs]:
                _slide(batch)
            _per_slide.append(len(_calls) - before)

        alloc.free_swa, cache.slide_windows = record, slide
        engines.append(engine)
        frees.append(calls)
        slide_frees.append(per_slide)
    stem = random_sequences([30], seed=7)[0]
    first = [stem + tail for tail in random_sequences([3, 9, 14, 5], seed=8)]
    later = [
        *first[:2],
        first[2] + [5, 6, 7],
        stem[:17] + [9] * 4,
        stem[:23] + [4] * 12,
        *random_sequences([11], seed=9),
    ]
    params = SamplingParams(max_new_tokens=20, ignore_eos=True)
    outputs = [[], []]
    for prompts in (first, later):
        for engine in engines:
            for p in prompts:
                engine.add_request(p, params)
        while engines[0].scheduler.has_work():
            before = [len(calls) for calls in frees]
            for i, engine in enumerate(engines):
                outputs[i] += [(o.rid, o.output_ids, o.cached_tokens) for o in engine.step().finished]
            freed = [
                sorted(torch.cat([torch.empty(0, dtype=LOC_DTYPE), *c[n:]]).tolist()) for c, n in zip(frees, before)
            ]
            assert freed[0] == freed[1], "the step gave back the SWA slots of other full slots"
            assert _cache_state(engines[0]) == _cache_state(engines[1])
    assert outputs[0] == outputs[1] and not engines[0].scheduler.has_work() and not engines[1].scheduler.has_work()
    assert max(slide_frees[0]) == 1, f"free_swa calls per batched slide: {slide_frees[0]}"
    assert max(slide_frees[1]) > 1, "no step slid more than one request's window: the scene tests nothing"
    assert sum(o[2] for o in outputs[0]) > 0, "no request was served from the cache"


def _cache_state(engine) -> dict:
    alloc, cache = engine.runner.allocator, engine.tree_cache
    tree = cache.tree_slots()
    return {
        "full free pages": alloc.full_attn_allocator.free_pages.tolist(),
        "full slots holding SWA": alloc.full_to_swa_index_mapping.ne(0).nonzero().flatten().tolist(),
        "SWA free": alloc.swa_available_size(),
        "requests": [
            (r.rid, r.kv_len, r.swa_evicted, r.cache_protected_len, getattr(r.prefix_lock, "swa_floor", None))
            for r in engine.scheduler.running
        ],
        "tree": (sorted(tree.full.tolist()), sorted(tree.swa_live.tolist())),
        "sizes": (
            cache.evictable_size(),
            cache.protected_size(),
            cache.swa_evictable_size(),
            cache.swa_protected_size(),
        ),
    }


def _lockstep(engines, waves, params: SamplingParams, agree) -> list[list[tuple]]:
    """The same waves of requests through every engine, one step each in turn, ``agree()`` after every step; each
    engine's finished requests (id, tokens, cached tokens)."""
    outputs = [[] for _ in engines]
    for prompts in waves:
        for engine in engines:
            for p in prompts:
                engine.add_request(p, params)
        while engines[0].scheduler.has_work():
            for out, engine in zip(outputs, engines):
                out += [(o.rid, o.output_ids, o.cached_tokens) for o in engine.step().finished]
            agree()
    return outputs


def _evict_by_scan(cache):
    """Rule 4 as the tree ran it before issue 58: a fresh LRU scan of the whole tree for every node it takes (the
    reference the one-walk heap must match node for node, ties to the first node walked)."""

    def lru(eligible):
        return min((n for n in cache._nodes() if eligible(n)), key=lambda n: n.last_access, default=None)

    def evict(*, full_tokens: int = 0, swa_tokens: int = 0) -> None:
        cache.settle_locks()  # rule 11: as every eviction reads the locks
        alloc = cache.allocator
        want = alloc.full_available_size() + full_tokens
        while alloc.full_available_size() < want and (leaf := lru(lambda n: not n.children and not n.full_lock_ref)):
            cache._delete_leaf(leaf)
        want = alloc.swa_available_size() + swa_tokens
        while alloc.swa_available_size() < want and (node := lru(lambda n: n.swa_live and not n.swa_lock_ref)):
            if not node.children and not node.full_lock_ref:
                cache._delete_leaf(node)
            else:
                cache._tombstone(node)

    return evict


@pytest.mark.parametrize(("page_size", "prefill_tokens", "full_pool"), [(1, 64, 112), (4, 32, 160)])
def test_eviction_takes_the_nodes_a_fresh_lru_scan_per_node_would_take(page_size, prefill_tokens, full_pool):
    """Rule 4 walks the tree once per eviction into a heap (issue 58); two engines on a tight pool run the same
    requests in lockstep, one evicting through it, the other by a fresh scan per node taken. After every step the
    pools, requests and tree agree and the ledgers read the same. The pools are sized so that an eviction takes full KV,
    SWA KV and tombstones, and some take a leaf and then the parent it leaves as a leaf."""
    engines = [
        make_engine(
            "gemma2",
            "off",
            chunk_size=8,
            page_size=page_size,
            max_running_requests=4,
            max_prefill_tokens=prefill_tokens,
            full_pool_size=full_pool,
        )
        for _ in range(2)
    ]
    engines[1].tree_cache.evict = _evict_by_scan(engines[1].tree_cache)
    stem = random_sequences([24], seed=3)[0]
    waves = [
        [stem + tail for tail in random_sequences([4, 9, 13], seed=4)],
        [stem[:12] + [7] * 6, *random_sequences([18, 10], seed=5), stem + [1, 2]],
        [stem[:20] + [3] * 9, stem[:12] + [7] * 6 + [8], *random_sequences([14], seed=6)],
    ]

    def agree() -> None:
        assert _cache_state(engines[0]) == _cache_state(engines[1])
        assert engines[0].scheduler.evicted == engines[1].scheduler.evicted

    outputs = _lockstep(engines, waves, SamplingParams(max_new_tokens=16, ignore_eos=True), agree)
    assert outputs[0] == outputs[1] and not engines[1].scheduler.has_work()
    assert engines[0].scheduler.evicted.all_moved, f"the pool never came under pressure: {engines[0].scheduler.evicted}"
    assert sum(o[2] for o in outputs[0]) > 0, "no request was served from the cache"


def _tree_shape(cache) -> tuple:
    cache.settle_locks()  # rule 11: the nodes are read straight from the tree
    nodes = sorted(
        (
            n.start,
            n.end,
            n.swa_tombstone,
            n.full_lock_ref,
            sorted((+n.swa_locks).items()),
            n.value.tolist(),
            n.last_access,
        )
        for n in cache._nodes()
    )
    sizes = (cache.evictable_size(), cache.protected_size(), cache.swa_evictable_size(), cache.swa_protected_size())
    return nodes, sizes


def _sharing_waves() -> list[list[list[int]]]:
    """Three waves of requests over one 40-token stem: published prompts, repeats and partial sharers, plus strangers."""
    stem = random_sequences([40], seed=11)[0]
    return [
        [stem + tail for tail in random_sequences([3, 8], seed=12)],
        [stem + [1], stem[:28] + [5] * 4, stem[:36], *random_sequences([20], seed=13)],
        [stem[:28] + [5] * 4 + [6], stem + [2, 3], stem[:16] + [9] * 3],
    ]


@pytest.mark.parametrize("page_size", [1, 4])
def test_the_floor_moves_a_piece_to_its_parent_exactly_as_split_and_merge_would(page_size):
    """Rule 3's fast path (issue 58): where the piece the floor leaves behind would be split off and merged into its
    parent, it moves there directly. Two engines run the same requests in lockstep (published prompts, then repeats
    and partial sharers that decode past their windows, on a pool tight enough to evict), one with the fast path and
    one that always splits and merges; after every step every node (span, state, locks, slots, recency), the counts and
    the requests agree. The scene takes both paths."""
    engines, taken = [], []
    for fast in (True, False):
        engine = make_engine(
            "gemma2", "off", chunk_size=8, page_size=page_size, max_running_requests=4, max_prefill_tokens=32
        )
        cache, calls = engine.tree_cache, []

        def candidate(node, old, boundary, _real=cache._shift_candidate, _fast=fast, _calls=calls):
            found = _real(node, old, boundary)
            _calls.append(found is not None)
            return found if _fast else None

        cache._shift_candidate = candidate
        engines.append(engine)
        taken.append(calls)
    waves = _sharing_waves()

    def agree() -> None:
        assert _tree_shape(engines[0].tree_cache) == _tree_shape(engines[1].tree_cache)
        assert _cache_state(engines[0]) == _cache_state(engines[1])

    outputs = _lockstep(engines, waves, SamplingParams(max_new_tokens=40, ignore_eos=True), agree)
    assert outputs[0] == outputs[1] and not engines[1].scheduler.has_work()
    assert taken[0] == taken[1] and sum(taken[0]) > 0 and not all(taken[0]), f"fast path taken {sum(taken[0])} times"
    engines[0].tree_cache.sanity_check()


@pytest.mark.parametrize("page_size", [1, 4])
def test_floors_settled_when_read_leave_the_tree_a_floor_moved_every_step_leaves(page_size):
    """Rule 11 (issue 58): a step's slide only notes the SWA locks that owe their window a step, and the next call that
    reads the tree moves each once. Two engines run the same requests in lockstep (published prompts, repeats and
    partial sharers that decode past their windows, on a pool tight enough to evict), one as shipped and one that
    settles every lock right after every slide (a floor moved every step, as before rule 11); every 4th step, once both
    are settled (the comparison reads the tree, which settles the shipped one's locks, each owing up to 4 steps), every
    node (span, state, locks, slots, recency), the counts, the pools and the requests agree."""
    engines, moves = [], []
    for every_step in (False, True):
        engine = make_engine(
            "gemma2", "off", chunk_size=8, page_size=page_size, max_running_requests=4, max_prefill_tokens=32
        )
        cache, calls = engine.tree_cache, []
        real_follow, real_slide = cache._follow_window, cache.slide_windows
        cache._follow_window = lambda req, _real=real_follow, _calls=calls: (_calls.append(req.rid), _real(req))
        if every_step:
            cache.slide_windows = lambda reqs, _real=real_slide, _c=cache: (_real(reqs), _c.settle_locks())
        engines.append(engine)
        moves.append(calls)
    waves = _sharing_waves()

    owed = []  # per step: locks the shipped engine had yet to move when the step ended

    def agree() -> None:
        owed.append(len(engines[0].tree_cache._unsettled))
        if len(owed) % 4:  # compared every 4th step: in between the shipped engine's locks owe up to 4 steps
            return
        assert _tree_shape(engines[0].tree_cache) == _tree_shape(engines[1].tree_cache)
        assert _cache_state(engines[0]) == _cache_state(engines[1])

    outputs = _lockstep(engines, waves, SamplingParams(max_new_tokens=40, ignore_eos=True), agree)
    assert outputs[0] == outputs[1] and not engines[1].scheduler.has_work()
    assert sum(o[2] for o in outputs[0]) > 0, "no request was served from the cache"
    assert len(moves[0]) < len(moves[1]), f"floor moves: {len(moves[0])} settled when read, {len(moves[1])} every step"
    assert sum(n > 0 for n in owed) > 10, f"steps that ended owing a lock a move: {owed}"
    engines[0].tree_cache.sanity_check()
