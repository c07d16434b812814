"""The two oracles every real server is held to, and the one comparison of a server's answers with them.

transformers (eager attention, fp32, one prompt at a time) gives the greedy continuation of each prompt and, per
generated token, the top logprobs of the full softmax; the harness engine gives its greedy continuation. A server is
asked the same prompts at once by one client per prompt, greedy, with ``ignore_eos`` and its top logprobs, and
``agreement`` says how many answers differ from transformers' and by how much the worst logprob does. Engines differ
only in what they add to a request (``extra``) and in how their logprob dicts are keyed, which ``Top`` forgets: a
step's top logprobs are compared as sorted values, so two tokens that decode to one string cannot hide each other.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.evals.results import TokenLogprobs
from harness.servers.base import ServerKind, ServerSpec
from harness.servers.lifecycle import ServerProcess, ServerTransportError, last_error

TOP = 5
Top = list[list[float]]  # per generated token, its top-TOP logprobs, largest first
# vLLM keys top_logprobs by decoded text; two tokens decoding alike would collide, token ids never do.
VLLM_BY_ID = {"return_tokens_as_token_ids": True}


def lm_eval_prompts(per_task: int) -> list[str]:
    """The contexts lm-eval sends for the first ``per_task`` items of each frozen task (first_n few-shot exemplars):
    what the shipped checkpoints were trained on, 200-230 tokens each, one shared few-shot prefix per task."""
    from fixtures.data.jsonl import read_jsonl
    from fixtures.data.problem import AIME_TASK, GSM_TASK
    from fixtures.data.prompts import build_fewshot_prompt, select_fewshot, spec

    found = []
    for task in (GSM_TASK, AIME_TASK):
        s = spec(task)
        shots = select_fewshot(read_jsonl(s.fewshot_path), s.num_fewshot)
        found += [build_fewshot_prompt(task, doc, shots) for doc in read_jsonl(s.test_path)[:per_task]]
    return found


@dataclass(frozen=True)
class Reference:
    """transformers' greedy answers and their top logprobs, per prompt."""

    answers: list[str]
    tops: list[Top]


@dataclass(frozen=True)
class Agreement:
    """One server against transformers on one prompt set."""

    n: int
    wrong: list[tuple[int, str, str]]  # (prompt index, served, transformers') for every answer that differs
    worst: float  # the largest |Δlogprob| over every generated token's top-TOP
    where: tuple[int, int] | None  # (prompt index, token) of the worst

    @property
    def equal(self) -> int:
        return self.n - len(self.wrong)


@contextmanager
def running(engine: ServerKind, spec: ServerSpec, log: Path, timeout: float) -> Iterator[ServerProcess]:
    """A server for one test: started as ``swa-harness eval`` starts it, then stopped with its whole process group."""
    server = engine.start(spec, log_path=log, timeout=timeout)
    try:
        yield server
    finally:
        code = server.stop()
        assert not server.alive(), f"the {engine.name} server (exit {code}) outlived its stop"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def transformers_reference(ckpt: Path, prompts: Sequence[str], new_tokens: int, top: int = TOP) -> Reference:
    """Greedy, fixed length (no EOS), eager attention in fp32: the slowest and plainest path there is."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))  # its own encode and decode, as the servers' tokenizers
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager").eval()
    model.generation_config.eos_token_id = None  # fixed-length greedy runs, as the servers are asked (ignore_eos)
    answers, tops = [], []
    for prompt in prompts:
        ids = torch.tensor([tok.encode(prompt).ids])
        with torch.no_grad():
            out = model.generate(
                ids, max_new_tokens=new_tokens, do_sample=False, output_logits=True, return_dict_in_generate=True
            )
        answers.append(tok.decode(out.sequences[0, ids.shape[1] :].tolist()))
        tops.append([torch.log_softmax(step[0].double(), -1).topk(top).values.tolist() for step in out.logits])
    return Reference(answers, tops)


def harness_reference(ckpt: Path, prompts: Sequence[str], new_tokens: int, top: int = TOP) -> Reference:
    """The harness engine's greedy answers and top logprobs (tape graphs, all prompts in one running batch)."""
    import torch

    from harness.engine import Engine, EngineConfig, SamplingParams

    engine = Engine(EngineConfig(model_path=ckpt, graphs="tape", max_running_requests=len(prompts), num_threads=1))
    greedy = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    reqs = [engine.add_request(p, greedy, return_logits=True) for p in prompts]
    by_rid = {o.rid: o for o in engine.run_until_done()}
    outs = [by_rid[r.rid] for r in reqs]
    return Reference(
        [o.text for o in outs], [torch.log_softmax(o.logits.double(), -1).topk(top).values.tolist() for o in outs]
    )


@dataclass(frozen=True)
class Served:
    """One completion as served: the answer, its top logprobs, and the prompt tokens the server says its prefix cache
    served (``usage.prompt_tokens_details.cached_tokens``; None where it does not say)."""

    text: str
    tops: Top
    prompt_tokens: int
    cached_tokens: int | None
    logprobs: TokenLogprobs | None = None  # per generated token: its text, logprob and top list (for KL)


def ask(
    server: ServerProcess,
    served: str,
    prompt: str,
    new_tokens: int,
    top: int = TOP,
    extra: Mapping[str, Any] | None = None,
    timeout: float = 600.0,
) -> Served:
    """One greedy, fixed-length completion with its top logprobs (largest first) and its usage. A request that gets no
    answer (an HTTP error: the body sent here is always valid; a dropped connection; ``timeout`` seconds of silence)
    raises ``ServerTransportError`` naming the server's last logged error: no verdict, never an assertion."""
    body = json.dumps(
        {
            "model": served,
            "prompt": prompt,
            "max_tokens": new_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "logprobs": top,
            **(extra or {}),
        }
    ).encode()
    request = urllib.request.Request(server.completions_url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        said = exc.read()[:300].decode(errors="replace")
        raise ServerTransportError("refused", f"the server refused a request: HTTP {exc.code} {said}{_log(server)}")
    except (OSError, http.client.HTTPException) as exc:  # urllib wraps a timeout while connecting in a URLError
        if isinstance(getattr(exc, "reason", exc), TimeoutError):
            raise ServerTransportError("timeout", f"the server gave no answer in {timeout:g} s{_log(server)}") from None
        said = f"{type(exc).__name__}: {exc}"
        raise ServerTransportError("dropped", f"the server dropped a request ({said}){_log(server)}") from None
    choice, usage = answer["choices"][0], answer.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    try:
        tokens = TokenLogprobs.from_openai(choice["logprobs"])
    except (KeyError, TypeError, ValueError):  # a server without per-token lists: the KL check says NO VERDICT
        tokens = None
    return Served(
        choice["text"],
        [sorted(t.values(), reverse=True) for t in choice["logprobs"]["top_logprobs"]],
        int(usage.get("prompt_tokens", 0)),
        cached if isinstance(cached, int) else None,
        tokens,
    )


def _log(server: ServerProcess) -> str:
    """What the server's log says last went wrong, for a request it did not answer."""
    return f"; its log's last error{last_error(server.log_path) or ': (none)'}"


def serve_all(
    server: ServerProcess, served: str, prompts: Sequence[str], new_tokens: int, extra: Mapping[str, Any] | None = None
) -> list[tuple[str, Top]]:
    """Every prompt at once, one client each."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        return [(s.text, s.tops) for s in pool.map(lambda p: ask(server, served, p, new_tokens, extra=extra), prompts)]


def agreement(served: Sequence[tuple[str, Top]], reference: Reference, top: int = TOP) -> Agreement:
    """How the served answers and logprobs stand against transformers'."""
    wrong = [(i, s, t) for i, ((s, _), t) in enumerate(zip(served, reference.answers)) if s.strip() != t.strip()]
    worst, where = 0.0, None
    for i, ((_, tops), expected) in enumerate(zip(served, reference.tops)):
        if len(tops) != len(expected) or any(len(t) != top for t in tops):
            raise AssertionError(
                f"request #{i}: {len(tops)} tokens of logprobs, expected {len(expected)} of {top} each"
            )
        for step, (got, want) in enumerate(zip(tops, expected)):
            delta = max(abs(g - w) for g, w in zip(got, want))
            if delta > worst:
                worst, where = delta, (i, step)
    return Agreement(len(served), wrong, worst, where)


def assert_agrees(found: Agreement, tol: float, engine: str) -> None:
    """Every answer transformers', every top logprob within ``tol``."""
    if found.wrong:
        i, got, want = found.wrong[0]
        raise AssertionError(
            f"{len(found.wrong)}/{found.n} {engine} answers differ from transformers, e.g. #{i}: {got!r} vs {want!r}"
        )
    assert found.worst <= tol, (
        f"{engine}'s top-{TOP} logprobs differ from transformers' by {found.worst:.3g} nats "
        f"(> {tol}) at request #{found.where[0]}, token {found.where[1]}"
    )
