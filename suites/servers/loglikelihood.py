"""lm-eval's loglikelihood path against any OpenAI-compatible server, held to transformers.

lm-eval's ``local-completions`` scores a multiple-choice item by sending the context and each choice as one prompt with
``echo: true, max_tokens: 0, logprobs: 1`` and summing the echoed logprobs of the choice's tokens; ``is_greedy`` comes
from the top logprob at each of them. Every server (the harness's, SGLang's, vLLM's) is held here to the same checks:
each loglikelihood lm-eval records is transformers' sum over the same token ids within ``tol``, each ``is_greedy``
transformers' argmax, and the task's accuracy the one transformers' loglikelihoods give. A server that does not echo
prompt logprobs cannot be judged: one request shaped as lm-eval's (``echo_problem``) finds that first, and the check
ends in NO VERDICT naming what the server returned (``NoVerdict``; a server test fails in the one line
``NO VERDICT: ...``, which the kill matrix reads as no verdict, never as a kill). It never passes on an accuracy alone.

A server's test is ``check_lm_eval_loglikelihoods``: lm-eval offline, skipped where lm-eval or tenacity (its
``local-completions`` client) is not installed, the check, and its line printed."""

from __future__ import annotations

import functools
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.paths import REPO
from suites.servers.cache_hits import NoVerdict

TASK = "swa_choice_style"  # suites/accuracy/choice_style.yaml: 12 items, four choices each
ITEMS = 12
PROBE = "Question: What is 2 + 3?\nAnswer:"  # the one request that asks a server whether it echoes prompt logprobs
# What lm-eval 0.4's local-completions asks for a loglikelihood (LocalCompletionsAPI._create_payload, generate=False):
# the prompt echoed with its logprobs and one token generated, whose logprob it drops.
ECHO_REQUEST = {"temperature": 0, "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True}
NEEDS = {
    "lm_eval": "lm-eval is not installed (pip install 'lm-eval[api]')",
    "tenacity": "lm-eval's local-completions needs tenacity (pip install 'lm-eval[api]')",
}


class Oracle:
    """transformers on the checkpoint (eager attention, fp32, one sequence at a time): its tokenizer and, per token
    of a sequence, the log-softmax (float64) of the logits before it."""

    def __init__(self, ckpt: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(ckpt)
        self.model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
        self.model.eval()
        self._logp = functools.lru_cache(maxsize=256)(self._forward)

    def ids(self, text: str) -> list[int]:
        return self.tokenizer(text).input_ids  # with its BOS, as a server encodes a text prompt

    @torch.inference_mode()
    def _forward(self, ids: tuple[int, ...]) -> torch.Tensor:
        return torch.log_softmax(self.model(torch.tensor([ids])).logits[0].double(), -1)

    def token_logprobs(self, ids: list[int]) -> list[float]:
        """``logprob(ids[k] | ids[:k])`` for k = 1.. (the first token has none)."""
        logp = self._logp(tuple(ids))
        return logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].tolist()

    def greedy(self, ids: list[int], start: int) -> bool:
        """Whether every token from ``start`` on is the argmax after the tokens before it."""
        return self._logp(tuple(ids))[start - 1 : -1].argmax(-1).tolist() == ids[start:]


@dataclass(frozen=True)
class LoglikelihoodReport:
    """What the check read: items scored, lm-eval's accuracy, the worst |loglikelihood - transformers'| over every
    choice, and how many choices lm-eval scored."""

    items: int
    choices: int
    accuracy: float
    worst: float

    def line(self, server: str) -> str:
        return (
            f"{server}: lm-eval {TASK} over {self.items} items ({self.choices} choices): accuracy {self.accuracy:.3f}"
            f" = transformers'; worst |loglikelihood - transformers'| {self.worst:.3g}"
        )


def echo_problem(base_url: str, model: str, timeout: float = 120.0) -> str | None:
    """Why the server at ``base_url`` cannot serve lm-eval's loglikelihood requests, in one line, or None where it
    can: ``PROBE`` sent as lm-eval sends a context (``ECHO_REQUEST``) must come back with a logprob and a top-1 entry
    for each prompt token besides the one generated. A refusal (HTTP 4xx) is such a reason; a server that does not
    answer raises, as any request of a test would."""
    body = json.dumps({"model": model, "prompt": PROBE, **ECHO_REQUEST}).encode()
    ask = urllib.request.Request(
        f"{base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    what = f"{base_url} on lm-eval's loglikelihood request (echo, logprobs 1, max_tokens 1)"
    try:
        with urllib.request.urlopen(ask, timeout=timeout) as resp:
            answer = json.loads(resp.read().decode())
    except urllib.error.HTTPError as error:
        if error.code >= 500:
            raise
        said = " ".join(error.read().decode(errors="replace").split())[:300]
        return f"{what} answered HTTP {error.code}: {said}"
    try:
        logprobs = answer["choices"][0]["logprobs"]
    except (KeyError, IndexError, TypeError):
        return f"{what} returned no choice with logprobs: {json.dumps(answer)[:300]}"
    if not isinstance(logprobs, dict):
        return f"{what} returned logprobs {json.dumps(logprobs)[:200]}, not prompt logprobs"
    tokens, tops = logprobs.get("token_logprobs"), logprobs.get("top_logprobs")
    if not isinstance(tokens, list) or len(tokens) < 2:
        return (
            f"{what} did not echo the prompt's logprobs: token_logprobs {json.dumps(tokens)[:200]} "
            "(lm-eval would sum an empty list: every loglikelihood 0)"
        )
    if not isinstance(tops, list) or len(tops) != len(tokens) or not all(isinstance(t, dict) and t for t in tops[1:]):
        return f"{what} echoed {len(tokens)} token logprobs without a top-1 entry for each: {json.dumps(tops)[:200]}"
    return None


def hold_loglikelihood(
    base_url: str, model: str, ckpt: Path, oracle: Oracle | None, tol: float, context: int = 512
) -> LoglikelihoodReport:
    """lm-eval 0.4's ``local-completions`` (token-id prompts, four per request) on ``TASK`` against the server at
    ``base_url``; NoVerdict where it does not echo prompt logprobs (``echo_problem``, asked before anything is
    loaded); AssertionError naming the item where a loglikelihood, an is_greedy or the accuracy is not transformers'.
    ``oracle``: transformers on ``ckpt``, built here when None. The caller keeps lm-eval offline
    (``HF_DATASETS_OFFLINE``, ``HF_HUB_OFFLINE``)."""
    if (problem := echo_problem(base_url, model)) is not None:
        raise NoVerdict(problem)
    oracle = oracle if oracle is not None else Oracle(ckpt)
    from lm_eval import simple_evaluate
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from lm_eval.tasks import TaskManager

    lm = LocalCompletionsAPI(
        base_url=f"{base_url}/v1/completions",
        model=model,
        tokenizer=str(ckpt),
        tokenizer_backend="huggingface",
        add_bos_token=True,
        max_length=context,
        batch_size=4,
        max_retries=1,
    )
    tasks = TaskManager(include_path=str(REPO / "suites" / "accuracy"), include_defaults=False)
    out = simple_evaluate(model=lm, tasks=[TASK], task_manager=tasks, bootstrap_iters=0)
    samples = out["samples"][TASK]
    assert len(samples) == ITEMS, f"lm-eval scored {len(samples)} of {ITEMS} {TASK} items"

    worst, correct, choices = 0.0, [], 0
    for sample in samples:
        recorded = [resp[0] for resp in sample["resps"]]  # (loglikelihood, is_greedy) per choice
        want = _transformers_scores(sample["arguments"], lm._encode_pair, oracle)
        assert [g for _, g in recorded] == [g for _, g in want], (sample["doc"], recorded, want)
        worst = max(worst, max(abs(r - w) for (r, _), (w, _) in zip(recorded, want)))
        correct.append(max(range(len(want)), key=lambda i: want[i][0]) == sample["target"])
        choices += len(want)
    assert worst <= tol, f"lm-eval's loglikelihoods from {base_url} differ from transformers' by up to {worst:.3g}"
    accuracy = out["results"][TASK]["acc,none"]
    assert accuracy == sum(correct) / len(correct), (accuracy, correct)
    return LoglikelihoodReport(len(samples), choices, accuracy, worst)


def check_lm_eval_loglikelihoods(
    base_url: str,
    model: str,
    ckpt: Path,
    tol: float,
    monkeypatch: pytest.MonkeyPatch,
    *,
    server: str,
    oracle: Oracle | None = None,
    context: int = 512,
) -> LoglikelihoodReport:
    """A server test's whole loglikelihood check (``hold_loglikelihood``): skipped where lm-eval or tenacity is not
    installed, lm-eval kept offline, NO VERDICT in one line where the server does not echo prompt logprobs, and the
    report's line printed under ``server``'s name."""
    for module, why in NEEDS.items():
        pytest.importorskip(module, reason=why)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        report = hold_loglikelihood(base_url, model, ckpt, oracle, tol, context)
    except NoVerdict as exc:
        pytest.fail(f"NO VERDICT: {exc}", pytrace=False)
    print(report.line(server))
    return report


def _transformers_scores(
    arguments: Any, encode_pair: Callable[[str, str], tuple[list[int], list[int]]], oracle: Oracle
) -> list[tuple[float, bool]]:
    """transformers' (loglikelihood, is_greedy) per choice, on the token ids lm-eval sent, as it split them."""
    want = []
    for args in arguments:
        context, continuation = _pair(args)
        ctx_ids, cont_ids = encode_pair(context, continuation)
        ids = ctx_ids + cont_ids
        want.append((sum(oracle.token_logprobs(ids)[len(ctx_ids) - 1 :]), oracle.greedy(ids, len(ctx_ids))))
    return want


def _pair(args: Any) -> tuple[str, str]:
    """A logged request's (context, continuation), however lm-eval's version lays out its arguments."""
    if isinstance(args, dict):
        args = [args[k] for k in sorted(args)]
    context, continuation = args[:2]
    return context, continuation
