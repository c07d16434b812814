"""The shipped tiny hybrid-SWA checkpoint loads offline with transformers and still answers.

Items are taken from the checkpoint's own ``eval_results.json`` (the per-item results behind
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

CHECKPOINT = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "gemma2-tiny-swa"
ITEMS_PER_TASK = {GSM_TASK: 5, AIME_TASK: 3}

pytestmark = pytest.mark.skipif(not (CHECKPOINT / "model.safetensors").exists(), reason="checkpoint not shipped")


@pytest.fixture(scope="module")
def model_and_tokenizer():
    torch.set_num_threads(2)
    return load_model(CHECKPOINT)


def _card_correct_items(task: str) -> list[int]:
    results = json.loads((CHECKPOINT / "eval_results.json").read_text())
    items = results["tasks"][task]["items"]
    return [it["index"] for it in items if it["correct"]][: ITEMS_PER_TASK[task]]


def test_checkpoint_layout_is_hybrid_swa(model_and_tokenizer) -> None:
    model, tokenizer = model_and_tokenizer
    cfg = model.config
    assert cfg.model_type == "gemma2"
    assert set(cfg.layer_types) == {"sliding_attention", "full_attention"}
    assert cfg.sliding_window == 16 < 100
    assert cfg.attn_logit_softcapping and cfg.final_logit_softcapping
    assert cfg.tie_word_embeddings
    assert model.config._attn_implementation == "eager"
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    size = sum(f.stat().st_size for f in CHECKPOINT.iterdir() if f.is_file())
    assert size <= 10 * 2**20


@pytest.mark.parametrize("task", [GSM_TASK, AIME_TASK])
def test_greedy_answers_match_the_model_card(model_and_tokenizer, task: str) -> None:
    model, tokenizer = model_and_tokenizer
    s = spec(task)
    indices = _card_correct_items(task)
    assert len(indices) == ITEMS_PER_TASK[task]
    docs, pool = read_jsonl(s.test_path), read_jsonl(s.fewshot_path)
    prompts = [build_fewshot_prompt(task, docs[i], select_fewshot(pool, s.num_fewshot)) for i in indices]
    outputs = generate(model, tokenizer, prompts, s.max_gen_toks, s.until, batch_size=len(prompts))
    for i, out in zip(indices, outputs):
        text = truncate_at_stop(task, out)
        assert extract_answer(task, text) == gold_answer(task, docs[i]), (i, text)


def test_sliding_window_is_in_effect(model_and_tokenizer) -> None:
    """Same weights with every layer full attention must give different logits on a long prompt."""
    model, tokenizer = model_and_tokenizer
    s = spec(AIME_TASK)
    doc, pool = read_jsonl(s.test_path)[0], read_jsonl(s.fewshot_path)
    ids = tokenizer(build_fewshot_prompt(AIME_TASK, doc, pool[:1]), return_tensors="pt")["input_ids"]
    assert ids.shape[1] > 10 * model.config.sliding_window
    full, _ = load_model(CHECKPOINT, AttentionOverride("full", all_full=True))
    with torch.no_grad():
        swa_logits = model(ids).logits
        full_logits = full(ids).logits
    window = model.config.sliding_window
    assert torch.allclose(swa_logits[:, :window], full_logits[:, :window], atol=1e-5)  # identical inside the window
    assert (swa_logits[:, -1] - full_logits[:, -1]).abs().max() > 1e-2  # and not beyond it
