"""Eval data, prompts, train/test separation and tokenizer of fixtures/data."""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path

import pytest

from fixtures.data import aime_style, gsm_style
from fixtures.data.extract import extract_answer
from fixtures.data.generate import FROZEN_SPLITS, generate_problems, main as generate_main
from fixtures.data.jsonl import read_jsonl
from fixtures.data.overlap import ExclusionSet, find_overlap, normalize_question
from fixtures.data.problem import AIME_TASK, GSM_TASK, TASKS, Problem, check_equations, find_equations, gold_answer
from fixtures.data.prompts import DATA_DIR, build_fewshot_prompt, select_fewshot, spec, truncate_at_stop
from fixtures.data.stream import TrainingStream, fewshot_sequence, sample_sequence

REPO = Path(__file__).resolve().parents[1]
SHIPPED_MODELS = [REPO / "fixtures" / "models" / name for name in ("gemma2-tiny-swa", "gemma3-tiny-swa")]


def _docs(task: str, split: str) -> list[dict[str, str]]:
    return read_jsonl(DATA_DIR / task / f"{split}.jsonl")


# ------------------------------------------------------------------ generators


@pytest.mark.parametrize("task", TASKS)
def test_generators_are_deterministic_per_seed(task: str) -> None:
    first = [p.to_doc() for p in generate_problems(task, seed=123, count=40)]
    again = [p.to_doc() for p in generate_problems(task, seed=123, count=40)]
    other = [p.to_doc() for p in generate_problems(task, seed=124, count=40)]
    assert first == again
    assert first != other


@pytest.mark.parametrize("module", [gsm_style, aime_style])
def test_every_template_is_used_and_self_consistent(module) -> None:
    rng = random.Random(5)
    seen = set()
    for _ in range(600):
        problem = module.generate(rng)
        seen.add(problem.template)
        assert problem.answer == problem.chain_result
    assert seen == set(module.TEMPLATES)


def test_problem_rejects_a_wrong_formula() -> None:
    with pytest.raises(ValueError):
        Problem(GSM_TASK, "t", "q?", ("1 + 1 = 2.",), answer=3, chain_result=2)
    with pytest.raises(ValueError):
        Problem(AIME_TASK, "t", "q?", ("1000 + 500 = 1500.",), answer=1500, chain_result=1500)


def test_equation_checker_catches_errors() -> None:
    good = "a_3 = 3 * 25 + 4 = 75 + 4 = 79.\n1577 mod 1000 = 577.\nS = 9 * (3 + 7) / 2 = 45."
    assert check_equations(good) == []
    assert len(find_equations(good)) == 3
    assert check_equations("Tom buys 5 * 3 = 16 apples.")
    assert check_equations("1577 mod 1000 = 576.")
    assert check_equations("Hour 1: 2 * 15 - 3 = 30 - 3 = 28.")


# ------------------------------------------------------------------ frozen files: format and answers


def test_frozen_counts_and_uniqueness() -> None:
    counts = {(s.task, s.split): s.count for s in FROZEN_SPLITS}
    assert counts == {
        (GSM_TASK, "test"): 500,
        (GSM_TASK, "fewshot"): 20,
        (AIME_TASK, "test"): 200,
        (AIME_TASK, "fewshot"): 20,
    }
    for split in FROZEN_SPLITS:
        docs = read_jsonl(split.path())
        assert len(docs) == split.count
        keys = {normalize_question(d[spec(split.task).question_field]) for d in docs}
        assert len(keys) == split.count, f"duplicate questions in {split.path()}"


def test_gsm_format() -> None:
    for doc in _docs(GSM_TASK, "test") + _docs(GSM_TASK, "fewshot"):
        assert set(doc) == {"question", "answer"}
        *steps, final = doc["answer"].split("\n")
        assert re.fullmatch(r"#### \d+", final), final
        assert 2 <= len(steps) <= 3
        n = int(final[5:])
        assert extract_answer(GSM_TASK, doc["answer"], "strict") == n
        assert extract_answer(GSM_TASK, doc["answer"], "flexible") == n
        # the last worked step arrives at the stated answer
        assert re.search(rf"= {n}\b", steps[-1]), steps[-1]


def test_aime_format() -> None:
    for doc in _docs(AIME_TASK, "test") + _docs(AIME_TASK, "fewshot"):
        assert set(doc) == {"problem", "solution", "answer"}
        match = re.search(r"\\boxed\{(\d+)\}$", doc["solution"])
        assert match, doc["solution"][-40:]
        n = int(match.group(1))
        assert 0 <= n <= 999
        assert doc["answer"] == str(n)
        assert extract_answer(AIME_TASK, doc["solution"]) == n
        steps = doc["solution"].split("\n")[:-1]
        assert 3 <= len(steps) <= 7  # 4-6 dependent operations (some lines hold two) + reduction


@pytest.mark.parametrize("task", TASKS)
def test_every_worked_equation_is_true(task: str) -> None:
    target = spec(task).target_field
    for doc in _docs(task, "test") + _docs(task, "fewshot"):
        assert find_equations(doc[target]), doc[target]
        assert check_equations(doc[target]) == [], doc[target]


def _digit_sum(n: int) -> int:
    return sum(int(c) for c in str(n))


# A third, test-local answer formula per template, recomputed from the structured parameters.
FORMULAS = {
    "packs": lambda p: p["a"] + p["b"] * p["c"],
    "bakery": lambda p: p["a"] - p["b"] - p["c"],
    "wages": lambda p: p["a"] * (p["b"] + p["c"]),
    "share": lambda p: (p["a"] + p["b"]) // p["c"],
    "reading": lambda p: p["c"] - p["a"] * p["b"],
    "collection": lambda p: p["k"] * (p["a"] + p["b"]),
    "savings": lambda p: p["a"] * p["b"] - p["c"],
    "shopping": lambda p: p["a"] * p["b"] + p["c"] * p["d"],
    "garden": lambda p: (p["a"] + p["c"]) * p["b"] - p["d"],
    "bus": lambda p: p["a"] - p["b"] + p["c"] - p["d"],
    "harvest": lambda p: (p["a"] + p["b"] - p["d"]) // p["c"],
    "school": lambda p: (p["a"] * p["b"] - p["c"]) // p["d"],
    "recurrence": lambda p: _iterate(p["s"], p["k"] - 1, lambda x: p["m"] * x + p["c"]) % 1000,
    "operations": lambda p: _apply_ops(p["start"], ast.literal_eval(p["ops"])) % 1000,
    "digits": lambda p: _digit_sum(((p["a"] + p["b"]) * p["c"] - p["d"]) * p["e"]),
    "series": lambda p: (p["n"] * (2 * p["a"] + (p["n"] - 1) * p["d"]) // 2) % 1000,
    "two_numbers": lambda p: (p["k"] * (p["s"] + p["d"]) // 2 + (p["s"] - p["d"]) // 2) % 1000,
    "colony": lambda p: _digit_sum(_iterate(p["start"], p["hours"], lambda x: p["m"] * x - p["c"])),
}


def _iterate(x: int, times: int, f) -> int:
    for _ in range(times):
        x = f(x)
    return x


def _apply_ops(x: int, ops: list[tuple[str, int]]) -> int:
    for op, b in ops:
        x = {"+": x + b, "-": x - b, "*": x * b}[op]
    return x


@pytest.mark.parametrize("task", TASKS)
def test_frozen_answers_recomputed_from_structured_problems(task: str) -> None:
    for split in (s for s in FROZEN_SPLITS if s.task == task):
        taken = ExclusionSet()
        if split.split == "fewshot":
            taken = ExclusionSet.from_docs(task, _docs(task, "test"))
        problems = generate_problems(task, split.seed, split.count, taken)
        docs = read_jsonl(split.path())
        assert [p.to_doc() for p in problems] == docs
        for problem, doc in zip(problems, docs):
            assert FORMULAS[problem.template](problem.params) == problem.answer == gold_answer(task, doc)


# ------------------------------------------------------------------ regeneration


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    assert generate_main(["--out-dir", str(tmp_path)]) == 0
    for split in FROZEN_SPLITS:
        assert split.path(tmp_path).read_bytes() == split.path().read_bytes(), split.path()
    assert generate_main(["--check"]) == 0


def test_check_mode_detects_an_edited_file(tmp_path: Path) -> None:
    generate_main(["--out-dir", str(tmp_path)])
    victim = FROZEN_SPLITS[0].path(tmp_path)
    victim.write_text(victim.read_text().replace("#### ", "#### 1", 1))
    assert generate_main(["--check", "--out-dir", str(tmp_path)]) == 1


# ------------------------------------------------------------------ train/test separation


def test_fewshot_pool_disjoint_from_test() -> None:
    for task in TASKS:
        excluded = ExclusionSet.from_docs(task, _docs(task, "test"))
        assert find_overlap(task, _docs(task, "fewshot"), excluded) == []


def test_overlap_check_catches_a_planted_duplicate() -> None:
    frozen = ExclusionSet.frozen()
    stream = TrainingStream(GSM_TASK, seed=99, exclude=frozen)
    training = [next(stream).to_doc() for _ in range(200)]
    assert find_overlap(GSM_TASK, training, frozen) == []
    planted = dict(_docs(GSM_TASK, "test")[17])
    planted["question"] = "  " + planted["question"].upper().replace(" ", "   ") + "\n"  # cosmetic changes only
    training.insert(100, planted)
    assert find_overlap(GSM_TASK, training, frozen) == [planted["question"]]
    aime_plant = _docs(AIME_TASK, "fewshot")[3]
    assert find_overlap(AIME_TASK, [aime_plant], frozen) == [aime_plant["problem"]]


@pytest.mark.parametrize("task", TASKS)
def test_training_stream_sample_excludes_frozen_items(task: str) -> None:
    frozen = ExclusionSet.frozen()
    stream = TrainingStream(task, seed=1 * 1000 + TASKS.index(task), exclude=frozen)  # the shipped run's stream
    sample = [next(stream).to_doc() for _ in range(3000)]
    assert find_overlap(task, sample, frozen) == []


def test_training_stream_drops_what_the_generator_repeats() -> None:
    """Exclude the first problems a seed produces: the stream must skip exactly those."""
    raw = generate_problems(AIME_TASK, seed=0, count=5)
    rng_stream = TrainingStream(AIME_TASK, seed=0, exclude=ExclusionSet.from_docs(AIME_TASK, [p.to_doc() for p in raw]))
    got = [next(rng_stream) for _ in range(5)]
    assert rng_stream.skipped >= 5
    assert not {p.question for p in got} & {p.question for p in raw}


# ------------------------------------------------------------------ prompts and extraction


def test_prompt_format_matches_the_spec() -> None:
    gsm, pool = _docs(GSM_TASK, "test")[0], _docs(GSM_TASK, "fewshot")
    prompt = build_fewshot_prompt(GSM_TASK, gsm, select_fewshot(pool, 2))
    expected = (
        f"Question: {pool[0]['question']}\nAnswer: {pool[0]['answer']}\n\n"
        f"Question: {pool[1]['question']}\nAnswer: {pool[1]['answer']}\n\n"
        f"Question: {gsm['question']}\nAnswer:"
    )
    assert prompt == expected
    aime, apool = _docs(AIME_TASK, "test")[0], _docs(AIME_TASK, "fewshot")
    assert build_fewshot_prompt(AIME_TASK, aime, select_fewshot(apool, 1)) == (
        f"Problem: {apool[0]['problem']}\nSolution: {apool[0]['solution']}\n\nProblem: {aime['problem']}\nSolution:"
    )
    assert build_fewshot_prompt(AIME_TASK, aime, []) == f"Problem: {aime['problem']}\nSolution:"
    assert select_fewshot(pool, 2, index=3, rotate=True) == [pool[6], pool[7]]


def test_training_sequences_use_the_eval_format() -> None:
    docs = _docs(GSM_TASK, "fewshot")
    seq = fewshot_sequence(GSM_TASK, docs[2], docs[:2])
    assert seq.text == build_fewshot_prompt(GSM_TASK, docs[2], docs[:2]) + " " + docs[2]["answer"] + "\n\n"
    spans = seq.loss_spans()
    graded = "".join(seq.text[a:b] for a, b, _ in spans)
    assert docs[2]["answer"] in graded
    # question bodies are graded on their words only: their digits are random
    assert [seq.text[a:b] for a, b, digits in spans if not digits] == [d["question"] for d in docs[:3]]
    stream = TrainingStream(AIME_TASK, seed=3, exclude=ExclusionSet())
    sampled = sample_sequence(stream, random.Random(0), max_shots=1)
    assert sampled.text.endswith("\n\n") and sampled.text.startswith("Problem: ")


def test_extraction_mirrors_lm_eval_filters() -> None:
    assert extract_answer(GSM_TASK, "x = 3.\n#### 1,234") == 1234
    assert extract_answer(GSM_TASK, "so 12 + 30 = 42 apples") is None
    assert extract_answer(GSM_TASK, "so 12 + 30 = 42 apples", "flexible") == 42
    assert extract_answer(GSM_TASK, "#### 7\n#### 8") == 7  # strict takes the first match
    assert extract_answer(AIME_TASK, "The answer is \\boxed{77}") == 77
    assert extract_answer(AIME_TASK, "about 77") is None
    assert extract_answer(AIME_TASK, "about 77", "flexible") == 77
    assert truncate_at_stop(GSM_TASK, "A.\n#### 5\n\nQuestion: next") == "A.\n#### 5"
    assert truncate_at_stop(AIME_TASK, "\\boxed{5}Problem: x") == "\\boxed{5}"


def test_lm_eval_builds_the_same_prompts() -> None:
    """lm-eval's own ConfigurableTask, fed our YAMLs, must send exactly build_fewshot_prompt's text."""
    pytest.importorskip("lm_eval")
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    for task in TASKS:
        config = load_yaml(REPO / "suites" / "accuracy" / f"{task}.yaml")
        lm_task = ConfigurableTask(config=config)
        s = spec(task)
        pool = _docs(task, "fewshot")
        assert config["num_fewshot"] == s.num_fewshot
        assert tuple(config["generation_kwargs"]["until"]) == s.until
        assert config["generation_kwargs"]["max_gen_toks"] == s.max_gen_toks
        for i, doc in enumerate(list(lm_task.test_docs())[:5]):
            context = lm_task.fewshot_context(doc, num_fewshot=s.num_fewshot)
            assert context == build_fewshot_prompt(task, doc, select_fewshot(pool, s.num_fewshot)), (task, i)


# ------------------------------------------------------------------ tokenizer


@pytest.fixture(scope="module")
def built_tokenizer():
    from fixtures.data.tokenizer import build_default_tokenizer

    return build_default_tokenizer()


def _all_texts() -> list[str]:
    texts = []
    for task in TASKS:
        pool = _docs(task, "fewshot")
        for i, doc in enumerate(_docs(task, "test") + pool):
            texts.append(
                build_fewshot_prompt(task, doc, select_fewshot(pool, spec(task).num_fewshot, i, rotate=True))
                + " "
                + spec(task).doc_to_target(doc)
                + "\n\n"
            )
    return texts


def test_tokenizer_is_lossless_and_splits_digits(built_tokenizer) -> None:
    from fixtures.data.tokenizer import BOS, EOS, PAD

    tok = built_tokenizer
    assert [tok.token_to_id(t) for t in (PAD, BOS, EOS)] == [0, 1, 2]
    texts = _all_texts() + ["Unicode ✓ café, tabs\tand  double  spaces\r\n", ""]
    for text in texts:
        enc = tok.encode(text)
        assert enc.ids[0] == tok.token_to_id(BOS)
        assert tok.decode(enc.ids) == text
    enc = tok.encode("total 90817 apples\n\n")
    digits = [t for t in enc.tokens if any(c.isdigit() for c in t)]
    assert digits == ["9", "0", "8", "1", "7"]
    assert enc.tokens[-2:] == ["Ċ", "Ċ"]  # "\n\n" = two newline tokens, also at the end of text


@pytest.mark.parametrize("model_dir", SHIPPED_MODELS, ids=lambda p: p.name)
def test_shipped_tokenizer_loads_offline_and_agrees_with_transformers(built_tokenizer, monkeypatch, model_dir) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(model_dir))
    assert raw.to_str() == built_tokenizer.to_str()  # the recipe rebuilds the shipped tokenizer exactly
    assert (hf.pad_token_id, hf.bos_token_id, hf.eos_token_id) == (0, 1, 2)
    texts = _all_texts()[::7]
    batch = hf(texts)["input_ids"]
    for text, hf_ids in zip(texts, batch):
        assert hf_ids == raw.encode(text).ids
        assert hf.decode(hf_ids, skip_special_tokens=True) == text
