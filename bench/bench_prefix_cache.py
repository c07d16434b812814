"""The prefix cache on the main job's prompts: hit rate, wall time and agreement, cache on vs off side by side.

Two workloads on the shipped checkpoint (graphs on: the CPU tape), each through an engine with the prefix cache on
and one with it off, in one process and interleaved per repeat:
* **main job**: every GSM-style and AIME-style prompt exactly as lm-eval sends it (few-shot, greedy, the tasks'
  stop strings and token limits), 32 at a time as the main job's client sends them;
* **second turn**: each GSM-style conversation continued (its prompt, its answer, a new question), sent after the
  first turns finished, as a chat client would.
Agreement is byte-identical responses; a response that differs is counted (and would be a finding).

    python -m bench.bench_prefix_cache [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from bench.common import markdown_table, write_section
from fixtures.data.prompts import build_fewshot_prompt, select_fewshot, spec
from harness.engine import Engine, EngineConfig, SamplingParams
from harness.paths import REPO

CHECKPOINT = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
TASKS = ("gsm_style", "aime_style")


def _docs(task: str, split: str) -> list[dict[str, str]]:
    path = REPO / "fixtures" / "data" / task / f"{split}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main_job_requests() -> list[tuple[str, SamplingParams]]:
    requests = []
    for task in TASKS:
        s, pool = spec(task), _docs(task, "fewshot")
        params = SamplingParams(max_new_tokens=s.max_gen_toks, stop=s.until)
        requests += [
            (build_fewshot_prompt(task, doc, select_fewshot(pool, s.num_fewshot)), params)
            for doc in _docs(task, "test")
        ]
    return requests


def run(engine: Engine, requests: list[tuple[str, SamplingParams]], batch: int = 32) -> tuple[list[str], float]:
    """Send ``batch`` requests at a time (the main job's client), wait for each batch; texts and wall seconds."""
    texts, start = [], time.perf_counter()
    for i in range(0, len(requests), batch):
        chunk = requests[i : i + batch]
        texts += [o.text for o in engine.generate([p for p, _ in chunk], [s for _, s in chunk])]
    return texts, time.perf_counter() - start


def second_turns(first: list[tuple[str, SamplingParams]], answers: list[str]) -> list[tuple[str, SamplingParams]]:
    follow = _docs("gsm_style", "test")  # the GSM-style prompts come first (TASKS)
    gsm = [(p, s, a) for (p, s), a in zip(first[: len(follow)], answers)]
    return [
        (p + " " + a + "\n\nQuestion: " + follow[(i + 1) % len(follow)]["question"] + "\nAnswer:", s)
        for i, (p, s, a) in enumerate(gsm)
    ]


def measure(repeats: int) -> dict[str, dict[str, list]]:
    results: dict[str, dict[str, list]] = {}
    first = main_job_requests()
    for _ in range(repeats):
        for cache in (True, False):  # interleaved: one engine of each per repeat
            engine = Engine(
                EngineConfig(
                    model_path=CHECKPOINT, graphs="tape", max_running_requests=32, num_threads=1, prefix_cache=cache
                )
            )
            answers, wall = run(engine, first)
            after_first = engine.cache_stats()
            turns, wall2 = run(engine, second_turns(first, answers))
            stats = engine.cache_stats()
            row = results.setdefault("on" if cache else "off", {"first": [], "second": [], "texts": [], "hits": []})
            row["first"].append(wall)
            row["second"].append(wall2)
            row["texts"].append((answers, turns))
            row["hits"].append(
                (
                    after_first.cached_tokens,
                    after_first.prompt_tokens,
                    stats.cached_tokens - after_first.cached_tokens,
                    stats.prompt_tokens - after_first.prompt_tokens,
                )
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = measure(args.repeats)
    on, off = results["on"], results["off"]
    same_first = sum(a == b for a, b in zip(on["texts"][0][0], off["texts"][0][0]))
    same_second = sum(a == b for a, b in zip(on["texts"][0][1], off["texts"][0][1]))
    n_first, n_second = len(on["texts"][0][0]), len(on["texts"][0][1])
    rows = []
    for workload, key, hit_at, n, same in (
        ("main job (700 prompts)", "first", 0, n_first, same_first),
        ("second turn (500 prompts)", "second", 2, n_second, same_second),
    ):
        cached, prompt = on["hits"][0][hit_at], on["hits"][0][hit_at + 1]
        m_on, m_off = statistics.median(on[key]), statistics.median(off[key])
        rows.append(
            [
                workload,
                f"{cached} / {prompt} ({100 * cached / prompt:.1f} %)",
                f"{m_on:.1f}",
                f"{m_off:.1f}",
                f"{m_off / m_on:.2f}x",
                f"{same} / {n}",
            ]
        )
    table = markdown_table(
        [
            "workload",
            "prompt tokens from the cache",
            "cache on s (median)",
            "cache off s (median)",
            "off / on",
            "identical responses",
        ],
        rows,
    )
    print(table)
    write_section(
        "prefix-cache",
        "The prefix cache on the main job's prompts: hit rate, wall time, agreement (CPU)",
        "python -m bench.bench_prefix_cache" + ("" if args.repeats == 3 else f" --repeats {args.repeats}"),
        f"The shipped `gemma2-tiny-swa` (window 16), graphs on (tape), 32 requests at a time; cache on and off "
        f"interleaved, {args.repeats} repeats, medians.\n\n{table}\n\n"
        "A hit must end where the last 15 tokens still hold live SWA KV. The main job's prompts share their few-shot "
        "exemplars (166 of about 215 tokens for GSM-style); a finished request keeps live SWA KV only for its last "
        "window, but the step's prefill budget (1024 tokens) splits the 32 prompts of a batch into partial chunks, and "
        "each unfinished chunk is checkpointed with a live window wherever it ended, inside the shared exemplars too. "
        "From the second batch on, a prompt matches up to the point where it leaves the exemplars (the first batch of "
        "32 is admitted before anything is cached). A second turn continues a finished conversation where its live "
        "window ends. Identical responses: the same text, byte for byte, cache on and off.",
    )


if __name__ == "__main__":
    main()
