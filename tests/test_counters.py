"""Server counters for the live progress: the harness server's /health, Prometheus text of SGLang and vLLM."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from harness.servers.vllm_events import Evictions, group_kinds, tally

from harness.servers.counters import (
    CacheCounters,
    cache_counters,
    SGLANG_METRICS,
    VLLM_METRICS,
    Counters,
    any_counters,
    metrics_reader,
    prometheus_sums,
)

SGLANG_TEXT = """\
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",is_stream="false"} 30.0
sglang:num_requests_total{model_name="m",is_stream="true"} 2.0
sglang:generation_tokens_total{model_name="m",note="a } inside"} 1234.0 1700000000
sglang:num_requests_created 1.7e9
"""


def test_counters_are_summed_over_label_sets_and_other_metrics_are_ignored() -> None:
    assert prometheus_sums(SGLANG_TEXT, SGLANG_METRICS) == {SGLANG_METRICS[0]: 32.0, SGLANG_METRICS[1]: 1234.0}
    assert prometheus_sums("vllm:request_success_total 5\n", VLLM_METRICS) == {VLLM_METRICS[0]: 5.0}
    assert prometheus_sums("garbage line\nsglang:num_requests_total NaNx\n", SGLANG_METRICS) == {}


@pytest.fixture
def server() -> Iterator[dict[str, bytes]]:
    """A local HTTP server answering the given bodies per path (404 elsewhere)."""
    pages: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    pages["url"] = f"http://127.0.0.1:{httpd.server_address[1]}".encode()
    yield pages
    httpd.shutdown()


def test_readers_against_a_real_http_server(server: dict[str, bytes]) -> None:
    url = server.pop("url").decode()
    assert metrics_reader(*SGLANG_METRICS)(url) is None and any_counters(url) is None  # nothing exposed yet
    server["/metrics"] = SGLANG_TEXT.encode()
    assert metrics_reader(*SGLANG_METRICS)(url) == Counters(32, 1234)
    assert metrics_reader(*VLLM_METRICS)(url) is None  # another engine's names: not this server's counters
    assert any_counters(url) == Counters(32, 1234)
    server["/health"] = b'{"stats": {"requests_served": 7, "generated_tokens": 70}}'
    assert any_counters(url) == Counters(7, 70)  # the harness server's own counters come first


def test_what_a_server_did_over_a_run_is_read_before_it_stops(server: dict[str, bytes]) -> None:
    """Kept with each run's results: did a vLLM stress arm preempt and hit its prefix cache at all."""
    from harness.servers.registry import get_server_kind

    url = server.pop("url").decode()
    vllm, harness = get_server_kind("vllm"), get_server_kind("harness")
    assert vllm.stats(url) == {} and harness.stats(url) == {}  # nothing exposed: nothing claimed
    server["/metrics"] = (
        b'vllm:num_preemptions_total{engine="0"} 4.0\nvllm:prefix_cache_hits_total{engine="0"} 1120\n'
        b'vllm:request_success_total{finished_reason="length"} 16\n'
        b'vllm:request_success_total{finished_reason="stop"} 2\n'
    )
    assert vllm.stats(url) == {"preemptions": 4, "prefix_cache_hit_tokens": 1120, "requests": 18}
    server["/health"] = b'{"stats": {"forward_paths": {"tape": 3}}}'
    assert harness.stats(url) == {"forward_paths": {"tape": 3}}


def test_every_server_kind_reports_its_prefix_cache_under_the_same_names(server: dict[str, bytes]) -> None:
    """Prompt tokens asked and tokens served from the prefix cache, per run: vLLM's names, SGLang's counters and the
    harness server's /health mapped onto them, so the report can put the arms side by side."""
    from harness.servers.base import PREFIX_CACHE_STATS
    from harness.servers.registry import get_server_kind

    url = server.pop("url").decode()
    sglang, harness, vllm = (get_server_kind(name) for name in ("sglang", "harness", "vllm"))
    server["/metrics"] = (
        b'sglang:prompt_tokens_total{model_name="m"} 4300.0\nsglang:cached_tokens_total{model_name="m"} 3610.0\n'
        b'sglang:num_requests_total{model_name="m"} 20.0\n'
        b'vllm:prefix_cache_queries_total{engine="0"} 4300\nvllm:prefix_cache_hits_total{engine="0"} 3610\n'
    )
    server["/health"] = (
        b'{"stats": {"requests_served": 20}, "pools": {"prefix_cache": {"enabled": true, "tokens": 900, '
        b'"swa_tokens": 120, "prompt_tokens": 4300, "cached_tokens": 3610, "hit_rate": 0.8395}}}'
    )
    for kind in (sglang, harness, vllm):
        found = kind.stats(url)
        assert {name: found.get(name) for name in PREFIX_CACHE_STATS} == {
            "prefix_cache_query_tokens": 4300,
            "prefix_cache_hit_tokens": 3610,
        }, (kind.name, found)
    assert sglang.stats(url)["requests"] == 20
    assert harness.stats(url)["prefix_cache_tokens_held"] == 900


def test_evictions_and_what_the_sliding_window_pool_can_free_are_kept_per_run(server: dict[str, bytes]) -> None:
    """Did a pressure arm evict at all: SGLang's eviction counter and the SWA tokens its tree could free (a gauge, as
    the run ended); vLLM's count of block lifetimes (``--kv-cache-metrics``), which is how many blocks it handed out
    again. A histogram's buckets and sum are not the count."""
    from harness.servers.registry import get_server_kind

    url = server.pop("url").decode()
    sglang, vllm = get_server_kind("sglang"), get_server_kind("vllm")
    server["/metrics"] = (
        b'sglang:evicted_tokens_total{model_name="m"} 512.0\nsglang:swa_evictable_tokens{model_name="m"} 96.0\n'
        b'vllm:kv_block_lifetime_seconds_bucket{engine="0",le="1.0"} 3\n'
        b'vllm:kv_block_lifetime_seconds_sum{engine="0"} 7.5\nvllm:kv_block_lifetime_seconds_count{engine="0"} 41\n'
    )
    assert sglang.stats(url) == {"prefix_cache_evicted_tokens": 512, "prefix_cache_swa_evictable_tokens": 96}
    assert vllm.stats(url) == {"kv_blocks_reallocated": 41}


def test_every_vllm_launch_asks_for_the_block_lifetimes_its_eviction_count_reads() -> None:
    from harness.servers.base import ServerSpec
    from harness.servers.registry import get_server_kind

    argv = get_server_kind("vllm").command(ServerSpec(model="m", served_name="m", port=1, graphs="off")).argv
    at = argv.index("--kv-cache-metrics-sample")
    assert "--kv-cache-metrics" in argv and argv[at + 1] == "1.0"


def test_cache_counters_read_each_servers_names_and_a_difference_counts_a_new_counter_from_zero(
    server: dict[str, bytes],
) -> None:
    url = server.pop("url").decode()
    names = {"query_tokens": "q_total", "hit_tokens": "h_total", "evicted": "e_total"}
    server["/metrics"] = b'q_total{m="a"} 10\nh_total{m="a"} 4\n'
    before = cache_counters(url, names)
    server["/metrics"] = b'q_total{m="a"} 30\nh_total{m="a"} 9\ne_total{m="a"} 64\n'
    after = cache_counters(url, names)
    assert before == CacheCounters(10, 4, None, None, None)
    assert after - before == CacheCounters(20, 5, 64, None, None)  # e_total appeared at its first eviction
    assert (after - before).pressure_missing() == ["swa_evicted (none reported)", "tombstoned (none reported)"]
    assert cache_counters("http://127.0.0.1:9", names) is None  # nothing listens: no reading, not zeros


def test_vllm_kv_events_count_full_sliding_and_tombstoned_evictions() -> None:
    """Group 0 slides, group 1 is full (Gemma2's order): a sliding block removed while its full block stays is a
    tombstone; one removed after its full block went is an SWA eviction only; a flush is no eviction."""
    records = [
        ("stored", 0, ["a", "b"]),
        ("stored", 1, ["a", "b"]),
        ("removed", 0, ["a"]),  # tombstone: full "a" still cached
        ("removed", 1, ["b"]),  # full eviction
        ("removed", 0, ["b"]),  # sliding eviction, its full KV already gone
        ("cleared", 0, []),
    ]
    assert tally(records, ["sliding", "full"], 32) == Evictions(evicted=32, swa_evicted=64, tombstoned=32)


def test_vllm_kv_events_count_a_hash_held_by_two_blocks_until_both_go() -> None:
    """vLLM caches a block per request that computed it (no de-duplication): one of two full blocks with hash "a"
    evicted leaves "a"'s full KV cached, so its sliding block's eviction after that is still a tombstone (a set of
    hashes forgot "a" at the first removal and counted none)."""
    records = [
        ("stored", 1, ["a"]),
        ("stored", 1, ["a"]),  # a second request computed the same block
        ("stored", 0, ["a"]),
        ("removed", 1, ["a"]),  # one full copy gone, one left
        ("removed", 0, ["a"]),  # tombstone
        ("removed", 1, ["a"]),
    ]
    assert tally(records, ["sliding", "full"], 32) == Evictions(evicted=64, swa_evicted=32, tombstoned=32)


def test_vllm_kv_cache_groups_follow_the_checkpoints_layer_types(tmp_path) -> None:
    import json

    def kinds(layer_types: list[str]) -> list[str]:
        (tmp_path / "config.json").write_text(json.dumps({"layer_types": layer_types, "num_hidden_layers": 0}))
        return group_kinds(tmp_path)

    s, f = "sliding_attention", "full_attention"
    assert kinds([s, f, s, f]) == ["sliding", "full"]  # Gemma2: the first layer slides
    assert kinds([s] * 5 + [f]) == ["sliding"] * 5 + ["full"]  # Gemma3: 5:1, a group per sliding layer's turn
    assert kinds([f] * 4) == ["full"]
