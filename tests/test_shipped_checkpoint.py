"""The shipped tiny hybrid-SWA checkpoints load offline with transformers and still answer.

Items are taken from each checkpoint's own ``eval_results.json`` (the per-item results behind
the model card's accuracy table): the first few test items the card records as correct must
still be answered correctly by greedy decoding with the KV cache.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never touch the hub

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fixtures.data.extract import extract_answer  # noqa: E402
from fixtures.data.jsonl import read_jsonl  # noqa: E402
from fixtures.data.problem import AIME_TASK, GSM_TASK, gold_answer  # noqa: E402
from fixtures.data.prompts import build_fewshot_prompt, select_fewshot, spec, truncate_at_stop  # noqa: E402
from fixtures.models.evaluate import AttentionOverride, generate, load_model  # noqa: E402

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
# name -> (model_type, layer_types): the layouts the model cards describe.
SHIPPED = {
    "gemma2-tiny-swa": ("gemma2", ["sliding_attention", "full_attention"] * 2),
    "gemma3-tiny-swa": ("gemma3_text", ["sliding_attention"] * 5 + ["full_attention"]),
    "mellum-tiny-swa": ("mellum", ["sliding_attention", "full_attention"] * 2),
}
GEMMA = ("gemma2", "gemma3_text")  # soft-capped and tied; Mellum has neither (SGLang's Mellum reads lm_head.weight)
ITEMS_PER_TASK = {GSM_TASK: 5, AIME_TASK: 3}


@pytest.fixture(scope="module", params=sorted(SHIPPED))
def shipped(request):
    # One thread, as conftest.py sets for every test process: this fixture used to set 2, for the rest of its xdist
    # worker's tests too, and 2 threads per worker on 2 cores ran this module alone 4x slower (docs/BENCHMARKS.md).
    model, tokenizer = load_model(MODELS / request.param)
    return request.param, model, tokenizer


def _card_correct_items(name: str, task: str) -> list[int]:
    results = json.loads((MODELS / name / "eval_results.json").read_text())
    items = results["tasks"][task]["items"]
    return [it["index"] for it in items if it["correct"]][: ITEMS_PER_TASK[task]]


def test_checkpoint_layout_is_hybrid_swa(shipped) -> None:
    name, model, tokenizer = shipped
    cfg = model.config
    assert (cfg.model_type, list(cfg.layer_types)) == SHIPPED[name]
    assert cfg.sliding_window == 16 < 100
    if cfg.model_type in GEMMA:
        assert cfg.attn_logit_softcapping and cfg.final_logit_softcapping
        assert cfg.tie_word_embeddings
    else:
        assert not cfg.tie_word_embeddings and set(cfg.mlp_layer_types) == {"dense"}
    assert model.config._attn_implementation == "eager"
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    size = sum(f.stat().st_size for f in (MODELS / name).iterdir() if f.is_file())
    assert size <= 10 * 2**20


@pytest.mark.parametrize("task", [GSM_TASK, AIME_TASK])
def test_greedy_answers_match_the_model_card(shipped, task: str) -> None:
    name, model, tokenizer = shipped
    s = spec(task)
    indices = _card_correct_items(name, task)
    assert len(indices) == ITEMS_PER_TASK[task]
    docs, pool = read_jsonl(s.test_path), read_jsonl(s.fewshot_path)
    prompts = [build_fewshot_prompt(task, docs[i], select_fewshot(pool, s.num_fewshot)) for i in indices]
    outputs = generate(model, tokenizer, prompts, s.max_gen_toks, s.until, batch_size=len(prompts))
    for i, out in zip(indices, outputs):
        text = truncate_at_stop(task, out)
        assert extract_answer(task, text) == gold_answer(task, docs[i]), (i, text)


def test_sliding_window_is_in_effect(shipped) -> None:
    """Same weights with the window wider than the prompt (every layer attends to everything, each keeping its own
    RoPE, which Mellum and Gemma 3 choose per layer type) must give different logits on a long prompt."""
    name, model, tokenizer = shipped
    s = spec(AIME_TASK)
    doc, pool = read_jsonl(s.test_path)[0], read_jsonl(s.fewshot_path)
    ids = tokenizer(build_fewshot_prompt(AIME_TASK, doc, pool[:1]), return_tensors="pt")["input_ids"]
    assert ids.shape[1] > 10 * model.config.sliding_window
    full, _ = load_model(MODELS / name, AttentionOverride("no window", sliding_window=ids.shape[1] + 1))
    with torch.no_grad():
        swa_logits = model(ids).logits
        full_logits = full(ids).logits
    window = model.config.sliding_window
    assert torch.allclose(swa_logits[:, :window], full_logits[:, :window], atol=1e-5)  # identical inside the window
    assert (swa_logits[:, -1] - full_logits[:, -1]).abs().max() > 1e-2  # and not beyond it


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_model_card_is_rendered_from_the_shipped_measurements(name, monkeypatch) -> None:
    """Every number in a model card comes from the JSON beside it: re-rendering changes nothing."""
    from fixtures.models.card import render

    monkeypatch.chdir(MODELS.parents[1])  # the card names its folder relative to the repo root
    card = (MODELS / name / "README.md").read_text(encoding="utf-8")
    assert render(Path("fixtures/models") / name) == card, (
        f"{name}/README.md is stale: run python -m fixtures.models.card"
    )
