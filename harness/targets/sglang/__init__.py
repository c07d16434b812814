"""The ``sglang`` target: real SGLang's memory code (its ``SWAKVPool`` and
``SWATokenToKVPoolAllocator``) under the harness's engine, scheduler and graph runner, on CPU.

    pytest suites --target sglang          # or SWA_HARNESS_TARGET=sglang; `nox -s sglang` installs it

``SWA_HARNESS_SGLANG_PATCH=<file.yaml>`` applies a source patch to SGLang first, with SGLang's own
``debug_utils.source_patcher`` (rewrite a function's source, swap its ``__code__``): the way to ask
"would the suites catch this change?" without a checkout.
"""

from harness.env import SGLANG_PATCH_ENV as PATCH_ENV
from harness.targets.sglang.imports import SGLANG_VERSION, SGLangUnavailable
from harness.targets.sglang.memory import SGLangTarget

__all__ = ["PATCH_ENV", "SGLANG_VERSION", "SGLangTarget", "SGLangUnavailable"]
