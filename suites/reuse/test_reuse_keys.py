"""Every reused result keyed by what produced it: the resume cache (``harness.jobs.cache``) and the history's series
(``harness.evals.history``). For each field of their key tables, changing that input (and only it) misses the cache
or starts a new series; changing what no answer depends on does not."""

from __future__ import annotations

import shutil
from fnmatch import fnmatch
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import pytest

from harness import reuse
from harness.evals.history import HistoryEntry
from harness.evals.results import ServedIdentity
from harness.jobs import cache as cache_module
from harness.jobs import recording as provenance
from harness.jobs.cache import ResumeRefused, response_cache, response_key
from harness.jobs.cpu import EvalConfig, cpu_plan
from harness.jobs.plan import ArmRun, EvalStep, Model
from harness.jobs.plan_file import frozen_task
from harness.paths import DATA_DIR, REPO
from harness.reuse import CHECKPOINT_FILES, CheckpointFile, ResponseKey, file_sha256

SERVED = {"model": "swa-harness", "graph_mode": "tape", "build": {"code": "abc", "weights": "sha256:w"}}


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """A checkpoint folder whose files the key reads (their bytes, not their meaning)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name, text in {
        "model.safetensors": "weights",
        "tokenizer.json": "{}",
        "tokenizer_config.json": '{"chat_template": "{{ messages }}"}',
        "config.json": "{}",
    }.items():
        (folder / name).write_text(text)
    return folder


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the frozen task files and data, read by the key in place of the shipped ones."""
    accuracy, data = tmp_path / "accuracy", tmp_path / "data"
    shutil.copytree(REPO / "suites" / "accuracy", accuracy)
    shutil.copytree(DATA_DIR / "gsm_style", data / "gsm_style")
    monkeypatch.setattr(provenance, "TASKS_DIR", accuracy)
    monkeypatch.setattr(provenance, "DATA_DIR", data)
    return tmp_path


def _run(ckpt: Path, tmp_path: Path) -> tuple[ArmRun, EvalStep]:
    plan = cpu_plan(EvalConfig(model=ckpt, limits={"gsm_style": 4}, out=tmp_path / "out", graphs_on="tape"))
    run = plan.runs[0]
    return run, run.evals[0]


def _identity(**raw: Any) -> ServedIdentity:
    raw = {**SERVED, **raw}
    return ServedIdentity(
        "harness",
        version="abc",
        model="swa-harness",
        weights="sha256:w",
        tokenizer="sha256:t",
        flags={"graphs": raw["graph_mode"]},
        raw=raw,
    )


Change = Callable[[ArmRun, EvalStep, ServedIdentity | None, Path], tuple[ArmRun, EvalStep, ServedIdentity | None]]


def _arm(**fields: Any) -> Change:
    return lambda run, step, ident, ckpt: (replace(run, arm=replace(run.arm, **fields)), step, ident)


def _model(**fields: Any) -> Change:
    return lambda run, step, ident, ckpt: (replace(run, model=replace(run.model, **fields)), step, ident)


def _edit_task_file(relative: str) -> None:
    path = Path(provenance.TASKS_DIR).parent / relative
    # Only the fixture's copy may change: a patch that misses the module the key reads would edit the shipped files.
    assert not path.resolve().is_relative_to(REPO), f"{path} is the checkout's own task file, not the test's copy"
    path.write_text(path.read_text() + "\n# changed\n")


def _task_file(relative: str) -> Change:
    def change(run: ArmRun, step: EvalStep, ident: ServedIdentity | None, ckpt: Path):
        _edit_task_file(relative)
        return run, step, ident

    return change


# One row per field of ResponseKey's table but the checkpoint (one test per file below): an input that changes only
# that field.
MISSES: dict[str, Change] = {
    "engine": _arm(engine="vllm"),
    "flags (arm)": _arm(flags=("--max-running", "8")),
    "flags (model)": _model(server_args=("--page-size", "16")),
    "fault": _arm(fault="pad-swa-loc-not-zeroed"),
    "env": _arm(env={"SGLANG_INVARIANT_CHECK": "2"}),
    "served (graph mode that ran)": lambda run, step, ident, ckpt: (run, step, _identity(graph_mode="eager")),
    "served (build)": lambda run, step, ident, ckpt: (run, step, _identity(build={"code": "abc", "dtype": "bf16"})),
    "url": _arm(url="http://127.0.0.1:9"),
    "tasks (prompt template)": _task_file("accuracy/gsm_style.yaml"),
    "tasks (helpers)": _task_file("accuracy/utils.py"),
    "tasks (data)": _task_file("data/gsm_style/test.jsonl"),
    "items": lambda run, step, ident, ckpt: (run, replace(step, items={"gsm_style": 5}), ident),
    "requests (batch size)": lambda run, step, ident, ckpt: (
        run,
        replace(step, client=replace(step.client, batch_size=7)),
        ident,
    ),
    "requests (concurrency)": lambda run, step, ident, ckpt: (
        run,
        replace(step, client=replace(step.client, concurrency=4)),
        ident,
    ),
    "requests (chat)": _model(chat=True),
    "requests (generation budget)": _model(max_gen_toks={"gsm_style": 64}),
}

# What no answer depends on: the same key.
HITS: dict[str, Change] = {
    "arm name": _arm(name="renamed"),
    "arm purpose": _arm(purpose="another sentence"),
    "client timeout and retries": lambda run, step, ident, ckpt: (
        run,
        replace(step, client=replace(step.client, timeout_s=5, max_retries=9)),
        ident,
    ),
    "output folder": lambda run, step, ident, ckpt: (run, replace(step, out=Path("/elsewhere")), ident),
}


@pytest.mark.parametrize("field", MISSES)
def test_changing_one_field_of_the_resume_key_misses_the_cache(field: str, ckpt: Path, tasks: Path) -> None:
    run, step = _run(ckpt, tasks)
    before = response_key(run, step, _identity())
    changed = response_key(*MISSES[field](run, step, _identity(), ckpt))
    differing = [name for name in before.__dataclass_fields__ if getattr(before, name) != getattr(changed, name)]
    assert before.digest() != changed.digest(), field
    assert len(differing) == 1, (field, differing)  # that field, and only it


@pytest.mark.parametrize("change", HITS)
def test_what_no_answer_depends_on_keeps_the_key(change: str, ckpt: Path, tasks: Path) -> None:
    run, step = _run(ckpt, tasks)
    assert response_key(run, step, _identity()) == response_key(*HITS[change](run, step, _identity(), ckpt))


# -- the checkpoint's files ------------------------------------------------------------------------------------------

# Every file of a checkpoint folder an answer depends on (a shard for sharded weights): each must be a row of the key.
ANSWER_FILES = (
    "model.safetensors",
    "model-00001-of-00002.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
)
# Files a shipped checkpoint folder holds beside them: its card and what was measured on it.
NOT_ANSWERS = ("README.md", "card_notes.md", "eval_results.json", "engine_agreement.json", "sensitivity.json")


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    """A copy of a shipped checkpoint folder: real weights, config and tokenizer, and the files beside them."""
    folder = tmp_path / "gemma2-tiny-swa"
    shutil.copytree(REPO / "fixtures" / "models" / "gemma2-tiny-swa", folder)
    return folder


def _touch(folder: Path, name: str) -> None:
    """Another content for ``name``, created when absent (the key reads bytes, not meaning)."""
    path = folder / name
    path.write_bytes((path.read_bytes() if path.is_file() else b"") + b"\n")


@pytest.mark.parametrize("name", ANSWER_FILES)
def test_changing_one_checkpoint_file_misses_the_cache(name: str, shipped: Path, tasks: Path) -> None:
    """Edited in place, or added where it was absent (a sliding window changed in config.json, a chat template
    dropped in): that file's row of the key changes, and nothing else."""
    run, step = _run(shipped, tasks)
    before = response_key(run, step, _identity())
    _touch(shipped, name)
    after = response_key(run, step, _identity())
    assert before.digest() != after.digest(), f"changing {name} keeps the resume key"
    assert set(after.checkpoint) - set(before.checkpoint) == {(name, file_sha256(shipped / name))}
    assert len(set(before.checkpoint) - set(after.checkpoint)) == 1  # its old row only
    assert replace(after, checkpoint=before.checkpoint) == before  # no other field


@pytest.mark.parametrize("file", CHECKPOINT_FILES, ids=lambda file: file.pattern)
def test_each_checkpoint_row_is_changed_by_a_test_and_shown_in_the_table(file: CheckpointFile) -> None:
    assert [name for name in ANSWER_FILES if fnmatch(name, file.pattern)], f"no test changes {file.pattern}"
    assert file.row() in str(reuse.__doc__), f"{file.pattern} is not a row of the docstring's table"


@pytest.mark.parametrize("name", NOT_ANSWERS)
def test_a_checkpoint_file_no_answer_depends_on_keeps_the_key(name: str, shipped: Path, tasks: Path) -> None:
    run, step = _run(shipped, tasks)
    before = response_key(run, step, _identity())
    _touch(shipped, name)
    assert response_key(run, step, _identity()) == before, f"changing {name} changes the resume key"


def test_a_hub_id_is_keyed_as_given(tmp_path: Path) -> None:
    """No folder to read: the id is what names the checkpoint."""
    assert ResponseKey.checkpoint_of(tmp_path / "absent", "org/a") != ResponseKey.checkpoint_of(tmp_path / "b", "org/b")


def test_the_code_is_in_the_key(ckpt: Path, tasks: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, step = _run(ckpt, tasks)
    before = response_key(run, step, _identity())
    monkeypatch.setattr(cache_module, "code_fingerprint", lambda: "another-commit")
    assert response_key(run, step, _identity()).digest() != before.digest()


def test_a_source_patch_named_in_the_env_is_keyed_by_its_content(ckpt: Path, tasks: Path) -> None:
    """The same variable naming the same file, edited in place, is another run (a candidate fix changed)."""
    patch = tasks / "fix.yaml"
    patch.write_text("patches: []\n")
    run, step = _run(ckpt, tasks)
    run = replace(run, arm=replace(run.arm, env={"SWA_HARNESS_SGLANG_PATCH": str(patch)}))
    before = response_key(run, step, _identity())
    patch.write_text("patches: [{target: x}]\n")
    assert response_key(run, step, _identity()).env != before.env


def test_a_server_that_reports_nothing_is_keyed_by_what_it_was_launched_with(ckpt: Path, tasks: Path) -> None:
    run, step = _run(ckpt, tasks)
    silent = ServedIdentity("sglang", version="unknown", model="swa-harness")
    key = response_key(run, step, silent)
    assert "launched" in key.served and run.arm.graphs in key.served
    other = replace(run, arm=replace(run.arm, graphs="eager"))
    assert response_key(other, step, silent).served != key.served
    assert response_key(run, step, None) == key  # no identity read at all: the same


# Each frozen task's loader, as its YAML names it (``custom_dataset: !function <module>.<loader>``).
LOADERS = {"gsm_style": "utils.py", "aime_style": "utils.py", "choice_style": "choice_utils.py"}


@pytest.mark.parametrize("helper", sorted(set(LOADERS.values())))
def test_an_edit_of_a_tasks_loader_misses_the_key_of_every_task_it_loads_and_no_other(helper: str, tasks: Path) -> None:
    """The loader decides which items a task scores, in which order and with which text: the resume key's ``tasks``
    field (``task_fingerprint``) holds the helper module each task's YAML names, not one helper for all."""
    before = {name: cache_module.task_fingerprint(frozen_task(name)) for name in LOADERS}
    _edit_task_file(f"accuracy/{helper}")
    after = {name: cache_module.task_fingerprint(frozen_task(name)) for name in LOADERS}
    changed = {name for name in LOADERS if after[name] != before[name]}
    assert changed == {name for name, loader in LOADERS.items() if loader == helper}, (helper, changed)


def test_resume_against_an_external_server_is_refused_unless_trusted(ckpt: Path, tasks: Path) -> None:
    run, step = _run(ckpt, tasks)
    external = replace(run, arm=replace(run.arm, url="http://127.0.0.1:9"))
    with pytest.raises(
        ResumeRefused, match=r"--resume: arm on is the external server http://127.0.0.1:9, .*--resume-trusting-url"
    ):
        response_cache(external, step, _identity(), cache_dir=tasks / "cache", resume=True)
    trusted = response_cache(external, step, _identity(), cache_dir=tasks / "cache", resume=True, trust_url=True)
    assert trusted == response_cache(external, step, _identity(), cache_dir=tasks / "cache", resume=False)
    # A launched server is always resumable: what it serves is what it was launched with.
    response_cache(run, step, _identity(), cache_dir=tasks / "cache", resume=True)


def test_the_eval_refuses_to_resume_against_an_url_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harness.jobs.eval_cli import main

    argv = [
        "--on-url",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path),
        "--no-history",
        "--limit-gsm-style",
        "2",
        "--resume",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "cannot start, no verdict: --resume: arm on is the external server http://127.0.0.1:9" in err
    assert not (tmp_path / "plan.json").exists()  # nothing started, nothing written


# -- the history's series -------------------------------------------------------------------------------------------


def _entry(**change: Any) -> HistoryEntry:
    arms = {
        side: {
            "graphs": side,
            "identity": {
                "flags": {"graphs": side, "flags": "--max-total-tokens 65536"},
                "weights": "sha256:w",
                "tokenizer": "sha256:t",
            },
        }
        for side in ("on", "off")
    }
    provenance_ = {
        "run": {
            "id": "r",
            "items": "first 100 per task",
            "lm-eval requests": "32 prompts per request, 1 concurrent per server",
            "decoding": "greedy (temperature 0), lm-eval seed 0",
            "command": "swa-harness eval",
            "recorded at": "2026-03-01T00:00:00+00:00",
        },
        "arms": arms,
        "datasets": {"gsm_style": {"test.jsonl": "aaaa"}},
        "software": {"torch": "2.13.0"},
        "model": {"name": "m", "checkpoint": "fixtures/models/m", "config.json sha256": "cccc"},
    }
    fields: dict[str, Any] = {"model": "m", "fault": None, "engine": "sglang 0.5.23"}
    for path, value in change.items():
        if path in fields:
            fields[path] = value
            continue
        *parents, leaf = path.split(".")
        node = provenance_
        for name in parents:
            node = node[name]
        node[leaf] = value
    return HistoryEntry(
        "r",
        recorded_at="2026-03-01T00:00:00+00:00",
        verdict="GREEN",
        reason="why",
        model=fields["model"],
        fault=fields["fault"],
        engine=fields["engine"],
        tasks=(),
        provenance=provenance_,
    )


SERIES_FIELDS = {
    "model": {"model": "m2"},
    "engine": {"engine": "vllm 0.32.0"},
    "fault": {"fault": "pad-swa-loc-not-zeroed"},
    "N": {"run.items": "first 40 per task"},
    "settings": {"arms.on.identity.flags": {"graphs": "on", "flags": "--max-total-tokens 2048"}},
    "checkpoint (weights)": {"arms.on.identity.weights": "sha256:other"},
    "checkpoint (tokenizer)": {"arms.off.identity.tokenizer": "sha256:other"},
    "data": {"datasets": {"gsm_style": {"test.jsonl": "bbbb"}}},
    "requests": {"run.lm-eval requests": "8 prompts per request, 1 concurrent per server"},
    "decoding": {"run.decoding": "sampled (temperature 0.7)"},
}
SAME_SERIES = {
    "code": {"arms.on.identity.version": "another commit"},
    "engine version": {"engine": "sglang 0.5.24"},
    "date": {"run.recorded at": "2026-04-01T00:00:00+00:00"},
    "software": {"software": {"torch": "2.14.1"}},
}


@pytest.mark.parametrize("field", SERIES_FIELDS)
def test_changing_one_field_of_the_series_key_starts_a_new_series(field: str) -> None:
    assert _entry(**SERIES_FIELDS[field]).series != _entry().series


@pytest.mark.parametrize("change", SAME_SERIES)
def test_what_a_trend_follows_stays_in_its_series(change: str) -> None:
    assert _entry(**SAME_SERIES[change]).series == _entry().series


def test_a_changed_checkpoint_config_starts_a_new_series() -> None:
    """The same weights and tokenizer under another config.json (a window, a softcap) are another model; where the
    checkout keeps the checkpoint is not. Read from the file digests a job records (``model_provenance``)."""
    base = _entry()

    def with_model(**change: str) -> HistoryEntry:
        return replace(base, provenance={**base.provenance, "model": {**base.provenance["model"], **change}})

    assert with_model(**{"config.json sha256": "other"}).series != base.series
    assert with_model(checkpoint="elsewhere/m").series == base.series
    assert "config.json sha256" in provenance.model_provenance(Model(name="fixtures/models/gemma2-tiny-swa"))


def test_the_series_is_read_from_what_a_real_job_records() -> None:
    """The provenance the key reads is the one jobs write (not only the hand-built one above)."""
    from harness.jobs.plan import Plan

    plan: Plan = cpu_plan(EvalConfig(limits={"gsm_style": 2}))
    base = provenance.job_provenance(plan, "swa-harness eval", "cpu")
    assert {"items", "lm-eval requests", "decoding"} <= set(base["run"]) and base["datasets"]["gsm_style"]


def test_the_tokenizer_memo_reloads_a_tokenizer_rewritten_in_place(tmp_path: Path) -> None:
    """The report splits flips into tokens with a memoised tokenizer: keyed by the folder alone, a checkpoint whose
    tokenizer.json was replaced would keep being split with the old one."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    from harness.reuse import memoized_tokenize

    folder = tmp_path / "ckpt"
    folder.mkdir()
    models = REPO / "fixtures" / "models"
    shutil.copy(models / "gemma2-tiny-swa" / "tokenizer.json", folder / "tokenizer.json")
    shutil.copy(models / "gemma2-tiny-swa" / "tokenizer_config.json", folder / "tokenizer_config.json")
    text = "Question: Tom has 12 apples and eats 5. How many are left?"
    before = memoized_tokenize(str(folder))(text)
    whole_words = Tokenizer(WordLevel({"[UNK]": 0, "Question:": 1, "Tom": 2}, unk_token="[UNK]"))
    whole_words.pre_tokenizer = WhitespaceSplit()
    whole_words.save(str(folder / "tokenizer.json"))  # another tokenizer, in place
    after = memoized_tokenize(str(folder))(text)
    assert before != after and after[:2] == ["Question:", "Tom"]
