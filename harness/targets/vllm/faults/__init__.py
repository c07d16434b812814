"""vLLM-side faults: real regressions injected into the installed vLLM's own source (``base``: the record and the
harness's source patcher for it), one module each under ``catalog/``."""

from harness.targets.vllm.faults.base import (
    FAULT_ENV,
    CodeSwap,
    SourceEdit,
    SourcePatchError,
    VLLMFault,
    activate_from_env,
    apply,
    edit_source,
    inject,
    patched_code,
    resolve,
    source_of,
)

__all__ = [
    "FAULT_ENV",
    "CodeSwap",
    "SourceEdit",
    "SourcePatchError",
    "VLLMFault",
    "activate_from_env",
    "apply",
    "edit_source",
    "inject",
    "patched_code",
    "resolve",
    "source_of",
]
