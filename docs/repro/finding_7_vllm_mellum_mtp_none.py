"""vLLM: a Mellum checkpoint whose config says it has no MTP layers does not load (swa-harness docs/FINDINGS.md #7).

vLLM serves ``MellumForCausalLM`` through its transformers backend. While it replaces modules it reads the number of
MTP layers with ``getattr_iter(text_config, ("n_predict", "num_nextn_predict_layers", "mtp_num_hidden_layers"), 0)``
(``vllm/model_executor/models/transformers/base.py``). transformers' Mellum config writes
``"num_nextn_predict_layers": null`` (5.24 does; the checkpoints this harness ships carry it), so the attribute exists
and is None, the default 0 is never used, and ``range(num_hidden_layers, num_hidden_layers + None)`` raises
``TypeError``; a server reports it as ``RuntimeError: Engine core initialization failed``.

The script builds vLLM's model for a tiny random Mellum checkpoint the way vLLM's model loader does (its engine
config, a one-process gloo group, ``initialize_model``, ``load_weights``), without an engine process:

    python finding_7_vllm_mellum_mtp_none.py [CHECKPOINT]

CHECKPOINT defaults to a tiny Mellum checkpoint written into a temporary directory (transformers' ``MellumConfig``
and random weights, ``"num_nextn_predict_layers": null`` as transformers 5.24 writes it). Needs vLLM (a CPU build
works), torch and transformers. Exit status: 1 while the bug is there, 0 when it is fixed, 2 when the script could not
set the scene up.
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2
BUGGY_FILE = "model_executor/models/transformers/base.py"


class SetupProblem(Exception):
    """The scene could not be built on this install: no verdict."""


@dataclass(frozen=True)
class Verdict:
    bug_present: bool
    message: str


def write_checkpoint(folder: Path) -> Path:
    """A two-layer Mellum (one sliding, one full layer; one dense, one mixture-of-experts MLP) with random weights,
    saved by transformers. Mellum's own default is every MLP sparse; the sparse layer also lets the native Mellum model
    of vLLM 0.22-0.31 (which refuses a checkpoint without one) build the scene."""
    import torch

    try:
        from transformers import MellumConfig, MellumForCausalLM
    except ImportError as error:
        raise SetupProblem(f"this transformers has no Mellum model: {error}") from error
    config = MellumConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        layer_types=["sliding_attention", "full_attention"],
        mlp_layer_types=["dense", "sparse"],
        num_local_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        sliding_window=8,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    MellumForCausalLM(config).save_pretrained(folder)
    written = json.loads((folder / "config.json").read_text())
    written.setdefault("num_nextn_predict_layers", None)  # transformers 5.24 writes the key; older ones leave it out
    (folder / "config.json").write_text(json.dumps(written, indent=2) + "\n")
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(checkpoint: Path) -> tuple[str, int]:
    """vLLM's model for ``checkpoint``, built and loaded as its model loader does on CPU: the class vLLM chose (its
    own model or the transformers backend) and its parameter count."""
    import torch

    try:
        from vllm.config import set_current_vllm_config
        from vllm.distributed import (
            destroy_distributed_environment,
            destroy_model_parallel,
            ensure_model_parallel_initialized,
            init_distributed_environment,
        )
        from vllm.engine.arg_utils import EngineArgs
        from vllm.model_executor.model_loader import get_model_loader
        from vllm.model_executor.model_loader.utils import initialize_model
        from vllm.utils.torch_utils import set_default_torch_dtype
    except ImportError as error:
        raise SetupProblem(f"cannot import vLLM's model loader: {error}") from error
    args = EngineArgs(
        model=str(checkpoint),
        dtype="float32",
        max_model_len=128,
        enforce_eager=True,
        skip_tokenizer_init=True,
    )
    config = args.create_engine_config()
    with set_current_vllm_config(config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
            backend="gloo",
        )
        try:
            ensure_model_parallel_initialized(1, 1)
            with set_default_torch_dtype(config.model_config.dtype), torch.device("cpu"):
                model = initialize_model(vllm_config=config, model_config=config.model_config)
            get_model_loader(config.load_config).load_weights(model, config.model_config)
            return type(model).__name__, sum(p.numel() for p in model.parameters())
        finally:
            destroy_model_parallel()
            destroy_distributed_environment()


def _is_this_bug(error: TypeError) -> bool:
    """The TypeError of ``num_hidden_layers + None`` raised in the transformers backend's module replacement."""
    frames = traceback.extract_tb(error.__traceback__)
    return "NoneType" in str(error) and any(f.filename.replace("\\", "/").endswith(BUGGY_FILE) for f in frames)


def reproduce(checkpoint: Path | None = None) -> Verdict:
    with tempfile.TemporaryDirectory(prefix="finding7-") as tmp:
        path = checkpoint or write_checkpoint(Path(tmp))
        said = json.loads((path / "config.json").read_text()).get("num_nextn_predict_layers", "(absent)")
        try:
            model, parameters = load(path)
        except TypeError as error:
            if not _is_this_bug(error):
                raise
            where = traceback.extract_tb(error.__traceback__)[-1]
            return Verdict(
                True,
                f"vLLM cannot load a Mellum checkpoint whose config.json says num_nextn_predict_layers: "
                f"{json.dumps(said)}: TypeError: {error} (at {Path(where.filename).name}:{where.lineno}: "
                f"{where.line})",
            )
    return Verdict(
        False,
        f"vLLM loaded the Mellum checkpoint as {model} (num_nextn_predict_layers: {json.dumps(said)}, {parameters} "
        "parameters)",
    )


def main(argv: list[str]) -> int:
    checkpoint = Path(argv[0]) if argv else None
    try:
        verdict = reproduce(checkpoint)
    except SetupProblem as problem:
        print(f"SETUP PROBLEM (no verdict): {problem}")
        return EXIT_SETUP
    except Exception as error:  # noqa: BLE001 - anything else is no verdict either; show it whole
        traceback.print_exc()
        said = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        print(f"SETUP PROBLEM (no verdict): the scene raised {type(error).__name__}: {said} (traceback above)")
        return EXIT_SETUP
    try:
        import vllm

        release = vllm.__version__
    except Exception:  # noqa: BLE001
        release = "(unknown)"
    print(f"vllm {release}: {'BUG PRESENT' if verdict.bug_present else 'fixed'}: {verdict.message}")
    return EXIT_BUG if verdict.bug_present else EXIT_FIXED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
