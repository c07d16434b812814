"""SGLang-side faults: real regressions injected into the installed SGLang's own source (``base``: the record and
how it is applied), one module each under ``catalog/``."""

from harness.targets.sglang.faults.base import (
    FAULT_ENV,
    SGLangFault,
    SourceEdit,
    activate_from_env,
    apply,
    apply_patch_file,
    inject,
    resolve,
    source_of,
    write_into_tree,
)

__all__ = [
    "FAULT_ENV",
    "SGLangFault",
    "SourceEdit",
    "activate_from_env",
    "apply",
    "apply_patch_file",
    "inject",
    "resolve",
    "source_of",
    "write_into_tree",
]
