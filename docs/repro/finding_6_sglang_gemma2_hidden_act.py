"""SGLang: a Gemma2 checkpoint as transformers 5 writes it does not load (swa-harness docs/FINDINGS.md #6).

SGLang's ``Gemma2DecoderLayer`` passes both ``config.hidden_act`` and ``config.hidden_activation`` to ``Gemma2MLP``
(``sglang/srt/models/gemma2.py``). transformers' ``Gemma2Config`` (5.x) defines only ``hidden_activation``, so the
``config.json`` it writes has no ``hidden_act`` and SGLang's model construction raises
``AttributeError: 'Gemma2Config' object has no attribute 'hidden_act'``. Google's own Gemma 2 configs carry both keys,
which is why it goes unnoticed. vLLM and SGLang's own Gemma 3 loader read only ``hidden_activation``.

The script loads the checkpoint with SGLang's model loader (``sglang.srt.model_loader.get_model``: its
``ModelConfig``, a one-process gloo group), the way a server's model runner does, without a server:

    python finding_6_sglang_gemma2_hidden_act.py [CHECKPOINT]

CHECKPOINT defaults to a tiny random Gemma2 checkpoint that transformers writes into a temporary directory. On a
machine without CUDA it runs SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``); where ``sgl_kernel`` is not installed
(PyPI has no CPU build) an import-only stand-in takes its place, whose every function raises if called. Exit status:
1 while the bug is there, 0 when it is fixed, 2 when the script could not set the scene up.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import inspect
import os
import socket
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass
from pathlib import Path

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2


class SetupProblem(Exception):
    """The scene could not be built on this install: no verdict."""


@dataclass(frozen=True)
class Verdict:
    bug_present: bool
    message: str


class _KernelStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``sgl_kernel`` and its submodules as modules whose every attribute is a function that raises when called:
    SGLang imports it at module level on every device; on a CPU without AMX no function of it runs."""

    ABSENT = frozenset({"sgl_kernel.scalar_type"})  # imported under try/except: SGLang has its own fallback

    def find_spec(self, fullname, path, target=None):
        if (fullname == "sgl_kernel" or fullname.startswith("sgl_kernel.")) and fullname not in self.ABSENT:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        class StandIn(types.ModuleType):
            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)

                def called(*_args, **_kwargs):
                    raise RuntimeError(f"{self.__name__}.{name}: sgl_kernel stand-in of the reproducer script")

                setattr(self, name, called)
                return called

        module = StandIn(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+stand-in"
        return module

    def exec_module(self, module):
        pass


def _stub_torchvision() -> None:
    """SGLang's config modules import torchvision at module level; where it is absent or does not load beside a
    CPU-only torch, stand-ins with the imported names keep the import going (transformers is told first that
    torchvision is unavailable, so it never uses them)."""
    import enum

    try:
        import torchvision  # noqa: F401

        return
    except Exception:  # noqa: BLE001
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()

    def stub(name: str, **attrs: object) -> None:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__path__ = []
        module.__dict__.update(attrs)
        sys.modules[name] = module

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise NotImplementedError("torchvision stand-in of the reproducer script")

    stub("torchvision")
    stub("torchvision.transforms", InterpolationMode=InterpolationMode)
    stub("torchvision.transforms.functional", InterpolationMode=InterpolationMode)
    stub("torchvision.io", decode_jpeg=unavailable)


def _prepare_cpu() -> str:
    """The device to load on; on CPU, SGLang's CPU engine (it must be chosen before SGLang is imported)."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if "sglang" in sys.modules and os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
        raise SetupProblem("SGLang was imported before SGLANG_USE_CPU_ENGINE=1 was set: run the script on its own")
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    try:
        import sgl_kernel  # noqa: F401
    except ImportError:
        sys.meta_path.insert(0, _KernelStandIn())
    _stub_torchvision()
    return "cpu"


def write_checkpoint(folder: Path) -> Path:
    """A two-layer Gemma2 (one sliding, one full layer) with random weights, as transformers writes it."""
    import torch
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        sliding_window=8,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    Gemma2ForCausalLM(config).save_pretrained(folder)
    return folder


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(checkpoint: Path, device: str):
    """SGLang's model for ``checkpoint``, through its model loader in a one-process group."""
    try:
        from sglang.srt.configs.device_config import DeviceConfig
        from sglang.srt.configs.load_config import LoadConfig
        from sglang.srt.configs.model_config import ModelConfig
        from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
        from sglang.srt.model_loader import get_model
        from sglang.srt.server_args import ServerArgs
    except ImportError as error:
        raise SetupProblem(f"cannot import SGLang's model loader: {error}") from error
    server_args = ServerArgs(
        model_path=str(checkpoint),
        device=device,
        dtype="float32",
        attention_backend="torch_native" if device == "cpu" else None,
        skip_tokenizer_init=True,
    )
    try:  # 0.5.23: the process-wide runtime context, with this process's ranks
        from sglang.srt.runtime_context import SpawnRanks, publish

        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0))
        widths = {}
    except ImportError:  # older releases: a module-level global and explicit widths
        from sglang.srt import server_args as server_args_module

        setter = getattr(server_args_module, "set_global_server_args_for_scheduler", None)
        if setter is None:
            raise SetupProblem(
                "this SGLang has neither runtime_context.publish nor set_global_server_args_for_scheduler"
            )
        setter(server_args)
        widths = {"tensor_model_parallel_size": 1}
    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{_free_port()}",
        backend="gloo" if device == "cpu" else "nccl",
    )
    accepted = inspect.signature(initialize_model_parallel).parameters
    initialize_model_parallel(**{k: v for k, v in widths.items() if k in accepted})
    model_config = ModelConfig(str(checkpoint), dtype="float32")
    return get_model(model_config=model_config, load_config=LoadConfig(), device_config=DeviceConfig(device))


def reproduce(checkpoint: Path | None = None) -> Verdict:
    device = _prepare_cpu()
    with tempfile.TemporaryDirectory(prefix="finding6-") as tmp:
        path = checkpoint or write_checkpoint(Path(tmp))
        try:
            model = load(path, device)
        except AttributeError as error:
            if "hidden_act" not in str(error):
                raise
            frames = traceback.extract_tb(error.__traceback__)
            here = next((f for f in reversed(frames) if f.filename.endswith("gemma2.py")), frames[-1])
            return Verdict(
                True,
                f"SGLang cannot load a Gemma2 checkpoint as transformers writes it (no hidden_act in config.json): "
                f"AttributeError: {error} (at {Path(here.filename).name}:{here.lineno}: {here.line})",
            )
    return Verdict(False, f"SGLang loaded the Gemma2 checkpoint: {type(model).__name__}")


def main(argv: list[str]) -> int:
    try:
        verdict = reproduce(Path(argv[0]) if argv else None)
    except SetupProblem as problem:
        print(f"SETUP PROBLEM (no verdict): {problem}")
        return EXIT_SETUP
    except Exception as error:  # noqa: BLE001 - anything else is no verdict either; show it whole
        traceback.print_exc()
        said = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        print(f"SETUP PROBLEM (no verdict): the scene raised {type(error).__name__}: {said} (traceback above)")
        return EXIT_SETUP
    from importlib.metadata import version

    print(f"sglang {version('sglang')}: {'BUG PRESENT' if verdict.bug_present else 'fixed'}: {verdict.message}")
    return EXIT_BUG if verdict.bug_present else EXIT_FIXED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
